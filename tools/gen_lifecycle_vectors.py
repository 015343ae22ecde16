#!/usr/bin/env python3
"""Writes the step-lifecycle vectors (testdata/lifecycle/*.json); see README.md.

Only the event lists are expanded by code. Every expected value below is written by hand from
the rules (the step lifecycle's spec), never computed from an implementation; the comments
show the reasoning. Run: python tools/gen_lifecycle_vectors.py
"""

import json
import pathlib

HERE = pathlib.Path(__file__).resolve().parent.parent / "testdata" / "lifecycle"
RUN, STEP = "r", 20
# Sampling keys, given explicitly so that no suite computes them.
KEYS_A = {"a/0": 50, "a/1": 10, "a/2": 70, "a/3": 30, "a/4": 90}
KEYS_B = {"b/0": 20, "b/1": 60, "b/2": 5, "b/3": 80, "b/4": 40}


def rec(t, event, source, attempt="L1.1", instance=None, **fields):
    r = {
        "event": event,
        "run_id": RUN,
        "step": STEP,
        "source": source,
        "instance": instance or "i-" + source,
        "timestamp_ms": t,
    }
    if attempt is not None:
        r["attempt"] = attempt
    r.update(fields)
    return {"t_ms": t, "record": r}


def start(t, source, **kw):
    return rec(t, "valgen.validation.start", source, **kw)


def progress(t, source, seen, **kw):
    return rec(t, "valgen.validation.progress", source, seen=seen, **kw)


def end(t, source, seen, emitted, **kw):
    return rec(t, "valgen.validation.end", source, seen=seen, emitted=emitted, **kw)


def gens(t, keys, source, **kw):
    return [rec(t, "valgen.generation", source, sample_id=i, sample_key=k, **kw) for i, k in keys.items()]


def invalid_gen(t, source, **kw):
    """A generation without valgen.sample_id: the sampler drops it as invalid (dropped.invalid)."""
    return rec(t, "valgen.generation", source, **kw)


def tick(t):
    return {"t_ms": t, "tick": True}


def drops(sampled=0, source=0, invalid=0, undelivered=0, not_ended=0):
    """The summary's valgen.dropped.<reason> values (their sum is valgen.dropped = seen - kept)."""
    return {
        "sampled": sampled,
        "source": source,
        "invalid": invalid,
        "undelivered": undelivered,
        "not_ended": not_ended,
    }


def group(
    attempt,
    reason,
    closed_at,
    seen,
    kept,
    ended,
    missing,
    attempt_start,
    announced,
    dropped,
    concurrent=0,
    unhooked=(),
    **extra,
):
    assert seen == len(kept) + sum(dropped.values()), "seen = kept + dropped"
    g = {
        "run_id": RUN,
        "step": STEP,
        "attempt": attempt,
        "closed_reason": reason,
        "closed_at_ms": closed_at,
        "seen": seen,
        "kept_ids": kept,
        "sources_ended": ended,
        "sources_missing": missing,
        "late": extra.pop("late", 0),
        "attempt_start_ms": attempt_start,
        "sources_announced": announced,
        "dropped": dropped,
        "attempts_concurrent": concurrent,
        "sources_unhooked": list(unhooked),
    }
    g.update(extra)
    return g


def config(late="drop", max_ms=10000):
    return {"count": 4, "decision_wait_ms": 1000, "max_step_duration_ms": max_ms, "late_records": late}


def shown(attempt):
    return [{"run_id": RUN, "step": STEP, "attempt": attempt}]


VECTORS = []

