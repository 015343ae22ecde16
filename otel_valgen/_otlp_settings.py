"""Where and how OTLP requests go: the OTel exporter variables, read once for the SDK's exporter and ``resend``."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Final

from otel_valgen._env import (
    OTEL_EXPORTER_OTLP_CERTIFICATE,
    OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE,
    OTEL_EXPORTER_OTLP_CLIENT_KEY,
    OTEL_EXPORTER_OTLP_COMPRESSION,
    OTEL_EXPORTER_OTLP_ENDPOINT,
    OTEL_EXPORTER_OTLP_HEADERS,
    OTEL_EXPORTER_OTLP_LOGS_CERTIFICATE,
    OTEL_EXPORTER_OTLP_LOGS_CLIENT_CERTIFICATE,
    OTEL_EXPORTER_OTLP_LOGS_CLIENT_KEY,
    OTEL_EXPORTER_OTLP_LOGS_COMPRESSION,
    OTEL_EXPORTER_OTLP_LOGS_ENDPOINT,
    OTEL_EXPORTER_OTLP_LOGS_HEADERS,
    OTEL_EXPORTER_OTLP_LOGS_PROTOCOL,
    OTEL_EXPORTER_OTLP_LOGS_TIMEOUT,
    OTEL_EXPORTER_OTLP_PROTOCOL,
    OTEL_EXPORTER_OTLP_TIMEOUT,
    env_first,
    env_float,
)

_logger = logging.getLogger("otel_valgen")

DEFAULT_PROTOCOL: Final = "http/protobuf"
PROTOCOLS: Final = ("http/protobuf", "http/json", "grpc")
LOGS_PATH: Final = "v1/logs"
DEFAULT_OTLP_TIMEOUT_S: Final = 10.0
COMPRESSIONS: Final = ("none", "gzip", "deflate")


@dataclass(frozen=True)
class OtlpTransport:
    """How OTLP/HTTP requests are made: one resolution for the SDK's exporter and ``resend``."""

    headers: dict[str, str] = field(default_factory=dict, repr=False)  # may hold credentials
    certificate_file: str | None = None
    client_certificate_file: str | None = None
    client_key_file: str | None = None
    compression: str = "none"
    timeout_s: float = DEFAULT_OTLP_TIMEOUT_S


def logs_url(base: str) -> str:
    """The OTLP/HTTP logs URL under a base URL (``OTEL_EXPORTER_OTLP_ENDPOINT``): ``<base>/v1/logs``."""
    return base.removesuffix("/") + "/" + LOGS_PATH


def resolve_endpoint(endpoint: str | None, protocol: str) -> str | None:
    """Where logs go, or None (the embedded sink).

    ``endpoint`` (the argument; an empty string means none) and ``OTEL_EXPORTER_OTLP_ENDPOINT``
    are base URLs: OTLP/HTTP appends ``/v1/logs``. ``OTEL_EXPORTER_OTLP_LOGS_ENDPOINT`` wins
    over the generic variable and is used as it is. gRPC uses every form as it is.
    """
    if endpoint is not None:
        name, value = "endpoint", endpoint.strip()
    else:
        name, value = env_first(OTEL_EXPORTER_OTLP_LOGS_ENDPOINT, OTEL_EXPORTER_OTLP_ENDPOINT)
    if not value:
        return None
    if protocol == "grpc" or name == OTEL_EXPORTER_OTLP_LOGS_ENDPOINT:
        return value
    if value.removesuffix("/").endswith("/" + LOGS_PATH):
        _logger.warning(
            "otel_valgen: %s=%s is a base URL and already ends with /%s; records go to %s (set %s to give "
            "the full URL)",
            name,
            value,
            LOGS_PATH,
            logs_url(value),
            OTEL_EXPORTER_OTLP_LOGS_ENDPOINT,
        )
    return logs_url(value)


def resolve_protocol(protocol: str | None) -> str:
    """``grpc``, ``http/protobuf`` or ``http/json``: argument > LOGS variable > generic > default."""
    if protocol:
        name, raw = "protocol", protocol.strip()
    else:
        name, raw = env_first(OTEL_EXPORTER_OTLP_LOGS_PROTOCOL, OTEL_EXPORTER_OTLP_PROTOCOL)
    if not raw:
        return DEFAULT_PROTOCOL
    if raw.lower() not in PROTOCOLS:
        _logger.warning("otel_valgen: unknown OTLP protocol %s=%r; using %s", name, raw, DEFAULT_PROTOCOL)
        return DEFAULT_PROTOCOL
    return raw.lower()


def _parse_headers(raw: str) -> dict[str, str]:
    from opentelemetry.util.re import parse_env_headers  # the SDK's own parser (W3C baggage form)

    return dict(parse_env_headers(raw, liberal=True))


def _resolve_timeout() -> float:
    name, _ = env_first(OTEL_EXPORTER_OTLP_LOGS_TIMEOUT, OTEL_EXPORTER_OTLP_TIMEOUT)
    return env_float(name, DEFAULT_OTLP_TIMEOUT_S) if name else DEFAULT_OTLP_TIMEOUT_S


def _resolve_compression() -> str:
    name, raw = env_first(OTEL_EXPORTER_OTLP_LOGS_COMPRESSION, OTEL_EXPORTER_OTLP_COMPRESSION)
    if not raw:
        return "none"
    if raw.lower() not in COMPRESSIONS:
        _logger.warning("otel_valgen: unknown compression %s=%r; sending uncompressed", name, raw)
        return "none"
    return raw.lower()


def resolve_transport() -> OtlpTransport:
    """Headers, TLS files, compression and timeout of OTLP/HTTP requests; LOGS variables win."""
    return OtlpTransport(
        headers=_parse_headers(env_first(OTEL_EXPORTER_OTLP_LOGS_HEADERS, OTEL_EXPORTER_OTLP_HEADERS)[1]),
        certificate_file=env_first(OTEL_EXPORTER_OTLP_LOGS_CERTIFICATE, OTEL_EXPORTER_OTLP_CERTIFICATE)[1] or None,
        client_certificate_file=env_first(
            OTEL_EXPORTER_OTLP_LOGS_CLIENT_CERTIFICATE, OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE
        )[1]
        or None,
        client_key_file=env_first(OTEL_EXPORTER_OTLP_LOGS_CLIENT_KEY, OTEL_EXPORTER_OTLP_CLIENT_KEY)[1] or None,
        compression=_resolve_compression(),
        timeout_s=_resolve_timeout(),
    )
