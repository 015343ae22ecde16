"""Rich tables of selected steps, and the cells and columns ``show``, ``show --prompt`` and ``diff`` share."""

from __future__ import annotations

import json
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

from otel_valgen import contract, tokens, trajectories
from otel_valgen.conversations import ORIGINAL_LENGTH
from otel_valgen.distinct import PROMPTS_SEEN_ERROR
from otel_valgen.partials import samplers_of
from otel_valgen.reader import Generation
from otel_valgen.selection import StepSelection

ROLLOUT_COLUMNS = ("prompt_id", "advantage", "response_length", "truncated", "param_version")
"""The columns a rollout row has beyond a validation row, in the order ``show`` prints them."""
LENGTH_COLUMNS = ("response_length", "truncated")
"""A validation row's response size, when the caller gave it (verl's rows: docs/verl.md)."""

LENGTH_TOKENS = "tokens"
LENGTH_CHARS = "chars"


def extra_names(selections: Sequence[StepSelection]) -> list[str]:
    """The extra columns of the shown generations: every name any of them has, sorted."""
    return sorted({name for selection in selections for g in selection.generations for name in g.extra})


def rollout_columns(generation: Generation) -> dict[str, object]:
    """A rollout's prompt id, advantage, response length, truncated flag and param version, as its record has them."""
    attributes = generation.attributes
    return {
        "prompt_id": generation.prompt_id,
        "advantage": attributes.get(contract.ADVANTAGE),
        "response_length": attributes.get(contract.RESPONSE_LENGTH),
        "truncated": attributes.get(contract.TRUNCATED),
        "param_version": attributes.get(contract.PARAM_VERSION),
    }


def kind_columns(generation: Generation) -> dict[str, object]:
    """The columns of the generation's kind beyond the common ones: ``ROLLOUT_COLUMNS`` or ``LENGTH_COLUMNS``."""
    columns = rollout_columns(generation)
    if generation.kind == contract.KIND_ROLLOUT:
        return columns
    return {name: columns[name] for name in LENGTH_COLUMNS}


def has_lengths(selections: Sequence[StepSelection]) -> bool:
    """Whether any shown generation carries a response length (validation tables then show the length columns)."""
    return any(contract.RESPONSE_LENGTH in g.attributes for s in selections for g in s.generations)


def generation_length(generation: Generation) -> tuple[int, str]:
    """(length, unit): the record's response length in tokens when it has one, else the output's characters."""
    tokens = generation.attributes.get(contract.RESPONSE_LENGTH)
    if isinstance(tokens, int) and not isinstance(tokens, bool):
        return tokens, LENGTH_TOKENS
    return len(generation.output), LENGTH_CHARS


def input_cell(generation: Generation) -> Text:
    """A generation's input for a table row, never read as markup; a conversation's on one line (``⏎``)."""
    return Text(one_line(generation.input) if generation.input_messages is not None else generation.input)


def output_cell(generation: Generation) -> Text:
    """A generation's output for a table row, never read as markup; a conversation's on one line (``⏎``)."""
    return Text(one_line(generation.output) if generation.output_messages is not None else generation.output)


def one_line(text: str) -> str:
    """``text`` with its line breaks shown as `` ⏎ ``, so a table row stays one line."""
    return text.replace("\n", " ⏎ ")


def cell(value: object) -> str:
    """A value as a table cell: floats to 3 significant digits, bools in lower case, None empty."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def _prompts(selection: StepSelection) -> str:
    """A rollout step's prompts and responses kept of seen (an estimate with its error), and the incomplete ones."""
    seen = "?" if selection.prompts_seen is None else str(selection.prompts_seen)
    if selection.prompts_seen_estimated:
        seen = f"≈{seen} (±{PROMPTS_SEEN_ERROR:.0%})"
    text = f" · prompts {selection.prompts_kept} of {seen} · responses {selection.kept} of {selection.seen}"
    if selection.sample_rate is not None:
        under = "?" if selection.prompts_under_rate is None else selection.prompts_under_rate
        text += f" · rate {selection.sample_rate:g} ({under} prompts under it)"
    if selection.prompts_incomplete:
        text += f" · {selection.prompts_incomplete} may lack responses (a source did not end)"
    return text


