"""One OTLP/HTTP request of spooled records, sent once: the courier's and ``otel-valgen resend``'s.

A spool line (OTLP/JSON, as the collector's ``file`` exporter writes it) becomes an
``ExportLogsServiceRequest``, POSTed as protobuf or as OTLP/JSON with the transport the
library resolved (headers, certificate files, compression, timeout). The answer says whether
waiting can help (the status codes OTLP calls retryable) and how long the server asked.
"""

from __future__ import annotations

import email.utils
import gzip
import json
import zlib
from dataclasses import dataclass
from datetime import UTC, datetime

import requests
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

from otel_valgen._otlp_settings import OtlpTransport
from otel_valgen.otlp_json import from_otlp_json, to_otlp_json

_RETRYABLE = {429, 502, 503, 504}
_CONTENT_TYPES = {"http/protobuf": "application/x-protobuf", "http/json": "application/json"}


@dataclass(frozen=True)
class Target:
    """Where and how a replay sends: the logs URL, ``http/protobuf`` or ``http/json``, the transport."""

    url: str
    protocol: str
    transport: OtlpTransport


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


def request_of(raw: bytes) -> ExportLogsServiceRequest:
    """The export request of one OTLP-JSON line. Raises ValueError or TypeError when it does not parse."""
    return from_otlp_json(json.loads(raw.decode("utf-8", "replace")))


def payload_of(request: ExportLogsServiceRequest, protocol: str) -> bytes:
    """The request's body for ``http/protobuf`` or ``http/json``."""
    return json.dumps(to_otlp_json(request)).encode() if protocol == "http/json" else request.SerializeToString()


def record_count(request: ExportLogsServiceRequest) -> int:
    """The log records in a request."""
    return sum(len(scope.log_records) for rl in request.resource_logs for scope in rl.scope_logs)
