"""Plain values shared by the buffer, the writer and push: the target run and a closed step."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from otel_valgen import contract
from otel_valgen.reader import Generation
from otel_valgen.selection import COMPLETE
from otel_valgen.wandb_exporter.ledger import ShownAttempt

__all__ = [
    "ClosedStep",
    "RunRef",
    "attempt_facts",
    "order_generations",
    "record_bytes",
    "run_ref_from_resource",
    "summary_scalars",
]

RECORD_OVERHEAD_BYTES = 256
"""Bytes charged per buffered record on top of its texts (ids, attributes, bookkeeping)."""


@dataclass(frozen=True)
class RunRef:
    """The wandb run a step is written into."""

    run_id: str
    project: str | None = None
    entity: str | None = None

    @property
    def key(self) -> str:
        """Name the attachment: the run id (wandb allows one live attachment per id in a process)."""
        return self.run_id


@dataclass
class ClosedStep:
    """One (run, step) ready to be written: its kept generations in rank order.

    Attributes:
        group_id: the records' ``valgen.run_id`` (the identity of the group and the ledger key).
        run: the wandb run to write into.
        step: the trainer's step.
        generations: the generations, ordered by rank.
        summary: the attributes of the step's summary record, if one arrived.
        complete: whether the summary arrived and all the records it counts.
        reason: why the step closed (summary, timeout, overflow, shutdown, push).
        closed_at: ``time.monotonic()`` when the step closed.
        late_addition: the step was written before; these are generations that came later.
        attempt: the records' ``valgen.attempt`` ("" for records without one).
        attempt_start: unix nanos the attempt started (the summary's ``valgen.attempt_start``,
            else the earliest generation's time, else 0).
        attempt_complete: whether the sampler closed the attempt as ``complete``.

    """

    group_id: str
    run: RunRef
    step: int
    generations: list[Generation]
    summary: dict[str, Any] | None = None
    complete: bool = True
    reason: str = "summary"
    closed_at: float = 0.0
    late_addition: bool = field(default=False)
    attempt: str = ""
    attempt_start: int = 0
    attempt_complete: bool = True

    def shown_attempt(self) -> ShownAttempt:
        """The step's attempt as the ledger ranks it."""
        return ShownAttempt(self.attempt, self.attempt_start, self.attempt_complete)


def attempt_facts(summary: Mapping[str, Any] | None, generations: Iterable[Generation]) -> tuple[int, bool]:
    """(attempt start, complete) of an attempt from its summary, else from its generations."""
    start = summary.get(contract.ATTEMPT_START) if summary else None
    if not isinstance(start, int) or isinstance(start, bool) or start <= 0:
        start = min((g.timestamp for g in generations if g.timestamp > 0), default=0)
    complete = summary is not None and summary.get(contract.CLOSED_REASON) == COMPLETE
    return start, complete


def run_ref_from_resource(
    resource: Mapping[str, Any], run_id: str, project: str | None = None, entity: str | None = None
) -> RunRef:
    """Name the target run: ``wandb.*`` resource attributes, else ``run_id`` and the defaults."""
    wandb_id = resource.get(contract.WANDB_RUN_ID)
    wandb_project = resource.get(contract.WANDB_PROJECT)
    wandb_entity = resource.get(contract.WANDB_ENTITY)
    return RunRef(
        run_id=wandb_id if isinstance(wandb_id, str) and wandb_id else run_id,
        project=wandb_project if isinstance(wandb_project, str) and wandb_project else project,
        entity=wandb_entity if isinstance(wandb_entity, str) and wandb_entity else entity,
    )


def _order_key(generation: Generation) -> tuple[float, int, str]:
    rank = float(generation.rank) if generation.rank is not None else math.inf
    return (rank, generation.sample_key if generation.sample_key is not None else 0, generation.sample_id)


def order_generations(generations: Iterable[Generation]) -> list[Generation]:
    """Sort generations by ``valgen.rank`` (1-based); unranked ones last, by sample key and id."""
    return sorted(generations, key=_order_key)


def record_bytes(generation: Generation) -> int:
    """Return the bytes a buffered generation is charged: its texts plus a fixed overhead."""
    texts = len(generation.input) + len(generation.output) + len(generation.ground_truth or "")
    return texts + len(generation.sample_id) + RECORD_OVERHEAD_BYTES


SUMMARY_SCALARS = (
    ("seen", contract.SEEN),
    ("kept", contract.KEPT),
    ("late", contract.LATE),
    ("missing", contract.MISSING),
)


def summary_scalars(summary: Mapping[str, Any] | None) -> dict[str, int]:
    """Return the per-step scalars (seen, kept, late, missing) a summary carries."""
    if not summary:
        return {}
    out: dict[str, int] = {}
    for name, key in SUMMARY_SCALARS:
        value = summary.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            out[name] = value
    return out
