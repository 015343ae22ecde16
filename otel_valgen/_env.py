"""The environment variables this library reads, and how a value is read from the environment.

A bad value in the environment is a library-side mistake that must not stop training: each
reader logs it and returns the default.
"""

from __future__ import annotations

import logging
import os
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
MLFLOW_RUN_ID: Final = "MLFLOW_RUN_ID"
"""MLflow's own run id variable (``mlflow.start_run`` resumes it): the run while no MLflow run is active."""
MLFLOW_EXPERIMENT_NAME: Final = "MLFLOW_EXPERIMENT_NAME"
CLEARML_TASK_ID: Final = "CLEARML_TASK_ID"
"""ClearML's own task id variable (set by clearml-agent): the task while no ClearML task is current."""
TENSORBOARD_DIR: Final = "TENSORBOARD_DIR"
"""The folder verl's TensorBoard logger writes to; sent as the ``tensorboard.log_dir`` resource attribute."""
OTEL_VALGEN_COUNT: Final = "OTEL_VALGEN_COUNT"
"""k: how many generations to keep per (run, step). Default 64."""
OTEL_VALGEN_ROLLOUT_COUNT: Final = "OTEL_VALGEN_ROLLOUT_COUNT"
"""k for training rollouts: prompts kept per (run, step), each with all its responses. Default 0 (off)."""
OTEL_VALGEN_ROLLOUT_RATE: Final = "OTEL_VALGEN_ROLLOUT_RATE"
"""Watch-list rate of training rollouts, in (0, 1]: a prompt is kept when its key is below rate * 2**63. Unset: off."""
OTEL_VALGEN_SAMPLE_BY: Final = "OTEL_VALGEN_SAMPLE_BY"
"""``step`` (default): k per step; ``data_source``: k per (step, data source), for validation and rollouts."""
OTEL_VALGEN_EXTREMES: Final = "OTEL_VALGEN_EXTREMES"
"""n: the n lowest- and n highest-scored validation generations kept per step beside the k keyed picks. Default 0."""
OTEL_VALGEN_MISMATCHED: Final = "OTEL_VALGEN_MISMATCHED"
"""n: the n rollout responses of the largest KL (valgen.mismatch.kl) kept per step beside the k prompts. Default 0."""
OTEL_VALGEN_SEED: Final = "OTEL_VALGEN_SEED"
"""The sampling seed. Default 42."""
OTEL_VALGEN_PRESAMPLE: Final = "OTEL_VALGEN_PRESAMPLE"
"""Keep only the local bottom-k per step before sending (true/false). Default true."""
OTEL_VALGEN_DIR: Final = "OTEL_VALGEN_DIR"
"""Folder of the embedded file sink, used when no OTLP endpoint is set. Default ./valgen-data."""
OTEL_VALGEN_SOURCE: Final = "OTEL_VALGEN_SOURCE"
"""Default name of the emitting part (e.g. trainer, rollouter). Default "main"."""
OTEL_VALGEN_MAX_FIELD_BYTES: Final = "OTEL_VALGEN_MAX_FIELD_BYTES"
OTEL_VALGEN_MAX_MESSAGES_BYTES: Final = "OTEL_VALGEN_MAX_MESSAGES_BYTES"
OTEL_VALGEN_MAX_TOKEN_BYTES: Final = "OTEL_VALGEN_MAX_TOKEN_BYTES"
"""Longest input/output/ground truth sent, in UTF-8 bytes; longer is truncated. Default 65536."""
OTEL_VALGEN_SPOOL: Final = "OTEL_VALGEN_SPOOL"
"""Write records the collector did not accept to ``<OTEL_VALGEN_DIR>/spool`` (true/false). Default true."""
OTEL_VALGEN_FLUSH_TIMEOUT: Final = "OTEL_VALGEN_FLUSH_TIMEOUT"
"""Seconds a step end, a block-less call or a flush waits for the endpoint (then it counts as away). Default 2."""
OTEL_VALGEN_SPOOL_MAX_MB: Final = "OTEL_VALGEN_SPOOL_MAX_MB"
"""Largest spool file of one process, MiB; what does not fit is counted in ``dropped.spool_full``. Default 1024."""
OTEL_VALGEN_VERL: Final = "OTEL_VALGEN_VERL"
"""``false`` turns off the automatic verl integration (otel_valgen.integrations.verl). Default true."""
OTEL_VALGEN_CHAINED_SETUP_HOOK: Final = "OTEL_VALGEN_CHAINED_SETUP_HOOK"
"""Set by ``otel_valgen.ray.runtime_env``: the job's own ``worker_process_setup_hook``, which
``otel_valgen.ray.setup_worker`` runs first (a module path, or Ray's key of a function)."""
OTEL_VALGEN_LAUNCH_ID: Final = "OTEL_VALGEN_LAUNCH_ID"
"""This launch of the training job; part of every record's attempt.

Default: the launcher's (Ray, torchrun, Slurm, an MPI launcher; ``_identity.resolve_launch_id``),
else the process group's (``_launch_group``), else ``run``: one launch per run."""
# The launchers' own variables, read for the launch id (README, *Launches*).
TORCHELASTIC_RUN_ID: Final = "TORCHELASTIC_RUN_ID"
"""torchrun's rendezvous id (``--rdzv-id``), the same in every worker; ``none`` when not given."""
TORCHELASTIC_RESTART_COUNT: Final = "TORCHELASTIC_RESTART_COUNT"
"""How many times torchrun restarted its worker group."""
MASTER_ADDR: Final = "MASTER_ADDR"
"""torchrun's rendezvous host (rank 0's store), the same in every worker of a launch."""
MASTER_PORT: Final = "MASTER_PORT"
SLURM_JOB_ID: Final = "SLURM_JOB_ID"
"""The Slurm job of every task and of the batch script; kept when the job is requeued."""
SLURM_JOB_ID_HET_GROUP_0: Final = "SLURM_JOB_ID_HET_GROUP_0"
"""A heterogeneous Slurm job's leader, set in every component (whose own SLURM_JOB_ID differs)."""
SLURM_RESTART_COUNT: Final = "SLURM_RESTART_COUNT"
"""How many times Slurm requeued (restarted) the batch job."""
PMIX_NAMESPACE: Final = "PMIX_NAMESPACE"
"""The PMIx namespace of an MPI job (Open MPI 5 / PRRTE, Open MPI 4, any PMIx server): one per job."""
OMPI_MCA_ESS_BASE_JOBID: Final = "OMPI_MCA_ess_base_jobid"
"""Open MPI's (ORTE, up to 4.x) job id, set in every process of one mpirun."""
WORLD_SIZE: Final = "WORLD_SIZE"
"""The processes of a distributed job (torch's convention, which most launchers follow)."""
LOCAL_WORLD_SIZE: Final = "LOCAL_WORLD_SIZE"
"""Of those, the ones on this host: fewer than WORLD_SIZE means the job spans hosts."""
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
OTEL_EXPORTER_OTLP_INSECURE: Final = "OTEL_EXPORTER_OTLP_INSECURE"
OTEL_EXPORTER_OTLP_LOGS_INSECURE: Final = "OTEL_EXPORTER_OTLP_LOGS_INSECURE"
OTEL_SERVICE_NAME: Final = "OTEL_SERVICE_NAME"
OTEL_RESOURCE_ATTRIBUTES: Final = "OTEL_RESOURCE_ATTRIBUTES"


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


def env_float(name: str, default: float) -> float:
    """A number >= 0 from the environment; a bad value (NaN too) is logged and the default used."""
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


def env_first(*names: str) -> tuple[str, str]:
    """The first of ``names`` set to a non-empty value, and that value; ("", "") if none is."""
    for name in names:
        value = os.environ.get(name, "").strip()
        if value:
            return name, value
    return "", ""