# (a) A ends at 200 (t0); B sends progress every 500 ms and ends at 3200 = t0 + 3 * wait.
# Activity never pauses for 1000 ms (last gaps: 700->1200 ... 2700->3200 are 500 ms), so no
# tick closes the step; at 3200 both known sources have ended and delivered their emitted 5:
# complete. No sources_expected, so it does not close at once: a third source could still
# announce itself. It closes `complete` at the first tick with decision_wait of silence since
# its last record (3200): not at 4199 (999 ms), at 4200 (1000 ms); the 4500 tick finds nothing.
# Bottom-4 of keys {50,10,70,30,90} u {20,60,5,80,40} = 5 b/2, 10 a/1, 20 b/0, 30 a/3.
# seen = 12 (A's end) + 15 (B's end) = 27. Balance: A left 12 - 5 = 7 out in its presampler and
# 3 of its 5 were ranked out (2 kept); B 15 - 5 = 10 and 3: sampled 23; 4 + 23 = 27.
VECTORS.append(
    {
        "name": "slow_source_progress",
        "description": (
            "A ends at t0=200; B keeps sending progress and ends at t0 + 3*decision_wait: one complete "
            "group with both sources, closed decision_wait after B's end (no sources_expected)."
        ),
        "config": config(),
        "events": [
            start(0, "a"),
            start(0, "b"),
            *gens(100, KEYS_A, "a"),
            end(200, "a", 12, 5),
            progress(700, "b", 3),
            tick(1100),
            progress(1200, "b", 6),
            progress(1700, "b", 9),
            tick(2000),
            progress(2200, "b", 12),
            progress(2700, "b", 15),
            tick(3000),
            *gens(3200, KEYS_B, "b"),
            end(3200, "b", 15, 5),
            tick(4199),
            tick(4200),
            tick(4500),
        ],
        "expected": {
            "groups": [group("L1.1", "complete", 4200, 27, ["b/2", "a/1", "b/0", "a/3"], 2, [], 0, 2, drops(23))],
            "shown": shown("L1.1"),
        },
    }
)

# (b) As (a) without progress and without sources_expected: last activity is A's end at 200,
# B (known from its start) has not ended, so not complete (the new complete-after-silence rule
# does not apply); silence closes it by wait at 200 + 1000.
# B's 5 generations and its end at 3200 are late: 6 late records, reported at the tick of 3300.
# Kept = bottom-4 of A = 10 a/1, 30 a/3, 50 a/0, 70 a/2; seen = 12 (A's end) + 0 (B delivered nothing).
# Balance: A's 12 - 5 presampled out + 1 ranked out = sampled 8. B's late part is not in the
# summary: B had not ended and reported nothing (no progress), so it counts 0 seen.
VECTORS.append(
    {
        "name": "slow_source_no_progress",
        "description": (
            "As slow_source_progress without progress records: the step closes by wait at 1200 and B's part is late."
        ),
        "config": config(),
        "events": [
            start(0, "a"),
            start(0, "b"),
            *gens(100, KEYS_A, "a"),
            end(200, "a", 12, 5),
            tick(1100),
            tick(1200),
            *gens(3200, KEYS_B, "b"),
            end(3200, "b", 15, 5),
            tick(3300),
        ],
        "expected": {
            "groups": [
                group(
                    "L1.1",
                    "wait",
                    1200,
                    12,
                    ["a/1", "a/3", "a/0", "a/2"],
                    1,
                    ["b@i-b"],
                    0,
                    2,
                    drops(8),
                    late=6,
                    late_reports=[6],
                )
            ],
            "shown": shown("L1.1"),
        },
    }
)

# (c) sources_expected = 2: B announces and dies. One of two promised sources ended, so silence
# does not close the step; max_step_duration (5000 after the first record at 0) does, at 5000.
# Balance as in (b): A's 7 presampled out + 1 ranked out; B saw nothing it reported.
VECTORS.append(
    {
        "name": "expected_source_dies",
        "description": (
            "sources_expected=2, B announces then sends nothing: the step closes at max_step_duration with B missing."
        ),
        "config": config(max_ms=5000),
        "events": [
            start(0, "a", sources_expected=2),
            start(0, "b", sources_expected=2),
            *gens(100, KEYS_A, "a"),
            end(200, "a", 12, 5, sources_expected=2),
            tick(1200),
            tick(3000),
            tick(4999),
            tick(5000),
        ],
        "expected": {
            "groups": [
                group("L1.1", "max_duration", 5000, 12, ["a/1", "a/3", "a/0", "a/2"], 1, ["b@i-b"], 0, 2, drops(8))
            ],
            "shown": shown("L1.1"),
        },
    }
)

