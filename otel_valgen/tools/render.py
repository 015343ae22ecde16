"""Rich tables of selected steps, for ``otel-valgen show`` and the demo."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from otel_valgen import contract
from otel_valgen.distinct import PROMPTS_SEEN_ERROR
from otel_valgen.partials import samplers_of
from otel_valgen.reader import ExtraValue
from otel_valgen.selection import StepSelection


def extra_names(selections: Sequence[StepSelection]) -> list[str]:
    """The extra columns of the shown generations: every name any of them has, sorted."""
    return sorted({name for selection in selections for g in selection.generations for name in g.extra})


def _cell(value: ExtraValue | None) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value).lower() if isinstance(value, bool) else str(value)


def _prompts(selection: StepSelection) -> str:
    """A rollout step's prompts kept and seen (an estimate marked with its error), and the incomplete ones."""
    if selection.prompts_kept is None:
        return ""
    seen = "?" if selection.prompts_seen is None else str(selection.prompts_seen)
    if selection.prompts_seen_estimated:
        seen = f"≈{seen} (±{PROMPTS_SEEN_ERROR:.0%})"
    text = f" · prompts {selection.prompts_kept} of {seen}"
    if selection.sample_rate is not None:
        under = "?" if selection.prompts_under_rate is None else selection.prompts_under_rate
        text += f" · rate {selection.sample_rate:g} ({under} prompts under it)"
    if selection.prompts_incomplete:
        text += f" · {selection.prompts_incomplete} may lack responses (a source did not end)"
    return text


def render_tables(selections: Sequence[StepSelection], console: Console, width: int = 60) -> None:
    """Print one rich table per (run, step), with the extra columns of every shown step."""
    extras = extra_names(selections)
    for selection in selections:
        title = f"run {selection.run_id} · step {selection.step} · kept {selection.kept} of {selection.seen}"
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
        table = Table(title=title, show_lines=False)
        table.add_column("#", justify="right", min_width=2, no_wrap=True)
        table.add_column("source", overflow="ellipsis", no_wrap=True, max_width=14)
        for column in ("input", "output"):
            table.add_column(column, overflow="ellipsis", no_wrap=True, max_width=width)
        table.add_column("score", justify="right", min_width=5, no_wrap=True)
        for name in extras:
            table.add_column(name, justify="right", overflow="ellipsis", no_wrap=True, max_width=width // 2)
        for rank, g in enumerate(selection.generations, start=1):
            score = "" if g.score is None else f"{g.score:.3g}"
            table.add_row(str(rank), g.source or "", g.input, g.output, score, *(_cell(g.extra.get(n)) for n in extras))
        console.print(table)
