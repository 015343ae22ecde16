"""The most mismatched: the shared vectors, partial merges, presampling and what show prints."""

from __future__ import annotations

import csv
import io
import json
import math
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import otel_valgen
from otel_valgen import contract, tokens
from otel_valgen._records import base_sample_id
from otel_valgen._settings import resolve_settings
from otel_valgen.exporter.steps import order_generations
from otel_valgen.partials import keyed_prompts, merge_summaries, parts_mismatched
from otel_valgen.reader import Generation, ReadError, read_paths
from otel_valgen.sampling import sample_key, untagged
from otel_valgen.selection import StepSelection, cut_kept, select_steps
from otel_valgen.testing import capture_records
from tests.support.process import run_cli

VECTORS = Path(__file__).resolve().parent.parent / "testdata" / "sampling"
CASES = json.loads((VECTORS / "mismatched.json").read_text(encoding="utf-8"))["cases"]
ROLLOUT = contract.KIND_ROLLOUT
KL = contract.MISMATCH_PREFIX + tokens.KL


def _kl(value: object) -> float | None:
    """A vector's kl as the record carries it: a double ("nan", "inf", "-inf" stand for those), None when null."""
    return float(value) if isinstance(value, int | float | str) else None


def _generation(record: dict[str, Any], seed: int) -> Generation:
    attributes: dict[str, Any] = {}
    for key, name in (("mismatched", contract.MISMATCHED), ("sample_by", contract.SAMPLE_BY)):
        if key in record:
            attributes[name] = record[key]
    if "kl" in record:
        attributes[KL] = _kl(record["kl"])
    if "sample_rate" in record:
        attributes[contract.SAMPLE_RATE] = record["sample_rate"]
    return Generation(
        run_id="r",
        step=1,
        sample_id=record["sample_id"],
        sample_key=int(record["sample_key"]) if "sample_key" in record else None,
        input="",
        output="",
        score=None,
        data_source=record.get("data_source"),
        seed=seed,
        key_version=2,
        attributes=attributes,
        kind=ROLLOUT,
        prompt_id=record["prompt_id"],
        prompt_key=int(record["prompt_key"]) if "prompt_key" in record else None,
    )


def _shown(kept: list[Generation]) -> list[list[object]]:
    return [[g.sample_id, list(g.slots or ())] for g in kept]


def _merged(parts: list[list[Generation]], k: int, seed: int, split: bool) -> list[Generation]:
    """Each part cut on its own, then the union of their kept records cut as their summaries say."""
    summaries = [{contract.SAMPLE_COUNT: k, contract.MISMATCHED: _asked(part)} for part in parts if part]
    picks = [g for part in parts for g in cut_kept(part, k, ROLLOUT, seed, 2)]
    return cut_kept(picks, k, ROLLOUT, seed, 2, split, 0, parts_mismatched(summaries))


def _asked(part: list[Generation]) -> int:
    return min(int(g.attributes.get(contract.MISMATCHED, 0)) for g in part)


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_the_most_mismatched_match_the_shared_vectors(case: dict[str, Any]) -> None:
    """Each case keeps the expected ids in rank order with their slots, whole and merged from parts."""
    seed, k = int(case["seed"]), case["k"]
    records = [_generation(record, seed) for record in case["records"]]
    assert _shown(cut_kept(records, k, ROLLOUT, seed, 2)) == case["expected"]
    split = all(g.attributes.get(contract.SAMPLE_BY) == contract.SAMPLE_BY_DATA_SOURCE for g in records)
    assert _shown(_merged([records[0::2], records[1::2]], k, seed, split)) == case["expected"], "halves"
    if "part_expected" in case:
        parts = [[g for g, r in zip(records, case["records"], strict=True) if r["part"] == p] for p in (0, 1)]
        for part, expected in zip(parts, case["part_expected"], strict=True):
            assert _shown(cut_kept(part, k, ROLLOUT, seed, 2)) == expected
        assert _shown(_merged(parts, k, seed, split)) == case["expected"], "the two partial groups merged"


