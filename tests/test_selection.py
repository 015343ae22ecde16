"""Parts of one step in collector output, read back: ``select_steps`` merges them into the step.

Two samplers each closed a part of run r step 1 (agents re-routed it mid-way). What ``show``
and ``push`` present is the step one sampler would have closed: the bottom-k of the parts'
kept records (whole prompts for rollouts), cut to the smallest k a part kept to, with the
parts' summaries merged (``otel_valgen.partials``); a sampler's summary read twice is one part.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from otel_valgen import contract
from otel_valgen.reader import Generation, Record, Summary
from otel_valgen.sampling import SortKey, group_view, sample_key
from otel_valgen.selection import cut_kept, parts_k, select_steps
from tests.conftest import REPO


def gen(sample_id: str, key: int, rank: int, **fields: Any) -> Generation:
    """A ranked generation of run r step 1 from source a (instance i-a)."""
    return Generation("r", 1, sample_id, key, "", "", source="a", instance="i-a", rank=rank, sample_count=4, **fields)


def summary(sampler: str, k: int, *figures: dict[str, Any], **attributes: Any) -> Summary:
    """Sampler ``sampler``'s summary of its part of run r step 1 (closed by decision_wait)."""
    values = {contract.SAMPLER: sampler, contract.SAMPLE_COUNT: k, contract.CLOSED_REASON: "wait"}
    values |= {contract.SEEN: 0, contract.KEPT: 0, contract.SOURCE_FIGURES: list(figures)}
    return Summary("r", 1, values | attributes)


def figure(*, ended: bool = False, **values: int) -> dict[str, Any]:
    """Source a's figures in one part."""
    return {"source": "a@i-a", "announced": True, "ended": ended} | values


def two_parts(k1: int = 2, k2: int = 2) -> list[Record]:
    """Sampler s1 received s0, s2, s4 (kept its bottom-k1), s2 received s1, s3, s5 and the end record."""
    first = [gen(f"s{i}", 100 + i, rank) for rank, i in enumerate((0, 2, 4)[:k1], start=1)]
    second = [gen(f"s{i}", 100 + i, rank) for rank, i in enumerate((1, 3, 5)[:k2], start=1)]
    return [
        *first,
        summary("s1", k1, figure(received=3)),
        *second,
        summary("s2", k2, figure(ended=True, seen=6, emitted=6, received=3)),
    ]


def test_the_parts_kept_records_are_cut_to_the_bottom_k_of_their_union() -> None:
    """Each part kept its own bottom-2: the step's is the bottom-2 of both, by sort key."""
    (selection,) = select_steps(two_parts())
    assert [g.sample_id for g in selection.generations] == ["s0", "s1"]


def test_the_parts_are_cut_to_the_smallest_k_a_part_kept_to() -> None:
    """The records ask for 4, sampler s1 kept to 2 (a smaller k asked mid-step): the step keeps 2."""
    (selection,) = select_steps(two_parts(k1=2, k2=3))
    assert [g.sample_id for g in selection.generations] == ["s0", "s1"]
    assert parts_k(4, [{contract.SAMPLE_COUNT: 3}, {contract.SAMPLE_COUNT: 2}, {}]) == 2
    assert parts_k(None, [{}]) is None


def test_the_parts_summaries_are_merged() -> None:
    """Neither part alone is the step: merged, nothing is missing and the step is complete."""
    (selection,) = select_steps(two_parts())
    assert selection.summary is not None
    assert selection.summary[contract.SAMPLERS] == ["s1", "s2"]
    assert (selection.seen, selection.kept, selection.summary[contract.MISSING]) == (6, 2, 0)
    assert selection.complete


