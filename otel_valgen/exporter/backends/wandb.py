"""The wandb backend: attach to the training job's wandb run from this process and write steps.

The target run: the records' ``wandb.run_id`` / ``wandb.project`` / ``wandb.entity``
resource attributes (``otel_valgen.configure`` fills them from the job's active ``wandb.run``),
else a run whose id is the records' ``valgen.run_id`` in ``--project`` / ``--entity``.

Each target run gets one attachment: ``wandb.init(id=..., reinit="create_new")`` with
``mode="shared"``, ``x_primary=False`` (this process is a secondary writer and leaves the
run's files and metadata to the trainer), ``x_label`` (its console and system data are told
apart) and ``x_update_finish_state=False`` (finishing the attachment never marks the
trainer's run finished). Offline mode (``WANDB_MODE=offline``) writes a local run with the
same id instead. The trainer's ``_step`` belongs to the trainer, so tables are logged
without ``step=`` against a step metric (``valgen/step``) declared with ``define_metric``.
At most ``max_runs`` attachments stay open; the least recently used one is finished first.
All calls happen on the caller's thread: the service uses a single writer thread.

Attempts (``otel_valgen.exporter.backends.superseded``): an attempt that the shared rule
prefers over the shown one is logged again at the same ``valgen/step`` with
``<table_key>/attempt``: in ``verl`` the step's row is replaced by the new attempt's, in
``rows`` its rows are added with their ``attempt`` column. Otherwise it is skipped (counted).
Records of an attempt already written (a step split over requests) are added in ``rows``;
``verl`` has one row per step, so they are counted as ``additions_dropped`` there.

Training rollouts (``valgen.kind = rollout``) go to a table of their own, ``rollout_key``
(``train/generations``) next to ``val/generations``, with its scalars under it, in the
``rows`` layout whatever ``layout`` says (one row per response, a prompt's responses together:
``otel_valgen.exporter.tables.rollout_rows``); verl has no wide rollout table to match.

A step with conversations gets a ``conversation`` column (``conversation_<i>`` in ``verl``) of
``wandb.Html`` cells, each the conversation turn by turn (``conversation_cells.html``): wandb's
table renders an HTML cell as the page it is. A rollout step with per-token data gets the
responses' figures and a ``tokens`` column of ``wandb.Html`` pages, each token coloured by how far
the trainer's log-probability is from the rollout engine's (``token_cells.html``).
"""

from __future__ import annotations

import logging
import os
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import wandb

from otel_valgen import contract
from otel_valgen.exporter import conversation_cells, token_cells
from otel_valgen.exporter.backends import CORRECTED, BackendUnavailable, TableKeys, correction, superseded
from otel_valgen.exporter.ledger import Ledger
from otel_valgen.exporter.steps import ClosedStep, summary_scalars
from otel_valgen.exporter.tables import rows_layout, supports_incremental, verl_row, wide_table

__all__ = ["RunRef", "WandbBackend", "WriterConfig", "run_ref"]

_logger = logging.getLogger("otel_valgen.exporter")


@dataclass(frozen=True)
class RunRef:
    """The wandb run a step is written into."""

    run_id: str
    project: str | None = None
    entity: str | None = None

    @property
    def key(self) -> str:
        """Name the attachment: the run id (wandb allows one live attachment per id in a process)."""
        return self.run_id


def _text(resource: Mapping[str, Any], key: str) -> str | None:
    value = resource.get(key)
    return value if isinstance(value, str) and value else None


def run_ref(step: ClosedStep, project: str | None = None, entity: str | None = None) -> RunRef:
    """The step's target run: ``wandb.*`` resource attributes, else its ``valgen.run_id`` and the defaults."""
    resource = step.resource
    return RunRef(
        run_id=_text(resource, contract.WANDB_RUN_ID) or step.group_id,
        project=_text(resource, contract.WANDB_PROJECT) or project,
        entity=_text(resource, contract.WANDB_ENTITY) or entity,
    )


def _html(value: Any) -> Any:
    """A conversation or a response's tokens as a ``wandb.Html`` cell (a page), any other value as it is."""
    if conversation_cells.is_cell(value):
        return wandb.Html(conversation_cells.html(value), inject=False, data_is_not_path=True)
    if token_cells.is_cell(value):
        return wandb.Html(token_cells.html(value), inject=False, data_is_not_path=True)
    return value


