"""One rule for k when a step's records or calls ask for different k: the smallest wins.

The cases are shared with the Go processor's tests (testdata/sampling/k_rule.json).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import otel_valgen as vg
from otel_valgen import contract
from otel_valgen.reader import Generation, records_from_request
from otel_valgen.sampling import SortKey, bottom_k, sample_key, step_k, untagged
from otel_valgen.selection import select_steps
from otel_valgen.testing import capture_records
from tests.conftest import REPO
from tests.support.otlp_json_records import otlp_generation

CASES = json.loads((REPO / "testdata" / "sampling" / "k_rule.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("case", CASES["asked"], ids=lambda case: "-".join(map(str, case["asked"])))
def test_the_smallest_k_asked_for_wins(case: dict[str, Any]) -> None:
    """step_k over each shared sequence of requests gives the shared result."""
    k = None
    for asked in case["asked"]:
        k = step_k(k, asked)
    assert k == case["k"]


def test_reading_a_step_keeps_the_smallest_k_of_its_records() -> None:
    """`otel-valgen show` (selection) applies the rule to records in arrival order, and in reverse."""
    requests = [
        otlp_generation(record["sample_id"], 2, keyed=False, count=record["sample_count"])
        for record in CASES["records"]
    ]
    generations = [r for q in requests for r in records_from_request(q) if isinstance(r, Generation)]
    for order in (generations, generations[::-1]):
        (step,) = select_steps(order)
        assert step.k == CASES["k"]
        assert [g.sample_id for g in step.generations] == CASES["expected"]


@pytest.mark.parametrize("presample", [True, False])
@pytest.mark.parametrize("case", CASES["asked"], ids=lambda case: "-".join(map(str, case["asked"])))
def test_the_emitter_keeps_the_smallest_k_asked_for_in_a_step(case: dict[str, Any], presample: bool) -> None:
    """A block asks for the first k and later calls of the step for the others; the end record says the smallest."""
    first, *later = case["asked"]
    ids = [f"uid-{i}" for i in range(30)]
    with (
        capture_records(run_id="r", count=64, seed=5, presample=presample) as records,
        vg.validation(step=1, count=first),
    ):
        vg.log_generations(ids[:10], ["o"] * 10, None, sample_ids=ids[:10])
        for index, asked in enumerate(later):
            part = ids[10 + 5 * index : 15 + 5 * index]
            vg.log_generations(part, ["o"] * len(part), None, sample_ids=part, count=asked)
    sent = [r for r in records if r["event_name"] == contract.EVENT_GENERATION]
    (end,) = [r for r in records if r["event_name"] == contract.EVENT_VALIDATION_END]
    assert end["attributes"][contract.SAMPLE_COUNT] == case["k"]
    if presample:  # only the k smallest of everything logged leave the process
        logged = ids[: 10 + 5 * len(later)]
        oracle = bottom_k(((SortKey.of(sample_key(5, f"{i}/0"), f"{i}/0"), i) for i in logged), case["k"])
        assert sorted(untagged(r["attributes"][contract.SAMPLE_ID]) for r in sent) == sorted(
            f"{i}/0" for _, i in oracle
        )
