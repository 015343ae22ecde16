"""Closed steps: what the service and ``push`` hand to every backend.

The collector's sampler sends each closed step as one request: the step's kept records,
ranked, then its ``valgen.step.summary``. ``assemble`` turns the records of one request into
``ClosedStep`` values without buffering anything across requests. Records of a step whose
summary is not in the request (a pipeline that batches after the sampler, records re-sent
alone) still make a step, written as incomplete and counted; a summary without records makes
a step with no rows (its scalars are still written). Late generations forwarded by the
sampler (``valgen.late`` = true) are not part of any sample: they are counted and dropped.

A step's validation and its rollouts (``valgen.kind``) are separate groups, assembled apart
into steps of their own (``ClosedStep.kind``); every backend writes a rollout step under its
own key, never next to the validation table (docs/rollouts.md). A rollout step's generations
are ordered by prompt, so that a prompt's responses stand side by side.
"""

from __future__ import annotations

import dataclasses
import math
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, Final

from otel_valgen import contract, tokens, trajectories
from otel_valgen._settings import DEFAULT_SEED
from otel_valgen.data_sources import parse_figures
from otel_valgen.exporter.ledger import ShownAttempt
from otel_valgen.partials import merge_summaries, parts_extremes, parts_mismatched, parts_split, samplers_of
from otel_valgen.reader import Generation, Record, Summary
from otel_valgen.sampling import LEGACY_KEY_VERSION, SortKey
from otel_valgen.selection import COMPLETE, cut_kept, parts_k, prompt_key_of, sort_key_of

__all__ = [
    "Assembled",
    "ClosedStep",
    "RecordCounts",
    "StepKey",
    "assemble",
    "attempt_facts",
    "merge_parts",
    "names_a_run",
    "order_generations",
    "run_resource",
    "step_as_item",
    "step_from_item",
    "summary_scalars",
]

StepKey = tuple[str, int, str, str]  # (valgen.run_id, step, attempt, valgen.kind)


@dataclass
class ClosedStep:
    """One (run, step, attempt, kind) ready to be written: its kept generations in rank order.

    Attributes:
        group_id: the records' ``valgen.run_id`` (the identity of the group and the ledger key).
        step: the trainer's step.
        generations: the generations, ordered by rank.
        resource: resource attributes naming the tracker runs (``wandb.*``, ``mlflow.*``, ...):
            those of the first record, completed by later records that name a run.
        summary: the attributes of the step's summary record, if one arrived.
        complete: whether the summary arrived with all the records it counts.
        reason: why the step was handed over (summary, no_summary, push, spooled).
        received_at: ``time.monotonic()`` when the request carrying it arrived.
        attempt: the records' ``valgen.attempt`` ("" for records without one).
        attempt_start: unix nanos the attempt started (the summary's ``valgen.attempt_start``,
            else the earliest generation's time, else 0).
        attempt_complete: whether the sampler closed the attempt as ``complete``.
        kind: the records' ``valgen.kind`` (each backend writes the two kinds under different keys).

    """

    group_id: str
    step: int
    generations: list[Generation]
    resource: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] | None = None
    complete: bool = True
    reason: str = "summary"
    received_at: float = 0.0
    attempt: str = ""
    attempt_start: int = 0
    attempt_complete: bool = True
    kind: str = contract.KIND_VALIDATION

    @property
    def key(self) -> StepKey:
        """(group, step, attempt, kind): what the ledgers key on."""
        return (self.group_id, self.step, self.attempt, self.kind)

    @property
    def rollout(self) -> bool:
        """Whether the step holds training rollouts (not validation generations)."""
        return self.kind == contract.KIND_ROLLOUT

    @property
    def samplers(self) -> frozenset[str]:
        """The samplers whose parts of the group this step holds (``otel_valgen.partials``)."""
        return samplers_of(self.summary)

    def shown_attempt(self) -> ShownAttempt:
        """The step's attempt as the ledgers rank it (``otel_valgen.selection.attempt_rank``)."""
        return ShownAttempt(self.attempt, self.attempt_start, self.attempt_complete)


def attempt_facts(summary: Mapping[str, Any] | None, generations: Iterable[Generation]) -> tuple[int, bool]:
    """(attempt start, complete) of an attempt from its summary, else from its generations."""
    start = summary.get(contract.ATTEMPT_START) if summary else None
    if not isinstance(start, int) or isinstance(start, bool) or start <= 0:
        start = min((g.timestamp for g in generations if g.timestamp > 0), default=0)
    complete = summary is not None and summary.get(contract.CLOSED_REASON) == COMPLETE
    return start, complete


def _order_key(generation: Generation) -> tuple[float, int, str]:
    rank = float(generation.rank) if generation.rank is not None else math.inf
    return (rank, generation.sample_key if generation.sample_key is not None else 0, generation.sample_id)


