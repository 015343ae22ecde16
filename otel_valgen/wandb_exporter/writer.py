"""Attach to the training job's wandb run from this separate process and write closed steps.

Each target run gets one attachment: ``wandb.init(id=..., reinit="create_new")`` with
``mode="shared"``, ``x_primary=False`` (this process is a secondary writer and leaves the
run's files and metadata to the trainer), ``x_label`` (its console and system data are told
apart) and ``x_update_finish_state=False`` (finishing the attachment never marks the
trainer's run finished). Offline mode (``WANDB_MODE=offline``) writes a local run with the
same id instead. The trainer's ``_step`` belongs to the trainer, so tables are logged
without ``step=`` against a step metric (``valgen/step``) declared with ``define_metric``.
At most ``max_runs`` attachments stay open; the least recently used one is finished first.
All calls happen on the caller's thread: the service uses a single writer thread.

Attempts: of the attempts of one step (``valgen.attempt``: resume, retry) the one the shared
rule picks is shown (``otel_valgen.selection.choose_attempt``: latest complete, else latest).
An attempt that arrives after another one of its step was written is written only when the
rule prefers it; it is then logged again at the same ``valgen/step`` with
``<table_key>/attempt``: in ``verl`` the step's row is replaced by the new attempt's, in
``rows`` its rows are added with their ``attempt`` column. Otherwise it is skipped (counted).
"""

from __future__ import annotations

import logging
import os
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import wandb

from otel_valgen.wandb_exporter.ledger import Ledger, ShownAttempt
from otel_valgen.wandb_exporter.model import ClosedStep, RunRef, summary_scalars
from otel_valgen.wandb_exporter.tables import ROW_COLUMNS, generation_rows, pad_rows, supports_incremental, verl_row

__all__ = ["WandbWriter", "WriterConfig", "WriterUnavailable"]

_logger = logging.getLogger("otel_valgen.wandb_exporter")


class WriterUnavailable(Exception):
    """wandb cannot take the data now (attaching or logging failed); try again later."""


@dataclass(frozen=True)
class WriterConfig:
    """How and where steps are written.

    Attributes:
        layout: ``verl`` (one wide row per step) or ``rows`` (one row per generation).
        table_key: the key the table is logged under; scalars go under ``<table_key>/``.
        mode: ``shared`` (attach to the live run) or ``offline`` (local run files).
        label: ``x_label`` of the attachment.
        max_runs: attachments kept open at once.
        scalars: log seen, kept, late and missing per step from the summary.
        step_metric: the metric the table and scalars are plotted against.
        directory: the folder wandb writes under (default: ``WANDB_DIR`` when attaching).

    """

    layout: str = "verl"
    table_key: str = "val/generations"
    mode: str = "shared"
    label: str = "otel-valgen-exporter"
    max_runs: int = 16
    scalars: bool = True
    step_metric: str = "valgen/step"
    directory: str | None = None


@dataclass
class _Attachment:
    run: Any
    table: Any = None  # the rows layout's incremental table
    steps: int = field(default=0)


class WandbWriter:
    """Writes closed steps into their runs, once each."""

    def __init__(self, config: WriterConfig, ledger: Ledger) -> None:
        if config.layout not in ("verl", "rows"):
            raise ValueError(f"unknown layout {config.layout!r}")
        if config.mode not in ("shared", "offline"):
            raise ValueError(f"unknown wandb mode {config.mode!r}")
        self.config = config
        self._ledger = ledger
        self._runs: OrderedDict[str, _Attachment] = OrderedDict()
        self._incremental: bool | None = None
        self.written_steps = 0
        self.superseded_attempts = 0

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
            run.define_metric(f"{self.config.table_key}*", step_metric=self.config.step_metric)
        except Exception as error:
            raise WriterUnavailable(f"cannot attach to run {ref.key}: {type(error).__name__}: {error}") from error
        attachment = _Attachment(run=run)
        self._runs[ref.key] = attachment
        return attachment

    def write(self, step: ClosedStep) -> int:
        """Write one step; return the rows added (0 when it was written before).

        Raises:
            WriterUnavailable: wandb did not take the step; it may be retried as it is.

        """
        candidate = step.shown_attempt()
        if self._superseded(step, candidate):
            return 0
        committed = self._ledger.committed_samples(step.group_id, step.step, step.attempt)
        if self.config.layout == "verl":
            if self._ledger.is_committed(step.group_id, step.step, step.attempt):
                return 0
            row = verl_row(step)
            earlier = [r for r in self._ledger.rows(step.group_id) if r[0] != step.step]
            columns, data = pad_rows(sorted([*earlier, row], key=lambda r: r[0]))
            table, added, new_ids = (
                wandb.Table(columns=list[str | int](columns), data=data),
                1,
                [g.sample_id for g in step.generations],
            )
        else:
            rows = generation_rows(step, skip=committed)
            if not rows:
                return 0
            attachment = self._attach(step.run)
            if self._incremental is None:
                self._incremental = supports_incremental()
            if self._incremental:
                table = attachment.table or wandb.Table(columns=list(ROW_COLUMNS), log_mode="INCREMENTAL")
                for item in rows:
                    table.add_data(*item)
            else:  # an accumulating table, as verl does, on wandb versions without INCREMENTAL
                old = attachment.table.data if attachment.table is not None else []
                table = wandb.Table(columns=list(ROW_COLUMNS), data=[*old, *rows])
            attachment.table = table
            row, added = None, len(rows)
            new_ids = [g.sample_id for g in step.generations if g.sample_id not in committed]
        attachment = self._attach(step.run)
        try:
            attachment.run.log(self._payload(step, table))
        except Exception as error:
            self._runs.pop(step.run.key, None)
            self._finish(attachment)
            raise WriterUnavailable(f"cannot log to run {step.run.key}: {type(error).__name__}: {error}") from error
        attachment.steps += 1
        self._ledger.commit(step.group_id, step.step, new_ids, row=row, shown=candidate)
        self.written_steps += 1
        return added

    def _payload(self, step: ClosedStep, table: Any) -> dict[str, Any]:
        payload: dict[str, Any] = {self.config.step_metric: step.step, self.config.table_key: table}
        if self.config.scalars:
            for name, value in summary_scalars(step.summary).items():
                payload[f"{self.config.table_key}/{name}"] = value
        if step.attempt:
            payload[f"{self.config.table_key}/attempt"] = step.attempt
        return payload

    def _superseded(self, step: ClosedStep, candidate: ShownAttempt) -> bool:
        """Whether another attempt of the step is shown and the shared rule keeps it."""
        shown = self._ledger.shown(step.group_id, step.step)
        if shown is None or shown.attempt == candidate.attempt or shown.rank() < candidate.rank():
            return False
        self.superseded_attempts += 1
        _logger.info(
            "run %s step %d: attempt %r not written, attempt %r is shown",
            step.group_id,
            step.step,
            step.attempt,
            shown.attempt,
        )
        return True

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
