"""What has been written: (run, step) and (run, step, sample_id), optionally kept on disk.

The ledger makes writes idempotent: a batch the collector retries, a step that closes twice,
or records that arrive again after a restart never add rows. ``claim`` marks a step at the
moment it closes (so a duplicate arriving before the write finishes is recognised);
``commit`` records a finished write and appends it to ``ledger.jsonl`` in the state folder.
The verl layout's accumulated rows are kept here too, so a restarted service can rebuild the
wide table it appends to.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

__all__ = ["Ledger"]

_logger = logging.getLogger("otel_valgen.wandb_exporter")


class Ledger:
    """The set of written steps and samples, per group (``valgen.run_id``)."""

    def __init__(self, state_dir: str | Path | None = None) -> None:
        self._lock = threading.Lock()
        self._samples: dict[tuple[str, int], set[str]] = {}  # claimed or committed
        self._committed: dict[tuple[str, int], set[str]] = {}
        self._rows: dict[str, list[list[Any]]] = {}
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
                    key = (str(entry["group"]), int(entry["step"]))
                    self._samples.setdefault(key, set()).update(entry.get("samples", []))
                    self._committed.setdefault(key, set()).update(entry.get("samples", []))
                    if entry.get("row") is not None:
                        self._rows.setdefault(key[0], []).append(entry["row"])
                except (ValueError, KeyError, TypeError) as error:
                    _logger.warning("ledger %s line %d unreadable: %s", path, number, error)

    def has_step(self, group: str, step: int) -> bool:
        """Whether (group, step) was written or is being written."""
        with self._lock:
            return (group, step) in self._samples

    def has_sample(self, group: str, step: int, sample_id: str) -> bool:
        """Whether this sample of (group, step) was written or is being written."""
        with self._lock:
            return sample_id in self._samples.get((group, step), ())

    def is_committed(self, group: str, step: int) -> bool:
        """Whether a write of (group, step) has finished."""
        with self._lock:
            return (group, step) in self._committed

    def committed_samples(self, group: str, step: int) -> set[str]:
        """Return the samples of (group, step) whose write has finished."""
        with self._lock:
            return set(self._committed.get((group, step), ()))

    def claim(self, group: str, step: int, sample_ids: list[str]) -> None:
        """Mark a closing step's samples as taken (in memory)."""
        with self._lock:
            self._samples.setdefault((group, step), set()).update(sample_ids)

    def commit(self, group: str, step: int, sample_ids: list[str], row: list[Any] | None = None) -> None:
        """Record a finished write; persist it when the ledger has a state folder."""
        with self._lock:
            self._samples.setdefault((group, step), set()).update(sample_ids)
            self._committed.setdefault((group, step), set()).update(sample_ids)
            if row is not None:
                self._rows.setdefault(group, []).append(row)
            if self._path is None:
                return
            line = json.dumps({"group": group, "step": step, "samples": sample_ids, "row": row})
            with self._path.open("a", encoding="utf-8") as handle:
                handle.write(line + "\n")
                handle.flush()
                os.fsync(handle.fileno())

    def rows(self, group: str) -> list[list[Any]]:
        """Return the verl rows written for this group so far, ordered by step."""
        with self._lock:
            return sorted(self._rows.get(group, []), key=lambda row: row[0])
