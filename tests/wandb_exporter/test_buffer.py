"""The per-(run, step) buffer: closing on the summary, timeouts, bounds, duplicates, spool."""

from __future__ import annotations

from typing import Any

import pytest

from otel_valgen import contract
from otel_valgen.reader import Generation, Summary
from otel_valgen.wandb_exporter import BufferLimits, Ledger, StepBuffer

RESOURCE: dict[str, Any] = {contract.WANDB_RUN_ID: "wb-1", contract.WANDB_PROJECT: "proj"}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def gen(step: int, i: int, *, run: str = "r", rank: int | None = None, text: str = "x") -> Generation:
    """A generation of sample ``s{i}`` (keys descend with i)."""
    return Generation(run, step, f"s{i}", 1000 - i, f"q{i}{text}", f"a{i}", rank=rank)


def summ(step: int, kept: int, *, run: str = "r") -> Summary:
    """A step summary reporting ``kept`` records."""
    return Summary(run, step, {contract.KEPT: kept, contract.SEEN: 9})


def make(limits: BufferLimits | None = None, **kwargs: Any) -> tuple[StepBuffer, Clock, Ledger]:
    """A buffer on a fake clock and a fresh in-memory ledger."""
    clock, ledger = Clock(), Ledger()
    return StepBuffer(ledger, limits, clock=clock, **kwargs), clock, ledger


def test_step_closes_when_summary_and_all_kept_records_arrived() -> None:
    """A step closes on its summary, in rank order, targeting the run named by the resource."""
    buffer, _, _ = make()
    assert buffer.add(gen(1, 0, rank=2), RESOURCE) == []
    assert buffer.add(gen(1, 1, rank=1), RESOURCE) == []
    (closed,) = buffer.add(summ(1, 2), {})
    assert [g.sample_id for g in closed.generations] == ["s1", "s0"]
    assert closed.complete
    assert closed.reason == "summary"
    assert (closed.run.run_id, closed.run.project, closed.group_id) == ("wb-1", "proj", "r")
    assert buffer.open_steps == 0
    assert buffer.open_bytes == 0


def test_summary_before_its_records_waits_for_the_kept_count() -> None:
    """A summary that overtakes its records keeps the step open until ``kept`` records are in."""
    buffer, _, _ = make()
    assert buffer.add(summ(3, 2), {}) == []
    assert buffer.add(gen(3, 0), RESOURCE) == []
    (closed,) = buffer.add(gen(3, 1), RESOURCE)
    assert closed.complete
    assert len(closed.generations) == 2


def test_timeout_writes_the_step_as_incomplete(caplog: pytest.LogCaptureFixture) -> None:
    """Without a summary the step closes after the timeout, marked and logged incomplete."""
    buffer, clock, _ = make(BufferLimits(step_timeout_s=5))
    buffer.add(gen(1, 0), RESOURCE)
    clock.now += 4.9
    assert buffer.expire() == []
    clock.now += 0.2
    (closed,) = buffer.expire()
    assert not closed.complete
    assert closed.reason == "timeout"
    assert "incomplete" in caplog.text


def test_open_step_cap_closes_the_oldest_and_counts_it() -> None:
    """Past max_open_steps the oldest open step is written early (overflow), counted."""
    buffer, _, _ = make(BufferLimits(max_open_steps=2))
    buffer.add(gen(1, 0), RESOURCE)
    buffer.add(gen(2, 0), RESOURCE)
    (closed,) = buffer.add(gen(3, 0), RESOURCE)
    assert (closed.step, closed.reason, closed.complete) == (1, "overflow", False)
    assert buffer.open_steps == 2
    assert buffer.stats.closed == {"overflow": 1}


def test_byte_cap_bounds_the_buffer() -> None:
    """Buffered bytes never exceed max_bytes: older steps are closed to make room."""
    buffer, _, _ = make(BufferLimits(max_bytes=3000))
    closed = []
    for step in range(10):
        closed += buffer.add(gen(step, 0, text="y" * 1000), RESOURCE)
        assert buffer.open_bytes <= 3000
    assert len(closed) >= 7
    assert all(c.reason == "overflow" for c in closed)


def test_duplicates_and_written_steps_never_add_rows() -> None:
    """A repeated record or a summary for a written step is counted as a duplicate and dropped."""
    buffer, _, _ = make()
    buffer.add(gen(1, 0), RESOURCE)
    assert buffer.add(gen(1, 0), RESOURCE) == []
    buffer.add(summ(1, 1), {})
    assert buffer.add(gen(1, 0), RESOURCE) == []
    assert buffer.add(summ(1, 1), {}) == []
    assert buffer.stats.duplicates == 3
    assert buffer.open_steps == 0


def test_late_record_of_a_written_step_dropped_in_verl_layout() -> None:
    """Verl's one row per step cannot grow: a new sample for a written step is counted late."""
    buffer, _, _ = make()
    buffer.add(gen(1, 0), RESOURCE)
    buffer.add(summ(1, 1), {})
    assert buffer.add(gen(1, 5), RESOURCE) == []
    assert buffer.stats.late_dropped == 1
    assert buffer.open_steps == 0


