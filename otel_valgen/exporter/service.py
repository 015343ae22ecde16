"""The exporter's core, independent of the transports: accept a request, hand its steps to every backend.

``accept`` is called by the HTTP and gRPC front ends with one decoded request. The collector's
sampler sends each closed step as one request, so the request's records are the step
(``otel_valgen.exporter.steps.assemble``) and nothing is buffered across requests. Each
backend has a worker: a thread, a queue of steps to write and its own ledger. A backend that
fails keeps its steps queued and retries them, while the others go on. ``accept`` answers
``Unavailable`` (HTTP 503, gRPC ``UNAVAILABLE``: the collector keeps the request in its
sending queue and retries) before taking anything when every backend is failing, or when one
backend's queue is full. A retried request is written only where it is missing: each ledger
skips what its backend already has. ``stop`` writes what it can; with a state folder, steps
still queued are spooled per backend and queued again by the next start. A step whose
attempts ran at the same time with no common source (one launch split into attempts,
``otel_valgen.exporter.split_watch``) is logged once as a warning naming the fix, and counted;
so is a step whose summary names sources that ran verl's own table (``otel_valgen.unhooked``).
Validation steps and training rollout steps (``valgen.kind``) take the same way; the service
counts steps per kind (``validation_steps``, ``rollout_steps``) and each worker counts what
it did in total and per kind (``kinds``); a backend that links step traces to runs (MLflow with
``link_traces``) adds its ``trace_links`` (made, pending, given up). These counters are the only
ones: ``stats()`` reads them for the log line at shutdown and ``otel_valgen.exporter.metrics`` for
``/metrics``.

A step that came in parts (agents re-routed it between samplers, each closing a part) is
merged as its parts arrive (``otel_valgen.exporter.parts``): each later part hands the merged
step on again, which the backends write again or as a correction; a worker still holding an
unwritten earlier version of the step replaces it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Literal

from otel_valgen import contract
from otel_valgen.exporter.backends import Backend, BackendUnavailable, StepNotWritable
from otel_valgen.exporter.ledger import ledger_dir
from otel_valgen.exporter.parts import StepParts
from otel_valgen.exporter.split_watch import SplitWatch
from otel_valgen.exporter.steps import ClosedStep, RecordCounts, assemble, step_as_item, step_from_item
from otel_valgen.reader import split_request
from otel_valgen.splits import split_warning
from otel_valgen.unhooked import unhooked_warning

__all__ = ["BackendWorker", "ExporterService", "Outcome", "ServiceConfig", "Unavailable"]

_logger = logging.getLogger("otel_valgen.exporter")


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
    """Settings of the service (transport-independent).

    Attributes:
        state_dir: the folder of the ledgers and spools (one subfolder per backend).
        retry_after_s: what ``Unavailable`` asks the sender to wait.
        max_pending_steps: steps a backend may hold unwritten before requests are refused.

    """

    state_dir: str | None = None
    retry_after_s: float = 5.0
    max_pending_steps: int = 64


@dataclass
class KindStats:
    """What one backend did with the steps of one kind."""

    written_steps: int = 0
    rows: int = 0
    unchanged_steps: int = 0
    failed_steps: int = 0


@dataclass
class WorkerStats(KindStats):
    """What one backend did with the steps it was given: in total, and per kind (``kinds``)."""

    outages: int = 0
    spooled: int = 0  # steps written to the spool at stop, unwritten
    requeued: int = 0  # steps taken from the spool at start, queued again
    # Every kind present from the start: stats() may copy the dict while the writer thread counts.
    kinds: dict[str, KindStats] = field(default_factory=lambda: {kind: KindStats() for kind in sorted(contract.KINDS)})

    def count(self, kind: str, name: str, amount: int = 1) -> None:
        """Add ``amount`` to the counter ``name``, in total and for ``kind``."""
        for stats in (self, self.kinds.setdefault(kind, KindStats())):
            setattr(stats, name, getattr(stats, name) + amount)


class BackendWorker:
    """One backend's queue of steps, written in order on its own thread."""

    def __init__(self, backend: Backend, config: ServiceConfig) -> None:
        self.backend = backend
        self.name = backend.name
        self.stats = WorkerStats()
        self.latencies: deque[float] = deque(maxlen=10_000)  # request received -> step written, seconds
        self._config = config
        self._pending: deque[ClosedStep] = deque()
        self._cond = threading.Condition()
        self._failing_since: float | None = None
        self._stopping = False
        self._stop_deadline = 0.0
        self._thread: threading.Thread | None = None
        folder = ledger_dir(config.state_dir, self.name)
        self._spool = folder / "spool.json" if folder is not None else None

    @property
    def failing(self) -> bool:
        """Whether the last write found the tracker unavailable."""
        with self._cond:
            return self._failing_since is not None

    @property
    def pending(self) -> int:
        """Steps waiting to be written."""
        with self._cond:
            return len(self._pending)

    def oldest_pending_age(self) -> float:
        """Seconds since the oldest step waiting to be written was received (0 when none waits).

        A step queued again from the spool counts from the start that queued it.
        """
        with self._cond:
            oldest = min((step.received_at for step in self._pending), default=None)
        return 0.0 if oldest is None else max(0.0, time.monotonic() - oldest)

    def full(self) -> bool:
        """Whether the queue holds ``max_pending_steps``."""
        return self.pending >= self._config.max_pending_steps

    def start(self) -> None:
        """Queue the spooled steps of the previous run and start the thread."""
        if self._spool is not None and self._spool.exists():
            items = json.loads(self._spool.read_text(encoding="utf-8"))
            self._spool.unlink()
            self.offer([step_from_item(item) for item in items])
            self.stats.requeued += len(items)
            _logger.info("%s: queued %d spooled steps", self.name, len(items))
        self._thread = threading.Thread(target=self._run, name=f"valgen-{self.name}-writer", daemon=True)
        self._thread.start()

    def offer(self, steps: list[ClosedStep]) -> None:
        """Queue steps to be written; a step replaces a queued version of itself not being written yet."""
        if steps:
            with self._cond:
                for step in steps:
                    self._queue(step)
                self._cond.notify_all()

    def _queue(self, step: ClosedStep) -> None:
        for index in range(1, len(self._pending)):  # [0] may be being written
            if self._pending[index].key == step.key and step.samplers > self._pending[index].samplers:
                self._pending[index] = step
                return
        self._pending.append(step)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._stopping:
                    self._cond.wait()
                if not self._pending or (self._stopping and self._give_up()):
                    return
                step = self._pending[0]
            self._write(step)

    def _give_up(self) -> bool:
        return self._failing_since is not None and time.monotonic() > self._stop_deadline

    def _write(self, step: ClosedStep) -> None:
        try:
            rows = self.backend.write(step)
        except BackendUnavailable as error:
            with self._cond:
                if self._failing_since is None:
                    self._failing_since = time.monotonic()
                    self.stats.outages += 1
                    _logger.warning("%s unavailable, holding %d steps: %s", self.name, len(self._pending), error)
                self._cond.wait(min(self._config.retry_after_s, 1.0) if not self._stopping else 0.2)
            return
        except StepNotWritable as error:  # the backend logged why, once per run
            self.stats.count(step.kind, "failed_steps")
            _logger.debug("%s: run %s step %d not written: %s", self.name, step.group_id, step.step, error)
        except Exception:
            self.stats.count(step.kind, "failed_steps")
            _logger.exception(
                "%s: dropping run %s step %d (%s): the write failed", self.name, step.group_id, step.step, step.kind
            )
        else:
            if rows is None:
                self.stats.count(step.kind, "unchanged_steps")
            else:
                self.stats.count(step.kind, "rows", rows)
                self.stats.count(step.kind, "written_steps")
                self.latencies.append(time.monotonic() - step.received_at)
        with self._cond:
            if self._pending and self._pending[0] is step:
                self._pending.popleft()
            if self._failing_since is not None:
                _logger.info("%s available again", self.name)
            self._failing_since = None

    def stop(self, timeout_s: float) -> None:
        """Write what is queued (giving up on a failing tracker after a few seconds); spool the rest."""
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
            _logger.error("%s: %d steps could not be written before shutdown", self.name, len(unwritten))
        elif unwritten and self._spool is not None:
            self._spool.parent.mkdir(parents=True, exist_ok=True)
            self._spool.write_text(json.dumps([step_as_item(step) for step in unwritten]), encoding="utf-8")
            self.stats.spooled += len(unwritten)
            _logger.info("%s: spooled %d steps to %s", self.name, len(unwritten), self._spool)


