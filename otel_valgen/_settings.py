"""Configuration: one table of every setting, and its resolution (argument > environment > default).

``SETTINGS`` is the one place a setting is declared: its environment variables, its
``configure()`` argument, how its variable is read, its default, whether ``runtime_env()``
forwards it to Ray workers, and what it means. ``Settings`` holds the resolved values; the
README's configuration table is generated from ``SETTINGS`` (``python -m otel_valgen._settings``)
and ``tests/test_settings_table.py`` checks that ``configure()``, the Ray forwarding, the test
environment and the README all agree with it.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Final

from otel_valgen import _env as env
from otel_valgen import contract
from otel_valgen._identity import (
    LAUNCH_UNNAMED,
    RUN_ID_EXPLICIT,
    TRAINER_ORIGIN,
    ray_job_launch_id,
    resolve_launch_id,
    resolve_run_id,
    tracker_resource,
    trainer_run_id,
    wandb_run,
)
from otel_valgen._otlp_settings import (
    DEFAULT_PROTOCOL,
    OtlpTransport,
    resolve_endpoint,
    resolve_protocol,
    resolve_transport,
)
from otel_valgen.sampling import rate_of

_logger = logging.getLogger("otel_valgen")

DEFAULT_COUNT: Final = 64  # also the processor's `count` (testdata/defaults.json ties them)
DEFAULT_ROLLOUT_COUNT: Final = 0  # rollouts are off until a job asks for them, as verl's own dump is
DEFAULT_SEED: Final = 42
DEFAULT_DIR: Final = "./valgen-data"
DEFAULT_SOURCE: Final = "main"
DEFAULT_MAX_FIELD_BYTES: Final = 64 * 1024
DEFAULT_MAX_MESSAGES_BYTES: Final = 128 * 1024
DEFAULT_MAX_TOKEN_BYTES: Final = 1024 * 1024
DEFAULT_FLUSH_TIMEOUT_S: Final = 2.0
DEFAULT_SPOOL_MAX_MB: Final = 1024
DEFAULT_PROGRESS_INTERVAL_S: Final = 5.0
MIN_PROGRESS_INTERVAL_S: Final = 0.05

EnvReader = Callable[[str, Any], Any]


def _text(name: str, default: str) -> str:
    return os.environ.get(name, "").strip() or default


def _count(name: str, default: int) -> int:
    return env.env_int(name, default, minimum=0)


def _positive(name: str, default: int) -> int:
    return env.env_int(name, default, minimum=1)


def _sample_by(name: str, default: str) -> str:
    """``step`` or ``data_source`` from the environment; unset: ``default``; another value is logged and ignored."""
    raw = os.environ.get(name, "").strip().lower()
    if not raw:
        return default
    if raw not in contract.SAMPLE_BY_VALUES:
        _logger.warning("otel_valgen: %s=%r is not one of %s; using %s", name, raw, contract.SAMPLE_BY_VALUES, default)
        return default
    return raw


def _rate(name: str, default: float | None) -> float | None:
    """A sample rate in (0, 1] from the environment; unset: ``default``; a bad value is logged, ``default`` used."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value: float | None = rate_of(float(raw))
    except ValueError:
        value = None
    if value is None:
        _logger.warning("otel_valgen: %s=%r is not a number in (0, 1]; using %s", name, raw, default)
        return default
    return value


@dataclass(frozen=True)
class Setting:
    """One row of the configuration table."""

    variables: tuple[str, ...]  # the environment variables; of several, the first one set wins
    argument: str | None  # the ``configure()`` keyword and ``Settings`` field; None: environment only
    shown_default: str  # the default as the README states it
    meaning: str
    forwarded: bool = True  # passed to Ray workers by ``otel_valgen.ray.runtime_env()``
    read: EnvReader | None = None  # (variable, default) -> value; None: resolved by its own rule
    default: Any = None


_RUN_ID = (
    "the process's wandb run (also one started later), else, in verl's fully-async rollouter, the "
    "trainer's, else `WANDB_RUN_ID`, else the Ray driver's, else a generated id printed once"
)
_LAUNCH_ID = (
    "the launcher's (see *Launches*): in a Ray job the driver's, forwarded, else `ray-<job id>`; else "
    "torchrun's, Slurm's or the MPI launcher's; else the process group's, `pg<pgid>-<hex>`; else `run`, "
    "one launch per run"
)

