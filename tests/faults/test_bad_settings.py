"""User story: a job sets an OTel SDK batching variable to a value the SDK rejects.

The README promises that a bad value in the environment is logged and a default used; the
library must not stop delivering (or stop counting) because of one.
"""

from __future__ import annotations

import pytest

import otel_valgen as vg
from tests.conftest import OtlpHttpReceiver


@pytest.mark.timeout(30)
def test_sdk_batch_variable_the_sdk_rejects_falls_back_and_still_delivers(
    otlp_http: OtlpHttpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OTEL_BLRP_MAX_QUEUE_SIZE=100 (< batch size 512): records are still delivered, with a warning."""
    monkeypatch.setenv("OTEL_BLRP_MAX_QUEUE_SIZE", "100")
    vg.configure(run_id="faults-blrp", count=4, endpoint=otlp_http.endpoint, flush_timeout_s=5)
    with vg.validation(step=1, source="trainer"):
        vg.log_generations([f"p{i}" for i in range(10)], ["o"] * 10)
    stats = vg.stats()
    assert stats["generations_seen"] == 10, stats
    assert stats["records_exported"] == 5, stats  # k = 4 presampled + the end record
