"""Which run and which launch a process's records belong to, from wandb, the launchers and the environment."""

from __future__ import annotations

import logging
import os
import socket
import sys
import uuid
from typing import Final

from otel_valgen import _launch_group
from otel_valgen._env import (
    CLEARML_TASK_ID,
    MASTER_ADDR,
    MASTER_PORT,
    MLFLOW_EXPERIMENT_NAME,
    MLFLOW_RUN_ID,
    OMPI_MCA_ESS_BASE_JOBID,
    OTEL_VALGEN_DEFAULT_RUN_ID,
    OTEL_VALGEN_LAUNCH_ID,
    OTEL_VALGEN_RUN_ID,
    PMIX_NAMESPACE,
    SLURM_JOB_ID,
    SLURM_JOB_ID_HET_GROUP_0,
    SLURM_RESTART_COUNT,
    TENSORBOARD_DIR,
    TORCHELASTIC_RESTART_COUNT,
    TORCHELASTIC_RUN_ID,
    WANDB_ENTITY,
    WANDB_PROJECT,
    WANDB_RUN_ID,
    env_first,
    env_int,
)

_logger = logging.getLogger("otel_valgen")

# How the run id was found. The explicit ones stay; the others follow the process's wandb run.
RUN_ID_EXPLICIT: Final = frozenset({"argument", "environment"})

TRAINER_ORIGIN: Final = "trainer"
"""The origin of a run id taken from the job's trainer (``adopt_trainer_run``)."""

# The trainer's run, as another process of its job learned it: (run id or None, tracker resource attributes).
_trainer_run: tuple[str | None, dict[str, str]] | None = None


def adopt_trainer_run(run_id: str | None, resource: dict[str, str]) -> None:
    """Write this process's records into the runs of the job's trainer, where it names none of its own.

    In verl's fully-async mode the rollouter validates, but only the trainer has tracker runs;
    the trainer publishes them with its step (``integrations._trainer_step``). The run id comes
    after an explicit one and this process's own wandb run; the trainer's tracker resource
    attributes (wandb, MLflow, ClearML, Trackio runs) under this process's own, unless it has
    a wandb run of its own.
    """
    global _trainer_run
    _trainer_run = (str(run_id) if run_id else None, {str(key): str(value) for key, value in resource.items()})


def trainer_run_id() -> str | None:
    """The run id of the adopted trainer run, or None."""
    return _trainer_run[0] if _trainer_run is not None else None


def forget_trainer_run_for_testing() -> None:
    global _trainer_run
    _trainer_run = None


def wandb_run() -> object | None:
    """The active wandb run, without importing wandb when the job never did."""
    wandb = sys.modules.get("wandb")
    return getattr(wandb, "run", None) if wandb is not None else None


def resolve_run_id(run_id: str | None) -> tuple[str, str]:
    """The run id and its origin: argument, environment, wandb, trainer, wandb_environment, default or generated."""
    if run_id:
        return str(run_id), "argument"
    from_env = os.environ.get(OTEL_VALGEN_RUN_ID, "").strip()
    if from_env:
        return from_env, "environment"
    wandb_id = getattr(wandb_run(), "id", None)
    if wandb_id:
        return str(wandb_id), "wandb"
    adopted = trainer_run_id()
    if adopted:
        return adopted, TRAINER_ORIGIN
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
    found = found | clearml_resource() | trackio_resource()
    if origin != "wandb" and _trainer_run is not None:
        return _trainer_run[1] | found
    return found


FALLBACK_LAUNCH_ID: Final = "run"
"""The launch id of a process that cannot tell its launch: all such processes of a run share it."""
LAUNCH_FALLBACK: Final = "fallback"
LAUNCH_PROCESS_GROUP: Final = "process_group"
# Launch ids found without a launcher: a Ray driver forwards neither to its workers (they use
# ``ray-<job id>``), and moves to the Ray job's once connected.
LAUNCH_UNNAMED: Final = frozenset({LAUNCH_PROCESS_GROUP, LAUNCH_FALLBACK})
TORCHRUN_NO_RDZV_ID: Final = "none"  # torchrun's --rdzv-id default: the same value in every launch
# Launch ids a child process could not find again by itself (a new interpreter neither ran
# ``configure(launch_id=...)`` nor joined the Ray job); the launchers' variables it inherits.
_TOLD_TO_CHILDREN: Final = frozenset({"argument", "ray"})


def _restarted(launch_id: str, restart_count: str) -> str:
    """``launch_id``, plus ``-r<n>`` when the launcher restarted the job n > 0 times (a new launch)."""
    restarts = env_int(restart_count, 0, minimum=0)
    return f"{launch_id}-r{restarts}" if restarts else launch_id