SETTINGS: Final[tuple[Setting, ...]] = (
    Setting((env.OTEL_VALGEN_RUN_ID,), "run_id", _RUN_ID, "The training run (see *Run identity*)."),
    Setting(
        (env.OTEL_VALGEN_DEFAULT_RUN_ID,),
        None,
        "set by `runtime_env()`",
        "The driver's run id for Ray workers, below a worker's own wandb run and `WANDB_RUN_ID`.",
    ),
    Setting(
        (env.WANDB_RUN_ID, env.WANDB_PROJECT, env.WANDB_ENTITY),
        None,
        "unset",
        "wandb's own; the run id (and its resource attributes) while no wandb run exists.",
    ),
    Setting(
        (env.MLFLOW_RUN_ID, env.MLFLOW_EXPERIMENT_NAME, env.TENSORBOARD_DIR, env.CLEARML_TASK_ID),
        None,
        "unset",
        "The trackers' and verl's own; the `mlflow.*`, `tensorboard.log_dir` and `clearml.task_id` resource "
        "attributes that name the job's runs for the exporter (an active MLflow run or current ClearML task "
        "wins over its variable).",
    ),
    Setting(
        (env.OTEL_VALGEN_COUNT,), "count", "`64`", "*k*: generations kept per step.", read=_count, default=DEFAULT_COUNT
    ),
    Setting(
        (env.OTEL_VALGEN_ROLLOUT_COUNT,),
        "rollout_count",
        "`0` (off)",
        "*k* of training rollouts: prompts kept per step, each with all its responses (`log_rollouts`, "
        "docs/rollouts.md); 0 sends no rollout.",
        read=_count,
        default=DEFAULT_ROLLOUT_COUNT,
    ),
    Setting(
        (env.OTEL_VALGEN_ROLLOUT_RATE,),
        "rollout_rate",
        "unset (off)",
        "Watch-list of training rollouts, a rate in (0, 1]: a step keeps every prompt whose key is below "
        "`floor(rate * 2**63)`, so a kept prompt is kept every time it comes back, at most `rollout_count` "
        "of them (the smallest; the rest counted in `valgen.prompts_over_cap`). Unset: exactly "
        "`rollout_count` prompts per step (docs/rollouts.md).",
        read=_rate,
        default=None,
    ),
    Setting(
        (env.OTEL_VALGEN_SAMPLE_BY,),
        "sample_by",
        "`step`",
        "`data_source`: keep *k* per (step, data source) instead of per step, for validation and rollouts; "
        "each step's summary then gives seen, kept and mean score per data source (docs/configuration.md).",
        read=_sample_by,
        default=contract.SAMPLE_BY_STEP,
    ),
    Setting(
        (env.OTEL_VALGEN_EXTREMES,),
        "extremes",
        "`0` (off)",
        "*n*: beside the *k* keyed picks, keep the *n* lowest- and *n* highest-scored validation generations "
        "of each step (of each data source with `sample_by`); ties go to the smaller sample key, and each kept "
        "record says which slots it fills in `valgen.slots` (docs/configuration.md).",
        read=_count,
        default=0,
    ),
    Setting(
        (env.OTEL_VALGEN_MISMATCHED,),
        "mismatched",
        "`0` (off)",
        "*n*: beside the *k* keyed prompts, keep the *n* training rollout responses of each step (of each "
        "data source with `sample_by`) whose trainer and rollout engine disagree most, by the k3 KL estimate of "
        "their per-token log-probabilities (`valgen.mismatch.kl`, `log_rollouts(..., tokens=...)`); each "
        "response alone, ties to the smaller sample key, marked `mismatched` in `valgen.slots` "
        "(docs/configuration.md).",
        read=_count,
        default=0,
    ),
    Setting((env.OTEL_VALGEN_SEED,), "seed", "`42`", "Sampling seed.", read=env.env_int, default=DEFAULT_SEED),
    Setting(
        (env.OTEL_VALGEN_PRESAMPLE,),
        "presample",
        "`true`",
        "Keep only the local bottom-*k* per step before sending.",
        read=env.env_bool,
        default=True,
    ),
    Setting(
        (env.OTEL_VALGEN_DIR,),
        "directory",
        "`./valgen-data`",
        "Embedded sink folder (used when no endpoint is set).",
        read=_text,
        default=DEFAULT_DIR,
    ),
    Setting(
        (env.OTEL_VALGEN_SOURCE,),
        "source",
        "`main`",
        "Default name of the emitting part (each process names its own: not forwarded).",
        forwarded=False,
        read=_text,
        default=DEFAULT_SOURCE,
    ),
    Setting(
        (env.OTEL_VALGEN_MAX_FIELD_BYTES,),
        "max_field_bytes",
        "`65536`",
        "Longest input/output/ground truth, in UTF-8 bytes.",
        read=_positive,
        default=DEFAULT_MAX_FIELD_BYTES,
    ),
    Setting(
        (env.OTEL_VALGEN_MAX_MESSAGES_BYTES,),
        "max_messages_bytes",
        "`131072`",
        "Budget of a record's conversation texts together (input and output messages), in UTF-8 "
        "bytes; each text is also cut at `max_field_bytes`. Past it, only the longest texts are cut.",
        read=_positive,
        default=DEFAULT_MAX_MESSAGES_BYTES,
    ),
    Setting(
        (env.OTEL_VALGEN_MAX_TOKEN_BYTES,),
        "max_token_bytes",
        "`1048576`",
        "Budget of a kept rollout response's per-token data (`valgen.tokens`), in packed bytes: a 32k-token "
        "response with every column fits. Past it, the middle tokens are left out (head and tail kept, "
        "the cut marked).",
        read=_positive,
        default=DEFAULT_MAX_TOKEN_BYTES,
    ),
    Setting(
        (env.OTEL_VALGEN_FLUSH_TIMEOUT,),
        "flush_timeout_s",
        "`2`",
        "Longest a step end, a block-less call or a flush waits for the endpoint, seconds (also the SIGTERM "
        "flush). Past it, or after a failed delivery, the endpoint counts as away: records go to the spool "
        "and no call waits until it is back (docs/reliability.md).",
        read=env.env_float,
        default=DEFAULT_FLUSH_TIMEOUT_S,
    ),
    Setting(
        (env.OTEL_VALGEN_PROGRESS_INTERVAL,),
        "progress_interval_s",
        "`5`",
        "Seconds between progress records of an open block; `0` = none; at least `0.05`. The "
        "collector's `decision_wait` must be longer (use at least twice this).",
    ),
    Setting(
        (env.OTEL_VALGEN_LAUNCH_ID,),
        "launch_id",
        _LAUNCH_ID,
        "This launch of the job; the first part of `valgen.attempt`. Set it only to a value that is "
        "new for each launch.",
    ),
    Setting(
        (
            env.TORCHELASTIC_RUN_ID,
            env.TORCHELASTIC_RESTART_COUNT,
            env.MASTER_ADDR,
            env.MASTER_PORT,
            env.SLURM_JOB_ID,
            env.SLURM_JOB_ID_HET_GROUP_0,
            env.SLURM_RESTART_COUNT,
            env.PMIX_NAMESPACE,
            env.OMPI_MCA_ESS_BASE_JOBID,
            env.WORLD_SIZE,
            env.LOCAL_WORLD_SIZE,
        ),
        None,
        "set by the launcher",
        "The launchers' own (torchrun, Slurm, Open MPI / PMIx); they name the launch when "
        "`OTEL_VALGEN_LAUNCH_ID` is unset (see *Launches*). `WORLD_SIZE` above `LOCAL_WORLD_SIZE` "
        "keeps a job that may span hosts from being named by its process group. Each process reads its own.",
        forwarded=False,
    ),
    Setting(
        (env.OTEL_VALGEN_VERL,),
        None,
        "`true`",
        "Hook verl's trainers when a worker imports them ([docs/verl.md](docs/verl.md)).",
    ),
    Setting(
        (env.OTEL_VALGEN_CHAINED_SETUP_HOOK,),
        None,
        "set by otel-valgen",
        "The job's own `worker_process_setup_hook`, kept by the Ray env hook: every worker runs it, "
        "then otel-valgen's. Not for users to set.",
        forwarded=False,
    ),
    Setting(
        (env.OTEL_VALGEN_SPOOL,),
        "spool",
        "`true`",
        "While the endpoint is away, write records to `<OTEL_VALGEN_DIR>/spool`; they are sent by "
        "themselves when it is back (or by the run's next process, or `otel-valgen resend`).",
        read=env.env_bool,
        default=True,
    ),
    Setting(
        (env.OTEL_VALGEN_SPOOL_MAX_MB,),
        "spool_max_mb",
        "`1024`",
        "Largest spool file of one process, MiB; records that do not fit are counted in `dropped.spool_full`.",
        read=_positive,
        default=DEFAULT_SPOOL_MAX_MB,
    ),
    Setting(
        (env.OTEL_EXPORTER_OTLP_ENDPOINT,),
        "endpoint",
        "unset",
        "Send over OTLP to this collector instead of files: a base URL, OTLP/HTTP posts to "
        "`<it>/v1/logs` (whatever it ends with); gRPC uses it as it is.",
    ),
    Setting(
        (env.OTEL_EXPORTER_OTLP_LOGS_ENDPOINT,),
        None,
        "unset",
        "Wins over the generic one; used as it is (the full URL for OTLP/HTTP).",
    ),
    Setting(
        (env.OTEL_EXPORTER_OTLP_LOGS_PROTOCOL, env.OTEL_EXPORTER_OTLP_PROTOCOL),
        "protocol",
        f"`{DEFAULT_PROTOCOL}`",
        "`http/protobuf`, `http/json` or `grpc` (any case).",
    ),
    Setting(
        (env.OTEL_EXPORTER_OTLP_LOGS_HEADERS, env.OTEL_EXPORTER_OTLP_HEADERS),
        None,
        "none",
        "Request headers, `k=v,...`, URL-encoded (credentials: set them in the environment, never in files).",
    ),
    Setting(
        (env.OTEL_EXPORTER_OTLP_LOGS_CERTIFICATE, env.OTEL_EXPORTER_OTLP_CERTIFICATE),
        None,
        "system CAs",
        "CA file that verifies the collector.",
    ),
    Setting(
        (env.OTEL_EXPORTER_OTLP_LOGS_CLIENT_CERTIFICATE, env.OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE),
        None,
        "none",
        "Client certificate file (mTLS).",
    ),
    Setting(
        (env.OTEL_EXPORTER_OTLP_LOGS_CLIENT_KEY, env.OTEL_EXPORTER_OTLP_CLIENT_KEY),
        None,
        "none",
        "Client key file (mTLS).",
    ),
    Setting(
        (env.OTEL_EXPORTER_OTLP_LOGS_COMPRESSION, env.OTEL_EXPORTER_OTLP_COMPRESSION),
        None,
        "`none`",
        "`gzip`, `deflate` or `none`.",
    ),
    Setting(
        (env.OTEL_EXPORTER_OTLP_LOGS_TIMEOUT, env.OTEL_EXPORTER_OTLP_TIMEOUT),
        None,
        "`10`",
        "Seconds per export request, as every OTel Python exporter reads it (the specification says "
        "milliseconds). The transport variables are read once for the library's exporter and "
        "`otel-valgen resend`; gRPC: the SDK reads them itself.",
    ),
    Setting(
        (env.OTEL_EXPORTER_OTLP_LOGS_INSECURE, env.OTEL_EXPORTER_OTLP_INSECURE),
        None,
        "`false`",
        "gRPC without TLS, read by the SDK's gRPC exporter.",
    ),
    Setting(
        (env.OTEL_SERVICE_NAME, env.OTEL_RESOURCE_ATTRIBUTES),
        None,
        "`otel-valgen`",
        "Resource of the records.",
    ),
    Setting(
        ("OTEL_BLRP_*",),
        None,
        "SDK defaults",
        "Batching, read as the SDK reads them. The embedded sink keeps no queue: it writes a batch when the call "
        "that fills it returns, at each flush, and every schedule delay.",
        forwarded=False,
    ),
)
"""Every setting, in the README's order."""

