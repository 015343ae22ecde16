"""Building generation records: sample ids, sort keys, and the treatment of bad input.

``candidates`` is the per-generation hot path (one hash, the keys of a batch at once);
``RecordBuilder`` runs only for generations that enter the local bottom-k (or for all, without
presampling).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple, Protocol

import numpy as np
import xxhash
from opentelemetry.util.types import AnyValue

from otel_valgen import _stats, contract, conversations, tokens
from otel_valgen._keys import BatchKeyer
from otel_valgen._sanitize import CleanText, clean_extra, clean_score, clean_text
from otel_valgen._settings import Settings
from otel_valgen.data_sources import data_source_of
from otel_valgen.sampling import HEX_DIGITS, KEY_VERSION, Order, SortKey, sample_key

_STR_ONLY: Final = {str}
_MAX_KEY: Final = (1 << 63) - 1
_TAG_BYTES: Final = 6


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
    kind: str


@dataclass(frozen=True)
class ExtraColumns:
    """A call's extra columns (names already checked), and the values its records had to omit."""

    keys: tuple[str, ...]  # the attribute of each column: valgen.extra.<name>
    columns: tuple[Sequence[Any], ...]
    invalid: Counter[str] = field(default_factory=Counter)  # why -> values omitted, over the call's records


@dataclass(frozen=True)
class Batch:
    """One call's columns, already checked for equal lengths."""

    inputs: Sequence[Any]
    outputs: Sequence[Any]
    scores: Sequence[Any] | None
    ground_truths: Sequence[Any] | None
    sample_ids: Sequence[Any] | None
    data_sources: Sequence[Any] | None
    extra: ExtraColumns | None = None
    rollout: RolloutColumns | None = None


@dataclass(frozen=True)
class RolloutColumns:
    """A call's per-response columns, each None or one value per response.

    A rollout call (``log_rollouts``) may give all of them; a validation call only the response
    lengths, truncation and the per-trajectory rewards (which only the trajectory figures read).
    """

    prompt_ids: Sequence[Any] | None  # None: each prompt's id is derived from its text
    advantages: Sequence[Any] | None
    response_lengths: Sequence[Any] | None
    truncated: Sequence[Any] | None
    param_versions: Sequence[Any] | None = None
    tool_rewards: Sequence[Any] | None = None  # one list per trajectory (otel_valgen.trajectories)
    turn_scores: Sequence[Any] | None = None
    tokens: Mapping[str, Any] | None = None  # per-token columns (otel_valgen.tokens), rollouts only
    # Each response's figures as the call computed them (tokens.batch_figures), so that a record
    # carries the KL its process ranked it by (the most mismatched); None: computed per record.
    figures: Sequence[Mapping[str, float | int] | None] | None = None


def _utf8(value: object) -> bytes:
    """UTF-8 of a text as it will be sent (invalid characters replaced), untruncated."""
    if type(value) is str:
        try:
            return value.encode()
        except UnicodeEncodeError:
            pass
    return clean_text(value, sys.maxsize).text.encode()


def base_sample_id(sample_id: object, raw_input: object) -> str:
    """The id of a prompt: the caller's id, else the 16 hex digits of the XXH64 of the input's UTF-8.

    A message prompt hashes its ``conversations.prompt_text``, so whatever the chat format
    spelled, the same messages give the same id.
    """
    if sample_id is not None:
        text = sample_id if type(sample_id) is str else clean_text(sample_id, 1024).text
        if text:
            return text if type(sample_id) is not str else _utf8(text).decode()
    if type(raw_input) is not str and conversations.is_conversation(raw_input):
        return xxhash.xxh64_hexdigest(conversations.prompt_text(raw_input).encode())
    return xxhash.xxh64_hexdigest(_utf8(raw_input))


def _hash_bytes(base: str) -> bytes:
    """``sampling.id_hash`` of a base id as 8 bytes big-endian; lone surrogates raise."""
    if len(base) == 16 and HEX_DIGITS.issuperset(base):
        return bytes.fromhex(base)
    return xxhash.xxh64_digest(base.encode())


