"""The exporter's core, independent of the transports: accept requests, buffer, write.

``accept`` is called by the HTTP and gRPC front ends with one decoded request. Closed steps
go to a queue that one writer thread drains (all wandb calls happen on that thread). While
wandb cannot take data, or the queue is full, ``accept`` raises ``Unavailable`` before it
buffers anything, so the collector keeps the request in its sending queue and retries.
``stop`` writes what it holds; with a state folder, steps still waiting for their summary are
spooled there and reopened by the next start instead of being written incomplete.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from otel_valgen.wandb_exporter.buffer import BufferLimits, StepBuffer
from otel_valgen.wandb_exporter.decode import split_records
from otel_valgen.wandb_exporter.ledger import Ledger
from otel_valgen.wandb_exporter.model import ClosedStep
from otel_valgen.wandb_exporter.writer import WandbWriter, WriterConfig, WriterUnavailable

__all__ = ["ExporterService", "Outcome", "ServiceConfig", "Unavailable"]

_logger = logging.getLogger("otel_valgen.wandb_exporter")


class Unavailable(Exception):
    """The service cannot take data now; the sender should retry after ``retry_after_s``."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


@dataclass(frozen=True)
class Outcome:
    """What became of an accepted request: how many records were rejected, and why."""

    accepted: int
    rejected: int = 0
    message: str = ""


@dataclass(frozen=True)
class ServiceConfig:
    """Settings of the service (transport-independent)."""

    writer: WriterConfig = field(default_factory=WriterConfig)
    limits: BufferLimits = field(default_factory=BufferLimits)
    state_dir: str | None = None
    project: str | None = None
    entity: str | None = None
    retry_after_s: float = 5.0
    max_pending_steps: int = 64
    tick_s: float = 0.25


class ExporterService:
    """Buffers records per (run, step) and writes closed steps on its writer thread."""

    def __init__(self, config: ServiceConfig, writer: WandbWriter | None = None) -> None:
        self.config = config
        self.ledger = Ledger(config.state_dir)
        self.buffer = StepBuffer(
            self.ledger,
            config.limits,
            late_additions=config.writer.layout == "rows",
            project=config.project,
            entity=config.entity,
        )
        self.writer = writer or WandbWriter(config.writer, self.ledger)
        self.latencies: deque[float] = deque(maxlen=10_000)  # close -> written, seconds
        self.rejected = 0
        self._pending: deque[ClosedStep] = deque()
        self._cond = threading.Condition()
        self._failing_since: float | None = None
        self._stopping = False
        self._stop_deadline = 0.0
        self._thread: threading.Thread | None = None
        self._spool = Path(config.state_dir) / "spool.json" if config.state_dir else None

    def start(self) -> None:
        """Reopen spooled steps and start the writer thread."""
        if self._spool is not None and self._spool.exists():
            items = json.loads(self._spool.read_text(encoding="utf-8"))
            self._spool.unlink()
            self._enqueue(self.buffer.restore(items))
            _logger.info("reopened %d spooled steps", len(items))
        self._thread = threading.Thread(target=self._run, name="valgen-wandb-writer", daemon=True)
        self._thread.start()

    def accept(self, request: dict[str, Any]) -> Outcome:
        """Buffer the valgen records of one OTLP/JSON request.

        Raises:
            Unavailable: wandb is failing or the write queue is full; nothing was buffered.
            MalformedPayload: the request is not an OTLP logs request.

        """
        with self._cond:
            if self._stopping:
                raise Unavailable("shutting down", self.config.retry_after_s)
            if self._failing_since is not None:
                raise Unavailable("wandb cannot take data now", self.config.retry_after_s)
            if len(self._pending) >= self.config.max_pending_steps:
                raise Unavailable("write queue full", self.config.retry_after_s)
        decoded = split_records(request)
        self.rejected += decoded.rejected
        closed: list[ClosedStep] = []
        for record, resource in decoded.records:
            closed += self.buffer.add(record, resource)
        self._enqueue(closed)
        return Outcome(accepted=len(decoded.records), rejected=decoded.rejected, message=decoded.message)

    def _enqueue(self, steps: list[ClosedStep]) -> None:
        if steps:
            with self._cond:
                self._pending.extend(steps)
                self._cond.notify_all()

    def _run(self) -> None:
        next_expiry = time.monotonic()
        while True:
            with self._cond:
                if not self._pending and not self._stopping:
                    self._cond.wait(self.config.tick_s)
                if self._stopping and (not self._pending or self._give_up()):
                    return
                step = self._pending[0] if self._pending else None
            if time.monotonic() >= next_expiry:
                self._enqueue(self.buffer.expire())
                next_expiry = time.monotonic() + self.config.tick_s
            if step is not None:
                self._write(step)

    def _give_up(self) -> bool:
        return self._failing_since is not None and time.monotonic() > self._stop_deadline

    def _write(self, step: ClosedStep) -> None:
        try:
            self.writer.write(step)
        except WriterUnavailable as error:
            with self._cond:
                if self._failing_since is None:
                    self._failing_since = time.monotonic()
                    _logger.warning("wandb unavailable, holding %d steps: %s", len(self._pending), error)
                self._cond.wait(min(self.config.retry_after_s, 1.0) if not self._stopping else 0.2)
            return
        except Exception:
            _logger.exception("dropping run %s step %d: the write failed", step.run.key, step.step)
        with self._cond:
            if self._pending and self._pending[0] is step:
                self._pending.popleft()
            if self._failing_since is not None:
                _logger.info("wandb available again")
            self._failing_since = None
            self.latencies.append(time.monotonic() - step.closed_at)

    def idle(self) -> bool:
        """Whether nothing is open or waiting to be written."""
        with self._cond:
            return not self._pending and self.buffer.open_steps == 0

    def stop(self, timeout_s: float = 30.0, *, teardown: bool = True) -> None:
        """Write what is held (spool open steps when there is a state folder), finish attachments.

        ``teardown`` waits for wandb's service to write everything out (see ``WandbWriter.close``).
        """
        if self._spool is not None:
            open_steps = self.buffer.snapshot()
            self.buffer.drain("spooled")
        else:
            open_steps = []
            self._enqueue(self.buffer.drain("shutdown"))
        with self._cond:
            self._stopping = True
            self._stop_deadline = time.monotonic() + min(timeout_s, 5.0)
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout_s)
        with self._cond:
            unwritten = list(self._pending)
            self._pending.clear()
        if unwritten and self._spool is None:
            _logger.error("%d closed steps could not be written before shutdown", len(unwritten))
        if self._spool is not None and (open_steps or unwritten):
            open_steps += [_spool_item(step) for step in unwritten]
            self._spool.write_text(json.dumps(open_steps), encoding="utf-8")
            _logger.info("spooled %d steps to %s", len(open_steps), self._spool)
        self.writer.close(teardown=teardown)

    def stats(self) -> dict[str, Any]:
        """Counters for logs and tests."""
        return {
            **dataclasses.asdict(self.buffer.stats),
            "rejected": self.rejected,
            "written_steps": self.writer.written_steps,
            "superseded_attempts": self.writer.superseded_attempts,
            "pending": len(self._pending),
            "open_steps": self.buffer.open_steps,
        }


def _spool_item(step: ClosedStep) -> dict[str, Any]:
    return {
        "group": step.group_id,
        "step": step.step,
        "attempt": step.attempt,
        "target": dataclasses.asdict(step.run),
        "summary": step.summary,
        "late_addition": step.late_addition,
        "generations": [dataclasses.asdict(item) for item in step.generations],
    }