# (d) One source streams 60 generations in 3 batches (100, 2600, 5000): the pauses between
# batches (2500, 2400 ms) exceed decision_wait, but progress records every 800 ms keep the step
# open (largest silence 800 < 1000). It is complete at the end record (5100, emitted 60, its
# only known source ended) but has no sources_expected, so it closes `complete` after
# decision_wait of silence: not at the 6000 tick (900 ms), at the 6100 tick (1000 ms).
# Keys: a/i -> 1000 + 7*i except five small ones in all batches: a/59=1, a/23=3, a/5=7,
# a/31=9, a/44=11. The true bottom-4 of all 60: a/59, a/23, a/5, a/31 (a/44=11 is 5th).
# Balance: no presampling (emitted 60 = seen), 56 ranked out.
SMALL = {"a/5": 7, "a/23": 3, "a/31": 9, "a/44": 11, "a/59": 1}


def batch(t, lo, hi):
    keys = {f"a/{i}": SMALL.get(f"a/{i}", 1000 + 7 * i) for i in range(lo, hi)}
    return gens(t, keys, "a")


VECTORS.append(
    {
        "name": "long_streamed_validation",
        "description": (
            "60 generations in 3 batches separated by pauses longer than decision_wait, with progress "
            "between them: nothing is cut; complete decision_wait after the end (no sources_expected)."
        ),
        "config": config(max_ms=20000),
        "events": [
            start(0, "a"),
            *batch(100, 0, 20),
            progress(900, "a", 20),
            tick(1000),
            progress(1700, "a", 20),
            tick(2000),
            progress(2500, "a", 20),
            *batch(2600, 20, 40),
            tick(3000),
            progress(3400, "a", 40),
            tick(4000),
            progress(4200, "a", 40),
            tick(4900),
            *batch(5000, 40, 60),
            end(5100, "a", 60, 60),
            tick(6000),
            tick(6100),
        ],
        "expected": {
            "groups": [group("L1.1", "complete", 6100, 60, ["a/59", "a/23", "a/5", "a/31"], 1, [], 0, 1, drops(56))],
            "shown": shown("L1.1"),
        },
    }
)

# (e) Attempt L1.1 sends 5 generations at 100 and goes silent (killed): wait closes it at 1100,
# incomplete (a@i-a never ended; seen = 5 delivered). The resumed launch's attempt L2.1 starts
# at 3000 (its start record is stamped 2990: attempt_start is the smallest record time), sends
# a/0..a/5 (a/5 key 1) and ends at 3200: a new group, complete; not late. Without
# sources_expected it closes `complete` at the first tick at least decision_wait after its last
# record (3200 + 1000 = 4200): the tick at 4500.
# shown: the latest attempt_start among complete ones = L2.1.
# Balance: L1.1's source never ended and sent no progress: seen = the 5 that arrived, 1 ranked
# out. L2.1: 6 emitted, 6 arrived, 2 ranked out. Not a split launch: L2.1's records (2990 to
# 3200) all come after L1.1's (0 to 100), so neither counts the other as concurrent.
KEYS_A6 = {**KEYS_A, "a/5": 1}
VECTORS.append(
    {
        "name": "resume_after_silence",
        "description": (
            "Attempt L1.1 partially seen then silent (wait, incomplete); the resumed attempt L2.1 "
            "completes: two groups, L2.1 shown."
        ),
        "config": config(),
        "events": [
            start(0, "a"),
            *gens(100, KEYS_A, "a"),
            tick(1000),
            tick(1100),
            {"t_ms": 3000, "record": {**start(2990, "a", attempt="L2.1", instance="i-a2")["record"]}},
            *gens(3100, KEYS_A6, "a", attempt="L2.1", instance="i-a2"),
            end(3200, "a", 6, 6, attempt="L2.1", instance="i-a2"),
            tick(4500),
        ],
        "expected": {
            "groups": [
                group("L1.1", "wait", 1100, 5, ["a/1", "a/3", "a/0", "a/2"], 0, ["a@i-a"], 0, 1, drops(1)),
                group("L2.1", "complete", 4500, 6, ["a/5", "a/1", "a/3", "a/0"], 1, [], 2990, 1, drops(2)),
            ],
            "shown": shown("L2.1"),
        },
    }
)

