"""One process's emitter: turns calls into generation records, presamples, ends steps.

State is kept per (step, source, kind): validation (blocks and block-less calls) and training
rollouts (``log_rollouts``, block-less parts only) of one step are separate parts, with
attempts of their own; every record carries its ``valgen.kind``. With presampling on, each
holds only the bottom-k of what this process saw (O(k) memory; for rollouts the bottom-k
prompts with their responses, O(k·n)) and sends it when the step ends; otherwise every
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

Accounting: every generation a state takes in is counted in its ``seen`` and, once its fate is
known, in exactly one of ``emitted``, ``dropped`` (bad input, an internal failure) or the
process's ``generations_sampled_out`` (it left the local bottom-k); until then it is held
(``_presample``). So an end record's ``seen - emitted - dropped`` is what this source sampled
out, and ``stats()`` balances whenever no call is in progress.
"""

from __future__ import annotations

import logging
import math
import sys
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from opentelemetry.context import Context
from opentelemetry.sdk._logs.export import LogRecordExporter
from opentelemetry.util.types import AnyValue

from otel_valgen import _integration, _stats, contract
from otel_valgen._keys import BatchKeyer
from otel_valgen._pipeline import Pipeline
from otel_valgen._presample import Candidate, Entered, LocalSample, prompts_under_rate
from otel_valgen._records import (
    Batch,
    PendingRecord,
    RecordBuilder,
    ResponseLanes,
    candidates,
    new_part_tag,
    rollout_candidates,
    rollout_prompts,
)
from otel_valgen._sanitize import score_stats, valid_scores
from otel_valgen._settings import Settings
from otel_valgen._tracing import derived_context
from otel_valgen.data_sources import DataSourceTally, data_sources_of
from otel_valgen.distinct import DistinctKeys
from otel_valgen.sampling import Order, step_k
from otel_valgen.tokens import MismatchFigures, batch_figures, kl_of
from otel_valgen.trajectories import TrajectoryFigures

_logger = logging.getLogger("otel_valgen")

MAX_OPEN_STEPS = 256
_ENDED_MEMORY = 1024


PartKey = tuple[int, str, str]
"""(step, source, kind): what the emitter keeps one state for."""


