"""One process's emitter: turns calls into generation records, presamples, ends steps.

State is kept per (step, source). With presampling on, each holds only the bottom-k of
what this process saw (O(k) memory) and sends it when the step ends; otherwise every
generation is handed to the SDK as it is logged.
"""

from __future__ import annotations

import hashlib
import logging
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry._logs import SeverityNumber
from opentelemetry.context import Context
from opentelemetry.sdk._logs.export import LogRecordExporter
from opentelemetry.util.types import AnyValue

from otel_valgen import _stats, contract
from otel_valgen._pipeline import Pipeline
from otel_valgen._sanitize import CleanText, clean_score, clean_text
from otel_valgen._settings import Settings
from otel_valgen._tracing import derived_context
from otel_valgen.sampling import BottomK, Order, SampleKeyer

_logger = logging.getLogger("otel_valgen")

MAX_OPEN_STEPS = 256
_ENDED_MEMORY = 1024


@dataclass
class PendingRecord:
    """A generation record waiting for the end of its step (presampling)."""

    timestamp: int
    body: dict[str, AnyValue]
    attributes: dict[str, AnyValue]


@dataclass
class StepState:
    """What this process knows of one (step, source)."""

    step: int
    source: str
    context: Context
    count: int = 0
    sources_expected: int | None = None
    seen: int = 0
    emitted: int = 0
    dropped: int = 0
    kept: BottomK[list[PendingRecord | None]] | None = None
    opened_at: float = field(default_factory=time.monotonic)


@dataclass(frozen=True)
class Batch:
    """One call's columns, already checked for equal lengths."""

    inputs: Sequence[Any]
    outputs: Sequence[Any]
    scores: Sequence[Any] | None
    ground_truths: Sequence[Any] | None
    sample_ids: Sequence[Any] | None
    data_sources: Sequence[Any] | None


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


def _utf8(value: object) -> bytes:
    """UTF-8 of a text as it will be sent (invalid characters replaced), untruncated."""
    if type(value) is str:
        try:
            return value.encode()
        except UnicodeEncodeError:
            pass
    return clean_text(value, sys.maxsize).text.encode()


def base_sample_id(sample_id: object, raw_input: object) -> str:
    """The id of a prompt: the caller's id, else 16 hex digits of the SHA-256 of the input's UTF-8."""
    if sample_id is not None:
        text = sample_id if type(sample_id) is str else clean_text(sample_id, 1024).text
        if text:
            return text if type(sample_id) is not str else _utf8(text).decode()
    return hashlib.sha256(_utf8(raw_input)).hexdigest()[:16]


