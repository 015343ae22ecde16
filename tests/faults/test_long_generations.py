"""User story: a job validates long reasoning outputs (tens of KB each) without presampling.

The OTel SDK batches up to 512 records per OTLP/HTTP request and allows requests up to
64 MiB; the collector's OTLP/HTTP receiver accepts bodies up to its default 20 MiB (only the
gRPC limit, 64 MiB, is set in collector.yaml). A batch of long generations falls between the
two.
"""

from __future__ import annotations

import pytest

import otel_valgen as vg
from tests.e2e.harness import StandIn
from tests.faults.conftest import Collectors

GENERATIONS = 400
OUTPUT_BYTES = 60_000  # under max_field_bytes (65,536): sent whole; 400 of them are about 23 MiB


@pytest.mark.timeout(60)
def test_a_batch_of_long_generations_reaches_the_collector_over_http(
    collectors: Collectors, wandb_stand_in: StandIn, loki_stand_in: StandIn
) -> None:
    """400 generations of 60 KB each, presampling off: the collector accepts them (none spooled)."""
    collector = collectors.start(
        "c",
        {
            "VALGEN_TRACKER_EXPORTER_ENDPOINT": wandb_stand_in.endpoint,
            "VALGEN_LOKI_OTLP_ENDPOINT": loki_stand_in.endpoint,
        },
    )
    vg.configure(run_id="faults-long", count=8, endpoint=f"http://{collector.http_endpoint}", presample=False)
    with vg.validation(step=1, source="trainer", sources_expected=1):
        vg.log_generations([f"p{i}" for i in range(GENERATIONS)], ["r" * OUTPUT_BYTES] * GENERATIONS)
    assert vg.flush(20) is True
    stats = vg.stats()
    assert stats["records_spooled"] == 0, stats
    assert stats["records_export_failed"] == 0, stats
    # Every record handed to the SDK was accepted: the start record, the generations, the end
    # record, and a progress record for each progress interval the block was open.
    assert (stats["start_records_emitted"], stats["generations_emitted"], stats["end_records_emitted"]) == (
        1,
        GENERATIONS,
        1,
    )
    handed = 1 + GENERATIONS + 1 + stats.get("progress_records_emitted", 0)
    assert stats["records_exported"] == handed, stats
    assert stats["records_unconfirmed"] == 0, stats
