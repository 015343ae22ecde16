"""User story: Ray tasks (not actors) log their generations without a validation block.

Each task calls ``vg.log_generations(..., step=N)`` a few times and returns; Ray ends its worker
processes without running their exit handlers. Every block-less call is a complete part
(start, its new bottom-k, an end record with the cumulative counts, flushed before it returns),
so the built collector closes the step ``complete`` with the exact bottom-k of every generation
of every task, though a worker that ran several tasks sent several end records for one source.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

import otel_valgen as vg
from otel_valgen import contract
from otel_valgen import ray as vg_ray
from otel_valgen.cli.main import main as cli_main
from otel_valgen.sampling import SortKey, bottom_k, sample_key, untagged
from tests.e2e.conftest import StartCollector
from tests.e2e.harness import Collector, records_of_file, wait_for
from tests.support.require import require_module

ray = require_module("ray")

pytestmark = pytest.mark.ray

RUN_ID = "ray-tasks"
K = 5
SEED = 13
STEP = 3


@ray.remote(num_cpus=0)
def validate_share(step: int, batches: list[list[str]]) -> int:
    """A Ray task: one block-less log_generations call per batch, no block, no end_step."""
    return sum(
        vg.log_generations(batch, [f"answer {i}" for i in batch], [0.5] * len(batch), sample_ids=batch, step=step)
        for batch in batches
    )


@pytest.fixture
def collector(start_collector: StartCollector, monkeypatch: pytest.MonkeyPatch) -> Iterator[Collector]:
    """The built collector (decision_wait 5 s) and a local Ray cluster whose workers send to it."""
    # The story is workers ending right after calls that were confirmed: a collector starved for
    # 2 s (the default) on a loaded 2-core machine would send a part to a spool that no later
    # process of the run sends (docs/reliability.md, the endpoint away). Forwarded to the workers.
    monkeypatch.setenv("OTEL_VALGEN_FLUSH_TIMEOUT", "10")
    running = start_collector(
        "collector",
        ["collector.yaml"],
        {
            "VALGEN_TRACKER_EXPORTER_ENDPOINT": "127.0.0.1:9",  # unused here: the file output is read
            "VALGEN_LOKI_OTLP_ENDPOINT": "http://127.0.0.1:9/otlp",
            # Block-less parts of a step more than decision_wait apart may find it closed (README): the
            # wait must cover Ray's gaps between tasks on a loaded machine (1 s did not, with two CI
            # runs on 2 cores: 49 of 120 generations made the step; 5 s did not either, with a CI run
            # and Go benchmarks on 2 cores: 77 of 120).
            "VALGEN_DECISION_WAIT": "10s",
            "VALGEN_MAX_STEP_DURATION": "60s",
        },
    )
    vg.configure(run_id=RUN_ID, count=K, seed=SEED, endpoint=f"http://{running.http_endpoint}", source="task")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env=vg_ray.runtime_env())
    try:
        yield running
    finally:
        ray.shutdown()


def _summaries(collector: Collector) -> list[dict[str, object]]:
    return [
        r.attributes
        for r in records_of_file(collector.file_path)
        if r.event == contract.EVENT_STEP_SUMMARY and r.attributes[contract.STEP] == STEP
    ]


@pytest.mark.timeout(180)
def test_ray_tasks_without_a_block_deliver_the_exact_bottom_k(collector: Collector) -> None:
    """6 tasks of block-less calls, then ray.shutdown(): one complete step, exactly its k records, the true bottom-k."""
    rng = random.Random(4)
    ids = [f"prompt-{i:03d}" for i in range(120)]
    shares: list[list[list[str]]] = [[] for _ in range(6)]
    for index in range(0, len(ids), 7):
        shares[rng.randrange(6)].append(ids[index : index + 7])
    assert sum(ray.get([validate_share.remote(STEP, share) for share in shares])) == len(ids)
    ray.shutdown()  # the workers end without exit handlers: nothing may depend on them

    wait_for(lambda: bool(_summaries(collector)), 30, f"step {STEP}'s summary")
    (summary,) = _summaries(collector)
    assert summary[contract.CLOSED_REASON] == "complete", summary
    assert summary[contract.SEEN] == len(ids), summary  # each source counted once, with its largest end record
    assert summary[contract.MISSING] == 0, summary
    assert summary[contract.SOURCES_ENDED] == summary[contract.SOURCES], summary
    assert summary[contract.KEPT] == K, summary

    kept = sorted(
        (
            r
            for r in records_of_file(collector.file_path)
            if r.event == contract.EVENT_GENERATION and contract.RANK in r.attributes
        ),
        key=lambda r: r.attributes[contract.RANK],
    )
    full = [f"{i}/0" for i in ids]
    expected = [i for _, i in bottom_k(((SortKey.of(sample_key(SEED, i), i), i) for i in full), K)]
    assert [untagged(r.attributes[contract.SAMPLE_ID]) for r in kept] == expected

    result = CliRunner().invoke(cli_main, ["show", str(collector.file_path), "--format", "json"])
    assert result.exit_code == 0, result.output
    (shown,) = [json.loads(line) for line in result.stdout.splitlines()]
    assert [untagged(g["sample_id"]) for g in shown["generations"]] == expected