def html_cells(rows: list[list[Any]]) -> list[list[Any]]:
    """The rows with each conversation and each response's tokens as a ``wandb.Html`` cell."""
    return [[_html(value) for value in row] for row in rows]


@dataclass(frozen=True)
class WriterConfig(TableKeys):
    """How and where steps are written (keys and scalars: ``TableKeys``).

    Attributes:
        layout: ``verl`` (one wide row per step) or ``rows`` (one row per generation); rollouts are always rows.
        mode: ``shared`` (attach to the live run) or ``offline`` (local run files).
        label: ``x_label`` of the attachment.
        max_runs: attachments kept open at once.
        step_metric: the metric the table and scalars are plotted against.
        directory: the folder wandb writes under (default: ``WANDB_DIR`` when attaching).
        project: wandb project for records without a ``wandb.project`` resource attribute.
        entity: wandb entity for records without a ``wandb.entity`` resource attribute.

    """

    layout: str = "verl"
    mode: str = "shared"
    label: str = "otel-valgen-exporter"
    max_runs: int = 16
    step_metric: str = "valgen/step"
    directory: str | None = None
    project: str | None = None
    entity: str | None = None


@dataclass
class _Attachment:
    run: Any
    tables: dict[str, Any] = field(default_factory=dict)  # the rows layout's incremental table, by kind
    steps: int = field(default=0)


