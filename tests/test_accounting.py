"""Every generation is counted once: seen = emitted + dropped + sampled out + held, whatever fails.

The property test drives random sequences of blocks and block-less calls (empty calls, uids given
or not, duplicate uids, bad input, presampling on or off, any k, a smaller k mid-step) through the
real emitter, with a failure injected at one stage on one invocation: id hashing, key computation,
record building, the SDK's emit, the exporter, or ``log_generations`` itself (its guard counts the
call). After every call and every block, ``stats()`` balances; each end record carries exactly
its step's own seen, emitted and dropped generations (drops of bad input and failures included);
the failure is one counted internal error, warned once with its cause.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter

import otel_valgen as vg
from otel_valgen import _api, _process, _records, contract
from otel_valgen._keys import BatchKeyer
from otel_valgen._records import RecordBuilder
from otel_valgen.testing import CapturedRecords, capture_records

FATES = ("generations_emitted", "generations_dropped", "generations_sampled_out", "generations_held")
COUNTED = ("generations_seen", "generations_emitted", "generations_dropped", "generations_sampled_out")
STAGES = ("none", "ids", "keys", "build", "emit", "export", "api")
BAD = ("none", "none", "non_str_inputs", "nan_scores", "mismatch", "bare_string")


class Injected(Exception):
    """The failure the test injects."""


@dataclass
class Trigger:
    """Raises ``Injected`` at the ``at``-th invocation (0-based) of the stage it wraps, once."""

    at: int
    invocations: int = 0
    fired_in: int | None = None  # the serial of the call it fired in
    call: int = -1

    def __call__(self) -> None:
        self.invocations += 1
        if self.invocations - 1 == self.at:
            self.fired_in = self.call
            raise Injected(f"injected failure number {self.at}")


def _wrap(trigger: Trigger, original: Callable[..., Any]) -> Callable[..., Any]:
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        trigger()
        return original(*args, **kwargs)

    return wrapped


@contextmanager
def _inject(stage: str, trigger: Trigger) -> Iterator[None]:
    """Patch ``stage``'s function to call ``trigger`` first."""
    with pytest.MonkeyPatch.context() as patch:
        if stage == "ids":
            for name in ("_derived_ids", "_given_ids", "_any_ids"):
                patch.setattr(_records, name, _wrap(trigger, getattr(_records, name)))
        elif stage == "keys":
            patch.setattr(BatchKeyer, "candidates", _wrap(trigger, BatchKeyer.candidates))
        elif stage == "build":
            patch.setattr(RecordBuilder, "__call__", _wrap(trigger, RecordBuilder.__call__))
        elif stage == "emit":
            logger_class = type(LoggerProvider(shutdown_on_exit=False).get_logger("t"))
            original = logger_class.emit

            def emit(self: Any, *args: Any, **kwargs: Any) -> None:
                if kwargs.get("event_name") == contract.EVENT_GENERATION:
                    trigger()
                original(self, *args, **kwargs)

            patch.setattr(logger_class, "emit", emit)
        elif stage == "export":
            patch.setattr(InMemoryLogRecordExporter, "export", _wrap(trigger, InMemoryLogRecordExporter.export))
        elif stage == "api":
            patch.setattr(_api, "Batch", _wrap(trigger, _records.Batch))
        yield


@dataclass(frozen=True)
class Call:
    """One ``log_generations`` call: its prompts (repeats are duplicate uids), ids, bad input and k."""

    prompts: list[int]
    ids: str
    bad: str
    count: int | None


@dataclass(frozen=True)
class Part:
    """Calls of one step: inside one block (source ``b``) or each block-less (source ``p``)."""

    block: bool
    step: int
    calls: list[Call]


calls = st.builds(
    Call,
    prompts=st.lists(st.integers(0, 9), max_size=12),
    ids=st.sampled_from(("derived", "given", "gaps")),
    bad=st.sampled_from(BAD),
    count=st.none() | st.integers(0, 6),
)
parts = st.builds(Part, block=st.booleans(), step=st.integers(1, 3), calls=st.lists(calls, min_size=1, max_size=4))


def _arguments(call: Call) -> tuple[dict[str, Any], int]:
    """The call's arguments and its size (its longest column)."""
    n = len(call.prompts)
    inputs: list[Any] = [f"prompt {p}" for p in call.prompts]
    outputs: Any = [f"answer {p}" for p in call.prompts]
    scores: list[Any] = [float(p) for p in call.prompts]
    if call.bad == "non_str_inputs":
        inputs = [p if i % 3 == 0 else (f"prompt {p}".encode() if i % 3 == 1 else None) for i, p in enumerate(inputs)]
    elif call.bad == "nan_scores":
        scores = [math.nan] * n
    elif call.bad == "mismatch":
        outputs = outputs[:-1] if n else ["one too many"]
    elif call.bad == "bare_string":
        outputs = "a bare string"
    arguments: dict[str, Any] = {"inputs": inputs, "outputs": outputs, "scores": scores, "count": call.count}
    if call.ids == "given":
        arguments["sample_ids"] = [f"uid-{p}" for p in call.prompts]
    elif call.ids == "gaps":
        arguments["sample_ids"] = [f"uid-{p}" if p % 2 else None for p in call.prompts]
    size = max(len(column) for column in (inputs, outputs, scores) if not isinstance(column, str))
    return arguments, size