def new_part_tag() -> str:
    """A part's tag: 12 random hex digits, the ``@<tag>`` of its sample ids (not part of their keys)."""
    return os.urandom(_TAG_BYTES).hex()


class ResponseLanes:
    """Numbers the responses to each prompt over one part's calls: the i-th response gets lane i + 1.

    A prompt answered in two calls of a part (one sampling pass each) gets ``/0`` and ``/1``,
    as in one call with both: how the calls split a part changes no id. A part's first call
    keeps only its id hashes (8 bytes a generation); a later call counts them once, then
    costs O(its size). Calls may come from several threads (a block they share).
    """

    __slots__ = ("_counts", "_first", "_lock")

    def __init__(self) -> None:
        self._first: bytes | None = None
        self._counts: dict[int, int] | None = None
        self._lock = threading.Lock()

    def number(self, hashes: bytes) -> list[int] | None:
        """The lane of each generation of a call (8-byte id hashes); None when every lane is 1."""
        with self._lock:
            if self._first is None and self._counts is None:
                self._first = hashes
                return _call_lanes(hashes)
        words = memoryview(hashes).cast("Q").tolist()
        with self._lock:
            counts = self._counts
            if counts is None:
                assert self._first is not None
                counts = self._counts = dict(Counter(memoryview(self._first).cast("Q").tolist()))
                self._first = None
            # The usual call answers prompts new to the part, each once: every lane is 1, found
            # with dict and set operations instead of counting its generations one by one.
            fresh = dict.fromkeys(words, 1)
            if len(fresh) == len(words) and counts.keys().isdisjoint(fresh):
                counts.update(fresh)
                return None
            lanes = _counted(words, counts)
        return lanes if any(lane != 1 for lane in lanes) else None


def _call_lanes(hashes: bytes) -> list[int] | None:
    """1 + the response index of each generation among equal id hashes of one call; None if all are 1."""
    if not has_repeats(np.frombuffer(hashes, dtype=np.uint64)):
        return None
    return _counted(memoryview(hashes).cast("Q").tolist(), {})


def has_repeats(words: np.ndarray) -> bool:
    """Whether two of ``words`` (uint64 hashes) are equal, found in C.

    Equal words share their low bits: the words are counted by those (a table about four
    times their number) and only those in a bucket with others are sorted and compared,
    a few percent of the call (sorting them all took 3.5 times as long at 10,000).
    """
    bits = max(16, (4 * len(words)).bit_length())
    buckets = (words & np.uint64((1 << bits) - 1)).astype(np.intp)
    shared = words[np.bincount(buckets, minlength=1 << bits)[buckets] > 1]
    ordered = np.sort(shared)
    return bool((ordered[1:] == ordered[:-1]).any())


def _counted(words: list[int], counts: dict[int, int]) -> list[int]:
    """Each word's lane, counting on from ``counts`` (which it updates)."""
    lanes = []
    for word in words:
        lane = counts.get(word, 0) + 1
        counts[word] = lane
        lanes.append(lane)
    return lanes


class _Ids(NamedTuple):
    """The sampling inputs of a batch: id hashes and how to spell a prompt's id."""

    hashes: bytes  # 8 bytes (big-endian) per generation
    base: Callable[[int], str]


def _derived_ids(inputs: Sequence[Any]) -> _Ids | None:
    """Ids from the inputs when all are valid texts (the usual case): one XXH64 each.

    ``str.encode`` refuses anything but a ``str`` (bytes are ids of their repaired text, a
    message list of its rendering: ``_any_ids``), so the call's types need no pass of their own.
    """
    try:
        # Encoded here: xxhash 3 hashed a str as its UTF-8, xxhash 4 raises TypeError for one.
        digests = b"".join(map(xxhash.xxh64_digest, map(str.encode, inputs)))
    except (TypeError, UnicodeEncodeError):  # not a text; lone surrogates: see _any_ids
        return None
    return _Ids(digests, lambda index: digests[8 * index : 8 * index + 8].hex())


