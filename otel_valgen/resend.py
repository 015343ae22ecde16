"""Replay OTLP-JSON log files (a spool, the embedded sink) to an OTLP/HTTP endpoint.

Each line is converted to an ``ExportLogsServiceRequest`` protobuf (OTLP/JSON differs from
the protobuf JSON mapping only in hex-encoded trace and span ids) and POSTed to
``<endpoint>/v1/logs``, with retries on the status codes OTLP calls retryable.

Progress is kept beside each file in ``<file>.resent`` (the byte offset up to which every
line was accepted), so a file that a running process still appends to can be replayed
again later: only the lines added since are sent, none twice.
"""

from __future__ import annotations

import json
import os
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import requests

from otel_valgen.otlp_json import from_otlp_json

__all__ = ["ResendResult", "resend_paths"]

_RETRYABLE = {429, 502, 503, 504}
_ATTEMPTS = 5


@dataclass
class ResendResult:
    """What a replay sent, per line: records accepted, lines that failed (with why)."""

    records_sent: int = 0
    lines_sent: int = 0
    failures: list[str] = field(default_factory=list)


def _headers_from_env() -> dict[str, str]:
    raw = os.environ.get("OTEL_EXPORTER_OTLP_LOGS_HEADERS") or os.environ.get("OTEL_EXPORTER_OTLP_HEADERS", "")
    headers = {}
    for item in raw.split(","):
        name, _, value = item.partition("=")
        if name.strip() and value:
            headers[urllib.parse.unquote(name.strip())] = urllib.parse.unquote(value.strip())
    return headers


def _post(session: requests.Session, url: str, body: bytes, headers: dict[str, str]) -> str | None:
    delay = 0.5
    for _ in range(_ATTEMPTS):
        try:
            response = session.post(url, data=body, headers=headers, timeout=10)
        except requests.RequestException as error:
            outcome = f"{type(error).__name__}"
        else:
            if response.status_code == 200:
                return None
            if response.status_code not in _RETRYABLE:
                return f"HTTP {response.status_code}"
            outcome = f"HTTP {response.status_code}"
        time.sleep(delay)
        delay *= 2
    return f"{outcome} after {_ATTEMPTS} attempts"


def progress_path(path: Path) -> Path:
    """Where the replay progress of ``path`` is kept."""
    return path.with_name(path.name + ".resent")


def _read_offset(path: Path) -> int:
    try:
        return int(progress_path(path).read_text(encoding="ascii").strip() or 0)
    except (OSError, ValueError):
        return 0


def _write_offset(path: Path, offset: int) -> None:
    temporary = progress_path(path).with_suffix(".tmp")
    temporary.write_text(str(offset), encoding="ascii")
    os.replace(temporary, progress_path(path))


def resend_paths(paths: list[Path], endpoint: str, on_progress: Callable[[str], None]) -> ResendResult:
    """POST the not yet replayed lines of ``paths`` to ``endpoint`` (``/v1/logs`` is appended).

    Stops at a file's first line that is not accepted, so that its progress stays exact;
    a line still being written (no newline yet) waits for the next replay.
    """
    url = endpoint if endpoint.rstrip("/").endswith("/v1/logs") else endpoint.rstrip("/") + "/v1/logs"
    headers = {"Content-Type": "application/x-protobuf", **_headers_from_env()}
    result = ResendResult()
    with requests.Session() as session:
        for path in paths:
            offset = _read_offset(path)
            with path.open("rb") as handle:
                handle.seek(offset)
                for raw in handle:
                    if not raw.endswith(b"\n"):
                        break
                    where = f"{path}@{offset}"
                    if raw.strip():
                        try:
                            request = from_otlp_json(json.loads(raw.decode("utf-8", "replace")))
                        except (ValueError, TypeError) as error:
                            result.failures.append(f"{where}: {error}")
                            break
                        failure = _post(session, url, request.SerializeToString(), headers)
                        if failure:
                            result.failures.append(f"{where}: {failure}")
                            break
                        result.lines_sent += 1
                        result.records_sent += sum(
                            len(scope.log_records) for rl in request.resource_logs for scope in rl.scope_logs
                        )
                    offset += len(raw)
                    _write_offset(path, offset)
            on_progress(f"{path}: replayed up to byte {offset}")
    return result
