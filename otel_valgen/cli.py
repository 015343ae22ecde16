"""The ``otel-valgen`` command line: ``demo``, ``show``, and (with wandb) ``wandb-exporter``, ``push``.

Results go to stdout; progress and errors to stderr. Exit codes: 0 success, 1 some input
could not be read (the rest was still used), 2 usage error, 3 nothing found.
"""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Sequence

import click
from rich.console import Console
from rich.table import Table

from otel_valgen.reader import ReadError, read_paths
from otel_valgen.selection import StepSelection, select_steps

EXIT_READ_ERRORS = 1
EXIT_NOTHING_FOUND = 3


@click.group()
@click.version_option(package_name="otel-valgen")
def main() -> None:
    """Validation generations of training jobs as OpenTelemetry log records."""


def _generation_json(selection: StepSelection) -> dict[str, object]:
    return {
        "run_id": selection.run_id,
        "step": selection.step,
        "attempt": selection.attempt,
        "attempts": selection.attempts,
        "late": selection.late,
        "seen": selection.seen,
        "kept": selection.kept,
        "generations": [
            {
                "sample_id": g.sample_id,
                "sample_key": g.sample_key,
                "input": g.input,
                "output": g.output,
                "score": g.score,
                "ground_truth": g.ground_truth,
                "data_source": g.data_source,
                "source": g.source,
            }
            for g in selection.generations
        ],
    }


def render_tables(selections: Sequence[StepSelection], console: Console, width: int = 60) -> None:
    """Print one rich table per (run, step)."""
    for selection in selections:
        title = f"run {selection.run_id} · step {selection.step} · kept {selection.kept} of {selection.seen}"
        if selection.attempts > 1:
            title += f" · attempt {selection.attempt} (of {selection.attempts})"
        if selection.late:
            title += f" · {selection.late} late"
        table = Table(title=title, show_lines=False)
        table.add_column("#", justify="right", min_width=2, no_wrap=True)
        table.add_column("source", overflow="ellipsis", no_wrap=True, max_width=14)
        for column in ("input", "output"):
            table.add_column(column, overflow="ellipsis", no_wrap=True, max_width=width)
        table.add_column("score", justify="right", min_width=5, no_wrap=True)
        for rank, g in enumerate(selection.generations, start=1):
            score = "" if g.score is None else f"{g.score:.3g}"
            table.add_row(str(rank), g.source or "", g.input, g.output, score)
        console.print(table)


def _write_csv(selections: Sequence[StepSelection]) -> None:
    writer = csv.writer(sys.stdout)
    writer.writerow(["run_id", "step", "rank", "sample_id", "source", "data_source", "input", "output", "score"])
    for selection in selections:
        for rank, g in enumerate(selection.generations, start=1):
            writer.writerow(
                [
                    selection.run_id,
                    selection.step,
                    rank,
                    g.sample_id,
                    g.source,
                    g.data_source,
                    g.input,
                    g.output,
                    g.score,
                ]
            )


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--run", "run_id", help="Only this run id.")
@click.option("--step", type=int, help="Only this step.")
@click.option("--count", type=click.IntRange(min=0), help="k; default: the records' valgen.sample_count.")
@click.option("--seed", type=int, default=42, show_default=True, help="Seed for records lacking a sample key.")
@click.option("--format", "output_format", type=click.Choice(["table", "json", "csv"]), default="table")
def show(
    paths: tuple[str, ...], run_id: str | None, step: int | None, count: int | None, seed: int, output_format: str
) -> None:
    """Read OTLP-JSON files or folders, keep the bottom-k per (run, step), and print them.

    Of a step validated more than once (resume, retry), the latest complete attempt is shown.
    Collector output is shown as the sampler chose it (its ranked records; late ones never).
    """
    errors: list[ReadError] = []

    def report(error: ReadError) -> None:
        errors.append(error)
        where = f"{error.path}:{error.line}" if error.line else error.path
        click.echo(f"warning: {where}: {error.message}", err=True)

    records = (
        r
        for r in read_paths(paths, report)
        if (run_id is None or r.run_id == run_id) and (step is None or r.step == step)
    )
    selections = select_steps(records, count=count, seed=seed)
    if output_format == "json":
        for selection in selections:
            click.echo(json.dumps(_generation_json(selection), ensure_ascii=False))
    elif output_format == "csv":
        _write_csv(selections)
    else:
        render_tables(selections, Console())
    if not selections:
        click.echo("no validation generations found in " + ", ".join(paths), err=True)
        sys.exit(EXIT_NOTHING_FOUND)
    if errors:
        click.echo(f"{len(errors)} line(s) could not be read", err=True)
        sys.exit(EXIT_READ_ERRORS)


@main.command()
@click.option("--steps", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--count", type=click.IntRange(min=1), default=8, show_default=True, help="k, kept per step.")
@click.option("--prompts", type=click.IntRange(min=1), default=512, show_default=True)
@click.option("--responses", type=click.IntRange(min=1), default=2, show_default=True, help="Responses per prompt.")
@click.option("--workers", type=click.IntRange(min=1), default=3, show_default=True, help="Generation actors.")
@click.option(
    "--directory", type=click.Path(), help="Embedded sink folder (default: OTEL_VALGEN_DIR or ./valgen-data)."
)
def demo(steps: int, count: int, prompts: int, responses: int, workers: int, directory: str | None) -> None:
    """Simulate verl's fully-async validation on a local Ray cluster and show what was sampled."""
    from otel_valgen.demo import run_demo

    sys.exit(run_demo(steps, count, prompts, responses, workers, directory))


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True))
@click.option(
    "--endpoint",
    help="OTLP/HTTP base URL of the collector (/v1/logs is appended). Default: "
    "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT as it is, else OTEL_EXPORTER_OTLP_ENDPOINT.",
)
def resend(paths: tuple[str, ...], endpoint: str | None) -> None:
    """Replay OTLP-JSON files (the spool of records a collector did not accept) to a collector.

    Headers, TLS certificate files, compression, timeout and protocol (http/protobuf or
    http/json) come from the OTEL_EXPORTER_OTLP_* variables, as in the library. Progress is
    kept in <file>.resent, so running it again sends only what was spooled since; nothing is
    sent twice.
    """
    from pathlib import Path

    from otel_valgen.resend import resend_paths, resolve_target

    try:
        target = resolve_target(endpoint)
    except ValueError as error:
        raise click.UsageError(str(error)) from None
    click.echo(f"replaying to {target.url} ({target.protocol})", err=True)
    files = [p for raw in paths for p in ([Path(raw)] if Path(raw).is_file() else sorted(Path(raw).rglob("*.jsonl")))]
    failed = False
    for path in files:
        result = resend_paths([path], target, lambda message: None)
        for failure in result.failures:
            click.echo(f"error: {failure}", err=True)
        click.echo(f"{path}: {result.records_sent} record(s) in {result.lines_sent} request(s) sent", err=True)
        failed = failed or bool(result.failures)
    if failed:
        sys.exit(EXIT_READ_ERRORS)


def _register_optional_commands() -> None:
    try:
        from otel_valgen.wandb_exporter.cli import push_command, wandb_exporter_command
    except ImportError:  # the wandb exporter is optional
        return
    main.add_command(wandb_exporter_command)
    main.add_command(push_command)


_register_optional_commands()


if __name__ == "__main__":
    main()
