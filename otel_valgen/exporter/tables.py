"""What a step looks like as table rows, for every backend.

``verl`` matches verl's ``ValidationGenerationsLogger``: columns ``step, input_1, output_1,
score_1, ...``, one row per step, the whole table logged again at each step with every
earlier row (an accumulating table). Extra columns (``valgen.extra.<name>``) follow as
``<name>_1, <name>_2, ...``. ``rows`` has one row per generation: ``ROW_COLUMNS``, then the
step's extra columns by name, then ``attempt``. ``markdown`` is verl's TensorBoard text.

A rollout step (``valgen.kind = rollout``) has one layout in every backend, one row per
response in the group view's order: ``ROLLOUT_COLUMNS``, the extra columns, ``param_version``
when a record carries ``valgen.param_version``, then ``attempt`` (``rollout_columns``,
``rollout_rows``; ``rollout_markdown`` for TensorBoard, a section per prompt).

A step with conversations (chat messages) gets a ``conversation`` column in every layout
(``otel_valgen.exporter.conversation_cells``); text-only steps keep the columns above.
"""

from __future__ import annotations

import inspect
from typing import Any, Final, Literal

from otel_valgen import contract
from otel_valgen.exporter import conversation_cells, token_cells
from otel_valgen.exporter.steps import ClosedStep
from otel_valgen.reader import Generation

__all__ = [
    "LAYOUTS",
    "PARAM_VERSION",
    "ROLLOUT_COLUMNS",
    "ROW_COLUMNS",
    "ROW_FIELDS",
    "Layout",
    "WideRow",
    "extra_names",
    "generation_rows",
    "markdown",
    "record_dicts",
    "rollout_columns",
    "rollout_dicts",
    "rollout_markdown",
    "rollout_rows",
    "row_columns",
    "row_fields",
    "rows_layout",
    "supports_incremental",
    "verl_row",
    "wide_table",
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
    "response_length",
    "truncated",
]
ROLLOUT_COLUMNS: Final = [
    "step",
    "prompt_id",
    "sample_id",
    "input",
    "output",
    "score",
    "advantage",
    "response_length",
    "truncated",
    "ground_truth",
    "data_source",
]
PARAM_VERSION: Final = contract.PARAM_VERSION  # the policy version that generated a rollout (fully-async)
_PARAM_VERSION_COLUMN: Final = "param_version"
WideRow = dict[str, Any]  # {"cells": [step, input_1, output_1, score_1, ...], "extra": {name: [v_1, ...]}}


def extra_names(step: ClosedStep) -> list[str]:
    """The step's extra column names, sorted."""
    return sorted({name for generation in step.generations for name in generation.extra})


ROW_FIELDS: Final = ("ground_truth", "data_source", "response_length", "truncated", "slots")
"""A row's own fields beyond verl's input, output and score; the ``verl`` layout adds those a step has."""


def has_slots(step: ClosedStep) -> bool:
    """Whether the step kept extremes or the most mismatched: its rows get a ``slots`` column."""
    return any(generation.slots is not None for generation in step.generations)


def row_fields(generation: Generation) -> dict[str, Any]:
    """A generation's ``ROW_FIELDS``."""
    attributes = generation.attributes
    return {
        "ground_truth": generation.ground_truth,
        "data_source": generation.data_source,
        "response_length": attributes.get(contract.RESPONSE_LENGTH),
        "truncated": attributes.get(contract.TRUNCATED),
        "slots": generation.slots_text,
    }


def verl_row(step: ClosedStep) -> WideRow:
    """The step's verl row (``[step, input_1, output_1, score_1, ...]`` in rank order) and its extra values.

    The extra values are the step's ``ROW_FIELDS`` that any generation has (an extra column of the
    same name wins), then its extra columns.
    """
    cells: list[Any] = [step.step]
    for generation in step.generations:
        cells += [generation.input, generation.output, generation.score]
    names = extra_names(step)
    fields = [row_fields(g) for g in step.generations]
    extra = {
        name: [f[name] for f in fields]
        for name in ROW_FIELDS
        if name not in names and any(f[name] is not None for f in fields)
    }
    if conversation_cells.has_conversations(step):
        extra[conversation_cells.COLUMN] = [conversation_cells.cell(g) for g in step.generations]
    return {"cells": cells, "extra": extra | {name: [g.extra.get(name) for g in step.generations] for name in names}}


