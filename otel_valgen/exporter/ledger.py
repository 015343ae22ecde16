"""What one backend has written, per (run, step, attempt, kind), optionally kept on disk.

Each backend has its own ledger (``<state dir>/<backend>/ledger.jsonl``), so that a step
written to one backend and not yet to another is later written to the other only. The ledger
makes writes idempotent: a request the collector retries, or records that arrive again after
a restart, never add rows. ``commit`` records a finished write and appends it to the file.

A step may be validated more than once (``valgen.attempt``: resume, retry). The ledger also
remembers which attempt of each (run, step) is shown, so that the writer applies the shared
rule (``otel_valgen.selection.choose_attempt``): a later attempt replaces the shown one only
when the rule picks it. The verl layout's rows are kept per step (the shown attempt's), so a
restarted service can rebuild the wide table it appends to. Lines written by older versions
(no attempt) read as attempt "", complete.

Every key includes the step's kind (``valgen.kind``): a step's validation and its rollouts are
written under different keys, so each has its own written samples, shown attempt and rows.
Lines without a kind (written before rollouts reached the backends) are validation.

A step that came in parts (agents re-routed it between samplers, ``otel_valgen.partials``) is
written again when a part of another sampler merges into it: each line also names the samplers
whose parts the write held, and ``samplers`` answers with their union.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from otel_valgen import contract
from otel_valgen.selection import attempt_rank

__all__ = ["Ledger", "ShownAttempt", "ledger_dir"]

_logger = logging.getLogger("otel_valgen.exporter")

AttemptKey = tuple[str, int, str, str]  # (group, step, attempt, kind)
ShownKey = tuple[str, int, str]  # (group, step, kind)
VALIDATION = contract.KIND_VALIDATION


@dataclass(frozen=True)
class ShownAttempt:
    """The attempt of a (run, step) currently written as the step's data."""

    attempt: str
    attempt_start: int = 0
    complete: bool = True

    def rank(self) -> tuple[bool, int, str]:
        """Its place in the shared order of attempts (``otel_valgen.selection.attempt_rank``)."""
        return attempt_rank(self)


class Ledger:
    """The set of written attempts and samples, per group (``valgen.run_id``) and kind."""

    def __init__(self, state_dir: str | Path | None = None) -> None:
        self._lock = threading.Lock()
        self._committed: dict[AttemptKey, set[str]] = {}
        self._samplers: dict[AttemptKey, set[str]] = {}
        self._shown: dict[ShownKey, ShownAttempt] = {}
        self._rows: dict[tuple[str, str], dict[int, Any]] = {}  # (group, kind) -> rows by step
        self._path = Path(state_dir) / "ledger.jsonl" if state_dir is not None else None
        if self._path is not None:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            self._load(self._path)

    def _load(self, path: Path) -> None:
        if not path.exists():
            return
        with path.open(encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                try:
                    entry = json.loads(line)
                    attempt, kind = str(entry.get("attempt", "")), str(entry.get("kind", VALIDATION))
                    key = (str(entry["group"]), int(entry["step"]), attempt, kind)
                    shown = ShownAttempt(key[2], int(entry.get("attempt_start", 0)), bool(entry.get("complete", True)))
                    self._record(key, list(entry.get("samples", [])), entry.get("row"), shown)
                    self._samplers.setdefault(key, set()).update(map(str, entry.get("samplers", [])))
                except (ValueError, KeyError, TypeError) as error:
                    _logger.warning("ledger %s line %d unreadable: %s", path, number, error)

    def _record(self, key: AttemptKey, sample_ids: list[str], row: Any, shown: ShownAttempt) -> None:
        self._committed.setdefault(key, set()).update(sample_ids)
        step_key = (key[0], key[1], key[3])
        current = self._shown.get(step_key)
        if current is not None and current.attempt == shown.attempt:
            shown = max(current, shown, key=ShownAttempt.rank)  # e.g. late additions know less
        elif current is not None and shown.rank() <= current.rank():
            return  # the shown attempt stays
        self._shown[step_key] = shown
        if row is not None:
            self._rows.setdefault((key[0], key[3]), {})[key[1]] = row

    def is_committed(self, group: str, step: int, attempt: str = "", kind: str = VALIDATION) -> bool:
        """Whether a write of this attempt of (group, step) of ``kind`` has finished."""
        with self._lock:
            return (group, step, attempt, kind) in self._committed

    def committed_samples(self, group: str, step: int, attempt: str = "", kind: str = VALIDATION) -> set[str]:
        """Return the samples of the attempt whose write has finished."""
        with self._lock:
            return set(self._committed.get((group, step, attempt, kind), ()))

    def samplers(self, group: str, step: int, attempt: str = "", kind: str = VALIDATION) -> frozenset[str]:
        """The samplers whose parts of the attempt have been written (empty: none named, or not written)."""
        with self._lock:
            return frozenset(self._samplers.get((group, step, attempt, kind), ()))

    def shown(self, group: str, step: int, kind: str = VALIDATION) -> ShownAttempt | None:
        """The attempt of (group, step) of ``kind`` written as the step's data, if any."""
        with self._lock:
            return self._shown.get((group, step, kind))

    def superseded_by(
        self, group: str, step: int, candidate: ShownAttempt, kind: str = VALIDATION
    ) -> ShownAttempt | None:
        """The shown attempt of (group, step, kind) when the shared rule keeps that other one over ``candidate``."""
        with self._lock:
            shown = self._shown.get((group, step, kind))
        if shown is None or shown.attempt == candidate.attempt or shown.rank() < candidate.rank():
            return None
        return shown

    def commit(
        self,
        group: str,
        step: int,
        sample_ids: list[str],
        row: Any = None,
        shown: ShownAttempt | None = None,
        kind: str = VALIDATION,
        samplers: frozenset[str] = frozenset(),
    ) -> None:
        """Record a finished write of ``shown`` (default attempt "") of ``kind``; persist it with a state folder.

        ``samplers``: the samplers whose parts of the step the write held (``otel_valgen.partials``).
        """
        shown = shown or ShownAttempt("")
        with self._lock:
            self._record((group, step, shown.attempt, kind), sample_ids, row, shown)
            self._samplers.setdefault((group, step, shown.attempt, kind), set()).update(samplers)
            if self._path is None:
                return
            entry = {"group": group, "step": step, "samples": sample_ids, "row": row, "samplers": sorted(samplers)}
            entry |= {"attempt": shown.attempt, "attempt_start": shown.attempt_start, "complete": shown.complete}
            entry["kind"] = kind
            with self._path.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps(entry) + "\n")
                handle.flush()
                os.fsync(handle.fileno())

    def rows(self, group: str, kind: str = VALIDATION) -> dict[int, Any]:
        """The verl rows written for this group and kind so far (the shown attempt's), by step."""
        with self._lock:
            return dict(self._rows.get((group, kind), {}))


def ledger_dir(state_dir: str | Path | None, backend: str) -> Path | None:
    """``<state dir>/<backend>``; a wandb ledger of earlier versions (``<state dir>/ledger.jsonl``) moves there."""
    if state_dir is None:
        return None
    folder = Path(state_dir) / backend
    legacy = Path(state_dir) / "ledger.jsonl"
    if backend == "wandb" and legacy.exists() and not (folder / "ledger.jsonl").exists():
        folder.mkdir(parents=True, exist_ok=True)
        shutil.move(str(legacy), folder / "ledger.jsonl")
        _logger.info("moved the wandb ledger to %s", folder)
    return folder
