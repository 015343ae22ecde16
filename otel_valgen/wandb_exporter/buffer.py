"""Per-(run, step, attempt) buffering until the summary arrives, bounded in steps and bytes.

Each attempt of a step (``valgen.attempt``) is buffered on its own, as the sampler groups
them; which attempt is shown is decided when it is written (``WandbWriter``). Generations the
sampler forwarded as late (``valgen.late`` = true) are not part of its sample: they are counted
(``late_dropped``) and dropped. A step closes when its ``valgen.step.summary`` record has
arrived together with the number of generations it reports as kept; else ``step_timeout_s``
after its last record (written, logged as incomplete). When a new record would exceed
``max_open_steps`` or ``max_bytes``, the oldest open steps are closed early (written as
incomplete, reason ``overflow``): memory stays bounded and nothing acknowledged is dropped
silently. Every such event is counted.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from otel_valgen import contract
from otel_valgen.reader import Generation, Summary
from otel_valgen.wandb_exporter.ledger import Ledger
from otel_valgen.wandb_exporter.model import (
    ClosedStep,
    RunRef,
    attempt_facts,
    order_generations,
    record_bytes,
    run_ref_from_resource,
)

__all__ = ["BufferLimits", "BufferStats", "StepBuffer"]

_logger = logging.getLogger("otel_valgen.wandb_exporter")


@dataclass(frozen=True)
class BufferLimits:
    """Bounds of the buffer.

    Attributes:
        max_open_steps: open (run, step) groups held at once.
        max_bytes: bytes of buffered texts (plus a fixed overhead per record).
        step_timeout_s: seconds after a step's last record before it is written incomplete.

    """

    max_open_steps: int = 256
    max_bytes: int = 256 * 1024 * 1024
    step_timeout_s: float = 120.0

    def __post_init__(self) -> None:
        if self.max_open_steps < 1 or self.max_bytes < 1 or self.step_timeout_s <= 0:
            raise ValueError("buffer limits must be positive")


@dataclass
class BufferStats:
    """Counters of what the buffer did with the records it was given."""

    generations: int = 0
    summaries: int = 0
    duplicates: int = 0
    late_dropped: int = 0
    closed: dict[str, int] = field(default_factory=dict)


Key = tuple[str, int, str]  # (valgen.run_id, step, attempt)


@dataclass
class _Open:
    group: str
    step: int
    attempt: str = ""
    target: RunRef | None = None
    generations: dict[str, Generation] = field(default_factory=dict)
    summary: dict[str, Any] | None = None
    nbytes: int = 0
    last: float = 0.0
    late_addition: bool = False


class StepBuffer:
    """Groups records by (``valgen.run_id``, step) and hands out closed steps."""

    def __init__(
        self,
        ledger: Ledger,
        limits: BufferLimits | None = None,
        *,
        late_additions: bool = False,
        project: str | None = None,
        entity: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limits = limits or BufferLimits()
        self.stats = BufferStats()
        self._ledger = ledger
        self._late_additions = late_additions
        self._project, self._entity = project, entity
        self._clock = clock
        self._open: dict[Key, _Open] = {}  # insertion order = age
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def open_steps(self) -> int:
        """How many steps are open."""
        return len(self._open)

    @property
    def open_bytes(self) -> int:
        """Bytes charged for the buffered records."""
        return self._bytes

    def add(self, record: Generation | Summary, resource: Mapping[str, Any]) -> list[ClosedStep]:
        """Buffer one record; return the steps that closed because of it."""
        with self._lock:
            if isinstance(record, Summary):
                return self._add_summary(record, resource)
            if record.late:  # forwarded by the sampler after the step closed: not part of its sample
                self.stats.generations += 1
                self.stats.late_dropped += 1
                return []
            return self._add_generation(record, resource)

    def _target(self, group: _Open, resource: Mapping[str, Any]) -> None:
        if group.target is None or resource.get(contract.WANDB_RUN_ID):
            group.target = run_ref_from_resource(resource, group.group, self._project, self._entity)

    def _add_summary(self, record: Summary, resource: Mapping[str, Any]) -> list[ClosedStep]:
        self.stats.summaries += 1
        key = (record.run_id, record.step, record.attempt)
        group = self._open.get(key)
        if group is None:
            if self._ledger.has_step(*key):
                self.stats.duplicates += 1
                return []
            group = self._open_group(key, late_addition=False)
        self._target(group, resource)
        group.summary = dict(record.attributes)
        group.last = self._clock()
        return self._close_if_complete(key, group)

    def _close_if_complete(self, key: Key, group: _Open) -> list[ClosedStep]:
        if group.summary is None:
            return []
        kept = group.summary.get(contract.KEPT)
        if group.late_addition or not isinstance(kept, int) or len(group.generations) >= kept:
            return [self._close(key, "summary")]
        return []

    def _add_generation(self, record: Generation, resource: Mapping[str, Any]) -> list[ClosedStep]:
        self.stats.generations += 1
        key = (record.run_id, record.step, record.attempt)
        group = self._open.get(key)
        if group is None and self._ledger.has_step(*key):
            if self._ledger.has_sample(record.run_id, record.step, record.sample_id, record.attempt):
                self.stats.duplicates += 1
                return []
            if not self._late_additions:
                self.stats.late_dropped += 1
                return []
        if group is not None and record.sample_id in group.generations:
            self.stats.duplicates += 1
            return []
        written = group is not None and group.late_addition
        if written and self._ledger.has_sample(key[0], key[1], record.sample_id, key[2]):
            self.stats.duplicates += 1
            return []
        nbytes = record_bytes(record)
        closed = self._make_room(key, nbytes, opening=group is None)
        if key not in self._open and self._ledger.has_step(*key) and not self._late_additions:
            self.stats.late_dropped += 1  # its own step was closed to make room
            return closed
        group = self._open.get(key) or self._open_group(key, late_addition=self._ledger.has_step(*key))
        self._target(group, resource)
        group.generations[record.sample_id] = record
        group.nbytes += nbytes
        self._bytes += nbytes
        group.last = self._clock()
        return closed + self._close_if_complete(key, group)

    def _open_group(self, key: Key, *, late_addition: bool) -> _Open:
        group = _Open(group=key[0], step=key[1], attempt=key[2], last=self._clock(), late_addition=late_addition)
        self._open[key] = group
        return group

    def _make_room(self, key: Key, nbytes: int, *, opening: bool) -> list[ClosedStep]:
        closed: list[ClosedStep] = []
        while self._open and (
            (opening and len(self._open) >= self.limits.max_open_steps) or self._bytes + nbytes > self.limits.max_bytes
        ):
            oldest = next(iter(self._open))
            _logger.warning("buffer full: closing run %s step %d early (overflow)", oldest[0], oldest[1])
            closed.append(self._close(oldest, "overflow"))
        return closed

    def _close(self, key: Key, reason: str) -> ClosedStep:
        group = self._open.pop(key)
        self._bytes -= group.nbytes
        self.stats.closed[reason] = self.stats.closed.get(reason, 0) + 1
        kept = group.summary.get(contract.KEPT) if group.summary else None
        complete = group.summary is not None and (not isinstance(kept, int) or len(group.generations) >= kept)
        if not complete and not group.late_addition and reason != "spooled":
            _logger.warning(
                "run %s step %d written incomplete (%s): %d generations, summary %s",
                key[0],
                key[1],
                reason,
                len(group.generations),
                "arrived" if group.summary else "missing",
            )
        self._ledger.claim(key[0], key[1], list(group.generations), key[2])
        attempt_start, attempt_complete = attempt_facts(group.summary, group.generations.values())
        return ClosedStep(
            group_id=key[0],
            step=key[1],
            run=group.target or RunRef(key[0], self._project, self._entity),
            generations=order_generations(group.generations.values()),
            summary=group.summary,
            complete=complete,
            reason=reason,
            closed_at=self._clock(),
            late_addition=group.late_addition,
            attempt=key[2],
            attempt_start=attempt_start,
            attempt_complete=attempt_complete,
        )

    def expire(self) -> list[ClosedStep]:
        """Close the steps whose last record is older than the timeout."""
        with self._lock:
            deadline = self._clock() - self.limits.step_timeout_s
            return [self._close(key, "timeout") for key, group in list(self._open.items()) if group.last <= deadline]

    def drain(self, reason: str = "shutdown") -> list[ClosedStep]:
        """Close every open step."""
        with self._lock:
            return [self._close(key, reason) for key in list(self._open)]

    def snapshot(self) -> list[dict[str, Any]]:
        """Return the open steps as JSON-able dicts (for the spool kept across restarts)."""
        with self._lock:
            return [
                {
                    "group": group.group,
                    "step": group.step,
                    "attempt": group.attempt,
                    "target": dataclasses.asdict(group.target) if group.target else None,
                    "summary": group.summary,
                    "late_addition": group.late_addition,
                    "generations": [dataclasses.asdict(item) for item in group.generations.values()],
                }
                for group in self._open.values()
            ]

    def restore(self, items: list[dict[str, Any]]) -> list[ClosedStep]:
        """Reopen steps saved by ``snapshot`` (their clocks restart now); return those complete."""
        closed: list[ClosedStep] = []
        with self._lock:
            for item in items:
                key = (str(item["group"]), int(item["step"]), str(item.get("attempt", "")))
                group = self._open.get(key) or self._open_group(key, late_addition=bool(item.get("late_addition")))
                if item.get("target"):
                    group.target = RunRef(**item["target"])
                group.summary = item.get("summary") or group.summary
                for raw in item.get("generations", []):
                    generation = Generation(**raw)
                    if generation.sample_id not in group.generations:
                        group.generations[generation.sample_id] = generation
                        group.nbytes += record_bytes(generation)
                        self._bytes += record_bytes(generation)
                closed += self._close_if_complete(key, group)
        return closed
