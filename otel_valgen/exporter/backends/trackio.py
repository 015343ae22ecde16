"""The Trackio backend: verl's traces, a table and the step's scalars, in the job's local Trackio run.

The target run: the records' ``trackio.project`` and ``trackio.run_name`` resource attributes
(``configure`` fills them, and ``trackio.run_id``, from the job's current Trackio run, which
verl's Trackio logger starts as ``trackio.init(project, name=experiment_name)``). The exporter
opens it with ``trackio.init(project, name, resume="must")`` on the local store its own
environment names (``TRACKIO_DIR``, shared with the job). Trackio resumes by name: when the
job started several runs of one name, the newest is written (logged once when its id is not
the records' ``trackio.run_id``). Records that name no run are not written here (counted).

Per step, under the table key (``val/generations``): verl's ``trackio.Trace`` per generation
(user and assistant messages, metadata with the score, sample id, step and the extra columns),
a ``trackio.Table`` of the rows under ``<key>/table``, and the summary's scalars
(``<key>/seen``, ``kept``, ``score_mean``, ...). A rollout step goes under the rollout key
(``train/generations``): a trace per response (its metadata holds the rollout columns: prompt
id, advantage, response length, truncated, ...) and the rollout table under ``<key>/table``.

A generation with a conversation gets a trace of its turns as OpenAI chat messages
(``conversation_cells.openai_messages``: Trackio's trace view shows them turn by turn and pairs
each tool call with its result), and its step's table a ``conversation`` column holding the turns
as plain text (``conversation_cells.text``), since Trackio's table shows each cell as text.

Trackio reports a write it could not store (a locked or unwritable store) only as a Python
warning. So each step is read back from the store after ``finish``; a step that is not there
waits and is written again (``BackendUnavailable``).
"""

from __future__ import annotations

import logging
import warnings
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
from otel_valgen.exporter.tables import extra_names, rollout_dicts, rows_layout
from otel_valgen.reader import Generation

__all__ = ["PROJECT_ATTRIBUTE", "RUN_NAME_ATTRIBUTE", "TrackioBackend", "TrackioConfig"]

PROJECT_ATTRIBUTE = "trackio.project"
RUN_NAME_ATTRIBUTE = "trackio.run_name"
RUN_ID_ATTRIBUTE = "trackio.run_id"
_logger = logging.getLogger("otel_valgen.exporter")


@dataclass(frozen=True)
class TrackioConfig(TableKeys):
    """What to write: the keys and scalars of ``TableKeys`` (the key names the traces; the table goes under it)."""


def trace_metadata(step: ClosedStep) -> list[dict[str, Any]]:
    """Each generation's trace metadata: verl's (score, step, sample index) and the step's other columns."""
    if step.rollout:
        rows = rollout_dicts(step)
        hidden = ("input", "output", conversation_cells.COLUMN)  # they are the trace's messages
        return [
            {
                "source": "rollout_generations",
                "sample_index": index,
                **{k: v for k, v in row.items() if k not in hidden},
            }
            for index, row in enumerate(rows)
        ]
    names = extra_names(step)
    return [
        {
            "source": "validation_generations",
            "sample_index": index,
            "score": generation.score,
            "step": step.step,
            "sample_id": generation.sample_id,
            "attempt": step.attempt,
            **{name: generation.extra.get(name) for name in names},
        }
        for index, generation in enumerate(step.generations)
    ]


def trace_messages(generation: Generation) -> list[dict[str, Any]]:
    """A generation's trace: its conversation's turns, else verl's user and assistant messages."""
    conversation = conversation_cells.cell(generation)
    if conversation is not None:
        return conversation_cells.openai_messages(conversation)
    return [{"role": "user", "content": generation.input}, {"role": "assistant", "content": generation.output}]


