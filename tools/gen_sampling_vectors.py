"""Write testdata/sampling/*.json: the vectors that the Python and Go test suites share.

Run ``python tools/gen_sampling_vectors.py`` after a deliberate change to the sampling rule;
both suites then fail until each implementation agrees with the new vectors.
"""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from fractions import Fraction
from pathlib import Path

import xxhash

from otel_valgen.conversations import prompt_text
from otel_valgen.reader import EndRecord
from otel_valgen.sampling import (
    KEY_VERSIONS,
    SAMPLE_BY_DATA_SOURCE,
    DataSourceViews,
    GroupView,
    SortKey,
    bottom_k,
    id_hash,
    mix64,
    rate_threshold,
    sample_key,
    seed_lane,
    step_k,
)
from otel_valgen.selection import select_steps
from otel_valgen.tokens import GAMMA, MismatchFigures

OUT = Path(__file__).resolve().parent.parent / "testdata" / "sampling"

SEEDS = [0, 1, 42, 2**31 - 1, 2**63 - 1, 2**63, 2**64 - 1]
IDS = [
    "",
    "0",
    "abc/0",
    "abc/1",
    "uid-7f3a/3",
    "9b74c9897bac770ffc029102a200c5de/0",
    "prompt with spaces/0",
    "ünïcödé/2",
    "数学题/0",
    "emoji 🎲/1",
    "tab\tand\nnewline/0",
    "x" * 300 + "/0",
    # version 2: which bases are read as 16 hex digits, which suffixes are response indexes
    "0123456789abcdef/0",
    "0123456789abcdef/1",
    "0123456789abcdef",
    "0123456789ABCDEF/0",
    "0123456789abcde/0",
    "0123456789abcdef0/0",
    "000000000000002a/7",
    "ffffffffffffffff/0",
    "x/00",
    "x/01",
    "x/9999999999999999999",
    "x/10000000000000000000",
    "x/",
    "/0",
    "a/b/3",
    "x/+1",
    "x/\u0661",
    "x/0 ",
    # a part's tag after the index (not part of the key): the same key as without it
    "abc/0@5f2e9c1a7b3d",
    "abc/1@5f2e9c1a7b3d",
    "0123456789abcdef/0@000000000000",
    "0123456789abcdef/0@ffffffffffff",
    "a/b/3@t",
    "abc/0@",
    "abc/0@x@y",
    "abc/01@t",
    "abc/@t",
    "abc@t",
    "abc@t/0",
]
# How ids split into (base, n = 1 + response index): written out by hand, not computed.
SPLITS = [
    ("abc/0", "abc", 1),
    ("abc/12", "abc", 13),
    ("a/b/3", "a/b", 4),
    ("/0", "", 1),
    ("abc", "abc", 0),
    ("abc/", "abc/", 0),
    ("abc/01", "abc/01", 0),
    ("abc/+1", "abc/+1", 0),
    ("abc/\u0661", "abc/\u0661", 0),
    ("abc/1 ", "abc/1 ", 0),
    ("x/9999999999999999999", "x", 10**19),
    ("x/10000000000000000000", "x/10000000000000000000", 0),
    ("abc/0@5f2e9c1a7b3d", "abc", 1),
    ("abc/12@5f2e9c1a7b3d", "abc", 13),
    ("a/b/3@t", "a/b", 4),
    ("abc/0@", "abc", 1),
    ("abc/0@x@y", "abc", 1),
    ("abc/01@t", "abc/01@t", 0),
    ("abc/@t", "abc/@t", 0),
    ("abc@t", "abc@t", 0),
    ("abc@t/0", "abc@t", 1),
    ("abc/0@t/1", "abc/0@t", 2),
]
# Bases that id_hash hashes with XXH64 (not 16 lowercase hex digits), long ones past XXH64's
# 32-byte stripes too.
HASHED_BASES = ["", "a", "abc", "uid", "uid-7f3a", "数学题", "emoji 🎲", "x" * 31, "x" * 32, "x" * 33, "y" * 500]
MIX_INPUTS = [0, 1, 2, 0x9E3779B97F4A7C15, 2**63, 2**64 - 1, 0x0123456789ABCDEF]
# Message prompts, each spelled in the chat formats that must give it one id (otel_valgen.conversations).
_CALL = {"id": "call_1", "type": "function", "function": {"name": "calc", "arguments": '{"expr": "2+2"}'}}
MESSAGE_PROMPTS: list[tuple[str, list[list[dict[str, object]]]]] = [
    (
        "system_and_user",
        [
            [{"role": "system", "content": "You are a calculator."}, {"role": "user", "content": "What is 2+2?"}],
            [
                {"role": "system", "content": [{"type": "text", "text": "You are a calculator."}]},
                {"role": "user", "content": [{"type": "text", "text": "What is 2+2?"}], "tool_calls": None},
            ],
        ],
    ),
    ("user_only_non_ascii", [[{"role": "user", "content": "数学题: 🎲 + 1 = ?"}]]),
    (
        "tool_history",
        [
            [
                {"role": "user", "content": "2+2?"},
                {"role": "assistant", "content": "", "tool_calls": [_CALL]},
                {"role": "tool", "tool_call_id": "call_1", "content": "4"},
            ],
            [
                {"role": "user", "content": "2+2?"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": "call_1", "function": {"name": "calc", "arguments": {"expr": "2+2"}}}],
                },
                {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "4"}]},
            ],
        ],
    ),
    (
        "image_reference",
        [[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/a.png"}}, "Describe."]}]],
    ),
]


def message_prompt_vectors() -> list[dict[str, object]]:
    """Each message prompt's spellings, its canonical text, its id and the key of its first response."""
    vectors = []
    for name, spellings in MESSAGE_PROMPTS:
        canonical = prompt_text(spellings[0])
        assert all(prompt_text(spelling) == canonical for spelling in spellings), name
        base = xxhash.xxh64_hexdigest(canonical.encode())
        vectors.append(
            {
                "name": name,
                "spellings": spellings,
                "canonical": canonical,
                "base": base,
                "seed": "42",
                "sample_id": f"{base}/0",
                "sample_key": str(sample_key(42, f"{base}/0")),
            }
        )
    return vectors


def key_vectors() -> dict[str, object]:
    vectors = [
        {"version": version, "seed": str(seed), "sample_id": sid, "sample_key": str(sample_key(seed, sid, version))}
        for version in KEY_VERSIONS
        for seed in SEEDS
        for sid in IDS
    ]
    return {
        "description": (
            "sample_key(version, seed, sample_id) as otel_valgen/sampling.py defines it. "
            "Version 1: uint64 big-endian of the first 8 bytes of HMAC-SHA256(key = seed as 8 "
            "bytes big-endian, msg = UTF-8 sample_id), shifted right by 1. Version 2: "
            "mix64(id_hash(base) XOR seed_lane(seed, n)) >> 1, with base and n from the id's "
            "'/<index>' suffix. id_hash holds XXH64 (seed 0) of bases that are not 16 lowercase "
            "hex digits, mix64 the SplitMix64 finaliser's values and seed_lane the lanes "
            "(n = 0 .. 3) of each seed, split how version 2 reads an id: base and n (1 + the "
            "response index of '<base>/<index>' or '<base>/<index>@<tag>', else 0). seeds, words, "
            "keys and n are decimal strings (uint64). message_prompts: chat-message prompts, each "
            "in 'spellings' that must give it one id: 'canonical' is the compact JSON (keys "
            "sorted) of its GenAI messages, 'base' the 16 hex digits of XXH64 (seed 0) of its "
            "UTF-8, and 'sample_key' the version 2 key of 'sample_id' (its first response)."
        ),
        "vectors": vectors,
        "id_hash": [{"base": base, "hash": str(id_hash(base))} for base in HASHED_BASES],
        "mix64": [{"in": str(word), "out": str(mix64(word))} for word in MIX_INPUTS],
        "seed_lane": [{"seed": str(seed), "n": n, "lane": str(seed_lane(seed, n))} for seed in SEEDS for n in range(4)],
        "split": [{"sample_id": sid, "base": base, "n": str(n)} for sid, base, n in SPLITS],
        "message_prompts": message_prompt_vectors(),
    }


def k_rule_cases() -> dict[str, object]:
    """Which k a step keeps when its records (or calls) ask for different k, and what it keeps."""
    asked = [[64], [64, 8, 32], [8, 64], [32, 16, 16, 4], [5, 0, 5], [3, 3, 3]]
    rng = random.Random(20261201)
    arrivals = [(f"{rng.getrandbits(64):016x}/0", rng.choice([4, 8, 16])) for _ in range(40)]
    k: int | None = None
    for _, count in arrivals:
        k = step_k(k, count)
    assert k is not None
    chosen = bottom_k(((SortKey.of(sample_key(42, sid), sid), sid) for sid, _ in arrivals), k)
    records = [{"sample_id": sid, "sample_count": count} for sid, count in arrivals]
    return {
        "description": (
            "The k of a step is the smallest k asked for (step_k): 'asked' lists the k's in "
            "arrival order and 'k' the result. 'records' arrive in order with their "
            "valgen.sample_count (key version 2, seed 42); 'expected' are the kept ids, ascending."
        ),
        "asked": [{"asked": sequence, "k": min(sequence)} for sequence in asked],
        "records": records,
        "seed": "42",
        "k": k,
        "expected": [sid for _, sid in chosen],
    }


def bottom_k_cases() -> dict[str, object]:
    rng = random.Random(20261130)
    cases: list[dict[str, object]] = []

    # Synthetic keys with ties, to pin down the tie-break on sample_id bytes.
    tied = [("b/0", 5), ("a/0", 5), ("c/0", 1), ("a/1", 5), ("é/0", 5), ("z/0", 9)]
    for k in (0, 1, 3, 5, 10):
        chosen = bottom_k(((SortKey.of(key, sid), sid) for sid, key in tied), k)
        cases.append(
            {
                "name": f"ties_k{k}",
                "k": k,
                "records": [{"sample_id": sid, "sample_key": str(key)} for sid, key in tied],
                "expected": [sid for _, sid in chosen],
            }
        )

    # Keys computed from the seed, as the processor does for records that lack one: uids, and
    # ids derived from inputs (16 hex digits), under each key version.
    for version in KEY_VERSIONS:
        for seed, n, k in ((42, 50, 8), (7, 200, 64), (2**64 - 1, 30, 30), (0, 10, 64)):
            ids = [f"uid-{rng.randrange(10**9):09d}/{rng.randrange(4)}" for _ in range(n)]
            ids += [f"{rng.getrandbits(64):016x}/{rng.randrange(3)}" for _ in range(n)]
            ids = list(dict.fromkeys(ids))
            chosen = bottom_k(((SortKey.of(sample_key(seed, s, version), s), s) for s in ids), k)
            cases.append(
                {
                    "name": f"v{version}_seed{seed}_n{len(ids)}_k{k}",
                    "k": k,
                    "seed": str(seed),
                    "key_version": version,
                    "records": [{"sample_id": s} for s in ids],
                    "expected": [sid for _, sid in chosen],
                }
            )
    # Two parts (tags) answer the same 20 prompts once each, and one record arrives twice: the
    # 40 generations are 40 records (one key, two ids per prompt), the redelivery is one.
    parts_rng = random.Random(20261203)
    prompts = [f"{parts_rng.getrandbits(64):016x}" for _ in range(20)]
    ids = [f"{prompt}/0@{tag}" for tag in ("3c9a5e0d2b71", "e4f1a7c20b96") for prompt in prompts]
    arrivals = [*ids, ids[7]]
    parts_rng.shuffle(arrivals)
    for k in (40, 10):
        chosen = bottom_k(((SortKey.of(sample_key(42, sid), sid), sid) for sid in arrivals), k)
        cases.append(
            {
                "name": f"two_parts_answer_the_same_prompts_k{k}",
                "k": k,
                "seed": "42",
                "key_version": 2,
                "records": [{"sample_id": sid} for sid in arrivals],
                "expected": [sid for _, sid in chosen],
            }
        )
    return {
        "description": (
            "For each case keep the k records with the smallest (sample_key, UTF-8 bytes of "
            "sample_id); expected lists their ids in that ascending order. Records without "
            "sample_key get sample_key(key_version, seed, sample_id)."
        ),
        "cases": cases,
    }


# Score statistics: (name, end records as (source, instance, score count, score sum) with None
# for a record without them, expected (count, sum, mean) with None for an absent attribute).
# The expected figures are worked out by hand; score_stats_cases checks the Python rule agrees.
_SCORE_CASES: list[tuple[str, list[tuple[str, str, int | None, float | None]], tuple[object, object, object]]] = [
    ("one_source", [("trainer", "i-1", 4, 2.0)], (4, 2.0, 0.5)),
    ("two_sources", [("trainer", "i-1", 3, 1.5), ("rollouter", "i-2", 1, 0.25)], (4, 1.75, 0.4375)),
    ("one_name_two_instances", [("worker", "i-1", 2, 1.0), ("worker", "i-2", 2, 0.5)], (4, 1.5, 0.375)),
    (
        "cumulative_parts_keep_the_largest_count",
        [("task", "i-1", 1, 0.5), ("task", "i-1", 3, 2.0), ("task", "i-1", 6, 2.5)],
        (6, 2.5, 2.5 / 6),
    ),
    (
        "negative_scores_pair_count_and_sum",
        [("task", "i-1", 2, -1.0), ("task", "i-1", 4, -3.5)],
        (4, -3.5, -0.875),
    ),
    ("equal_counts_keep_the_larger_sum", [("task", "i-1", 3, 1.0), ("task", "i-1", 3, 2.0)], (3, 2.0, 2.0 / 3)),
    ("no_valid_score", [("trainer", "i-1", 0, 0.0)], (0, 0.0, None)),
    (
        "sources_without_statistics",
        [("trainer", "i-1", None, None), ("rollouter", "i-2", None, None)],
        (None, None, None),
    ),
    ("with_and_without_statistics", [("trainer", "i-1", None, None), ("rollouter", "i-2", 2, 1.0)], (2, 1.0, 0.5)),
    ("sum_is_exact", [("a", "i-1", 1, 1e16), ("b", "i-1", 1, 1.0), ("c", "i-1", 1, -1e16)], (3, 1.0, 1.0 / 3)),
    (
        "sum_is_exact_past_an_intermediate_overflow",
        [("a", "i-1", 1, 1e308), ("b", "i-1", 1, 1e308), ("c", "i-1", 1, -1e308)],
        (3, 1e308, 1e308 / 3),
    ),
    ("sum_overflows", [("a", "i-1", 1, 1e308), ("b", "i-1", 1, 1e308)], (2, None, None)),
]


def score_stats_cases() -> dict[str, object]:
    """The step's score statistics from its sources' end records, as the summary carries them."""
    cases: list[dict[str, object]] = []
    for name, ends, (count, total, mean) in _SCORE_CASES:
        records = [
            {"source": source, "instance": instance, "seen": 10, "emitted": 0}
            | ({"score_count": n, "score_sum": value} if n is not None else {})
            for source, instance, n, value in ends
        ]
        for order in (ends, ends[::-1]):
            (step,) = select_steps(
                EndRecord("r", 1, source, instance, 10, 0, score_count=n, score_sum=value)
                for source, instance, n, value in order
            )
            assert (step.score_count, step.score_sum, step.score_mean) == (count, total, mean), name
        cases.append(
            {
                "name": name,
                "end_records": records,
                "expected": {"score_count": count, "score_sum": total, "score_mean": mean},
            }
        )
    return {
        "description": (
            "Each case: the valgen.validation.end records of one step (source, service.instance.id, "
            "valgen.seen, valgen.emitted, and valgen.score.count / valgen.score.sum when present), in "
            "any order; expected: the valgen.score.count, valgen.score.sum and valgen.score.mean of "
            "the step summary, null when the attribute is absent. A source's repeated end records are "
            "cumulative: the (count, sum) of the one with the largest count counts (a tie: the larger "
            "sum). The step's count adds the sources' counts; its sum is their sums added exactly, then "
            "rounded to the nearest double (absent when that overflows); mean = sum / count, absent "
            "when count is 0. Sources without the attributes are left out; all of them absent: no "
            "attribute at all."
        ),
        "cases": cases,
    }


def _figures(
    count: int, turns: int, most: int, calls: dict[str, int], errors: int, turn_limit: int, length: int
) -> dict[str, object]:
    return {
        "count": count,
        "turns.sum": turns,
        "turns.max": most,
        "tool_calls.sum": sum(calls.values()),
        "tool_calls.by_name": calls,
        "tool_errors": errors,
        "turn_limit": turn_limit,
        "length_limit": length,
    }


def _rewards(prefix: str, trajectories: int, values: list[float], last: float | None = None) -> dict[str, object]:
    """The end record's keys of one reward column (tool_rewards, turn_scores) over ``values``."""
    out: dict[str, object] = {
        f"{prefix}.trajectories": trajectories,
        f"{prefix}.count": len(values),
        f"{prefix}.sum": sum(values),
        f"{prefix}.min": min(values),
        f"{prefix}.max": max(values),
    }
    return out | ({f"{prefix}.last.sum": last} if last is not None else {})


_TRAJECTORY_CASES: list[tuple[str, list[tuple[str, int, dict[str, object] | None]]]] = [
    ("one_source", [("a", 10, _figures(10, 31, 5, {"calc": 20}, 1, 2, 1))]),
    (
        "two_sources_add_up_and_max",
        [
            ("a", 10, _figures(10, 31, 5, {"calc": 20}, 1, 2, 1)),
            ("b", 6, _figures(6, 30, 9, {"calc": 3, "search": 7}, 0, 1, 0)),
        ],
    ),
    (
        "repeated_end_records_the_largest_seen_counts",
        [
            ("a", 4, _figures(4, 8, 3, {"calc": 4}, 0, 0, 0)),
            ("a", 10, _figures(10, 31, 5, {"calc": 20}, 1, 2, 1)),
            ("b", 6, _figures(6, 30, 9, {"search": 7}, 0, 1, 0)),
        ],
    ),
    ("a_source_without_figures", [("a", 10, _figures(10, 20, 2, {}, 0, 0, 0)), ("b", 5, None)]),
    ("none", [("a", 10, None), ("b", 5, None)]),
    (
        "per_data_source",
        [
            (
                "a",
                10,
                _figures(10, 31, 5, {"calc": 20}, 1, 2, 1)
                | {
                    "by_data_source": {
                        "gsm8k": _figures(6, 18, 5, {"calc": 12}, 1, 1, 0),
                        "math": _figures(4, 13, 4, {"calc": 8}, 0, 1, 1),
                    }
                },
            ),
            (
                "b",
                6,
                _figures(6, 30, 9, {"search": 7}, 0, 1, 0)
                | {"by_data_source": {"math": _figures(6, 30, 9, {"search": 7}, 0, 1, 0)}},
            ),
        ],
    ),
    (
        # .min the smallest, .max the largest, the rest added up; a source without rewards adds none
        "rewards_min_max_and_sums",
        [
            (
                "a",
                4,
                _figures(4, 12, 4, {"calc": 6}, 0, 0, 0)
                | _rewards("tool_rewards", 3, [1.0, 0.5, -0.5, 0.0, 0.25, 0.25])
                | _rewards("turn_scores", 2, [0.0, 1.0, 0.5, 1.0], last=1.5),  # (0, 1, .5) and (1,)
            ),
            ("b", 2, _figures(2, 4, 2, {"search": 2}, 0, 0, 0) | _rewards("tool_rewards", 2, [-1.0, -0.25])),
            ("c", 3, _figures(3, 3, 1, {}, 0, 0, 0)),
        ],
    ),
    (
        "rewards_per_data_source",
        [
            (
                "a",
                3,
                _figures(3, 6, 2, {"calc": 3}, 0, 0, 0)
                | _rewards("turn_scores", 2, [0.5, 1.0, 0.25], last=1.25)
                | {
                    "by_data_source": {
                        "chat": _figures(2, 4, 2, {"calc": 2}, 0, 0, 0)
                        | _rewards("turn_scores", 2, [0.5, 1.0, 0.25], last=1.25),
                        "math": _figures(1, 2, 2, {"calc": 1}, 0, 0, 0),
                    }
                },
            ),
            (
                "b",
                2,
                _figures(2, 4, 2, {"calc": 2}, 0, 0, 0)
                | _rewards("turn_scores", 1, [-0.5], last=-0.5)
                | {
                    "by_data_source": {
                        "chat": _figures(2, 4, 2, {"calc": 2}, 0, 0, 0) | _rewards("turn_scores", 1, [-0.5], last=-0.5),
                    }
                },
            ),
        ],
    ),
    (
        "values_of_another_type_are_left_out",
        [
            ("a", 10, {"count": 2, "turns.sum": 4, "turns.max": 3, "tool_errors": "many", "flag": True}),
            ("b", 5, {"count": 1, "turns.sum": 1, "turns.max": 1, "tool_errors": 1, "tool_calls.by_name": {"calc": 1}}),
        ],
    ),
]


def trajectory_cases() -> dict[str, object]:
    """The step's figures over every trajectory from its sources' end records, as the summary carries them."""
    cases: list[dict[str, object]] = []
    for name, ends in _TRAJECTORY_CASES:
        records = [
            {"source": source, "instance": f"i-{source}", "seen": seen, "emitted": 0}
            | ({"trajectories": figures} if figures is not None else {})
            for source, seen, figures in ends
        ]
        results = []
        for order in (ends, ends[::-1]):
            ends_read = (EndRecord("r", 1, s, f"i-{s}", seen, 0, trajectories=figures) for s, seen, figures in order)
            (step,) = select_steps(ends_read)
            results.append(step.trajectories)
        assert results[0] == results[1], name
        cases.append({"name": name, "end_records": records, "expected": results[0]})
    return {
        "description": (
            "Each case: the valgen.validation.end records of one step (source, service.instance.id, "
            "valgen.seen, valgen.emitted, and valgen.trajectories when present), in any order; "
            "expected: the summary's valgen.trajectories, null when absent. A source's figures are "
            "those of its end record with the largest seen. The ended sources' figures merge key by "
            "key: a key ending in '.max' takes the largest value, one ending in '.min' the smallest, "
            "a map merges, any other number adds up, other values are left out; then turns.mean = "
            "turns.sum / count, tool_calls.mean = tool_calls.sum / count, turn_limit.share and "
            "length_limit.share = each / count, and for P in tool_rewards and turn_scores (present "
            "only when some source sent them): P.mean = P.sum / P.count, P.per_trajectory = P.sum / "
            "P.trajectories, P.last.mean = P.last.sum / P.trajectories, for the step and for each "
            "entry of by_data_source (the figures per data source of a step that keeps k per data "
            "source)."
        ),
        "cases": cases,
    }


def _mismatch_of(seed: int, n: int, source: str | None = None, zeros: int = 0) -> dict[str, object] | None:
    """The valgen.mismatch of ``n`` responses with figures drawn from ``seed`` (``zeros`` exact matches)."""
    rng = random.Random(seed)
    figures = MismatchFigures()
    for i in range(n):
        mean_abs = 0.0 if i < zeros else rng.lognormvariate(-4, 1.2)
        response = {"tokens": rng.randint(1, 4096), "mean_abs": mean_abs, "max_abs": mean_abs * rng.uniform(1, 40)}
        response |= {"kl": mean_abs * mean_abs / 2, "masked": rng.choice([0.0, 0.0, rng.random() / 10])}
        figures.add(response, source if source is not None else None)
    return figures.attribute()


def mismatch_cases() -> dict[str, object]:
    """The step's distribution of its responses' per-token figures from its sources' end records."""
    ends_of: list[tuple[str, list[tuple[str, int, dict[str, object] | None]]]] = [
        ("one_source", [("a", 300, _mismatch_of(1, 300))]),
        ("two_sources_merge", [("a", 200, _mismatch_of(2, 200)), ("b", 90, _mismatch_of(3, 90, zeros=30))]),
        ("a_sources_latest_end_counts", [("a", 40, _mismatch_of(4, 40)), ("a", 120, _mismatch_of(4, 120))]),
        (
            "by_data_source",
            [("a", 100, _mismatch_of(5, 100, "gsm8k")), ("b", 100, _mismatch_of(6, 100, "math"))],
        ),
        ("one_response", [("a", 1, _mismatch_of(7, 1))]),
        ("three_responses_ranks_matter", [("a", 2, _mismatch_of(8, 2)), ("b", 1, _mismatch_of(9, 1))]),
        ("none_reported", [("a", 10, None), ("b", 10, None)]),
    ]
    cases: list[dict[str, object]] = []
    for name, ends in ends_of:
        records = [
            {"source": source, "instance": f"i-{source}", "seen": seen, "emitted": 0}
            | ({"mismatch": figures} if figures is not None else {})
            for source, seen, figures in ends
        ]
        results = []
        for order in (ends, ends[::-1]):
            ends_read = (EndRecord("r", 1, s, f"i-{s}", seen, 0, mismatch=figures) for s, seen, figures in order)
            (step,) = select_steps(ends_read)
            results.append(step.mismatch)
        cases.append({"name": name, "end_records": records, "expected": results[0]})
    return {
        "description": (
            "Each case: the end records of one step (source, service.instance.id, valgen.seen, "
            "valgen.emitted, and valgen.mismatch when present), in any order; expected: the summary's "
            "valgen.mismatch (without the buckets), null when absent. A source's figures are those of its "
            "end record with the largest seen. The ended sources' figures merge as valgen.trajectories "
            "do (a key ending in '.max' takes the largest value, a map merges key by key, any other "
            "number adds up); then, "
            "for each figure F of mean_abs, max_abs, kl, masked: F.mean = F.sum / count, and F.p50, "
            "F.p90, F.p99 = the value of the bucket holding the nearest-rank quantile (rank ceil(q * "
            "n) over F.buckets in bucket order, 'z' first), 2 * gamma**i / (gamma + 1) for bucket i "
            "(0 for 'z'), at most F.max; gamma = (1 + 0.01) / (1 - 0.01). The same for each entry of "
            "by_data_source. Floats compare to 1e-12 relative (pow differs by an ulp between libraries)."
        ),
        "gamma": GAMMA,
        "cases": cases,
    }


def _sorted_view(records: list[dict[str, str]], k: int, seed: int) -> list[str]:
    """The group view by sorting: every response of the k smallest prompts, ranked.

    An oracle written apart from ``sampling.GroupView``: the sample ids, by prompt, then response.
    """

    def key(record: dict[str, str], field: str, id_field: str) -> tuple[int, bytes]:
        own = record.get(field)
        value = int(own) if own is not None else sample_key(seed, record[id_field])
        return value, record[id_field].encode()

    prompts = sorted({key(r, "prompt_key", "prompt_id") for r in records})[:k]
    kept = {(key(r, "prompt_key", "prompt_id"), key(r, "sample_key", "sample_id"), r["sample_id"]) for r in records}
    return [sid for prompt, _, sid in sorted(kept) if prompt in prompts]


def group_view_cases() -> dict[str, object]:
    """Rollout groups: the bottom-k prompts with every response of each (GroupView)."""
    rng = random.Random(20261202)
    cases: list[dict[str, object]] = []

    def case(name: str, k: int, records: list[dict[str, str]], seed: int = 42) -> None:
        view: GroupView[str] = GroupView(k)  # the implementation must agree with the oracle
        for r in records:
            prompt, order = (
                SortKey.of(
                    int(r["prompt_key"]) if "prompt_key" in r else sample_key(seed, r["prompt_id"]), r["prompt_id"]
                ),
                SortKey.of(
                    int(r["sample_key"]) if "sample_key" in r else sample_key(seed, r["sample_id"]), r["sample_id"]
                ),
            )
            view.offer(prompt, order, r["sample_id"])
        expected = _sorted_view(records, k, seed)
        assert [sid for _, _, sid in view.items()] == expected, name
        prompt_of = {r["sample_id"]: r["prompt_id"] for r in records}
        prompts = list(dict.fromkeys(prompt_of[sid] for sid in expected))
        cases.append(
            {
                "name": name,
                "k": k,
                "seed": str(seed),
                "records": records,
                "expected": expected,
                "expected_prompts": prompts,
            }
        )

    # Prompt keys given, with a tie broken by the prompt id's bytes; responses interleaved, one
    # delivered twice, a prompt evicted after two of its responses were kept.
    tied = [("b", 5), ("a", 5), ("c", 1), ("z", 9), ("é", 5)]
    records = []
    for i in range(3):
        for prompt, pkey in tied:
            records.append(
                {
                    "prompt_id": prompt,
                    "prompt_key": str(pkey),
                    "sample_id": f"{prompt}/{i}",
                    "sample_key": str(rng.randrange(100)),
                }
            )
    records.append(dict(records[0]))
    for k in (0, 1, 2, 3, 10):
        case(f"ties_k{k}", k, records)
    late_small = [{"prompt_id": "late", "prompt_key": "0", "sample_id": "late/0", "sample_key": "7"}]
    case("a_late_prompt_evicts_a_whole_group", 2, records + late_small)

    # Keys computed from the seed (as the processor does when a record lacks them): GRPO batches
    # of 8 prompts x n responses, prompt ids as verl's uids or as 16 hex digits.
    for seed, prompts, n, k in ((42, 40, 8, 4), (7, 100, 4, 16), (2**64 - 1, 12, 16, 12), (0, 5, 2, 64)):
        ids = [f"uid-{rng.randrange(10**9):09d}" for _ in range(prompts // 2)]
        ids += [f"{rng.getrandbits(64):016x}" for _ in range(prompts - prompts // 2)]
        records = [{"prompt_id": p, "sample_id": f"{p}/{i}"} for i in range(n) for p in ids]
        rng.shuffle(records)
        case(f"seed{seed}_p{prompts}_n{n}_k{k}", k, records, seed)
    return {
        "description": (
            "Rollout groups (valgen.kind = rollout): keep the k prompts with the smallest "
            "(prompt_key, UTF-8 bytes of prompt_id) and every response of each; a response "
            "whose (sample_key, sample_id) is already kept is kept once. expected lists the "
            "kept sample ids ranked: prompts ascending, each prompt's responses ascending by "
            "(sample_key, UTF-8 bytes of sample_id); expected_prompts the kept prompt ids, ascending. "
            "Records without prompt_key get sample_key(2, seed, prompt_id), without sample_key "
            "sample_key(2, seed, sample_id). Keys and seeds are decimal strings."
        ),
        "cases": cases,
    }


def _as_rollout(record: dict[str, str]) -> dict[str, str]:
    """A validation generation as the group view sees it: its own prompt, with one response."""
    out = dict(record)
    out.setdefault("prompt_id", record["sample_id"])
    if "sample_key" in record:
        out.setdefault("prompt_key", record["sample_key"])
    return out


def _sorted_by_data_source(records: list[dict[str, str]], k: int, seed: int) -> tuple[list[str], bool]:
    """K per data source by sorting (an oracle apart from ``DataSourceViews``): the ranked ids, and whether split."""
    split = all(r.get("sample_by") == SAMPLE_BY_DATA_SOURCE for r in records)
    if not split:
        return _sorted_view(records, k, seed), False
    sources = sorted({r.get("data_source", "") for r in records}, key=lambda s: s.encode())
    ranked = []
    for source in sources:
        ranked += _sorted_view([r for r in records if r.get("data_source", "") == source], k, seed)
    return ranked, True


def data_source_cases() -> dict[str, object]:
    """K per (step, data source): validation and rollout groups, split and joined."""
    rng = random.Random(20261205)
    cases: list[dict[str, object]] = []

    def case(name: str, kind: str, k: int, records: list[dict[str, str]], seed: int = 42) -> None:
        as_views = records if kind == "rollout" else [_as_rollout(r) for r in records]
        views: DataSourceViews[str] = DataSourceViews(k)  # the implementation must agree with the oracle
        for r in as_views:
            views.ask(r.get("sample_by") == SAMPLE_BY_DATA_SOURCE)
            prompt = SortKey.of(
                int(r["prompt_key"]) if "prompt_key" in r else sample_key(seed, r["prompt_id"]), r["prompt_id"]
            )
            order = SortKey.of(
                int(r["sample_key"]) if "sample_key" in r else sample_key(seed, r["sample_id"]), r["sample_id"]
            )
            views.offer(r.get("data_source", ""), prompt, order, r["sample_id"])
        expected, split = _sorted_by_data_source(as_views, k, seed)
        assert [sid for _, _, sid in views.items()] == expected, name
        assert bool(views.split) == split, name
        source_of = {r["sample_id"]: r.get("data_source", "") for r in records}
        kept = Counter(source_of[sid] for sid in expected)
        cases.append(
            {
                "name": name,
                "kind": kind,
                "k": k,
                "seed": str(seed),
                "records": records,
                "expected": expected,
                "split": split,
                "expected_kept_by_data_source": dict(sorted(kept.items())) if split else {},
            }
        )

    by_source = {"gsm8k": 9, "math": 4, "é-set": 6, "zeta": 1}
    validation = [
        {"sample_id": f"{source}-{i}/0", "data_source": source, "sample_by": SAMPLE_BY_DATA_SOURCE}
        for source, n in by_source.items()
        for i in range(n)
    ]
    validation.append({"sample_id": "no-source-0/0", "sample_by": SAMPLE_BY_DATA_SOURCE})
    validation.append({"sample_id": "no-source-1/0", "sample_by": SAMPLE_BY_DATA_SOURCE})
    rng.shuffle(validation)
    validation.append(dict(validation[3]))  # delivered twice
    for k in (0, 1, 3, 5, 64):
        case(f"validation_k{k}", "validation", k, validation)
    tied = [
        {"sample_id": sid, "sample_key": "7", "data_source": source, "sample_by": SAMPLE_BY_DATA_SOURCE}
        for sid, source in (("b/0", "x"), ("a/0", "y"), ("c/0", "x"), ("é/0", "y"), ("d/0", "x"))
    ]
    case("tied_keys_break_by_id_within_each_data_source", "validation", 2, tied)
    joined = [dict(r) for r in validation]
    del joined[len(joined) // 2]["sample_by"]
    case("one_generation_per_step_joins_the_group", "validation", 3, joined)
    first_step = [dict(r) for r in validation]
    first_step[0]["sample_by"] = "step"
    case("a_first_generation_per_step_keeps_it_joined", "validation", 3, first_step)
    late_join = [dict(r) for r in validation] + [{"sample_id": "plain/0", "data_source": "math"}]
    case("a_last_generation_per_step_joins_it", "validation", 4, late_join)

    rollouts = []
    for source, prompts in (("gsm8k", 5), ("math", 3), ("", 2)):
        for _ in range(prompts):
            prompt = f"{source or 'none'}-uid-{rng.randrange(10**9):09d}"
            for i in range(3):
                r = {"prompt_id": prompt, "sample_id": f"{prompt}/{i}", "sample_by": SAMPLE_BY_DATA_SOURCE}
                if source:
                    r["data_source"] = source
                rollouts.append(r)
    rng.shuffle(rollouts)
    for k in (1, 2, 4):
        case(f"rollout_k{k}", "rollout", k, rollouts, seed=7)
    rollout_joined = [dict(r) for r in rollouts]
    rollout_joined[-1]["sample_by"] = "step"
    case("rollout_joined_by_one_response", "rollout", 2, rollout_joined, seed=7)
    return {
        "description": (
            "k per (step, data source) (valgen.sample_by = data_source). A group is split when every "
            "generation of it has valgen.sample_by = data_source; a record with another value or "
            "without the attribute joins it for good. Split: each data source (valgen.data_source, "
            "absent is the empty string) keeps its own group view of k (validation: a generation is "
            "its own prompt, so the bottom-k of its generations; rollouts: k prompts with every "
            "response, as group_view.json); expected ranks the data sources by the UTF-8 bytes of "
            "their names, each one's kept ids ranked as group_view.json. Joined: the group view of "
            "the whole group, as bottom_k.json and group_view.json. expected_kept_by_data_source "
            "counts the kept generations of each data source of a split group. Records without "
            "sample_key get sample_key(2, seed, sample_id), rollouts without prompt_key "
            "sample_key(2, seed, prompt_id). Keys and seeds are decimal strings."
        ),
        "cases": cases,
    }


def _score_of(record: dict[str, object], field: str = "score") -> float | None:
    """A record's finite score (or ``field``): numbers, and "nan", "inf", "-inf" that stand for doubles JSON lacks."""
    value = record.get(field)
    score = float(value) if isinstance(value, int | float | str) else None
    return score if score is not None and math.isfinite(score) else None


def _sorted_extremes(records: list[dict[str, object]], k: int, seed: int) -> tuple[list[list[object]], int]:
    """The keyed picks and the extremes by sorting (an oracle apart from ``DataSourceViews``).

    Returns ``[sample id, slots]`` ranked, and the group's n (the smallest asked, absent is 0).
    """
    n = min(int(str(r.get("extremes", 0))) for r in records)
    split = all(r.get("sample_by") == SAMPLE_BY_DATA_SOURCE for r in records)
    unique = {str(r["sample_id"]): r for r in records}  # a record delivered twice is one

    def key(r: dict[str, object]) -> tuple[int, bytes]:
        sid, own = str(r["sample_id"]), r.get("sample_key")
        return (int(str(own)) if own is not None else sample_key(seed, sid), sid.encode())

    def source(r: dict[str, object]) -> str:
        return str(r.get("data_source", "")) if split else ""

    sources = sorted({source(r) for r in unique.values()}, key=lambda s: s.encode())
    members = {s: [r for r in unique.values() if source(r) == s] for s in sources}
    keyed = [str(r["sample_id"]) for s in sources for r in sorted(members[s], key=key)[:k]]
    lowest: dict[str, list[str]] = {}
    highest: dict[str, list[str]] = {}
    for s in sources:
        scored = [(score + 0.0, key(r), str(r["sample_id"])) for r in members[s] if (score := _score_of(r)) is not None]
        lowest[s] = [sid for _, _, sid in sorted(scored)[:n]]
        highest[s] = [sid for _, _, sid in sorted(scored, key=lambda e: (-e[0], e[1]))[:n]]
    low_ids = {sid for ids in lowest.values() for sid in ids}
    high_ids = {sid for ids in highest.values() for sid in ids}

    def slots(sid: str) -> list[str]:
        if not n:
            return []
        members_of = (("keyed", set(keyed)), ("lowest", low_ids), ("highest", high_ids))
        return [slot for slot, ids in members_of if sid in ids]

    ranked = list(keyed)
    for s in sources:
        for sid in (*lowest[s], *highest[s]):
            if sid not in ranked:
                ranked.append(sid)
    return [[sid, slots(sid)] for sid in ranked], n


def extremes_cases() -> dict[str, object]:
    """The best and the worst: n lowest- and n highest-scored generations beside the k keyed picks."""
    rng = random.Random(20261206)
    cases: list[dict[str, object]] = []

    def case(name: str, k: int, records: list[dict[str, object]], seed: int = 42) -> None:
        expected, n = _sorted_extremes(records, k, seed)
        first = records[0]
        views: DataSourceViews[str] = DataSourceViews(k, extremes=int(str(first.get("extremes", 0))))
        for r in records:  # the implementation must agree with the oracle
            views.ask(r.get("sample_by") == SAMPLE_BY_DATA_SOURCE, int(str(r.get("extremes", 0))))
            sid = str(r["sample_id"])
            own = r.get("sample_key")
            order = SortKey.of(int(str(own)) if own is not None else sample_key(seed, sid), sid)
            views.offer(str(r.get("data_source", "")), order, order, sid, _score_of(r))
        got = [[sid, list(slots) if views.extremes else []] for sid, slots in views.ranked()]
        assert got == expected, (name, got, expected)
        cases.append({"name": name, "k": k, "n": n, "seed": str(seed), "records": records, "expected": expected})

    def plain(i: int, score: object, **more: object) -> dict[str, object]:
        return {"sample_id": f"g{i:02d}/0", "score": score, "extremes": 2, **more}

    scores = [round(rng.uniform(0, 1), 1) for _ in range(20)]  # one decimal: ties in score
    records = [plain(i, score) for i, score in enumerate(scores)]
    for k in (0, 3, 20):
        case(f"k{k}_n2", k, records)
    case("ties_in_score_break_by_sample_key", 2, [plain(i, 0.5, sample_key=str(90 - i)) for i in range(6)])
    signed = [plain(0, -0.0, sample_key="5"), plain(1, 0.0, sample_key="3"), plain(2, 0.0, sample_key="9")]
    case("minus_zero_is_zero", 0, [*signed, plain(3, 1.0, sample_key="1")])
    invalid = [plain(i, value) for i, value in enumerate(["nan", "inf", "-inf", None, 0.25, 0.75, 0.5])]
    case("scores_that_are_not_finite_or_absent_are_left_out", 1, invalid)
    case("fewer_scored_than_n_fill_both_slots", 1, [plain(0, 0.3), plain(1, 0.9), plain(2, None)])
    asked = [dict(r) for r in records]
    asked[7]["extremes"] = 1
    case("the_smallest_n_asked_wins", 3, asked)
    off = [dict(r) for r in records]
    del off[-1]["extremes"]
    case("a_record_without_extremes_turns_them_off", 3, off)
    case("a_record_delivered_twice_is_one", 2, [*records, dict(records[4])])
    by_source = [
        plain(i, scores[i], data_source=("gsm8k", "math", "aime")[i % 3], sample_by=SAMPLE_BY_DATA_SOURCE)
        for i in range(20)
    ]
    case("split_by_data_source_each_keeps_its_own", 2, by_source)
    joined = [dict(r) for r in by_source]
    del joined[11]["sample_by"]
    case("joined_by_one_generation_per_step", 2, joined)
    return {
        "description": (
            "The best and the worst (valgen.extremes = n) of validation groups. n is the smallest "
            "valgen.extremes of the group's generations (absent is 0). Beside the k keyed picks "
            "(bottom_k.json; k per data source when split, data_source.json) each data source "
            "keeps the n lowest by (score, sample_key, UTF-8 bytes of sample_id) and the n highest "
            "by (-score, sample_key, sample_id) of its generations with a finite score (-0.0 is "
            "0.0; the strings nan, inf and -inf stand for those doubles, which are not finite, and "
            "are left out, as an absent score). expected lists [sample id, slots] ranked: the keyed "
            "picks first, as without extremes, then, data source by data source, its lowest "
            "ascending and its highest descending not listed yet; slots is the subset of keyed, "
            "lowest, highest the record fills, in that order (empty when n is 0: no valgen.slots). "
            "A record delivered twice is one. Records without sample_key get sample_key(2, seed, "
            "sample_id). Keys and seeds are decimal strings."
        ),
        "cases": cases,
    }


def _sorted_mismatched(records: list[dict[str, object]], k: int, seed: int) -> tuple[list[list[object]], int]:
    """The keyed prompts and the most mismatched responses by sorting (an oracle apart from ``DataSourceViews``).

    Returns ``[sample id, slots]`` ranked, and the group's n (the smallest asked, absent is 0).
    """
    n = min(int(str(r.get("mismatched", 0))) for r in records)
    split = all(r.get("sample_by") == SAMPLE_BY_DATA_SOURCE for r in records)
    unique = {str(r["sample_id"]): r for r in records}  # a record delivered twice is one

    def source(r: dict[str, object]) -> str:
        return str(r.get("data_source", "")) if split else ""

    def key(r: dict[str, object]) -> tuple[int, bytes]:
        sid, own = str(r["sample_id"]), r.get("sample_key")
        return (int(str(own)) if own is not None else sample_key(seed, sid), sid.encode())

    keyed: list[str] = []
    most: list[str] = []
    for s in sorted({source(r) for r in unique.values()}, key=lambda s: s.encode()):
        members = [r for r in unique.values() if source(r) == s]
        keyed += _sorted_rate_view(members, k, seed)[0]
        ranked = sorted(
            (-kl + 0.0, key(r), str(r["sample_id"])) for r in members if (kl := _score_of(r, "kl")) is not None
        )
        most += [sid for _, _, sid in ranked[:n]]
    ranked_ids = keyed + [sid for sid in dict.fromkeys(most) if sid not in keyed]

    def slots(sid: str) -> list[str]:
        return [slot for slot, ids in (("keyed", keyed), ("mismatched", most)) if sid in ids] if n else []

    return [[sid, slots(sid)] for sid in ranked_ids], n


def _mismatched_views(
    records: list[dict[str, object]], k: int, seed: int, split: bool | None = None
) -> list[list[object]]:
    """``DataSourceViews``' ranked ``[sample id, slots]`` of rollout records (``split`` None: as the records ask)."""

    def order(r: dict[str, object], field: str, id_field: str) -> SortKey:
        own, rid = r.get(field), str(r[id_field])
        return SortKey.of(int(str(own)) if own is not None else sample_key(seed, rid), rid)

    asked = [int(str(r.get("mismatched", 0))) for r in records]
    views: DataSourceViews[str] = DataSourceViews(k, mismatched=asked[0] if split is None else min(asked))
    if split is not None:
        views.ask(split)
    for r in records:
        if split is None:
            views.ask(r.get("sample_by") == SAMPLE_BY_DATA_SOURCE, mismatched=int(str(r.get("mismatched", 0))))
        if "sample_rate" in r:
            views.lower_rate(float(str(r["sample_rate"])))
        prompt, response = order(r, "prompt_key", "prompt_id"), order(r, "sample_key", "sample_id")
        views.offer(str(r.get("data_source", "")), prompt, response, str(r["sample_id"]), None, _score_of(r, "kl"))
    return [[sid, list(slots) if views.mismatched else []] for sid, slots in views.ranked()]


def _mismatched_case(name: str, k: int, records: list[dict[str, object]], seed: int) -> dict[str, object]:
    """One case of ``mismatched.json``, the oracle checked against ``DataSourceViews`` (whole, and parts merged)."""
    expected, n = _sorted_mismatched(records, k, seed)
    got = _mismatched_views(records, k, seed)  # the implementation must agree with the oracle
    assert got == expected, (name, got, expected)
    entry: dict[str, object] = {"name": name, "k": k, "n": n, "seed": str(seed), "records": records}
    parts = sorted({int(str(r["part"])) for r in records if "part" in r})
    if parts:  # each part closed on its own, then their kept records merged as their summaries say
        kept_parts = []
        for part in parts:
            members = [r for r in records if r.get("part") == part]
            kept_parts.append(_sorted_mismatched(members, k, seed)[0])
            assert _mismatched_views(members, k, seed) == kept_parts[-1], (name, part)
        by_id = {str(r["sample_id"]): r for r in records}
        union = [by_id[str(sid)] for kept in kept_parts for sid, _ in kept]
        split = all(r.get("sample_by") == SAMPLE_BY_DATA_SOURCE for r in records)
        assert _mismatched_views(union, k, seed, split) == expected, (name, "merged")
        entry["part_expected"] = kept_parts
    entry["expected"] = expected
    return entry


def mismatched_cases() -> dict[str, object]:
    """The most mismatched: the n rollout responses of the largest KL beside the k keyed prompts."""
    rng = random.Random(20261207)
    cases: list[dict[str, object]] = []

    def case(name: str, k: int, records: list[dict[str, object]]) -> None:
        cases.append(_mismatched_case(name, k, records, 42))

    def response(p: int, i: int, kl: object, **more: object) -> dict[str, object]:
        return {"prompt_id": f"p{p:02d}", "sample_id": f"p{p:02d}/{i}", "kl": kl, "mismatched": 2, **more}

    kls = [round(rng.uniform(0, 0.02), 3) for _ in range(24)]  # three decimals: ties in KL
    records = [response(p, i, kls[p * 3 + i]) for p in range(8) for i in range(3)]
    rng.shuffle(records)
    case("off_when_n_is_0", 2, [{**r, "mismatched": 0} for r in records])
    for k in (0, 2, 8):
        case(f"k{k}_n2", k, records)
    tied = [response(p, i, 0.5, sample_key=str(90 - 2 * p - i)) for p in range(3) for i in range(2)]
    case("ties_in_kl_break_by_sample_key", 1, tied)
    signed = [
        response(0, 0, -0.0, sample_key="5"),
        response(0, 1, 0.0, sample_key="3"),
        response(1, 0, 0.0, sample_key="9"),
    ]
    case("minus_zero_is_zero", 0, [*signed, response(2, 0, 1e-3, sample_key="1")])
    invalid = [response(i, 0, value) for i, value in enumerate(["nan", "inf", "-inf", None, 0.25, 0.75, 0.5])]
    del invalid[3]["kl"]  # absent, as a response without per-token data
    invalid.append(response(7, 0, None))  # null: no KL either
    case("kl_not_finite_or_absent_is_left_out", 1, invalid)
    case("fewer_with_a_kl_than_n", 0, [response(0, 0, 0.3), response(0, 1, None), response(1, 0, None)])
    asked = [dict(r) for r in records]
    asked[7]["mismatched"] = 1
    case("the_smallest_n_asked_wins", 2, asked)
    off = [dict(r) for r in records]
    del off[-1]["mismatched"]
    case("a_record_without_mismatched_turns_it_off", 2, off)
    case("a_record_delivered_twice_is_one", 2, [*records, dict(records[4])])
    by_source = [
        {
            **r,
            "data_source": ("gsm8k", "math", "aime")[int(str(r["prompt_id"])[1:]) % 3],
            "sample_by": SAMPLE_BY_DATA_SOURCE,
        }
        for r in records
    ]
    case("split_by_data_source_each_keeps_its_own", 1, by_source)
    joined = [dict(r) for r in by_source]
    del joined[11]["sample_by"]
    case("joined_by_one_response_per_step", 1, joined)
    case("under_a_rate_the_mismatched_need_not_be_eligible", 3, [{**r, "sample_rate": 0.25} for r in records])
    kls = [round(rng.uniform(0, 0.05), 3) for _ in range(32)]
    parts = [
        response(p, i, kls[p * 4 + i], mismatched=3, part=(p + i) % 2, data_source=("a", "b")[p % 2])
        for p in range(8)
        for i in range(4)
    ]
    case("a_merge_of_two_partial_groups", 2, parts)
    case("a_merge_of_two_partial_groups_split", 1, [{**r, "sample_by": SAMPLE_BY_DATA_SOURCE} for r in parts])
    return {
        "description": (
            "The most mismatched (valgen.mismatched = n) of rollout groups. n is the smallest "
            "valgen.mismatched of the group's records (absent is 0). Beside the k keyed prompts, each "
            "with every response (group_view.json; k per data source when split, data_source.json; "
            "eligible prompts only under a sample_rate, rate.json) each data source keeps the n "
            "responses with the largest kl (the record's valgen.mismatch.kl), by (-kl, sample_key, "
            "UTF-8 bytes of sample_id), of its responses with a finite kl (-0.0 is 0.0; the strings "
            "nan, inf and -inf stand for those doubles, which are not finite, and are left out, as an "
            "absent or null kl): each response alone, not its prompt's other responses, and whatever "
            "the rate. expected lists [sample id, slots] ranked: the keyed prompts' responses first, as "
            "without it, then, data source by data source, its most mismatched not listed yet, the "
            "largest kl first; slots is the subset of keyed, mismatched the record fills, in that "
            "order (empty when n is 0: no valgen.slots). A record delivered twice is one. Records "
            "with a part were sent to two samplers, each closing a partial group: part_expected[i] "
            "is what part i keeps alone, and the union of the parts' kept records, merged (split "
            "when every record asks for it, the parts' smallest n), keeps expected. Records "
            "without prompt_key / sample_key get sample_key(2, seed, prompt_id / sample_id). Keys "
            "and seeds are decimal strings."
        ),
        "cases": cases,
    }


def _distinct_oracle(sketches: list[list[int]], m: int) -> tuple[list[int], int, bool]:
    """The merged sketch, count and whether it is estimated, by sorting the union."""
    union = sorted(set().union(*map(set, sketches)))[:m]
    if len(union) < m:
        return union, len(union), False
    return union, (m - 1) * 2**63 // (union[-1] + 1), True


def distinct_prompts_cases() -> dict[str, object]:
    rng = random.Random(20261203)
    cases: list[dict[str, object]] = []

    def case(name: str, m: int, seen_by_source: list[list[int]]) -> None:
        sketches = [sorted(set(keys))[:m] for keys in seen_by_source]  # what each source sends
        merged, count, estimated = _distinct_oracle(sketches, m)
        cases.append(
            {"name": name, "m": m, "sketches": sketches, "merged": merged, "count": count, "estimated": estimated}
        )

    # The split-group step: 64 prompts, each answered by all three sources (two calls each).
    prompts = [sample_key(7, f"p{i:02d}") for i in range(64)]
    case("split_groups_three_sources_one_prompt_set", 1024, [prompts, prompts[::-1], prompts[:40] + prompts[40:]])
    case("disjoint_sources_add_up", 1024, [prompts[:20], prompts[20:45], prompts[45:]])
    case("a_redelivered_end_record_counts_once", 1024, [prompts[:30], prompts[:30]])
    case("no_prompt", 1024, [[]])
    small = [rng.getrandbits(63) for _ in range(40)]
    case("m8_seven_keys_are_exact", 8, [small[:7]])
    case("m8_eight_keys_are_an_estimate", 8, [small[:8]])
    case("m8_saturated_sources_merge", 8, [small[:25], small[15:], small[5:30]])
    big = [rng.getrandbits(63) for _ in range(3000)]
    case("m1024_two_saturated_sources", 1024, [big[:2000], big[1000:]])
    return {
        "description": (
            "Distinct prompts of a rollout step (otel_valgen.distinct, distinct.go): each source sends its "
            "m smallest distinct prompt keys (sketches, ascending); merged is the m smallest distinct keys "
            "of their union; count is len(merged) when below m (estimated false), else "
            "floor((m - 1) * 2**63 / (merged[m-1] + 1)) (estimated true)."
        ),
        "cases": cases,
    }


def _rate_threshold_by_fractions(rate: float) -> int:
    """floor(rate * 2**63), computed with exact fractions (not as ``sampling.rate_threshold`` does)."""
    return int(Fraction(rate) * 2**63)


def _sorted_rate_view(records: list[dict[str, object]], k: int, seed: int) -> tuple[list[str], list[str], int]:
    """The watch-list view by sorting: (kept sample ids ranked, kept prompt ids, prompts over the cap).

    An oracle written apart from ``sampling.GroupView``: the smallest rate of the records (none:
    every prompt) gives the threshold; the eligible prompts are those whose key is below it; the
    k smallest eligible are kept with every response, the others are over the cap.
    """

    def key(record: dict[str, object], field: str, id_field: str) -> tuple[int, bytes]:
        own = record.get(field)
        value = int(str(own)) if own is not None else sample_key(seed, str(record[id_field]))
        return value, str(record[id_field]).encode()

    rates = [float(str(r["sample_rate"])) for r in records if "sample_rate" in r]
    threshold = _rate_threshold_by_fractions(min(rates)) if rates else 2**63
    eligible = sorted(
        {key(r, "prompt_key", "prompt_id") for r in records if key(r, "prompt_key", "prompt_id")[0] < threshold}
    )
    prompts = eligible[:k]
    kept = {
        (key(r, "prompt_key", "prompt_id"), key(r, "sample_key", "sample_id"), str(r["sample_id"])) for r in records
    }
    ids = [sid for prompt, _, sid in sorted(kept) if prompt in prompts]
    return ids, [prompt.decode() for _, prompt in prompts], len(eligible) - len(prompts)


_RATES = [1.0, 0.5, 0.25, 4 / 256, 0.1, 1 / 3, 0.999999, 1 - 2**-53, 2**-57, 2**-63, 2**-64, 1e-300, 5e-324]


def rate_cases() -> dict[str, object]:
    """The watch-list (``rollout_rate``, ``valgen.sample_rate``): prompts below a threshold, capped at k."""
    rng = random.Random(20261204)
    cases: list[dict[str, object]] = []
    for rate in _RATES:  # the implementation's float arithmetic must agree with the fractions
        assert rate_threshold(rate) == _rate_threshold_by_fractions(rate), rate

    def case(name: str, k: int, records: list[dict[str, object]], seed: int = 42) -> None:
        expected, prompts, over_cap = _sorted_rate_view(records, k, seed)
        view: GroupView[str] = GroupView(k)  # the implementation must agree with the oracle
        for r in records:
            view.lower_rate(float(str(r["sample_rate"])) if "sample_rate" in r else None)
            prompt = SortKey.of(
                int(str(r["prompt_key"])) if "prompt_key" in r else sample_key(seed, str(r["prompt_id"])),
                str(r["prompt_id"]),
            )
            order = SortKey.of(
                int(str(r["sample_key"])) if "sample_key" in r else sample_key(seed, str(r["sample_id"])),
                str(r["sample_id"]),
            )
            view.offer(prompt, order, str(r["sample_id"]))
        assert [sid for _, _, sid in view.items()] == expected, name
        cases.append(
            {
                "name": name,
                "k": k,
                "seed": str(seed),
                "records": records,
                "expected": expected,
                "expected_prompts": prompts,
                "prompts_over_cap": over_cap,
            }
        )

    def rec(prompt: str, pkey: int | None, i: int, rate: float | None, source: str = "s0") -> dict[str, object]:
        r: dict[str, object] = {"prompt_id": prompt, "sample_id": f"{prompt}/{i}@{source}", "source": source}
        if pkey is not None:
            r["prompt_key"] = str(pkey)
            r["sample_key"] = str(rng.randrange(1000))
        if rate is not None:
            r["sample_rate"] = rate
        return r

    # Keys at the threshold's edges (rate 4/256: threshold 2**57), with a tie on the key below it.
    t = _rate_threshold_by_fractions(4 / 256)
    edges = [("below-a", t - 1), ("below-b", t - 1), ("at", t), ("above", t + 1), ("zero", 0), ("top", 2**63 - 1)]
    records = [rec(p, key, i, 4 / 256) for i in range(2) for p, key in edges]
    case("threshold_edges", 10, records)
    case("threshold_edges_cap_2", 2, records)
    # Rate 1 keeps every prompt (the largest key too), up to k.
    records = [rec(p, key, 0, 1.0) for p, key in edges]
    case("rate_1_keeps_every_prompt", 10, records)
    case("rate_1_is_the_bottom_k", 3, records)
    # More prompts under the threshold than k: the k smallest are kept, the rest are over the cap.
    prompts = [f"p{i:04d}" for i in range(64)]
    records = [rec(p, None, i, 0.25) for i in range(2) for p in prompts]
    rng.shuffle(records)
    case("cap_overflow", 4, records, seed=7)
    case("no_overflow", 64, records, seed=7)
    # Two parts (sources) answer overlapping prompts, one record is delivered twice: the union of
    # the parts' views cut to the rate and k is the view of the whole.
    records = [rec(p, None, 0, 0.25, "s0") for p in prompts[:40]] + [rec(p, None, 0, 0.25, "s1") for p in prompts[20:]]
    records.append(dict(records[5]))
    rng.shuffle(records)
    case("two_parts_merged_and_a_redelivery", 8, records, seed=13)
    # Records disagree: the smallest rate wins, whichever arrives first; a record without a rate is rate 1.
    mixed = [rec(p, None, 0, rate) for p, rate in zip(prompts[:48], [0.5, None, 0.25] * 16, strict=True)]
    case("smallest_rate_wins", 8, mixed, seed=3)
    case("smallest_rate_wins_arriving_last", 8, mixed[::-1], seed=3)
    # Uncapped, the prompts kept under a larger rate are cut when a smaller one arrives (last).
    case("a_smaller_rate_cuts_the_kept_prompts", 64, mixed, seed=3)
    late = [rec(p, None, 0, 0.5) for p in prompts[:32]] + [rec(prompts[40], None, 0, 0.125)]
    case("a_smaller_rate_arriving_last_cuts_the_kept_prompts", 64, late, seed=3)
    # No record carries a rate: the group view, exactly k prompts.
    case("no_rate_is_the_group_view", 5, [rec(p, None, 0, None) for p in prompts[:30]], seed=3)
    return {
        "description": (
            "The watch-list of rollouts (valgen.sample_rate): a group's rate is the smallest "
            "valgen.sample_rate of its records (absent: 1); its threshold is floor(rate * 2**63), "
            "'thresholds' lists them (decimal strings), and a prompt is eligible when its key is "
            "below it. The group keeps the k eligible prompts with the smallest (prompt_key, UTF-8 "
            "bytes of prompt_id), every response of each, a response already kept kept once. "
            "expected: the kept sample ids ranked as in group_view.json; expected_prompts the kept "
            "prompt ids ascending; prompts_over_cap how many eligible prompts k left out. Records "
            "without prompt_key / sample_key get sample_key(2, seed, prompt_id / sample_id); "
            "'source' names the part that sent the record."
        ),
        "thresholds": [{"rate": rate, "threshold": str(_rate_threshold_by_fractions(rate))} for rate in _RATES],
        "cases": cases,
    }


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, payload in (
        ("key_vectors.json", key_vectors()),
        ("bottom_k.json", bottom_k_cases()),
        ("k_rule.json", k_rule_cases()),
        ("score_stats.json", score_stats_cases()),
        ("group_view.json", group_view_cases()),
        ("rate.json", rate_cases()),
        ("distinct_prompts.json", distinct_prompts_cases()),
        ("data_source.json", data_source_cases()),
        ("extremes.json", extremes_cases()),
        ("mismatched.json", mismatched_cases()),
        ("trajectories.json", trajectory_cases()),
        ("mismatch.json", mismatch_cases()),
    ):
        path = OUT / name
        path.write_text(json.dumps(payload, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