BY_ARGUMENT: Final = {setting.argument: setting for setting in SETTINGS if setting.argument}


def variable_names(*, forwarded_only: bool = False) -> tuple[str, ...]:
    """The environment variables of the table (patterns such as ``OTEL_BLRP_*`` left out)."""
    return tuple(
        name
        for setting in SETTINGS
        if setting.forwarded or not forwarded_only
        for name in setting.variables
        if not name.endswith("*")
    )


@dataclass(frozen=True)
class Settings:
    """The resolved configuration of this process's emitter."""

    run_id: str
    count: int = DEFAULT_COUNT
    rollout_count: int = DEFAULT_ROLLOUT_COUNT
    rollout_rate: float | None = None  # the watch-list rate of rollouts (None: off, exactly k prompts)
    sample_by: str = contract.SAMPLE_BY_STEP  # contract.SAMPLE_BY_VALUES: k per step or per (step, data source)
    extremes: int = 0  # n lowest- and n highest-scored validation generations kept beside the k keyed picks
    mismatched: int = 0  # n rollout responses of the largest KL kept beside the k keyed prompts
    seed: int = DEFAULT_SEED
    presample: bool = True
    endpoint: str | None = None  # where logs go: the OTLP/HTTP logs URL or the gRPC target; None: files
    protocol: str = DEFAULT_PROTOCOL
    directory: str = DEFAULT_DIR
    source: str = DEFAULT_SOURCE
    max_field_bytes: int = DEFAULT_MAX_FIELD_BYTES
    max_messages_bytes: int = DEFAULT_MAX_MESSAGES_BYTES
    max_token_bytes: int = DEFAULT_MAX_TOKEN_BYTES
    flush_timeout_s: float = DEFAULT_FLUSH_TIMEOUT_S
    spool: bool = True
    spool_max_mb: int = DEFAULT_SPOOL_MAX_MB
    launch_id: str = ""
    progress_interval_s: float = DEFAULT_PROGRESS_INTERVAL_S
    run_id_origin: str = "argument"
    launch_id_origin: str = "argument"  # how resolve_launch_id found it; "fallback": no launcher known
    resource_attributes: dict[str, str] = field(default_factory=dict)
    transport: OtlpTransport = field(default_factory=OtlpTransport)

    @property
    def embedded(self) -> bool:
        """Whether records go to local files instead of an OTLP endpoint."""
        return not self.endpoint


