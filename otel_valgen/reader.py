"""Read OTLP log files (the embedded sink's and the collector file exporter's).

Each message is one ``ExportLogsServiceRequest``: OTLP/JSON lines, plain or zstd-compressed,
or the file exporter's length-prefixed OTLP/JSON or OTLP/protobuf messages, plain or one zstd
frame each (``otel_valgen._framing``). A message that cannot be parsed is reported with its
file and line (or message) number, and the rest is still read. A file cut short (a truncated
``.zst``, say) is reported once, after every record before the cut was read.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from otel_valgen import contract
from otel_valgen._framing import Message, TruncatedFile, messages, unframe
from otel_valgen._sanitize import ExtraValue
from otel_valgen.data_sources import DataSourceFigures, parse_figures
from otel_valgen.distinct import parse_keys
from otel_valgen.sampling import KEY_VERSIONS

__all__ = [
    "EndRecord",
    "ExtraValue",
    "Generation",
    "LateReport",
    "ProgressRecord",
    "ReadError",
    "SplitRequest",
    "StartRecord",
    "Summary",
    "read_paths",
    "records_from_request",
    "split_request",
]


@dataclass(frozen=True)
class Generation:
    """One ``valgen.generation`` record."""

    run_id: str
    step: int
    sample_id: str
    sample_key: int | None
    input: str
    output: str
    ground_truth: str | None = None
    score: float | None = None
    data_source: str | None = None
    source: str | None = None
    sample_count: int | None = None
    seed: int | None = None
    key_version: int | None = None  # None: a record without valgen.key_version (version 1)
    trace_id: str = ""
    rank: int | None = None
    resource: dict[str, Any] = field(default_factory=dict, compare=False)
    attributes: dict[str, Any] = field(default_factory=dict, compare=False)
    attempt: str = ""
    late: bool = False
    timestamp: int = 0
    instance: str = ""
    # The extra columns (valgen.extra.<name> attributes), by name: bool, int, float or str.
    extra: dict[str, ExtraValue] = field(default_factory=dict, compare=False)
    kind: str = contract.KIND_VALIDATION  # valgen.kind
    prompt_id: str | None = None  # a rollout's valgen.prompt_id and valgen.prompt_key
    prompt_key: int | None = None
    # The slots a kept record fills (valgen.slots: keyed, lowest, highest, mismatched), None when its
    # step keeps neither extremes nor the most mismatched; set by the sampler, or by
    # otel_valgen.selection for files of the embedded sink.
    slots: tuple[str, ...] | None = None

    @property
    def input_messages(self) -> list[dict[str, Any]] | None:
        """The prompt's chat messages (``gen_ai.input.messages``), None when the input was a text."""
        return _messages(self.attributes.get(contract.GEN_AI_INPUT_MESSAGES))

    @property
    def output_messages(self) -> list[dict[str, Any]] | None:
        """The generated turns (``gen_ai.output.messages``), None when the output was a text."""
        return _messages(self.attributes.get(contract.GEN_AI_OUTPUT_MESSAGES))

    @property
    def slots_text(self) -> str | None:
        """The slots as one table cell (``keyed,lowest``), None when its step keeps no ranked slots."""
        return ",".join(self.slots) if self.slots is not None else None


def _map(value: object) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None


def _messages(value: object) -> list[dict[str, Any]] | None:
    """GenAI messages read from an attribute: a list of maps, else None."""
    if isinstance(value, list | tuple) and all(isinstance(message, dict) for message in value):
        return list(value)
    return None


@dataclass(frozen=True)
class EndRecord:
    """One source's ``valgen.validation.end`` record."""

    run_id: str
    step: int
    source: str
    instance: str
    seen: int
    emitted: int
    dropped: int = 0
    sources_expected: int | None = None
    attempt: str = ""
    timestamp: int = 0
    # valgen.score.count / valgen.score.sum: the valid scores of everything the source saw (so
    # far: cumulative, like seen); None on end records of SDKs that did not send them.
    score_count: int | None = None
    score_sum: float | None = None
    integration: str | None = None  # valgen.integration; valgen.unhooked_reason below
    unhooked_reason: str | None = None
    kind: str = contract.KIND_VALIDATION
    prompts_seen: int | None = None  # a rollout source's valgen.prompts_seen (cumulative)
    prompt_keys: tuple[int, ...] | None = None  # its sketch of distinct prompt keys (otel_valgen.distinct)
    # valgen.data_sources: its figures per data source (k per data source; cumulative, like seen).
    data_sources: tuple[DataSourceFigures, ...] | None = None
    # valgen.trajectories: figures over every trajectory the source saw (cumulative, like seen).
    trajectories: dict[str, Any] | None = None
    # valgen.mismatch: the distribution of its rollout responses' per-token figures (cumulative, like seen).
    mismatch: dict[str, Any] | None = None