@dataclass
class ServiceStats(RecordCounts):
    """Counters of what the service did with the requests and records it received.

    ``steps`` counts both kinds; ``validation_steps`` and ``rollout_steps`` split it.
    """

    rejected: int = 0
    accepted_requests: int = 0
    refused_requests: int = 0  # answered Unavailable (HTTP 503, gRPC UNAVAILABLE)
    malformed_requests: int = 0  # not an OTLP logs request (HTTP 4xx, gRPC INVALID_ARGUMENT)
    failed_requests: int = 0  # an unexpected error (HTTP 500)
    steps: int = 0
    split_steps: int = 0  # steps whose attempts ran at the same time with no common source
    merged_steps: int = 0  # steps handed on again, merged with a part another sampler closed
    parts_unmerged: int = 0  # parts whose step's other parts were no longer kept
    unhooked_steps: int = 0  # steps a source of which ran verl's own table (valgen.sources_unhooked)


class ExporterService:
    """Hands the steps of each request to every backend's worker."""

    def __init__(self, config: ServiceConfig, backends: list[Backend]) -> None:
        if not backends:
            raise ValueError("the exporter needs at least one backend")
        self.config = config
        self.workers = [BackendWorker(backend, config) for backend in backends]
        self.counts = ServiceStats()
        self._splits = SplitWatch()
        self._parts = StepParts(config.state_dir)
        self._lock = threading.Lock()
        self._stopping = False

    def start(self) -> None:
        """Start every backend's worker."""
        for worker in self.workers:
            worker.start()

    def accept(self, request: dict[str, Any]) -> Outcome:
        """Hand the valgen steps of one OTLP/JSON request to every backend.

        Raises:
            Unavailable: every backend is failing, or one holds ``max_pending_steps``; nothing was taken.
            MalformedPayload: the request is not an OTLP logs request.

        """
        reason = self.refusal()
        if reason:
            with self._lock:
                self.counts.refused_requests += 1
            raise Unavailable(reason, self.config.retry_after_s)
        decoded = split_request(request)
        assembled = assemble(decoded.records)
        assembled.steps = [self._parts.add(step) for step in assembled.steps]
        with self._lock:
            self.counts.merged_steps, self.counts.parts_unmerged = self._parts.merged, self._parts.unmerged
            self.counts.accepted_requests += 1
            self.counts.add(assembled)
            self.counts.steps += len(assembled.steps)
            self.counts.rejected += decoded.rejected
            split = [(step, n) for step in assembled.steps if (n := self._splits.observe(step))]
            self.counts.split_steps += len(split)
            unhooked = [(step, sources) for step in assembled.steps if (sources := _unhooked_sources(step))]
            self.counts.unhooked_steps += len(unhooked)
        for step, attempts in split:
            _logger.warning("%s", split_warning(step.group_id, step.step, attempts))
        for step, sources in unhooked:
            _logger.warning("%s", unhooked_warning(step.group_id, step.step, sources))
        if assembled.without_summary:
            _logger.warning(
                "%d steps arrived without their summary (written incomplete): the exporter expects one closed "
                "step per request, with no batch processor after valgen_sampler",
                assembled.without_summary,
            )
        for worker in self.workers:
            worker.offer(assembled.steps)
        return Outcome(accepted=len(decoded.records), rejected=decoded.rejected, message=decoded.message)

    def count_request(self, outcome: Literal["malformed", "failed"]) -> None:
        """Count a request the front ends answered with an error: ``malformed`` (also from ``accept``) or ``failed``."""
        with self._lock:
            name = f"{outcome}_requests"
            setattr(self.counts, name, getattr(self.counts, name) + 1)

    def refusal(self) -> str:
        """Why a request would be refused now ('' when taken): stopping, every backend failing, or one full."""
        if self._stopping:
            return "shutting down"
        if all(worker.failing for worker in self.workers):
            return "no backend can take data now: " + ", ".join(worker.name for worker in self.workers)
        full = [worker.name for worker in self.workers if worker.full()]
        if full:
            return f"{', '.join(full)} cannot take more steps now ({self.config.max_pending_steps} waiting)"
        return ""

    def idle(self) -> bool:
        """Whether no step is waiting to be written."""
        return all(worker.pending == 0 for worker in self.workers)

    def stop(self, timeout_s: float = 30.0, *, teardown: bool = True) -> None:
        """Write what is queued (spool what cannot be, with a state folder) and close every backend.

        ``teardown``: the process is ending (wandb waits for its service to write everything out).
        """
        self._stopping = True
        for worker in self.workers:
            worker.stop(timeout_s)
        for worker in self.workers:
            try:
                worker.backend.close(teardown=teardown)
            except Exception:  # closing is best effort: what was written is in the ledger
                _logger.exception("%s: closing failed", worker.name)

    def stats(self) -> dict[str, Any]:
        """Counters for logs and tests: the service's, and per backend."""
        with self._lock:
            counts = dataclasses.asdict(self.counts)
        counts["backends"] = {
            worker.name: {
                **dataclasses.asdict(worker.stats),
                "pending": worker.pending,
                "oldest_pending_s": worker.oldest_pending_age(),
                "failing": worker.failing,
                **_trace_links(worker.backend),
            }
            for worker in self.workers
        }
        return counts


def _trace_links(backend: Backend) -> dict[str, Any]:
    """``{"trace_links": {made, pending, given_up}}`` of a backend that links traces (MLflow's, when on), else {}."""
    stats = getattr(backend, "trace_link_stats", None)
    links = stats() if callable(stats) else None
    return {} if links is None else {"trace_links": links}


def _unhooked_sources(step: ClosedStep) -> list[str]:
    """The summary's ``valgen.sources_unhooked``: sources that ran verl's own table for the step."""
    sources = step.summary.get(contract.SOURCES_UNHOOKED) if step.summary is not None else None
    return [str(source) for source in sources] if isinstance(sources, list) else []
