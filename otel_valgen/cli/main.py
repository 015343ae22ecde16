"""The ``otel-valgen`` command line: ``demo``, ``show``, ``diff``, ``resend``, and (with wandb) ``exporter``, ``push``.

Results go to stdout; progress and errors to stderr. Exit codes: 0 success; 1 an operational
error, or some input could not be read (the rest was still used); 2 usage error; 3 nothing
found. Errors are one line (``--verbose`` adds the traceback), see ``otel_valgen.cli._support``.
"""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Sequence
from typing import NoReturn

import click
from rich.console import Console

from otel_valgen import contract
from otel_valgen.cli import diff as diff_module
from otel_valgen.cli import history, tokens_view
from otel_valgen.cli._inputs import Input, describe_runs
from otel_valgen.cli._support import OperationalError, ValgenGroup
from otel_valgen.cli.render import (
    LENGTH_COLUMNS,
    ROLLOUT_COLUMNS,
    extra_names,
    kind_columns,
    render_conversations,
    render_tables,
    step_json,
)
from otel_valgen.reader import Record
from otel_valgen.selection import StepSelection

EXIT_NOTHING_FOUND = 3


@click.group(cls=ValgenGroup)
@click.version_option(package_name="otel-valgen")
def main() -> None:
    """Validation generations of training jobs as OpenTelemetry log records."""


def _nothing_found(line: str) -> NoReturn:
    click.echo(line, err=True)
    sys.exit(EXIT_NOTHING_FOUND)


_KIND_OPTION = click.option(
    "--kind",
    type=click.Choice(sorted(contract.KINDS)),
    help="Which stream: validation generations (the default), or training rollouts (k prompts with all their "
    "responses). With --prompt and no --kind, both.",
)
_FORMAT_OPTION = click.option(
    "--format", "output_format", type=click.Choice(["table", "json", "csv"]), default="table", show_default=True
)
_COUNT_OPTION = click.option(
    "--count", type=click.IntRange(min=0), help="k; default: the records' valgen.sample_count."
)
_SEED_OPTION = click.option(
    "--seed", type=int, default=42, show_default=True, help="Seed for records lacking a sample key."
)


