"""The ``exporter`` (alias ``wandb-exporter``) and ``push`` commands, registered on ``otel-valgen``.

Tracker libraries and grpc are imported inside the commands, so ``otel-valgen --help`` stays
fast. Credentials are read by the trackers themselves from their environment
(``WANDB_API_KEY``, ``MLFLOW_TRACKING_TOKEN``, ...); they are never logged here.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any, TypeVar

import click

from otel_valgen import contract
from otel_valgen.cli._support import OperationalError, ValgenCommand, report_read_error
from otel_valgen.exporter.tables import LAYOUTS

__all__ = ["exporter_command", "push_command", "wandb_exporter_command"]

DEFAULT_HTTP = "127.0.0.1:4418"
DEFAULT_GRPC = "127.0.0.1:4417"
DEFAULT_TABLE_KEY = "val/generations"
DEFAULT_ROLLOUT_KEY = "train/generations"


def _default_mode() -> str:
    return "offline" if os.environ.get("WANDB_MODE", "").lower() in ("offline", "dryrun") else "shared"


F = TypeVar("F", bound=Callable[..., Any])

_layout = click.option("--layout", type=click.Choice(LAYOUTS), default="verl", show_default=True, help="Table layout.")
_table_key = click.option(
    "--table-key", default=DEFAULT_TABLE_KEY, show_default=True, help="Key of the validation table."
)
_rollout_key = click.option(
    "--rollout-table-key",
    "rollout_key",
    default=DEFAULT_ROLLOUT_KEY,
    show_default=True,
    help="Key of the training rollouts' table (valgen.kind = rollout); must differ from --table-key.",
)
_mode = click.option(
    "--wandb-mode",
    type=click.Choice(["shared", "offline"]),
    default=None,
    help="shared: attach to the live run; offline: local run files. Default: offline if WANDB_MODE=offline.",
)
_project = click.option("--project", default=None, help="wandb project for records without wandb.project.")
_entity = click.option("--entity", default=None, help="wandb entity for records without wandb.entity.")
_scalars = click.option("--scalars/--no-scalars", default=True, show_default=True, help="Log seen/kept/late/missing.")
_OFFLINE_FIX = "or pass --wandb-mode offline and `wandb sync` the run files later"


def _address(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    """Check a ``HOST:PORT`` option ('' is off); grpc is imported only when the service runs."""
    if value:
        from otel_valgen.exporter.server import parse_address

        try:
            parse_address(value)
        except ValueError as error:
            raise click.BadParameter(str(error)) from error
    return value


def _backends(_ctx: click.Context, _param: click.Parameter, value: str) -> list[str]:
    from otel_valgen.exporter.backends import parse_backends

    try:
        return parse_backends(value)
    except ValueError as error:
        raise click.BadParameter(str(error)) from error


_backend = click.option(
    "--backend",
    "backends",
    envvar="VALGEN_EXPORTER_BACKENDS",
    default="wandb",
    show_default=True,
    callback=_backends,
    help="Trackers to write to, comma-separated: wandb, mlflow, tensorboard, clearml, trackio "
    "[env: VALGEN_EXPORTER_BACKENDS].",
)
_tensorboard_dir = click.option(
    "--tensorboard-dir",
    envvar="VALGEN_TENSORBOARD_DIR",
    default=".",
    show_default=True,
    help="TensorBoard: the folder the exporter may write under; records' tensorboard.log_dir is taken inside it.",
)
_mlflow_uri = click.option(
    "--mlflow-tracking-uri",
    envvar="MLFLOW_TRACKING_URI",
    default=None,
    help="MLflow: the tracking server [env: MLFLOW_TRACKING_URI].",
)
_mlflow_experiment = click.option(
    "--mlflow-experiment",
    default="otel-valgen",
    show_default=True,
    help="MLflow: the experiment of runs made for records without mlflow.run_id.",
)

_mlflow_link_traces = click.option(
    "--mlflow-link-traces/--no-mlflow-link-traces",
    envvar="VALGEN_MLFLOW_LINK_TRACES",
    default=False,
    show_default=True,
    help="MLflow: link each step's trace (the collector's traces-mlflow.yaml overlay sends it to the same "
    "tracking server) to the run its records name (mlflow.run_id) [env: VALGEN_MLFLOW_LINK_TRACES].",
)
_mlflow_link_traces_wait = click.option(
    "--mlflow-link-traces-wait",
    envvar="VALGEN_MLFLOW_LINK_TRACES_WAIT",
    type=click.FloatRange(min=0),
    default=600.0,
    show_default=True,
    help="MLflow: seconds a step's trace link waits for its trace before it is given up "
    "[env: VALGEN_MLFLOW_LINK_TRACES_WAIT].",
)


def _tracker_options(command: F) -> F:
    """The options that say where and how steps are written, shared by both commands."""
    for option in (
        _mlflow_link_traces_wait,
        _mlflow_link_traces,
        _mlflow_experiment,
        _mlflow_uri,
        _tensorboard_dir,
        _scalars,
        _entity,
        _project,
        _mode,
        _rollout_key,
        _table_key,
        _layout,
        _backend,
    ):
        command = option(command)
    return command


def _configs(options: dict[str, Any], max_runs: int = 16) -> dict[str, Any]:
    """Each backend's config from the command's options.

    Raises:
        click.BadParameter: the two kinds would share one key.

    """
    from otel_valgen.exporter.backends.clearml import ClearMLConfig
    from otel_valgen.exporter.backends.mlflow import MlflowConfig
    from otel_valgen.exporter.backends.tensorboard import TensorBoardConfig
    from otel_valgen.exporter.backends.trackio import TrackioConfig

    if options["rollout_key"] == options["table_key"]:
        raise click.BadParameter("validation and rollouts would share one table", param_hint="--rollout-table-key")
    keys = {"table_key": options["table_key"], "rollout_key": options["rollout_key"], "scalars": options["scalars"]}
    configs: dict[str, Any] = {
        "clearml": ClearMLConfig(**keys),
        "trackio": TrackioConfig(**keys),
        "mlflow": MlflowConfig(
            tracking_uri=options["mlflow_tracking_uri"] or None,
            experiment=options["mlflow_experiment"],
            link_traces=options["mlflow_link_traces"],
            link_traces_wait_s=options["mlflow_link_traces_wait"],
            **keys,
        ),
        "tensorboard": TensorBoardConfig(root=options["tensorboard_dir"], **keys),
    }
    if "wandb" in options["backends"]:
        from otel_valgen.exporter.backends.wandb import WriterConfig

        configs["wandb"] = WriterConfig(
            layout=options["layout"],
            mode=options["wandb_mode"] or _default_mode(),
            max_runs=max_runs,
            project=options["project"],
            entity=options["entity"],
            **keys,
        )
    return configs


def _exporter_command(name: str, summary: str) -> click.Command:
    @click.command(name, cls=ValgenCommand, help=summary)
    @click.option(
        "--http",
        "http_address",
        default=DEFAULT_HTTP,
        show_default=True,
        callback=_address,
        help="OTLP/HTTP address ('' = off).",
    )
    @click.option(
        "--grpc",
        "grpc_address",
        default=DEFAULT_GRPC,
        show_default=True,
        callback=_address,
        help="OTLP/gRPC address ('' = off).",
    )
    @click.option(
        "--metrics-address",
        envvar="VALGEN_EXPORTER_METRICS_ADDRESS",
        default="",
        callback=_address,
        help="Prometheus /metrics, /healthz and /readyz on HOST:PORT of their own; off unless given "
        "[env: VALGEN_EXPORTER_METRICS_ADDRESS].",
    )
    @_tracker_options
    @click.option(
        "--state-dir",
        default="./otel-valgen-exporter-state",
        show_default=True,
        help="Per backend: the ledger of written steps and the spool of unwritten ones ('' = memory only).",
    )
    @click.option("--max-runs", type=int, default=16, show_default=True, help="wandb attachments kept open at once.")
    @click.option(
        "--max-pending-steps",
        type=click.IntRange(min=1),
        default=64,
        show_default=True,
        help="Steps a backend may hold unwritten (while it is down) before requests are refused with 503.",
    )
    @click.option("--retry-after", type=float, default=5.0, show_default=True, help="Retry-After while refusing.")
    @click.option(
        "--log-level",
        type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], case_sensitive=False),
        default="INFO",
        show_default=True,
        help="Python logging level.",
    )
    def command(**options: Any) -> None:
        _serve(options)

    return command


def _serve(options: dict[str, Any]) -> None:
    """Run the service until SIGTERM or SIGINT."""
    http_address, grpc_address = options["http_address"], options["grpc_address"]
    state_dir, max_runs, log_level = options["state_dir"], options["max_runs"], options["log_level"]
    retry_after, max_pending_steps = options["retry_after"], options["max_pending_steps"]
    from otel_valgen.exporter.backends import create_backends
    from otel_valgen.exporter.metrics import MetricsServer
    from otel_valgen.exporter.server import ExporterServer, ListenError
    from otel_valgen.exporter.service import ExporterService, ServiceConfig

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not http_address and not grpc_address:
        raise click.UsageError("give --http or --grpc an address")
    config = ServiceConfig(state_dir=state_dir or None, retry_after_s=retry_after, max_pending_steps=max_pending_steps)
    try:
        backends = create_backends(options["backends"], config.state_dir, _configs(options, max_runs))
    except ImportError as error:
        raise OperationalError(
            f"a backend's library is missing: {error}", "pip install 'otel-valgen[exporter]'"
        ) from error
    service = ExporterService(config, backends)
    server = ExporterServer(service, http=http_address or None, grpc_address=grpc_address or None)
    metrics = MetricsServer(service, options["metrics_address"]) if options["metrics_address"] else None
    service.start()
    try:
        server.start()
        if metrics is not None:  # after the OTLP front ends: /readyz is not 200 before they listen
            metrics.start()
    except ListenError as error:
        server.stop()
        service.stop(teardown=False)
        option = {"metrics": "--metrics-address"}.get(error.protocol, f"--{error.protocol}")
        raise OperationalError(
            str(error), f"stop the process that listens there, or pass {option} a free HOST:PORT ('' = off)"
        ) from error
    click.echo(
        f"exporter: http={http_address or 'off'} grpc={grpc_address or 'off'} "
        f"metrics={options['metrics_address'] or 'off'} backends={','.join(options['backends'])}",
        err=True,
    )
    done = threading.Event()

    def _stop(signum: int, _frame: FrameType | None) -> None:
        logging.getLogger("otel_valgen.exporter").info("signal %d: shutting down", signum)
        done.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    done.wait()
    server.stop()
    service.stop()  # /readyz answers 503 from here on
    if metrics is not None:
        metrics.stop()
    click.echo(f"exporter stopped: {service.stats()}", err=True)


exporter_command = _exporter_command(
    "exporter", "Receive sampled generations over OTLP and write them into their runs in each tracker."
)
wandb_exporter_command = _exporter_command(
    "wandb-exporter", "Alias of `exporter` (its earlier name; the backend defaults to wandb)."
)


@click.command("push", cls=ValgenCommand)
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True))
@_tracker_options
@click.option(
    "--count", type=click.IntRange(min=1), default=None, help="k per step (default: the records' sample count)."
)
@click.option("--state-dir", default=None, help="Ledger folder, so that pushing again adds nothing.")
@click.option(
    "--kind",
    "kinds",
    type=click.Choice(sorted(contract.KINDS)),
    multiple=True,
    help="Only this stream (repeatable): validation generations or training rollouts. Default: both, "
    "each under its own key (--table-key, --rollout-table-key).",
)
def push_command(
    paths: tuple[str, ...], count: int | None, state_dir: str | None, kinds: tuple[str, ...], **options: Any
) -> None:
    """Write generations from OTLP files to the trackers (backfill).

    Reads every file layout ``otel-valgen show`` reads. Validation steps and training rollout
    steps are both written, each under its own key, unless ``--kind`` names one. wandb without
    --wandb-mode offline (or WANDB_MODE=offline) needs credentials: WANDB_API_KEY or ``wandb login``.
    """
    from otel_valgen.exporter.backends import BackendUnavailable, create_backends
    from otel_valgen.exporter.push import KINDS, push_paths

    try:
        backends = create_backends(options["backends"], state_dir, _configs(options))
        report = push_paths(paths, backends, count=count, kinds=kinds or KINDS, on_error=report_read_error)
    except ImportError as error:
        raise OperationalError(
            f"a backend's library is missing: {error}", "pip install 'otel-valgen[exporter]'"
        ) from error
    except BackendUnavailable as error:
        raise OperationalError(
            str(error), f"check the tracker's address and credentials (wandb: set WANDB_API_KEY, {_OFFLINE_FIX})"
        ) from error
    per_kind = ", ".join(
        f"{kind} {counts.steps} steps ({counts.rows} rows), {counts.steps_skipped} already written"
        for kind, counts in report.kinds.items()
    )
    click.echo(f"pushed {report.steps} steps ({report.rows} rows); {report.steps_skipped} already written [{per_kind}]")
    if report.errors:
        click.echo(f"{len(report.errors)} part(s) of the input could not be read (see the warnings above)", err=True)
        raise SystemExit(1)
