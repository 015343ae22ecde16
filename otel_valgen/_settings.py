"""Configuration: one constant per environment variable, resolved in one function.

Precedence is argument > environment > default. A bad value in the environment is a
library-side mistake that must not stop training: it is logged and the default is used.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import sys
import uuid
from dataclasses import dataclass, field, replace
from typing import Final

_logger = logging.getLogger("otel_valgen")

OTEL_VALGEN_RUN_ID: Final = "OTEL_VALGEN_RUN_ID"
"""The training run's id. Unset: the process's wandb run (followed once it exists), else
``WANDB_RUN_ID``, else ``OTEL_VALGEN_DEFAULT_RUN_ID``, else a generated id."""
OTEL_VALGEN_DEFAULT_RUN_ID: Final = "OTEL_VALGEN_DEFAULT_RUN_ID"
"""The run id of a process that has no other: ``runtime_env()`` forwards the driver's here, below
a worker's own wandb run in precedence, so that an actor's later ``wandb.init`` still wins."""
WANDB_RUN_ID: Final = "WANDB_RUN_ID"
"""wandb's own run id variable (``wandb.init`` honours it): the run id when no wandb run exists yet."""
WANDB_PROJECT: Final = "WANDB_PROJECT"
WANDB_ENTITY: Final = "WANDB_ENTITY"
OTEL_VALGEN_COUNT: Final = "OTEL_VALGEN_COUNT"
"""k: how many generations to keep per (run, step). Default 64."""
OTEL_VALGEN_SEED: Final = "OTEL_VALGEN_SEED"
"""The sampling seed. Default 42."""
OTEL_VALGEN_PRESAMPLE: Final = "OTEL_VALGEN_PRESAMPLE"
"""Keep only the local bottom-k per step before sending (true/false). Default true."""
OTEL_VALGEN_DIR: Final = "OTEL_VALGEN_DIR"
"""Folder of the embedded file sink, used when no OTLP endpoint is set. Default ./valgen-data."""
OTEL_VALGEN_SOURCE: Final = "OTEL_VALGEN_SOURCE"
"""Default name of the emitting part (e.g. trainer, rollouter). Default "main"."""
OTEL_VALGEN_MAX_FIELD_BYTES: Final = "OTEL_VALGEN_MAX_FIELD_BYTES"
"""Longest input/output/ground truth sent, in UTF-8 bytes; longer is truncated. Default 65536."""
OTEL_VALGEN_SPOOL: Final = "OTEL_VALGEN_SPOOL"
"""Write records the collector did not accept to ``<OTEL_VALGEN_DIR>/spool`` (true/false). Default true."""
OTEL_VALGEN_FLUSH_TIMEOUT: Final = "OTEL_VALGEN_FLUSH_TIMEOUT"
"""Seconds the end of a step (or a block-less log_generations call) may block the caller while flushing. Default 10."""
OTEL_VALGEN_VERL: Final = "OTEL_VALGEN_VERL"
"""``false`` turns off the automatic verl integration (otel_valgen.integrations.verl). Default true."""
OTEL_VALGEN_LAUNCH_ID: Final = "OTEL_VALGEN_LAUNCH_ID"
"""This launch of the training job; part of every record's attempt.

Default: ``ray-<job id>`` in a Ray job's processes (when the driver forwarded none), else a
random id per process."""
OTEL_VALGEN_PROGRESS_INTERVAL: Final = "OTEL_VALGEN_PROGRESS_INTERVAL"
"""Seconds between progress records of an open block (0 = none). Default 5, at least 0.05."""
OTEL_EXPORTER_OTLP_ENDPOINT: Final = "OTEL_EXPORTER_OTLP_ENDPOINT"
"""Base URL of every signal: OTLP/HTTP logs go to ``<it>/v1/logs``; a gRPC target as it is."""
OTEL_EXPORTER_OTLP_LOGS_ENDPOINT: Final = "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT"
"""Where logs go, used as it is (no path appended); wins over OTEL_EXPORTER_OTLP_ENDPOINT."""
OTEL_EXPORTER_OTLP_PROTOCOL: Final = "OTEL_EXPORTER_OTLP_PROTOCOL"
OTEL_EXPORTER_OTLP_LOGS_PROTOCOL: Final = "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL"
# The transport settings: each signal-specific (LOGS) variable wins over its generic form.
OTEL_EXPORTER_OTLP_HEADERS: Final = "OTEL_EXPORTER_OTLP_HEADERS"
OTEL_EXPORTER_OTLP_LOGS_HEADERS: Final = "OTEL_EXPORTER_OTLP_LOGS_HEADERS"
OTEL_EXPORTER_OTLP_CERTIFICATE: Final = "OTEL_EXPORTER_OTLP_CERTIFICATE"
OTEL_EXPORTER_OTLP_LOGS_CERTIFICATE: Final = "OTEL_EXPORTER_OTLP_LOGS_CERTIFICATE"
OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE: Final = "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE"
OTEL_EXPORTER_OTLP_LOGS_CLIENT_CERTIFICATE: Final = "OTEL_EXPORTER_OTLP_LOGS_CLIENT_CERTIFICATE"
OTEL_EXPORTER_OTLP_CLIENT_KEY: Final = "OTEL_EXPORTER_OTLP_CLIENT_KEY"
OTEL_EXPORTER_OTLP_LOGS_CLIENT_KEY: Final = "OTEL_EXPORTER_OTLP_LOGS_CLIENT_KEY"
OTEL_EXPORTER_OTLP_COMPRESSION: Final = "OTEL_EXPORTER_OTLP_COMPRESSION"
OTEL_EXPORTER_OTLP_LOGS_COMPRESSION: Final = "OTEL_EXPORTER_OTLP_LOGS_COMPRESSION"
OTEL_EXPORTER_OTLP_TIMEOUT: Final = "OTEL_EXPORTER_OTLP_TIMEOUT"
"""Seconds, as every OTel Python exporter reads it (the specification says milliseconds)."""
OTEL_EXPORTER_OTLP_LOGS_TIMEOUT: Final = "OTEL_EXPORTER_OTLP_LOGS_TIMEOUT"