class Emitter:
    """Emits this process's validation generations through one SDK pipeline."""

    def __init__(self, settings: Settings, stats: _stats.Stats, exporter: LogRecordExporter | None = None) -> None:
        self.settings = settings
        self.stats = stats
        self.pipeline = Pipeline(settings, stats, _ray_resource(), exporter)
        seed = settings.seed % (1 << 64)
        self._keyer = SampleKeyer(seed)
        # OTLP ints are int64: the seed travels as the same 64 bits read as signed.
        self._seed_attribute = seed - (1 << 64) if seed >= 1 << 63 else seed
        self._lock = threading.Lock()
        self._steps: OrderedDict[tuple[int, str], StepState] = OrderedDict()
        self._ended: OrderedDict[tuple[int, str], None] = OrderedDict()

    # -- steps ---------------------------------------------------------------------------

    def open_step(
        self,
        step: int,
        source: str,
        context: Context | None,
        sources_expected: int | None = None,
        count: int | None = None,
    ) -> StepState:
        """Return the state of (step, source), creating it (and ending the oldest if full)."""
        overflow: StepState | None = None
        with self._lock:
            state = self._steps.get((step, source))
            if state is None:
                if (step, source) in self._ended:
                    self.stats.warn(
                        "step_reopened",
                        "step %d (source %s) already ended; its new records will be late",
                        step,
                        source,
                    )
                state = StepState(
                    step,
                    source,
                    context or derived_context(self.settings.run_id, step),
                    count=self.settings.count if count is None else count,
                )
                if self.settings.presample:
                    state.kept = BottomK(state.count)
                self._steps[(step, source)] = state
                if len(self._steps) > MAX_OPEN_STEPS:
                    _, overflow = self._steps.popitem(last=False)
            elif context is not None:
                state.context = context
            if sources_expected is not None:
                state.sources_expected = sources_expected
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

    def end_step(self, step: int, source: str, sources_expected: int | None, flush: bool = True) -> bool:
        """Send the step's kept records and its end record; flush (bounded) when asked."""
        with self._lock:
            state = self._steps.pop((step, source), None)
        if state is None:
            state = StepState(step, source, derived_context(self.settings.run_id, step), count=self.settings.count)
        if sources_expected is not None:
            state.sources_expected = sources_expected
        self._finish(state)
        return self.flush(self.settings.flush_timeout_s) if flush else True

    def end_all(self) -> None:
        """End every open step (at exit or shutdown), without flushing."""
        with self._lock:
            states = list(self._steps.values())
            self._steps.clear()
        for state in states:
            self._finish(state)

    def _finish(self, state: StepState) -> None:
        if state.kept is not None:
            for _, slot in state.kept.items():
                if slot[0] is not None:  # None only if the step ended while a batch was being built
                    self._emit_generation(state, slot[0])
        attributes: dict[str, AnyValue] = {
            contract.RUN_ID: self.settings.run_id,
            contract.STEP: state.step,
            contract.SOURCE: state.source,
            contract.SEEN: state.seen,
            contract.EMITTED: state.emitted,
            contract.DROPPED: state.dropped,
            contract.SAMPLE_COUNT: state.count,
        }
        if state.sources_expected is not None:
            attributes[contract.SOURCES_EXPECTED] = state.sources_expected
        self.pipeline.logger.emit(
            timestamp=time.time_ns(),
            context=state.context,
            severity_number=SeverityNumber.INFO,
            severity_text="INFO",
            body=f"validation step {state.step} ended for source {state.source}",
            attributes=attributes,
            event_name=contract.EVENT_VALIDATION_END,
        )
        self.stats.add(_stats.END_RECORDS_EMITTED)
        with self._lock:
            self._ended[(state.step, state.source)] = None
            while len(self._ended) > _ENDED_MEMORY:
                self._ended.popitem(last=False)

    # -- generations ---------------------------------------------------------------------

    def log(self, state: StepState, batch: Batch) -> int:
        """Record one batch of generations; return how many were accepted.

        Keys are computed for every generation; the texts are cleaned and the record built
        only for those that (still) belong to the local bottom-k.
        """
        size = len(batch.inputs)
        self.stats.add(_stats.GENERATIONS_SEEN, size)
        kept = state.kept
        if kept is None:
            with self._lock:
                state.seen += size
            for index, order in self._candidates(batch, None):
                self._emit_generation(state, self._build(state, batch, index, order))
            return size
        with self._lock:
            # The k-th key only falls as items are offered, so an earlier read is a safe filter.
            threshold = kept.threshold()
        candidates = self._candidates(batch, threshold)
        slots: dict[int, list[PendingRecord | None]] = {}
        with self._lock:
            state.seen += size
            orders = dict(candidates)
            for index, order in candidates:
                if kept.would_keep(order):
                    slot: list[PendingRecord | None] = [None]
                    kept.offer(order, slot)
                    slots[index] = slot
            alive = {id(item) for _, item in kept.items()} if slots else set()
        for index, slot in slots.items():
            if id(slot) in alive:
                slot[0] = self._build(state, batch, index, orders[index])
        return size

    def _candidates(self, batch: Batch, threshold: Order | None) -> list[tuple[int, Order]]:
        """(index, sort key) of the generations of a batch whose key is below ``threshold``.

        Sample ids are ``<uid or input hash>/<i-th response to it in this call>``. This is the
        per-generation hot path: ``SampleKeyer`` is inlined and rejected generations cost
        two hashes and one comparison.
        """
        counts: dict[str, int] = {}
        found: list[tuple[int, Order]] = []
        append, sha256, given = found.append, hashlib.sha256, batch.sample_ids
        inner, outer, from_bytes = self._keyer.inner.copy, self._keyer.outer.copy, int.from_bytes
        limit_key, limit_id = threshold if threshold is not None else (1 << 63, b"")
        for index, raw_input in enumerate(batch.inputs):
            base = None
            if given is None and type(raw_input) is str:
                try:  # noqa: SIM105 (hot path: a context manager per generation costs 5% here)
                    base = sha256(raw_input.encode()).digest()[:8].hex()  # a valid str, no uid: the usual case
                except UnicodeEncodeError:
                    pass
            if base is None:
                base = base_sample_id(given[index] if given is not None else None, raw_input)
            response_index = counts[base] = counts.get(base, -1) + 1
            sample_id = f"{base}/{response_index}".encode()
            inner_hash = inner()
            inner_hash.update(sample_id)
            outer_hash = outer()
            outer_hash.update(inner_hash.digest())
            key = from_bytes(outer_hash.digest()[:8]) >> 1  # big-endian
            if key < limit_key or (key == limit_key and sample_id < limit_id):
                append((index, (key, sample_id)))
        return found

    def _build(self, state: StepState, batch: Batch, index: int, order: Order) -> PendingRecord:
        max_bytes = self.settings.max_field_bytes
        key, sample_id = order[0], order[1].decode()
        input_text = clean_text(batch.inputs[index], max_bytes)
        output_text = clean_text(batch.outputs[index], max_bytes)
        body: dict[str, AnyValue] = {contract.BODY_INPUT: input_text.text, contract.BODY_OUTPUT: output_text.text}
        attributes: dict[str, AnyValue] = {
            contract.RUN_ID: self.settings.run_id,
            contract.STEP: state.step,
            contract.SAMPLE_ID: sample_id,
            contract.SAMPLE_KEY: key,
            contract.SEED: self._seed_attribute,
            contract.SOURCE: state.source,
            contract.SAMPLE_COUNT: state.count,
        }
        texts: list[tuple[str, CleanText]] = [
            (contract.INPUT_LENGTH, input_text),
            (contract.OUTPUT_LENGTH, output_text),
        ]
        if batch.ground_truths is not None and batch.ground_truths[index] is not None:
            truth = clean_text(batch.ground_truths[index], max_bytes)
            body[contract.BODY_GROUND_TRUTH] = truth.text
            texts.append((contract.GROUND_TRUTH_LENGTH, truth))
        replaced = 0
        for length_key, text in texts:
            replaced += text.replaced_chars
            if text.original_length is not None:
                attributes[length_key] = text.original_length
                self.stats.add(_stats.TRUNCATED_FIELDS)
                self.stats.warn(
                    "truncated",
                    "a field of %s was %d bytes; truncated to %d",
                    sample_id,
                    text.original_length,
                    max_bytes,
                )
        if replaced:
            attributes[contract.REPLACED_CHARS] = replaced
            self.stats.add(_stats.REPLACED_CHARS, replaced)
            self.stats.warn("replaced_chars", "%d invalid character(s) in %s replaced by U+FFFD", replaced, sample_id)
        if batch.scores is not None:
            score = clean_score(batch.scores[index])
            if score.value is not None:
                attributes[contract.SCORE] = score.value
            if score.invalid is not None:
                attributes[contract.SCORE_INVALID] = score.invalid
                self.stats.add(_stats.INVALID_SCORES)
                self.stats.warn("invalid_score", "score of %s is %s; sent without a score", sample_id, score.invalid)
            if score.coerced:
                self.stats.add(_stats.COERCED_VALUES)
        if batch.data_sources is not None and batch.data_sources[index] is not None:
            attributes[contract.DATA_SOURCE] = clean_text(batch.data_sources[index], 1024).text
        return PendingRecord(time.time_ns(), body, attributes)

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

    def flush(self, timeout_s: float) -> bool:
        """Export what is queued, waiting at most ``timeout_s``; True if all was confirmed."""
        undelivered = (_stats.RECORDS_EXPORT_FAILED, _stats.RECORDS_SPOOLED)
        before = [self.stats.get(name) for name in undelivered]
        completed = self.pipeline.flush(timeout_s)
        return completed and [self.stats.get(name) for name in undelivered] == before

    def shutdown(self, timeout_s: float) -> bool:
        """End open steps, flush and release the pipeline, waiting at most ``timeout_s``."""
        self.end_all()
        return self.pipeline.shutdown(timeout_s)
