"""User story: a training step's rollouts, split over two processes, reach the file as k whole prompts."""

from __future__ import annotations

import otel_valgen as vg
from otel_valgen import contract
from otel_valgen.reader import read_paths
from otel_valgen.sampling import SortKey, group_view, sample_key
from otel_valgen.selection import select_steps
from tests.e2e.conftest import StartCollector
from tests.e2e.harness import StandIn, records_of_file, wait_for

RUN_ID, SEED, K, N, STEP = "e2e-rollouts", 7, 3, 4, 12
PROMPTS = {"trainer-a": [f"a{p}" for p in range(5)], "trainer-b": [f"b{p}" for p in range(6)]}


def _emit(endpoint: str) -> None:
    """Each source is its own emitter (another instance), as two processes: N responses per prompt, presampled."""
    for source, prompts in PROMPTS.items():
        vg.configure(run_id=RUN_ID, seed=SEED, rollout_count=K, endpoint=endpoint, source=source, count=2)
        rows = [(p, i) for p in prompts for i in range(N)]
        vg.log_generations([f"v {p}" for p in prompts], ["out"] * len(prompts), step=STEP)  # the same step's validation
        assert vg.log_rollouts(
            [f"prompt {p}" for p, _ in rows],
            [f"response {p}.{i}" for p, i in rows],
            [float(i == 0) for _, i in rows],
            step=STEP,
            prompt_ids=[p for p, _ in rows],
            advantages=[0.5 - i for _, i in rows],
        ) == len(rows)
        assert vg.shutdown()


def test_rollouts_of_a_split_step_keep_k_whole_prompts(
    start_collector: StartCollector, wandb_stand_in: StandIn, loki_stand_in: StandIn
) -> None:
    """The collector keeps the k smallest prompts of both processes with all N responses, as show and the oracle do."""
    collector = start_collector(
        "collector",
        ["collector.yaml"],
        {
            "VALGEN_WANDB_EXPORTER_ENDPOINT": wandb_stand_in.endpoint,
            "VALGEN_LOKI_OTLP_ENDPOINT": loki_stand_in.endpoint,
            "VALGEN_DECISION_WAIT": "2s",  # block-less parts announce no sources_expected: closed by silence
        },
    )
    _emit(f"http://{collector.http_endpoint}")

    def summaries() -> list[dict[str, object]]:
        return [r.attributes for r in records_of_file(collector.file_path) if r.event == contract.EVENT_STEP_SUMMARY]

    wait_for(lambda: len(summaries()) == 2, 30, "a validation and a rollout summary")
    by_kind = {s[contract.KIND]: s for s in summaries()}
    rollout = by_kind[contract.KIND_ROLLOUT]
    every = [p for prompts in PROMPTS.values() for p in prompts]
    assert (rollout[contract.PROMPTS_KEPT], rollout[contract.PROMPTS_SEEN]) == (K, len(every))
    assert (rollout[contract.KEPT], rollout[contract.SEEN]) == (K * N, len(every) * N)
    assert rollout[contract.SOURCES] == 2
    assert by_kind[contract.KIND_VALIDATION][contract.KEPT] == 2

    oracle = group_view(
        (
            (SortKey.of(sample_key(SEED, p), p), SortKey.of(sample_key(SEED, f"{p}/{i}"), f"{p}/{i}"), f"{p}/{i}")
            for p in every
            for i in range(N)
        ),
        K,
    )
    kept = [
        r.attributes
        for r in records_of_file(collector.file_path)
        if r.event == contract.EVENT_GENERATION and r.attributes[contract.KIND] == contract.KIND_ROLLOUT
    ]
    assert [a[contract.RANK] for a in kept] == list(range(1, K * N + 1))
    assert [a[contract.SAMPLE_ID] for a in kept] == [sid for _, _, sid in oracle]
    (shown,) = select_steps(read_paths([collector.file_path], lambda e: None), kind=contract.KIND_ROLLOUT)
    assert [g.sample_id for g in shown.generations] == [sid for _, _, sid in oracle]
