"""Building generation records: sample ids, sort keys, and the treatment of bad input.

``candidates`` is the per-generation hot path (two hashes and a comparison); ``RecordBuilder``
runs only for generations that enter the local bottom-k (or for all, without presampling).
"""

from __future__ import annotations

import hashlib
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from opentelemetry.util.types import AnyValue

from otel_valgen import _stats, contract
from otel_valgen._sanitize import CleanText, clean_score, clean_text
from otel_valgen._settings import Settings
from otel_valgen.sampling import Order, SampleKeyer


@dataclass
class PendingRecord:
    """A generation record waiting for the end of its step (presampling)."""

    timestamp: int
    body: dict[str, AnyValue]
    attributes: dict[str, AnyValue]


class StepIdentity(Protocol):
    """What a generation record needs to know of its (step, source) state."""

    step: int
    source: str
    count: int
    attempt: str


@dataclass(frozen=True)
class Batch:
    """One call's columns, already checked for equal lengths."""

    inputs: Sequence[Any]
    outputs: Sequence[Any]
    scores: Sequence[Any] | None
    ground_truths: Sequence[Any] | None
    sample_ids: Sequence[Any] | None
    data_sources: Sequence[Any] | None


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


def candidates(batch: Batch, keyer: SampleKeyer, threshold: Order | None) -> list[tuple[int, Order]]:
    """(index, sort key) of the generations of a batch whose key is below ``threshold``.

    Sample ids are ``<uid or input hash>/<i-th response to it in this call>``. This is the
    per-generation hot path: ``SampleKeyer`` is inlined and rejected generations cost
    two hashes and one comparison.
    """
    counts: dict[str, int] = {}
    found: list[tuple[int, Order]] = []
    append, sha256, given = found.append, hashlib.sha256, batch.sample_ids
    inner, outer, from_bytes = keyer.inner.copy, keyer.outer.copy, int.from_bytes
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


class RecordBuilder:
    """Builds generation records for one emitter's settings, counting every repair."""

    def __init__(self, settings: Settings, stats: _stats.Stats) -> None:
        self.settings = settings
        self.stats = stats
        seed = settings.seed % (1 << 64)
        # OTLP ints are int64: the seed travels as the same 64 bits read as signed.
        self._seed_attribute = seed - (1 << 64) if seed >= 1 << 63 else seed

    def __call__(self, state: StepIdentity, batch: Batch, index: int, order: Order) -> PendingRecord:
        """The record of generation ``index`` of ``batch`` for ``state``, its texts and score made valid."""
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
            contract.ATTEMPT: state.attempt,
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
