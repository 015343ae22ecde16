"""The spool: records the endpoint did not take, kept on disk as OTLP-JSON lines until sent.

One file per process, ``<OTEL_VALGEN_DIR>/spool/valgen-<host>-<pid>-<instance>.jsonl``, in
the format of the collector's ``file`` exporter (one export request per line). The writing
process holds an exclusive ``flock`` on its file for as long as it lives, so a file nobody
holds is an orphan: its process ended before the spool was sent. How far a file was sent is
kept beside it in ``<file>.resent`` (a byte offset), shared by the background courier and
``otel-valgen resend``, so nothing is sent twice.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from opentelemetry.exporter.otlp.json.file._log_exporter import FileLogExporter
from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk._logs.export import LogRecordExportResult

from otel_valgen import contract

_logger = logging.getLogger("otel_valgen")

PROGRESS_SUFFIX = ".resent"


def progress_path(path: Path) -> Path:
    """Where the send progress of ``path`` is kept."""
    return path.with_name(path.name + PROGRESS_SUFFIX)


def read_offset(path: Path) -> int:
    """The byte offset of ``path`` up to which every line was accepted (0 if none)."""
    try:
        return int(progress_path(path).read_text(encoding="ascii").strip() or 0)
    except (OSError, ValueError):
        return 0


def write_offset(path: Path, offset: int) -> None:
    """Record that every line of ``path`` before ``offset`` was accepted."""
    temporary = progress_path(path).with_suffix(".tmp")
    temporary.write_text(str(offset), encoding="ascii")
    os.replace(temporary, progress_path(path))


def complete_lines(path: Path, offset: int) -> Iterator[tuple[int, bytes]]:
    """``(end offset, line)`` for each complete line of ``path`` from ``offset`` (a line being written waits)."""
    with path.open("rb") as handle:
        handle.seek(offset)
        for raw in handle:
            if not raw.endswith(b"\n"):
                return
            offset += len(raw)
            yield offset, raw


def records_in(line: bytes) -> int:
    """The log records in one spooled line (0 for a line that does not parse)."""
    try:
        data = json.loads(line)
        return sum(
            len(scope.get("logRecords", []))
            for resource in data.get("resourceLogs", [])
            for scope in resource.get("scopeLogs", [])
        )
    except (ValueError, AttributeError, TypeError):
        return 0


def _run_of(line: bytes) -> str | None:
    """The ``valgen.run_id`` of the first record of a spooled line."""
    try:
        data = json.loads(line)
        for resource in data.get("resourceLogs", []):
            for scope in resource.get("scopeLogs", []):
                for record in scope.get("logRecords", []):
                    for attribute in record.get("attributes", []):
                        if attribute.get("key") == contract.RUN_ID:
                            return str(attribute.get("value", {}).get("stringValue"))
    except (ValueError, AttributeError, TypeError):
        return None
    return None


class Spool:
    """The spool file of this process: appended to under a lock, bounded in size."""

    def __init__(self, path: Path, max_bytes: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.max_bytes = max_bytes
        self._handle: IO[str] = path.open("a", encoding="utf-8")
        fcntl.flock(self._handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)  # ours for as long as we live
        self._writer = FileLogExporter(stream=self._handle)
        self.lock = threading.Lock()

    def size(self) -> int:
        """Bytes written so far."""
        return self.path.stat().st_size

    def append(self, batch: Sequence[ReadableLogRecord]) -> bool:
        """Write ``batch`` as one line; False when the spool is full or the write failed.

        The bound is checked before the write: a spool ends at most one batch past it.
        """
        with self.lock:
            if self.size() >= self.max_bytes:
                return False
            return self._writer.export(batch) == LogRecordExportResult.SUCCESS

    def close(self) -> None:
        """Close the file (which releases the lock); a fully sent spool is removed with its progress."""
        with self.lock:
            try:
                sent = read_offset(self.path) >= self.size()
                self._handle.close()
                if sent:
                    self.path.unlink(missing_ok=True)
                    progress_path(self.path).unlink(missing_ok=True)
            except OSError as error:
                _logger.debug("otel_valgen: closing the spool %s: %s", self.path, error)


@dataclass
class Orphan:
    """A spool file left by an ended process of this run, locked by us while we send it."""

    path: Path
    handle: IO[bytes]
    waiting: int  # records not yet sent

    def release(self, sent_all: bool) -> None:
        """Unlock; a fully sent orphan is removed with its progress."""
        try:
            if sent_all:
                self.path.unlink(missing_ok=True)
                progress_path(self.path).unlink(missing_ok=True)
            self.handle.close()
        except OSError as error:
            _logger.debug("otel_valgen: releasing the spool %s: %s", self.path, error)


def claim_orphans(directory: Path, run_id: str, own: Path | None) -> list[Orphan]:
    """Spool files of ``run_id`` that no live process holds and that hold unsent lines, locked for us."""
    orphans: list[Orphan] = []
    try:
        candidates = sorted(directory.glob("*.jsonl"), key=lambda p: p.stat().st_mtime)
    except OSError:
        return orphans
    for path in candidates:
        if own is not None and path == own:
            continue
        try:
            handle = path.open("rb")
        except OSError:
            continue
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # its process is alive, or another process of the run claimed it
            handle.close()
            continue
        lines = [line for _, line in complete_lines(path, read_offset(path))]
        if not lines or _run_of(lines[0]) != run_id:
            handle.close()
            continue
        orphans.append(Orphan(path, handle, sum(records_in(line) for line in lines)))
    return orphans