class WandbBackend:
    """Writes closed steps into their wandb runs, once each."""

    name = "wandb"

    def __init__(self, config: WriterConfig, ledger: Ledger) -> None:
        if config.layout not in ("verl", "rows"):
            raise ValueError(f"unknown layout {config.layout!r}")
        if config.mode not in ("shared", "offline"):
            raise ValueError(f"unknown wandb mode {config.mode!r}")
        self.config = config
        self.ledger = ledger
        self._runs: OrderedDict[str, _Attachment] = OrderedDict()
        self._incremental: bool | None = None
        self.additions_dropped = 0

    def _settings(self) -> Any:
        mode = cast(Literal["shared", "offline"], self.config.mode)
        return wandb.Settings(
            mode=mode,
            x_primary=False,
            x_label=self.config.label,
            x_update_finish_state=False,
            reinit="create_new",
            console="off",
            save_code=False,
            silent=True,
            x_disable_stats=True,
            x_disable_machine_info=True,
        )

    def _attach(self, ref: RunRef) -> _Attachment:
        attachment = self._runs.get(ref.key)
        if attachment is not None:
            self._runs.move_to_end(ref.key)
            return attachment
        while len(self._runs) >= self.config.max_runs:
            key, oldest = self._runs.popitem(last=False)
            _logger.info("closing least recently used attachment %s", key)
            self._finish(oldest)
        try:
            directory = self.config.directory or os.environ.get("WANDB_DIR")
            settings = self._settings()
            run = wandb.init(id=ref.run_id, project=ref.project, entity=ref.entity, dir=directory, settings=settings)
            run.define_metric(self.config.step_metric)
            for key in (self.config.table_key, self.config.rollout_key):
                run.define_metric(f"{key}*", step_metric=self.config.step_metric)
        except Exception as error:
            raise BackendUnavailable(f"cannot attach to run {ref.key}: {type(error).__name__}: {error}") from error
        attachment = _Attachment(run=run)
        self._runs[ref.key] = attachment
        return attachment

    def write(self, step: ClosedStep) -> int | None:
        """Write one step; return the rows added, or None when it was written before or another attempt is shown.

        Raises:
            BackendUnavailable: wandb did not take the step; it may be retried as it is.

        """
        if superseded(self, step):
            return None
        shown = step.shown_attempt()
        target = run_ref(step, self.config.project, self.config.entity)
        if correction(self, step):
            return self._write_correction(target, step)
        committed = self.ledger.committed_samples(*step.key)
        new_ids = [g.sample_id for g in step.generations if g.sample_id not in committed]
        if self.config.layout == "verl" and not step.rollout:
            if self.ledger.is_committed(*step.key):
                if new_ids:
                    self.additions_dropped += len(new_ids)
                    _logger.warning(
                        "wandb: run %s step %d: %d generations arrived after the step was written; the verl "
                        "layout has one row per step and leaves them out (one closed step per request avoids this)",
                        step.group_id,
                        step.step,
                        len(new_ids),
                    )
                return None
            row = verl_row(step)
            by_step = self.ledger.rows(step.group_id) | {step.step: row}
            columns, data = wide_table([by_step[number] for number in sorted(by_step)])
            table, added = wandb.Table(columns=list[str | int](columns), data=html_cells(data)), 1
        else:
            columns, rows = rows_layout(step, skip=committed)
            if not rows and self.ledger.is_committed(*step.key):
                return None
            table, added = self._rows_table(target, step.kind, columns, html_cells(rows)), len(rows)
            row = None
        attachment = self._attach(target)
        try:
            attachment.run.log(self._payload(step, table))
        except Exception as error:
            self._runs.pop(target.key, None)
            self._finish(attachment)
            raise BackendUnavailable(f"cannot log to run {target.key}: {type(error).__name__}: {error}") from error
        attachment.steps += 1
        self.ledger.commit(
            step.group_id, step.step, new_ids, row=row, shown=shown, kind=step.kind, samplers=step.samplers
        )
        return added

    def _write_correction(self, target: RunRef, step: ClosedStep) -> int:
        """Log a step merged from another sampler's part whole, under its key + ``CORRECTED`` (see backends)."""
        columns, rows = rows_layout(step, skip=set())
        table = wandb.Table(columns=list(columns), data=html_cells(rows))
        payload = self._payload(step, table, key=self.config.key(step) + CORRECTED)
        attachment = self._attach(target)
        try:
            attachment.run.log(payload)
        except Exception as error:
            self._runs.pop(target.key, None)
            self._finish(attachment)
            raise BackendUnavailable(f"cannot log to run {target.key}: {type(error).__name__}: {error}") from error
        attachment.steps += 1
        sample_ids = [g.sample_id for g in step.generations]
        self.ledger.commit(
            step.group_id, step.step, sample_ids, shown=step.shown_attempt(), kind=step.kind, samplers=step.samplers
        )
        return len(rows)

    def _rows_table(self, target: RunRef, kind: str, columns: list[str], rows: list[list[Any]]) -> Any:
        """The rows layout's table of ``kind`` with ``rows`` added: incremental where wandb supports it."""
        attachment = self._attach(target)
        if self._incremental is None:
            self._incremental = supports_incremental()
        table = attachment.tables.get(kind)
        if self._incremental:
            if table is None or list(table.columns) != columns:
                table = wandb.Table(columns=list(columns), log_mode="INCREMENTAL")
            for item in rows:
                table.add_data(*item)
        else:  # an accumulating table, as verl does, on wandb versions without INCREMENTAL
            old = table.data if table is not None and list(table.columns) == columns else []
            table = wandb.Table(columns=list(columns), data=[*old, *rows])
        attachment.tables[kind] = table
        return table

    def _payload(self, step: ClosedStep, table: Any, key: str | None = None) -> dict[str, Any]:
        key = key or self.config.key(step)
        payload: dict[str, Any] = {self.config.step_metric: step.step, key: table}
        if self.config.scalars:
            for name, value in summary_scalars(step.summary).items():
                payload[f"{key}/{name}"] = value
        if step.attempt:
            payload[f"{key}/attempt"] = step.attempt
        return payload

    def _finish(self, attachment: _Attachment) -> None:
        try:
            attachment.run.finish()
        except Exception as error:  # finishing is best effort: the data was logged
            _logger.warning("finishing an attachment failed: %s: %s", type(error).__name__, error)

    def close(self, *, teardown: bool = False) -> None:
        """Finish every attachment (the trainer's run is not marked finished).

        ``run.finish()`` may return before wandb's service has written everything;
        ``teardown=True`` also waits for the service (use it when the process ends).
        """
        while self._runs:
            _, attachment = self._runs.popitem(last=False)
            self._finish(attachment)
        if teardown:
            wandb.teardown()