DEFAULT_COUNT: Final = 64
DEFAULT_SEED: Final = 42
DEFAULT_DIR: Final = "./valgen-data"
DEFAULT_SOURCE: Final = "main"
DEFAULT_MAX_FIELD_BYTES: Final = 64 * 1024
DEFAULT_FLUSH_TIMEOUT_S: Final = 10.0
DEFAULT_PROGRESS_INTERVAL_S: Final = 5.0
MIN_PROGRESS_INTERVAL_S: Final = 0.05
DEFAULT_PROTOCOL: Final = "http/protobuf"
PROTOCOLS: Final = ("http/protobuf", "http/json", "grpc")
LOGS_PATH: Final = "v1/logs"
DEFAULT_OTLP_TIMEOUT_S: Final = 10.0
COMPRESSIONS: Final = ("none", "gzip", "deflate")

# How the run id was found. The explicit ones stay; the others follow the process's wandb run.
RUN_ID_EXPLICIT: Final = frozenset({"argument", "environment"})


@dataclass(frozen=True)
class OtlpTransport:
    """How OTLP/HTTP requests are made: one resolution for the SDK's exporter and ``resend``."""

    headers: dict[str, str] = field(default_factory=dict, repr=False)  # may hold credentials
    certificate_file: str | None = None
    client_certificate_file: str | None = None
    client_key_file: str | None = None
    compression: str = "none"
    timeout_s: float = DEFAULT_OTLP_TIMEOUT_S


@dataclass(frozen=True)
class Settings:
    """The resolved configuration of this process's emitter."""

    run_id: str
    count: int = DEFAULT_COUNT
    seed: int = DEFAULT_SEED
    presample: bool = True
    endpoint: str | None = None  # where logs go: the OTLP/HTTP logs URL or the gRPC target; None: files
    protocol: str = DEFAULT_PROTOCOL
    directory: str = DEFAULT_DIR
    source: str = DEFAULT_SOURCE
    max_field_bytes: int = DEFAULT_MAX_FIELD_BYTES
    flush_timeout_s: float = DEFAULT_FLUSH_TIMEOUT_S
    spool: bool = True
    launch_id: str = ""
    progress_interval_s: float = DEFAULT_PROGRESS_INTERVAL_S
    run_id_origin: str = "argument"
    resource_attributes: dict[str, str] = field(default_factory=dict)
    transport: OtlpTransport = field(default_factory=OtlpTransport)

    @property
    def embedded(self) -> bool:
        """Whether records go to local files instead of an OTLP endpoint."""
        return not self.endpoint