def step_title(selection: StepSelection) -> str:
    """``run R · step S · kept k of n`` (rollouts: ``prompts K of N · responses k of n``) and the step's notes."""
    title = f"run {selection.run_id} · step {selection.step}"
    if selection.prompts_kept is None:
        title += f" · kept {selection.kept} of {selection.seen}"
    else:
        title += _prompts(selection)
    if selection.score_mean is not None:
        title += f" · mean score {selection.score_mean:.3g} over {selection.score_count}"
    if selection.attempts > 1:
        title += f" · attempt {selection.attempt} (of {selection.attempts})"
    if selection.late:
        title += f" · {selection.late} late"
    samplers = sorted(samplers_of(selection.summary))
    if len(samplers) > 1:  # a re-routed step, closed in parts (otel_valgen.partials)
        title += f" · merged from samplers {', '.join(samplers)}"
    missing = selection.summary.get(contract.MISSING) if selection.summary else None
    if isinstance(missing, int) and missing > 0:
        title += f" · {missing} missing"
    return title


def step_caption(selection: StepSelection) -> str | None:
    """The table's caption: figures per data source, over every trajectory, over every response's tokens; or None."""
    captions = (
        data_source_caption(selection),
        trajectories.caption(selection.trajectories),
        tokens.caption(selection.mismatch),
    )
    lines = [line for line in captions if line]
    return "\n".join(lines) or None


def data_source_caption(selection: StepSelection) -> str | None:
    """Each data source's kept of seen and mean score (``valgen.data_sources``), None when the step has none."""
    if not selection.data_sources:
        return None
    head = "k per data source" if selection.by_data_source else "by data source"
    parts = []
    for figure in selection.data_sources:
        text = f"{figure.data_source or '(none)'} kept {figure.kept} of {figure.seen}"
        if figure.score_mean is not None:
            text += f", mean {figure.score_mean:.3g}"
        parts.append(text)
    return f"{head}: " + " · ".join(parts)


def _rollout_cells(generation: Generation) -> list[str]:
    columns = rollout_columns(generation)
    return [cell(columns[name]) for name in ROLLOUT_COLUMNS]


def step_json(selection: StepSelection, extras: Sequence[str]) -> dict[str, object]:
    """``show --format json``'s object of one step: its figures, then its generations (``extras``: every step's)."""
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
        "sample_by": contract.SAMPLE_BY_DATA_SOURCE if selection.by_data_source else contract.SAMPLE_BY_STEP,
        "extremes": selection.extremes,
        "mismatched": selection.mismatched,
        "trajectories": selection.trajectories,
        "mismatch": selection.mismatch,
        "data_sources": (
            [
                {
                    "data_source": figure.data_source,
                    "seen": figure.seen,
                    "kept": figure.kept,
                    "score_count": figure.score_count,
                    "score_sum": figure.score_sum,
                    "score_mean": figure.score_mean,
                }
                for figure in selection.data_sources
            ]
            if selection.data_sources is not None
            else None
        ),
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
                "slots": list(g.slots) if g.slots is not None else None,
                "extra": {name: g.extra.get(name) for name in extras},
                "input_messages": g.input_messages,
                "output_messages": g.output_messages,
                **kind_columns(g),
            }
            for g in selection.generations
        ],
    }


