"""The best and the worst: the shared vectors, partial merges, presampling and what show prints."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import otel_valgen
from otel_valgen import contract
from otel_valgen.reader import Generation
from otel_valgen.sampling import sample_key, score_rank
from otel_valgen.selection import cut_kept
from tests.support.process import run_show

VECTORS = Path(__file__).resolve().parent.parent / "testdata" / "sampling"
CASES = json.loads((VECTORS / "extremes.json").read_text(encoding="utf-8"))["cases"]


def _score(value: object) -> float | None:
    """A vector's score as the reader gives it: finite doubles only ("nan", "inf" stand for those doubles)."""
    score = float(value) if isinstance(value, int | float | str) else None
    return score if score is not None and math.isfinite(score) else None


def _generation(record: dict[str, Any], seed: int) -> Generation:
    asked = (("extremes", contract.EXTREMES), ("sample_by", contract.SAMPLE_BY))
    attributes = {name: record[key] for key, name in asked}
    return Generation(
        run_id="r",
        step=1,
        sample_id=record["sample_id"],
        sample_key=int(record["sample_key"]) if "sample_key" in record else None,
        input="",
        output="",
        score=_score(record.get("score")),
        data_source=record.get("data_source"),
        seed=seed,
        key_version=2,
        attributes={name: value for name, value in attributes.items() if value is not None},
    )


def _shown(kept: list[Generation]) -> list[list[object]]:
    return [[g.sample_id, list(g.slots or ())] for g in kept]


for _case in CASES:  # the attributes a record lacks read as None above
    for _record in _case["records"]:
        _record.setdefault("extremes", None)
        _record.setdefault("sample_by", None)


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_the_best_and_the_worst_match_the_shared_vectors(case: dict[str, Any]) -> None:
    """Each case keeps the expected ids in rank order with their slots; so does a merge of two partial groups."""
    seed, k, n = int(case["seed"]), case["k"], case["n"]
    records = [_generation(record, seed) for record in case["records"]]
    assert _shown(cut_kept(records, k, contract.KIND_VALIDATION, seed, 2)) == case["expected"]
    split = all(g.attributes.get(contract.SAMPLE_BY) == contract.SAMPLE_BY_DATA_SOURCE for g in records)
    halves = [records[0::2], records[1::2]]
    picks = [g for half in halves for g in cut_kept(half, k, contract.KIND_VALIDATION, seed, 2)]
    merged = cut_kept(picks, k, contract.KIND_VALIDATION, seed, 2, split, n)
    assert _shown(merged) == case["expected"]


@settings(max_examples=80, deadline=None)
@given(
    scores=st.lists(st.one_of(st.none(), st.sampled_from([0.0, -0.0, 0.5, 1.0, -2.0, math.nan])), max_size=30),
    k=st.integers(0, 4),
    n=st.integers(0, 3),
    owners=st.lists(st.integers(0, 2), min_size=30, max_size=30),
)
def test_the_extremes_are_exact_however_a_step_is_split_into_parts(
    scores: list[float | None], k: int, n: int, owners: list[int]
) -> None:
    """The lowest and highest of a union are those of its parts' picks, and are the sort's, ties by sample key."""
    records = [
        _generation({"sample_id": f"g{i}/0", "score": score, "extremes": n, "sample_by": None}, 42)
        for i, score in enumerate(scores)
    ]
    whole = cut_kept(records, k, contract.KIND_VALIDATION, 42, 2)
    parts = [[g for i, g in enumerate(records) if owners[i] == part] for part in range(3)]
    picks = [g for part in parts for g in cut_kept(part, k, contract.KIND_VALIDATION, 42, 2)]
    assert cut_kept(picks, k, contract.KIND_VALIDATION, 42, 2, False, n) == whole
    scored = [g for g in records if g.score is not None]

    def order(g: Generation, sign: float) -> tuple[float, int, str]:
        return (sign * (g.score or 0.0) + 0.0, sample_key(42, g.sample_id), g.sample_id)

    lowest = {g.sample_id for g in sorted(scored, key=lambda g: order(g, 1.0))[:n]}
    highest = {g.sample_id for g in sorted(scored, key=lambda g: order(g, -1.0))[:n]}
    assert {g.sample_id for g in whole if contract.SLOT_LOWEST in (g.slots or ())} == lowest
    assert {g.sample_id for g in whole if contract.SLOT_HIGHEST in (g.slots or ())} == highest


def test_score_rank_orders_like_the_scores() -> None:
    """The folded score is monotonic over finite doubles, with -0.0 equal to 0.0."""
    rng = random.Random(5)
    values = [0.0, -0.0, 5e-324, -5e-324, 1.0, -1.0, 1.7976931348623157e308, -1.7976931348623157e308]
    values += [rng.uniform(-1e6, 1e6) for _ in range(200)]
    for a in values:
        for b in values[:20]:
            assert (a < b) == (score_rank(a) < score_rank(b))
            assert (a == b) == (score_rank(a) == score_rank(b))


def test_a_job_keeps_the_best_and_the_worst_and_show_marks_their_slots(tmp_path: Path) -> None:
    """The user's path: extremes=2 through presampling, over calls, to files; show lists keyed picks, then the rest."""
    directory = tmp_path / "valgen"
    otel_valgen.configure(run_id="x-run", count=3, extremes=2, directory=str(directory), seed=3)
    rng = random.Random(11)
    sent: dict[str, float | None] = {}
    for call in range(4):
        inputs = [f"q{call}-{i}" for i in range(50)]
        scores: list[Any] = [rng.choice([rng.uniform(-5, 5), None, math.nan]) for _ in inputs]
        if call == 2:
            scores[7] = 99.0  # the best, in a call whose keyed picks will all be evicted
            scores[8] = -99.0  # the worst
        otel_valgen.log_generations(inputs, [f"out {q}" for q in inputs], scores, step=5)
        sent |= {q: _score(s) for q, s in zip(inputs, scores, strict=True)}
    otel_valgen.end_step(5)
    otel_valgen.flush()
    shown = run_show(directory, "json")
    (step,) = [json.loads(line) for line in shown.splitlines() if line.strip()]
    assert step["extremes"] == 2
    rows = step["generations"]
    assert [row["slots"][0] for row in rows[:3]] == ["keyed"] * 3, "the keyed picks come first"
    assert len(rows) <= 3 + 4
    valid = sorted(score for score in sent.values() if score is not None)
    lowest = [row["score"] for row in rows if "lowest" in row["slots"]]
    highest = [row["score"] for row in rows if "highest" in row["slots"]]
    assert sorted(lowest) == valid[:2]
    assert sorted(highest, reverse=True) == valid[::-1][:2]
    assert 99.0 in highest
    assert -99.0 in lowest
    assert step["seen"] == 200
    table = run_show(directory, "csv")
    header, *lines = table.splitlines()
    assert header.split(",")[3] == "slots"
    assert len(lines) == len(rows)
