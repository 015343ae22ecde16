"""One process's emitter: turns calls into generation records, presamples, ends steps.

State is kept per (step, source). With presampling on, each holds only the bottom-k of
what this process saw (O(k) memory) and sends it when the step ends; otherwise every
generation is handed to the SDK as it is logged.

Lifecycle records: a state announces itself with a ``valgen.validation.start`` record when it
is created, a daemon thread sends a ``valgen.validation.progress`` record for every open state
each progress interval (so the collector does not close a step whose source is still working),
and ``valgen.validation.end`` closes it. Each state has an attempt ``<launch id>.<n>``, where n
is 1 + how many times this process already ended that (step, source).

A block-less call (``log_part``: no open block of its step and source here) is a part by itself:
it sends its start record (first part only), the generations that entered the (step, source)'s
bottom-k and an end record, then flushes, all before it returns, so nothing waits for the
process to exit. Consecutive parts of one (step, source) share one state, hence one attempt,
and every end record carries the cumulative counts; consumers keep the largest counts of a
source's repeated end records, so the step is complete and exact whichever end arrives last.
"""

from __future__ import annotations

import logging
import math
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from opentelemetry._logs import SeverityNumber
from opentelemetry.context import Context
from opentelemetry.sdk._logs.export import LogRecordExporter
from opentelemetry.util.types import AnyValue

from otel_valgen import _stats, contract
from otel_valgen._keys import BatchKeyer
from otel_valgen._pipeline import Pipeline
from otel_valgen._records import Batch, PendingRecord, RecordBuilder, candidates
from otel_valgen._sanitize import score_stats
from otel_valgen._settings import Settings
from otel_valgen._tracing import derived_context
from otel_valgen.sampling import BottomK, step_k

_logger = logging.getLogger("otel_valgen")

MAX_OPEN_STEPS = 256
_ENDED_MEMORY = 1024


@dataclass
class StepState:
    """What this process knows of one (step, source)."""

    step: int
    source: str
    context: Context
    count: int = 0
    sources_expected: int | None = None
    attempt: str = ""
    seen: int = 0
    emitted: int = 0
    dropped: int = 0
    score_count: int = 0  # generations seen with a valid score, and their sum (valgen.score.*)
    score_sum: float = 0.0
    kept: BottomK[list[PendingRecord | None]] | None = None
    # Orders the progress thread against the end of the part: no progress record after the end.
    # It also serialises the block-less parts of one (step, source).
    lifecycle: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    finished: bool = False
    announced: bool = False

    def ask(self, count: int | None) -> None:
        """Apply a later call's k to the open state: the smallest k asked for wins (``step_k``)."""
        if count is None or count >= self.count:
            return
        self.count = step_k(self.count, count)
        if self.kept is not None:
            self.kept.shrink(self.count)


def _ray_resource() -> dict[str, str]:
    """Ray job, node and actor ids, when this process is a Ray driver or worker."""
    ray = sys.modules.get("ray")
    if ray is None or not getattr(ray, "is_initialized", lambda: False)():
        return {}
    try:
        runtime = ray.get_runtime_context()
        ids = {
            contract.RAY_JOB_ID: runtime.get_job_id(),
            contract.RAY_NODE_ID: runtime.get_node_id(),
            contract.RAY_ACTOR_ID: runtime.get_actor_id(),
        }
    except Exception:  # Ray's context API differs across versions; ids are optional
        return {}
    return {key: str(value) for key, value in ids.items() if value}


