"""What has been written, per (run, step, attempt), optionally kept on disk.

The ledger makes writes idempotent: a batch the collector retries, a step that closes twice,
or records that arrive again after a restart never add rows. ``claim`` marks an attempt at the
moment it closes (so a duplicate arriving before the write finishes is recognised);
``commit`` records a finished write and appends it to ``ledger.jsonl`` in the state folder.

A step may be validated more than once (``valgen.attempt``: resume, retry). The ledger also
remembers which attempt of each (run, step) is shown, so that the writer applies the shared
rule (``otel_valgen.selection.choose_attempt``): a later attempt replaces the shown one only
when the rule picks it. The verl layout's rows are kept per step (the shown attempt's), so a
restarted service can rebuild the wide table it appends to. Lines written by older versions
(no attempt) read as attempt "", complete.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from otel_valgen.selection import attempt_rank

__all__ = ["Ledger", "ShownAttempt"]

_logger = logging.getLogger("otel_valgen.wandb_exporter")

AttemptKey = tuple[str, int, str]


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
    """The set of written attempts and samples, per group (``valgen.run_id``)."""

    def __init__(self, state_dir: str | Path | None = None) -> None:
        self._lock = threading.Lock()
        self._samples: dict[AttemptKey, set[str]] = {}  # claimed or committed
        self._committed: dict[AttemptKey, set[str]] = {}
        self._shown: dict[tuple[str, int], ShownAttempt] = {}
        self._rows: dict[str, dict[int, list[Any]]] = {}
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
                    key = (str(entry["group"]), int(entry["step"]), str(entry.get("attempt", "")))
                    shown = ShownAttempt(key[2], int(entry.get("attempt_start", 0)), bool(entry.get("complete", True)))
                    self._record(key, list(entry.get("samples", [])), entry.get("row"), shown)
                except (ValueError, KeyError, TypeError) as error:
                    _logger.warning("ledger %s line %d unreadable: %s", path, number, error)

    def _record(self, key: AttemptKey, sample_ids: list[str], row: list[Any] | None, shown: ShownAttempt) -> None:
        self._samples.setdefault(key, set()).update(sample_ids)
        self._committed.setdefault(key, set()).update(sample_ids)
        current = self._shown.get((key[0], key[1]))
        if current is not None and current.attempt == shown.attempt:
            shown = max(current, shown, key=ShownAttempt.rank)  # e.g. late additions know less
        elif current is not None and shown.rank() <= current.rank():
            return  # the shown attempt stays
        self._shown[(key[0], key[1])] = shown
        if row is not None:
            self._rows.setdefault(key[0], {})[key[1]] = row

    def has_step(self, group: str, step: int, attempt: str = "") -> bool:
        """Whether this attempt of (group, step) was written or is being written."""
        with self._lock:
            return (group, step, attempt) in self._samples

    def has_sample(self, group: str, step: int, sample_id: str, attempt: str = "") -> bool:
        """Whether this sample of the attempt was written or is being written."""
        with self._lock:
            return sample_id in self._samples.get((group, step, attempt), ())

    def is_committed(self, group: str, step: int, attempt: str = "") -> bool:
        """Whether a write of this attempt of (group, step) has finished."""
        with self._lock:
            return (group, step, attempt) in self._committed

    def committed_samples(self, group: str, step: int, attempt: str = "") -> set[str]:
        """Return the samples of the attempt whose write has finished."""
        with self._lock:
            return set(self._committed.get((group, step, attempt), ()))

    def shown(self, group: str, step: int) -> ShownAttempt | None:
        """The attempt of (group, step) written as the step's data, if any."""
        with self._lock:
            return self._shown.get((group, step))

    def claim(self, group: str, step: int, sample_ids: list[str], attempt: str = "") -> None:
        """Mark a closing attempt's samples as taken (in memory)."""
        with self._lock:
            self._samples.setdefault((group, step, attempt), set()).update(sample_ids)

    def commit(
        self,
        group: str,
        step: int,
        sample_ids: list[str],
        row: list[Any] | None = None,
        shown: ShownAttempt | None = None,
    ) -> None:
        """Record a finished write of ``shown`` (default attempt ""); persist it with a state folder."""
        shown = shown or ShownAttempt("")
        with self._lock:
            self._record((group, step, shown.attempt), sample_ids, row, shown)
            if self._path is None:
                return
            entry = {"group": group, "step": step, "samples": sample_ids, "row": row}
            entry |= {"attempt": shown.attempt, "attempt_start": shown.attempt_start, "complete": shown.complete}
            with self._path.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps(entry) + "\n")
                handle.flush()
                os.fsync(handle.fileno())

    def rows(self, group: str) -> list[list[Any]]:
        """Return the verl rows written for this group so far (the shown attempt's per step), by step."""
        with self._lock:
            return [row for _, row in sorted(self._rows.get(group, {}).items())]