class TrackioBackend:
    """Writes closed steps into local Trackio runs."""

    name = "trackio"

    def __init__(self, config: TrackioConfig, ledger: Ledger) -> None:
        import trackio

        self.config = config
        self.ledger = ledger
        self._trackio = trackio
        self._warned: set[str] = set()

    def _warn_once(self, key: str, message: str, *args: Any) -> None:
        if key not in self._warned:
            self._warned.add(key)
            _logger.warning(message, *args)

    def _target(self, step: ClosedStep) -> tuple[str, str]:
        project, name = step.resource.get(PROJECT_ATTRIBUTE), step.resource.get(RUN_NAME_ATTRIBUTE)
        if not isinstance(project, str) or not project or not isinstance(name, str) or not name:
            self._warn_once(step.group_id, "trackio: the records of %s name no Trackio run; not written", step.group_id)
            raise StepNotWritable(f"run {step.group_id} names no {PROJECT_ATTRIBUTE} and {RUN_NAME_ATTRIBUTE}")
        return project, name

    def _payload(self, step: ClosedStep) -> dict[str, Any]:
        trackio, key = self._trackio, written_key(self, step, self.config.key(step))
        traces = [
            trackio.Trace(messages=trace_messages(generation), metadata=metadata)
            for generation, metadata in zip(step.generations, trace_metadata(step), strict=True)
        ]
        payload: dict[str, Any] = {}
        if traces:
            columns, rows = rows_layout(step)
            cells = [[_text(v) for v in row] for row in rows]
            payload[key] = traces
            payload[f"{key}/table"] = trackio.Table(columns=columns, data=cells)
        if self.config.scalars:
            payload |= {f"{key}/{name}": value for name, value in summary_scalars(step.summary).items()}
        return payload

    def _stored(self, project: str, name: str, run_id: str, step: int, key: str) -> bool:
        from trackio.sqlite_storage import SQLiteStorage

        try:
            logs = SQLiteStorage.get_logs(project, name, run_id=run_id)
        except Exception:  # a store that cannot be read cannot confirm the write
            return False
        return any(row.get("step") == step and key in row for row in logs)

    def write(self, step: ClosedStep) -> int | None:
        """Write one step; None when it was written before or another attempt is shown.

        Raises:
            BackendUnavailable: the store did not keep the step; it will be written again.
            StepNotWritable: the records name no Trackio run.

        """
        if written_before(self, step):
            return None
        project, name = self._target(step)
        payload = self._payload(step)
        if not payload:
            return None
        trackio = self._trackio
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                run = trackio.init(
                    project=project, name=name, resume="must", embed=False, auto_log_cpu=False, auto_log_gpu=False
                )
            except ValueError as error:  # "Run ... does not exist" (yet): the job has not stored its first row
                raise BackendUnavailable(f"trackio: cannot open run {project}/{name}: {error}") from error
            try:
                expected = step.resource.get(RUN_ID_ATTRIBUTE)
                if isinstance(expected, str) and expected and run.id != expected:
                    self._warn_once(
                        f"{project}/{name}",
                        "trackio: run %s/%s is %s, not the records' %s (Trackio resumes the newest run of a name)",
                        project,
                        name,
                        run.id,
                        expected,
                    )
                trackio.log(payload, step=step.step)
            finally:
                trackio.finish()
        probe = f"{written_key(self, step, self.config.key(step))}/table" if step.generations else next(iter(payload))
        if not self._stored(project, name, run.id, step.step, probe):
            reasons = "; ".join(str(w.message) for w in caught) or "not found after finish()"
            raise BackendUnavailable(f"trackio: step {step.step} was not stored in {project}/{name}: {reasons}")
        return commit_step(self, step)

    def close(self, *, teardown: bool = False) -> None:
        """Nothing stays open between steps."""
        del teardown


def _text(value: Any) -> Any:
    """A conversation or a response's tokens as the text Trackio's table shows, any other value as it is."""
    if conversation_cells.is_cell(value):
        return conversation_cells.text(value)
    return token_cells.text(value) if token_cells.is_cell(value) else value