@dataclass
class Expected:
    """What a step's end record must say, summed from the counters' changes its calls caused."""

    seen: int = 0
    emitted: int = 0
    dropped: int = 0
    sampled_out: int = 0
    reached: bool = False  # a call reached the emitter: the step has an end record

    def add(self, change: dict[str, int], outside: int) -> None:
        """Add a change of the counters, less ``outside`` generations dropped before any step."""
        self.seen += change["generations_seen"] - outside
        self.emitted += change["generations_emitted"]
        self.dropped += change["generations_dropped"] - outside
        self.sampled_out += change["generations_sampled_out"]


@dataclass
class Run:
    """One example's scenario as it runs: the trigger, the expected end records, the checks."""

    records: CapturedRecords
    presample: bool
    trigger: Trigger
    stage: str
    serial: int = 0
    blocks: int = 0
    parts: dict[int, Expected] = field(default_factory=dict)
    sizes: dict[int, int] = field(default_factory=dict)  # serial -> size of each call

    def counters(self) -> dict[str, int]:
        stats = vg.stats()
        return {name: stats[name] for name in COUNTED}

    def check_balance(self) -> None:
        """``stats()`` balances, and the reasons add up to the dropped total."""
        stats = vg.stats()
        assert stats["generations_seen"] == sum(stats[name] for name in FATES), stats
        reasons = sum(n for name, n in stats.items() if name.startswith("dropped.") and name != "dropped.queue_full")
        assert reasons == stats["generations_dropped"], stats
        if not self.presample:
            assert stats["generations_sampled_out"] == stats["generations_held"] == 0, stats

    def log(self, call: Call, step: int | None, expected: Expected, block: bool) -> None:
        """Run one call; check its counts and the balance; add what it changed to its step's expectations."""
        arguments, size = _arguments(call)
        self.serial += 1
        self.sizes[self.serial] = size
        self.trigger.call = self.serial
        before = self.counters()
        where: dict[str, Any] = {} if block else {"step": step, "source": "p"}
        accepted = vg.log_generations(**arguments, **where)
        change = {name: value - before[name] for name, value in self.counters().items()}
        guarded = self.stage == "api" and self.trigger.fired_in == self.serial
        assert change["generations_seen"] == size, (call, change)
        # Presampling sends a block-less call's records after it accepted them: a failed send comes later.
        sent_late = self.stage == "emit" and self.presample and not block and self.trigger.fired_in == self.serial
        assert accepted == size - change["generations_dropped"] + sent_late, (call, accepted, change)
        # A block-less call dropped whole for bad input never reaches its step, nor does a guarded one.
        reached = not guarded and (block or call.bad not in ("mismatch", "bare_string"))
        expected.add(change, 0 if reached else size)
        expected.reached = expected.reached or reached
        self.check_balance()

    def run_block(self, part: Part) -> None:
        expected = Expected()
        self.blocks += 1
        with vg.validation(step=part.step, source="b"):
            for call in part.calls:
                self.log(call, None, expected, block=True)
            before = self.counters()
        expected.add({name: value - before[name] for name, value in self.counters().items()}, 0)
        assert vg.stats()["generations_held"] == 0
        self.check_balance()
        ends = self.ends("b", part.step)
        if self.exported_all():
            assert len(ends) == self.blocks_of(part.step), ends
            self.check_end(ends[-1], expected)

    def run_blockless(self, part: Part) -> None:
        expected = self.parts.setdefault(part.step, Expected())
        for call in part.calls:
            self.log(call, part.step, expected, block=False)
            ends = self.ends("p", part.step)
            if self.exported_all():
                assert bool(ends) == expected.reached, (ends, expected)
                if ends:
                    self.check_end(ends[-1], expected)

    def blocks_of(self, step: int) -> int:
        """How many blocks of ``step`` started (each sends one start record)."""
        starts = [r for r in self.records if r["event_name"] == contract.EVENT_VALIDATION_START]
        return sum(self.key(r) == ("b", step) for r in starts)

    @staticmethod
    def key(record: dict[str, Any]) -> tuple[str, int]:
        return record["attributes"][contract.SOURCE], record["attributes"][contract.STEP]

    def ends(self, source: str, step: int) -> list[dict[str, Any]]:
        """The end records of (step, source), each checked to balance."""
        ends = [
            r["attributes"]
            for r in self.records
            if r["event_name"] == contract.EVENT_VALIDATION_END and self.key(r) == (source, step)
        ]
        for end in ends:
            out = end[contract.SEEN] - end[contract.EMITTED] - end[contract.DROPPED]
            assert (out >= 0) if self.presample else (out == 0), end
        return ends

    def exported_all(self) -> bool:
        return not (self.stage == "export" and self.trigger.fired_in is not None)

    def check_end(self, end: dict[str, Any], expected: Expected) -> None:
        """The end record says what the step's calls did: its own drops included, the rest sampled out."""
        said = (end[contract.SEEN], end[contract.EMITTED], end[contract.DROPPED])
        assert said == (expected.seen, expected.emitted, expected.dropped), (end, expected)
        assert end[contract.SEEN] - end[contract.EMITTED] - end[contract.DROPPED] == expected.sampled_out