def _rollout_order_key(generation: Generation) -> tuple[bool, SortKey, float, SortKey]:
    version = generation.key_version or LEGACY_KEY_VERSION
    rank = float(generation.rank) if generation.rank is not None else math.inf
    # A response kept only as one of the most mismatched follows the keyed prompts, by its rank.
    alone = generation.slots is not None and contract.SLOT_KEYED not in generation.slots
    prompt = SortKey(0, b"") if alone else prompt_key_of(generation, DEFAULT_SEED, version)
    return (alone, prompt, rank, sort_key_of(generation, DEFAULT_SEED, version))


def order_generations(generations: Iterable[Generation], kind: str = contract.KIND_VALIDATION) -> list[Generation]:
    """Sort generations by ``valgen.rank`` (1-based); unranked ones last, by sample key and id.

    Rollouts are sorted as the group view ranks them: by prompt (key, then id), then each
    prompt's responses by rank, else by sample key; so a prompt's responses stay together
    whether or not the sampler ranked them. The responses kept only as most mismatched follow, by rank.
    """
    return sorted(generations, key=_rollout_order_key if kind == contract.KIND_ROLLOUT else _order_key)


SUMMARY_SCALARS = (
    ("seen", contract.SEEN),
    ("kept", contract.KEPT),
    ("late", contract.LATE),
    ("missing", contract.MISSING),
    ("prompts_seen", contract.PROMPTS_SEEN),  # rollout summaries only
    ("prompts_kept", contract.PROMPTS_KEPT),
    ("prompts_incomplete", contract.PROMPTS_INCOMPLETE),
    ("prompts_under_rate", contract.PROMPTS_UNDER_RATE),  # the watch-list's, when on
    ("prompts_over_cap", contract.PROMPTS_OVER_CAP),
)
# prompts_seen_error is there only when prompts_seen is an estimate: its relative standard error.
SUMMARY_FLOAT_SCALARS = (
    ("score_mean", contract.SCORE_MEAN),
    ("prompts_seen_error", contract.PROMPTS_SEEN_ERROR),
    ("sample_rate", contract.SAMPLE_RATE),
)


_METRIC_UNSAFE = re.compile(r"[^A-Za-z0-9_.\- ]")


def data_source_metric(data_source: str) -> str:
    """A data source as a metric path segment every tracker takes (MLflow is the strictest); ``none`` for ""."""
    return _METRIC_UNSAFE.sub("_", data_source) or "none"


def summary_scalars(summary: Mapping[str, Any] | None) -> dict[str, float]:
    """The per-step scalars a summary carries: seen, kept, late, missing, the score mean over all seen, prompts.

    With figures per data source (``valgen.data_sources``) also ``data_source/<name>/seen``,
    ``.../kept`` and ``.../score_mean`` (``data_source_metric`` names them).
    """
    if not summary:
        return {}
    out: dict[str, float] = {}
    for name, key in SUMMARY_SCALARS:
        value = summary.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            out[name] = value
    for name, key in SUMMARY_FLOAT_SCALARS:
        value = summary.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            out[name] = float(value)
    for figure in parse_figures(summary.get(contract.DATA_SOURCES)) or ():
        prefix = f"data_source/{data_source_metric(figure.data_source)}"
        out[f"{prefix}/seen"] = figure.seen
        if figure.kept is not None:
            out[f"{prefix}/kept"] = figure.kept
        if (mean := figure.score_mean) is not None and math.isfinite(mean):
            out[f"{prefix}/score_mean"] = mean
    out.update(trajectories.scalars(summary.get(contract.TRAJECTORIES)))
    out.update(tokens.scalars(summary.get(contract.MISMATCH)))
    return out


RUN_ATTRIBUTES: Final = frozenset(
    {
        contract.WANDB_RUN_ID,
        "mlflow.run_id",
        "tensorboard.log_dir",
        "clearml.task_id",
        "trackio.run_id",
    }
)
"""Resource attributes that name a tracker run (``otel_valgen._identity.tracker_resource`` sets them)."""


def names_a_run(resource: Mapping[str, Any]) -> bool:
    """Whether a resource names the job's run in some tracker."""
    return not RUN_ATTRIBUTES.isdisjoint(resource)


def run_resource(resources: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The first of a step's resources that names a run, else its first, else empty."""
    first: Mapping[str, Any] | None = None
    for resource in resources:
        if names_a_run(resource):
            return dict(resource)
        first = resource if first is None else first
    return dict(first or {})


@dataclass
class _Parts:
    generations: dict[str, Generation] = field(default_factory=dict)
    resource: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] | None = None