@settings(max_examples=80, deadline=None)
@given(
    kls=st.lists(st.one_of(st.none(), st.sampled_from([0.0, -0.0, 0.5, 1.0, 2.5, math.nan, math.inf])), max_size=30),
    k=st.integers(0, 3),
    n=st.integers(0, 3),
    owners=st.lists(st.integers(0, 2), min_size=30, max_size=30),
)
def test_the_most_mismatched_are_exact_however_a_step_is_split_into_parts(
    kls: list[float | None], k: int, n: int, owners: list[int]
) -> None:
    """The most mismatched of a union are those of its parts' picks, and are the sort's, ties by sample key."""
    records = [
        _generation({"prompt_id": f"p{i // 3}", "sample_id": f"p{i // 3}/{i % 3}", "kl": kl, "mismatched": n}, 42)
        for i, kl in enumerate(kls)
    ]
    whole = cut_kept(records, k, ROLLOUT, 42, 2)
    parts = [[g for i, g in enumerate(records) if owners[i] == part] for part in range(3)]
    assert _merged(parts, k, 42, False) == whole
    finite = [g for g, kl in zip(records, kls, strict=True) if kl is not None and math.isfinite(kl)]

    def order(g: Generation) -> tuple[float, int, str]:
        return (-float(g.attributes[KL]) + 0.0, sample_key(42, g.sample_id), g.sample_id)

    most = [g.sample_id for g in sorted(finite, key=order)[:n]]
    assert {g.sample_id for g in whole if contract.SLOT_MISMATCHED in (g.slots or ())} == set(most)
    keyed = {g.sample_id for g in whole if contract.SLOT_KEYED in (g.slots or (contract.SLOT_KEYED,))}
    assert [g.sample_id for g in whole if g.sample_id not in keyed] == [sid for sid in most if sid not in keyed]
    assert keyed_prompts(whole) == len({g.prompt_id for g in whole if g.sample_id in keyed}) <= k


def test_the_exporter_lists_a_response_kept_alone_after_the_keyed_prompts() -> None:
    """Ranked records read back in any order come back in the sampler's order: keyed prompts, then by KL."""
    kls = {"p07": 0.1, "p02": 0.9, "p05": 0.8, "p00": 0.7, "p04": 0.2}  # p07 has the smallest prompt key
    records = [
        _generation({"prompt_id": p, "sample_id": f"{p}/{i}", "kl": kl / (i + 1), "mismatched": 3}, 42)
        for p, kl in kls.items()
        for i in range(2)
    ]
    ranked = [replace(g, rank=rank) for rank, g in enumerate(cut_kept(records, 1, ROLLOUT, 42, 2), start=1)]
    assert [g.sample_id for g in ranked] == ["p07/0", "p07/1", "p02/0", "p05/0", "p00/0"]
    shuffled = list(ranked)
    random.Random(3).shuffle(shuffled)
    assert order_generations(shuffled, ROLLOUT) == ranked


def test_a_merged_summary_says_the_parts_smallest_n() -> None:
    """A part without generations asks for nothing; one that kept some without the rule turns it off."""
    part = {contract.SAMPLE_COUNT: 4, contract.KIND: ROLLOUT, contract.SOURCE_FIGURES: []}
    with_n = {**part, contract.MISMATCHED: 2}
    assert parts_mismatched([with_n, {}]) == 2
    assert parts_mismatched([with_n, part]) == 0
    assert merge_summaries([with_n, {**with_n, contract.MISMATCHED: 1}], [])[contract.MISMATCHED] == 1
    assert contract.MISMATCHED not in merge_summaries([with_n, part], [])


def test_the_setting_is_read_like_extremes(monkeypatch: pytest.MonkeyPatch) -> None:
    """OTEL_VALGEN_MISMATCHED, or configure(mismatched=); a bad value warns and keeps the default, 0."""
    monkeypatch.setenv("OTEL_VALGEN_MISMATCHED", "3")
    assert resolve_settings(run_id="r").mismatched == 3
    assert resolve_settings(run_id="r", mismatched=1).mismatched == 1
    monkeypatch.setenv("OTEL_VALGEN_MISMATCHED", "-1")
    assert resolve_settings(run_id="r").mismatched == 0


