"""Links of step traces to tracker runs, made off the writer thread and retried until the trace is there.

The MLflow backend (``--mlflow-link-traces``) links the trace the collector's ``valgen_spans``
connector makes of each step it writes (``otel_valgen._tracing.step_trace_id``) to the job's run.
That trace leaves the collector when the step closes, as the step's records do, so it may reach
the tracker after the step is written, or never (the collector runs no traces overlay).
``TraceLinks`` holds each link until its trace is seen:

- ``add`` queues a link and returns at once: a write never waits for a link, nor fails by one;
- a thread of its own makes the link (``link``) and looks for the trace (``exists``) at once, then
  again after 1, 2, 4, ... seconds (at most ``max_interval_s`` apart), until the trace is there
  (``made``), the tracker refuses the link for good (``LinkRefused``) or ``wait_s`` has passed
  since the step was written (``given_up``);
- at most ``max_pending`` links wait; one more gives up the oldest;
- the first link given up is logged as a WARNING naming the fix; later ones are only counted;
- ``close`` tries the links never tried yet once more, then stops; links still waiting are logged.

``stats`` gives ``made``, ``pending`` and ``given_up``: the service's stats (``trace_links``) and
``/metrics`` (``valgen_exporter_trace_links_total{backend,outcome}``,
``valgen_exporter_trace_links_pending{backend}``) read it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

__all__ = ["LinkRefused", "TraceLinks"]

_logger = logging.getLogger("otel_valgen.exporter")

MAX_IDS_PER_CALL = 100  # MLflow links at most 100 traces per request
_REMEMBERED = 4096  # links made, remembered so that a step written again is not linked again


class LinkRefused(Exception):
    """The tracker will never take this link (it cannot link traces, or the ids are not valid)."""


@dataclass
class _Pending:
    trace_id: str
    run_id: str
    what: str  # the step, for the log: "run r step 3 (validation)"
    deadline: float
    due: float
    tries: int = 0
    linked: bool = False


class TraceLinks:
    """Each written step's trace, linked to its run once the trace is there (see the module's docstring).

    Args:
        name: the backend, for the log.
        link: links trace ids (at most ``MAX_IDS_PER_CALL``) to a run; raises ``LinkRefused``
            when it never will, anything else when it may later.
        exists: whether the tracker has the trace; raises when it cannot say now.
        wait_s: how long after ``add`` a link waits for its trace before it is given up.
        fix: what to do when links are given up, for the warning.
        max_pending: links waiting at most; one more gives up the oldest.
        first_interval_s: the wait before the second try; it doubles at each try after.
        max_interval_s: the longest wait between two tries.

    """

    def __init__(
        self,
        name: str,
        link: Callable[[str, list[str]], None],
        exists: Callable[[str], bool],
        *,
        wait_s: float,
        fix: str,
        max_pending: int = 256,
        first_interval_s: float = 1.0,
        max_interval_s: float = 30.0,
    ) -> None:
        self.name = name
        self._link = link
        self._exists = exists
        self._wait_s = wait_s
        self._fix = fix
        self._max_pending = max_pending
        self._first_interval_s = first_interval_s
        self._max_interval_s = max_interval_s
        self._pending: dict[tuple[str, str], _Pending] = {}  # in the order added: the oldest first
        self._made_keys: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._made = 0
        self._given_up = 0
        self._warned = False
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = False

    def add(self, trace_id: str, run_id: str, what: str) -> None:
        """Queue the link of ``trace_id`` to ``run_id`` (``what``: the step, for the log); returns at once."""
        key = (trace_id, run_id)
        with self._cond:
            if self._stopping or key in self._pending or key in self._made_keys:
                return
            if len(self._pending) >= self._max_pending:
                oldest = self._pending.pop(next(iter(self._pending)))
                self._give_up(oldest, f"more than {self._max_pending} links were waiting for their traces")
            now = time.monotonic()
            self._pending[key] = _Pending(trace_id, run_id, what, deadline=now + self._wait_s, due=now)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=f"valgen-{self.name}-trace-links", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def stats(self) -> dict[str, int]:
        """Links ``made`` (the trace is there and linked), ``pending`` and ``given_up``."""
        with self._cond:
            return {"made": self._made, "pending": len(self._pending), "given_up": self._given_up}

    def close(self, timeout_s: float = 10.0) -> None:
        """Try the links never tried yet once more, then stop; safe to call again."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout_s)
        with self._cond:
            left = len(self._pending)
        if left:
            _logger.info("%s: %d trace links were still waiting for their traces at stop", self.name, left)

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._stopping:
                        batch, final = [p for p in self._pending.values() if p.tries == 0], True
                        break
                    now = time.monotonic()
                    batch, final = [p for p in self._pending.values() if p.due <= now], False
                    if batch:
                        break
                    due = min((p.due for p in self._pending.values()), default=None)
                    self._cond.wait(None if due is None else due - now)
            self._try(batch)
            if final:
                return

    def _try(self, batch: list[_Pending]) -> None:
        """Link the batch's unlinked links, look for their traces, and settle each."""
        refused = self._link_all(batch)
        seen = self._look(pending for pending in batch if pending.linked and id(pending) not in refused)
        with self._cond:
            now = time.monotonic()
            for pending in batch:
                key = (pending.trace_id, pending.run_id)
                if self._pending.get(key) is not pending:
                    continue  # given up meanwhile, for room
                if id(pending) in seen:
                    del self._pending[key]
                    self._made += 1
                    self._made_keys[key] = None
                    if len(self._made_keys) > _REMEMBERED:
                        self._made_keys.popitem(last=False)
                elif id(pending) in refused:
                    del self._pending[key]
                    self._give_up(pending, refused[id(pending)])
                elif now >= pending.deadline:
                    del self._pending[key]
                    self._give_up(pending, f"its trace did not reach the tracker within {self._wait_s:g} s")
                else:
                    interval = min(self._first_interval_s * 2**pending.tries, self._max_interval_s)
                    pending.tries += 1
                    pending.due = min(now + interval, pending.deadline)

    def _link_all(self, batch: list[_Pending]) -> dict[int, str]:
        """Link the batch's unlinked links, per run, ``MAX_IDS_PER_CALL`` at a time; why each refused one was."""
        refused: dict[int, str] = {}
        by_run: dict[str, list[_Pending]] = {}
        for pending in batch:
            if not pending.linked:
                by_run.setdefault(pending.run_id, []).append(pending)
        for run_id, links in by_run.items():
            for start in range(0, len(links), MAX_IDS_PER_CALL):
                chunk = links[start : start + MAX_IDS_PER_CALL]
                try:
                    self._link(run_id, [p.trace_id for p in chunk])
                except LinkRefused as error:
                    refused.update((id(p), f"the tracker refused the link: {error}") for p in chunk)
                except Exception as error:  # unavailable now: tried again later
                    _logger.debug("%s: linking %d traces to run %s failed: %s", self.name, len(chunk), run_id, error)
                else:
                    for pending in chunk:
                        pending.linked = True
        return refused

    def _look(self, links: Iterable[_Pending]) -> set[int]:
        """The links whose trace the tracker has (``id()`` of each)."""
        seen: set[int] = set()
        for pending in links:
            try:
                if self._exists(pending.trace_id):
                    seen.add(id(pending))
            except Exception as error:  # cannot say now: tried again later
                _logger.debug("%s: looking for trace %s failed: %s", self.name, pending.trace_id, error)
        return seen

    def _give_up(self, pending: _Pending, reason: str) -> None:
        """Count a link given up; the first one is logged with the fix (called with the lock held)."""
        self._given_up += 1
        if self._warned:
            return
        self._warned = True
        _logger.warning(
            "%s: the trace of %s (%s) could not be linked to run %s: %s. %s. Later links given up are only counted "
            "(trace_links given_up)",
            self.name,
            pending.what,
            pending.trace_id,
            pending.run_id,
            reason,
            self._fix,
        )
