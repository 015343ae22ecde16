"""Distinct prompts of a rollout step: the shared sketch vectors, the emitter's parts, partial merges and show."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

import otel_valgen as vg
from otel_valgen import contract
from otel_valgen.distinct import PROMPTS_SEEN_ERROR, SKETCH_SIZE, DistinctKeys, distinct_count, merge_keys, parse_keys
from otel_valgen.partials import merge_summaries
from otel_valgen.reader import EndRecord, Generation, read_paths
from otel_valgen.sampling import rate_threshold, sample_key
from otel_valgen.selection import select_steps
from otel_valgen.testing import capture_records

VECTORS = json.loads((Path(__file__).parents[1] / "testdata" / "sampling" / "distinct_prompts.json").read_text())
CASES = VECTORS["cases"]
SEED = 42


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_sketches_merge_and_count_as_the_shared_vectors_say(case: dict[str, Any]) -> None:
    """Merged in any order, and rebuilt key by key in any chunks, the sketches give the vector's keys and count."""
    m = case["m"]
    assert merge_keys(*case["sketches"], m=m) == case["merged"]
    assert merge_keys(*reversed(case["sketches"]), m=m) == case["merged"]
    assert tuple(distinct_count(case["merged"], m)) == (case["count"], case["estimated"])
    rng = random.Random(case["name"])
    sketch = DistinctKeys(m)
    keys = [key for keys in case["sketches"] for key in keys]
    rng.shuffle(keys)
    while keys:
        size = rng.randint(1, 50)
        chunk, keys = keys[:size], keys[size:]
        sketch.add(chunk)
    assert sketch.keys() == case["merged"]
    assert tuple(sketch.count()) == (case["count"], case["estimated"])


def test_an_estimate_stays_within_a_few_errors_of_the_truth() -> None:
    """At m = 1024 the estimate of 20,000 distinct keys is within 4 relative standard errors (about 12%)."""
    rng = random.Random(5)
    sketch = DistinctKeys()
    sketch.add(rng.getrandbits(63) for _ in range(20_000))
    value, estimated = sketch.count()
    assert estimated
    assert abs(value - 20_000) / 20_000 < 4 * PROMPTS_SEEN_ERROR


@pytest.mark.parametrize(
    "value",
    [[2, 1], [1, 1], [-1], [1 << 63], [1.0], "1,2", list(range(1025))],
    ids=["descending", "repeated", "negative", "too large", "float", "text", "longer than m"],
)
def test_a_malformed_sketch_is_not_read(value: object) -> None:
    """A sketch that is not ascending distinct keys in [0, 2**63), at most m, is ignored."""
    assert parse_keys(value) is None


def _partial(sampler: str, sketch: list[int], seen: int) -> dict[str, Any]:
    return {
        contract.KIND: contract.KIND_ROLLOUT,
        contract.SAMPLER: sampler,
        contract.PROMPTS_SEEN: seen,
        contract.PROMPT_KEYS: sketch,
        contract.SOURCES: 1,
        contract.SOURCES_ENDED: 1,
        contract.SOURCE_FIGURES: [
            {
                "source": f"trainer@{sampler}",
                "announced": True,
                "ended": True,
                "seen": seen,
                "emitted": 0,
                "prompts_seen": seen,
            },
        ],
    }


MERGED_PARTS = [case for case in CASES if len(case["sketches"]) > 1 and case["m"] == SKETCH_SIZE]


@pytest.mark.parametrize("case", MERGED_PARTS, ids=[case["name"] for case in MERGED_PARTS])
def test_partial_summaries_unite_their_sketches(case: dict[str, Any]) -> None:
    """Samplers' partial summaries of one step count a prompt several saw once (the library's m)."""
    parts = [_partial(f"s{i}", sketch, len(sketch)) for i, sketch in enumerate(case["sketches"])]
    merged = merge_summaries(parts, [])
    assert merged[contract.PROMPTS_SEEN] == case["count"]
    assert merged[contract.PROMPTS_SEEN_ESTIMATED] is case["estimated"]
    assert (contract.PROMPTS_SEEN_ERROR in merged) is case["estimated"]
    assert merged[contract.PROMPT_KEYS] == case["merged"]