def _given_ids(given: Sequence[Any]) -> _Ids | None:
    """Ids from the caller's uids when all are non-empty valid ``str``: one hash per distinct uid."""
    if set(map(type, given)) != _STR_ONLY:  # str subclasses too go the long way (ids cut at 1 KiB)
        return None
    try:
        distinct = dict.fromkeys(given)
        if "" in distinct:
            return None
        if len(distinct) == len(given):
            digests = list(map(_hash_bytes, given))
        else:
            hashed = dict(zip(distinct, map(_hash_bytes, distinct), strict=True))
            digests = list(map(hashed.__getitem__, given))
    except UnicodeEncodeError:  # lone surrogates: see _any_ids
        return None
    return _Ids(b"".join(digests), given.__getitem__)


def _any_ids(batch: Batch) -> _Ids:
    """Ids of any batch, one generation at a time (bad input, mixed or missing uids)."""
    given = batch.sample_ids
    bases = [
        base_sample_id(given[index] if given is not None else None, raw_input)
        for index, raw_input in enumerate(batch.inputs)
    ]
    return _Ids(b"".join(map(_hash_bytes, bases)), bases.__getitem__)


def candidates(
    batch: Batch,
    keyer: BatchKeyer,
    threshold: Order | None,
    k: int | None,
    lanes: ResponseLanes,
    tag: str,
) -> list[tuple[int, Order]]:
    """(index, sort key) of the generations of a batch that may enter a bottom-k of ``k``, by index.

    Sample ids are ``<uid or input hash>/<i>@<tag>``: the i-th response to that prompt in the
    part's calls (``lanes``), and the part's tag, so that two parts answering one prompt give
    two records, while a record delivered twice stays one. This is the per-generation hot
    path: one XXH64 per generation (of its input, or of its uid once per call), the keys of
    the whole batch at once (``BatchKeyer``), and a sample id and a tuple only for the
    generations whose key is below ``threshold`` and among the batch's k smallest. ``k`` None
    keeps every generation below ``threshold`` (presampling off: all of them).
    """
    if k == 0 or len(batch.inputs) == 0:
        return []
    given = batch.sample_ids
    ids = _derived_ids(batch.inputs) if given is None else _given_ids(given)
    if ids is None:
        ids = _any_ids(batch)
    numbered = lanes.number(ids.hashes)
    limit_key, limit_id = threshold if threshold is not None else (_MAX_KEY, b"")
    found: list[tuple[int, Order]] = []
    for index, key in keyer.candidates(ids.hashes, numbered, limit_key, k):
        sample_id = f"{ids.base(index)}/{numbered[index] - 1 if numbered is not None else 0}@{tag}".encode()
        if key < limit_key or threshold is None or sample_id < limit_id:
            found.append((index, (key, sample_id)))
    return found


def rollout_prompts(batch: Batch) -> list[str]:
    """The prompt id of each response of a rollout call: the caller's, else derived from the prompt text."""
    given = batch.rollout.prompt_ids if batch.rollout is not None else None
    if given is None:
        # A group's n responses usually share one prompt object: it is read (a message prompt
        # converted) once. Each object is held beside its id, so no id is reused within the call.
        by_object: dict[int, tuple[object, str]] = {}
        prompt_ids = []
        for raw_input in batch.inputs:
            known = by_object.get(id(raw_input))
            if known is None:
                known = by_object[id(raw_input)] = (raw_input, base_sample_id(None, raw_input))
            prompt_ids.append(known[1])
        return prompt_ids
    # A prompt's text is read only when its id is missing: inputs may decode lazily (verl's hook).
    return [
        base_sample_id(pid, None) if _has_id(pid) else base_sample_id(None, batch.inputs[index])
        for index, pid in enumerate(given)
    ]


def _has_id(sample_id: object) -> bool:
    """Whether ``base_sample_id`` takes ``sample_id`` as it is, without the text."""
    if sample_id is None:
        return False
    return bool(sample_id if type(sample_id) is str else clean_text(sample_id, 1024).text)