@dataclass(frozen=True)
class StartRecord:
    """One source's ``valgen.validation.start`` record: it opened its part of the step."""

    run_id: str
    step: int
    source: str
    instance: str
    attempt: str = ""
    timestamp: int = 0
    sample_count: int | None = None
    sources_expected: int | None = None
    integration: str | None = None  # valgen.integration: "verl/<version>", "unhooked"; None: the plain API
    unhooked_reason: str | None = None  # valgen.unhooked_reason
    kind: str = contract.KIND_VALIDATION


@dataclass(frozen=True)
class ProgressRecord:
    """One source's ``valgen.validation.progress`` record: its part is still open."""

    run_id: str
    step: int
    source: str
    instance: str
    attempt: str = ""
    timestamp: int = 0
    seen: int = 0
    kind: str = contract.KIND_VALIDATION


@dataclass(frozen=True)
class LateReport:
    """The sampler's ``valgen.step.late`` record: records of a closed (run, step, attempt) so far."""

    run_id: str
    step: int
    attempt: str
    late: int
    timestamp: int = 0
    kind: str = contract.KIND_VALIDATION


@dataclass(frozen=True)
class Summary:
    """The sampler's ``valgen.step.summary`` record."""

    run_id: str
    step: int
    attributes: dict[str, Any]

    @property
    def attempt(self) -> str:
        """The attempt the summary closes ("" for records without one)."""
        value = self.attributes.get(contract.ATTEMPT)
        return value if isinstance(value, str) else ""

    @property
    def kind(self) -> str:
        """The kind of the group the summary closes (``validation`` when it does not say)."""
        value = self.attributes.get(contract.KIND)
        return value if isinstance(value, str) else contract.KIND_VALIDATION

    @property
    def prompts_seen(self) -> int | None:
        """A rollout summary's prompts seen by its ended sources; None if unreported."""
        return _opt_int(self.attributes.get(contract.PROMPTS_SEEN))

    @property
    def prompts_seen_estimated(self) -> bool:
        """Whether ``prompts_seen`` is an estimate (``valgen.prompts_seen_error`` is its error)."""
        return self.attributes.get(contract.PROMPTS_SEEN_ESTIMATED) is True

    @property
    def prompts_incomplete(self) -> int:
        """A rollout summary's kept prompts that a source that never ended may lack responses of."""
        return _opt_int(self.attributes.get(contract.PROMPTS_INCOMPLETE)) or 0

    @property
    def prompts_under_rate(self) -> int | None:
        """A rollout summary's prompts under its watch-list rate; None if unreported (or negative)."""
        value = _opt_int(self.attributes.get(contract.PROMPTS_UNDER_RATE))
        return value if value is not None and value >= 0 else None

    @property
    def prompts_kept(self) -> int | None:
        """A rollout summary's prompts kept; None if unreported."""
        return _opt_int(self.attributes.get(contract.PROMPTS_KEPT))

    @property
    def attempt_start(self) -> int:
        """Unix nanos of the attempt's earliest record (0 when the collector did not say)."""
        return _opt_int(self.attributes.get(contract.ATTEMPT_START)) or 0

    @property
    def closed_reason(self) -> str:
        """Why the sampler closed the group (``complete``, ``wait``, ``max_duration``, ...)."""
        value = self.attributes.get(contract.CLOSED_REASON)
        return value if isinstance(value, str) else ""

    @property
    def score_count(self) -> int | None:
        """Generations of the ended sources with a valid score (all they saw, not only the kept); None if unreported."""
        return _opt_int(self.attributes.get(contract.SCORE_COUNT))

    @property
    def score_sum(self) -> float | None:
        """The sum of those scores; None if unreported."""
        return _opt_float(self.attributes.get(contract.SCORE_SUM))

    @property
    def score_mean(self) -> float | None:
        """Their mean; None when no score was counted."""
        return _opt_float(self.attributes.get(contract.SCORE_MEAN))

    @property
    def attempts_concurrent(self) -> int | None:
        """Other attempts of the step that ran at the same time with no common source; None if unreported."""
        return _opt_int(self.attributes.get(contract.ATTEMPTS_CONCURRENT))

    @property
    def sources_unhooked(self) -> list[str] | None:
        """The sources ("source@instance") whose validation ran in verl's own table; None if unreported."""
        value = self.attributes.get(contract.SOURCES_UNHOOKED)
        return [str(item) for item in value] if isinstance(value, list) else None