def test_a_part_counts_a_prompt_once_over_its_calls() -> None:
    """The same 3 prompts in two calls of a step: the end records say 3 prompts, with their keys as the sketch."""
    with capture_records(run_id="r", rollout_count=2, progress_interval_s=0, seed=SEED) as records:
        for call in range(2):
            vg.log_rollouts(
                ["p"] * 6, [f"r{call}.{i}" for i in range(6)], step=1, prompt_ids=[f"q{i % 3}" for i in range(6)]
            )
    ends = [r["attributes"] for r in records if r["event_name"] == contract.EVENT_VALIDATION_END]
    keys = sorted(sample_key(SEED, f"q{i}") for i in range(3))
    assert [(end[contract.PROMPTS_SEEN], list(end[contract.PROMPT_KEYS])) for end in ends] == [(3, keys)] * 2


def _rollout(source: str, prompt: str, i: int) -> Generation:
    sid = f"{prompt}/{i}@{source}"
    return Generation(
        "r", 1, sid, sample_key(SEED, f"{prompt}/{i}"), "in", "out", seed=SEED, key_version=2, attempt="L.1",
        kind=contract.KIND_ROLLOUT, prompt_id=prompt, prompt_key=sample_key(SEED, prompt), source=source,
        instance=f"i-{source}",
    )  # fmt: skip


def _end(source: str, prompts: list[str]) -> EndRecord:
    keys = tuple(sorted(sample_key(SEED, p) for p in prompts))
    return EndRecord(
        "r", 1, source, f"i-{source}", seen=len(prompts), emitted=len(prompts), attempt="L.1",
        kind=contract.KIND_ROLLOUT, prompts_seen=len(prompts), prompt_keys=keys,
    )  # fmt: skip


@pytest.mark.parametrize("b_ended", [True, False])
def test_show_says_kept_prompts_may_be_incomplete_while_a_source_did_not_end(b_ended: bool) -> None:
    """Embedded records: two sources answer p; while b has not ended, every kept prompt may lack responses."""
    records: list[Any] = [_rollout("a", "p", 0), _rollout("b", "p", 0), _rollout("a", "q", 0), _end("a", ["p", "q"])]
    if b_ended:
        records.append(_end("b", ["p"]))
    (shown,) = select_steps(records, kind=contract.KIND_ROLLOUT, count=2)
    assert (shown.prompts_seen, shown.prompts_seen_estimated, shown.kept) == (2, False, 3)
    assert shown.prompts_incomplete == (0 if b_ended else 2)


def test_show_counts_the_prompts_under_the_watch_list_rate_once(tmp_path: Path) -> None:
    """Rate 0.5, 40 prompts answered in two calls: show keeps and counts exactly the prompts under the threshold."""
    vg.configure(run_id="r", rollout_count=64, rollout_rate=0.5, seed=SEED, directory=str(tmp_path))
    for call in range(2):
        ids = [f"w{i}" for i in range(40)]
        vg.log_rollouts(["p"] * 40, [f"r{call}"] * 40, step=3, prompt_ids=ids)
    vg.shutdown()
    (shown,) = select_steps(read_paths([tmp_path], lambda error: None), kind=contract.KIND_ROLLOUT)
    under = {f"w{i}" for i in range(40) if sample_key(SEED, f"w{i}") < rate_threshold(0.5)}
    assert {g.prompt_id for g in shown.generations} == under
    assert (shown.sample_rate, shown.prompts_under_rate, shown.prompts_kept, shown.prompts_seen) == (
        0.5, len(under), len(under), 40,
    )  # fmt: skip


def test_partial_summaries_count_the_prompts_under_the_rate_from_the_united_sketch() -> None:
    """Two samplers' parts with rate 0.5: prompts under it that both saw count once; over the cap is what k left out."""
    keys = sorted(sample_key(SEED, f"w{i}") for i in range(40))
    under = sum(key < rate_threshold(0.5) for key in keys)
    parts = [
        _partial("s0", keys[:30], 30) | {contract.SAMPLE_RATE: 0.5},
        _partial("s1", keys[10:], 30) | {contract.SAMPLE_RATE: 1.0},
    ]
    kept = [_rollout("a", "p", 0)]
    merged = merge_summaries(parts, kept)
    assert (merged[contract.SAMPLE_RATE], merged[contract.PROMPTS_SEEN]) == (0.5, 40)
    assert (merged[contract.PROMPTS_UNDER_RATE], merged[contract.PROMPTS_OVER_CAP]) == (under, under - 1)
