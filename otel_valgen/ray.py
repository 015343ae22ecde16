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
from otel_valgen import _env as env
from otel_valgen._identity import LAUNCH_FALLBACK, RUN_ID_EXPLICIT, tell_children
from otel_valgen._settings import resolve_settings, variable_names

_logger = logging.getLogger("otel_valgen")

SETUP_HOOK: Final = "otel_valgen.ray.setup_worker"

FORWARDED_ENV: Final = variable_names(forwarded_only=True)
"""The variables ``runtime_env()`` passes on when they are set (the settings table's forwarded rows)."""


def worker_env() -> dict[str, str]:
    """The settings of this process as environment variables for Ray workers.

    A run id set explicitly (argument, ``OTEL_VALGEN_RUN_ID``) goes as ``OTEL_VALGEN_RUN_ID``;
    any other (this process's wandb run, ``WANDB_RUN_ID``, generated) as
    ``OTEL_VALGEN_DEFAULT_RUN_ID``, which a worker's own wandb run overrides. The endpoint goes
    as the resolved ``OTEL_EXPORTER_OTLP_LOGS_ENDPOINT``, which workers use as it is. The launch
    id goes when this process knows its launch; a driver that cannot tell (no launcher, not yet
    in a Ray job) sends none, so that every worker, and the driver once connected, uses
    ``ray-<job id>``: new for each run of the driver.
    """
    settings = _api.current_settings() or _api.configure()
    values = {name: os.environ[name] for name in FORWARDED_ENV if os.environ.get(name)}
    if settings is not None:
        explicit = settings.run_id_origin in RUN_ID_EXPLICIT
        values[env.OTEL_VALGEN_RUN_ID if explicit else env.OTEL_VALGEN_DEFAULT_RUN_ID] = settings.run_id
        values[env.OTEL_VALGEN_COUNT] = str(settings.count)
        values[env.OTEL_VALGEN_SEED] = str(settings.seed)
        values[env.OTEL_VALGEN_PRESAMPLE] = "true" if settings.presample else "false"
        values[env.OTEL_VALGEN_DIR] = os.path.abspath(settings.directory)
        if settings.launch_id_origin != LAUNCH_FALLBACK:
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

    A bad value is logged now; the emitter itself starts on the worker's first record. The
    launch id is put into the worker's environment now, for processes it starts before that.
    verl's trainers are hooked when (if ever) this worker imports them.
    """
    try:
        from otel_valgen.integrations import verl

        settings = resolve_settings()
        tell_children(settings.launch_id, settings.launch_id_origin)
        verl.install()
    except Exception:  # a setup hook that raises would fail the worker
        _logger.exception("otel_valgen: worker setup failed; records will use defaults")
