"""User story: one shared collector, many jobs, each job's step traces on its own MLflow run.

Two training jobs, each with an MLflow run created first on a real ``mlflow server`` and named
to the job as a user names it (``MLFLOW_RUN_ID``), log agentic validation steps
(tests/e2e/agentic_job.py) through one built collector started with collector.yaml and the
traces-mlflow.yaml overlay, without ``VALGEN_MLFLOW_RUN_ID`` (the overlay's one-run header).
The collector sends each closed step to the real exporter service (``otel-valgen exporter
--backend mlflow``, ``VALGEN_MLFLOW_LINK_TRACES=1``) and its trace to MLflow's OTLP endpoint.
The exporter writes each step into the run its records name and links the step's trace to it.
Read back with MLflow's client:

- ``search_traces(run_id=<job A's run>)`` returns exactly job A's step traces, and job B's run
  exactly job B's, though both jobs log a step 1;
- the exporter's ``/metrics`` counts the links as made, none given up, none waiting.
"""

from __future__ import annotations

import os
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest

from otel_valgen import contract
from tests.e2e import harness
from tests.e2e.harness import REPO, Collector, records_of_file, wait_for
from tests.e2e.traces import JOB, step_trace_id
from tests.exporter.mlflow_server import MlflowServer
from tests.support.ports import free_port
from tests.support.process import ServerProcess, launch, run_in_a_terminal

K = 2
MADE = 'valgen_exporter_trace_links_total{backend="mlflow",outcome="made"}'
JOBS = {  # valgen run id -> step -> the trajectories its process logs
    "linked-job-a": {1: range(6), 2: range(6, 12)},
    "linked-job-b": {1: range(12, 18)},
}


@dataclass
class LinkedJobs:
    """The MLflow server, the traces' experiment, each job's MLflow run, and the exporter's /metrics."""

    server: MlflowServer
    experiment_id: str
    runs: dict[str, str]  # valgen run id -> MLflow run id
    metrics_url: str


def start_exporter(home: Path, grpc_port: int, metrics_port: int, tracking_uri: str) -> ServerProcess:
    """``otel-valgen exporter --backend mlflow`` as a user starts it, linking traces by its environment variable."""
    script = Path(sys.executable).parent / "otel-valgen"
    args = [str(script), "exporter", "--http", "", "--grpc", f"127.0.0.1:{grpc_port}", "--backend", "mlflow"]
    args += ["--metrics-address", f"127.0.0.1:{metrics_port}", "--state-dir", str(home / "state")]
    env = os.environ | {"MLFLOW_TRACKING_URI": tracking_uri, "VALGEN_MLFLOW_LINK_TRACES": "1"}
    exporter = ServerProcess("exporter", launch("exporter", args, env, home, "exporter.log"), home / "exporter.log")

    def ready() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/readyz", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    try:
        exporter.wait_ready(ready, 60)
    except BaseException:
        exporter.stop()
        raise
    return exporter


def run_job(collector: Collector, run_id: str, steps: dict[int, range], mlflow_run: str) -> None:
    """One job's steps through ``collector`` (tests/e2e/agentic_job.py, one process each, as a terminal runs them).

    Waits for the job's summaries in the collector's file; its records name ``mlflow_run`` (as
    ``MLFLOW_RUN_ID`` makes them).
    """
    job_env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(REPO),
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://{collector.http_endpoint}",
        "OTEL_VALGEN_RUN_ID": run_id,
        "OTEL_VALGEN_COUNT": str(K),
        "MLFLOW_RUN_ID": mlflow_run,
    }
    commands = [
        f"{JOB} --step {step} --source trainer --first {indices.start} --count {len(indices)}"
        for step, indices in steps.items()
    ]
    run_in_a_terminal(" && ".join(commands), job_env)

    def summaries() -> list[harness.Record]:
        return [
            r
            for r in records_of_file(collector.file_path)
            if r.event == contract.EVENT_STEP_SUMMARY and r.attributes[contract.RUN_ID] == run_id
        ]

    wait_for(lambda: len(summaries()) == len(steps), 60, f"the summaries of {run_id} in the collector's file")
    assert {r.resource["mlflow.run_id"] for r in summaries()} == {mlflow_run}