def test_a_record_carries_the_kl_its_process_ranked_it_by() -> None:
    """The figures of the whole call, not of the response read alone (its sum in another order may differ)."""
    rng = np.random.default_rng(11)
    columns = _columns(rng, [0.02] * 64)
    lengths = [int(n) for n in rng.integers(20, 41, 64)]
    prompts = [f"q{i}" for i in range(64)]
    with capture_records(run_id="kl", rollout_count=64, mismatched=2) as records:
        otel_valgen.log_rollouts(prompts, ["r"] * 64, step=1, tokens=columns, response_lengths=lengths)
    ranked = dict(zip(prompts, tokens.batch_figures(columns, lengths), strict=True))
    kept = [r for r in records if contract.SAMPLE_ID in r["attributes"]]
    assert len(kept) == 64
    for record in kept:
        figures = ranked[record["body"][contract.BODY_INPUT]]
        assert figures is not None
        assert record["attributes"][KL] == figures[tokens.KL]


def _columns(rng: np.random.Generator, drifts: list[float], width: int = 40) -> dict[str, Any]:
    """Per-token log-probabilities of one call: the engine drifts from the trainer by each response's drift."""
    trainer = np.log(rng.uniform(0.05, 1, (len(drifts), width))).astype(np.float32)
    noise = rng.normal(0, 1, trainer.shape) * np.array(drifts)[:, None]
    return {"trainer": trainer, "rollout": (trainer + noise).astype(np.float32)}


def _job(directory: Path, presample: bool) -> list[float]:
    """Four calls of a step (8 prompts x 4 responses each), k = 2 prompts, the 3 most mismatched; every KL."""
    otel_valgen.configure(
        run_id="m-run", rollout_count=2, mismatched=3, directory=str(directory), seed=3, presample=presample
    )
    rng = np.random.default_rng(5)
    picker = random.Random(7)
    every: list[float] = []
    for call in range(4):
        prompts = [f"q{call}-{p}" for p in range(8) for _ in range(4)]
        drifts = [picker.choice([0.0, 0.01, 0.02, 0.05]) for _ in prompts]
        # The worst of each call: a response of its prompt of the largest key, which not even the
        # call's own keyed candidates hold.
        last = max(range(8), key=lambda p: sample_key(3, base_sample_id(None, prompts[4 * p])))
        drifts[4 * last + call % 4] = 0.3 + 0.1 * call
        columns = _columns(rng, drifts)
        otel_valgen.log_rollouts(prompts, [f"r{i}" for i in range(len(prompts))], step=4, tokens=columns)
        every += [kl for figures in tokens.batch_figures(columns) if (kl := tokens.kl_of(figures)) is not None]
    otel_valgen.shutdown()
    return every


def _step(directory: Path) -> StepSelection:
    errors: list[ReadError] = []
    (step,) = select_steps(read_paths([directory], errors.append), kind=ROLLOUT)
    assert errors == []
    return step


def test_a_job_keeps_the_most_mismatched_exactly_and_show_marks_their_slots(tmp_path: Path) -> None:
    """The user's path: presampling keeps what the whole step would, over calls, to files; show marks the slots."""
    every = _job(tmp_path / "on", presample=True)
    _job(tmp_path / "off", presample=False)
    step, whole = _step(tmp_path / "on"), _step(tmp_path / "off")
    shown = [[(untagged(g.sample_id), g.slots) for g in s.generations] for s in (step, whole)]
    assert shown[0] == shown[1], "presampling keeps what the sampler keeps of every record (each part's own tag)"
    assert step.mismatched == 3
    assert step.prompts_kept == 2, "a response kept alone is no kept prompt"
    assert step.seen == 4 * 32
    assert all(g.attributes[contract.MISMATCHED] == 3 for g in step.generations)
    keyed = [g for g in step.generations if contract.SLOT_KEYED in (g.slots or ())]
    assert len({g.prompt_id for g in keyed}) == 2
    assert step.generations[: len(keyed)] == keyed, "the keyed prompts come first"
    most = [g.attributes[KL] for g in step.generations if contract.SLOT_MISMATCHED in (g.slots or ())]
    assert sorted(most, reverse=True) == sorted(every, reverse=True)[:3], "the largest KL of every response"
    rows = list(
        csv.DictReader(io.StringIO(run_cli(["show", str(tmp_path / "on"), "--kind", ROLLOUT, "--format", "csv"])))
    )
    assert [row["slots"] for row in rows] == [",".join(g.slots or ()) for g in step.generations]
    assert any(row["slots"] == contract.SLOT_MISMATCHED for row in rows), "a response kept alone"