def rollout_candidates(
    prompt_ids: Sequence[str],
    seed: int,
    threshold: Order | None,
    k: int | None,
    lanes: Counter[str],
    tag: str,
    seen: list[int] | None = None,
) -> list[tuple[int, Order, Order]]:
    """(index, prompt sort key, sort key) of the responses of a rollout call that may enter a group view of ``k``.

    One key per distinct prompt (``sample_key(seed, prompt id)``, the same at every step and
    epoch); a response key and id (``<prompt id>/<i>@<tag>``, the i-th response of that prompt
    in the part, and the part's tag) only for the responses of the call's k smallest prompts at or below ``threshold``
    (its own prompt may be kept already). ``lanes`` counts the responses of each such prompt
    over the part's calls, so a prompt in two calls of a step gets new ids, not redeliveries;
    a prompt not chosen here can never enter later (the threshold only falls), so only chosen
    prompts are counted. ``k`` None keeps every prompt (presampling off). ``seen`` gets every
    distinct prompt's key (for the part's count of distinct prompts).
    """
    if k == 0 or not prompt_ids:
        return []
    prompts = {pid: SortKey.of(sample_key(seed, pid), pid) for pid in dict.fromkeys(prompt_ids)}
    if seen is not None:
        seen.extend(order.sample_key for order in prompts.values())
    chosen = sorted(order for order in prompts.values() if threshold is None or order <= threshold)
    wanted = set(chosen[:k] if k is not None else chosen)
    found: list[tuple[int, Order, Order]] = []
    for index, pid in enumerate(prompt_ids):
        if prompts[pid] in wanted:
            sample_id = f"{pid}/{lanes[pid]}@{tag}"
            lanes[pid] += 1
            found.append((index, prompts[pid], SortKey.of(sample_key(seed, sample_id), sample_id)))
    return found


