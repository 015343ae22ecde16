"""``otel-valgen diff``: two steps of one run, or one step of two runs, row by row.

Rows are matched by their sample id without the part's tag (``<base>/<i>``; for rollouts that is
``<prompt id>/<response index>``): the same prompt's same response slot on both sides. When one
side holds several rows of one id (two processes answered the same prompt), they pair in rank
order and the rest count as present on one side only. A pair's output *changed* when the texts
differ; its score delta is B - A (None unless both scores are there) and its length delta is
B - A in tokens when both records carry ``valgen.response_length``, else in characters. When
both outputs are chat messages, the pair also compares them turn by turn (``otel_valgen.cli.turns``:
the turn where they first differ, the tool calls B adds or drops).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO

from rich.console import Console
from rich.table import Table

from otel_valgen.cli.render import LENGTH_CHARS, LENGTH_TOKENS, cell, generation_length, output_cell
from otel_valgen.cli.turns import TurnDiff, compare_turns
from otel_valgen.reader import Generation
from otel_valgen.sampling import untagged
from otel_valgen.selection import StepSelection

__all__ = ["BOTH", "ONLY_A", "ONLY_B", "Pair", "StepDiff", "diff_json", "diff_steps", "render_diff", "write_diff_csv"]

BOTH, ONLY_A, ONLY_B = "both", "only_a", "only_b"


@dataclass(frozen=True)
class Pair:
    """One matched id: its row on side A and on side B (None where that side lacks it)."""

    key: str
    a: Generation | None
    b: Generation | None

    @property
    def status(self) -> str:
        """``both``, ``only_a`` or ``only_b``."""
        if self.a is not None and self.b is not None:
            return BOTH
        return ONLY_A if self.a is not None else ONLY_B

    @property
    def changed(self) -> bool | None:
        """Whether the output text differs (None unless both sides have the row)."""
        if self.a is None or self.b is None:
            return None
        return self.a.output != self.b.output

    @property
    def turns(self) -> TurnDiff | None:
        """The conversations compared turn by turn (None unless both sides' outputs are chat messages)."""
        if self.a is None or self.b is None or self.a.output_messages is None or self.b.output_messages is None:
            return None
        return compare_turns(self.a.output_messages, self.b.output_messages)

    @property
    def score_delta(self) -> float | None:
        """B's score minus A's (None unless both are finite)."""
        if self.a is None or self.b is None or self.a.score is None or self.b.score is None:
            return None
        delta = self.b.score - self.a.score
        return delta if math.isfinite(delta) else None

    def lengths(self) -> tuple[int | None, int | None, str]:
        """(A's length, B's length, unit): tokens when every present side carries them, else characters."""
        present = [g for g in (self.a, self.b) if g is not None]
        unit = LENGTH_TOKENS if all(generation_length(g)[1] == LENGTH_TOKENS for g in present) else LENGTH_CHARS

        def length(g: Generation | None) -> int | None:
            if g is None:
                return None
            return generation_length(g)[0] if unit == LENGTH_TOKENS else len(g.output)

        return length(self.a), length(self.b), unit

    @property
    def length_delta(self) -> int | None:
        """B's length minus A's (None unless both sides have the row)."""
        a, b, _ = self.lengths()
        return None if a is None or b is None else b - a


@dataclass(frozen=True)
class StepDiff:
    """Two selections (A, B, each labelled) and their rows matched: both sides first (A's order), then A's, then B's."""

    a: StepSelection
    b: StepSelection
    label_a: str
    label_b: str
    pairs: list[Pair]

    def count(self, status: str) -> int:
        """How many pairs have ``status``."""
        return sum(1 for pair in self.pairs if pair.status == status)

    @property
    def changed(self) -> int:
        """Pairs present on both sides whose output differs."""
        return sum(1 for pair in self.pairs if pair.changed)

    @property
    def same(self) -> int:
        """Pairs present on both sides with the same output."""
        return sum(1 for pair in self.pairs if pair.changed is False)

    @property
    def mean_score_delta(self) -> float | None:
        """The mean of the pairs' score deltas (None when no pair has one)."""
        deltas = [d for d in (pair.score_delta for pair in self.pairs) if d is not None]
        return math.fsum(deltas) / len(deltas) if deltas else None

    def summary(self) -> dict[str, object]:
        """The counts of the summary line, as a mapping."""
        deltas = sum(1 for pair in self.pairs if pair.score_delta is not None)
        return {
            BOTH: self.count(BOTH),
            ONLY_A: self.count(ONLY_A),
            ONLY_B: self.count(ONLY_B),
            "changed": self.changed,
            "same": self.same,
            "mean_score_delta": self.mean_score_delta,
            "score_deltas": deltas,
        }

    def summary_line(self) -> str:
        """``both 5 · only A 1 · only B 1 · changed 4 · same 1 · mean score delta +0.2 over 4``."""
        summary = self.summary()
        mean = self.mean_score_delta
        score = (
            "no score on both sides" if mean is None else f"mean score delta {mean:+.3g} over {summary['score_deltas']}"
        )
        return (
            f"both {summary[BOTH]} · only {self.label_a} {summary[ONLY_A]} · only {self.label_b} {summary[ONLY_B]}"
            f" · changed {summary['changed']} · same {summary['same']} · {score}"
        )


def match_key(generation: Generation) -> str:
    """The id rows are matched by: the sample id without its part's tag."""
    return untagged(generation.sample_id)


def diff_steps(a: StepSelection, b: StepSelection, label_a: str = "A", label_b: str = "B") -> StepDiff:
    """Match the kept rows of ``a`` and ``b`` (see the module docstring)."""
    rows_b: dict[str, list[Generation]] = {}
    for g in b.generations:
        rows_b.setdefault(match_key(g), []).append(g)
    both, only_a = [], []
    for g in a.generations:
        waiting = rows_b.get(match_key(g))
        if waiting:
            both.append(Pair(match_key(g), g, waiting.pop(0)))
        else:
            only_a.append(Pair(match_key(g), g, None))
    left = {id(g) for rows in rows_b.values() for g in rows}
    only_b = [Pair(match_key(g), None, g) for g in b.generations if id(g) in left]
    return StepDiff(a, b, label_a, label_b, both + only_a + only_b)


def _side_json(selection: StepSelection, label: str) -> dict[str, object]:
    return {
        "label": label,
        "run_id": selection.run_id,
        "step": selection.step,
        "attempt": selection.attempt,
        "seen": selection.seen,
        "kept": selection.kept,
        "score_mean": selection.score_mean,
    }


def _row_json(g: Generation | None, length: int | None) -> dict[str, object] | None:
    if g is None:
        return None
    return {"sample_id": g.sample_id, "output": g.output, "score": g.score, "length": length, "source": g.source}


def _pair_json(pair: Pair) -> dict[str, object]:
    length_a, length_b, unit = pair.lengths()
    g = pair.a or pair.b
    return {
        "id": pair.key,
        "status": pair.status,
        "prompt_id": g.prompt_id if g is not None else None,
        "input": g.input if g is not None else None,
        "a": _row_json(pair.a, length_a),
        "b": _row_json(pair.b, length_b),
        "changed": pair.changed,
        "score_delta": pair.score_delta,
        "length_delta": pair.length_delta,
        "length_unit": unit,
        "turns": turns.as_json() if (turns := pair.turns) is not None else None,
    }


def diff_json(diff: StepDiff) -> dict[str, object]:
    """The whole diff as one object: ``kind``, ``a``, ``b``, ``summary``, then ``both``, ``only_a``, ``only_b`` rows."""
    pairs = [_pair_json(pair) for pair in diff.pairs]
    return {
        "kind": diff.a.kind,
        "a": _side_json(diff.a, diff.label_a),
        "b": _side_json(diff.b, diff.label_b),
        "summary": diff.summary(),
        **{status: [p for p in pairs if p["status"] == status] for status in (BOTH, ONLY_A, ONLY_B)},
    }


CSV_COLUMNS = [
    "status",
    "id",
    "prompt_id",
    "input",
    "sample_id_a",
    "output_a",
    "score_a",
    "length_a",
    "sample_id_b",
    "output_b",
    "score_b",
    "length_b",
    "changed",
    "score_delta",
    "length_delta",
    "length_unit",
]


def write_diff_csv(diff: StepDiff, out: IO[str]) -> None:
    """One CSV row per matched id (``CSV_COLUMNS``); a side that lacks the row has empty cells."""
    writer = csv.writer(out)
    writer.writerow(CSV_COLUMNS)
    for pair in diff.pairs:
        length_a, length_b, unit = pair.lengths()
        g = pair.a or pair.b
        side_a = [pair.a.sample_id, pair.a.output, pair.a.score, length_a] if pair.a else ["", "", "", ""]
        side_b = [pair.b.sample_id, pair.b.output, pair.b.score, length_b] if pair.b else ["", "", "", ""]
        changed = "" if pair.changed is None else str(pair.changed).lower()
        writer.writerow(
            [
                *(pair.status, pair.key, g.prompt_id if g else "", g.input if g else ""),
                *side_a,
                *side_b,
                *(changed, pair.score_delta, pair.length_delta, unit),
            ]
        )


def _signed(value: float | None) -> str:
    if value is None:
        return ""
    return f"{value:+d}" if isinstance(value, int) else f"{value:+.3g}"


def render_diff(diff: StepDiff, console: Console, width: int = 40) -> None:
    """Side by side: the ids both hold (outputs, scores, lengths, deltas), then each side's own, then the summary.

    Lengths are in characters, or in tokens (``len A (tok)``) when the records carry them.
    """
    a, b = diff.label_a, diff.label_b
    if diff.a.run_id == diff.b.run_id:
        head = f"{diff.a.kind} · run {diff.a.run_id} · A = step {diff.a.step} · B = step {diff.b.step}"
    elif diff.a.step == diff.b.step:
        head = f"{diff.a.kind} · step {diff.a.step} · A = run {diff.a.run_id} · B = run {diff.b.run_id}"
    else:
        head = (
            f"{diff.a.kind} · A = run {diff.a.run_id} step {diff.a.step} · B = run {diff.b.run_id} step {diff.b.step}"
        )
    table = Table(title=f"{head} · both hold {diff.count(BOTH)}")
    ids = max((len(pair.key) for pair in diff.pairs), default=2)
    table.add_column("id", overflow="ellipsis", no_wrap=True, min_width=min(ids, width // 2), max_width=width // 2)
    tokens = any(pair.lengths()[2] == LENGTH_TOKENS for pair in diff.pairs if pair.status == BOTH)
    numbers = ("score A", "score B", "Δ score", "len A" + (" (tok)" if tokens else ""), "len B", "Δ len")
    # What the outputs may take once the other columns have theirs (3 characters of border each).
    room = (console.width - min(ids, width // 2) - 7 - sum(map(len, numbers)) - 3 * 10 - 1) // 2
    for column in ("output A", "output B"):
        table.add_column(column, overflow="ellipsis", no_wrap=True, max_width=max(8, min(width, room)))
    table.add_column("output", no_wrap=True, min_width=7)
    conversations = any(pair.turns is not None for pair in diff.pairs)
    if conversations:  # beside the verdict: which turn first differs, the tool calls added or dropped
        table.add_column("turns", overflow="fold", min_width=min(width, 24), max_width=width)
    for column in numbers:
        table.add_column(column, justify="right", no_wrap=True, min_width=len(column))
    for pair in diff.pairs:
        if pair.a is None or pair.b is None:
            continue
        length_a, length_b, unit = pair.lengths()
        suffix = "" if unit == LENGTH_TOKENS or not tokens else " ch"
        table.add_row(
            pair.key,
            output_cell(pair.a),
            output_cell(pair.b),
            "changed" if pair.changed else "same",
            *([turns.summary() if (turns := pair.turns) is not None else ""] if conversations else []),
            cell(pair.a.score),
            cell(pair.b.score),
            _signed(pair.score_delta),
            f"{length_a}{suffix}",
            f"{length_b}{suffix}",
            _signed(pair.length_delta),
        )
    console.print(table)
    for status, label in ((ONLY_A, a), (ONLY_B, b)):
        alone = [pair for pair in diff.pairs if pair.status == status]
        if not alone:
            continue
        table = Table(title=f"only in {label}: {len(alone)}")
        table.add_column("id", overflow="ellipsis", no_wrap=True, max_width=width // 2)
        table.add_column("input", overflow="ellipsis", no_wrap=True, max_width=width)
        table.add_column("output", overflow="ellipsis", no_wrap=True, max_width=width)
        table.add_column("score", justify="right", no_wrap=True)
        table.add_column("length", justify="right", no_wrap=True)
        for pair in alone:
            g = pair.a or pair.b
            assert g is not None  # one side is always present
            length, unit = generation_length(g)
            table.add_row(
                pair.key, g.input, g.output, cell(g.score), f"{length} {'tok' if unit == LENGTH_TOKENS else 'ch'}"
            )
        console.print(table)
    console.print(diff.summary_line(), soft_wrap=True)


def sides(selections: Sequence[StepSelection], wanted: Sequence[tuple[str, int]]) -> list[StepSelection | None]:
    """The selection of each wanted (run, step), None where the input has none."""
    by_key = {(s.run_id, s.step): s for s in selections}
    return [by_key.get(key) for key in wanted]
