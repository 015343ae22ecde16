"""``otel-valgen show --prompt ID``: one prompt's kept rows at every step, in step order.

``ID`` is a validation sample id, with or without its ``/<i>`` and ``@<tag>`` suffixes, or a
rollout prompt id. A row matches when ``ID`` is its sample id, its sample id without the tag
(``<base>/<i>``), its base (every response to the prompt), or its ``valgen.prompt_id``. Rows
come from the steps as ``show`` selects them (the attempt shown, the bottom-k kept), so a prompt
is listed at the steps where it was kept. A row whose output is a conversation is compared turn
by turn with the same response's row at the previous step where it was kept
(``otel_valgen.cli.turns``).
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO

from rich.console import Console
from rich.table import Table

from otel_valgen import contract
from otel_valgen.cli.render import cell, generation_length, input_cell, kind_columns, output_cell
from otel_valgen.cli.turns import TurnDiff, compare_turns
from otel_valgen.reader import Generation
from otel_valgen.sampling import split_sample_id, untagged
from otel_valgen.selection import StepSelection

__all__ = ["PromptRow", "history_json", "matches", "prompt_rows", "render_history", "steps_kept", "write_history_csv"]

_KIND_ORDER = {contract.KIND_VALIDATION: 0, contract.KIND_ROLLOUT: 1}


@dataclass(frozen=True)
class PromptRow:
    """One kept generation of the prompt: its step's selection and its rank there (1 is the smallest key)."""

    selection: StepSelection
    rank: int
    generation: Generation
    # The row's conversation against the same response's at the previous step where it was kept
    # (otel_valgen.cli.turns), None without one on either side.
    turns: TurnDiff | None = None


def matches(generation: Generation, prompt: str) -> bool:
    """Whether ``generation`` is a row of ``prompt`` (sample id, untagged id, base id or rollout prompt id)."""
    sample_id = generation.sample_id
    return prompt in (sample_id, untagged(sample_id), split_sample_id(sample_id)[0], generation.prompt_id)


def prompt_rows(selections: Sequence[StepSelection], prompt: str) -> list[PromptRow]:
    """The rows of ``prompt`` in ``selections``, by run, then step, then kind (validation first), then rank."""
    ordered = sorted(selections, key=lambda s: (s.run_id, s.step, _KIND_ORDER.get(s.kind, 2), s.kind))
    rows = []
    previous: dict[tuple[str, str, str], Generation] = {}  # (run, kind, response) -> its row at the last step
    for selection in ordered:
        for rank, g in enumerate(selection.generations, start=1):
            if not matches(g, prompt):
                continue
            lane = (selection.run_id, selection.kind, untagged(g.sample_id))
            before = previous.get(lane)
            turns = None
            if before is not None and before.output_messages is not None and g.output_messages is not None:
                turns = compare_turns(before.output_messages, g.output_messages)
            previous[lane] = g
            rows.append(PromptRow(selection, rank, g, turns))
    return rows


def steps_kept(rows: Sequence[PromptRow], selections: Sequence[StepSelection]) -> str:
    """``run r: validation 3 of 5 steps, rollout 1 of 5``: where the prompt was kept, of the steps read."""
    parts = []
    for run_id in sorted({s.run_id for s in selections}):
        per_kind = []
        for kind in sorted({s.kind for s in selections}, key=lambda k: _KIND_ORDER.get(k, 2)):
            read = {s.step for s in selections if s.run_id == run_id and s.kind == kind}
            kept = {r.selection.step for r in rows if r.selection.run_id == run_id and r.selection.kind == kind}
            if read:
                per_kind.append(f"{kind} {len(kept)} of {len(read)} step(s)")
        parts.append(f"run {run_id}: {', '.join(per_kind)}")
    return "; ".join(parts)


