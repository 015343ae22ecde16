"""Emit validation steps through the real otel_valgen API and check what a destination got."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

import otel_valgen as vg
from otel_valgen import contract
from otel_valgen.sampling import SortKey, bottom_k, sample_key, untagged
from tests.e2e.harness import Record

RUN_ID = "e2e-run"
K = 5
SEED = 7


def emit_steps(
    endpoint: str, presample: bool, plan: Mapping[int, Mapping[str, int]], sources_expected: int | None = None
) -> dict[int, list[str]]:
    """Emit each step of `plan` ({step: {source: generations}}) and return its expected bottom-k ids.

    Every source of a step ends it with sources_expected, by default the number of sources of the step.
    """
    vg.configure(run_id=RUN_ID, count=K, seed=SEED, endpoint=endpoint, presample=presample)
    expected: dict[int, list[str]] = {}
    for step, sources in plan.items():
        step_ids: list[str] = []
        for source, n in sources.items():
            prompts = [f"{source}-prompt-{i:03d}" for i in range(n)]
            with vg.validation(step=step, source=source, sources_expected=sources_expected or len(sources)):
                vg.log_generations(
                    [f"question {p}" for p in prompts],
                    [f"answer {p} at {step}" for p in prompts],
                    [i / n for i in range(n)],
                    sample_ids=prompts,
                )
            step_ids += [f"{p}/0" for p in prompts]
        chosen = bottom_k(((SortKey.of(sample_key(SEED, i), i), i) for i in step_ids), K)
        expected[step] = [sample_id for _, sample_id in chosen]
    assert vg.flush(10.0)
    return expected


def by_step(records: Sequence[Record]) -> tuple[dict[int, list[Record]], dict[int, list[Record]]]:
    """Split a destination's records into kept generations and summaries, by step."""
    kept: dict[int, list[Record]] = defaultdict(list)
    summaries: dict[int, list[Record]] = defaultdict(list)
    for record in records:
        if record.event == contract.EVENT_GENERATION:
            kept[record.attributes[contract.STEP]].append(record)
        elif record.event == contract.EVENT_STEP_SUMMARY:
            summaries[record.attributes[contract.STEP]].append(record)
    return kept, summaries


def assert_destination(
    name: str, records: Sequence[Record], expected: Mapping[int, list[str]], plan: Mapping[int, Mapping[str, int]]
) -> None:
    """Exactly min(k, M) ranked records per step, equal to Python's bottom-k, and a reconciling summary."""
    kept, summaries = by_step(records)
    assert set(kept) | set(summaries) == set(expected), f"{name}: steps {sorted(kept)} / {sorted(summaries)}"
    for step, want in expected.items():
        generated = sum(plan[step].values())
        got = sorted(kept[step], key=lambda r: r.attributes[contract.RANK])
        assert len(got) == min(K, generated), f"{name} step {step}"
        assert [untagged(r.attributes[contract.SAMPLE_ID]) for r in got] == want, f"{name} step {step}"
        assert [r.attributes[contract.RANK] for r in got] == list(range(1, len(got) + 1))
        assert len(summaries[step]) == 1, f"{name} step {step}: {len(summaries[step])} summaries"
        summary = summaries[step][0].attributes
        assert summary[contract.RUN_ID] == RUN_ID
        assert summary[contract.SEEN] == generated
        assert summary[contract.KEPT] == len(got)
        assert summary[contract.SOURCES] == len(plan[step])
        assert summary[contract.SOURCES_EXPECTED] == len(plan[step])
        assert summary[contract.MISSING] == 0
        assert summary[contract.LATE] == 0
        assert summary[contract.CLOSED_REASON] == "complete"
        trace_ids = {r.trace_id for r in [*got, summaries[step][0]]}
        assert len(trace_ids) == 1, f"{name} step {step}: trace ids {trace_ids}"
        assert trace_ids != {""}, f"{name} step {step}: no trace id"
