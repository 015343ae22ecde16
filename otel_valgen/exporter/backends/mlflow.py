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

With ``link_traces`` (``--mlflow-link-traces``, ``VALGEN_MLFLOW_LINK_TRACES``; off by default), a
step whose records name the job's run (``mlflow.run_id``) also gets its trace linked to that run:
the trace the collector's ``valgen_spans`` connector sends to this tracking server when it runs
``collector-config/traces-mlflow.yaml``, whose id ``tr-<32 hex>`` is derived from (``valgen.run_id``,
step, kind) (``otel_valgen._tracing.step_trace_id``; ``trace_id_of``). MLflow's OTLP endpoint
links traces to a run only by the ``x-mlflow-run-id`` header, one run per collector; this links
each job's steps to the job's own run (``MlflowClient.link_traces_to_run``, then the trace looked
up), off the writer thread: the trace may come after the step is written, so a link waits until
its trace is there, at most ``link_traces_wait_s`` (``otel_valgen.exporter.trace_links``). It is
off by default because without the traces overlay no trace ever comes: each step's link would
wait, then be given up with a warning. MLflow's SQL store keeps a link made before its trace
arrives, so a trace that comes even later still shows on the run.

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

from otel_valgen._tracing import step_trace_id
from otel_valgen.exporter.backends import BackendUnavailable, TableKeys, commit_step, written_before
from otel_valgen.exporter.ledger import Ledger
from otel_valgen.exporter.steps import ClosedStep, summary_scalars
from otel_valgen.exporter.tables import record_dicts, rollout_dicts
from otel_valgen.exporter.trace_links import LinkRefused, TraceLinks

__all__ = ["EXPERIMENT_ATTRIBUTE", "RUN_ID_ATTRIBUTE", "MlflowBackend", "MlflowConfig", "trace_id_of"]

RUN_ID_ATTRIBUTE = "mlflow.run_id"
EXPERIMENT_ATTRIBUTE = "mlflow.experiment_name"
GROUP_TAG = "valgen.run_id"
VALIDATION_ARTIFACT, ROLLOUT_ARTIFACT = "val_step{step}.json", "train_step{step}.json"
_PERMANENT = frozenset({"RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE", "BAD_REQUEST", "INVALID_STATE"})
# A link no retry changes: a server without the link endpoint, ids it does not take, no right to link.
# RESOURCE_DOES_NOT_EXIST is not among them: a store that checks the trace says so until it comes.
_LINK_REFUSED = frozenset({"ENDPOINT_NOT_FOUND", "INVALID_PARAMETER_VALUE", "BAD_REQUEST", "PERMISSION_DENIED"})
LINK_FIX = (
    "Send the collector's traces to this tracking server (collector-config/traces-mlflow.yaml, "
    "VALGEN_MLFLOW_TRACKING_URI naming it), or turn trace linking off (--no-mlflow-link-traces, "
    "VALGEN_MLFLOW_LINK_TRACES=false)"
)
_logger = logging.getLogger("otel_valgen.exporter")


@dataclass(frozen=True)
class MlflowConfig(TableKeys):
    """Where and what to write (keys and scalars: ``TableKeys``).

    Attributes:
        tracking_uri: the tracking server (None: ``MLFLOW_TRACKING_URI``, else MLflow's default).
        experiment: the experiment of runs created for records that name no run.
        link_traces: link each written step's trace to the run its records name (``mlflow.run_id``).
        link_traces_wait_s: how long a link waits for its trace after the step is written.

    """

    tracking_uri: str | None = None
    experiment: str = "otel-valgen"
    link_traces: bool = False
    link_traces_wait_s: float = 600.0


def trace_id_of(step: ClosedStep) -> str:
    """The MLflow trace id of the step's trace, as the ``valgen_spans`` connector makes it: ``tr-<32 hex>``."""
    return f"tr-{step_trace_id(step.group_id, step.step, step.kind):032x}"


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
        self.trace_links: TraceLinks | None = None
        if config.link_traces:
            from mlflow.tracing.client import TracingClient

            self._tracing = TracingClient(config.tracking_uri)
            self.trace_links = TraceLinks(
                self.name, self._link_traces, self._trace_exists, wait_s=config.link_traces_wait_s, fix=LINK_FIX
            )

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
        named = step.resource.get(RUN_ID_ATTRIBUTE)
        if self.trace_links is not None and isinstance(named, str) and named:
            self.trace_links.add(trace_id_of(step), named, f"run {step.group_id} step {step.step} ({step.kind})")
        return commit_step(self, step)

    def _link_traces(self, run_id: str, trace_ids: list[str]) -> None:
        """Link traces to a run; ``LinkRefused`` when no retry can change the answer."""
        from mlflow.exceptions import MlflowException

        try:
            self._client.link_traces_to_run(trace_ids, run_id=run_id)
        except MlflowException as error:
            if error.error_code in _LINK_REFUSED:
                raise LinkRefused(f"{error.error_code}: {error.message}") from error
            raise

    def _trace_exists(self, trace_id: str) -> bool:
        """Whether the tracking server has the trace."""
        from mlflow.exceptions import MlflowException

        try:
            self._tracing.get_trace_info(trace_id)
        except MlflowException as error:
            if error.error_code == "RESOURCE_DOES_NOT_EXIST":
                return False
            raise
        return True

    def trace_link_stats(self) -> dict[str, int] | None:
        """Trace links ``made``, ``pending`` and ``given_up``; None when linking is off."""
        return None if self.trace_links is None else self.trace_links.stats()

    def close(self, *, teardown: bool = False) -> None:
        """Stop linking traces (the client holds no runs open)."""
        del teardown
        if self.trace_links is not None:
            self.trace_links.close()