def env_int(name: str, default: int, minimum: int | None = None) -> int:
    """An integer environment variable; a bad or too small value is logged and the default used."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        _logger.warning("otel_valgen: %s=%r is not an integer; using %d", name, raw, default)
        return default
    if minimum is not None and value < minimum:
        _logger.warning("otel_valgen: %s=%d is below %d; using %d", name, value, minimum, default)
        return default
    return value


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also rejects NaN
        _logger.warning("otel_valgen: %s=%r is not a number >= 0; using %s", name, raw, default)
        return default
    return value


def env_bool(name: str, default: bool) -> bool:
    """A boolean variable as the OTel specification reads one; unset or empty is ``default``.

    Only ``true`` (any case) is true. ``false`` (any case) is false, and so is every other
    value, with a warning.
    """
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if raw.lower() == "true":
        return True
    if raw.lower() != "false":
        _logger.warning("otel_valgen: %s=%r is neither true nor false; using false", name, raw)
    return False


def _wandb_run() -> object | None:
    """The active wandb run, without importing wandb when the job never did."""
    wandb = sys.modules.get("wandb")
    return getattr(wandb, "run", None) if wandb is not None else None


def _resolve_run_id(run_id: str | None) -> tuple[str, str]:
    """The run id and its origin: argument, environment, wandb, wandb_environment, default or generated."""
    if run_id:
        return str(run_id), "argument"
    from_env = os.environ.get(OTEL_VALGEN_RUN_ID, "").strip()
    if from_env:
        return from_env, "environment"
    wandb_id = getattr(_wandb_run(), "id", None)
    if wandb_id:
        return str(wandb_id), "wandb"
    for name, origin in ((WANDB_RUN_ID, "wandb_environment"), (OTEL_VALGEN_DEFAULT_RUN_ID, "default")):
        value = os.environ.get(name, "").strip()
        if value:
            return value, origin
    return f"valgen-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}", "generated"


def _wandb_resource(origin: str) -> dict[str, str]:
    """``wandb.*`` resource attributes: the active run's, else those of ``WANDB_RUN_ID`` when it named the run."""
    run = _wandb_run()
    if run is not None:
        values = [getattr(run, name, None) for name in ("project", "entity", "id")]
    elif origin == "wandb_environment":
        values = [os.environ.get(name, "").strip() for name in (WANDB_PROJECT, WANDB_ENTITY, WANDB_RUN_ID)]
    else:
        return {}
    keys = ("wandb.project", "wandb.entity", "wandb.run_id")
    return {key: str(value) for key, value in zip(keys, values, strict=True) if value}


def follow_wandb_run(settings: Settings) -> Settings | None:
    """``settings`` moved to this process's active wandb run, or None.

    None when there is no wandb run, it is the one already followed, or the run id was set
    explicitly (argument, ``OTEL_VALGEN_RUN_ID``).
    """
    if settings.run_id_origin in RUN_ID_EXPLICIT:
        return None
    wandb_id = getattr(_wandb_run(), "id", None)
    if not wandb_id or (str(wandb_id) == settings.run_id and settings.run_id_origin == "wandb"):
        return None
    return replace(settings, run_id=str(wandb_id), run_id_origin="wandb", resource_attributes=_wandb_resource("wandb"))


_process_launch_id: str | None = None


def process_launch_id() -> str:
    """Return this process's own launch id, generated once (forked children inherit it)."""
    global _process_launch_id
    if _process_launch_id is None:
        _process_launch_id = uuid.uuid4().hex[:12]
    return _process_launch_id


def _ray_job_launch_id() -> str | None:
    """``ray-<job id>`` in a process of a connected Ray job: shared by its workers, new per driver run."""
    ray = sys.modules.get("ray")
    if ray is None or not getattr(ray, "is_initialized", lambda: False)():
        return None
    try:
        job_id = ray.get_runtime_context().get_job_id()
    except Exception:  # Ray's context API differs across versions; the process id will do
        return None
    return f"ray-{job_id}" if job_id else None


def _resolve_launch_id(launch_id: str | None) -> str:
    if launch_id is not None and str(launch_id).strip():
        return str(launch_id).strip()
    return os.environ.get(OTEL_VALGEN_LAUNCH_ID, "").strip() or _ray_job_launch_id() or process_launch_id()


def _resolve_progress_interval(interval_s: float | None) -> float:
    if interval_s is None or not interval_s >= 0:  # None, negative or NaN
        if interval_s is not None:
            _logger.warning(
                "otel_valgen: progress_interval_s=%r is not >= 0; using the environment/default", interval_s
            )
        interval_s = _env_float(OTEL_VALGEN_PROGRESS_INTERVAL, DEFAULT_PROGRESS_INTERVAL_S)
    if math.isinf(interval_s):
        return 0.0  # "never" is off
    if 0 < interval_s < MIN_PROGRESS_INTERVAL_S:
        _logger.warning(
            "otel_valgen: progress interval %ss is below %ss; using %ss",
            interval_s,
            MIN_PROGRESS_INTERVAL_S,
            MIN_PROGRESS_INTERVAL_S,
        )
        return MIN_PROGRESS_INTERVAL_S
    return float(interval_s)