# (f) L2.1 starts at 500 while L1.1 is still inside its wait (L1.1's last record at 550).
# They never merge: L2.1 is complete at 700 with its own 5 (its only source ended; merged, L1.1's
# unended source would block completion and seen would be 9); L1.1 closes by wait at 550 + 1000.
# No sources_expected, so L2.1 closes `complete` after decision_wait of silence since its end:
# open at the 1000, 1549, 1550 ticks (300, 849, 850 ms), closed at the 1700 tick (1000 ms).
# Closing order: L1.1 (wait, 1550), then L2.1 (complete, 1700).
# L1.1's last generation (a/3) is stamped 450, before L2.1 started, and delivered at 550: the
# earlier launch stopped before the resumed one began, so this is a resume, not a split
# launch: attempts_concurrent 0 on both (record times [0, 450] and [500, 700] do not overlap).
# Balance: L1.1 never ended, 4 arrived, 4 kept; L2.1 5 of 5 arrived, 1 ranked out.
KEYS_A3 = {k: KEYS_A[k] for k in ("a/0", "a/1", "a/2")}
VECTORS.append(
    {
        "name": "resume_within_wait",
        "description": "Two attempts of one step overlapping in time stay two groups.",
        "config": config(),
        "events": [
            start(0, "a"),
            *gens(100, KEYS_A3, "a"),
            start(500, "a", attempt="L2.1", instance="i-a2"),
            {"t_ms": 550, "record": gens(450, {"a/3": 30}, "a")[0]["record"]},
            *gens(600, KEYS_A, "a", attempt="L2.1", instance="i-a2"),
            end(700, "a", 5, 5, attempt="L2.1", instance="i-a2"),
            tick(1000),
            tick(1549),
            tick(1550),
            tick(1700),
        ],
        "expected": {
            "groups": [
                group("L1.1", "wait", 1550, 4, ["a/1", "a/3", "a/0", "a/2"], 0, ["a@i-a"], 0, 1, drops()),
                group("L2.1", "complete", 1700, 5, ["a/1", "a/3", "a/0", "a/2"], 1, [], 500, 1, drops(1)),
            ],
            "shown": shown("L2.1"),
        },
    }
)

# (g) late_records: forward. sources_expected = 1 (on start and end) keeps this scenario about
# records after an immediate close: without it the complete step would stay open until 1200 and
# the records of 1000 would join it. The step completes at 200 (one known source, ended, 4 of 4,
# E = 1 reached) and, E being set, closes at once.
# At 1000 two generations and a progress record arrive: 3 late; at the 1500 tick one late
# report says 3. At 2000 one more generation: the 2500 tick reports 4 (cumulative).
# The 3 late generations go on tagged valgen.late=true; the progress record does not.
# Balance at the close: 4 seen, 4 emitted, 4 kept: nothing dropped (the late ones come after).
VECTORS.append(
    {
        "name": "late_records_forward",
        "description": (
            "Records after the close (sources_expected=1: complete closes at once): counted per group in "
            "debounced valgen.step.late records; late generations forwarded, tagged."
        ),
        "config": config(late="forward"),
        "events": [
            start(0, "a", sources_expected=1),
            *gens(100, {k: KEYS_A[k] for k in ("a/0", "a/1", "a/2", "a/3")}, "a"),
            end(200, "a", 4, 4, sources_expected=1),
            tick(500),
            *gens(1000, {"a/4": 90, "a/5": 5}, "a"),
            progress(1000, "a", 6),
            tick(1500),
            tick(1800),
            *gens(2000, {"a/6": 1}, "a"),
            tick(2500),
        ],
        "expected": {
            "groups": [
                group(
                    "L1.1",
                    "complete",
                    200,
                    4,
                    ["a/1", "a/3", "a/0", "a/2"],
                    1,
                    [],
                    0,
                    1,
                    drops(),
                    late=4,
                    late_reports=[3, 4],
                )
            ],
            "forwarded_ids": ["a/4", "a/5", "a/6"],
            "shown": shown("L1.1"),
        },
    }
)

