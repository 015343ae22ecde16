"""k per (step, data source): the shared vectors, partial merges, the SDK's presampling and the step's figures."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import otel_valgen
from otel_valgen import contract
from otel_valgen.data_sources import DataSourceFigures, DataSourceTally, parse_figures, step_figures
from otel_valgen.partials import merge_summaries, parts_split
from otel_valgen.reader import Generation
from otel_valgen.sampling import DataSourceViews, SortKey, sample_key
from otel_valgen.selection import cut_kept
from tests.support.process import run_show

VECTORS = Path(__file__).resolve().parent.parent / "testdata" / "sampling"
CASES = json.loads((VECTORS / "data_source.json").read_text(encoding="utf-8"))["cases"]


def _generation(record: dict[str, str], kind: str, seed: int) -> Generation:
    attributes: dict[str, Any] = {}
    if "sample_by" in record:
        attributes[contract.SAMPLE_BY] = record["sample_by"]
    return Generation(
        run_id="r",
        step=1,
        sample_id=record["sample_id"],
        sample_key=int(record["sample_key"]) if "sample_key" in record else None,
        input="",
        output="",
        data_source=record.get("data_source"),
        seed=seed,
        key_version=2,
        attributes=attributes,
        kind=kind,
        prompt_id=record.get("prompt_id"),
        prompt_key=int(record["prompt_key"]) if "prompt_key" in record else None,
    )


def _asks(generation: Generation) -> bool:
    return generation.attributes.get(contract.SAMPLE_BY) == contract.SAMPLE_BY_DATA_SOURCE


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_k_per_data_source_matches_the_shared_vectors(case: dict[str, Any]) -> None:
    """Each case keeps the expected ids, ranked, split or joined as the vectors say; so does a merge of two halves."""
    seed, kind, k = int(case["seed"]), case["kind"], case["k"]
    records = [_generation(record, kind, seed) for record in case["records"]]
    kept = cut_kept(records, k, kind, seed, 2)
    assert [g.sample_id for g in kept] == case["expected"]
    # Two partial groups, each cut on its own, then merged as their summaries say: split when both are.
    halves = [records[0::2], records[1::2]]
    split = all(_asks(g) for g in records)
    picks = [g for half in halves for g in cut_kept(half, k, kind, seed, 2)]
    assert [g.sample_id for g in cut_kept(picks, k, kind, seed, 2, split)] == case["expected"]
    views: DataSourceViews[str] = DataSourceViews(k)
    for g in records:
        views.ask(_asks(g))
        order = SortKey.of(g.sample_key if g.sample_key is not None else sample_key(seed, g.sample_id), g.sample_id)
        prompt = order
        if kind == contract.KIND_ROLLOUT:
            prompt_id = g.prompt_id or ""
            prompt = SortKey.of(g.prompt_key if g.prompt_key is not None else sample_key(seed, prompt_id), prompt_id)
        views.offer(g.data_source or "", prompt, order, g.sample_id)
    assert bool(views.split) == case["split"]
    if case["split"]:
        assert {source: len(ids) for source, ids in views.by_data_source().items() if ids} == {
            source: n for source, n in case["expected_kept_by_data_source"].items() if n
        }


@settings(max_examples=80, deadline=None)
@given(
    rows=st.lists(st.tuples(st.integers(0, 40), st.sampled_from(["", "a", "b", "é"])), unique_by=lambda r: r[0]),
    k=st.integers(0, 5),
    owners=st.lists(st.integers(0, 2), min_size=41, max_size=41),
)
def test_a_split_group_is_mergeable_however_its_generations_are_split(
    rows: list[tuple[int, str]], k: int, owners: list[int]
) -> None:
    """The bottom-k of each data source of a union is that of the parts' own picks, over any split into parts."""
    records = [
        _generation({"sample_id": f"g{i}/0", "data_source": source, "sample_by": "data_source"}, "validation", 42)
        for i, source in rows
    ]
    whole = cut_kept(records, k, contract.KIND_VALIDATION, 42, 2)
    parts = [[g for (i, _), g in zip(rows, records, strict=True) if owners[i] == part] for part in range(3)]
    picks = [g for part in parts for g in cut_kept(part, k, contract.KIND_VALIDATION, 42, 2)]
    assert cut_kept(picks, k, contract.KIND_VALIDATION, 42, 2) == whole
    by_source: dict[str, int] = {}
    for g in whole:
        by_source[g.data_source or ""] = by_source.get(g.data_source or "", 0) + 1
    assert by_source == {s: min(k, sum(1 for _, t in rows if t == s)) for s in {t for _, t in rows} if k}


def test_the_tally_counts_each_data_source_and_only_valid_scores() -> None:
    """An end record's figures: seen per data source, and the count and sum of its valid scores (NaN, None left out)."""
    tally = DataSourceTally()
    tally.add(["a", "b", "a", ""], [1.0, math.nan, 2.5, None])
    tally.add(["b"], None)
    figures = {f.data_source: f for f in parse_figures(tally.attribute()) or ()}
    assert figures["a"] == DataSourceFigures("a", 2, 2, 3.5)
    assert figures["b"] == DataSourceFigures("b", 2, 0, 0.0)
    assert figures[""] == DataSourceFigures("", 1, 0, 0.0)


