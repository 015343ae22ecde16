"""User story: the disk under the collector's file output is full (or the file unwritable).

``VALGEN_FILE_PATH`` is a symlink to ``/dev/full``, whose every write fails with ENOSPC, as a
full disk does. The wandb and Loki exporters must keep delivering every step; the file
exporter's failure must be visible in the collector's log and its own Prometheus metrics,
and the collector must stay healthy.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import otel_valgen as vg
from tests.e2e.harness import StandIn, wait_for
from tests.e2e.steps import by_step
from tests.faults.conftest import Collectors, metric_sum

K = 4
STEPS = (1, 2, 3)


@pytest.mark.timeout(60)
def test_full_disk_at_the_file_output_leaves_wandb_and_loki_working_and_is_visible(
    collectors: Collectors, wandb_stand_in: StandIn, loki_stand_in: StandIn, tmp_path: Path
) -> None:
    """Every step reaches wandb and Loki; the file exporter's ENOSPC is logged and counted as send_failed."""
    if not Path("/dev/full").exists():
        pytest.skip("/dev/full is absent on this system")
    full = tmp_path / "full-disk"
    full.mkdir()
    (full / "valgen.jsonl").symlink_to("/dev/full")
    collector = collectors.start(
        "c",
        {
            "VALGEN_TRACKER_EXPORTER_ENDPOINT": wandb_stand_in.endpoint,
            "VALGEN_LOKI_OTLP_ENDPOINT": loki_stand_in.endpoint,
            "VALGEN_FILE_PATH": str(full / "valgen.jsonl"),
            "VALGEN_COUNT": str(K),
        },
    )
    vg.configure(run_id="faults-full", count=K, endpoint=f"http://{collector.http_endpoint}")
    for step in STEPS:
        with vg.validation(step=step, source="trainer", sources_expected=1) as block:
            vg.log_generations([f"p{step}-{i}" for i in range(10)], ["x" * 4000] * 10, [0.5] * 10)
        assert block.flushed  # the collector accepted everything: the failure is downstream only

    for name, stand_in in {"wandb": wandb_stand_in, "loki": loki_stand_in}.items():
        wait_for(lambda s=stand_in: set(STEPS) <= set(by_step(s.records())[1]), 30, f"{name}: every step")
        kept, summaries = by_step(stand_in.records())
        assert all(len(kept[step]) == K and len(summaries[step]) == 1 for step in STEPS), name

    expected_failed = len(STEPS) * (K + 1)  # kept records and a summary per step
    wait_for(
        lambda: (
            metric_sum(collector.metrics(), "otelcol_exporter_send_failed_log_records", exporter="file")
            >= expected_failed
        ),
        20,
        "the file exporter's failures in its metrics",
    )
    values = collector.metrics()
    assert metric_sum(values, "otelcol_exporter_sent_log_records", exporter="file") == 0
    assert metric_sum(values, "otelcol_exporter_send_failed_log_records", exporter="otlp_grpc/trackers") == 0
    assert metric_sum(values, "otelcol_exporter_send_failed_log_records", exporter="otlp_http/loki") == 0
    log = collector.log_path.read_text(encoding="utf-8")
    assert "no space left on device" in log
    assert collector.healthy()
