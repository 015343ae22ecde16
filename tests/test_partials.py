"""Parts of one step closed by different samplers merge into the step one sampler would have closed.

``otel_valgen.partials.merge_summaries`` is checked on summaries as two samplers write them
(``valgen.sampler``, ``valgen.source_figures``): each source's end and progress counts are
cumulative (the largest wins, never their sum), its arrivals at different samplers are disjoint
(they add up), and the merged summary is complete only when every source ended, none expected
is missing and nothing is missing.
"""

from __future__ import annotations

from typing import Any

import pytest

from otel_valgen import contract
from otel_valgen.partials import merge_summaries, parts_extremes
from otel_valgen.reader import Generation


def figure(source: str, *, ended: bool = False, **values: Any) -> dict[str, Any]:
    """One entry of ``valgen.source_figures``: nothing counted but ``values``."""
    counts = {"seen": 0, "emitted": 0, "dropped": 0, "progress_seen": 0, "received": 0, "invalid": 0, "kept": 0}
    return {"source": source, "announced": True, "ended": ended} | counts | values


def part(sampler: str, *figures: dict[str, Any], **attributes: Any) -> dict[str, Any]:
    """One sampler's summary of run r step 1 with the source figures it knew."""
    summary = {contract.RUN_ID: "r", contract.STEP: 1, contract.SAMPLER: sampler, contract.SAMPLE_COUNT: 2}
    summary |= {contract.CLOSED_REASON: "wait", contract.SOURCE_FIGURES: list(figures)}
    return summary | attributes


def kept(source: str, *ids: int) -> list[Generation]:
    """Kept records of ``source`` (instance ``i-<source>``)."""
    return [
        Generation("r", 1, f"{source}/{i}", 100 + i, "", "", source=source, instance=f"i-{source}", rank=i + 1)
        for i in ids
    ]