@pytest.mark.parametrize("presample", [True, False], ids=["presample", "no_presample"])
@pytest.mark.parametrize("stage", STAGES)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(k=st.sampled_from((0, 1, 3, 8)), scenario=st.lists(parts, min_size=1, max_size=4), at=st.integers(0, 3))
def test_every_generation_is_counted_once_whatever_fails(
    stage: str, presample: bool, k: int, scenario: list[Part], at: int, caplog: pytest.LogCaptureFixture
) -> None:
    """After every call and block the counters balance, end records carry their step's drops, a failure is warned."""
    caplog.clear()
    trigger = Trigger(at)
    with (
        caplog.at_level(logging.WARNING, "otel_valgen"),
        capture_records(run_id="acc", count=k, presample=presample, progress_interval_s=0) as records,
        _inject(stage, trigger),
    ):
        run = Run(records, presample, trigger, stage)
        for part in scenario:
            if part.block:
                run.run_block(part)
            else:
                run.run_blockless(part)
    stats = vg.stats()
    event("fired" if trigger.fired_in is not None else "not fired")
    assert stats["generations_held"] == 0
    warned = [r for r in caplog.records if r.levelno == logging.WARNING and "Injected" in r.getMessage()]
    if trigger.fired_in is None:
        assert stats["internal_errors"] == 0, stats
        assert not warned
        return
    assert len(warned) == 1, [r.getMessage() for r in warned]
    assert f"injected failure number {at}" in warned[0].getMessage()
    if stage == "export":  # the records were emitted: counted as not exported, the balance holds
        assert stats["internal_errors"] == 0, stats
        assert stats["records_export_failed"] > 0, stats
        return
    lost = run.sizes[trigger.fired_in] if stage in ("ids", "keys", "api") else 1  # a batch, or one record
    assert stats["internal_errors"] == 1, stats
    assert stats.get("dropped.internal_error", 0) == lost, stats


def _ends(records: CapturedRecords) -> list[dict[str, Any]]:
    return [r["attributes"] for r in records if r["event_name"] == contract.EVENT_VALIDATION_END]


