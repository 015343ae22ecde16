"""Validation across real Ray actors on a local cluster: one trace, exact merge, nothing lost."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import otel_valgen as vg
from otel_valgen import contract
from otel_valgen import ray as vg_ray
from otel_valgen.reader import EndRecord, Generation, read_paths, records_from_request
from otel_valgen.sampling import SortKey, bottom_k, sample_key, untagged
from otel_valgen.selection import select_steps
from tests.conftest import OtlpHttpReceiver
from tests.support.require import require_module

ray = require_module("ray")

pytestmark = pytest.mark.ray


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Path]:
    """A local Ray cluster whose workers get otel_valgen's runtime env (embedded sink)."""
    sink = tmp_path / "sink"
    vg.configure(run_id="ray-run", count=6, seed=11, directory=str(sink), source="driver")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env=vg_ray.runtime_env())
    yield sink
    ray.shutdown()


@ray.remote(num_cpus=0)
class Validator:
    """An actor validating a part of a step, optionally with the driver's carrier."""

    def run(self, step: int, source: str, carrier: dict[str, str] | None, batches: list[list[str]]) -> dict[str, Any]:
        with vg.validation(step=step, source=source, carrier=carrier) as block:
            for batch in batches:
                vg.log_generations(batch, [f"out {x}" for x in batch], [len(x) for x in batch], sample_ids=batch)
        settings = vg.current_settings()
        assert settings is not None
        return {"trace_id": block.trace_id(), "run_id": settings.run_id, "flushed": block.flushed}

    def emit_and_end(self, step: int, ids: list[str]) -> bool:
        vg.log_generations(ids, ids, None, sample_ids=ids, step=step, source="doomed")
        return vg.end_step(step, source="doomed")


def _split(ids: list[str], parts: int, rng: random.Random) -> list[list[list[str]]]:
    owners: list[list[str]] = [[] for _ in range(parts)]
    for sample_id in ids:
        owners[rng.randrange(parts)].append(sample_id)
    shares = []
    for owned in owners:
        batches, cut = [], 0
        while cut < len(owned):
            size = rng.randint(1, 30)
            batches.append(owned[cut : cut + size])
            cut += size
        shares.append(batches)
    return shares


def test_actors_with_the_carrier_share_the_trace_and_merge_exactly(cluster: Path) -> None:
    """Records from 3 actors, random batches, carry the driver's trace id; the merge is the exact bottom-k."""
    rng = random.Random(5)
    ids = [f"prompt-{i}" for i in range(300)]
    actors = [Validator.remote() for _ in range(3)]
    for step in (1, 2):
        with vg.validation(step=step, source="driver", sources_expected=4) as block:
            results = ray.get(
                [
                    actor.run.remote(step, f"actor-{i}", block.carrier(), share)
                    for i, (actor, share) in enumerate(zip(actors, _split(ids, 3, rng), strict=True))
                ]
            )
        assert {r["trace_id"] for r in results} == {block.trace_id()}
        assert {r["run_id"] for r in results} == {"ray-run"}
        assert all(r["flushed"] for r in results)
    records = list(read_paths([cluster], pytest.fail))
    expected = [
        sid for _, sid in bottom_k(((SortKey.of(sample_key(11, f"{i}/0"), f"{i}/0"), f"{i}/0") for i in ids), 6)
    ]
    selections = select_steps(records)
    assert [(s.step, s.seen, [untagged(g.sample_id) for g in s.generations]) for s in selections] == [
        (1, 300, expected),
        (2, 300, expected),
    ]
    assert [s.attempts for s in selections] == [1, 1]  # the driver's launch id reached every actor
    for step in (1, 2):
        step_records = [r for r in records if r.step == step]
        assert len({r.trace_id for r in step_records if isinstance(r, Generation)}) == 1
        ends = [r for r in step_records if isinstance(r, EndRecord)]
        assert sorted(e.source for e in ends) == ["actor-0", "actor-1", "actor-2", "driver"]
        assert sum(e.emitted for e in ends) == sum(isinstance(r, Generation) for r in step_records) <= 3 * 6


def test_actors_without_a_carrier_still_share_the_step_trace_id(cluster: Path) -> None:
    """With no carrier the trace id is derived from (run, step), the same in every process."""
    actors = [Validator.remote() for _ in range(2)]
    with vg.validation(step=7, source="driver") as block:
        results = ray.get([a.run.remote(7, f"a{i}", None, [["x", "y"]]) for i, a in enumerate(actors)])
    assert {r["trace_id"] for r in results} == {block.trace_id()}


