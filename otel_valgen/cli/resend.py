"""Replay OTLP-JSON log files (a spool, the embedded sink) to an OTLP/HTTP endpoint.

Each line is converted to an ``ExportLogsServiceRequest`` (OTLP/JSON differs from the
protobuf JSON mapping only in hex-encoded trace and span ids) and POSTed as protobuf, or as
OTLP/JSON with ``http/json``. Where and how come from the library's own resolution
(``otel_valgen._settings``): ``OTEL_EXPORTER_OTLP_LOGS_ENDPOINT`` as it is, else
``OTEL_EXPORTER_OTLP_ENDPOINT`` + ``/v1/logs``; headers, certificate files, compression and
timeout from the ``OTEL_EXPORTER_OTLP_[LOGS_]*`` variables. The status codes OTLP calls
retryable are retried with exponential backoff and jitter, or after the server's
``Retry-After``.

Progress is kept beside each file in ``<file>.resent`` (the byte offset up to which every
line was accepted), so a file that a running process still appends to can be replayed
again later: only the lines added since are sent, none twice.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import requests

from otel_valgen._env import OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_LOGS_ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL
from otel_valgen._otlp_post import (
    PostOutcome,
    Target,
    payload_of,
    post_once,
    record_count,
    request_of,
    retry_after_s,
)
from otel_valgen._otlp_settings import (
    DEFAULT_PROTOCOL,
    resolve_endpoint,
    resolve_protocol,
    resolve_transport,
)
from otel_valgen._spool import complete_lines, progress_path, read_offset, write_offset

__all__ = ["PostOutcome", "ResendResult", "Target", "progress_path", "resend_paths", "resolve_target", "retry_after_s"]

_ATTEMPTS = 5
_FIRST_BACKOFF_S = 0.5
MAX_RETRY_AFTER_S = 60.0
"""A longer ``Retry-After`` stops the replay (progress is kept) instead of blocking the command."""


@dataclass
class ResendResult:
    """What a replay sent, per line: records accepted, lines that failed (with why)."""

    records_sent: int = 0
    lines_sent: int = 0
    failures: list[str] = field(default_factory=list)


def resolve_target(endpoint: str | None = None) -> Target:
    """The replay's target, resolved as the library resolves its own (``endpoint`` is a base URL).

    Raises:
        ValueError: no OTLP/HTTP endpoint is given or set; the message names the fix.

    """
    protocol = resolve_protocol(None)
    if protocol == "grpc":
        if endpoint is None:
            raise ValueError(
                f"resend sends OTLP/HTTP, but {OTEL_EXPORTER_OTLP_PROTOCOL} is grpc: pass --endpoint with the "
                "collector's OTLP/HTTP base URL (port 4318)"
            )
        protocol = DEFAULT_PROTOCOL
    url = resolve_endpoint(endpoint, protocol)
    if url is None:
        raise ValueError(
            f"no endpoint: pass --endpoint or set {OTEL_EXPORTER_OTLP_ENDPOINT} (or {OTEL_EXPORTER_OTLP_LOGS_ENDPOINT})"
        )
    return Target(url, protocol, resolve_transport())


def _post(session: requests.Session, target: Target, payload: bytes) -> str | None:
    """POST with retries; None when accepted, else why not."""
    backoff = _FIRST_BACKOFF_S
    outcome = PostOutcome()
    for attempt in range(1, _ATTEMPTS + 1):
        wait = backoff * (0.5 + random.random() / 2)  # exponential backoff with jitter
        outcome = post_once(session, target, payload)
        if outcome.failure is None or not outcome.retryable:
            return outcome.failure
        asked = outcome.retry_after_s
        if asked is not None and asked > MAX_RETRY_AFTER_S:
            return f"{outcome.failure}, Retry-After {asked:.0f}s: run resend again later"
        wait = asked if asked is not None else wait
        if attempt < _ATTEMPTS:
            time.sleep(wait)
            backoff *= 2
    return f"{outcome.failure} after {_ATTEMPTS} attempts"


def resend_paths(paths: list[Path], target: Target, on_progress: Callable[[str], None]) -> ResendResult:
    """POST the not yet replayed lines of ``paths`` to ``target`` (see ``resolve_target``).

    Stops at a file's first line that is not accepted, so that its progress stays exact;
    a line still being written (no newline yet) waits for the next replay.
    """
    result = ResendResult()
    with requests.Session() as session:
        for path in paths:
            offset = read_offset(path)
            for end, raw in complete_lines(path, offset):
                if raw.strip():
                    try:
                        request = request_of(raw)
                    except (ValueError, TypeError) as error:
                        result.failures.append(f"{path}@{offset}: {error}")
                        break
                    failure = _post(session, target, payload_of(request, target.protocol))
                    if failure:
                        result.failures.append(f"{path}@{offset}: {failure}")
                        break
                    result.lines_sent += 1
                    result.records_sent += record_count(request)
                offset = end
                write_offset(path, offset)
            on_progress(f"{path}: replayed up to byte {offset}")
    return result