class Emitter:
    """Emits this process's validation generations through one SDK pipeline."""

    def __init__(self, settings: Settings, stats: _stats.Stats, exporter: LogRecordExporter | None = None) -> None:
        self.settings = settings
        self.stats = stats
        self.pipeline = Pipeline(settings, stats, _ray_resource(), exporter)
        self._keyer = BatchKeyer(settings.seed)
        self._build = RecordBuilder(settings, stats)
        self._lock = threading.Lock()
        self._steps: OrderedDict[tuple[int, str], StepState] = OrderedDict()
        # States of block-less parts: every call ended a part; later calls of the step add parts.
        self._parts: OrderedDict[tuple[int, str], StepState] = OrderedDict()
        # How many times each (step, source) was ended here: the next attempt's n is one more.
        self._ended: OrderedDict[tuple[int, str], int] = OrderedDict()
        self._progress_stop = threading.Event()
        self._progress_thread: threading.Thread | None = None

    def has_open_steps(self) -> bool:
        """Whether a part of a step is open here (started and not yet ended)."""
        with self._lock:
            return bool(self._steps)

    def inherit_attempts(self, previous: Emitter) -> None:
        """Continue ``previous``'s attempt numbering (a reconfigured emitter of the same launch)."""
        if previous.settings.launch_id != self.settings.launch_id:
            return
        with previous._lock:
            ended = OrderedDict(previous._ended)
        with self._lock:
            for key, times in ended.items():
                self._ended[key] = max(times, self._ended.get(key, 0))

    def _new_state(
        self, step: int, source: str, context: Context | None, count: int | None, sources_expected: int | None
    ) -> StepState:
        """A state for (step, source) with its attempt; the caller holds the lock."""
        if (step, source) in self._ended:
            self.stats.warn(
                "step_reopened",
                "step %d (source %s) was already ended in this process; its new records form a new attempt",
                step,
                source,
            )
        state = StepState(
            step,
            source,
            context or derived_context(self.settings.run_id, step),
            count=self.settings.count if count is None else count,
            sources_expected=sources_expected,
            attempt=f"{self.settings.launch_id}.{self._ended.get((step, source), 0) + 1}",
        )
        if self.settings.presample:
            state.kept = BottomK(state.count)
        return state

    # -- steps ---------------------------------------------------------------------------

    def open_step(
        self,
        step: int,
        source: str,
        context: Context | None,
        sources_expected: int | None = None,
        count: int | None = None,
    ) -> StepState:
        """Return the open state of (step, source), creating it (and ending the oldest if full).

        A block opened after block-less parts of its step continues their state: same attempt,
        cumulative counts, no second start record.
        """
        overflow: StepState | None = None
        with self._lock:
            key = (step, source)
            state = self._steps.get(key)
            opened = state is None
            if state is None:
                state = self._parts.pop(key, None) or self._new_state(step, source, context, count, sources_expected)
                self._steps[key] = state
                if len(self._steps) > MAX_OPEN_STEPS:
                    _, overflow = self._steps.popitem(last=False)
            state.ask(count)
            if context is not None:
                state.context = context
            if sources_expected is not None:
                state.sources_expected = sources_expected
        if opened:
            if not state.announced:
                self._emit_start(state)
            self._ensure_progress_thread()
        if overflow is not None:
            self.stats.warn(
                "too_many_open_steps",
                "more than %d steps open; ending step %d (source %s) early",
                MAX_OPEN_STEPS,
                overflow.step,
                overflow.source,
            )
            self._finish(overflow)
        return state

    def log_part(self, step: int, source: str, batch: Batch, count: int | None = None) -> int:
        """A block-less call: log ``batch`` as one complete part of (step, source), then flush.

        Joins the open block of (step, source) instead when there is one (a block opened in
        another thread). Otherwise the part's new bottom-k records and an end record with the
        cumulative counts of the (step, source) are sent, and the flush (bounded by the flush
        timeout) is over, before this returns. Returns how many generations were accepted.
        """
        while True:
            with self._lock:
                block = self._steps.get((step, source))
                if block is None:
                    state, evicted = self._part_state(step, source, count)
            if block is not None:
                return self.log(block, batch)
            if evicted is not None:
                with evicted.lifecycle:
                    evicted.finished = True
            with state.lifecycle:
                if state.finished:  # end_step ended it meanwhile: the next part is a new attempt
                    continue
                if not state.announced:
                    self._emit_start(state)
                accepted = self.log(state, batch)
                self._send_end(state, final=False)
            self.flush(self.settings.flush_timeout_s)
            return accepted

    def _part_state(self, step: int, source: str, count: int | None) -> tuple[StepState, StepState | None]:
        """The block-less state of (step, source), created if new, and the one it evicted. Lock held."""
        key = (step, source)
        state = self._parts.get(key)
        if state is not None:
            self._parts.move_to_end(key)
            state.ask(count)
            return state, None
        state = self._parts[key] = self._new_state(step, source, None, count, None)
        if len(self._parts) <= MAX_OPEN_STEPS:
            return state, None
        _, evicted = self._parts.popitem(last=False)  # the least recently logged: it ends here
        self._mark_ended(evicted.step, evicted.source)
        return state, evicted

    def end_step(self, step: int, source: str, sources_expected: int | None) -> bool:
        """Send the step's kept records and its end record, then flush (bounded in time)."""
        announce = False
        with self._lock:
            state = self._steps.pop((step, source), None)
            part = self._parts.pop((step, source), None) if state is None else None
            if part is not None:
                self._mark_ended(step, source)
            elif state is None and (step, source) not in self._ended:  # never opened: an empty part
                state = self._new_state(step, source, None, None, sources_expected)
                announce = True
        if part is not None:
            # Block-less parts already sent everything with cumulative counts; an end record
            # again only when it brings news (sources_expected), for the same attempt.
            with part.lifecycle:
                part.finished = True
                if sources_expected is not None and sources_expected != part.sources_expected:
                    part.sources_expected = sources_expected
                    self._send_end(part, final=False)
            return self.flush(self.settings.flush_timeout_s)
        if state is None:
            # Ended before (twice, or early because too many steps were open): a new, empty
            # attempt would outrank the real one, so nothing is sent.
            self.stats.warn("step_already_ended", "step %d (source %s) was already ended", step, source)
            return self.flush(self.settings.flush_timeout_s)
        if announce:
            self._emit_start(state)
        if sources_expected is not None:
            state.sources_expected = sources_expected
        self._finish(state)
        return self.flush(self.settings.flush_timeout_s)

    def end_all(self) -> None:
        """End every open step (at exit or shutdown), without flushing."""
        with self._lock:
            states = list(self._steps.values())
            self._steps.clear()
        for state in states:
            self._finish(state)

    def _finish(self, state: StepState) -> None:
        with state.lifecycle:
            state.finished = True
            self._send_end(state)

    def _send_end(self, state: StepState, final: bool = True) -> None:
        """Send the kept records not sent yet and an end record; ``final`` ends the (step, source) here."""
        if state.kept is not None:
            for _, slot in state.kept.items():
                # None: sent by an earlier part, or still being built when the step ended.
                pending, slot[0] = slot[0], None
                if pending is not None:
                    self._emit_generation(state, pending)
        attributes: dict[str, AnyValue] = {
            contract.SEEN: state.seen,
            contract.EMITTED: state.emitted,
            contract.DROPPED: state.dropped,
            contract.SAMPLE_COUNT: state.count,
        }
        if state.sources_expected is not None:
            attributes[contract.SOURCES_EXPECTED] = state.sources_expected
        if math.isfinite(state.score_sum):
            attributes[contract.SCORE_COUNT] = state.score_count
            attributes[contract.SCORE_SUM] = state.score_sum
        else:
            self.stats.warn(
                "score_sum_overflow",
                "the scores of step %d (source %s) sum beyond a double; its end record carries no score statistics",
                state.step,
                state.source,
            )
        self._emit_lifecycle(
            state,
            contract.EVENT_VALIDATION_END,
            f"validation step {state.step} ended for source {state.source}",
            attributes,
        )
        self.stats.add(_stats.END_RECORDS_EMITTED)
        if final:
            with self._lock:
                self._mark_ended(state.step, state.source)

    def _mark_ended(self, step: int, source: str) -> None:
        """Count one more end of (step, source): its next records form a new attempt. Lock held."""
        key = (step, source)
        self._ended[key] = self._ended.pop(key, 0) + 1
        while len(self._ended) > _ENDED_MEMORY:
            self._ended.popitem(last=False)

    def _emit_lifecycle(self, state: StepState, event: str, body: str, attributes: dict[str, AnyValue]) -> None:
        """Emit a start, progress or end record of ``state``: its identity, then ``attributes``."""
        self.pipeline.logger.emit(
            timestamp=time.time_ns(),
            context=state.context,
            severity_number=SeverityNumber.INFO,
            severity_text="INFO",
            body=body,
            attributes={
                contract.RUN_ID: self.settings.run_id,
                contract.STEP: state.step,
                contract.SOURCE: state.source,
                contract.ATTEMPT: state.attempt,
                **attributes,
            },
            event_name=event,
        )

    def _emit_start(self, state: StepState) -> None:
        attributes: dict[str, AnyValue] = {contract.SAMPLE_COUNT: state.count}
        if state.sources_expected is not None:
            attributes[contract.SOURCES_EXPECTED] = state.sources_expected
        self._emit_lifecycle(
            state,
            contract.EVENT_VALIDATION_START,
            f"validation step {state.step} started for source {state.source}",
            attributes,
        )
        state.announced = True
        self.stats.add(_stats.START_RECORDS_EMITTED)

    # -- progress ------------------------------------------------------------------------

    def _ensure_progress_thread(self) -> None:
        """Start the progress thread on the first open state (again after a fork)."""
        if self.settings.progress_interval_s <= 0 or self._progress_stop.is_set():
            return
        thread = self._progress_thread
        if thread is not None and thread.is_alive():
            return
        with self._lock:
            if self._progress_thread is not thread:
                return  # another caller started it
            self._progress_thread = threading.Thread(
                target=self._progress_loop, name="otel-valgen-progress", daemon=True
            )
            self._progress_thread.start()

    def _progress_loop(self) -> None:
        while not self._progress_stop.wait(self.settings.progress_interval_s):
            try:
                self.emit_progress()
            except Exception:  # the thread must outlive any failure; a missed progress record is harmless
                self.stats.add(_stats.INTERNAL_ERRORS)
                _logger.exception("otel_valgen: sending progress records failed")

    def emit_progress(self) -> int:
        """Send one progress record (generations seen so far) per open state; return how many."""
        with self._lock:
            snapshot = [(state, state.seen) for state in self._steps.values()]
        sent = 0
        for state, seen in snapshot:
            with state.lifecycle:
                if state.finished:  # ended since the snapshot: its end record is already out
                    continue
                self._emit_lifecycle(
                    state,
                    contract.EVENT_VALIDATION_PROGRESS,
                    f"validation step {state.step} in progress for source {state.source}",
                    {contract.SEEN: seen},
                )
            sent += 1
        self.stats.add(_stats.PROGRESS_RECORDS_EMITTED, sent)
        return sent

    def stop_progress(self, timeout_s: float = 1.0) -> None:
        """Stop the progress thread (for good)."""
        self._progress_stop.set()
        thread = self._progress_thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)

    # -- generations ---------------------------------------------------------------------

    def log(self, state: StepState, batch: Batch) -> int:
        """Record one batch of generations; return how many were accepted.

        Keys are computed for every generation, and the count and sum of the valid scores over
        the whole batch; the texts are cleaned and the record built only for those that (still)
        belong to the local bottom-k.
        """
        size = len(batch.inputs)
        self.stats.add(_stats.GENERATIONS_SEEN, size)
        scored, score_sum = score_stats(batch.scores)
        kept = state.kept
        if kept is None:
            with self._lock:
                state.seen += size
                state.score_count += scored
                state.score_sum += score_sum
            for index, order in candidates(batch, self._keyer, None, None):
                self._emit_generation(state, self._build(state, batch, index, order))
            self._build.report_extra(batch)
            return size
        with self._lock:
            # The k-th key only falls as items are offered, so an earlier read is a safe filter.
            threshold = kept.threshold()
        found = candidates(batch, self._keyer, threshold, kept.k)
        slots: dict[int, list[PendingRecord | None]] = {}
        with self._lock:
            state.seen += size
            state.score_count += scored
            state.score_sum += score_sum
            orders = dict(found)
            for index, order in found:
                if kept.would_keep(order):
                    slot: list[PendingRecord | None] = [None]
                    kept.offer(order, slot)
                    slots[index] = slot
            alive = {id(item) for item in kept.kept()} if slots else set()
        for index, slot in slots.items():
            if id(slot) in alive:
                slot[0] = self._build(state, batch, index, orders[index])
        self._build.report_extra(batch)
        return size

    def _emit_generation(self, state: StepState, pending: PendingRecord) -> None:
        self.pipeline.logger.emit(
            timestamp=pending.timestamp,
            context=state.context,
            severity_number=SeverityNumber.INFO,
            severity_text="INFO",
            body=pending.body,
            attributes=pending.attributes,
            event_name=contract.EVENT_GENERATION,
        )
        with self._lock:
            state.emitted += 1
        self.stats.add(_stats.GENERATIONS_EMITTED)

    # -- lifecycle -----------------------------------------------------------------------

    def _delivered(self, call: Callable[[float], bool], timeout_s: float) -> bool:
        """Run a flush or shutdown of the pipeline: True if it completed and nothing failed meanwhile."""
        undelivered = (_stats.RECORDS_EXPORT_FAILED, _stats.RECORDS_SPOOLED)
        before = [self.stats.get(name) for name in undelivered]
        completed = call(timeout_s)
        return completed and [self.stats.get(name) for name in undelivered] == before

    def flush(self, timeout_s: float) -> bool:
        """Export what is queued, waiting at most ``timeout_s``; True if all was confirmed."""
        return self._delivered(self.pipeline.flush, timeout_s)

    def shutdown(self, timeout_s: float) -> bool:
        """End open steps, flush and release the pipeline, waiting at most ``timeout_s``.

        True when everything was confirmed delivered (nothing failed, spooled or timed out).
        """
        self.stop_progress()
        self.end_all()
        return self._delivered(self.pipeline.shutdown, timeout_s)