def _from_env(argument: str) -> Any:
    """A setting read from its environment variable by the table's reader."""
    setting = BY_ARGUMENT[argument]
    assert setting.read is not None, argument
    return setting.read(setting.variables[0], setting.default)


def _argument_or_env(argument: str, value: Any, accept: Callable[[Any], bool], warn: bool = False) -> Any:
    """``value`` when given and acceptable, else the environment's (a refused value is logged when ``warn``)."""
    if value is not None and accept(value):
        return value
    if value is not None and warn:
        _logger.warning("otel_valgen: %s=%r is not valid; using the environment/default", argument, value)
    return _from_env(argument)


def _follow_launch(settings: Settings) -> Settings:
    """A process that could not tell its launch takes the Ray job's once it has joined one.

    A Ray driver configured before ``ray.init`` forwards no launch id; its workers use
    ``ray-<job id>``, and so does the driver from its next step on.
    """
    if settings.launch_id_origin not in LAUNCH_UNNAMED:
        return settings
    ray_launch = ray_job_launch_id()
    return replace(settings, launch_id=ray_launch, launch_id_origin="ray") if ray_launch else settings


def _tracker_run() -> tuple[str, str] | None:
    """(run id, origin) of this process's wandb run, else of the trainer run it adopted, else None."""
    wandb_id = getattr(wandb_run(), "id", None)
    if wandb_id:
        return str(wandb_id), "wandb"
    adopted = trainer_run_id()
    return (adopted, TRAINER_ORIGIN) if adopted else None