def render_tables(selections: Sequence[StepSelection], console: Console, width: int = 60) -> None:
    """Print one rich table per (run, step), with the extra columns of every shown step.

    Rollout steps add the prompt id (after the rank) and the advantage, response length,
    truncated flag and param version (after the score); validation steps add the response length
    and truncated flag when a shown generation has them. The data source (after the source) and the
    ground truth (after the output) are shown when a shown generation has one, and the slots
    (after the rank: keyed, lowest, highest, mismatched) when a shown step keeps extremes or the
    most mismatched.
    """
    extras = extra_names(selections)
    lengths = has_lengths(selections)
    shown = [g for selection in selections for g in selection.generations]
    sources = any(g.data_source is not None for g in shown)
    truths = any(g.ground_truth is not None for g in shown)
    slots = any(g.slots is not None for g in shown)
    for selection in selections:
        rollout = selection.kind == contract.KIND_ROLLOUT
        table = Table(title=step_title(selection), caption=step_caption(selection), show_lines=False)
        table.add_column("#", justify="right", min_width=2, no_wrap=True)
        if slots:
            table.add_column("slot", no_wrap=True)
        if rollout:
            table.add_column("prompt", overflow="ellipsis", no_wrap=True, max_width=width // 3)
        table.add_column("source", overflow="ellipsis", no_wrap=True, max_width=14)
        if sources:
            table.add_column("data source", overflow="ellipsis", no_wrap=True, max_width=width // 3)
        for column in ("input", "output"):
            table.add_column(column, overflow="ellipsis", no_wrap=True, max_width=width)
        if truths:
            table.add_column("truth", overflow="ellipsis", no_wrap=True, max_width=width // 3)
        table.add_column("score", justify="right", min_width=5, no_wrap=True)
        if rollout:
            for column in ("advantage", "length", "truncated", "param"):
                table.add_column(column, justify="right", no_wrap=True)
        elif lengths:
            for column in ("length", "truncated"):
                table.add_column(column, justify="right", no_wrap=True)
        for name in extras:
            table.add_column(name, justify="right", overflow="ellipsis", no_wrap=True, max_width=width // 2)
        for rank, g in enumerate(selection.generations, start=1):
            score = "" if g.score is None else f"{g.score:.3g}"
            rollout_cells = _rollout_cells(g) if rollout else []
            length_cells = [cell(kind_columns(g)[n]) for n in LENGTH_COLUMNS] if lengths and not rollout else []
            prompt = rollout_cells[:1]
            table.add_row(
                str(rank),
                *([cell(g.slots_text)] if slots else []),
                *prompt,
                g.source or "",
                *([cell(g.data_source)] if sources else []),
                input_cell(g),
                output_cell(g),
                *([cell(g.ground_truth)] if truths else []),
                score,
                *rollout_cells[1:],
                *length_cells,
                *(cell(g.extra.get(n)) for n in extras),
            )
        console.print(table)


def _part_lines(part: dict[str, object]) -> list[Text]:
    """One message part as lines: text, thinking, a tool call (name and arguments), a tool result, a cut mark."""
    kind = part.get("type")
    if kind == "tool_call":
        arguments = part.get("arguments")
        shown = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
        line = Text("  → ", style="bold cyan").append(f"{part.get('name', '')}", style="bold").append(f"({shown})")
        lines = [line.append(f"  #{part.get('id', '')}", style="dim")]
    elif kind == "tool_call_response":
        response = part.get("response")
        shown = response if isinstance(response, str) else json.dumps(response, ensure_ascii=False)
        lines = [Text("  ← ", style="bold cyan").append(shown)]
    elif kind == "reasoning":
        lines = [Text(f"  (thinking) {part.get('content', '')}", style="dim italic")]
    elif kind == "uri":
        lines = [Text(f"  <{part.get('modality', 'media')}: {part.get('uri', part.get('mime_type', 'inline data'))}>")]
    else:
        content = part.get("content", "")
        lines = [Text("  " + (content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)))]
    if isinstance(part.get(ORIGINAL_LENGTH), int):
        lines.append(Text(f"  ✂ cut from {part[ORIGINAL_LENGTH]} bytes (head and tail kept)", style="red"))
    return lines


def conversation_lines(messages: Sequence[dict[str, object]]) -> list[Text]:
    """A conversation turn by turn: ``[turn n] role`` (an assistant message starts a turn), then its parts."""
    lines: list[Text] = []
    turn = 0
    for message in messages:
        role = str(message.get("role", "unknown"))
        turn += role == "assistant"
        header = Text(f"[turn {turn}] " if role == "assistant" else "", style="dim").append(role, style="bold magenta")
        parts = message.get("parts")
        calls = [p for p in parts if isinstance(p, dict)] if isinstance(parts, list) else []
        if role == "tool" and calls and calls[0].get("id"):
            header.append(f" #{calls[0]['id']}", style="dim")
        lines.append(header)
        for part in calls:
            lines.extend(_part_lines(part))
    return lines


def render_conversations(selections: Sequence[StepSelection], console: Console) -> None:
    """Print every shown generation that carries chat messages as a conversation, prompt then turns."""
    for selection in selections:
        for rank, g in enumerate(selection.generations, start=1):
            if g.input_messages is None and g.output_messages is None:
                continue
            score = "" if g.score is None else f" · score {g.score:.3g}"
            console.rule(f"run {selection.run_id} · step {selection.step} · #{rank} · {g.sample_id}{score}")
            for messages, text in ((g.input_messages, g.input), (g.output_messages, g.output)):
                for line in conversation_lines(messages) if messages is not None else [Text(text)]:
                    console.print(line, soft_wrap=True)