def scrape(url: str) -> dict[str, float]:
    """The exporter's trace link samples, by their line's name and labels."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    samples = {}
    for line in text.splitlines():
        if line.startswith("valgen_exporter_trace_links"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    return samples


@pytest.fixture(scope="module")
def linked_jobs(mlflow_server: MlflowServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LinkedJobs]:
    """Both jobs through one collector (traces overlay, no run header) and the exporter; both runs' traces linked."""
    import mlflow

    client = mlflow.MlflowClient(mlflow_server.uri)
    experiment_id = client.create_experiment(f"valgen-run-links-{tmp_path_factory.getbasetemp().name}")
    runs = {job: str(client.create_run(experiment_id, run_name=job).info.run_id) for job in JOBS}
    home = tmp_path_factory.mktemp("run-links")
    grpc_port, metrics_port = free_port(), free_port()
    with ExitStack() as stack:
        exporter = start_exporter(home / "exporter", grpc_port, metrics_port, mlflow_server.uri)
        stack.callback(exporter.stop)
        loki = stack.enter_context(harness.loki_stand_in())
        env = {
            "VALGEN_TRACKER_EXPORTER_ENDPOINT": f"127.0.0.1:{grpc_port}",
            "VALGEN_LOKI_OTLP_ENDPOINT": loki.endpoint,
            "VALGEN_DECISION_WAIT": "3s",
            "VALGEN_MLFLOW_TRACKING_URI": mlflow_server.uri,
            "VALGEN_MLFLOW_EXPERIMENT_ID": experiment_id,
        }
        if os.environ.get("VALGEN_MLFLOW_RUN_ID"):  # not from the test's own environment either
            env["VALGEN_MLFLOW_RUN_ID"] = ""
        collector = harness.start_collector(home, "collector", ["collector.yaml", "traces-mlflow.yaml"], env)
        stack.callback(collector.stop)
        for job, steps in JOBS.items():
            run_job(collector, job, steps, runs[job])
        metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
        total = sum(len(steps) for steps in JOBS.values())
        try:
            wait_for(lambda: scrape(metrics_url).get(MADE) == total, 90, f"{total} trace links made by the exporter")
        except AssertionError as error:
            raise AssertionError(
                f"{error}\n{scrape(metrics_url)}\nexporter log:\n{exporter.log_tail(40)}\n"
                f"collector log:\n{collector.log_tail(40)}"
            ) from None
        yield LinkedJobs(mlflow_server, experiment_id, runs, metrics_url)


def test_each_jobs_run_lists_exactly_its_own_step_traces(linked_jobs: LinkedJobs) -> None:
    """search_traces(run_id=...) of each job's run: its steps' traces, not the other's, though both have a step 1."""
    import mlflow

    client = mlflow.MlflowClient(linked_jobs.server.uri)
    stored = client.search_traces(locations=[linked_jobs.experiment_id], include_spans=False, max_results=100)
    every = {f"tr-{step_trace_id(job, step)}" for job, steps in JOBS.items() for step in steps}
    assert {trace.info.trace_id for trace in stored} == every
    for job, steps in JOBS.items():
        linked = client.search_traces(
            locations=[linked_jobs.experiment_id], run_id=linked_jobs.runs[job], include_spans=False
        )
        assert sorted(trace.info.trace_id for trace in linked) == sorted(f"tr-{step_trace_id(job, s)}" for s in steps)
    # The traces came without a run header: a run no job names lists none.
    other = str(client.create_run(linked_jobs.experiment_id).info.run_id)
    assert list(client.search_traces(locations=[linked_jobs.experiment_id], run_id=other)) == []


def test_the_exporter_counts_the_links_made(linked_jobs: LinkedJobs) -> None:
    """/metrics: every step's link made, none given up, none waiting."""
    samples = scrape(linked_jobs.metrics_url)
    total = sum(len(steps) for steps in JOBS.values())
    assert samples[MADE] == total
    assert samples['valgen_exporter_trace_links_total{backend="mlflow",outcome="given_up"}'] == 0
    assert samples['valgen_exporter_trace_links_pending{backend="mlflow"}'] == 0
