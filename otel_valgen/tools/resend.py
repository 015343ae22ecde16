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

import email.utils
import gzip
import json
import random
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import requests
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

from otel_valgen._env import OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_LOGS_ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL
from otel_valgen._otlp_settings import (
    DEFAULT_PROTOCOL,
    OtlpTransport,
    resolve_endpoint,
    resolve_protocol,
    resolve_transport,
)
from otel_valgen._spool import complete_lines, progress_path, read_offset, write_offset
from otel_valgen.otlp_json import from_otlp_json, to_otlp_json

__all__ = ["PostOutcome", "ResendResult", "Target", "post_once", "progress_path", "resend_paths", "resolve_target"]

_RETRYABLE = {429, 502, 503, 504}
_ATTEMPTS = 5
_FIRST_BACKOFF_S = 0.5
MAX_RETRY_AFTER_S = 60.0
"""A longer ``Retry-After`` stops the replay (progress is kept) instead of blocking the command."""
_CONTENT_TYPES = {"http/protobuf": "application/x-protobuf", "http/json": "application/json"}


@dataclass
class ResendResult:
    """What a replay sent, per line: records accepted, lines that failed (with why)."""

    records_sent: int = 0
    lines_sent: int = 0
    failures: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Target:
    """Where and how a replay sends: the logs URL, ``http/protobuf`` or ``http/json``, the transport."""

    url: str
    protocol: str
    transport: OtlpTransport


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


def retry_after_s(value: str | None) -> float | None:
    """Seconds to wait from a ``Retry-After`` value (delay seconds or an HTTP date); None if absent or bad."""
    raw = (value or "").strip()
    if raw.isdigit():
        return float(raw)
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _body(request_bytes: bytes, transport: OtlpTransport) -> tuple[bytes, dict[str, str]]:
    if transport.compression == "gzip":
        return gzip.compress(request_bytes), {"Content-Encoding": "gzip"}
    if transport.compression == "deflate":
        return zlib.compress(request_bytes), {"Content-Encoding": "deflate"}
    return request_bytes, {}


@dataclass(frozen=True)
class PostOutcome:
    """One POST's answer: accepted, or why not, whether waiting can help, and how long the server asked."""

    failure: str | None = None
    retryable: bool = False
    retry_after_s: float | None = None
    status: int | None = None


def post_once(session: requests.Session, target: Target, payload: bytes) -> PostOutcome:
    """POST one request once (no retries)."""
    transport = target.transport
    body, encoding = _body(payload, transport)
    headers = {"Content-Type": _CONTENT_TYPES[target.protocol], **encoding, **transport.headers}
    client_cert = transport.client_certificate_file
    cert = (client_cert, transport.client_key_file) if client_cert and transport.client_key_file else client_cert
    try:
        response = session.post(
            target.url,
            data=body,
            headers=headers,
            timeout=transport.timeout_s or None,  # 0: no limit
            verify=transport.certificate_file or True,
            cert=cert,
        )
    except requests.exceptions.SSLError as error:  # a certificate does not become trusted by waiting
        return PostOutcome(f"SSLError: {error}")
    except requests.RequestException as error:
        return PostOutcome(type(error).__name__, retryable=True)
    if response.status_code == 200:
        return PostOutcome()
    asked = retry_after_s(response.headers.get("Retry-After"))
    status = response.status_code
    return PostOutcome(f"HTTP {status}", status in _RETRYABLE, asked, status)


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


def request_of(raw: bytes) -> ExportLogsServiceRequest:
    """The export request of one OTLP-JSON line. Raises ValueError or TypeError when it does not parse."""
    return from_otlp_json(json.loads(raw.decode("utf-8", "replace")))


def payload_of(request: ExportLogsServiceRequest, protocol: str) -> bytes:
    """The request's body for ``http/protobuf`` or ``http/json``."""
    return json.dumps(to_otlp_json(request)).encode() if protocol == "http/json" else request.SerializeToString()


def record_count(request: ExportLogsServiceRequest) -> int:
    """The log records in a request."""
    return sum(len(scope.log_records) for rl in request.resource_logs for scope in rl.scope_logs)


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
