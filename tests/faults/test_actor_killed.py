"""User story: an emitting Ray actor is killed in the middle of validation, before its end_step.

On a real local Ray cluster three actors validate parts of a step (``sources_expected=3``)
and send to the built collector; one is ``ray.kill``-ed before its part ends. The other two
keep their parts; ``sources_expected`` is a promise, so the step waits for the third until
``max_step_duration``, then closes with what arrived, and its ``valgen.step.summary`` names
the dead source as missing (it announced itself with its start record).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

import otel_valgen as vg
from otel_valgen import contract
from otel_valgen import ray as vg_ray
from otel_valgen.sampling import SortKey, bottom_k, sample_key, untagged
from tests.e2e.harness import StandIn, wait_for
from tests.e2e.steps import by_step
from tests.faults.conftest import Collectors, RunningCollector, file_records, metric_sum
from tests.support.require import require_module

ray = require_module("ray")

pytestmark = pytest.mark.ray

RUN_ID = "faults-actor"
K = 4
SEED = 42
PER_ACTOR = 10
MAX_STEP = "8s"  # max_step_duration, scaled down: closes a step whose promised source died


@ray.remote(num_cpus=0)
class Validator:
    """An actor validating its share of a step."""

    def ready(self) -> bool:
        """Answer once the worker process runs (its start-up is not part of any step)."""
        return True

    def part(self, step: int, source: str, ids: list[str], sources_expected: int = 3) -> bool:
        """Validate a whole part: log, then end it (flushes); True when confirmed sent."""
        with vg.validation(step=step, source=source, sources_expected=sources_expected) as block:
            vg.log_generations([f"q {i}" for i in ids], [f"a {i}" for i in ids], [0.5] * len(ids), sample_ids=ids)
        return bool(block.flushed)

    def part_then_exit(self, step: int, source: str, ids: list[str]) -> None:
        """Validate a part, then end the worker process at once (no atexit, no Ray cleanup)."""
        self.part(step, source, ids, sources_expected=2)
        os._exit(0)

    def begin(self, step: int, source: str, ids: list[str], presample: bool) -> int:
        """Open a part and log generations, but never end it (the actor is killed next)."""
        vg.configure(presample=presample)  # run id, endpoint, k come from the driver's runtime env
        self.block = vg.validation(step=step, source=source, sources_expected=3).__enter__()
        accepted = vg.log_generations(
            [f"q {i}" for i in ids], [f"a {i}" for i in ids], [0.5] * len(ids), sample_ids=ids
        )
        # Let the SDK's batch processor send what it holds: the start record and, without
        # presampling, the generations (a source that worked a while before it died).
        vg.flush(5)
        return int(accepted)


@pytest.fixture
def cluster(
    collectors: Collectors, wandb_stand_in: StandIn, loki_stand_in: StandIn, monkeypatch: pytest.MonkeyPatch
) -> Iterator[RunningCollector]:
    """The built collector and a local Ray cluster whose workers send to it."""
    # Workers that exit right after their step ended rely on its confirmed flush; on a loaded
    # machine the collector can take more than the default 2 s to answer (then the part would
    # wait in a spool for the run's next process). Forwarded to the workers by runtime_env().
    monkeypatch.setenv("OTEL_VALGEN_FLUSH_TIMEOUT", "10")
    collector = collectors.start(
        "c",
        {
            "VALGEN_TRACKER_EXPORTER_ENDPOINT": wandb_stand_in.endpoint,
            "VALGEN_LOKI_OTLP_ENDPOINT": loki_stand_in.endpoint,
            "VALGEN_DECISION_WAIT": "2s",
            "VALGEN_MAX_STEP_DURATION": MAX_STEP,
        },
    )
    vg.configure(run_id=RUN_ID, count=K, seed=SEED, endpoint=f"http://{collector.http_endpoint}", source="driver")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env=vg_ray.runtime_env())
    try:
        yield collector
    finally:
        ray.shutdown()


def _started(count: int) -> list[Any]:
    """Validators whose worker processes are up.

    On a loaded machine one worker can start seconds after another, longer than the
    scaled-down max_step_duration a step waits.
    """
    actors = [Validator.remote() for _ in range(count)]
    ray.get([actor.ready.remote() for actor in actors])
    return actors


def _ids(source: str, step: int) -> list[str]:
    return [f"{source}-{step}-{i}" for i in range(PER_ACTOR)]


def _bottom_k(ids: list[str]) -> list[str]:
    full = [f"{i}/0" for i in ids]
    return [i for _, i in bottom_k(((SortKey.of(sample_key(SEED, i), i), i) for i in full), K)]


def _summary(collector: RunningCollector, step: int) -> tuple[list[str], dict[str, Any]]:
    wait_for(lambda: step in by_step(file_records(collector.file_path))[1], 30, f"step {step} summary")
    kept, summaries = by_step(file_records(collector.file_path))
    assert len(summaries[step]) == 1
    ranked = sorted(kept[step], key=lambda r: r.attributes[contract.RANK])
    return [untagged(r.attributes[contract.SAMPLE_ID]) for r in ranked], summaries[step][0].attributes


@pytest.mark.timeout(150)
def test_killed_actor_step_closes_at_the_upper_bound_and_the_summary_names_the_missing_source(
    cluster: RunningCollector,
) -> None:
    """Killed before end_step: presampled records die with it, streamed ones arrive; closed at max_duration, 2 of 3."""
    collector = cluster
    for step, presample in ((1, True), (2, False)):
        actors = _started(3)
        assert ray.get(actors[2].begin.remote(step, "doomed", _ids("doomed", step), presample)) == PER_ACTOR
        ray.kill(actors[2], no_restart=True)
        assert ray.get([actors[i].part.remote(step, f"w{i}", _ids(f"w{i}", step)) for i in (0, 1)]) == [True, True]
        kept, summary = _summary(collector, step)

        survivors = _ids("w0", step) + _ids("w1", step)
        arrived = survivors if presample else survivors + _ids("doomed", step)
        assert kept == _bottom_k(arrived), f"step {step}"
        assert summary[contract.CLOSED_REASON] == "max_duration", summary
        assert summary[contract.SOURCES_EXPECTED] == 3, summary
        # The dead source announced itself (start record): a known source, not an ended one.
        assert (summary[contract.SOURCES], summary[contract.SOURCES_ENDED]) == (3, 2), summary
        (missing,) = summary[contract.SOURCES_MISSING]
        assert missing.startswith("doomed@"), summary
        assert summary[contract.SEEN] >= len(arrived), summary  # plus what its progress records reported seen
        assert summary[contract.MISSING] == 0, summary  # only ended sources announce what they emitted
        assert summary[contract.KEPT] == K
        for actor in actors[:2]:
            ray.kill(actor)
    values = collector.metrics()
    assert metric_sum(values, "otelcol_valgen_sampler_groups_closed", reason="max_duration") == 2


@pytest.mark.timeout(120)
def test_workers_that_exit_right_after_their_step_ended_lose_nothing(cluster: RunningCollector) -> None:
    """Two actors end their parts and their processes exit at once, then the driver shuts Ray down: step complete."""
    actors = _started(2)
    calls = [actor.part_then_exit.remote(4, f"w{i}", _ids(f"w{i}", 4)) for i, actor in enumerate(actors)]
    for call in calls:
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(call)
    ray.shutdown()
    kept, summary = _summary(cluster, 4)
    assert kept == _bottom_k(_ids("w0", 4) + _ids("w1", 4))
    assert summary[contract.CLOSED_REASON] == "complete"
    assert summary[contract.SOURCES] == 2
    assert summary[contract.SEEN] == 2 * PER_ACTOR
    assert summary[contract.MISSING] == 0


@pytest.mark.timeout(60)
def test_summary_counts_a_source_that_sent_records_but_never_ended_as_missing(
    collectors: Collectors, wandb_stand_in: StandIn, loki_stand_in: StandIn
) -> None:
    """Without Ray: one source streams records and never ends, the other ends; the summary shows one missing."""
    collector = collectors.start(
        "c",
        {
            "VALGEN_TRACKER_EXPORTER_ENDPOINT": wandb_stand_in.endpoint,
            "VALGEN_LOKI_OTLP_ENDPOINT": loki_stand_in.endpoint,
            "VALGEN_DECISION_WAIT": "2s",
            "VALGEN_MAX_STEP_DURATION": MAX_STEP,
        },
    )
    vg.configure(
        run_id=RUN_ID,
        count=K,
        seed=SEED,
        endpoint=f"http://{collector.http_endpoint}",
        presample=False,
        progress_interval_s=0,  # a source that stopped sending anything
    )
    # A block that stays open (a block-less call would be a complete part by itself).
    never_ends = vg.validation(step=3, source="never-ends").__enter__()
    try:
        vg.log_generations(["x1", "x2"], ["y1", "y2"])
        assert vg.flush(10)
        with vg.validation(step=3, source="ends", sources_expected=2):
            vg.log_generations(["z1", "z2"], ["w1", "w2"])
        _, summary = _summary(collector, 3)
    finally:
        never_ends.__exit__(None, None, None)
    assert summary[contract.CLOSED_REASON] == "max_duration"
    assert (summary[contract.SOURCES_EXPECTED], summary[contract.SOURCES], summary[contract.SOURCES_ENDED]) == (2, 2, 1)