# (h) Legacy records (old SDK): no attempt, no start, an end with sources_expected=1.
# Attempt "" ; complete at 100 (one source ended, 3 of 3, E=1 reached); E being set, it closes
# at once, at 100, not after decision_wait.
VECTORS.append(
    {
        "name": "legacy_no_attempt",
        "description": 'Records without valgen.attempt belong to attempt "" and complete as before.',
        "config": config(),
        "events": [
            *gens(0, {k: KEYS_A[k] for k in ("a/0", "a/1", "a/2")}, "a", attempt=None),
            end(100, "a", 3, 3, attempt=None, sources_expected=1),
            tick(2000),
        ],
        "expected": {
            "groups": [group("", "complete", 100, 3, ["a/1", "a/0", "a/2"], 1, [], 0, 0, drops())],
            "shown": shown(""),
        },
    }
)

# (i) Block-less parts: source A is a process calling log_generations(step=20)
# twice without a block; each call is a part that ends itself, with the cumulative counts of
# (step, source, attempt) in its end record, and the second call sends only the generations
# that entered A's cumulative bottom-4. B validates in a block. A's first end record (seen 3,
# emitted 3, stamped 150) is delivered late, at 900 (a retried or resent batch), after its
# second one (seen 6, emitted 5): a source's end records keep their largest counts, whatever
# the order. Part 1 sends a/0=50, a/1=10, a/2=70 (its 3 are its bottom-4); part 2 logs a/3=30,
# a/4=90, a/5=5: the bottom-4 of A's six is {5, 10, 30, 50}, so part 2 sends a/3 and a/5 only.
# At 650 both sources have ended and delivered what they announced (A: 5 of 5, B: 2 of 2):
# complete, no sources_expected, so it closes after decision_wait of silence since the last
# record (900): not at the 1899 tick, at 1900. Kept = bottom-4 of {50, 10, 70, 30, 5} and
# {b/0=20, b/1=60} = 5 a/5, 10 a/1, 20 b/0, 30 a/3; seen = 6 (A's largest end) + 2 (B's).
# A sent one start record: later parts of the same attempt do not announce again.
# Balance: A saw 6 and emitted 5 (1 left out by its presampler); of its 5 that arrived, 3 are
# kept (a/5, a/1, a/3) and 2 ranked out. B's 2 arrived, 1 kept (b/0), 1 ranked out: sampled
# 1 + 2 + 1 = 4, and 4 kept + 4 dropped = 8 = seen.
VECTORS.append(
    {
        "name": "blockless_parts",
        "description": (
            "A source's block-less calls are parts of one attempt, each ended with cumulative counts; "
            "its first end record arrives last: the largest counts count, the step is complete and exact."
        ),
        "config": config(),
        "events": [
            start(0, "a"),
            start(0, "b"),
            *gens(100, {k: KEYS_A[k] for k in ("a/0", "a/1", "a/2")}, "a"),
            *gens(300, {k: KEYS_B[k] for k in ("b/0", "b/1")}, "b"),
            end(400, "b", 2, 2),
            *gens(600, {"a/3": 30, "a/5": 5}, "a"),
            end(650, "a", 6, 5),
            {"t_ms": 900, "record": end(150, "a", 3, 3)["record"]},
            tick(1100),
            tick(1899),
            tick(1900),
        ],
        "expected": {
            "groups": [group("L1.1", "complete", 1900, 8, ["a/5", "a/1", "b/0", "a/3"], 2, [], 0, 2, drops(4))],
            "shown": shown("L1.1"),
        },
    }
)

