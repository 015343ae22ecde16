"""Table layouts: verl's wide ``val/generations`` table and one row per generation.

``verl`` matches verl's ``ValidationGenerationsLogger``: columns ``step, input_1, output_1,
score_1, ...``, one row per step, the whole table logged again at each step with every
earlier row (an accumulating table). ``rows`` has one row per generation with the columns
of ``ROW_COLUMNS`` (the last one the step's ``valgen.attempt``) and is logged as an incremental
table where wandb supports it.
"""

from __future__ import annotations

import inspect
from typing import Any, Final, Literal

from otel_valgen.wandb_exporter.model import ClosedStep

__all__ = [
    "LAYOUTS",
    "ROW_COLUMNS",
    "Layout",
    "generation_rows",
    "pad_rows",
    "supports_incremental",
    "verl_columns",
    "verl_row",
]

Layout = Literal["verl", "rows"]
LAYOUTS: Final = ("verl", "rows")
ROW_COLUMNS: Final = [
    "step",
    "sample_id",
    "data_source",
    "source",
    "input",
    "output",
    "ground_truth",
    "score",
    "attempt",
]


def verl_columns(width: int) -> list[str]:
    """Return verl's columns for ``width`` samples per step."""
    columns = ["step"]
    for i in range(1, width + 1):
        columns += [f"input_{i}", f"output_{i}", f"score_{i}"]
    return columns


def verl_row(step: ClosedStep) -> list[Any]:
    """Return the step's verl row: ``[step, input_1, output_1, score_1, ...]`` in rank order."""
    row: list[Any] = [step.step]
    for generation in step.generations:
        row += [generation.input, generation.output, generation.score]
    return row


def pad_rows(rows: list[list[Any]]) -> tuple[list[str], list[list[Any]]]:
    """Columns for the widest row, and every row padded to them with ``None``."""
    width = max(((len(row) - 1) // 3 for row in rows), default=0)
    size = 1 + 3 * width
    return verl_columns(width), [list(row) + [None] * (size - len(row)) for row in rows]


def generation_rows(step: ClosedStep, skip: set[str] | frozenset[str] = frozenset()) -> list[list[Any]]:
    """Return the ``rows`` layout's rows of a step, leaving out the sample ids in ``skip``."""
    return [
        [
            step.step,
            generation.sample_id,
            generation.data_source,
            generation.source,
            generation.input,
            generation.output,
            generation.ground_truth,
            generation.score,
            step.attempt,
        ]
        for generation in step.generations
        if generation.sample_id not in skip
    ]


def supports_incremental() -> bool:
    """Whether the installed ``wandb.Table`` takes ``log_mode="INCREMENTAL"``."""
    import wandb  # lazy: the CLI imports this module for LAYOUTS

    return "log_mode" in inspect.signature(wandb.Table.__init__).parameters
