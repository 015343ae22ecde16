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
from collections.abc import Callable
from typing import Any, Final

from otel_valgen import _api
from otel_valgen import _env as env
from otel_valgen._identity import LAUNCH_UNNAMED, RUN_ID_EXPLICIT, tell_children
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
        values[env.OTEL_VALGEN_ROLLOUT_COUNT] = str(settings.rollout_count)
        if settings.rollout_rate is not None:
            values[env.OTEL_VALGEN_ROLLOUT_RATE] = repr(settings.rollout_rate)
        values[env.OTEL_VALGEN_SAMPLE_BY] = settings.sample_by
        values[env.OTEL_VALGEN_EXTREMES] = str(settings.extremes)
        values[env.OTEL_VALGEN_MISMATCHED] = str(settings.mismatched)
        values[env.OTEL_VALGEN_SEED] = str(settings.seed)
        values[env.OTEL_VALGEN_PRESAMPLE] = "true" if settings.presample else "false"
        values[env.OTEL_VALGEN_DIR] = os.path.abspath(settings.directory)
        if settings.launch_id_origin not in LAUNCH_UNNAMED:
            values[env.OTEL_VALGEN_LAUNCH_ID] = settings.launch_id
        values[env.OTEL_VALGEN_PROGRESS_INTERVAL] = str(settings.progress_interval_s)
        if settings.endpoint:
            values[env.OTEL_EXPORTER_OTLP_LOGS_ENDPOINT] = settings.endpoint
            values[env.OTEL_EXPORTER_OTLP_LOGS_PROTOCOL] = settings.protocol
    return values


def runtime_env(base: dict[str, Any] | None = None) -> dict[str, Any]:
    """``base`` (a Ray runtime env) plus the setup hook and the forwarded variables.

    A ``worker_process_setup_hook`` that ``base`` already has is chained, never dropped: every
    worker runs it first, then otel-valgen's (``setup_worker``). A module path (also one that a
    ``ray job submit --runtime-env-json`` passed down to this driver) travels in
    ``OTEL_VALGEN_CHAINED_SETUP_HOOK``; a function is wrapped in one that calls both.
    """
    merged: dict[str, Any] = dict(base or {})
    env_vars = {**worker_env(), **dict(merged.get("env_vars") or {})}
    hook = merged.get("worker_process_setup_hook")
    # Ray puts a job's hook in this variable for its driver too (job submission); it must agree
    # with the hook field, or Ray refuses the runtime env.
    inherited = env_vars.pop(_RAY_SETUP_HOOK_VARIABLE, None)
    chained = inherited if inherited not in (None, SETUP_HOOK) else hook
    if callable(chained):
        merged["worker_process_setup_hook"] = _after(chained)
    else:
        if isinstance(chained, str) and chained and chained != SETUP_HOOK:
            env_vars[env.OTEL_VALGEN_CHAINED_SETUP_HOOK] = chained
            _logger.info("otel_valgen: chaining the job's worker_process_setup_hook %r before otel-valgen's", chained)
        merged["worker_process_setup_hook"] = SETUP_HOOK
        if inherited is not None:
            env_vars[_RAY_SETUP_HOOK_VARIABLE] = SETUP_HOOK
    merged["env_vars"] = env_vars
    return merged


_RAY_SETUP_HOOK_VARIABLE: Final = "__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR"
"""Where Ray keeps a job's setup hook for its workers (``ray_constants.WORKER_PROCESS_SETUP_HOOK_ENV_VAR``)."""


def _after(job_hook: Callable[[], object]) -> Callable[[], None]:
    """A setup function that runs the job's own ``job_hook``, then otel-valgen's ``setup_worker``."""

    def otel_valgen_setup_worker() -> None:
        job_hook()  # its failure fails the worker, as it would without otel-valgen
        setup_worker()

    return otel_valgen_setup_worker


def _run_chained_hook() -> None:
    """Run the job's own setup hook that ``runtime_env`` chained (``OTEL_VALGEN_CHAINED_SETUP_HOOK``).

    Its failure is raised, as Ray would fail the worker without otel-valgen.
    """
    chained = os.environ.get(env.OTEL_VALGEN_CHAINED_SETUP_HOOK, "").strip()
    if not chained or chained == SETUP_HOOK:
        return
    from ray._private.runtime_env.setup_hook import load_and_execute_setup_hook

    error = load_and_execute_setup_hook(chained)  # a module path or Ray's key of an uploaded function
    if error:
        raise RuntimeError(error)


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
        return runtime_env(_with_uv_environment(job_runtime_env))
    except Exception:  # a hook that raises would fail ray.init
        _logger.exception("otel_valgen: runtime env hook failed; the job runs without otel-valgen's settings")
        return dict(job_runtime_env or {})


def _with_uv_environment(job_runtime_env: dict[str, Any] | None) -> dict[str, Any] | None:
    """The job's runtime env plus what Ray's own ``uv run`` hook adds, when the driver runs under ``uv run``.

    Ray calls that hook instead of ``RAY_RUNTIME_ENV_HOOK`` under ``uv run`` unless
    ``RAY_ENABLE_UV_RUN_RUNTIME_ENV=0``; with that set, this hook runs and calls Ray's, as Ray's
    documentation of the flag asks, so the workers still run in the driver's uv environment.
    """
    from ray._private.runtime_env.uv_runtime_env_hook import _get_uv_run_cmdline, hook

    if _get_uv_run_cmdline() is None:
        return job_runtime_env
    _logger.info("otel_valgen: the driver runs under `uv run`; Ray's uv runtime env comes first")
    return hook(job_runtime_env)  # type: ignore[no-any-return]


def setup_worker() -> None:
    """Ray's worker setup hook: run the job's own hook, check the forwarded settings, hook the integrations.

    A bad value is logged now; the emitter itself starts on the worker's first record. The
    launch id is put into the worker's environment now, for processes it starts before that.
    verl's trainers are hooked when (if ever) this worker imports them.
    """
    _run_chained_hook()
    try:
        from otel_valgen.integrations import verl

        settings = resolve_settings()
        tell_children(settings.launch_id, settings.launch_id_origin)
        verl.install()
    except Exception:  # a setup hook that raises would fail the worker
        _logger.exception("otel_valgen: worker setup failed; records will use defaults")