# (j) The balance, reason by reason (count 4, no sources_expected, one attempt).
# A saw 20: dropped 2 itself (bad input), presampled the other 18 down to 6 and sent them: a/0=50,
# a/1=10, a/2=70, a/3=30, one without valgen.sample_id (invalid at the sampler) and one that
# never arrives. B sent b/0=20, b/1=60, b/2=5 (no presampling, seen 3), b/2 delivered twice.
# C sends c/0=15 as it logs, a progress record saying 40 seen at 500, then dies (no end).
# Nothing after 500 and C never ends: wait closes the step at the 1500 tick.
# Kept: bottom-4 of the valid arrivals {50, 10, 70, 30} u {20, 60, 5} u {15} = 5 b/2, 10 a/1,
# 15 c/0, 20 b/0 (A 1, B 2, C 1).
# A: seen 20 = 1 kept + 2 source + 1 invalid + 1 undelivered + sampled 15 (12 left out by its
#    presampler, and a/0, a/2, a/3 ranked out).
# B: 3 = 2 kept + 1 sampled (b/1); the second copy of b/2 changes nothing.
# C: not ended: seen = max(1 arrived, 40 reported) = 40 = 1 kept + 39 not_ended.
# seen 63 = 4 kept + sampled 16 + source 2 + invalid 1 + undelivered 1 (= valgen.missing) + not_ended 39.
VECTORS.append(
    {
        "name": "balance_by_reason",
        "description": (
            "Each reason of the summary's balance (seen = kept + dropped): presampled and ranked out, "
            "dropped at the source, invalid at the sampler, undelivered, seen by a source that never ended."
        ),
        "config": config(),
        "events": [
            start(0, "a"),
            start(0, "b"),
            start(0, "c"),
            *gens(100, {k: KEYS_A[k] for k in ("a/0", "a/1", "a/2", "a/3")}, "a"),
            invalid_gen(100, "a"),
            end(200, "a", 20, 6, dropped=2),
            *gens(300, {"b/0": 20, "b/1": 60, "b/2": 5}, "b"),
            *gens(300, {"c/0": 15}, "c"),
            *gens(350, {"b/2": 5}, "b"),
            end(400, "b", 3, 3),
            progress(500, "c", 40),
            tick(1499),
            tick(1500),
        ],
        "expected": {
            "groups": [
                group(
                    "L1.1",
                    "wait",
                    1500,
                    63,
                    ["b/2", "a/1", "c/0", "b/0"],
                    2,
                    ["c@i-c"],
                    0,
                    3,
                    drops(sampled=16, source=2, invalid=1, undelivered=1, not_ended=39),
                )
            ],
            "shown": shown("L1.1"),
        },
    }
)

# (k) One launch split into attempts: two processes of one job (torchrun ranks without a shared
# launch id) each formed their own attempt. pA.1 (rank0@i-0) records from 0 to 300, pB.1
# (rank1@i-1) from 10 to 320: their times overlap and they share no source. Each is complete
# at its end (no sources_expected) and closes decision_wait after its last record: pA.1 at the
# 1319 tick (1019 ms after 300), pB.1 at the 1320 tick (not at 1319: 999 ms after 320). pA.1
# counts the still open pB.1, pB.1 the closed pA.1: attempts_concurrent 1 on both.
# Kept: pA.1 bottom-4 of {50, 10, 70, 30, 90} = a/1, a/3, a/0, a/2 (a/4 ranked out);
# pB.1 of {20, 60, 5, 80, 40} = b/2, b/0, b/4, b/1 (b/3 ranked out).
# shown: both complete, pB.1 started later (10 > 0).
VECTORS.append(
    {
        "name": "split_launch",
        "description": (
            "Two processes of one launch, each its own attempt: concurrent and without a common source, "
            "each summary counts the other in valgen.attempts_concurrent."
        ),
        "config": config(),
        "events": [
            start(0, "rank0", attempt="pA.1", instance="i-0"),
            start(10, "rank1", attempt="pB.1", instance="i-1"),
            *gens(100, KEYS_A, "rank0", attempt="pA.1", instance="i-0"),
            *gens(150, KEYS_B, "rank1", attempt="pB.1", instance="i-1"),
            end(300, "rank0", 5, 5, attempt="pA.1", instance="i-0"),
            end(320, "rank1", 5, 5, attempt="pB.1", instance="i-1"),
            tick(1319),
            tick(1320),
        ],
        "expected": {
            "groups": [
                group("pA.1", "complete", 1319, 5, ["a/1", "a/3", "a/0", "a/2"], 1, [], 0, 1, drops(1), concurrent=1),
                group("pB.1", "complete", 1320, 5, ["b/2", "b/0", "b/4", "b/1"], 1, [], 10, 1, drops(1), concurrent=1),
            ],
            "shown": [{"run_id": RUN, "step": STEP, "attempt": "pB.1"}],
        },
    }
)