def ray_job_launch_id() -> str | None:
    """``ray-<job id>`` in a process of a connected Ray job: shared by its workers, new per driver run."""
    ray = sys.modules.get("ray")
    if ray is None or not getattr(ray, "is_initialized", lambda: False)():
        return None
    try:
        job_id = ray.get_runtime_context().get_job_id()
    except Exception:  # Ray's context API differs across versions; the other launchers will do
        return None
    return f"ray-{job_id}" if job_id else None


def slurm_launch_id() -> str | None:
    """``slurm-<job id>`` (a heterogeneous job's leader), ``-r<n>`` after n requeues.

    Not the step id: the batch script, each ``srun`` and each heterogeneous component of one job
    are different steps of the same launch.
    """
    _, job_id = env_first(SLURM_JOB_ID_HET_GROUP_0, SLURM_JOB_ID)
    return _restarted(f"slurm-{job_id}", SLURM_RESTART_COUNT) if job_id else None


def mpi_launch_id() -> str | None:
    """``pmix-<namespace>`` (Open MPI 5 / PRRTE, Open MPI 4), else ``openmpi-<job id>`` (ORTE)."""
    name, value = env_first(PMIX_NAMESPACE, OMPI_MCA_ESS_BASE_JOBID)
    if not name:
        return None
    return f"pmix-{value}" if name == PMIX_NAMESPACE else f"openmpi-{value}"


def torchelastic_launch_id() -> str | None:
    """``torchelastic-<rendezvous id>`` in a torchrun worker, ``-r<n>`` after n worker-group restarts.

    Without ``--rdzv-id`` the id is ``none`` in every launch: the launch is then named by the job
    around it (Slurm, MPI), else by its rendezvous endpoint ``MASTER_ADDR:MASTER_PORT``, which
    every worker of one launch shares.
    """
    run_id = os.environ.get(TORCHELASTIC_RUN_ID, "").strip()
    if not run_id:
        return None
    if run_id.lower() == TORCHRUN_NO_RDZV_ID:
        endpoint = ":".join(os.environ.get(name, "").strip() for name in (MASTER_ADDR, MASTER_PORT))
        run_id = slurm_launch_id() or mpi_launch_id() or (endpoint if endpoint != ":" else run_id)
    return _restarted(f"torchelastic-{run_id}", TORCHELASTIC_RESTART_COUNT)


_LAUNCHERS: Final = (
    ("ray", ray_job_launch_id),
    ("torchelastic", torchelastic_launch_id),
    ("slurm", slurm_launch_id),
    ("mpi", mpi_launch_id),
    (LAUNCH_PROCESS_GROUP, _launch_group.launch_id),
)


def resolve_launch_id(launch_id: str | None) -> tuple[str, str]:
    """The launch id and its origin: argument, environment, ray, torchelastic, slurm, mpi, process_group or fallback.

    Every process of one launch finds the same id. Without a launcher, the processes of one
    process group running (or started) together are a launch (``_launch_group``); a process
    that cannot tell even that gets ``FALLBACK_LAUNCH_ID``, shared by the whole run, so that
    processes merge rather than split.
    """
    if launch_id is not None and str(launch_id).strip():
        return str(launch_id).strip(), "argument"
    from_env = os.environ.get(OTEL_VALGEN_LAUNCH_ID, "").strip()
    if from_env:
        return from_env, "environment"
    for origin, find in _LAUNCHERS:
        found = find()
        if found:
            return found, origin
    return FALLBACK_LAUNCH_ID, LAUNCH_FALLBACK


# (the value this process put into OTEL_VALGEN_LAUNCH_ID, the value it replaced)
_told: tuple[str, str | None] | None = None


def tell_children(launch_id: str, origin: str) -> None:
    """Put a launch id children could not find themselves into ``OTEL_VALGEN_LAUNCH_ID``.

    A ``multiprocessing`` child started by spawn or forkserver is a new interpreter: it inherits
    the environment (the launchers' variables too), not ``configure(launch_id=...)`` nor the Ray
    job. Every process started from here later inherits the variable and takes it as its own.
    """
    global _told
    if origin not in _TOLD_TO_CHILDREN:
        return
    current = os.environ.get(OTEL_VALGEN_LAUNCH_ID)
    if current == launch_id:
        return
    replaced = _told[1] if _told is not None and current == _told[0] else current
    try:
        os.environ[OTEL_VALGEN_LAUNCH_ID] = launch_id
    except (ValueError, OSError) as error:  # e.g. a NUL character: this process's records are unaffected
        _logger.warning("otel_valgen: cannot pass launch id %r to child processes: %s", launch_id, error)
        return
    _told = (launch_id, replaced)


def untell_children() -> None:
    """Undo ``tell_children`` (``reset_for_testing``), unless something else set the variable since."""
    global _told
    if _told is None:
        return
    told, replaced = _told
    _told = None
    if os.environ.get(OTEL_VALGEN_LAUNCH_ID) != told:
        return
    if replaced is None:
        del os.environ[OTEL_VALGEN_LAUNCH_ID]
    else:
        os.environ[OTEL_VALGEN_LAUNCH_ID] = replaced