@dataclass
class StepState:
    """What this process knows of one (step, source, kind)."""

    step: int
    source: str
    context: Context
    kind: str = contract.KIND_VALIDATION
    count: int = 0
    sources_expected: int | None = None
    attempt: str = ""
    seen: int = 0
    emitted: int = 0
    dropped: int = 0
    score_count: int = 0  # generations seen with a valid score, and their sum (valgen.score.*)
    score_sum: float = 0.0
    trajectories: TrajectoryFigures = field(default_factory=TrajectoryFigures)
    mismatch: MismatchFigures = field(default_factory=MismatchFigures)  # rollout responses' per-token figures
    # Rollouts: the part's distinct prompt keys (valgen.prompt_keys, valgen.prompts_seen).
    prompts: DistinctKeys = field(default_factory=DistinctKeys, repr=False, compare=False)
    # The ``@<tag>`` of the part's sample ids, and its responses numbered per prompt over its calls.
    tag: str = field(default_factory=new_part_tag)
    lanes: ResponseLanes = field(default_factory=ResponseLanes, repr=False, compare=False)
    response_lanes: Counter[str] = field(default_factory=Counter)  # rollouts: responses numbered per chosen prompt
    kept: LocalSample | None = None
    # Rollouts' watch-list (``rollout_rate``): the rate, and the prompts under it over the part's
    # calls (each call's distinct ones, added up: valgen.prompts_under_rate).
    rate: float | None = None
    prompts_under_rate: int = 0
    # k per data source (sample_by = data_source): each data source's figures (valgen.data_sources).
    by_source: DataSourceTally | None = None
    # Orders the progress thread against the end of the part: no progress record after the end.
    # It also serialises the block-less parts of one (step, source).
    lifecycle: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    finished: bool = False
    announced: bool = False
    # The integration's attributes on its start and end records (otel_valgen._integration).
    marks: dict[str, AnyValue] = field(default_factory=dict)

    def ask(self, count: int | None) -> int:
        """Apply a later call's k to the open state: the smallest k asked for wins (``step_k``).

        Returns how many held generations the smaller k sampled out.
        """
        if count is None or count >= self.count:
            return 0
        self.count = step_k(self.count, count)
        return self.kept.shrink(self.count) if self.kept is not None else 0


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
        self._steps: OrderedDict[PartKey, StepState] = OrderedDict()
        # States of block-less parts: every call ended a part; later calls of the step add parts.
        self._parts: OrderedDict[PartKey, StepState] = OrderedDict()
        # How many times each (step, source, kind) was ended here: the next attempt's n is one more.
        self._ended: OrderedDict[PartKey, int] = OrderedDict()
        self._progress_stop = threading.Event()
        self._progress_thread: threading.Thread | None = None

    def held(self) -> int:
        """Generations kept in the bottom-k of this process's open steps and not sent yet."""
        with self._lock:
            states = (*self._steps.values(), *self._parts.values())
            return sum(state.kept.held() for state in states if state.kept is not None)

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
        self,
        step: int,
        source: str,
        context: Context | None,
        count: int | None,
        sources_expected: int | None,
        kind: str = contract.KIND_VALIDATION,
    ) -> StepState:
        """A state for (step, source, kind) with its attempt; the caller holds the lock."""
        if (step, source, kind) in self._ended:
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
            attempt=f"{self.settings.launch_id}.{self._ended.get((step, source, kind), 0) + 1}",
            marks=_integration.current(),
            kind=kind,
            rate=self.settings.rollout_rate if kind == contract.KIND_ROLLOUT else None,
        )
        by_data_source = self.settings.sample_by == contract.SAMPLE_BY_DATA_SOURCE
        if by_data_source:
            state.by_source = DataSourceTally()
        if self.settings.presample:
            extremes = self.settings.extremes if kind == contract.KIND_VALIDATION else 0
            mismatched = self.settings.mismatched if kind == contract.KIND_ROLLOUT else 0
            state.kept = LocalSample(state.count, state.rate, by_data_source, extremes, mismatched)
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
            key = (step, source, contract.KIND_VALIDATION)
            state = self._steps.get(key)
            opened = state is None
            if state is None:
                state = self._parts.pop(key, None) or self._new_state(step, source, context, count, sources_expected)
                self._steps[key] = state
                if len(self._steps) > MAX_OPEN_STEPS:
                    _, overflow = self._steps.popitem(last=False)
            self.stats.add(_stats.GENERATIONS_SAMPLED_OUT, state.ask(count))
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

    def log_part(
        self, step: int, source: str, batch: Batch, count: int | None = None, kind: str = contract.KIND_VALIDATION
    ) -> int:
        """A block-less call: log ``batch`` as one complete part of (step, source), then flush.

        Joins the open block of (step, source) instead when there is one (a block opened in
        another thread). Otherwise the part's new bottom-k records and an end record with the
        cumulative counts of the (step, source) are sent, and the flush (bounded by the flush
        timeout) is over, before this returns. Returns how many generations were accepted.
        Rollouts (``kind``) have no blocks: each call is a part.
        """
        while True:
            with self._lock:
                block = self._steps.get((step, source, kind))
                if block is None:
                    state, evicted = self._part_state(step, source, count, kind)
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

    def _part_state(self, step: int, source: str, count: int | None, kind: str) -> tuple[StepState, StepState | None]:
        """The block-less state of (step, source, kind), created if new, and the one it evicted. Lock held."""
        key = (step, source, kind)
        state = self._parts.get(key)
        if state is not None:
            self._parts.move_to_end(key)
            self.stats.add(_stats.GENERATIONS_SAMPLED_OUT, state.ask(count))
            return state, None
        state = self._parts[key] = self._new_state(step, source, None, count, None, kind)
        if len(self._parts) <= MAX_OPEN_STEPS:
            return state, None
        _, evicted = self._parts.popitem(last=False)  # the least recently logged: it ends here
        self._mark_ended(evicted.step, evicted.source, evicted.kind)
        return state, evicted

    def end_step(self, step: int, source: str, sources_expected: int | None) -> bool:
        """Send the step's kept records and its end record, then flush (bounded in time)."""
        announce = False
        key = (step, source, contract.KIND_VALIDATION)
        with self._lock:
            state = self._steps.pop(key, None)
            part = self._parts.pop(key, None) if state is None else None
            if part is not None:
                self._mark_ended(*key)
            elif state is None and key not in self._ended:  # never opened: an empty part
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
            self._send_end(state)

    def _send_end(self, state: StepState, final: bool = True) -> None:
        """Send the kept records not sent yet and an end record; ``final`` ends the (step, source) here."""
        with self._lock:
            state.finished = state.finished or final  # a call that finds it later drops its batch
            records, unbuilt = state.kept.take(final) if state.kept is not None else ([], 0)
            state.dropped += unbuilt
        if unbuilt:
            self._ended_meanwhile(state, unbuilt)
        self._emitted(state, sum(self._emit_generation(state, record) for record in records))
        attributes: dict[str, AnyValue] = {
            contract.SEEN: state.seen,
            contract.EMITTED: state.emitted,
            contract.DROPPED: state.dropped,
            contract.SAMPLE_COUNT: state.count,
            **state.marks,
        }
        if state.kind == contract.KIND_ROLLOUT:
            with self._lock:
                attributes[contract.PROMPTS_SEEN] = state.prompts.count().value
                attributes[contract.PROMPT_KEYS] = state.prompts.keys()
        if state.rate is not None:
            attributes.update(self._watch_list(state, state.rate))
        if state.sources_expected is not None:
            attributes[contract.SOURCES_EXPECTED] = state.sources_expected
        if state.by_source is not None:
            with self._lock:
                attributes[contract.SAMPLE_BY] = contract.SAMPLE_BY_DATA_SOURCE
                attributes[contract.DATA_SOURCES] = state.by_source.attribute()  # type: ignore[assignment]
        figures = state.trajectories.attribute()
        if figures is not None:
            attributes[contract.TRAJECTORIES] = figures  # type: ignore[assignment]  # a map (AnyValue)
        mismatch = state.mismatch.attribute()
        if mismatch is not None:
            attributes[contract.MISMATCH] = mismatch  # type: ignore[assignment]
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
        if self._emit_lifecycle(
            state,
            contract.EVENT_VALIDATION_END,
            f"validation step {state.step} ended for source {state.source}",
            attributes,
        ):
            self.stats.add(_stats.END_RECORDS_EMITTED)
        if final:
            with self._lock:
                self._mark_ended(state.step, state.source, state.kind)

    def _watch_list(self, state: StepState, rate: float) -> dict[str, AnyValue]:
        """A rollout end record's rate and prompts under it; warns when more are under it than k keeps."""
        with self._lock:
            under, k = state.prompts_under_rate, state.count
        if under > k:
            self.stats.warn(
                "rollout_rate_over_cap",
                "step %d (source %s): %d prompts under rollout_rate %s, more than rollout_count %d keeps; "
                "the %d smallest are kept (valgen.prompts_over_cap counts the rest)",
                state.step,
                state.source,
                under,
                rate,
                k,
                k,
            )
        return {contract.SAMPLE_RATE: rate, contract.PROMPTS_UNDER_RATE: under}

    def _mark_ended(self, step: int, source: str, kind: str) -> None:
        """Count one more end of (step, source, kind): its next records form a new attempt. Lock held."""
        key = (step, source, kind)
        self._ended[key] = self._ended.pop(key, 0) + 1
        while len(self._ended) > _ENDED_MEMORY:
            self._ended.popitem(last=False)

    def _emit_lifecycle(self, state: StepState, event: str, body: str, attributes: dict[str, AnyValue]) -> bool:
        """Emit a start, progress or end record of ``state``: its identity, then ``attributes``.

        True when the SDK took it; a failure is counted and warned, never raised.
        """
        try:
            self.pipeline.emit(
                time.time_ns(),
                state.context,
                body,
                {
                    contract.RUN_ID: self.settings.run_id,
                    contract.STEP: state.step,
                    contract.SOURCE: state.source,
                    contract.ATTEMPT: state.attempt,
                    contract.KIND: state.kind,
                    **attributes,
                },
                event,
            )
        except Exception as error:
            self.stats.failed(f"sending a {event} record", error)
            return False
        return True

    def _emit_start(self, state: StepState) -> None:
        attributes: dict[str, AnyValue] = {contract.SAMPLE_COUNT: state.count, **state.marks}
        if state.sources_expected is not None:
            attributes[contract.SOURCES_EXPECTED] = state.sources_expected
        if self._emit_lifecycle(
            state,
            contract.EVENT_VALIDATION_START,
            f"validation step {state.step} started for source {state.source}",
            attributes,
        ):
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
            except Exception as error:  # the thread must outlive any failure; a missed progress record is harmless
                self.stats.failed("sending progress records", error)

    def emit_progress(self) -> int:
        """Send one progress record (generations seen so far) per open state; return how many."""
        with self._lock:
            snapshot = [(state, state.seen) for state in self._steps.values()]
        sent = 0
        for state, seen in snapshot:
            with state.lifecycle:
                if state.finished:  # ended since the snapshot: its end record is already out
                    continue
                sent += self._emit_lifecycle(
                    state,
                    contract.EVENT_VALIDATION_PROGRESS,
                    f"validation step {state.step} in progress for source {state.source}",
                    {contract.SEEN: seen},
                )
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
        """Record one batch of generations; return how many were accepted (not dropped).

        Keys are computed for every generation, and the count and sum of the valid scores over
        the whole batch; the texts are cleaned and the record built only for those that (still)
        belong to the local bottom-k. Every generation is counted (module docstring), and
        nothing raises once the batch is counted: a failure to compute the ids or keys drops
        the batch, one to build or send a record drops that generation.
        """
        size = len(batch.inputs)
        kept = state.kept
        try:
            scored, score_sum = score_stats(batch.scores)
            data_sources = data_sources_of(batch.data_sources, size) if state.by_source is not None else None
            scores = valid_scores(batch.scores) if kept is not None and kept.extremes else None
            with self._lock:
                # The k-th key only falls as items are offered, so an earlier read is a safe filter.
                threshold, k = kept.prefilter(data_sources) if kept is not None else (None, None)
            found, prompts = self._candidates(state, batch, threshold, k)
            under_rate = prompts_under_rate(prompts, state.rate)
        except Exception as error:
            self.refuse(state, size)
            self.stats.failed("computing sample ids and keys", error, size)
            return 0
        trajectories = self._trajectories(batch, data_sources)
        mismatch, responses = self._mismatch(batch, data_sources)
        if responses is not None and batch.rollout is not None:  # the records carry the figures ranked here
            batch = replace(batch, rollout=replace(batch.rollout, figures=responses))
        kls = [kl_of(figures) for figures in responses] if responses and kept is not None and kept.mismatched else None
        with self._lock:
            ended = state.finished
            if not ended:
                state.seen += size
                state.score_count += scored
                state.score_sum += score_sum
                state.trajectories.absorb(trajectories)
                state.mismatch.absorb(mismatch)
                state.prompts.add(prompts)
                state.prompts_under_rate += under_rate
                if state.by_source is not None and data_sources is not None:
                    state.by_source.add(data_sources, batch.scores)
                entered, evicted = kept.offer(found, data_sources, scores, kls) if kept is not None else ([], 0)
        if ended:  # its block was ended by another thread after this call found it
            self.refuse(state, size)
            self._ended_meanwhile(state, size)
            return 0
        self.stats.add(_stats.GENERATIONS_SEEN, size)
        if kept is None:
            dropped = self._emit_all(state, batch, found)
        else:
            self.stats.add(_stats.GENERATIONS_SAMPLED_OUT, size - len(entered) + evicted)
            dropped = self._build_kept(state, batch, entered)
        try:
            self._build.report_extra(batch)
        except Exception as error:
            self.stats.failed("reporting invalid extra values", error)
        return size - dropped

    def _trajectories(self, batch: Batch, data_sources: list[str] | None) -> TrajectoryFigures:
        """The figures of a call's trajectories (per data source too when given); a failure costs the figures only."""
        figures = TrajectoryFigures()
        rollout = batch.rollout
        try:
            invalid = figures.add(
                batch.outputs,
                rollout.truncated if rollout is not None else None,
                data_sources,
                tool_rewards=rollout.tool_rewards if rollout is not None else None,
                turn_scores=rollout.turn_scores if rollout is not None else None,
            )
        except Exception as error:
            self.stats.failed("counting trajectory figures", error)
            return TrajectoryFigures()
        if invalid:
            left_out = sum(invalid.values())
            self.stats.add(_stats.TRAJECTORY_REWARDS_INVALID, left_out)
            reasons = ", ".join(f"{reason}: {n}" for reason, n in sorted(invalid.items()))
            self.stats.warn(
                "invalid_trajectory_reward",
                "%d tool_rewards/turn_scores value(s) left out of the trajectory figures (%s)",
                left_out,
                reasons,
            )
        return figures

    def _mismatch(
        self, batch: Batch, data_sources: list[str] | None
    ) -> tuple[MismatchFigures, list[dict[str, float | int] | None] | None]:
        """The figures of every response of a rollout call with per-token data, and each response's.

        They are counted per data source whenever the call names them (not only with k per data
        source). A failure costs the figures only (none, and None for the responses').
        """
        figures = MismatchFigures()
        columns = batch.rollout.tokens if batch.rollout is not None else None
        if not columns:
            return figures, None
        try:
            if data_sources is None and batch.data_sources is not None:
                data_sources = data_sources_of(batch.data_sources, len(batch.inputs))
            lengths = batch.rollout.response_lengths if batch.rollout is not None else None
            responses = batch_figures(columns, lengths)
            figures.add_all(responses, data_sources)
        except Exception as error:
            self.stats.failed("computing the responses' mismatch figures", error)
            return MismatchFigures(), None
        return figures, responses

    def refuse(self, state: StepState, generations: int) -> None:
        """Count generations that reach ``state`` only to be dropped whole (the caller counts the reason).

        They are seen (here and in ``stats()``) and dropped, so the step's end record shows them.
        """
        with self._lock:
            state.seen += generations
            state.dropped += generations
        self.stats.add(_stats.GENERATIONS_SEEN, generations)

    def _candidates(
        self, state: StepState, batch: Batch, threshold: Order | None, k: int | None
    ) -> tuple[list[Candidate], list[int]]:
        """The generations that may enter the state's sample, and the keys of the distinct prompts (rollouts)."""
        if state.kind != contract.KIND_ROLLOUT:
            generations = candidates(batch, self._keyer, threshold, k, state.lanes, state.tag)
            return [(index, order, order) for index, order in generations], []
        prompt_ids = rollout_prompts(batch)
        prompt_keys: list[int] = []
        responses = rollout_candidates(
            prompt_ids, self.settings.seed, threshold, k, state.response_lanes, state.tag, prompt_keys
        )
        return responses, prompt_keys

    def _prompt_of(self, state: StepState, prompt: Order) -> Order | None:
        """The prompt sort key a rollout's record carries (None for validation)."""
        return prompt if state.kind == contract.KIND_ROLLOUT else None

    def _emit_all(self, state: StepState, batch: Batch, found: list[Candidate]) -> int:
        """Build and send the records of ``found`` (presampling off); return how many were dropped."""
        dropped = emitted = 0
        for index, prompt, order in found:
            try:
                record = self._build(state, batch, index, order, self._prompt_of(state, prompt))
            except Exception as error:
                self._lost(state, "building a generation record", error)
                dropped += 1
            else:
                sent = self._emit_generation(state, record)
                emitted += sent
                dropped += not sent
        self._emitted(state, emitted)
        return dropped

    def _build_kept(self, state: StepState, batch: Batch, entered: list[Entered]) -> int:
        """Build the records of the generations that entered the bottom-k; return how many failed (dropped)."""
        failed = 0
        for index, prompt, order, item in entered:
            try:
                item.record = self._build(state, batch, index, order, self._prompt_of(state, prompt))
            except Exception as error:
                with self._lock:
                    lost = LocalSample.drop(item)  # 0 when evicted or ended meanwhile: already counted
                    state.dropped += lost
                self.stats.failed("building a generation record", error, lost)
                failed += lost
        return failed

    def _emitted(self, state: StepState, records: int) -> None:
        """Count generation records the SDK took (once per batch of them: one lock each, not one per record)."""
        if records:
            with self._lock:
                state.emitted += records
            self.stats.add(_stats.GENERATIONS_EMITTED, records)

    def _emit_generation(self, state: StepState, pending: PendingRecord) -> bool:
        """Hand one generation record to the SDK; True when it took it, else it is counted as dropped.

        The caller counts the records taken (``_emitted``).
        """
        if state.rate is not None:  # the watch-list's rate, so that the collector applies it too
            pending.attributes[contract.SAMPLE_RATE] = state.rate
        try:
            self.pipeline.emit(
                pending.timestamp, state.context, pending.body, pending.attributes, contract.EVENT_GENERATION
            )
        except Exception as error:
            self._lost(state, "sending a generation record to the OpenTelemetry SDK", error)
            return False
        return True

    def _ended_meanwhile(self, state: StepState, generations: int) -> None:
        self.stats.drop(
            "step_ended",
            generations,
            "step %d (source %s) ended while a call in another thread was still logging into it",
            state.step,
            state.source,
        )

    def _lost(self, state: StepState, stage: str, error: Exception) -> None:
        """Count one generation of ``state`` (already seen) lost to an internal failure in ``stage``."""
        with self._lock:
            state.dropped += 1
        self.stats.failed(stage, error, 1)

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