# (l) Only an older part's end record: A's block-less first part (a/0=50, a/1=10, a/2=70) ends with
# seen 3, emitted 3 at 150; its second part's generations a/3=30, a/5=5 arrive at 600 (within the
# wait), and its end record never does. The group is complete at 150 (3 of 3 arrived) and stays
# so; no sources_expected: it closes decision_wait after 600, at the 1600 tick.
# Kept: bottom-4 of {50, 10, 70, 30, 5} = a/5, a/1, a/3, a/0: 4 kept from a source whose end
# record says it emitted 3. So it emitted at least 4 and saw at least 4: seen 4. The 5 arrivals
# exceed that emitted 4: the extra one is taken for a redelivery (the sampler cannot tell a
# copy from a record the end record does not count), so nothing is dropped: seen 4 = kept 4.
VECTORS.append(
    {
        "name": "older_end_record_only",
        "description": (
            "A source's only end record is an older part's (emitted 3) while 4 of its records are kept: "
            "the summary takes it to have emitted and seen at least those 4."
        ),
        "config": config(),
        "events": [
            start(0, "a"),
            *gens(100, {k: KEYS_A[k] for k in ("a/0", "a/1", "a/2")}, "a"),
            end(150, "a", 3, 3),
            *gens(600, {"a/3": 30, "a/5": 5}, "a"),
            tick(1599),
            tick(1600),
        ],
        "expected": {
            "groups": [group("L1.1", "complete", 1600, 4, ["a/5", "a/1", "a/3", "a/0"], 1, [], 0, 1, drops())],
            "shown": shown("L1.1"),
        },
    }
)

# (m) Sources that ran verl's own validation table. t's part is the unhooked one a
# process sends when its trainer subclass overrides the hooked method: start and end marked
# valgen.integration=unhooked, no generation. b's block was routed (start: verl/0.9.1) but its own
# table ran after all: only its end record is marked. a is an ordinary source. No sources_expected:
# complete at 250 (the last end), closed at the 1250 tick (not at 1249: 999 ms of silence).
# Kept: bottom-4 of a's {50, 10, 70, 30, 90} = a/1, a/3, a/0, a/2; a/4 ranked out (sampled 1).
# t and b saw nothing, so seen = 5 = 4 kept + 1: the zero parts change no count.
# sources_unhooked: "source@instance" of t and b, sorted: b@i-b, t@i-t.
UNHOOKED = {"integration": "unhooked"}
VECTORS.append(
    {
        "name": "unhooked_sources",
        "description": (
            "Two sources ran verl's own validation table: one sent an unhooked part (start and end marked), "
            "the other a routed block whose end record is marked; the summary lists both in "
            "valgen.sources_unhooked, with the balance unchanged."
        ),
        "config": config(),
        "events": [
            start(0, "a"),
            start(0, "t", **UNHOOKED, unhooked_reason="override"),
            start(0, "b", integration="verl/0.9.1"),
            *gens(100, KEYS_A, "a"),
            end(150, "t", 0, 0, **UNHOOKED, unhooked_reason="override"),
            end(200, "a", 5, 5),
            end(250, "b", 0, 0, **UNHOOKED, unhooked_reason="actor_copy"),
            tick(1249),
            tick(1250),
        ],
        "expected": {
            "groups": [
                group(
                    "L1.1",
                    "complete",
                    1250,
                    5,
                    ["a/1", "a/3", "a/0", "a/2"],
                    3,
                    [],
                    0,
                    3,
                    drops(1),
                    unhooked=["b@i-b", "t@i-t"],
                )
            ],
            "shown": shown("L1.1"),
        },
    }
)