def _row_json(row: PromptRow) -> dict[str, object]:
    g = row.generation
    length, unit = generation_length(g)
    return {
        "rank": row.rank,
        "sample_id": g.sample_id,
        "sample_key": g.sample_key,
        "input": g.input,
        "output": g.output,
        "score": g.score,
        "length": length,
        "length_unit": unit,
        "ground_truth": g.ground_truth,
        "data_source": g.data_source,
        "source": g.source,
        "extra": dict(sorted(g.extra.items())),
        "output_messages": g.output_messages,
        "turns_vs_previous": row.turns.as_json() if row.turns is not None else None,
        **kind_columns(g),
    }


def history_json(rows: Sequence[PromptRow]) -> list[dict[str, object]]:
    """One object per (run, step, kind) holding the prompt, in step order, with its rows."""
    out: list[dict[str, object]] = []
    last: StepSelection | None = None
    generations: list[dict[str, object]] = []
    for row in rows:
        if row.selection is not last:
            last = row.selection
            generations = []
            out.append(
                {
                    "run_id": last.run_id,
                    "step": last.step,
                    "kind": last.kind,
                    "attempt": last.attempt,
                    "seen": last.seen,
                    "kept": last.kept,
                    "generations": generations,
                }
            )
        generations.append(_row_json(row))
    return out


CSV_COLUMNS = [
    "run_id",
    "step",
    "kind",
    "rank",
    "sample_id",
    "prompt_id",
    "source",
    "input",
    "output",
    "score",
    "length",
    "length_unit",
    "ground_truth",
]


def write_history_csv(rows: Sequence[PromptRow], out: IO[str]) -> None:
    """One CSV row per kept row of the prompt (``CSV_COLUMNS``)."""
    writer = csv.writer(out)
    writer.writerow(CSV_COLUMNS)
    for row in rows:
        g = row.generation
        length, unit = generation_length(g)
        s = row.selection
        writer.writerow(
            [
                *(s.run_id, s.step, s.kind, row.rank, g.sample_id, g.prompt_id, g.source, g.input, g.output),
                *(g.score, length, unit, g.ground_truth),
            ]
        )


def render_history(
    rows: Sequence[PromptRow], prompt: str, selections: Sequence[StepSelection], console: Console, width: int = 60
) -> None:
    """One rich table per run: the prompt's rows at each step where it was kept, with score and length."""
    kinds = {s.kind for s in selections}
    for run_id in sorted({r.selection.run_id for r in rows}):
        of_run = [s for s in selections if s.run_id == run_id]
        table = Table(
            title=f"prompt {prompt} · {steps_kept([r for r in rows if r.selection.run_id == run_id], of_run)}"
        )
        table.add_column("step", justify="right", no_wrap=True)
        if len(kinds) > 1:
            table.add_column("kind", no_wrap=True)
        table.add_column("#", justify="right", no_wrap=True)
        table.add_column("sample id", overflow="ellipsis", no_wrap=True, max_width=width // 2)
        table.add_column("source", overflow="ellipsis", no_wrap=True, max_width=14)
        table.add_column("input", overflow="ellipsis", no_wrap=True, max_width=width // 2)
        table.add_column("output", overflow="ellipsis", no_wrap=True, max_width=width)
        table.add_column("score", justify="right", no_wrap=True)
        table.add_column("length", justify="right", no_wrap=True)
        conversations = any(r.generation.output_messages is not None for r in rows if r.selection.run_id == run_id)
        if conversations:
            table.add_column("turns vs previous", overflow="fold", max_width=width)
        for row in rows:
            if row.selection.run_id != run_id:
                continue
            g = row.generation
            length, unit = generation_length(g)
            table.add_row(
                str(row.selection.step),
                *([row.selection.kind] if len(kinds) > 1 else []),
                str(row.rank),
                untagged(g.sample_id),
                g.source or "",
                input_cell(g),
                output_cell(g),
                cell(g.score),
                f"{length} {'tok' if unit == 'tokens' else 'ch'}",
                *([row.turns.summary() if row.turns is not None else ""] if conversations else []),
            )
        console.print(table)