@dataclass(frozen=True)
class ReadError:
    """A part of a file that could not be read.

    ``line`` is the line (or length-prefixed message) number; 0 means the file itself, or its end.
    """

    path: str
    line: int
    message: str


Record = Generation | EndRecord | Summary | StartRecord | ProgressRecord | LateReport


def any_value(value: dict[str, Any]) -> Any:  # noqa: PLR0911 (one return per OTLP value kind)
    """Decode an OTLP/JSON AnyValue."""
    if "stringValue" in value:
        return value["stringValue"]
    if "intValue" in value:
        return int(value["intValue"])
    if "doubleValue" in value:
        raw = value["doubleValue"]
        return float(raw) if not isinstance(raw, str) else float(raw.replace("Infinity", "inf"))
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "kvlistValue" in value:
        return {kv["key"]: any_value(kv.get("value", {})) for kv in value["kvlistValue"].get("values", [])}
    if "arrayValue" in value:
        return [any_value(item) for item in value["arrayValue"].get("values", [])]
    if "bytesValue" in value:
        return value["bytesValue"]
    return None


def attributes_of(items: list[dict[str, Any]] | None) -> dict[str, Any]:
    """Decode an OTLP/JSON attribute list."""
    return {item["key"]: any_value(item.get("value", {})) for item in items or []}