@dataclass
class RecordCounts:
    """What became of received records: read, set aside, or made into incomplete steps."""

    generations: int = 0
    summaries: int = 0
    late_dropped: int = 0
    duplicates: int = 0
    without_summary: int = 0
    summary_without_records: int = 0
    validation_steps: int = 0  # the steps assembled, by kind (valgen.kind)
    rollout_steps: int = 0

    def add(self, other: RecordCounts) -> None:
        """Add ``other``'s counts to these."""
        for item in fields(RecordCounts):
            setattr(self, item.name, getattr(self, item.name) + getattr(other, item.name))


@dataclass
class Assembled(RecordCounts):
    """The steps of one request (both kinds), and what was set aside."""

    steps: list[ClosedStep] = field(default_factory=list)


def assemble(records: Iterable[tuple[Record, Mapping[str, Any]]], *, now: float | None = None) -> Assembled:
    """Group one request's generations and summaries into closed steps, in the order their steps first appear.

    Start, progress and end records and late reports are the sampler's business: ignored here.
    """
    out = Assembled()
    parts: dict[StepKey, _Parts] = {}
    for record, resource in records:
        if not isinstance(record, Generation | Summary):
            continue
        key = (record.run_id, record.step, record.attempt, record.kind)
        if isinstance(record, Summary):
            out.summaries += 1
            part = parts.setdefault(key, _Parts())
            part.summary = dict(record.attributes)
        else:
            out.generations += 1
            if record.late:  # forwarded by the sampler after the step closed: not part of its sample
                out.late_dropped += 1
                continue
            part = parts.setdefault(key, _Parts())
            if record.sample_id in part.generations:
                out.duplicates += 1
                continue
            part.generations[record.sample_id] = record
        if not part.resource or (names_a_run(resource) and not names_a_run(part.resource)):
            part.resource = dict(resource)
    received_at = time.monotonic() if now is None else now
    for key, part in parts.items():
        if key[3] == contract.KIND_ROLLOUT:
            out.rollout_steps += 1
        else:
            out.validation_steps += 1
        kept = part.summary.get(contract.KEPT) if part.summary else None
        if part.summary is None:
            out.without_summary += 1
        elif isinstance(kept, int) and kept > 0 and not part.generations:
            out.summary_without_records += 1
        start, attempt_complete = attempt_facts(part.summary, part.generations.values())
        out.steps.append(
            ClosedStep(
                group_id=key[0],
                step=key[1],
                generations=order_generations(part.generations.values(), key[3]),
                resource=part.resource,
                summary=part.summary,
                complete=part.summary is not None and (not isinstance(kept, int) or len(part.generations) >= kept),
                reason="summary" if part.summary is not None else "no_summary",
                received_at=received_at,
                attempt=key[2],
                attempt_start=start,
                attempt_complete=attempt_complete,
                kind=key[3],
            )
        )
    return out


def merge_parts(parts: list[ClosedStep]) -> ClosedStep:
    """One step from the parts of one (run, step, attempt, kind) that different samplers closed.

    The kept records are the bottom-k of the parts' union (``otel_valgen.selection.cut_kept``),
    ranked again; the summary merges the parts' counts (``otel_valgen.partials``).
    """
    if len(parts) == 1:
        return parts[0]
    union: dict[str, Generation] = {}
    for part in parts:
        for generation in part.generations:
            union.setdefault(generation.sample_id, generation)
    summaries = [part.summary for part in parts if part.summary is not None]
    first = parts[0]
    k = parts_k(None, summaries)
    split, extremes, mismatched = parts_split(summaries), parts_extremes(summaries), parts_mismatched(summaries)
    kept = cut_kept(
        union.values(), k, first.kind, DEFAULT_SEED, by_data_source=split, extremes=extremes, mismatched=mismatched
    )
    kept = [replace(generation, rank=rank) for rank, generation in enumerate(kept, start=1)]
    summary = merge_summaries(summaries, kept) if summaries else None
    start, attempt_complete = attempt_facts(summary, kept)
    return ClosedStep(
        group_id=first.group_id,
        step=first.step,
        generations=order_generations(kept, first.kind),
        resource=run_resource(part.resource for part in parts),
        summary=summary,
        complete=all(part.complete for part in parts),
        reason="merged",
        received_at=min(part.received_at for part in parts),
        attempt=first.attempt,
        attempt_start=start,
        attempt_complete=attempt_complete,
        kind=first.kind,
    )


def step_as_item(step: ClosedStep) -> dict[str, Any]:
    """A step as JSON-ready data, to keep on disk (spools, parts)."""
    item = dataclasses.asdict(step)
    item.pop("received_at")
    return item


def step_from_item(item: dict[str, Any]) -> ClosedStep:
    """A step read back from ``step_as_item``'s data (received now)."""
    generations = [Generation(**raw) for raw in item.pop("generations", [])]
    return ClosedStep(**item, generations=generations, received_at=time.monotonic())