def _env_first(*names: str) -> tuple[str, str]:
    """The first of ``names`` set to a non-empty value, and that value; ("", "") if none is."""
    for name in names:
        value = os.environ.get(name, "").strip()
        if value:
            return name, value
    return "", ""


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
        name, value = _env_first(OTEL_EXPORTER_OTLP_LOGS_ENDPOINT, OTEL_EXPORTER_OTLP_ENDPOINT)
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
        name, raw = _env_first(OTEL_EXPORTER_OTLP_LOGS_PROTOCOL, OTEL_EXPORTER_OTLP_PROTOCOL)
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
    name, raw = _env_first(OTEL_EXPORTER_OTLP_LOGS_TIMEOUT, OTEL_EXPORTER_OTLP_TIMEOUT)
    if not raw:
        return DEFAULT_OTLP_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also rejects NaN
        _logger.warning(
            "otel_valgen: %s=%r is not a number of seconds >= 0; using %s", name, raw, DEFAULT_OTLP_TIMEOUT_S
        )
        return DEFAULT_OTLP_TIMEOUT_S
    return value


def _resolve_compression() -> str:
    name, raw = _env_first(OTEL_EXPORTER_OTLP_LOGS_COMPRESSION, OTEL_EXPORTER_OTLP_COMPRESSION)
    if not raw:
        return "none"
    if raw.lower() not in COMPRESSIONS:
        _logger.warning("otel_valgen: unknown compression %s=%r; sending uncompressed", name, raw)
        return "none"
    return raw.lower()


def resolve_transport() -> OtlpTransport:
    """Headers, TLS files, compression and timeout of OTLP/HTTP requests; LOGS variables win."""
    return OtlpTransport(
        headers=_parse_headers(_env_first(OTEL_EXPORTER_OTLP_LOGS_HEADERS, OTEL_EXPORTER_OTLP_HEADERS)[1]),
        certificate_file=_env_first(OTEL_EXPORTER_OTLP_LOGS_CERTIFICATE, OTEL_EXPORTER_OTLP_CERTIFICATE)[1] or None,
        client_certificate_file=_env_first(
            OTEL_EXPORTER_OTLP_LOGS_CLIENT_CERTIFICATE, OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE
        )[1]
        or None,
        client_key_file=_env_first(OTEL_EXPORTER_OTLP_LOGS_CLIENT_KEY, OTEL_EXPORTER_OTLP_CLIENT_KEY)[1] or None,
        compression=_resolve_compression(),
        timeout_s=_resolve_timeout(),
    )


def resolve_settings(
    *,
    run_id: str | None = None,
    count: int | None = None,
    seed: int | None = None,
    presample: bool | None = None,
    endpoint: str | None = None,
    protocol: str | None = None,
    directory: str | None = None,
    source: str | None = None,
    max_field_bytes: int | None = None,
    flush_timeout_s: float | None = None,
    spool: bool | None = None,
    launch_id: str | None = None,
    progress_interval_s: float | None = None,
) -> Settings:
    """Resolve every setting: argument > environment > default."""
    resolved_run_id, origin = _resolve_run_id(run_id)
    resolved_protocol = resolve_protocol(protocol)
    if count is None or count < 0:
        if count is not None:
            _logger.warning("otel_valgen: count=%r is negative; using the environment/default", count)
        count = env_int(OTEL_VALGEN_COUNT, DEFAULT_COUNT, minimum=0)
    return Settings(
        run_id=resolved_run_id,
        run_id_origin=origin,
        count=count,
        seed=env_int(OTEL_VALGEN_SEED, DEFAULT_SEED) if seed is None else int(seed),
        presample=env_bool(OTEL_VALGEN_PRESAMPLE, True) if presample is None else bool(presample),
        endpoint=resolve_endpoint(endpoint, resolved_protocol),
        protocol=resolved_protocol,
        directory=directory or os.environ.get(OTEL_VALGEN_DIR, "").strip() or DEFAULT_DIR,
        source=source or os.environ.get(OTEL_VALGEN_SOURCE, "").strip() or DEFAULT_SOURCE,
        max_field_bytes=max_field_bytes
        if max_field_bytes is not None and max_field_bytes > 0
        else env_int(OTEL_VALGEN_MAX_FIELD_BYTES, DEFAULT_MAX_FIELD_BYTES, minimum=1),
        flush_timeout_s=flush_timeout_s
        if flush_timeout_s is not None and flush_timeout_s >= 0
        else _env_float(OTEL_VALGEN_FLUSH_TIMEOUT, DEFAULT_FLUSH_TIMEOUT_S),
        spool=env_bool(OTEL_VALGEN_SPOOL, True) if spool is None else bool(spool),
        launch_id=_resolve_launch_id(launch_id),
        progress_interval_s=_resolve_progress_interval(progress_interval_s),
        resource_attributes=_wandb_resource(origin),
        transport=resolve_transport(),
    )