def test_late_record_of_a_written_step_becomes_an_addition_in_rows_layout() -> None:
    """In the rows layout new samples of a written step are buffered as a late addition."""
    buffer, clock, _ = make(BufferLimits(step_timeout_s=1), late_additions=True)
    buffer.add(gen(1, 0), RESOURCE)
    buffer.add(summ(1, 1), {})
    buffer.add(gen(1, 5), RESOURCE)
    clock.now += 2
    (closed,) = buffer.expire()
    assert closed.late_addition
    assert [g.sample_id for g in closed.generations] == ["s5"]


def test_snapshot_and_restore_keep_open_steps_across_a_restart() -> None:
    """Open steps spooled by one buffer reopen in the next, and complete ones close at once."""
    buffer, _, _ = make()
    buffer.add(gen(7, 0), RESOURCE)
    buffer.add(gen(8, 0), RESOURCE)
    buffer.add(summ(8, 2), {})
    items = buffer.snapshot()
    fresh, _, _ = make()
    assert fresh.restore(items) == []
    assert fresh.open_steps == 2
    (closed,) = fresh.add(gen(8, 1), RESOURCE)
    assert closed.step == 8
    assert closed.complete
    assert closed.run.run_id == "wb-1"


def test_ledger_persists_written_steps(tmp_path: Any) -> None:
    """A ledger in a state folder remembers written samples and verl rows after reopening."""
    ledger = Ledger(tmp_path)
    ledger.commit("r", 1, ["a", "b"], row=[1, "i", "o", 0.5])
    again = Ledger(tmp_path)
    assert again.is_committed("r", 1)
    assert again.has_sample("r", 1, "b")
    assert not again.has_step("r", 2)
    assert again.rows("r") == [[1, "i", "o", 0.5]]


def test_limits_are_validated() -> None:
    """Non-positive bounds are refused."""
    with pytest.raises(ValueError, match="positive"):
        BufferLimits(max_open_steps=0)


def test_attempts_of_one_step_are_buffered_and_closed_apart() -> None:
    """Two attempts of a step never merge; each closes on its own summary with its start and outcome."""
    buffer, _, _ = make()
    first = Generation("r", 1, "s0", 5, "q", "a", rank=1, attempt="L1.1", timestamp=10)
    second = Generation("r", 1, "s0", 5, "q", "b", rank=1, attempt="L2.1", timestamp=30)
    assert buffer.add(first, RESOURCE) == []
    assert buffer.add(second, RESOURCE) == []
    assert buffer.open_steps == 2
    attributes = {contract.KEPT: 1, contract.ATTEMPT_START: 25, contract.CLOSED_REASON: "complete"}
    (closed,) = buffer.add(Summary("r", 1, {**attributes, contract.ATTEMPT: "L2.1"}), {})
    assert (closed.attempt, closed.attempt_start, closed.attempt_complete) == ("L2.1", 25, True)
    assert closed.generations[0].output == "b"
    (closed,) = buffer.add(
        Summary("r", 1, {contract.KEPT: 1, contract.ATTEMPT: "L1.1", contract.CLOSED_REASON: "wait"}), {}
    )
    assert (closed.attempt, closed.attempt_start, closed.attempt_complete) == ("L1.1", 10, False)


def test_generations_the_sampler_forwarded_as_late_are_dropped() -> None:
    """valgen.late = true: not part of the sampler's sample; counted, never buffered."""
    buffer, _, _ = make(late_additions=True)
    late = Generation("r", 1, "s9", 1, "q", "a", attempt="L1.1", late=True)
    assert buffer.add(late, RESOURCE) == []
    assert (buffer.stats.late_dropped, buffer.open_steps) == (1, 0)


def test_ledger_keeps_the_attempt_the_rule_picks(tmp_path: Any) -> None:
    """The shown attempt of a step changes only to one the rule prefers; it survives a reopen."""
    from otel_valgen.wandb_exporter.ledger import ShownAttempt

    ledger = Ledger(tmp_path)
    ledger.commit("r", 1, ["a"], row=[1, "old"], shown=ShownAttempt("L1.1", 10, False))
    ledger.commit("r", 1, ["b"], row=[1, "new"], shown=ShownAttempt("L2.1", 20, True))
    ledger.commit("r", 1, ["c"], row=[1, "newer but incomplete"], shown=ShownAttempt("L3.1", 30, False))
    again = Ledger(tmp_path)
    assert again.shown("r", 1) == ShownAttempt("L2.1", 20, True)
    assert again.rows("r") == [[1, "new"]]
    assert again.is_committed("r", 1, "L1.1")
    assert not again.is_committed("r", 1)


def test_a_late_record_already_written_is_a_duplicate_not_an_addition() -> None:
    """With late additions on, a record whose sample the ledger has is counted as a duplicate and never buffered."""
    buffer, clock, ledger = make(BufferLimits(step_timeout_s=1), late_additions=True)
    ledger.commit("r", 1, ["s0", "s1"])
    assert buffer.add(gen(1, 1), RESOURCE) == []
    assert (buffer.stats.duplicates, buffer.open_steps) == (1, 0)
    buffer.add(gen(1, 2), RESOURCE)  # a new sample of the written step: an addition
    clock.now += 2
    (closed,) = buffer.expire()
    assert [g.sample_id for g in closed.generations] == ["s2"]