def _write_csv(selections: Sequence[StepSelection], extras: Sequence[str], kind: str) -> None:
    """One row per generation; after the ground truth, the columns of its kind (``render.kind_columns``)."""
    writer = csv.writer(sys.stdout)
    kind_names = list(ROLLOUT_COLUMNS if kind == contract.KIND_ROLLOUT else LENGTH_COLUMNS)
    writer.writerow(
        ["run_id", "step", "rank", "slots", "sample_id", "source", "data_source", "input", "output", "score"]
        + ["ground_truth"]
        + kind_names
        + [f"extra.{name}" for name in extras]
    )
    for selection in selections:
        for rank, g in enumerate(selection.generations, start=1):
            writer.writerow(
                [
                    selection.run_id,
                    selection.step,
                    rank,
                    g.slots_text,
                    g.sample_id,
                    g.source,
                    g.data_source,
                    g.input,
                    g.output,
                    g.score,
                    g.ground_truth,
                    *(kind_columns(g)[name] for name in kind_names),
                    *(g.extra.get(name) for name in extras),
                ]
            )


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--run", "run_id", help="Only this run id.")
@click.option("--step", type=int, help="Only this step.")
@click.option(
    "--prompt",
    help="Only this prompt, at every step: a sample id (with or without /<i> and @<tag>) or a rollout prompt id.",
)
@click.option(
    "--conversations",
    is_flag=True,
    help="After each table, print every kept generation that has chat messages as a conversation.",
)
@click.option(
    "--tokens",
    "tokens_of",
    metavar="SAMPLE_ID",
    help="Print one kept response token by token, coloured by its log-probability difference "
    "(--format csv/json: the per-token table).",
)
@_COUNT_OPTION
@_SEED_OPTION
@_FORMAT_OPTION
@_KIND_OPTION
def show(
    paths: tuple[str, ...],
    run_id: str | None,
    step: int | None,
    prompt: str | None,
    conversations: bool,
    tokens_of: str | None,
    count: int | None,
    seed: int,
    output_format: str,
    kind: str | None,
) -> None:
    """Read OTLP files or folders, keep the bottom-k per (run, step), and print them.

    ``--kind rollout`` shows training rollouts instead: per step, the k prompts with the
    smallest prompt keys, each with all its responses (docs/rollouts.md).

    ``--prompt ID`` prints one prompt's kept rows at every step, in step order, with score and
    length, of both kinds unless ``--kind`` names one (otel_valgen/cli/history.py).

    ``--conversations`` prints each kept agentic trajectory turn by turn (role, tool calls with
    their arguments, tool results, cut marks); ``--format json`` always gives the messages.

    ``--tokens SAMPLE_ID`` prints a kept response that carries per-token data, each token coloured
    by how far the trainer's log-probability is from the rollout engine's, masked tokens struck
    through (otel_valgen/cli/tokens_view.py); with ``--format csv|json`` its per-token table.

    Reads OTLP/JSON lines, plain or zstd, and the collector file exporter's length-prefixed
    messages. Of a step validated more than once (resume, retry), the latest complete attempt
    is shown. Collector output is shown as the sampler chose it (its ranked records; late ones never).
    A step whose attempts ran at the same time with no common source (one launch split into
    attempts), or with a source that ran verl's own validation table instead of otel-valgen, is
    named in a warning on stderr.
    """

    def wanted(record: Record) -> bool:
        return (run_id is None or record.run_id == run_id) and (step is None or record.step == step)

    source = Input(paths, wanted)
    kinds = [kind] if kind else [contract.KIND_VALIDATION]
    if kind is None and (prompt is not None or tokens_of is not None):  # either kind may hold the id
        kinds.append(contract.KIND_ROLLOUT)
    selections = source.select(kinds, count, seed)
    if tokens_of is not None:
        _show_tokens(tokens_of, selections, output_format)
        source.finish()
        return
    if prompt is not None:
        _show_prompt(prompt, selections, output_format)
    else:
        _show_steps(selections, output_format, kinds[0])
    if conversations and output_format == "table":
        render_conversations(selections, Console())
    if not selections:
        filters = {"run": run_id, "step": step}
        runs = {run_id} if run_id is not None else None
        steps = {step} if step is not None else None
        _nothing_found(source.census.nothing_found(" or ".join(kinds), paths, filters, runs, steps))
    if prompt is not None and not any(history.matches(g, prompt) for s in selections for g in s.generations):
        _nothing_found(f"prompt {prompt} was never kept: {history.steps_kept([], selections)}")
    source.finish()


def _show_steps(selections: Sequence[StepSelection], output_format: str, kind: str) -> None:
    extras = extra_names(selections)
    if output_format == "json":
        for selection in selections:
            click.echo(json.dumps(step_json(selection, extras), ensure_ascii=False))
    elif output_format == "csv":
        _write_csv(selections, extras, kind)
    else:
        render_tables(selections, Console())


def _show_tokens(sample_id: str, selections: Sequence[StepSelection], output_format: str) -> None:
    """The kept responses named ``sample_id`` that carry per-token data (each step's), or why there are none."""
    named = [(s, g) for s in selections for g in s.generations if history.matches(g, sample_id)]
    if not named:
        _nothing_found(f"{sample_id} is not a kept generation in what was read")
    found = [(g, read) for _, g in named if (read := tokens_view.response_tokens(g)) is not None]
    if not found:
        _nothing_found(
            f"{sample_id} carries no per-token data: log_rollouts(..., tokens=...) sends it "
            "(verl: with actor_rollout_ref.rollout.calculate_log_probs=True)"
        )
    console = Console()
    for generation, read in found:
        rows = tokens_view.token_rows(read)
        if output_format == "json":
            line = {"run_id": generation.run_id, "step": generation.step, "sample_id": generation.sample_id}
            line |= {"cut_from": read.cut_from, "cut_count": read.cut_count, "tokens": rows}
            click.echo(json.dumps(line, ensure_ascii=False))
        elif output_format == "csv":
            tokens_view.write_token_csv(rows, sys.stdout)
        else:
            tokens_view.render_tokens(generation, read, console)