def _as_wide(row: Any) -> WideRow:
    """A stored row: a ``WideRow``, or a bare cell list (ledgers of earlier versions)."""
    if isinstance(row, dict):
        return {"cells": list(row.get("cells", [])), "extra": dict(row.get("extra") or {})}
    return {"cells": list(row), "extra": {}}


def wide_table(rows: list[Any]) -> tuple[list[str], list[list[Any]]]:
    """Verl's columns for the widest row plus the extra columns, and every row padded with ``None``."""
    wide = [_as_wide(row) for row in rows]
    width = max(((len(row["cells"]) - 1) // 3 for row in wide), default=0)
    names = sorted({name for row in wide for name in row["extra"]})
    columns = ["step"]
    for i in range(1, width + 1):
        columns += [f"input_{i}", f"output_{i}", f"score_{i}"]
    columns += [f"{name}_{i}" for name in names for i in range(1, width + 1)]
    data = []
    for row in wide:
        cells = row["cells"] + [None] * (1 + 3 * width - len(row["cells"]))
        for name in names:
            values = list(row["extra"].get(name, []))
            cells += values + [None] * (width - len(values))
        data.append(cells)
    return columns, data


def row_columns(step: ClosedStep) -> list[str]:
    """The ``rows`` layout's columns for a step (``slots`` after ``ROW_COLUMNS`` when it has slots)."""
    slots = ["slots"] if has_slots(step) else []
    return [*ROW_COLUMNS, *slots, *conversation_cells.columns(step), *extra_names(step), "attempt"]


def generation_rows(step: ClosedStep, skip: set[str] | frozenset[str] = frozenset()) -> list[list[Any]]:
    """The ``rows`` layout's rows of a step, leaving out the sample ids in ``skip``."""
    names = extra_names(step)
    slots = has_slots(step)
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
            generation.attributes.get(contract.RESPONSE_LENGTH),
            generation.attributes.get(contract.TRUNCATED),
            *([generation.slots_text] if slots else []),
            *conversation_cells.values(step, generation),
            *(generation.extra.get(name) for name in names),
            step.attempt,
        ]
        for generation in step.generations
        if generation.sample_id not in skip
    ]


def record_dicts(step: ClosedStep) -> list[dict[str, Any]]:
    """One dict per generation: verl's MLflow keys (input, output, score) first, then the rest."""
    names = extra_names(step)
    out = []
    for rank, generation in enumerate(step.generations, start=1):
        item: dict[str, Any] = {"input": generation.input, "output": generation.output, "score": generation.score}
        item |= {"step": step.step, "rank": rank, "sample_id": generation.sample_id}
        item |= row_fields(generation)
        item |= dict(zip(conversation_cells.columns(step), conversation_cells.values(step, generation), strict=True))
        item |= {name: generation.extra.get(name) for name in names}
        item["attempt"] = step.attempt
        out.append(item)
    return out


def markdown(step: ClosedStep) -> str:
    """Verl's TensorBoard text for a step, with a line per extra column."""
    names = extra_names(step)
    text = f"**Generation Results - Step {step.step}**\n\n"
    for i, generation in enumerate(step.generations, start=1):
        text += f"### Sample {i}\n"
        conversation = conversation_cells.cell(generation)
        if conversation is None:
            text += f"**Input:** {generation.input}\n\n**Output:** {generation.output}\n\n"
        else:  # the turns, each text as it was written
            text += f"**Conversation:**\n\n{conversation_cells.markdown(conversation)}"
        text += f"**Score:** {generation.score}\n\n"
        for name, value in row_fields(generation).items():
            if value is not None:
                text += f"**{name}:** {value}\n\n"
        for name in names:
            text += f"**{name}:** {generation.extra.get(name)}\n\n"
        text += "---\n\n"
    return text