# (n) Validation and training rollouts of one step: one source t, one launch, the same
# run, step and attempt L1.1, the rollout records marked kind=rollout (the validation ones carry
# no kind: validation). They are two groups, each closed on its own. count 2.
# Validation: keys v/0=30, v/1=10, v/2=20; its end at 200 (sources_expected 1) completes it at
# once: kept the bottom-2 v/1, v/2; seen 3, sampled 1. Its attempt starts at its start record (0),
# not at the rollout start (50): the rollout records are not its records.
# Rollouts: prompts pA (prompt key 50), pB (10), pC (30), two responses each; k = 2 prompts:
# pB and pC, each with both responses, ranked by prompt then response key: pB/1 (1), pB/0 (70),
# pC/0 (40), pC/1 (60). pA's two responses, pA/0 (key 5, the smallest response key of all) among
# them, are left out with their prompt. The end at 300 (sources_expected 1) completes it: seen 6,
# kept 4, sampled 2; prompts seen 3 (its end record), kept 2. attempt start 50. Neither group is
# concurrent with the other: attempts are compared within a kind.
ROLLOUT = {"kind": "rollout"}
ROLLOUT_KEYS = {
    "pA": (50, {"pA/0": 5, "pA/1": 90}),
    "pB": (10, {"pB/0": 70, "pB/1": 1}),
    "pC": (30, {"pC/0": 40, "pC/1": 60}),
}
VECTORS.append(
    {
        "name": "validation_and_rollouts",
        "description": (
            "One source's validation and training rollouts of the same step and attempt: two groups, "
            "(run, step, attempt, kind); the rollout group keeps its 2 smallest prompts with all their "
            "responses."
        ),
        "config": {**config(), "count": 2},
        "events": [
            start(0, "t", sources_expected=1),
            start(50, "t", sources_expected=1, **ROLLOUT),
            *gens(100, {"v/0": 30, "v/1": 10, "v/2": 20}, "t"),
            *[
                rec(
                    120,
                    "valgen.generation",
                    "t",
                    sample_id=sid,
                    sample_key=key,
                    prompt_id=prompt,
                    prompt_key=pkey,
                    **ROLLOUT,
                )
                for prompt, (pkey, responses) in ROLLOUT_KEYS.items()
                for sid, key in responses.items()
            ],
            end(200, "t", 3, 3, sources_expected=1),
            end(300, "t", 6, 6, sources_expected=1, prompts_seen=3, **ROLLOUT),
        ],
        "expected": {
            "groups": [
                group("L1.1", "complete", 200, 3, ["v/1", "v/2"], 1, [], 0, 1, drops(1)),
                group(
                    "L1.1",
                    "complete",
                    300,
                    6,
                    ["pB/1", "pB/0", "pC/0", "pC/1"],
                    1,
                    [],
                    50,
                    1,
                    drops(2),
                    kind="rollout",
                    prompts_seen=3,
                    prompts_kept=2,
                ),
            ],
            "shown": [
                {"run_id": RUN, "step": STEP, "attempt": "L1.1"},
                {"run_id": RUN, "step": STEP, "attempt": "L1.1", "kind": "rollout"},
            ],
        },
    }
)

if __name__ == "__main__":
    for v in VECTORS:
        (HERE / f"{v['name']}.json").write_text(json.dumps(v, indent=1, ensure_ascii=False) + "\n")
