"""The MLflow backend: the step's table, verl's artifact and the step's metrics, in the job's run.

The target run: the records' ``mlflow.run_id`` resource attribute (``configure`` fills it
from ``mlflow.active_run()`` in the job), on the tracking server this exporter is configured
with (``--mlflow-tracking-uri``, else ``MLFLOW_TRACKING_URI``; never a URI taken from the
records). Records without ``mlflow.run_id`` go to a run tagged ``valgen.run_id`` = their
``valgen.run_id`` (created once, named after it) in the experiment their
``mlflow.experiment_name`` names, else ``--mlflow-experiment`` (``otel-valgen``).

Per step:
- ``val_step{step}.json``: verl's artifact, a list of ``{input, output, score}`` rows in rank
  order, here with the step's other columns (step, rank, sample_id, data_source, ground_truth,
  the extra columns, attempt) in each row; a preferred attempt overwrites it.
- metrics ``<table key>/seen``, ``kept``, ``score_mean``, ... at the step.

A rollout step (``valgen.kind = rollout``) gets ``train_step{step}.json``, one row per response
by column name (``otel_valgen.exporter.tables.rollout_dicts``), and its metrics under the
rollout key (``train/generations/seen``, ...), so it never replaces the step's validation.

In a step with conversations every row has a ``conversation`` key: ``{"input", "output"}``, each
side's GenAI messages as JSON (or its text), which MLflow's artifact view shows indented.

``MlflowClient.log_table`` is not used: it lists every table in one run tag, whose value MLflow
caps at 8,000 characters, so a run with more than about 130 per-step tables fails every later
write (measured with bench/exporter_bench.py); one appended table re-uploads the whole run's
rows at every step.

A server that cannot be reached, or answers 5xx, makes the step wait (``BackendUnavailable``).
An answer that no retry can change (the run does not exist, a rejected value) drops the step,
counted and logged. The client's own retries are shortened (``MLFLOW_HTTP_REQUEST_MAX_RETRIES``
2 and ``MLFLOW_HTTP_REQUEST_TIMEOUT`` 30 s unless set), since the service retries anyway.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from otel_valgen.exporter.backends import BackendUnavailable, TableKeys, commit_step, written_before
from otel_valgen.exporter.ledger import Ledger
from otel_valgen.exporter.steps import ClosedStep, summary_scalars
from otel_valgen.exporter.tables import record_dicts, rollout_dicts

__all__ = ["EXPERIMENT_ATTRIBUTE", "RUN_ID_ATTRIBUTE", "MlflowBackend", "MlflowConfig"]

RUN_ID_ATTRIBUTE = "mlflow.run_id"
EXPERIMENT_ATTRIBUTE = "mlflow.experiment_name"
GROUP_TAG = "valgen.run_id"
VALIDATION_ARTIFACT, ROLLOUT_ARTIFACT = "val_step{step}.json", "train_step{step}.json"
_PERMANENT = frozenset({"RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE", "BAD_REQUEST", "INVALID_STATE"})
_logger = logging.getLogger("otel_valgen.exporter")


@dataclass(frozen=True)
class MlflowConfig(TableKeys):
    """Where and what to write (keys and scalars: ``TableKeys``).

    Attributes:
        tracking_uri: the tracking server (None: ``MLFLOW_TRACKING_URI``, else MLflow's default).
        experiment: the experiment of runs created for records that name no run.

    """

    tracking_uri: str | None = None
    experiment: str = "otel-valgen"


def artifact(step: ClosedStep) -> tuple[str, list[dict[str, Any]]]:
    """The step's artifact: its file name and rows (verl's ``val_step{n}.json``, or ``train_step{n}.json``)."""
    if step.rollout:
        return ROLLOUT_ARTIFACT.format(step=step.step), rollout_dicts(step)
    return VALIDATION_ARTIFACT.format(step=step.step), record_dicts(step)


class MlflowBackend:
    """Writes closed steps into MLflow runs."""

    name = "mlflow"

    def __init__(self, config: MlflowConfig, ledger: Ledger) -> None:
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
        from mlflow import MlflowClient

        self.config = config
        self.ledger = ledger
        self._client = MlflowClient(tracking_uri=config.tracking_uri)
        self._runs: dict[tuple[str, str], str] = {}  # (experiment, valgen.run_id) -> created run

    def _call(self, what: str, function: Any, *args: Any, **kwargs: Any) -> Any:
        """Call the client; sort its failures into waiting (unavailable) and dropping (anything else)."""
        from mlflow.exceptions import MlflowException

        try:
            return function(*args, **kwargs)
        except MlflowException as error:
            if error.error_code in _PERMANENT:
                raise
            raise BackendUnavailable(f"mlflow {what}: {error.error_code}: {error}") from error
        except OSError as error:  # connection refused, reset, timed out (requests' errors are OSErrors)
            raise BackendUnavailable(f"mlflow {what}: {type(error).__name__}: {error}") from error

    def _run_id(self, step: ClosedStep) -> str:
        named = step.resource.get(RUN_ID_ATTRIBUTE)
        if isinstance(named, str) and named:
            return named
        experiment = step.resource.get(EXPERIMENT_ATTRIBUTE)
        experiment = experiment if isinstance(experiment, str) and experiment else self.config.experiment
        key = (experiment, step.group_id)
        if key not in self._runs:
            self._runs[key] = self._find_or_create(experiment, step.group_id)
        return self._runs[key]

    def _find_or_create(self, experiment_name: str, group: str) -> str:
        client = self._client
        experiment = self._call("get experiment", client.get_experiment_by_name, experiment_name)
        experiment_id = (
            experiment.experiment_id
            if experiment is not None
            else self._call("create experiment", client.create_experiment, experiment_name)
        )
        quoted = group.replace("\\", "\\\\").replace("'", "\\'")
        runs = self._call(
            "search runs", client.search_runs, [experiment_id], filter_string=f"tags.`{GROUP_TAG}` = '{quoted}'"
        )
        if runs:
            return str(runs[0].info.run_id)
        _logger.info("mlflow: the records of %s name no run; writing to a new run in %s", group, experiment_name)
        run = self._call("create run", client.create_run, experiment_id, tags={GROUP_TAG: group}, run_name=group)
        return str(run.info.run_id)

    def write(self, step: ClosedStep) -> int | None:
        """Write one step; None when it was written before or another attempt is shown.

        Raises:
            BackendUnavailable: the tracking server cannot take the step now.

        """
        if written_before(self, step):
            return None
        from mlflow.entities import Metric

        run_id = self._run_id(step)
        key = self.config.key(step)
        if step.generations:
            name, rows = artifact(step)
            with tempfile.TemporaryDirectory(prefix="valgen-mlflow-") as folder:
                path = Path(folder, name)
                path.write_text(json.dumps(rows), encoding="utf-8")
                self._call("log artifact", self._client.log_artifact, run_id, str(path))
        if self.config.scalars:
            now = int(time.time() * 1000)
            metrics = [
                Metric(f"{key}/{name}", float(value), now, step.step)
                for name, value in summary_scalars(step.summary).items()
            ]
            if metrics:
                self._call("log metrics", self._client.log_batch, run_id, metrics=metrics, synchronous=True)
        return commit_step(self, step)

    def close(self, *, teardown: bool = False) -> None:
        """Nothing to release: the client holds no runs open."""
        del teardown