class RecordBuilder:
    """Builds generation records for one emitter's settings, counting every repair."""

    def __init__(self, settings: Settings, stats: _stats.Stats) -> None:
        self.settings = settings
        self.stats = stats
        seed = settings.seed % (1 << 64)
        # OTLP ints are int64: the seed travels as the same 64 bits read as signed.
        self._seed_attribute = seed - (1 << 64) if seed >= 1 << 63 else seed
        # What each generation asks of its group's sampling beside k (valgen.sample_by, valgen.extremes,
        # valgen.mismatched).
        rollout: dict[str, AnyValue] = {}
        if settings.sample_by == contract.SAMPLE_BY_DATA_SOURCE:
            rollout[contract.SAMPLE_BY] = contract.SAMPLE_BY_DATA_SOURCE
        validation = dict(rollout)
        if settings.extremes:
            validation[contract.EXTREMES] = settings.extremes
        if settings.mismatched:
            rollout[contract.MISMATCHED] = settings.mismatched
        self._asks = {contract.KIND_VALIDATION: validation, contract.KIND_ROLLOUT: rollout}

    def __call__(
        self, state: StepIdentity, batch: Batch, index: int, order: Order, prompt: Order | None = None
    ) -> PendingRecord:
        """The record of generation ``index`` of ``batch`` for ``state``, its texts and score made valid.

        ``prompt`` is a rollout's prompt sort key (``valgen.prompt_key``, ``valgen.prompt_id``).
        """
        max_bytes = self.settings.max_field_bytes
        key, sample_id = order[0], order[1].decode()
        messages: dict[str, AnyValue] = {}
        raw_input, raw_output, replaced = self._conversation(
            batch.inputs[index], batch.outputs[index], messages, sample_id
        )
        input_text = clean_text(raw_input, max_bytes)
        output_text = clean_text(raw_output, max_bytes)
        body: dict[str, AnyValue] = {contract.BODY_INPUT: input_text.text, contract.BODY_OUTPUT: output_text.text}
        attributes: dict[str, AnyValue] = {
            contract.RUN_ID: self.settings.run_id,
            contract.STEP: state.step,
            contract.SAMPLE_ID: sample_id,
            contract.SAMPLE_KEY: key,
            contract.KEY_VERSION: KEY_VERSION,
            contract.SEED: self._seed_attribute,
            contract.SOURCE: state.source,
            contract.SAMPLE_COUNT: state.count,
            contract.ATTEMPT: state.attempt,
            contract.KIND: state.kind,
        }
        if prompt is not None:
            attributes[contract.PROMPT_KEY] = prompt[0]
            attributes[contract.PROMPT_ID] = prompt[1].decode()
        if batch.rollout is not None:
            self._add_rollout(batch.rollout, index, attributes)
            if batch.rollout.tokens:
                self._add_tokens(batch.rollout, index, attributes, sample_id)
        texts: list[tuple[str, CleanText]] = [
            (contract.INPUT_LENGTH, input_text),
            (contract.OUTPUT_LENGTH, output_text),
        ]
        if batch.ground_truths is not None and batch.ground_truths[index] is not None:
            truth = clean_text(batch.ground_truths[index], max_bytes)
            body[contract.BODY_GROUND_TRUTH] = truth.text
            texts.append((contract.GROUND_TRUTH_LENGTH, truth))
        attributes.update(messages)
        replaced += self._add_extra(batch, index, attributes, sample_id)
        for length_key, text in texts:
            replaced += text.replaced_chars
            if text.original_length is not None:
                attributes[length_key] = text.original_length
                self._truncated(sample_id, text.original_length)
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
            attributes[contract.DATA_SOURCE] = data_source_of(batch.data_sources[index])
        attributes.update(self._asks.get(state.kind, {}))
        return PendingRecord(time.time_ns(), body, attributes)

    def _conversation(
        self, raw_input: object, raw_output: object, attributes: dict[str, AnyValue], sample_id: str
    ) -> tuple[object, object, int]:
        """A generation's input and output as the body's texts, their messages put in ``attributes``.

        An input or output that is a list of chat messages is converted to GenAI messages
        (``gen_ai.input.messages`` / ``gen_ai.output.messages``), its texts cut to the record's
        budget, and rendered as the body's text; every repair and cut is counted and warned about.
        Returns the texts to send and the characters replaced.
        """
        converted: dict[str, conversations.Converted] = {}
        for key, value in ((contract.GEN_AI_INPUT_MESSAGES, raw_input), (contract.GEN_AI_OUTPUT_MESSAGES, raw_output)):
            if type(value) is not str and conversations.is_conversation(value):
                converted[key] = conversations.to_messages(value)
        if not converted:
            return raw_input, raw_output, 0
        settings = self.settings
        cut = conversations.fit(
            [c.messages for c in converted.values()], settings.max_field_bytes, settings.max_messages_bytes
        )
        if cut:
            self.stats.add(_stats.TRUNCATED_FIELDS, cut)
            self.stats.warn(
                "truncated_messages",
                "%d text(s) of the conversation of %s cut to fit %d bytes each, %d in all",
                cut,
                sample_id,
                settings.max_field_bytes,
                settings.max_messages_bytes,
            )
        repairs: Counter[str] = Counter()
        replaced = 0
        for key, value in converted.items():
            attributes[key] = value.messages  # type: ignore[assignment]  # an array of maps (AnyValue)
            repairs += value.repairs
            replaced += value.replaced_chars
        if repairs:
            self.stats.add(_stats.MESSAGES_REPAIRED, sum(repairs.values()))
            reasons = ", ".join(f"{reason}: {n}" for reason, n in sorted(repairs.items()))
            self.stats.warn("messages_repaired", "the conversation of %s was repaired (%s)", sample_id, reasons)
        input_messages = converted.get(contract.GEN_AI_INPUT_MESSAGES)
        output_messages = converted.get(contract.GEN_AI_OUTPUT_MESSAGES)
        return (
            conversations.render(input_messages.messages) if input_messages is not None else raw_input,
            conversations.render(output_messages.messages) if output_messages is not None else raw_output,
            replaced,
        )

    def _add_rollout(self, columns: RolloutColumns, index: int, attributes: dict[str, AnyValue]) -> None:
        """A rollout's advantage (a finite double), response length, truncated flag (a bool) and param version (an int).

        A value of another kind is left out of the record, counted and warned like an extra value.
        """
        for key, values, expected in (
            (contract.ADVANTAGE, columns.advantages, float),
            (contract.RESPONSE_LENGTH, columns.response_lengths, int),
            (contract.TRUNCATED, columns.truncated, bool),
            (contract.PARAM_VERSION, columns.param_versions, int),
        ):
            if values is None or values[index] is None:
                continue
            value = clean_extra(values[index], 64).value  # a text is no valid value here
            if expected is float and type(value) is int:
                value = float(value)
            if expected is bool and type(value) is int and value in (0, 1):
                value = bool(value)
            if type(value) is expected:
                attributes[key] = value
            else:
                self.stats.add(_stats.EXTRA_VALUES_INVALID)
                self.stats.warn(
                    "invalid_rollout_value", "%s %r is not a %s; left out", key, values[index], expected.__name__
                )

    def _add_tokens(self, columns: RolloutColumns, index: int, attributes: dict[str, AnyValue], sample_id: str) -> None:
        """A kept response's per-token data (``valgen.tokens``) and its figures (``valgen.mismatch.<figure>``).

        Values that are no numbers travel as missing and pieces that are no valid text are
        repaired (``token_values_repaired``); past ``max_token_bytes`` the middle tokens are left
        out, marked on the attribute (``tokens_cut``).
        """
        assert columns.tokens is not None
        length = columns.response_lengths[index] if columns.response_lengths is not None else None
        read = tokens.read_response(columns.tokens, index, length if type(length) is int else None)
        if read is None:
            return
        if read.repaired:
            self.stats.add(_stats.TOKEN_VALUES_REPAIRED, read.repaired)
            self.stats.warn(
                "token_values_repaired",
                "%d per-token value(s) of %s were not numbers or valid text: sent as missing or repaired",
                read.repaired,
                sample_id,
            )
        figures = columns.figures[index] if columns.figures is not None else tokens.response_figures(read)
        for name, value in (figures or {}).items():
            attributes[contract.MISMATCH_PREFIX + name] = value
        packed, cut = tokens.encode(read, self.settings.max_token_bytes)
        attributes[contract.TOKENS] = packed
        if cut:
            self.stats.add(_stats.TOKENS_CUT, cut)
            self.stats.warn(
                "tokens_cut",
                "%d of the %d tokens of %s left out of its record to fit max_token_bytes (%d); head and tail kept",
                cut,
                read.count,
                sample_id,
                self.settings.max_token_bytes,
            )

    def _truncated(self, sample_id: str, original_length: int) -> None:
        self.stats.add(_stats.TRUNCATED_FIELDS)
        self.stats.warn(
            "truncated",
            "a field of %s was %d bytes; its middle was cut out to fit %d",
            sample_id,
            original_length,
            self.settings.max_field_bytes,
        )

    def _add_extra(self, batch: Batch, index: int, attributes: dict[str, AnyValue], sample_id: str) -> int:
        """Put generation ``index``'s extra values in ``attributes``; return the characters replaced.

        A value that cannot be sent is left out and tallied in ``batch.extra.invalid``, which
        ``report_extra`` counts and warns about once per call. Text values, and the JSON text of
        a list, dict or array (``_sanitize.json_text``), are repaired and cut like the body's texts
        (head and tail kept around the marker; no original-length attribute; counted in truncated_fields).
        """
        extra = batch.extra
        if extra is None:
            return 0
        replaced = coerced = 0
        for key, column in zip(extra.keys, extra.columns, strict=True):
            value = clean_extra(column[index], self.settings.max_field_bytes)
            coerced += value.coerced
            if value.value is None:
                extra.invalid[value.invalid or "invalid"] += 1
                continue
            attributes[key] = value.value
            if value.text is not None:
                replaced += value.text.replaced_chars
                if value.text.original_length is not None:
                    self._truncated(sample_id, value.text.original_length)
        self.stats.add(_stats.COERCED_VALUES, coerced)
        return replaced

    def report_extra(self, batch: Batch) -> None:
        """Count the extra values the records of one call omitted, and warn once for the call."""
        extra = batch.extra
        if extra is None or not extra.invalid:
            return
        omitted = sum(extra.invalid.values())
        self.stats.add(_stats.EXTRA_VALUES_INVALID, omitted)
        reasons = ", ".join(f"{reason}: {n}" for reason, n in sorted(extra.invalid.items()))
        self.stats.warn("invalid_extra_value", "%d extra value(s) left out of their records (%s)", omitted, reasons)
        extra.invalid.clear()
