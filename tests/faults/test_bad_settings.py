"""User story: a job sets an OTel SDK batching variable to a value the SDK rejects.

The README promises that a bad value in the environment is logged and a default used; the
library must not stop delivering (or stop counting) because of one.
"""

from __future__ import annotations

import logging

import pytest

import otel_valgen as vg
from tests.conftest import OtlpHttpReceiver


@pytest.mark.timeout(30)
def test_sdk_batch_variable_the_sdk_rejects_falls_back_and_still_delivers(
    otlp_http: OtlpHttpReceiver, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """OTEL_BLRP_MAX_QUEUE_SIZE=100 (< batch size 512): records are still delivered, with a warning."""
    monkeypatch.setenv("OTEL_BLRP_MAX_QUEUE_SIZE", "100")
    with caplog.at_level(logging.WARNING, logger="otel_valgen"):
        vg.configure(run_id="faults-blrp", count=4, endpoint=otlp_http.endpoint, flush_timeout_s=5)
        with vg.validation(step=1, source="trainer") as block:
            vg.log_generations([f"p{i}" for i in range(10)], ["o"] * 10)
    assert "OTEL_BLRP_MAX_EXPORT_BATCH_SIZE 512 > queue size 100" in caplog.text
    assert block.flushed is True
    stats = vg.stats()
    assert stats["generations_seen"] == 10, stats
    # The block's start record, k = 4 presampled generations, its end record, and a progress
    # record for each progress interval the block was open (none unless the machine stalls).
    assert (stats["start_records_emitted"], stats["generations_emitted"], stats["end_records_emitted"]) == (1, 4, 1)
    handed = 1 + 4 + 1 + stats.get("progress_records_emitted", 0)
    assert stats["records_exported"] == handed, stats
    assert stats["records_unconfirmed"] == 0, stats