def test_runtime_env_uses_a_module_path_hook_and_forwards_settings(cluster: Path) -> None:
    """The hook is a module-path string (job submission) and workers inherit run id, k, seed and sink."""
    env = vg_ray.runtime_env({"env_vars": {"EXTRA": "1"}})
    assert env["worker_process_setup_hook"] == "otel_valgen.ray.setup_worker"
    assert env["env_vars"]["EXTRA"] == "1"
    assert env["env_vars"]["OTEL_VALGEN_RUN_ID"] == "ray-run"
    assert env["env_vars"]["OTEL_VALGEN_COUNT"] == "6"

    @ray.remote(num_cpus=0)
    def worker_settings() -> tuple[str, int, int, str]:
        vg.log_generations(["q"], ["a"], [1.0], step=99)
        settings = vg.current_settings()
        assert settings is not None
        return settings.run_id, settings.count, settings.seed, settings.directory

    assert ray.get(worker_settings.remote()) == ("ray-run", 6, 11, str(cluster.resolve()))


def test_records_of_an_ended_step_survive_kill_and_shutdown(tmp_path: Path) -> None:
    """An actor that ended its step, then was killed (and the driver shut Ray down), lost nothing."""
    receiver = OtlpHttpReceiver()
    receiver.thread.start()
    try:
        vg.configure(run_id="kill-run", count=4, endpoint=receiver.endpoint, source="driver")
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env=vg_ray.runtime_env())
        try:
            actor = Validator.remote()
            ids = [f"k{i}" for i in range(50)]
            assert ray.get(actor.emit_and_end.remote(3, ids)) is True
            ray.kill(actor)
        finally:
            ray.shutdown()
        records = [r for req in receiver.json_requests() for r in records_from_request(req)]
        generations = [r for r in records if isinstance(r, Generation) and r.run_id == "kill-run"]
        expected = [
            sid for _, sid in bottom_k(((SortKey.of(sample_key(42, f"{i}/0"), f"{i}/0"), f"{i}/0") for i in ids), 4)
        ]
        assert sorted(untagged(g.sample_id) for g in generations) == sorted(expected)
        (end,) = [r for r in records if isinstance(r, EndRecord)]
        assert (end.seen, end.emitted, end.source) == (50, 4, "doomed")
        assert all(g.resource.get(contract.RAY_ACTOR_ID) for g in generations)
    finally:
        receiver.server.shutdown()
        receiver.server.server_close()


@ray.remote(num_cpus=0)
def _validate_in_a_task(step: int, ids: list[str]) -> int:
    """A Ray task (not an actor) logging its generations without a validation block."""
    return vg.log_generations(ids, [f"out {x}" for x in ids], [0.5] * len(ids), sample_ids=ids, step=step)


def test_a_ray_task_without_a_block_delivers_its_step(cluster: Path) -> None:
    """A task calls log_generations(step=1), then Ray shuts down: the sink holds exactly the step's k records."""
    ids = [f"task-{i}" for i in range(40)]
    assert ray.get(_validate_in_a_task.remote(1, ids)) == 40
    ray.shutdown()  # ends the worker processes without running their exit handlers
    records = [r for r in read_paths([cluster], pytest.fail) if r.step == 1]
    generations = [r for r in records if isinstance(r, Generation)]
    expected = [
        sid for _, sid in bottom_k(((SortKey.of(sample_key(11, f"{i}/0"), f"{i}/0"), f"{i}/0") for i in ids), 6)
    ]
    assert sorted(untagged(g.sample_id) for g in generations) == sorted(expected)
    (end,) = [r for r in records if isinstance(r, EndRecord)]
    assert (end.seen, end.emitted) == (40, 6)
    (selection,) = select_steps(records)
    assert ([untagged(g.sample_id) for g in selection.generations], selection.complete) == (expected, True)


@ray.remote(num_cpus=0)
def _launch_id_in_worker() -> tuple[str, str]:
    from otel_valgen._settings import resolve_settings

    return resolve_settings().launch_id, ray.get_runtime_context().get_job_id()


def test_workers_without_a_forwarded_launch_id_share_the_ray_jobs() -> None:
    """Workers of a job started without otel-valgen's runtime env still share one launch id: the Ray job's."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        results = ray.get([_launch_id_in_worker.remote() for _ in range(3)])
    finally:
        ray.shutdown()
    assert {launch for launch, _ in results} == {f"ray-{results[0][1]}"}
