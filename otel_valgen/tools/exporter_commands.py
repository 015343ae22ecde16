"""The ``wandb-exporter`` and ``push`` commands (registered on ``otel-valgen`` by the core CLI).

wandb and grpc are imported inside the commands, so ``otel-valgen --help`` stays fast.
The wandb API key is read by wandb itself from ``WANDB_API_KEY``; it is never logged here.
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

from otel_valgen.tools._support import OperationalError, ValgenCommand, report_read_error
from otel_valgen.wandb_exporter.tables import LAYOUTS

__all__ = ["push_command", "wandb_exporter_command"]

DEFAULT_HTTP = "127.0.0.1:4418"
DEFAULT_GRPC = "127.0.0.1:4417"
DEFAULT_TABLE_KEY = "val/generations"


def _default_mode() -> str:
    return "offline" if os.environ.get("WANDB_MODE", "").lower() in ("offline", "dryrun") else "shared"


F = TypeVar("F", bound=Callable[..., Any])

_layout = click.option("--layout", type=click.Choice(LAYOUTS), default="verl", show_default=True, help="Table layout.")
_table_key = click.option("--table-key", default=DEFAULT_TABLE_KEY, show_default=True, help="Key of the table.")
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
        from otel_valgen.wandb_exporter.server import parse_address

        try:
            parse_address(value)
        except ValueError as error:
            raise click.BadParameter(str(error)) from error
    return value


def _wandb_options(command: F) -> F:
    """The options that say where and how steps are written to wandb, shared by both commands."""
    for option in (_scalars, _entity, _project, _mode, _table_key, _layout):
        command = option(command)
    return command


@click.command("wandb-exporter", cls=ValgenCommand)
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
@_wandb_options
@click.option(
    "--state-dir",
    default="./otel-valgen-exporter-state",
    show_default=True,
    help="Ledger of written steps and spool of open steps, kept across restarts ('' = memory only).",
)
@click.option("--step-timeout", type=float, default=120.0, show_default=True, help="Seconds to wait for a summary.")
@click.option("--max-open-steps", type=int, default=256, show_default=True, help="Open (run, step) groups at most.")
@click.option("--max-bytes", type=int, default=256 * 1024 * 1024, show_default=True, help="Buffered bytes at most.")
@click.option("--max-runs", type=int, default=16, show_default=True, help="wandb attachments kept open at once.")
@click.option("--retry-after", type=float, default=5.0, show_default=True, help="Retry-After while wandb fails.")
@click.option(
    "--log-level",
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], case_sensitive=False),
    default="INFO",
    show_default=True,
    help="Python logging level.",
)
def wandb_exporter_command(
    http_address: str,
    grpc_address: str,
    layout: str,
    table_key: str,
    wandb_mode: str | None,
    project: str | None,
    entity: str | None,
    scalars: bool,
    state_dir: str,
    step_timeout: float,
    max_open_steps: int,
    max_bytes: int,
    max_runs: int,
    retry_after: float,
    log_level: str,
) -> None:
    """Receive sampled generations over OTLP and write them into their wandb runs."""
    from otel_valgen.wandb_exporter.buffer import BufferLimits
    from otel_valgen.wandb_exporter.server import ExporterServer, ListenError
    from otel_valgen.wandb_exporter.service import ExporterService, ServiceConfig
    from otel_valgen.wandb_exporter.writer import WriterConfig

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not http_address and not grpc_address:
        raise click.UsageError("give --http or --grpc an address")
    try:
        config = ServiceConfig(
            writer=WriterConfig(
                layout=layout,
                table_key=table_key,
                mode=wandb_mode or _default_mode(),
                max_runs=max_runs,
                scalars=scalars,
            ),
            limits=BufferLimits(max_open_steps=max_open_steps, max_bytes=max_bytes, step_timeout_s=step_timeout),
            state_dir=state_dir or None,
            project=project,
            entity=entity,
            retry_after_s=retry_after,
        )
    except ValueError as error:
        raise click.UsageError(str(error)) from error
    service = ExporterService(config)
    server = ExporterServer(service, http=http_address or None, grpc_address=grpc_address or None)
    service.start()
    try:
        server.start()
    except ListenError as error:
        service.stop(teardown=False)
        raise OperationalError(
            str(error), f"stop the process that listens there, or pass --{error.protocol} a free HOST:PORT ('' = off)"
        ) from error
    click.echo(
        f"wandb-exporter: http={http_address or 'off'} grpc={grpc_address or 'off'} "
        f"layout={layout} mode={config.writer.mode}",
        err=True,
    )
    done = threading.Event()

    def _stop(signum: int, _frame: FrameType | None) -> None:
        logging.getLogger("otel_valgen.wandb_exporter").info("signal %d: shutting down", signum)
        done.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    done.wait()
    server.stop()
    service.stop()
    click.echo(f"wandb-exporter stopped: {service.stats()}", err=True)


@click.command("push", cls=ValgenCommand)
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True))
@_wandb_options
@click.option(
    "--count", type=click.IntRange(min=1), default=None, help="k per step (default: the records' sample count)."
)
@click.option("--state-dir", default=None, help="Ledger folder, so that pushing again adds nothing.")
def push_command(
    paths: tuple[str, ...],
    layout: str,
    table_key: str,
    wandb_mode: str | None,
    project: str | None,
    entity: str | None,
    scalars: bool,
    count: int | None,
    state_dir: str | None,
) -> None:
    """Write generations from OTLP files to wandb (backfill).

    Reads every file layout ``otel-valgen show`` reads. Without --wandb-mode offline (or
    WANDB_MODE=offline) it needs wandb credentials: WANDB_API_KEY or ``wandb login``.
    """
    from otel_valgen.wandb_exporter.push import push_paths
    from otel_valgen.wandb_exporter.writer import WriterConfig, WriterUnavailable

    config = WriterConfig(layout=layout, table_key=table_key, mode=wandb_mode or _default_mode(), scalars=scalars)
    try:
        report = push_paths(
            paths,
            config,
            count=count,
            state_dir=state_dir,
            project=project,
            entity=entity,
            on_error=report_read_error,
        )
    except WriterUnavailable as error:
        raise OperationalError(str(error), f"set WANDB_API_KEY (or run `wandb login`), {_OFFLINE_FIX}") from error
    click.echo(f"pushed {report.steps} steps ({report.rows} rows); {report.steps_skipped} already written")
    if report.errors:
        click.echo(f"{len(report.errors)} part(s) of the input could not be read (see the warnings above)", err=True)
        raise SystemExit(1)
