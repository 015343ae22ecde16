"""The ClearML backend: verl's validation table and the step's scalars, in the job's own task.

The target task: the records' ``clearml.task_id`` resource attribute (``configure`` fills it
from ``clearml.Task.current_task()`` in the job, which verl's ClearML logger creates, else
``CLEARML_TASK_ID``). The exporter reaches the task the way ClearML is configured in its own
environment: a ClearML server (``CLEARML_API_HOST`` and credentials, ``clearml.conf``), or
offline mode (``CLEARML_OFFLINE_MODE=1``) on the offline session folder the job writes
(``CLEARML_CACHE_DIR`` shared with the job). Only offline mode is tested here.

Per step, as verl's ``log_generations_to_clearml``: ``report_table(title="Validation",
series="Validation generations", iteration=step)`` with one row per generation (verl's
``step, input, output, score``, then ``sample_id``, the extra columns and ``attempt``), and the
summary's scalars (``report_scalar(title=<table key>, series="seen"|"kept"|"score_mean"|...)``).
A rollout step goes to a table of its own, ``report_table(title="Training", series="Training
generations", iteration=step)`` with one row per response (``rollout_columns``), and its
scalars under the rollout key (``train/generations``). A step with conversations has a
``conversation`` column, each cell the turns in the HTML subset plotly tables render
(``conversation_cells.plotly_html``: bold roles, line breaks, escaped texts).

Records that name no task are not written here (counted as failed steps, logged once per run):
ClearML has no run to attach them to. A task id ClearML does not know (a wrong id, or a cache
folder not shared with the job) makes the step wait (``BackendUnavailable``), so nothing is
lost while the deployment is fixed.
"""

from __future__ import annotations

import logging
import os
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from otel_valgen.exporter import conversation_cells, token_cells
from otel_valgen.exporter.backends import (
    BackendUnavailable,
    StepNotWritable,
    TableKeys,
    commit_step,
    written_before,
    written_key,
)
from otel_valgen.exporter.ledger import Ledger
from otel_valgen.exporter.steps import ClosedStep, summary_scalars
from otel_valgen.exporter.tables import extra_names, rollout_columns, rollout_rows

__all__ = ["TASK_ID_ATTRIBUTE", "ClearMLBackend", "ClearMLConfig"]

TASK_ID_ATTRIBUTE = "clearml.task_id"
TITLE, SERIES = "Validation", "Validation generations"  # verl's
ROLLOUT_TITLE, ROLLOUT_SERIES = "Training", "Training generations"
_logger = logging.getLogger("otel_valgen.exporter")


@dataclass(frozen=True)
class ClearMLConfig(TableKeys):
    """What to write (keys and scalars: ``TableKeys``; the key is the title of the scalars).

    Attributes:
        max_tasks: tasks kept open at once.

    """

    max_tasks: int = 16


def table_rows(step: ClosedStep) -> list[list[Any]]:
    """The step's table: a header row, then one row per generation in rank order (per response for rollouts)."""
    if step.rollout:
        return [rollout_columns(step), *_plotly_cells(rollout_rows(step))]
    names, conversations = extra_names(step), conversation_cells.columns(step)
    header: list[Any] = ["step", "input", "output", "score", "sample_id", *conversations, *names, "attempt"]
    rows = [header]
    for generation in step.generations:
        extra = generation.extra
        rows.append(
            [
                step.step,
                generation.input,
                generation.output,
                generation.score,
                generation.sample_id,
                *conversation_cells.values(step, generation),
                *(extra.get(name) for name in names),
                step.attempt,
            ]
        )
    return [header, *_plotly_cells(rows[1:])]


def _plotly_cells(rows: list[list[Any]]) -> list[list[Any]]:
    """The rows with each conversation value as plotly table HTML."""
    return [[_cell(v) for v in row] for row in rows]


def _cell(value: Any) -> Any:
    """A conversation as plotly table HTML, a response's tokens as their line of text, any other value as it is."""
    if conversation_cells.is_cell(value):
        return conversation_cells.plotly_html(value)
    return token_cells.text(value) if token_cells.is_cell(value) else value


class ClearMLBackend:
    """Writes closed steps into ClearML tasks."""

    name = "clearml"

    def __init__(self, config: ClearMLConfig, ledger: Ledger) -> None:
        from clearml import Task

        if os.environ.get("CLEARML_OFFLINE_MODE", "").strip().lower() in ("1", "true", "yes", "on"):
            Task.set_offline(offline_mode=True)
        self.config = config
        self.ledger = ledger
        self._task_class = Task
        self._tasks: OrderedDict[str, Any] = OrderedDict()
        self._warned: set[str] = set()

    def _task(self, step: ClosedStep) -> Any:
        task_id = step.resource.get(TASK_ID_ATTRIBUTE)
        if not isinstance(task_id, str) or not task_id:
            if step.group_id not in self._warned:
                self._warned.add(step.group_id)
                _logger.warning("clearml: the records of %s name no %s; not written", step.group_id, TASK_ID_ATTRIBUTE)
            raise StepNotWritable(f"run {step.group_id} names no {TASK_ID_ATTRIBUTE}")
        task = self._tasks.get(task_id)
        if task is not None:
            self._tasks.move_to_end(task_id)
            return task
        try:
            task = self._task_class.get_task(task_id=task_id)
        except Exception as error:
            raise BackendUnavailable(f"clearml: cannot open task {task_id}: {type(error).__name__}: {error}") from error
        if not getattr(task, "name", ""):
            raise BackendUnavailable(
                f"clearml: task {task_id} is unknown here (offline: is CLEARML_CACHE_DIR the job's?)"
            )
        while len(self._tasks) >= self.config.max_tasks:
            self._tasks.popitem(last=False)
        self._tasks[task_id] = task
        return task

    def write(self, step: ClosedStep) -> int | None:
        """Write one step; None when it was written before or another attempt is shown.

        Raises:
            BackendUnavailable: ClearML cannot take the step now.
            StepNotWritable: the records name no task (the step is not written here).

        """
        if written_before(self, step):
            return None
        task = self._task(step)
        try:
            logger = task.get_logger()
            if step.generations:
                title, series = (ROLLOUT_TITLE, ROLLOUT_SERIES) if step.rollout else (TITLE, SERIES)
                series = written_key(self, step, series)
                logger.report_table(title=title, series=series, iteration=step.step, table_plot=table_rows(step))
            if self.config.scalars:
                key = written_key(self, step, self.config.key(step))
                for name, value in summary_scalars(step.summary).items():
                    logger.report_scalar(title=key, series=name, value=value, iteration=step.step)
            task.flush(wait_for_uploads=True)
        except Exception as error:
            self._tasks.pop(task.id, None)
            message = f"clearml: cannot report to task {task.id}: {type(error).__name__}: {error}"
            raise BackendUnavailable(message) from error
        return commit_step(self, step)

    def close(self, *, teardown: bool = False) -> None:
        """Flush every open task (the job's task is not closed: it is the job's)."""
        del teardown
        while self._tasks:
            _, task = self._tasks.popitem(last=False)
            try:
                task.flush(wait_for_uploads=True)
            except Exception as error:  # best effort: what was reported is in the ledger
                _logger.warning("clearml: flushing task %s failed: %s", task.id, error)
