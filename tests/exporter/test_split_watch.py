"""``SplitWatch``: which closed attempts of a step ran at the same time with no common source.

Attempts whose summaries do not say (an older collector) are compared here: an attempt's
sources are those of its kept records (source and instance), its span runs from its start to
its latest kept record; a step's validation and its rollouts are watched apart; the last
``max_steps`` steps are remembered.
"""

from __future__ import annotations

from otel_valgen import contract
from otel_valgen.exporter.split_watch import SplitWatch
from otel_valgen.exporter.steps import ClosedStep
from otel_valgen.reader import Generation

MS = 1_000_000


def attempt(
    name: str, instance: str, start_ms: int, kept_ms: list[int], *, step: int = 3, kind: str = contract.KIND_VALIDATION
) -> ClosedStep:
    """Attempt ``name`` of run r ``step``, started at ``start_ms``, its kept records (source trainer) at ``kept_ms``."""
    generations = [
        Generation(
            "r", step, f"{name}/{i}", i, "", "", source="trainer", instance=instance, timestamp=t * MS, kind=kind
        )
        for i, t in enumerate(kept_ms)
    ]
    return ClosedStep(
        "r", step, generations, summary={}, attempt=name, attempt_start=start_ms * MS, kind=kind, reason="summary"
    )


def test_two_processes_at_once_are_one_split_step_reported_once() -> None:
    """Two instances of one source name are two sources: their overlapping attempts are a split, reported once."""
    watch = SplitWatch()
    assert watch.observe(attempt("p1.1", "i-0", 0, [10, 90])) == 0
    assert watch.observe(attempt("p2.1", "i-1", 50, [60, 150])) == 2
    assert watch.observe(attempt("p3.1", "i-2", 40, [70, 120])) == 0, "the step was reported already"


def test_an_attempt_spans_from_its_start_not_from_its_first_kept_record() -> None:
    """Attempt p1 started at 0 and its kept records came late: it overlaps p2, which ran from 100 to 200."""
    watch = SplitWatch()
    watch.observe(attempt("p2.1", "i-1", 100, [150, 200]))
    assert watch.observe(attempt("p1.1", "i-0", 0, [500, 600])) == 2


def test_a_steps_validation_and_rollouts_are_watched_apart() -> None:
    """The step's rollouts in another process at the same time are no split of its validation."""
    watch = SplitWatch()
    assert watch.observe(attempt("p1.1", "i-0", 0, [10, 90])) == 0
    assert watch.observe(attempt("p2.1", "i-1", 50, [60, 150], kind=contract.KIND_ROLLOUT)) == 0


def test_the_last_steps_are_remembered_and_older_ones_forgotten() -> None:
    """With 2 steps remembered, step 3's earlier attempt is still compared after steps 1 and 2; step 1's is not."""
    watch = SplitWatch(max_steps=2)
    for step in (1, 2, 3):
        watch.observe(attempt("p1.1", "i-0", 0, [10, 90], step=step))
    assert watch.observe(attempt("p2.1", "i-1", 50, [60, 150], step=3)) == 2
    assert watch.observe(attempt("p2.1", "i-1", 50, [60, 150], step=1)) == 0, "step 1's first attempt is forgotten"