def _opt_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _opt_float(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _extra(attrs: dict[str, Any]) -> dict[str, ExtraValue]:
    """The extra columns of a generation: its ``valgen.extra.<name>`` attributes of a scalar type."""
    prefix = contract.EXTRA_PREFIX
    return {
        key[len(prefix) :]: value
        for key, value in attrs.items()
        if key.startswith(prefix) and len(key) > len(prefix) and isinstance(value, bool | int | float | str)
    }


def _timestamp(log: dict[str, Any]) -> int:
    """The record's time (unix nanos): ``timeUnixNano``, else ``observedTimeUnixNano``, else 0."""
    for name in ("timeUnixNano", "observedTimeUnixNano"):
        try:
            value = int(log.get(name) or 0)
        except (TypeError, ValueError):
            continue
        if value > 0:
            return value
    return 0


def _kind(event: str, attrs: dict[str, Any]) -> str:
    """The record's ``valgen.kind`` (absent: validation); an unknown kind makes it unreadable."""
    kind = attrs.get(contract.KIND, contract.KIND_VALIDATION)
    if not isinstance(kind, str) or kind not in contract.KINDS:
        raise ValueError(f"{event} record has an unknown {contract.KIND} {kind!r}")
    return str(kind)


def _prompt_id(kind: str, attrs: dict[str, Any]) -> str | None:
    """A generation's ``valgen.prompt_id``, which a rollout must carry."""
    prompt_id = _opt_str(attrs.get(contract.PROMPT_ID))
    if kind == contract.KIND_ROLLOUT and prompt_id is None:
        raise ValueError(f"rollout generation record lacks {contract.PROMPT_ID}")
    return prompt_id


def _record(log: dict[str, Any], resource: dict[str, Any]) -> Record | None:  # noqa: PLR0911 (one per event)
    event = log.get("eventName", "")
    if not event.startswith(contract.EVENT_PREFIX):
        return None
    attrs = attributes_of(log.get("attributes"))
    run_id, step = attrs.get(contract.RUN_ID), _opt_int(attrs.get(contract.STEP))
    if not isinstance(run_id, str) or step is None:
        raise ValueError(f"{event} record lacks {contract.RUN_ID} or an int {contract.STEP}")
    attempt = attrs.get(contract.ATTEMPT)
    attempt = attempt if isinstance(attempt, str) else ""
    kind = _kind(event, attrs)
    instance = str(resource.get("service.instance.id", ""))
    source = str(attrs.get(contract.SOURCE, ""))
    timestamp = _timestamp(log)
    if event == contract.EVENT_STEP_SUMMARY:
        return Summary(run_id, step, attrs)
    if event == contract.EVENT_STEP_LATE:
        return LateReport(run_id, step, attempt, _opt_int(attrs.get(contract.LATE)) or 0, timestamp, kind)
    if event == contract.EVENT_VALIDATION_START:
        return StartRecord(
            run_id,
            step,
            source,
            instance,
            attempt,
            timestamp,
            sample_count=_opt_int(attrs.get(contract.SAMPLE_COUNT)),
            sources_expected=_opt_int(attrs.get(contract.SOURCES_EXPECTED)),
            integration=_opt_str(attrs.get(contract.INTEGRATION)),
            unhooked_reason=_opt_str(attrs.get(contract.UNHOOKED_REASON)),
            kind=kind,
        )
    if event == contract.EVENT_VALIDATION_PROGRESS:
        return ProgressRecord(
            run_id, step, source, instance, attempt, timestamp, _opt_int(attrs.get(contract.SEEN)) or 0, kind
        )
    if event == contract.EVENT_VALIDATION_END:
        return EndRecord(
            run_id=run_id,
            step=step,
            source=source,
            instance=instance,
            seen=_opt_int(attrs.get(contract.SEEN)) or 0,
            emitted=_opt_int(attrs.get(contract.EMITTED)) or 0,
            dropped=_opt_int(attrs.get(contract.DROPPED)) or 0,
            sources_expected=_opt_int(attrs.get(contract.SOURCES_EXPECTED)),
            attempt=attempt,
            timestamp=timestamp,
            score_count=_opt_int(attrs.get(contract.SCORE_COUNT)),
            score_sum=_opt_float(attrs.get(contract.SCORE_SUM)),
            integration=_opt_str(attrs.get(contract.INTEGRATION)),
            unhooked_reason=_opt_str(attrs.get(contract.UNHOOKED_REASON)),
            kind=kind,
            prompts_seen=_opt_int(attrs.get(contract.PROMPTS_SEEN)),
            prompt_keys=parse_keys(attrs.get(contract.PROMPT_KEYS)),
            data_sources=parse_figures(attrs.get(contract.DATA_SOURCES)),
            trajectories=_map(attrs.get(contract.TRAJECTORIES)),
            mismatch=_map(attrs.get(contract.MISMATCH)),
        )
    if event != contract.EVENT_GENERATION:
        return None
    body = any_value(log.get("body", {}))
    if not isinstance(body, dict):
        body = {contract.BODY_OUTPUT: "" if body is None else str(body)}
    sample_id = attrs.get(contract.SAMPLE_ID)
    if not isinstance(sample_id, str):
        raise ValueError(f"generation record lacks {contract.SAMPLE_ID}")
    raw_version = attrs.get(contract.KEY_VERSION)
    key_version = _opt_int(raw_version)
    if raw_version is not None and key_version not in KEY_VERSIONS:
        raise ValueError(f"generation record has an unknown {contract.KEY_VERSION} {raw_version!r}")
    truth = body.get(contract.BODY_GROUND_TRUTH)
    return Generation(
        run_id=run_id,
        step=step,
        sample_id=sample_id,
        sample_key=_opt_int(attrs.get(contract.SAMPLE_KEY)),
        input=str(body.get(contract.BODY_INPUT, "")),
        output=str(body.get(contract.BODY_OUTPUT, "")),
        ground_truth=None if truth is None else str(truth),
        score=_opt_float(attrs.get(contract.SCORE)),
        data_source=attrs.get(contract.DATA_SOURCE) if isinstance(attrs.get(contract.DATA_SOURCE), str) else None,
        source=attrs.get(contract.SOURCE) if isinstance(attrs.get(contract.SOURCE), str) else None,
        sample_count=_opt_int(attrs.get(contract.SAMPLE_COUNT)),
        seed=_opt_int(attrs.get(contract.SEED)),
        key_version=key_version,
        trace_id=str(log.get("traceId", "")),
        rank=_opt_int(attrs.get(contract.RANK)),
        resource=resource,
        attributes=attrs,
        attempt=attempt,
        late=attrs.get(contract.LATE) is True,
        timestamp=timestamp,
        instance=instance,
        extra=_extra(attrs),
        kind=kind,
        prompt_id=_prompt_id(kind, attrs),
        prompt_key=_opt_int(attrs.get(contract.PROMPT_KEY)),
        slots=_slots(attrs.get(contract.SLOTS)),
    )


def _slots(value: Any) -> tuple[str, ...] | None:
    """A kept record's ``valgen.slots`` (the known ones, in ``contract.SLOTS_ORDER``), None without it."""
    if not isinstance(value, list):
        return None
    return tuple(slot for slot in contract.SLOTS_ORDER if slot in value)


def records_from_request(request: dict[str, Any]) -> Iterator[Record]:
    """The valgen records of one OTLP/JSON ``ExportLogsServiceRequest``."""
    for resource_logs in request.get("resourceLogs", []):
        resource = attributes_of(resource_logs.get("resource", {}).get("attributes"))
        for scope_logs in resource_logs.get("scopeLogs", []):
            for log in scope_logs.get("logRecords", []):
                record = _record(log, resource)
                if record is not None:
                    yield record


@dataclass
class SplitRequest:
    """The valgen records of one request, each with its resource attributes, and what was rejected."""

    records: list[tuple[Record, dict[str, Any]]] = field(default_factory=list)
    rejected: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def message(self) -> str:
        """A short explanation of the rejected records (empty when none was)."""
        if not self.rejected:
            return ""
        return f"{self.rejected} log records rejected: " + "; ".join(self.errors[:3])


def split_request(request: dict[str, Any]) -> SplitRequest:
    """Read each log record of an OTLP/JSON request on its own; an unreadable one is rejected alone.

    Raises:
        MalformedPayload: the dict is not shaped like an OTLP logs request.

    """
    from otel_valgen.otlp_json import MalformedPayload

    out = SplitRequest()
    try:
        for resource_logs in request.get("resourceLogs", []):
            resource = attributes_of(resource_logs.get("resource", {}).get("attributes"))
            for scope_logs in resource_logs.get("scopeLogs", []):
                for log in scope_logs.get("logRecords", []):
                    try:
                        record = _record(log, resource)
                    except (ValueError, KeyError, TypeError, AttributeError) as error:
                        out.rejected += 1
                        out.errors.append(str(error))
                        continue
                    if record is not None:
                        out.records.append((record, resource))
    except (AttributeError, TypeError, KeyError) as error:
        raise MalformedPayload(f"not an OTLP logs request: {error}") from error
    return out


def _request(message: Message) -> dict[str, Any]:
    """The OTLP/JSON form of one message: a JSON line, or a length-prefixed OTLP/JSON or protobuf one."""
    from otel_valgen.otlp_json import parse_request

    data = message.data if message.line else unframe(message.data)
    return parse_request(data, json_body=message.line or data.lstrip()[:1] == b"{")


def _expand(paths: Iterable[str | Path]) -> Iterator[Path]:
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            for suffix in ("*.jsonl", "*.json", "*.jsonl.zst", "*.json.zst", "*.zst"):
                yield from sorted(path.rglob(suffix))
        else:
            yield path


def read_paths(paths: Iterable[str | Path], on_error: Callable[[ReadError], None]) -> Iterator[Record]:
    """Every valgen record in ``paths`` (files or folders); errors go to ``on_error``.

    A file cut short yields the records before the cut, then one error naming where it ends.
    """
    seen: set[Path] = set()
    for path in _expand(paths):
        if path in seen:
            continue
        seen.add(path)
        read = 0
        try:
            for message in messages(path):
                if not message.data.strip():
                    continue
                try:
                    for record in records_from_request(_request(message)):
                        read += 1
                        yield record
                except (ValueError, KeyError, TypeError, AttributeError, TruncatedFile) as error:
                    on_error(ReadError(str(path), message.number, str(error)))
        except TruncatedFile as error:
            on_error(ReadError(str(path), 0, f"truncated: {error}; the {read} record(s) before it were read"))
        except OSError as error:
            on_error(ReadError(str(path), 0, str(error)))
        except Exception as error:  # e.g. a corrupt zstd frame
            on_error(ReadError(str(path), 0, f"{type(error).__name__}: {error}"))