def test_step_figures_add_the_sources_exactly_and_count_the_kept() -> None:
    """Sources' figures add up (sums exactly, whatever their order), and kept counts each data source's records."""
    one = [DataSourceFigures("a", 3, 3, 0.5), DataSourceFigures("b", 1, 1, 1e16)]
    two = [DataSourceFigures("a", 2, 2, 1.0), DataSourceFigures("b", 1, 1, 1.0)]
    three = [DataSourceFigures("b", 1, 1, 1.0)]
    forward = step_figures([one, two, three], ["a", "a", "b", None])
    assert forward == step_figures([two, three, one], ["b", "a", None, "a"])
    by_name = {f.data_source: f for f in forward}
    assert by_name["a"] == DataSourceFigures("a", 5, 5, 1.5, 2)
    assert by_name["b"].score_sum == 1e16 + 2  # added one by one in floats, 1e16 + 1 + 1 would give 1e16
    assert by_name[""] == DataSourceFigures("", 0, None, None, 1)
    assert by_name["a"].attribute()[contract.FIGURE_SCORE_MEAN] == 1.5 / 5


def test_malformed_figures_are_skipped_not_fatal() -> None:
    """An entry without a name, or with a bad count, is skipped or read without scores; a non-list is None."""
    assert parse_figures("nope") is None
    parsed = parse_figures([{"seen": 1}, {"data_source": "a", "seen": -3, "score.count": 1, "score.sum": "x"}, "junk"])
    assert parsed == (DataSourceFigures("a", 0, 1, None),), "a count without a usable sum keeps the count"


def _part(sampler: str, figures: list[dict[str, Any]], **attributes: Any) -> dict[str, Any]:
    return {
        contract.SAMPLER: sampler,
        contract.SOURCE_FIGURES: figures,
        contract.SAMPLE_BY: contract.SAMPLE_BY_DATA_SOURCE,
        contract.CLOSED_REASON: "complete",
        **attributes,
    }


def test_merged_partial_summaries_give_each_data_source_from_each_sources_latest_end() -> None:
    """Two samplers' parts: each source's figures per data source come from its largest end record, then add up."""
    early = {"source": "w@1", "ended": True, "seen": 2, "received": 1, "kept": 1}
    early[contract.FIELD_DATA_SOURCES] = [{"data_source": "a", "seen": 2, "score.count": 2, "score.sum": 1.0}]
    late = {"source": "w@1", "ended": True, "seen": 5, "received": 1, "kept": 1}
    late[contract.FIELD_DATA_SOURCES] = [
        {"data_source": "a", "seen": 3, "score.count": 3, "score.sum": 2.0},
        {"data_source": "b", "seen": 2, "score.count": 2, "score.sum": 2.0},
    ]
    other = {"source": "v@2", "ended": True, "seen": 1, "received": 1, "kept": 1}
    other[contract.FIELD_DATA_SOURCES] = [{"data_source": "b", "seen": 1, "score.count": 1, "score.sum": 1.0}]
    kept = [
        Generation("r", 1, "x/0", 1, "", "", data_source="a", source="w", instance="1"),
        Generation("r", 1, "y/0", 2, "", "", data_source="b", source="v", instance="2"),
    ]
    merged = merge_summaries([_part("s1", [early, other]), _part("s2", [late])], kept)
    figures = {f.data_source: f for f in parse_figures(merged[contract.DATA_SOURCES]) or ()}
    assert figures["a"] == DataSourceFigures("a", 3, 3, 2.0, 1)
    assert figures["b"] == DataSourceFigures("b", 3, 3, 3.0, 1)
    source = next(f for f in merged[contract.SOURCE_FIGURES] if f["source"] == "w@1")
    assert source[contract.FIELD_DATA_SOURCES] == late[contract.FIELD_DATA_SOURCES]


def test_a_job_keeps_k_of_each_data_source_and_show_gives_each_ones_figures(tmp_path: Path) -> None:
    """The user's path: sample_by=data_source through the SDK's presampling to files, read back by show's selection."""
    directory = tmp_path / "valgen"
    otel_valgen.configure(run_id="ds-run", count=2, sample_by="data_source", directory=str(directory), seed=7)
    sources = ["gsm8k"] * 7 + ["math"] * 3 + [None] * 2 + ["tiny"]
    scores: list[Any] = [float(i) for i in range(len(sources))]
    scores[1] = math.nan
    for call in range(2):  # two calls of one step: presampling keeps k per data source over both
        otel_valgen.log_generations(
            step=3,
            inputs=[f"q{call}-{i}" for i in range(len(sources))],
            outputs=["o"] * len(sources),
            scores=scores,
            data_sources=sources,
        )
    otel_valgen.end_step(3)
    otel_valgen.flush()
    shown = run_show(directory, "json")
    (step,) = [json.loads(line) for line in shown.splitlines() if line.strip()]
    kept = Counter(g["data_source"] or "" for g in step["generations"])
    assert kept == {"gsm8k": 2, "math": 2, "": 2, "tiny": 2}
    assert step["sample_by"] == "data_source"
    figures = {f["data_source"]: f for f in step["data_sources"]}
    assert figures["gsm8k"]["seen"] == 14
    assert figures["gsm8k"]["score_count"] == 12  # the NaN score is left out, twice
    assert figures["gsm8k"]["score_sum"] == 2 * (0 + 2 + 3 + 4 + 5 + 6)
    assert figures["tiny"] == {
        "data_source": "tiny",
        "seen": 2,
        "kept": 2,
        "score_count": 2,
        "score_sum": 24.0,
        "score_mean": 12.0,
    }
    assert sum(f["seen"] for f in figures.values()) == step["seen"] == 26


def test_merged_parts_keep_k_per_data_source_only_when_every_part_was_split() -> None:
    """A part joined by a per-step generation kept the bottom-k of the whole: the merge then keeps k per step."""
    split = {contract.SAMPLE_BY: contract.SAMPLE_BY_DATA_SOURCE}
    assert parts_split([split, split])
    assert not parts_split([split, {contract.SAMPLE_COUNT: 3}])
    assert not parts_split([])
