"""Which run and which launch a process's records belong to, from wandb, Ray and the environment."""

from __future__ import annotations

import os
import socket
import sys
import uuid
from typing import Final

from otel_valgen._env import (
    CLEARML_TASK_ID,
    MLFLOW_EXPERIMENT_NAME,
    MLFLOW_RUN_ID,
    OTEL_VALGEN_DEFAULT_RUN_ID,
    OTEL_VALGEN_LAUNCH_ID,
    OTEL_VALGEN_RUN_ID,
    TENSORBOARD_DIR,
    WANDB_ENTITY,
    WANDB_PROJECT,
    WANDB_RUN_ID,
)

# How the run id was found. The explicit ones stay; the others follow the process's wandb run.
RUN_ID_EXPLICIT: Final = frozenset({"argument", "environment"})


def wandb_run() -> object | None:
    """The active wandb run, without importing wandb when the job never did."""
    wandb = sys.modules.get("wandb")
    return getattr(wandb, "run", None) if wandb is not None else None


def resolve_run_id(run_id: str | None) -> tuple[str, str]:
    """The run id and its origin: argument, environment, wandb, wandb_environment, default or generated."""
    if run_id:
        return str(run_id), "argument"
    from_env = os.environ.get(OTEL_VALGEN_RUN_ID, "").strip()
    if from_env:
        return from_env, "environment"
    wandb_id = getattr(wandb_run(), "id", None)
    if wandb_id:
        return str(wandb_id), "wandb"
    for name, origin in ((WANDB_RUN_ID, "wandb_environment"), (OTEL_VALGEN_DEFAULT_RUN_ID, "default")):
        value = os.environ.get(name, "").strip()
        if value:
            return value, origin
    return f"valgen-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}", "generated"


def wandb_resource(origin: str) -> dict[str, str]:
    """``wandb.*`` resource attributes: the active run's, else those of ``WANDB_RUN_ID`` when it named the run."""
    run = wandb_run()
    if run is not None:
        values = [getattr(run, name, None) for name in ("project", "entity", "id")]
    elif origin == "wandb_environment":
        values = [os.environ.get(name, "").strip() for name in (WANDB_PROJECT, WANDB_ENTITY, WANDB_RUN_ID)]
    else:
        return {}
    keys = ("wandb.project", "wandb.entity", "wandb.run_id")
    return {key: str(value) for key, value in zip(keys, values, strict=True) if value}


def mlflow_resource() -> dict[str, str]:
    """``mlflow.*`` resource attributes: the active MLflow run's, else ``MLFLOW_RUN_ID``'s (never imports mlflow)."""
    out: dict[str, str] = {}
    mlflow = sys.modules.get("mlflow")
    run = None
    if mlflow is not None:
        try:
            run = mlflow.active_run()
        except Exception:  # an MLflow too old or half imported: the environment will do
            run = None
    info = getattr(run, "info", None)
    run_id = getattr(info, "run_id", None) or os.environ.get(MLFLOW_RUN_ID, "").strip()
    if run_id:
        out["mlflow.run_id"] = str(run_id)
    experiment_id = getattr(info, "experiment_id", None)
    if experiment_id:
        out["mlflow.experiment_id"] = str(experiment_id)
    experiment_name = os.environ.get(MLFLOW_EXPERIMENT_NAME, "").strip()
    if experiment_name:
        out["mlflow.experiment_name"] = experiment_name
    return out


def tensorboard_resource() -> dict[str, str]:
    """``tensorboard.log_dir``: ``TENSORBOARD_DIR`` as the job set it (the folder verl's logger writes to)."""
    folder = os.environ.get(TENSORBOARD_DIR, "").strip()
    return {"tensorboard.log_dir": folder} if folder else {}


def clearml_resource() -> dict[str, str]:
    """``clearml.task_id``: the current ClearML task's (verl's ClearML logger makes it), else ``CLEARML_TASK_ID``."""
    clearml = sys.modules.get("clearml")
    task = None
    if clearml is not None:
        try:
            task = clearml.Task.current_task()
        except Exception:  # a ClearML too old or half imported: the environment will do
            task = None
    task_id = getattr(task, "id", None) or os.environ.get(CLEARML_TASK_ID, "").strip()
    return {"clearml.task_id": str(task_id)} if task_id else {}


def trackio_resource() -> dict[str, str]:
    """``trackio.project``, ``trackio.run_name``, ``trackio.run_id``: the job's current Trackio run's."""
    trackio = sys.modules.get("trackio")
    try:
        run = trackio.context_vars.current_run.get() if trackio is not None else None
    except Exception:  # a Trackio without context_vars: no run to name
        run = None
    if run is None:
        return {}
    values = {"trackio.project": run.project, "trackio.run_name": run.name, "trackio.run_id": run.id}
    return {key: str(value) for key, value in values.items() if value}


def tracker_resource(origin: str) -> dict[str, str]:
    """The resource attributes naming the job's run in every tracker it uses (wandb, MLflow, TensorBoard, ...)."""
    found = wandb_resource(origin) | mlflow_resource() | tensorboard_resource()
    return found | clearml_resource() | trackio_resource()


_process_launch_id: str | None = None


def process_launch_id() -> str:
    """Return this process's own launch id, generated once (forked children inherit it)."""
    global _process_launch_id
    if _process_launch_id is None:
        _process_launch_id = uuid.uuid4().hex[:12]
    return _process_launch_id


def ray_job_launch_id() -> str | None:
    """``ray-<job id>`` in a process of a connected Ray job: shared by its workers, new per driver run."""
    ray = sys.modules.get("ray")
    if ray is None or not getattr(ray, "is_initialized", lambda: False)():
        return None
    try:
        job_id = ray.get_runtime_context().get_job_id()
    except Exception:  # Ray's context API differs across versions; the process id will do
        return None
    return f"ray-{job_id}" if job_id else None


def resolve_launch_id(launch_id: str | None) -> str:
    if launch_id is not None and str(launch_id).strip():
        return str(launch_id).strip()
    return os.environ.get(OTEL_VALGEN_LAUNCH_ID, "").strip() or ray_job_launch_id() or process_launch_id()