def _rollout_extras(step: ClosedStep) -> tuple[list[str], bool]:
    """The step's extra column names, and whether it has a ``param_version`` column (over an extra of that name)."""
    versioned = any(PARAM_VERSION in generation.attributes for generation in step.generations)
    names = extra_names(step)
    return ([name for name in names if name != _PARAM_VERSION_COLUMN] if versioned else names), versioned


def rollout_columns(step: ClosedStep) -> list[str]:
    """A rollout step's columns: ``ROLLOUT_COLUMNS``, the extra columns, ``param_version`` if any, ``attempt``."""
    names, versioned = _rollout_extras(step)
    version = [_PARAM_VERSION_COLUMN] if versioned else []
    return [
        *ROLLOUT_COLUMNS,
        *conversation_cells.columns(step),
        *token_cells.columns(step),
        *names,
        *version,
        "attempt",
    ]


def _rollout_row(step: ClosedStep, generation: Generation, names: list[str], versioned: bool) -> list[Any]:
    attributes = generation.attributes
    return [
        step.step,
        generation.prompt_id,
        generation.sample_id,
        generation.input,
        generation.output,
        generation.score,
        attributes.get(contract.ADVANTAGE),
        attributes.get(contract.RESPONSE_LENGTH),
        attributes.get(contract.TRUNCATED),
        generation.ground_truth,
        generation.data_source,
        *conversation_cells.values(step, generation),
        *token_cells.values(step, generation),
        *(generation.extra.get(name) for name in names),
        *([attributes.get(PARAM_VERSION)] if versioned else []),
        step.attempt,
    ]


def rollout_rows(step: ClosedStep, skip: set[str] | frozenset[str] = frozenset()) -> list[list[Any]]:
    """A rollout step's rows, one per response in the step's order, leaving out the sample ids in ``skip``."""
    names, versioned = _rollout_extras(step)
    return [_rollout_row(step, g, names, versioned) for g in step.generations if g.sample_id not in skip]


def rollout_dicts(step: ClosedStep) -> list[dict[str, Any]]:
    """A rollout step's rows as dicts, by column name (a ``tokens`` cell as its line of text, ``token_cells.text``)."""
    columns = rollout_columns(step)
    return [
        {
            name: token_cells.text(value) if token_cells.is_cell(value) else value
            for name, value in zip(columns, row, strict=True)
        }
        for row in rollout_rows(step)
    ]


_HEADING_COLUMNS: Final = frozenset({"step", "prompt_id", "input", "sample_id"})


def rollout_markdown(step: ClosedStep) -> str:
    """A rollout step as TensorBoard text: a section per prompt, its input once, then each response's columns."""
    text = f"**Rollouts - Step {step.step}**\n\n"
    prompt: str | None = None
    number = 0
    for item in rollout_dicts(step):
        conversation = item.get(conversation_cells.COLUMN)
        if number == 0 or item["prompt_id"] != prompt:
            prompt, number = item["prompt_id"], number + 1
            given = f"\n\n{conversation_cells.markdown(conversation, ['input'])}" if conversation else ""
            text += f"## Prompt {number}: {prompt}\n**Input:**" + (given or f" {item['input']}\n\n")
        text += f"### Response {item['sample_id']}\n"
        for name, value in item.items():
            if name == "output" and conversation:
                text += f"**output:**\n\n{conversation_cells.markdown(conversation, ['output'])}"
            elif name not in _HEADING_COLUMNS and not conversation_cells.is_cell(value):
                text += f"**{name}:** {value}\n\n"
        text += "---\n\n"
    return text


def rows_layout(step: ClosedStep, skip: set[str] | frozenset[str] = frozenset()) -> tuple[list[str], list[list[Any]]]:
    """A step as one row per generation, leaving out ``skip``: the ``rows`` layout, or the rollout table."""
    if step.rollout:
        return rollout_columns(step), rollout_rows(step, skip)
    return row_columns(step), generation_rows(step, skip)


def supports_incremental() -> bool:
    """Whether the installed ``wandb.Table`` takes ``log_mode="INCREMENTAL"``."""
    import wandb  # lazy: the CLI imports this module for LAYOUTS

    return "log_mode" in inspect.signature(wandb.Table.__init__).parameters
