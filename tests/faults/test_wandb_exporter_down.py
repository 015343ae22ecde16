"""User story: the exporter service is down for a while; the collector keeps running.

The collector's persistent sending queue holds the sampled steps; when the real
``otel-valgen exporter`` (offline wandb) comes up, every step's table arrives once.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import otel_valgen as vg
from otel_valgen.sampling import SortKey, bottom_k, sample_key, untagged
from tests.e2e.harness import StandIn, free_port, wait_for
from tests.e2e.steps import by_step
from tests.exporter.wandb_files import read_run
from tests.faults.conftest import Collectors, file_records
from tests.faults.exporter import start_exporter

RUN_ID = "faults-wandb-down"
K = 3
SEED = 42
STEPS = (10, 20)


def _ids(source: str, step: int) -> list[str]:
    return [f"{source}-{step}-{i}" for i in range(5)]


@pytest.mark.timeout(150)
def test_tables_arrive_once_each_after_the_wandb_exporter_returns(
    collectors: Collectors, loki_stand_in: StandIn, tmp_path: Path
) -> None:
    """Steps sampled while the exporter was down reach the offline run after it starts: k rows per step, once."""
    exporter_endpoint = f"127.0.0.1:{free_port()}"
    collector = collectors.start(
        "c",
        {
            "VALGEN_TRACKER_EXPORTER_ENDPOINT": exporter_endpoint,
            "VALGEN_LOKI_OTLP_ENDPOINT": loki_stand_in.endpoint,
            "VALGEN_DECISION_WAIT": "30s",
            "VALGEN_COUNT": str(K),
        },
    )
    vg.configure(run_id=RUN_ID, count=K, seed=SEED, endpoint=f"http://{collector.http_endpoint}")
    for step in STEPS:
        for source in ("trainer", "rollouter"):
            with vg.validation(step=step, source=source, sources_expected=2):
                ids = _ids(source, step)
                vg.log_generations(ids, [f"answer {i}" for i in ids], [0.25] * len(ids), sample_ids=ids)
    wait_for(lambda: set(STEPS) <= set(by_step(file_records(collector.file_path))[1]), 20, "steps sampled")
    # The collector's export to the absent service has failed (logged) and is queued for retry.
    wait_for(
        lambda: "otlp_grpc/trackers" in collector.log_path.read_text(encoding="utf-8"),
        20,
        "the collector to log its failed export to the absent wandb exporter",
    )

    wandb_dir = tmp_path / "wandb-dir"
    wandb_dir.mkdir()
    state = tmp_path / "exporter-state"
    exporter = start_exporter(exporter_endpoint, state, wandb_dir, tmp_path / "exporter.log", {})
    try:
        wait_for(lambda: sorted(exporter.written_steps(RUN_ID)) == list(STEPS), 90, "both steps written")
        assert exporter.stop() == 0, exporter.log_path.read_text(encoding="utf-8")
    finally:
        exporter.kill()

    assert sorted(exporter.written_steps(RUN_ID)) == list(STEPS)  # each step written once
    tables = read_run(wandb_dir, RUN_ID).tables("val/generations")
    assert [step for step, _ in tables] == list(STEPS), tables
    for step, table in tables:
        sample_ids = [untagged(row[table["columns"].index("sample_id")]) for row in table["data"]]
        everything = [f"{i}/0" for source in ("trainer", "rollouter") for i in _ids(source, step)]
        want = [i for _, i in bottom_k(((SortKey.of(sample_key(SEED, i), i), i) for i in everything), K)]
        assert sorted(sample_ids) == sorted(want), (step, sample_ids)
