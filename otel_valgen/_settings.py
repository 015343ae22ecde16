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
from dataclasses import dataclass, field
from typing import Final

_logger = logging.getLogger("otel_valgen")

OTEL_VALGEN_RUN_ID: Final = "OTEL_VALGEN_RUN_ID"
"""The training run's id; falls back to the active wandb run's id, then a generated id."""
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
OTEL_EXPORTER_OTLP_LOGS_ENDPOINT: Final = "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT"
OTEL_EXPORTER_OTLP_PROTOCOL: Final = "OTEL_EXPORTER_OTLP_PROTOCOL"
OTEL_EXPORTER_OTLP_LOGS_PROTOCOL: Final = "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL"

DEFAULT_COUNT: Final = 64
DEFAULT_SEED: Final = 42
DEFAULT_DIR: Final = "./valgen-data"
DEFAULT_SOURCE: Final = "main"
DEFAULT_MAX_FIELD_BYTES: Final = 64 * 1024
DEFAULT_FLUSH_TIMEOUT_S: Final = 10.0
DEFAULT_PROGRESS_INTERVAL_S: Final = 5.0
MIN_PROGRESS_INTERVAL_S: Final = 0.05
DEFAULT_PROTOCOL: Final = "http/protobuf"
PROTOCOLS: Final = ("http/protobuf", "grpc")


@dataclass(frozen=True)
class Settings:
    """The resolved configuration of this process's emitter."""

    run_id: str
    count: int = DEFAULT_COUNT
    seed: int = DEFAULT_SEED
    presample: bool = True
    endpoint: str | None = None
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


def _env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    _logger.warning("otel_valgen: %s=%r is not a boolean; using %s", name, raw, default)
    return default


def _wandb_run() -> object | None:
    """The active wandb run, without importing wandb when the job never did."""
    wandb = sys.modules.get("wandb")
    return getattr(wandb, "run", None) if wandb is not None else None


def _resolve_run_id(run_id: str | None) -> tuple[str, str]:
    if run_id:
        return str(run_id), "argument"
    from_env = os.environ.get(OTEL_VALGEN_RUN_ID, "").strip()
    if from_env:
        return from_env, "environment"
    run = _wandb_run()
    wandb_id = getattr(run, "id", None)
    if wandb_id:
        return str(wandb_id), "wandb"
    generated = f"valgen-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    return generated, "generated"


def _wandb_resource() -> dict[str, str]:
    run = _wandb_run()
    if run is None:
        return {}
    attributes = {
        "wandb.project": getattr(run, "project", None),
        "wandb.entity": getattr(run, "entity", None),
        "wandb.run_id": getattr(run, "id", None),
    }
    return {key: str(value) for key, value in attributes.items() if value}


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


def _resolve_endpoint(endpoint: str | None) -> str | None:
    if endpoint is not None:
        return endpoint.strip() or None
    for name in (OTEL_EXPORTER_OTLP_LOGS_ENDPOINT, OTEL_EXPORTER_OTLP_ENDPOINT):
        value = os.environ.get(name, "").strip()
        if value:
            return value
    return None


def _resolve_protocol(protocol: str | None) -> str:
    raw = protocol or os.environ.get(OTEL_EXPORTER_OTLP_LOGS_PROTOCOL, "").strip()
    raw = raw or os.environ.get(OTEL_EXPORTER_OTLP_PROTOCOL, "").strip() or DEFAULT_PROTOCOL
    if raw == "http/json":
        _logger.warning("otel_valgen: OTLP protocol http/json is not supported; using http/protobuf")
        return DEFAULT_PROTOCOL
    if raw not in PROTOCOLS:
        _logger.warning("otel_valgen: unknown OTLP protocol %r; using %s", raw, DEFAULT_PROTOCOL)
        return DEFAULT_PROTOCOL
    return raw


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
    if count is None or count < 0:
        if count is not None:
            _logger.warning("otel_valgen: count=%r is negative; using the environment/default", count)
        count = env_int(OTEL_VALGEN_COUNT, DEFAULT_COUNT, minimum=0)
    return Settings(
        run_id=resolved_run_id,
        run_id_origin=origin,
        count=count,
        seed=env_int(OTEL_VALGEN_SEED, DEFAULT_SEED) if seed is None else int(seed),
        presample=_env_bool(OTEL_VALGEN_PRESAMPLE, True) if presample is None else bool(presample),
        endpoint=_resolve_endpoint(endpoint),
        protocol=_resolve_protocol(protocol),
        directory=directory or os.environ.get(OTEL_VALGEN_DIR, "").strip() or DEFAULT_DIR,
        source=source or os.environ.get(OTEL_VALGEN_SOURCE, "").strip() or DEFAULT_SOURCE,
        max_field_bytes=max_field_bytes
        if max_field_bytes is not None and max_field_bytes > 0
        else env_int(OTEL_VALGEN_MAX_FIELD_BYTES, DEFAULT_MAX_FIELD_BYTES, minimum=1),
        flush_timeout_s=flush_timeout_s
        if flush_timeout_s is not None and flush_timeout_s >= 0
        else _env_float(OTEL_VALGEN_FLUSH_TIMEOUT, DEFAULT_FLUSH_TIMEOUT_S),
        spool=_env_bool(OTEL_VALGEN_SPOOL, True) if spool is None else bool(spool),
        launch_id=_resolve_launch_id(launch_id),
        progress_interval_s=_resolve_progress_interval(progress_interval_s),
        resource_attributes=_wandb_resource(),
    )
