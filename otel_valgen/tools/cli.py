"""The ``otel-valgen`` command line: ``demo``, ``show``, and (with wandb) ``exporter``, ``push``.

Results go to stdout; progress and errors to stderr. Exit codes: 0 success; 1 an operational
error, or some input could not be read (the rest was still used); 2 usage error; 3 nothing
found. Errors are one line (``--verbose`` adds the traceback), see ``otel_valgen.tools._support``.
"""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Sequence

import click
from rich.console import Console

from otel_valgen import contract
from otel_valgen.reader import Generation, ReadError, Record, read_paths
from otel_valgen.selection import StepSelection, select_steps
from otel_valgen.splits import split_warning
from otel_valgen.tools._support import OperationalError, ValgenGroup, report_read_error
from otel_valgen.tools.render import extra_names, render_tables
from otel_valgen.unhooked import unhooked_warning

EXIT_READ_ERRORS = 1
EXIT_NOTHING_FOUND = 3


@click.group(cls=ValgenGroup)
@click.version_option(package_name="otel-valgen")
def main() -> None:
    """Validation generations of training jobs as OpenTelemetry log records."""


def _rollout_columns(generation: Generation) -> dict[str, object]:
    """A rollout's advantage, response length, truncated flag and param version, as its record carries them."""
    attributes = generation.attributes
    return {
        "advantage": attributes.get(contract.ADVANTAGE),
        "response_length": attributes.get(contract.RESPONSE_LENGTH),
        "truncated": attributes.get(contract.TRUNCATED),
        "param_version": attributes.get(contract.PARAM_VERSION),
    }


def _generation_json(selection: StepSelection, extras: Sequence[str]) -> dict[str, object]:
    return {
        "run_id": selection.run_id,
        "step": selection.step,
        "attempt": selection.attempt,
        "attempts": selection.attempts,
        "late": selection.late,
        "seen": selection.seen,
        "kept": selection.kept,
        "score_count": selection.score_count,
        "score_sum": selection.score_sum,
        "score_mean": selection.score_mean,
        "dropped": selection.dropped,
        "split_attempts": selection.split_attempts,
        "sources_unhooked": selection.sources_unhooked,
        "kind": selection.kind,
        "prompts_seen": selection.prompts_seen,
        "prompts_seen_estimated": selection.prompts_seen_estimated,
        "prompts_incomplete": selection.prompts_incomplete,
        "sample_rate": selection.sample_rate,
        "prompts_under_rate": selection.prompts_under_rate,
        "prompts_kept": selection.prompts_kept,
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
                "extra": {name: g.extra.get(name) for name in extras},
                **({"prompt_id": g.prompt_id, **_rollout_columns(g)} if g.kind == contract.KIND_ROLLOUT else {}),
            }
            for g in selection.generations
        ],
    }


def _write_csv(selections: Sequence[StepSelection], extras: Sequence[str]) -> None:
    writer = csv.writer(sys.stdout)
    writer.writerow(
        ["run_id", "step", "rank", "sample_id", "source", "data_source", "input", "output", "score", "ground_truth"]
        + [f"extra.{name}" for name in extras]
    )
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
                    g.ground_truth,
                    *(g.extra.get(name) for name in extras),
                ]
            )