def test_a_hashing_failure_drops_the_batch_counted_in_stats_and_the_end_record(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Ids that cannot be hashed drop the call's batch as internal_error, warned with the cause."""

    def unhashable(inputs: object) -> None:
        raise TypeError("Strings must be encoded before hashing")

    monkeypatch.setattr(_records, "_derived_ids", unhashable)
    with capture_records(run_id="r", count=4, progress_interval_s=0) as records, vg.validation(step=1):
        assert vg.log_generations([f"q{i}" for i in range(50)], ["a"] * 50, [1.0] * 50) == 0
    stats = vg.stats()
    assert (stats["generations_seen"], stats["generations_dropped"], stats["dropped.internal_error"]) == (50, 50, 50)
    assert stats["internal_errors"] == 1
    (end,) = _ends(records)
    assert (end[contract.SEEN], end[contract.EMITTED], end[contract.DROPPED]) == (50, 0, 50)
    assert "TypeError: Strings must be encoded before hashing" in caplog.text


def test_what_presampling_leaves_out_is_sampled_out_and_what_it_keeps_is_held_until_the_end() -> None:
    """A step's bottom-k is held until its end; the rest, and what a smaller k cuts, is sampled out."""
    with capture_records(run_id="r", count=5, progress_interval_s=0) as records:
        with vg.validation(step=1):
            vg.log_generations([f"q{i}" for i in range(20)], ["a"] * 20)
            stats = vg.stats()
            assert (stats["generations_held"], stats["generations_sampled_out"]) == (5, 15)
            vg.log_generations(["late"], ["a"], count=2)  # the smallest k wins: 3 held ones are cut
            stats = vg.stats()
            assert (stats["generations_held"], stats["generations_sampled_out"]) == (2, 19)
        stats = vg.stats()
        assert (stats["generations_held"], stats["generations_emitted"], stats["generations_seen"]) == (0, 2, 21)
    (end,) = _ends(records)
    assert (end[contract.SEEN], end[contract.EMITTED], end[contract.DROPPED]) == (21, 2, 0)


def test_a_record_that_fails_to_build_drops_that_generation_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """One failed record is one internal_error drop; the others are kept, and evicting it later counts nothing."""
    build = RecordBuilder.__call__

    def flaky(self: RecordBuilder, state: Any, batch: Any, index: int, order: Any, *prompt: Any) -> Any:
        if batch.inputs[index] == "bad":
            raise ValueError("cannot build")
        return build(self, state, batch, index, order, *prompt)

    monkeypatch.setattr(RecordBuilder, "__call__", flaky)
    with capture_records(run_id="r", count=3, progress_interval_s=0) as records:
        with vg.validation(step=1):
            assert vg.log_generations(["bad", "b", "c"], ["x"] * 3, sample_ids=["u1", "u2", "u3"]) == 2
            vg.log_generations([f"q{i}" for i in range(40)], ["x"] * 40)  # evicts whatever it can
        stats = vg.stats()
    assert stats["dropped.internal_error"] == 1
    assert stats["generations_seen"] == stats["generations_emitted"] + 1 + stats["generations_sampled_out"]
    (end,) = _ends(records)
    assert end[contract.DROPPED] == 1
    assert end[contract.SEEN] - end[contract.EMITTED] - 1 == stats["generations_sampled_out"]


def test_a_failure_the_api_does_not_expect_still_counts_the_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """The guard of last resort counts the call's generations as seen and dropped, and warns once."""

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(_api, "_extra_columns", broken)
    with capture_records(run_id="r", count=4, progress_interval_s=0):
        assert vg.log_generations(["a", "b", "c"], ["x", "y", "z"], step=1) == 0
    stats = vg.stats()
    assert (stats["generations_seen"], stats["dropped.internal_error"], stats["internal_errors"]) == (3, 3, 1)


def test_a_call_into_a_block_ended_meanwhile_is_counted_as_dropped() -> None:
    """A call that found its block's state just before another thread ended it drops its batch, counted."""
    with capture_records(run_id="r", count=4, progress_interval_s=0) as records:
        emitter = _process.current_emitter()
        assert emitter is not None
        state = emitter.open_step(1, "b", None)
        assert emitter.end_step(1, "b", None)
        batch = _records.Batch(["a", "b"], ["x", "y"], None, None, None, None)
        assert emitter.log(state, batch) == 0
        stats = vg.stats()
    assert (stats["generations_seen"], stats["dropped.step_ended"], stats["generations_held"]) == (2, 2, 0)
    (end,) = _ends(records)
    assert end[contract.SEEN] == 0


def test_a_record_still_being_built_when_its_step_ends_is_counted_as_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    """The step's end settles a generation another thread is still building: dropped, in the end record too."""
    building, release = threading.Event(), threading.Event()
    build = RecordBuilder.__call__

    def slow(self: RecordBuilder, state: Any, batch: Any, index: int, order: Any, *prompt: Any) -> Any:
        building.set()
        release.wait(10)
        return build(self, state, batch, index, order, *prompt)

    monkeypatch.setattr(RecordBuilder, "__call__", slow)
    with capture_records(run_id="r", count=4, progress_interval_s=0) as records:
        block = vg.validation(step=1, source="b")
        with block:
            logger = threading.Thread(target=vg.log_generations, args=(["a"], ["x"]), kwargs={"step": 1, "source": "b"})
            # The thread logs into the block's state (same step and source), not a part of its own.
            logger.start()
            assert building.wait(10)
        release.set()
        logger.join(10)
        stats = vg.stats()
    assert (stats["generations_seen"], stats["dropped.step_ended"], stats["generations_emitted"]) == (1, 1, 0)
    (end,) = _ends(records)
    assert (end[contract.SEEN], end[contract.EMITTED], end[contract.DROPPED]) == (1, 0, 1)


def test_an_exception_that_cannot_be_printed_is_still_counted_and_warned(monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure whose message itself raises is named by its type; the call still returns."""

    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no message")

    def broken(*args: object, **kwargs: object) -> None:
        raise Unprintable

    monkeypatch.setattr(BatchKeyer, "candidates", broken)
    with capture_records(run_id="r", count=4, progress_interval_s=0), vg.validation(step=1):
        assert vg.log_generations(["a", "b"], ["x", "y"]) == 0
    stats = vg.stats()
    assert (stats["dropped.internal_error"], stats["internal_errors"]) == (2, 1)