def test_a_samplers_summary_read_twice_is_one_part() -> None:
    """The same part in two files (an export retried): not merged with itself, its arrivals not counted twice."""
    records: list[Record] = [gen("s0", 100, 1), gen("s2", 102, 2)]
    records += [summary("s1", 2, figure(received=3), **{contract.SEEN: 3, contract.KEPT: 2})] * 2
    (selection,) = select_steps(records)
    assert selection.summary is not None
    assert selection.seen == 3
    assert contract.SAMPLERS not in selection.summary


def rollout(prompt: int, response: int, key: int, rank: int) -> Generation:
    """Response ``response`` of prompt p{prompt} (prompt key 10 * prompt), sample key ``key``."""
    return gen(
        f"p{prompt}/{response}",
        key,
        rank,
        kind=contract.KIND_ROLLOUT,
        prompt_id=f"p{prompt}",
        prompt_key=10 * prompt,
    )


def test_rollout_parts_keep_the_bottom_k_prompts_whole() -> None:
    """Two prompts kept: p1 and p2 with every response, though p3's response has a smaller key than p1's."""
    first = [rollout(1, 0, 500, 1), rollout(1, 1, 50, 2), rollout(3, 0, 5, 3)]
    second = [rollout(2, 0, 7, 1), rollout(2, 1, 600, 2)]
    kept = cut_kept([*first, *second], 2, contract.KIND_ROLLOUT, seed=0)
    assert [g.sample_id for g in kept] == ["p1/1", "p1/0", "p2/0", "p2/1"]
    records: list[Record] = [*first, summary("s1", 2, figure(received=3), **{contract.KIND: contract.KIND_ROLLOUT})]
    ended = figure(ended=True, seen=5, emitted=5, received=2, prompts_seen=3)
    records += [*second, summary("s2", 2, ended, **{contract.KIND: contract.KIND_ROLLOUT})]
    (selection,) = select_steps(records, kind=contract.KIND_ROLLOUT)
    assert sorted(g.sample_id for g in selection.generations) == ["p1/0", "p1/1", "p2/0", "p2/1"]
    assert selection.prompts_kept == 2


def _vector_parts(case: dict[str, Any]) -> list[Record]:
    """A group_view.json case closed by two samplers: each got every other record and kept its own group view."""
    seed = int(case["seed"])
    records: list[Record] = []
    for sampler in (0, 1):
        share = case["records"][sampler::2]
        items = []
        for r in share:
            prompt_key = int(r["prompt_key"]) if "prompt_key" in r else sample_key(seed, r["prompt_id"])
            key = int(r["sample_key"]) if "sample_key" in r else sample_key(seed, r["sample_id"])
            items.append((SortKey.of(prompt_key, r["prompt_id"]), SortKey.of(key, r["sample_id"]), r))
        for rank, (prompt, order, _) in enumerate(group_view(items, case["k"]), start=1):
            kept = gen(order.sample_id.decode(), order.sample_key, rank, seed=seed, key_version=2)
            records.append(
                replace(
                    kept,
                    sample_count=case["k"],
                    kind=contract.KIND_ROLLOUT,
                    prompt_id=prompt.sample_id.decode(),
                    prompt_key=prompt.sample_key,
                )
            )
        ended = figure(ended=True, seen=len(case["records"]), emitted=len(case["records"]), received=len(share))
        records.append(summary(f"s{sampler}", case["k"], ended, **{contract.KIND: contract.KIND_ROLLOUT}))
    return records


def test_rollout_parts_of_the_shared_vectors_merge_to_the_expected_view() -> None:
    """Every group_view.json case, split over two samplers' parts (prompts too), merges to its expected records."""
    cases = json.loads((REPO / "testdata" / "sampling" / "group_view.json").read_text(encoding="utf-8"))["cases"]
    for case in cases:
        if case["k"] == 0:
            continue  # a part that kept nothing closes no step to read back
        (selection,) = select_steps(_vector_parts(case), kind=contract.KIND_ROLLOUT)
        assert [g.sample_id for g in selection.generations] == case["expected"], case["name"]
        assert selection.prompts_kept == len(case["expected_prompts"]), case["name"]