def follow_tracker_runs(settings: Settings) -> Settings | None:
    """``settings`` moved to the tracker runs (and Ray job) this process has now, or None when nothing changed.

    The run id follows a wandb run started after ``configure``, else the trainer's run this
    process adopted (``adopt_trainer_run``), unless it was set explicitly (argument,
    ``OTEL_VALGEN_RUN_ID``); the resource attributes follow every tracker's run (a wandb or
    MLflow run started later), so the exporter writes into the job's own runs.
    """
    original, settings = settings, _follow_launch(settings)
    followed = _tracker_run() if settings.run_id_origin not in RUN_ID_EXPLICIT else None
    if followed is not None and followed != (settings.run_id, settings.run_id_origin):
        run_id, origin = followed
        return replace(settings, run_id=run_id, run_id_origin=origin, resource_attributes=tracker_resource(origin))
    resource = tracker_resource(settings.run_id_origin)
    if resource == settings.resource_attributes:
        return None if settings is original else settings
    return replace(settings, resource_attributes=resource)


def _resolve_progress_interval(interval_s: float | None) -> float:
    if interval_s is None or not interval_s >= 0:  # None, negative or NaN
        if interval_s is not None:
            _logger.warning(
                "otel_valgen: progress_interval_s=%r is not >= 0; using the environment/default", interval_s
            )
        interval_s = env.env_float(env.OTEL_VALGEN_PROGRESS_INTERVAL, DEFAULT_PROGRESS_INTERVAL_S)
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


