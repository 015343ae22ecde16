"""User story: a job's validation steps, emitted by several sources, reach every destination sampled."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import StartCollector
from tests.e2e.harness import StandIn, records_of_file, wait_for
from tests.e2e.steps import assert_destination, by_step, emit_steps

# Two sources per step; the last step has fewer generations than k.
PLAN = {
    10: {"trainer": 12, "rollouter": 9},
    20: {"trainer": 30, "rollouter": 1},
    30: {"trainer": 2, "rollouter": 1},
}


@pytest.mark.parametrize("presample", [False, True], ids=["all-records", "sdk-presampled"])
def test_each_destination_gets_the_bottom_k_of_every_step(
    presample: bool, start_collector: StartCollector, wandb_stand_in: StandIn, loki_stand_in: StandIn
) -> None:
    """Each of wandb, Loki and the file gets min(k, M) records per step, the bottom-k, then a summary."""
    collector = start_collector(
        "collector",
        ["collector.yaml"],
        {
            "VALGEN_WANDB_EXPORTER_ENDPOINT": wandb_stand_in.endpoint,
            "VALGEN_LOKI_OTLP_ENDPOINT": loki_stand_in.endpoint,
            "VALGEN_DECISION_WAIT": "60s",  # steps must close as complete, not by waiting
        },
    )
    expected = emit_steps(f"http://{collector.http_endpoint}", presample, PLAN)

    destinations = {
        "wandb": wandb_stand_in.records,
        "loki": loki_stand_in.records,
        "file": lambda: records_of_file(collector.file_path),
    }
    for name, records in destinations.items():
        wait_for(lambda records=records: len(by_step(records())[1]) == len(PLAN), 30, f"{name} summaries")
    for name, records in destinations.items():
        assert_destination(name, records(), expected, PLAN)
    assert loki_stand_in.wrong_paths == []


def test_shutdown_flushes_open_steps_and_a_restart_delivers_them(
    start_collector: StartCollector, wandb_stand_in: StandIn, loki_stand_in: StandIn
) -> None:
    """A step that cannot complete is flushed, sampled, at shutdown; the persisted queues deliver it after restart."""
    env = {
        "VALGEN_WANDB_EXPORTER_ENDPOINT": wandb_stand_in.endpoint,
        "VALGEN_LOKI_OTLP_ENDPOINT": loki_stand_in.endpoint,
        "VALGEN_DECISION_WAIT": "10m",
    }
    collector = start_collector("collector", ["collector.yaml"], env)
    # Only one of the two expected sources ever ends: the step stays open until shutdown.
    expected = emit_steps(f"http://{collector.http_endpoint}", False, {7: {"trainer": 11}}, sources_expected=2)
    assert records_of_file(collector.file_path) == [], "the step closed before shutdown"
    assert collector.stop() == 0

    # The file exporter writes at once; the queued exports to wandb and Loki are persisted.
    kept, summaries = by_step(records_of_file(collector.file_path))
    ranked = sorted(kept[7], key=lambda r: r.attributes["valgen.rank"])
    assert [r.attributes["valgen.sample_id"] for r in ranked] == expected[7]
    summary = summaries[7][0].attributes
    assert summary["valgen.closed_reason"] == "shutdown"
    assert summary["valgen.seen"] == 11
    assert summary["valgen.kept"] == 5
    assert summary["valgen.sources_expected"] == 2

    start_collector("collector", ["collector.yaml"], env)
    for name, stand_in in {"wandb": wandb_stand_in, "loki": loki_stand_in}.items():
        wait_for(lambda s=stand_in: 7 in by_step(s.records())[1], 30, f"{name} after restart")
        kept_there, summaries_there = by_step(stand_in.records())
        assert sorted(r.attributes["valgen.sample_id"] for r in kept_there[7]) == sorted(expected[7])
        assert len(summaries_there[7]) == 1