def by_source(summary: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The merged summary's source figures, by source."""
    return {entry["source"]: entry for entry in summary[contract.SOURCE_FIGURES]}


def test_end_and_progress_counts_take_the_largest_and_arrivals_add_up() -> None:
    """A source re-routed mid-step: its cumulative counts are not summed, its arrivals at the two samplers are."""
    before = figure("a@i-a", ended=True, seen=4, emitted=3, dropped=1, progress_seen=3, received=2, invalid=1)
    after = figure("a@i-a", ended=True, seen=8, emitted=6, dropped=1, progress_seen=5, received=2, invalid=1)
    merged = merge_summaries([part("s1", before), part("s2", after)], kept("a", 0, 1))
    assert {key: by_source(merged)["a@i-a"][key] for key in before if key not in ("source", "announced")} == {
        "ended": True,
        "seen": 8,
        "emitted": 6,
        "dropped": 1,
        "progress_seen": 5,
        "received": 4,
        "invalid": 2,
        "kept": 2,
    }
    # 8 seen: 1 dropped by the source, 1 presampled out; of 6 emitted, all arrived, 2 invalid, 2 kept
    assert (merged[contract.SEEN], merged[contract.KEPT], merged[contract.MISSING]) == (8, 2, 0)
    assert merged[contract.DROPPED_PREFIX + "invalid"] == 2
    assert merged[contract.DROPPED_PREFIX + "sampled"] == 3
    assert merged[contract.CLOSED_REASON] == "complete"
    assert merged[contract.SAMPLERS] == ["s1", "s2"]
    assert contract.SAMPLER not in merged


def test_a_source_that_did_not_end_counts_its_largest_progress_and_every_arrival() -> None:
    """Not ended anywhere: seen is the larger of its arrivals (added) and its largest progress figure."""
    first = figure("a@i-a", progress_seen=4, received=3)
    second = figure("a@i-a", progress_seen=6, received=2)
    merged = merge_summaries([part("s1", first), part("s2", second)], kept("a", 0, 1))
    assert (by_source(merged)["a@i-a"]["progress_seen"], by_source(merged)["a@i-a"]["received"]) == (6, 5)
    assert merged[contract.SEEN] == 6
    assert merged[contract.DROPPED_PREFIX + "not_ended"] == 1
    assert merged[contract.SOURCES_MISSING] == ["a@i-a"]
    assert merged[contract.CLOSED_REASON] == "wait"


@pytest.mark.parametrize("latest_first", [False, True], ids=["latest last", "latest first"])
def test_score_statistics_come_from_the_sources_latest_end_record(latest_first: bool) -> None:
    """Two end records of one source reached two samplers: the pair of the larger counts wins, in either order."""
    early = figure("a@i-a", ended=True, seen=4, emitted=4, received=2, **{"score.count": 4, "score.sum": 1.0})
    late = figure("a@i-a", ended=True, seen=8, emitted=8, received=6, **{"score.count": 8, "score.sum": 6.0})
    parts = [part("s1", early), part("s2", late)]
    merged = merge_summaries(parts[::-1] if latest_first else parts, kept("a", 0, 1))
    assert (merged[contract.SCORE_COUNT], merged[contract.SCORE_SUM], merged[contract.SCORE_MEAN]) == (8, 6.0, 0.75)


def test_a_source_that_ended_in_no_part_is_missing_and_the_step_incomplete() -> None:
    """Source b sent records to s1 but its end record reached no sampler: listed missing, not complete."""
    merged = merge_summaries(
        [
            part("s1", figure("a@i-a", received=1), figure("b@i-b", received=2)),
            part("s2", figure("a@i-a", ended=True, seen=3, emitted=3, received=2)),
        ],
        kept("a", 0) + kept("b", 1),
    )
    assert merged[contract.SOURCES_MISSING] == ["b@i-b"]
    assert (merged[contract.SOURCES], merged[contract.SOURCES_ENDED]) == (2, 1)
    assert merged[contract.MISSING] == 0
    assert merged[contract.CLOSED_REASON] == "wait"


def test_a_merged_step_is_complete_only_when_sources_expected_sources_ended() -> None:
    """Every known source ended and arrived whole, but a part says 3 sources were expected: not complete."""
    a = figure("a@i-a", ended=True, seen=2, emitted=2, received=2)
    b = figure("b@i-b", ended=True, seen=2, emitted=2, received=2)
    whole = [part("s1", a), part("s2", b)]
    assert merge_summaries(whole, kept("a", 0) + kept("b", 0))[contract.CLOSED_REASON] == "complete"
    expecting = [part("s1", a, **{contract.SOURCES_EXPECTED: 3}), part("s2", b, **{contract.SOURCES_EXPECTED: 2})]
    merged = merge_summaries(expecting, kept("a", 0) + kept("b", 0))
    assert merged[contract.SOURCES_EXPECTED] == 3
    assert merged[contract.CLOSED_REASON] == "wait"


def test_records_emitted_that_reached_no_part_are_missing() -> None:
    """A sampler's stored state lost for good: what the ended source emitted and no part received is missing."""
    merged = merge_summaries(
        [
            part("s1", figure("a@i-a", received=2)),
            part("s2", figure("a@i-a", ended=True, seen=10, emitted=10, received=3)),
        ],
        kept("a", 0, 1),
    )
    assert merged[contract.MISSING] == 5
    assert merged[contract.DROPPED_PREFIX + "undelivered"] == 5
    assert merged[contract.CLOSED_REASON] == "wait"


def test_the_merged_summary_keeps_the_smallest_k_the_earliest_start_and_every_late_record() -> None:
    """k: the smallest a part kept to; the attempt started when its earliest part did; late reports add up."""
    a = figure("a@i-a", ended=True, seen=2, emitted=2, received=2)
    first = part("s1", a, **{contract.SAMPLE_COUNT: 4, contract.ATTEMPT_START: 2_000, contract.LATE: 1})
    second = part("s2", **{contract.SAMPLE_COUNT: 2, contract.ATTEMPT_START: 1_000, contract.LATE: 2})
    third = part("s3", **{contract.SAMPLE_COUNT: 3, contract.ATTEMPT_START: 0, contract.LATE: 0})  # start unknown
    merged = merge_summaries([first, second, third], kept("a", 0, 1))
    assert merged[contract.SAMPLE_COUNT] == 2
    assert merged[contract.ATTEMPT_START] == 1_000
    assert merged[contract.LATE] == 3
    assert merged[contract.SAMPLERS] == ["s1", "s2", "s3"]


def test_parts_without_source_figures_are_named_not_merged() -> None:
    """A part from a collector before the figures: no exact merge; the first part stands, every sampler named."""
    old = {contract.RUN_ID: "r", contract.STEP: 1, contract.SAMPLER: "s1", contract.SEEN: 5, contract.KEPT: 2}
    old[contract.CLOSED_REASON] = "wait"
    new = part("s2", figure("a@i-a", ended=True, seen=9, emitted=9, received=4))
    merged = merge_summaries([old, new], kept("a", 0, 1))
    assert (merged[contract.SEEN], merged[contract.KEPT]) == (5, 2)
    assert merged[contract.SAMPLERS] == ["s1", "s2"]
    assert contract.SOURCE_FIGURES not in merged


def test_a_rollout_sources_prompts_seen_take_the_largest() -> None:
    """Prompts seen are cumulative like the end counts: a source's largest over the parts, then added over sources."""
    rollout = {contract.KIND: contract.KIND_ROLLOUT}
    a1 = figure("a@i-a", ended=True, seen=4, emitted=4, received=2, prompts_seen=2)
    a2 = figure("a@i-a", ended=True, seen=8, emitted=8, received=6, prompts_seen=4)
    b = figure("b@i-b", ended=True, seen=2, emitted=2, received=2, prompts_seen=1)
    merged = merge_summaries([part("s1", a1, **rollout), part("s2", a2, b, **rollout)], kept("a", 0, 1))
    assert by_source(merged)["a@i-a"]["prompts_seen"] == 4
    assert merged[contract.PROMPTS_SEEN] == 5


def test_the_merged_extremes_are_the_smallest_n_of_the_parts_that_kept_generations() -> None:
    """A part without generations (no sample_count) asks for no n; one that kept some without extremes asks for 0."""
    with_n = {contract.SAMPLE_COUNT: 4, contract.EXTREMES: 2}
    empty: dict[str, object] = {}
    assert parts_extremes([with_n, empty]) == 2
    assert parts_extremes([with_n, {contract.SAMPLE_COUNT: 4}]) == 0
    assert parts_extremes([with_n, {contract.SAMPLE_COUNT: 4, contract.EXTREMES: 1}]) == 1


def responses(source: str, *prompts: str) -> list[Generation]:
    """Kept rollout responses of ``source`` (instance ``i-<source>``), one to each of ``prompts``."""
    return [
        Generation(
            "r",
            1,
            f"{prompt}/0@{source}",
            100 + i,
            "",
            "",
            source=source,
            instance=f"i-{source}",
            rank=i + 1,
            kind=contract.KIND_ROLLOUT,
            prompt_id=prompt,
        )
        for i, prompt in enumerate(prompts)
    ]


@pytest.mark.parametrize("announced", [True, False], ids=["announced", "records only"])
def test_a_source_that_ended_in_no_part_makes_every_kept_prompt_incomplete(announced: bool) -> None:
    """A source that sent records but ended in no part makes every kept prompt of the merged step incomplete.

    A rollout step in two parts, no ``sources_expected`` anywhere: source b sent responses to s1
    (with or without a start record) and its end record reached no sampler, so each kept prompt
    may lack b's responses and ``valgen.prompts_incomplete`` is the kept prompts (2, not the 3
    kept responses). Once b's end record reaches s2, none is.
    """
    rollout = {contract.KIND: contract.KIND_ROLLOUT}
    a_before, a_ended = figure("a@i-a", received=2), figure("a@i-a", ended=True, seen=3, emitted=3, received=1)
    b_silent = figure("b@i-b", announced=announced, received=1)
    b_ended = figure("b@i-b", announced=announced, ended=True, seen=1, emitted=1)
    kept_responses = responses("a", "p", "q") + responses("b", "p")

    silent = merge_summaries(
        [part("s1", a_before, b_silent, **rollout), part("s2", a_ended, **rollout)], kept_responses
    )
    assert contract.SOURCES_EXPECTED not in silent
    assert (silent[contract.SOURCES], silent[contract.SOURCES_ENDED]) == (2, 1)
    assert (silent[contract.PROMPTS_KEPT], silent[contract.PROMPTS_INCOMPLETE]) == (2, 2)

    whole = [part("s1", a_before, b_silent, **rollout), part("s2", a_ended, b_ended, **rollout)]
    merged = merge_summaries(whole, kept_responses)
    assert (merged[contract.PROMPTS_KEPT], merged[contract.PROMPTS_INCOMPLETE]) == (2, 0)
