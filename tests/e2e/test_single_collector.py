"""User story: a job's validation steps, emitted by several sources, reach every destination sampled."""

from __future__ import annotations

import pytest

from otel_valgen.sampling import SortKey, bottom_k, sample_key, untagged
from tests.e2e import harness
from tests.e2e.conftest import StartCollector
from tests.e2e.harness import StandIn, records_of_file, wait_for
from tests.e2e.steps import SEED, K, assert_destination, by_step, emit_steps

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
            "VALGEN_TRACKER_EXPORTER_ENDPOINT": wandb_stand_in.endpoint,
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


def test_shutdown_stores_open_steps_and_a_restart_completes_them_once(
    start_collector: StartCollector, wandb_stand_in: StandIn, loki_stand_in: StandIn
) -> None:
    """A step open at shutdown is stored (file_storage), not flushed; after a restart it completes, once."""
    env = {
        "VALGEN_TRACKER_EXPORTER_ENDPOINT": wandb_stand_in.endpoint,
        "VALGEN_LOKI_OTLP_ENDPOINT": loki_stand_in.endpoint,
        "VALGEN_DECISION_WAIT": "10m",
    }
    collector = start_collector("collector", ["collector.yaml"], env)
    # One of the two expected sources ends before the shutdown, the other after the restart.
    emit_steps(f"http://{collector.http_endpoint}", False, {7: {"trainer": 11}}, sources_expected=2)
    assert records_of_file(collector.file_path) == [], "the step closed before shutdown"
    assert collector.stop() == 0
    assert records_of_file(collector.file_path) == [], "shutdown flushed the open step instead of storing it"

    collector = start_collector("collector", ["collector.yaml"], env)  # same state directory
    emit_steps(f"http://{collector.http_endpoint}", False, {7: {"rollouter": 4}}, sources_expected=2)
    step_ids = [f"trainer-prompt-{i:03d}/0" for i in range(11)] + [f"rollouter-prompt-{i:03d}/0" for i in range(4)]
    want = [i for _, i in bottom_k(((SortKey.of(sample_key(SEED, i), i), i) for i in step_ids), K)]
    destinations = {
        "wandb": wandb_stand_in.records,
        "loki": loki_stand_in.records,
        "file": lambda: records_of_file(collector.file_path),
    }
    for name, records in destinations.items():
        wait_for(lambda r=records: 7 in by_step(r())[1], 30, f"{name}: step 7 after the restart")
    for name, records in destinations.items():
        kept, summaries = by_step(records())
        ranked = sorted(kept[7], key=lambda r: r.attributes["valgen.rank"])
        assert [untagged(r.attributes["valgen.sample_id"]) for r in ranked] == want, name
        assert len(summaries[7]) == 1, f"{name}: {len(summaries[7])} summaries"
        summary = summaries[7][0].attributes
        assert summary["valgen.closed_reason"] == "complete", name
        assert summary["valgen.seen"] == 15, name
        assert summary["valgen.kept"] == K, name
        assert summary["valgen.sources"] == 2, name
        assert summary["valgen.sources_expected"] == 2, name


def test_the_deprecated_exporter_variable_still_routes_the_steps(
    start_collector: StartCollector,
    wandb_stand_in: StandIn,
    loki_stand_in: StandIn,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only VALGEN_WANDB_EXPORTER_ENDPOINT set: collector.yaml falls back to it; set as well, the new name wins."""
    monkeypatch.delenv("VALGEN_TRACKER_EXPORTER_ENDPOINT", raising=False)
    monkeypatch.delenv("VALGEN_WANDB_EXPORTER_ENDPOINT", raising=False)
    plan = {3: {"trainer": 5}}
    old_only = {
        "VALGEN_WANDB_EXPORTER_ENDPOINT": wandb_stand_in.endpoint,
        "VALGEN_LOKI_OTLP_ENDPOINT": loki_stand_in.endpoint,
        "VALGEN_DECISION_WAIT": "60s",
    }
    collector = start_collector("old-name", ["collector.yaml"], old_only)
    expected = emit_steps(f"http://{collector.http_endpoint}", False, plan)
    wait_for(lambda: 3 in by_step(wandb_stand_in.records())[1], 30, "step 3 at the deprecated variable's endpoint")
    assert_destination("exporter service", wandb_stand_in.records(), expected, plan)
    assert collector.stop() == 0

    with harness.wandb_stand_in() as current:
        both = {**old_only, "VALGEN_TRACKER_EXPORTER_ENDPOINT": current.endpoint}
        collector = start_collector("both-names", ["collector.yaml"], both)
        plan = {4: {"trainer": 5}}
        expected = emit_steps(f"http://{collector.http_endpoint}", False, plan)
        wait_for(lambda: 4 in by_step(current.records())[1], 30, "step 4 at VALGEN_TRACKER_EXPORTER_ENDPOINT")
        assert_destination("exporter service", current.records(), expected, plan)
        assert 4 not in by_step(wandb_stand_in.records())[1], "the deprecated variable won over the new one"