def _show_prompt(prompt: str, selections: Sequence[StepSelection], output_format: str) -> None:
    rows = history.prompt_rows(selections, prompt)
    if not rows:
        return
    if output_format == "json":
        for step in history.history_json(rows):
            click.echo(json.dumps(step, ensure_ascii=False))
    elif output_format == "csv":
        history.write_history_csv(rows, sys.stdout)
    else:
        history.render_history(rows, prompt, selections, Console())


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--steps", "steps", nargs=2, type=int, help="Compare two steps of one run: A B.")
@click.option("--run", "run_id", help="The run of --steps (needed when the input holds several).")
@click.option("--runs", "runs", nargs=2, help="Compare two runs at one step (--step): R1 R2.")
@click.option("--step", type=int, help="The step of --runs.")
@_COUNT_OPTION
@_SEED_OPTION
@_FORMAT_OPTION
@click.option(
    "--kind",
    type=click.Choice(sorted(contract.KINDS)),
    default=contract.KIND_VALIDATION,
    show_default=True,
    help="Which stream both sides come from.",
)
def diff(
    paths: tuple[str, ...],
    steps: tuple[int, int] | None,
    run_id: str | None,
    runs: tuple[str, str] | None,
    step: int | None,
    count: int | None,
    seed: int,
    output_format: str,
    kind: str,
) -> None:
    """Compare two steps of one run (--steps A B [--run R]) or one step of two runs (--runs R1 R2 --step S).

    Each side is the step as ``show`` selects it. Rows match by sample id without its tag (for
    rollouts: prompt id and response index); printed: the ids both hold, outputs side by side
    with score and length deltas (B - A) and whether the output changed, then the ids only one
    side holds, and a summary line (otel_valgen/cli/diff.py).
    """
    if (steps is None) == (runs is None):
        raise click.UsageError("give either --steps A B (two steps of one run) or --runs R1 R2 --step S")
    if runs is not None and (step is None or run_id is not None):
        raise click.UsageError("--runs R1 R2 needs --step S (and takes no --run)")
    if steps is not None and step is not None:
        raise click.UsageError("--steps A B takes no --step (use --runs R1 R2 --step S to compare runs)")
    wanted_runs = set(runs) if runs is not None else ({run_id} if run_id is not None else None)
    wanted_steps = set(steps) if steps is not None else {step}

    def wanted(record: Record) -> bool:
        return (wanted_runs is None or record.run_id in wanted_runs) and record.step in wanted_steps

    source = Input(paths, wanted)
    selections = source.select([kind], count, seed)
    if steps is not None:
        held = sorted({s.run_id for s in selections})
        if run_id is None and len(held) > 1:
            raise click.UsageError(
                f"the input holds steps {steps[0]}/{steps[1]} of {len(held)} runs ({', '.join(held)}); "
                "pick one with --run"
            )
        run = run_id if run_id is not None else (held[0] if held else "")
        keys = [(run, steps[0]), (run, steps[1])]
        labels = [f"step {steps[0]}", f"step {steps[1]}"]
    else:
        assert runs is not None  # checked above
        assert step is not None
        keys = [(runs[0], step), (runs[1], step)]
        labels = [f"run {runs[0]}", f"run {runs[1]}"]
    a, b = diff_module.sides(selections, keys)
    if a is None or b is None:
        missing = " and ".join(f"run {r} step {s}" for (r, s), side in zip(keys, (a, b), strict=True) if side is None)
        every = source.census.runs()
        held_line = f"; the input holds {describe_runs(every)}" if every else f" in {', '.join(paths)}"
        _nothing_found(f"no {kind} generations of {missing}{held_line}")
    result = diff_module.diff_steps(a, b, labels[0], labels[1])
    if output_format == "json":
        click.echo(json.dumps(diff_module.diff_json(result), ensure_ascii=False))
    elif output_format == "csv":
        diff_module.write_diff_csv(result, sys.stdout)
        click.echo(result.summary_line(), err=True)
    else:
        diff_module.render_diff(result, Console())
    source.finish()


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
    from otel_valgen.cli.demo import run_demo

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

    from otel_valgen.cli.resend import resend_paths, resolve_target

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
        from otel_valgen.cli.exporter_commands import exporter_command, push_command, wandb_exporter_command
    except ImportError:  # the exporter is optional
        return
    main.add_command(exporter_command)
    main.add_command(wandb_exporter_command)
    main.add_command(push_command)


_register_optional_commands()


if __name__ == "__main__":
    main()