def resolve_settings(
    *,
    run_id: str | None = None,
    count: int | None = None,
    rollout_count: int | None = None,
    rollout_rate: float | None = None,
    sample_by: str | None = None,
    extremes: int | None = None,
    mismatched: int | None = None,
    seed: int | None = None,
    presample: bool | None = None,
    endpoint: str | None = None,
    protocol: str | None = None,
    directory: str | None = None,
    source: str | None = None,
    max_field_bytes: int | None = None,
    max_messages_bytes: int | None = None,
    max_token_bytes: int | None = None,
    flush_timeout_s: float | None = None,
    spool: bool | None = None,
    spool_max_mb: int | None = None,
    launch_id: str | None = None,
    progress_interval_s: float | None = None,
) -> Settings:
    """Resolve every setting of the table: argument > environment > default."""
    resolved_run_id, origin = resolve_run_id(run_id)
    resolved_launch_id, launch_origin = resolve_launch_id(launch_id)
    resolved_protocol = resolve_protocol(protocol)
    return Settings(
        run_id=resolved_run_id,
        run_id_origin=origin,
        count=_argument_or_env("count", count, lambda v: v >= 0, warn=True),
        rollout_count=_argument_or_env("rollout_count", rollout_count, lambda v: v >= 0, warn=True),
        rollout_rate=rate_of(
            _argument_or_env("rollout_rate", rollout_rate, lambda v: rate_of(v) is not None, warn=True)
        ),
        sample_by=_argument_or_env("sample_by", sample_by, lambda v: v in contract.SAMPLE_BY_VALUES, warn=True),
        extremes=_argument_or_env("extremes", extremes, lambda v: v >= 0, warn=True),
        mismatched=_argument_or_env("mismatched", mismatched, lambda v: v >= 0, warn=True),
        seed=int(_argument_or_env("seed", seed, lambda v: True)),
        presample=bool(_argument_or_env("presample", presample, lambda v: True)),
        endpoint=resolve_endpoint(endpoint, resolved_protocol),
        protocol=resolved_protocol,
        directory=_argument_or_env("directory", directory, bool),
        source=_argument_or_env("source", source, bool),
        max_field_bytes=_argument_or_env("max_field_bytes", max_field_bytes, lambda v: v > 0),
        max_messages_bytes=_argument_or_env("max_messages_bytes", max_messages_bytes, lambda v: v > 0),
        max_token_bytes=_argument_or_env("max_token_bytes", max_token_bytes, lambda v: v > 0),
        flush_timeout_s=_argument_or_env("flush_timeout_s", flush_timeout_s, lambda v: v >= 0),
        spool=bool(_argument_or_env("spool", spool, lambda v: True)),
        spool_max_mb=_argument_or_env("spool_max_mb", spool_max_mb, lambda v: v > 0, warn=True),
        launch_id=resolved_launch_id,
        launch_id_origin=launch_origin,
        progress_interval_s=_resolve_progress_interval(progress_interval_s),
        resource_attributes=tracker_resource(origin),
        transport=resolve_transport(),
    )


def markdown_table() -> str:
    """The README's configuration table, generated from ``SETTINGS``."""
    lines = [
        "| Variable | `configure()` argument | Default | Forwarded to Ray workers | Meaning |",
        "| --- | --- | --- | --- | --- |",
    ]
    for setting in SETTINGS:
        names = " / ".join(f"`{name}`" for name in setting.variables)
        argument = f"`{setting.argument}`" if setting.argument else "—"
        forwarded = "yes" if setting.forwarded else "no"
        lines.append(f"| {names} | {argument} | {setting.shown_default} | {forwarded} | {setting.meaning} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")