def _describe_runs(runs: dict[str, set[int]], limit: int = 5) -> str:
    """``run-a (steps 1-3), run-b (step 7)``: the runs and steps read, the first ``limit`` runs."""
    parts = []
    for run_id in sorted(runs)[:limit]:
        steps = sorted(runs[run_id])
        if len(steps) == 1:
            parts.append(f"{run_id} (step {steps[0]})")
        elif steps[-1] - steps[0] + 1 == len(steps):
            parts.append(f"{run_id} (steps {steps[0]}-{steps[-1]})")
        else:
            parts.append(f"{run_id} ({len(steps)} steps, {steps[0]} to {steps[-1]})")
    if len(runs) > limit:
        parts.append(f"{len(runs) - limit} more")
    return ", ".join(parts)


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--run", "run_id", help="Only this run id.")
@click.option("--step", type=int, help="Only this step.")
@click.option("--count", type=click.IntRange(min=0), help="k; default: the records' valgen.sample_count.")
@click.option("--seed", type=int, default=42, show_default=True, help="Seed for records lacking a sample key.")
@click.option("--format", "output_format", type=click.Choice(["table", "json", "csv"]), default="table")
@click.option(
    "--kind",
    type=click.Choice(sorted(contract.KINDS)),
    default=contract.KIND_VALIDATION,
    show_default=True,
    help="Which stream: validation generations, or training rollouts (k prompts with all their responses).",
)
def show(
    paths: tuple[str, ...],
    run_id: str | None,
    step: int | None,
    count: int | None,
    seed: int,
    output_format: str,
    kind: str,
) -> None:
    """Read OTLP files or folders, keep the bottom-k per (run, step), and print them.

    ``--kind rollout`` shows training rollouts instead: per step, the k prompts with the
    smallest prompt keys, each with all its responses (docs/rollouts.md).

    Reads OTLP/JSON lines, plain or zstd, and the collector file exporter's length-prefixed
    messages. Of a step validated more than once (resume, retry), the latest complete attempt
    is shown. Collector output is shown as the sampler chose it (its ranked records; late ones never).
    A step whose attempts ran at the same time with no common source (one launch split into
    attempts), or with a source that ran verl's own validation table instead of otel-valgen, is
    named in a warning on stderr.
    """
    errors: list[ReadError] = []
    runs: dict[str, set[int]] = {}

    def report(error: ReadError) -> None:
        errors.append(error)
        report_read_error(error)

    def wanted(record: Record) -> bool:
        runs.setdefault(record.run_id, set()).add(record.step)
        return (run_id is None or record.run_id == run_id) and (step is None or record.step == step)

    records = (r for r in read_paths(paths, report) if wanted(r))
    selections = select_steps(records, count=count, seed=seed, kind=kind)
    for selection in selections:
        if selection.split_attempts:
            click.echo(
                f"warning: {split_warning(selection.run_id, selection.step, selection.split_attempts)}", err=True
            )
        if selection.sources_unhooked:
            click.echo(
                f"warning: {unhooked_warning(selection.run_id, selection.step, selection.sources_unhooked)}", err=True
            )
    extras = extra_names(selections)
    if output_format == "json":
        for selection in selections:
            click.echo(json.dumps(_generation_json(selection, extras), ensure_ascii=False))
    elif output_format == "csv":
        _write_csv(selections, extras)
    else:
        render_tables(selections, Console())
    if not selections:
        filters = " ".join(
            f"--{name} {value}" for name, value in (("run", run_id), ("step", step)) if value is not None
        )
        if filters and runs:
            steps = sum(len(s) for s in runs.values())
            click.echo(
                f"no {kind} generations match {filters}; the input holds {len(runs)} run(s) and "
                f"{steps} step(s): {_describe_runs(runs)}",
                err=True,
            )
        else:
            click.echo(f"no {kind} generations found in " + ", ".join(paths), err=True)
        sys.exit(EXIT_NOTHING_FOUND)
    if errors:
        click.echo(f"{len(errors)} part(s) of the input could not be read (see the warnings above)", err=True)
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
    try:
        import ray  # noqa: F401 (only to say what is missing before the demo starts)
    except ImportError as error:
        raise OperationalError(
            "the demo runs on Ray, which is not installed", "install it: pip install 'otel-valgen[ray]'"
        ) from error
    from otel_valgen.tools.demo import run_demo

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

    from otel_valgen.tools.resend import resend_paths, resolve_target

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
        raise OperationalError(
            "some records were not sent (see the errors above)",
            f"check that the collector at {endpoint} is up and accepts them (a token goes in "
            "OTEL_EXPORTER_OTLP_HEADERS), then run resend again: it sends only what was not accepted",
        )


def _register_optional_commands() -> None:
    try:
        from otel_valgen.tools.exporter_commands import exporter_command, push_command, wandb_exporter_command
    except ImportError:  # the exporter is optional
        return
    main.add_command(exporter_command)
    main.add_command(wandb_exporter_command)
    main.add_command(push_command)


_register_optional_commands()


if __name__ == "__main__":
    main()
