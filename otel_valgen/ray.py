"""Ray glue: configure every worker process of a job the same way as the driver.

Use ``runtime_env()`` when calling ``ray.init`` (or merge it into a job's runtime env)::

    ray.init(runtime_env=otel_valgen.ray.runtime_env())

It returns the module-path string of the setup hook (the only form that survives job
submission, where the runtime env travels as JSON) and the environment variables that
carry this process's settings, with the run id and the launch id resolved here so that every
worker groups its records under the same run and the same attempt.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Final

from otel_valgen import _api
from otel_valgen import _settings as env

_logger = logging.getLogger("otel_valgen")

SETUP_HOOK: Final = "otel_valgen.ray.setup_worker"

FORWARDED_ENV: Final = (
    env.OTEL_VALGEN_RUN_ID,
    env.OTEL_VALGEN_DEFAULT_RUN_ID,
    env.WANDB_RUN_ID,
    env.WANDB_PROJECT,
    env.WANDB_ENTITY,
    env.OTEL_VALGEN_COUNT,
    env.OTEL_VALGEN_SEED,
    env.OTEL_VALGEN_PRESAMPLE,
    env.OTEL_VALGEN_DIR,
    env.OTEL_VALGEN_MAX_FIELD_BYTES,
    env.OTEL_VALGEN_FLUSH_TIMEOUT,
    env.OTEL_VALGEN_VERL,
    env.OTEL_VALGEN_LAUNCH_ID,
    env.OTEL_VALGEN_PROGRESS_INTERVAL,
    env.OTEL_EXPORTER_OTLP_ENDPOINT,
    env.OTEL_EXPORTER_OTLP_LOGS_ENDPOINT,
    env.OTEL_EXPORTER_OTLP_PROTOCOL,
    env.OTEL_EXPORTER_OTLP_LOGS_PROTOCOL,
    env.OTEL_EXPORTER_OTLP_HEADERS,
    env.OTEL_EXPORTER_OTLP_LOGS_HEADERS,
    env.OTEL_EXPORTER_OTLP_CERTIFICATE,
    env.OTEL_EXPORTER_OTLP_LOGS_CERTIFICATE,
    env.OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE,
    env.OTEL_EXPORTER_OTLP_LOGS_CLIENT_CERTIFICATE,
    env.OTEL_EXPORTER_OTLP_CLIENT_KEY,
    env.OTEL_EXPORTER_OTLP_LOGS_CLIENT_KEY,
    env.OTEL_EXPORTER_OTLP_COMPRESSION,
    env.OTEL_EXPORTER_OTLP_LOGS_COMPRESSION,
    env.OTEL_EXPORTER_OTLP_TIMEOUT,
    env.OTEL_EXPORTER_OTLP_LOGS_TIMEOUT,
    "OTEL_EXPORTER_OTLP_INSECURE",
    "OTEL_EXPORTER_OTLP_LOGS_INSECURE",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_SERVICE_NAME",
)


def worker_env() -> dict[str, str]:
    """The settings of this process as environment variables for Ray workers.

    A run id set explicitly (argument, ``OTEL_VALGEN_RUN_ID``) goes as ``OTEL_VALGEN_RUN_ID``;
    any other (this process's wandb run, ``WANDB_RUN_ID``, generated) as
    ``OTEL_VALGEN_DEFAULT_RUN_ID``, which a worker's own wandb run overrides. The endpoint goes
    as the resolved ``OTEL_EXPORTER_OTLP_LOGS_ENDPOINT``, which workers use as it is.
    """
    settings = _api.current_settings() or _api.configure()
    values = {name: os.environ[name] for name in FORWARDED_ENV if os.environ.get(name)}
    if settings is not None:
        explicit = settings.run_id_origin in env.RUN_ID_EXPLICIT
        values[env.OTEL_VALGEN_RUN_ID if explicit else env.OTEL_VALGEN_DEFAULT_RUN_ID] = settings.run_id
        values[env.OTEL_VALGEN_COUNT] = str(settings.count)
        values[env.OTEL_VALGEN_SEED] = str(settings.seed)
        values[env.OTEL_VALGEN_PRESAMPLE] = "true" if settings.presample else "false"
        values[env.OTEL_VALGEN_DIR] = os.path.abspath(settings.directory)
        values[env.OTEL_VALGEN_LAUNCH_ID] = settings.launch_id
        values[env.OTEL_VALGEN_PROGRESS_INTERVAL] = str(settings.progress_interval_s)
        if settings.endpoint:
            values[env.OTEL_EXPORTER_OTLP_LOGS_ENDPOINT] = settings.endpoint
            values[env.OTEL_EXPORTER_OTLP_LOGS_PROTOCOL] = settings.protocol
    return values


def runtime_env(base: dict[str, Any] | None = None) -> dict[str, Any]:
    """``base`` (a Ray runtime env) plus the setup hook and the forwarded variables."""
    merged: dict[str, Any] = dict(base or {})
    merged["env_vars"] = {**worker_env(), **dict(merged.get("env_vars") or {})}
    hook = merged.get("worker_process_setup_hook")
    if hook and hook != SETUP_HOOK:
        _logger.warning(
            "otel_valgen: runtime_env already has worker_process_setup_hook=%r; call "
            "otel_valgen.ray.setup_worker() from it",
            hook,
        )
    else:
        merged["worker_process_setup_hook"] = SETUP_HOOK
    return merged


def runtime_env_hook(job_runtime_env: dict[str, Any] | None) -> dict[str, Any]:
    """A ``RAY_RUNTIME_ENV_HOOK``: every ``ray.init`` of the driver gets ``runtime_env(...)``.

    ``RAY_RUNTIME_ENV_HOOK=otel_valgen.ray.runtime_env_hook`` in the driver's environment turns
    otel-valgen on for a whole Ray job without changing its code (verl: docs/verl.md). Ray
    calls it with the job's runtime env (or None) and uses what it returns; on any failure the
    job's own runtime env is returned unchanged.
    """
    try:
        from otel_valgen.integrations import verl

        verl.install()
        return runtime_env(job_runtime_env)
    except Exception:  # a hook that raises would fail ray.init
        _logger.exception("otel_valgen: runtime env hook failed; the job runs without otel-valgen's settings")
        return dict(job_runtime_env or {})


def setup_worker() -> None:
    """Ray's worker setup hook: check the forwarded settings and hook the integrations.

    A bad value is logged now; the emitter itself starts on the worker's first record. verl's
    trainers are hooked when (if ever) this worker imports them.
    """
    try:
        from otel_valgen.integrations import verl

        env.resolve_settings()
        verl.install()
    except Exception:  # a setup hook that raises would fail the worker
        _logger.exception("otel_valgen: worker setup failed; records will use defaults")
