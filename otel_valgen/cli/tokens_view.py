"""``otel-valgen show --tokens SAMPLE_ID``: one kept response, token by token.

The table view prints the response with each token coloured by ``|trainer - rollout|`` (its
log-probability difference; ``COLOUR_STEPS``), tokens the correction masked struck through, and
tokens that are not the model's (a tool's output in a multi-turn response) dimmed; a line above
gives the response's figures and says where tokens were left out to fit the record's budget.
``--format csv`` and ``--format json`` give the per-token table (``token_rows``).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from typing import IO, Any

from rich.console import Console
from rich.text import Text

from otel_valgen import contract, tokens
from otel_valgen.reader import Generation

__all__ = ["COLOUR_STEPS", "TOKEN_COLUMNS", "render_tokens", "token_rows", "write_token_csv"]

# |trainer - rollout| at or above each bound takes its style; below the first, the plain style.
COLOUR_STEPS: tuple[tuple[float, str], ...] = (
    (0.01, "green"),
    (0.1, "yellow"),
    (0.5, "dark_orange"),
    (1.0, "bold red"),
)
TOKEN_COLUMNS = ("index", "id", "piece", "rollout", "trainer", "diff", "reference", "weight", "masked", "model")


def response_tokens(generation: Generation) -> tokens.ResponseTokens | None:
    """The generation's ``valgen.tokens`` decoded, None without them (or in an encoding not known here)."""
    attribute = generation.attributes.get(contract.TOKENS)
    if not isinstance(attribute, dict):
        return None
    try:
        return tokens.decode(attribute)
    except (ValueError, KeyError, TypeError):
        return None


def _positions(read: tokens.ResponseTokens) -> list[int]:
    """Each carried token's index in the whole response (past a cut, shifted by the tokens left out)."""
    if read.cut_from is None:
        return list(range(read.count))
    return [i if i < read.cut_from else i + read.cut_count for i in range(read.count)]


def _value(column: Any, index: int) -> float | None:
    if column is None:
        return None
    value = float(column[index])
    return value if math.isfinite(value) else None


def token_rows(read: tokens.ResponseTokens) -> list[dict[str, Any]]:
    """One row per carried token: its index in the response, id, text, the values and flags there are."""
    rollout, trainer = read.floats.get(tokens.ROLLOUT), read.floats.get(tokens.TRAINER)
    rows = []
    for index, position in enumerate(_positions(read)):
        a, b = _value(rollout, index), _value(trainer, index)
        rows.append(
            {
                "index": position,
                "id": int(read.ids[index]) if read.ids is not None else None,
                "piece": read.pieces[index] if read.pieces is not None else None,
                "rollout": a,
                "trainer": b,
                "diff": b - a if a is not None and b is not None else None,
                "reference": _value(read.floats.get(tokens.REFERENCE), index),
                "weight": _value(read.floats.get(tokens.WEIGHT), index),
                "masked": bool(read.masks[tokens.MASKED][index]) if tokens.MASKED in read.masks else None,
                "model": bool(read.masks[tokens.MODEL][index]) if tokens.MODEL in read.masks else None,
            }
        )
    return rows


def write_token_csv(rows: Sequence[dict[str, Any]], out: IO[str]) -> None:
    """The per-token table as CSV (empty cells for values the response did not carry)."""
    writer = csv.DictWriter(out, fieldnames=TOKEN_COLUMNS)
    writer.writeheader()
    for row in rows:
        writer.writerow({name: "" if row[name] is None else row[name] for name in TOKEN_COLUMNS})


def _style(row: dict[str, Any]) -> str:
    style = ""
    diff = row["diff"]
    if diff is not None:
        for bound, colour in COLOUR_STEPS:
            if abs(diff) >= bound:
                style = colour
    if row["masked"]:
        style += " strike"
    if row["model"] is False:
        style += " dim italic"
    return style.strip()


def figures_line(generation: Generation, read: tokens.ResponseTokens) -> str:
    """The response's figures as its record carries them, and its cut, in one line."""
    parts = [f"{read.count + read.cut_count} tokens"]
    for name, label in (
        (tokens.MEAN_ABS, "|diff| mean"),
        (tokens.MAX_ABS, "max"),
        (tokens.KL, "KL(k3)"),
        (tokens.MASKED_SHARE, "masked"),
    ):
        value = generation.attributes.get(f"{contract.MISMATCH_PREFIX}{name}")
        if isinstance(value, int | float):
            parts.append(f"{label} {value:.1%}" if name == tokens.MASKED_SHARE else f"{label} {value:.4g}")
    if read.cut_from is not None and read.cut_count:
        parts.append(f"tokens {read.cut_from}–{read.cut_from + read.cut_count - 1} left out (record budget)")
    return " · ".join(parts)


def render_tokens(generation: Generation, read: tokens.ResponseTokens, console: Console) -> None:
    """The response with each token coloured by its log-probability difference (module docstring)."""
    console.print(
        Text(f"run {generation.run_id} · step {generation.step} · {generation.sample_id}", style="bold"),
        Text(figures_line(generation, read)),
        sep="\n",
    )
    legend = Text("colour: |trainer - rollout| ")
    for bound, colour in COLOUR_STEPS:
        legend.append(f"≥{bound:g} ", style=colour)
    legend.append("· masked ", style="strike")
    legend.append("· not the model's", style="dim italic")
    console.print(legend)
    text = Text()
    rows = token_rows(read)
    for position, row in enumerate(rows):
        if read.cut_count and position == read.cut_from:
            text.append(f" […{read.cut_count} tokens left out…] ", style="reverse")
        piece = row["piece"] if row["piece"] is not None else f"<{row['id']}>"
        text.append(piece, style=_style(row))
    console.print(text)
