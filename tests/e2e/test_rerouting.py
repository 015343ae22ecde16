"""User story: a step re-routed mid-way between samplers is still written exact, or says what is missing.

A job's step (two sources, every generation a record) is written by the embedded sink, then
routed in two parts as an agent does when its ring changes mid-step: the start records and the
first half of the generations to sampler A, the rest with the end records to sampler B (built
collectors, ``collector.yaml`` + ``sampler.yaml``). Both samplers export to the exporter service
(MLflow on a real tracking server, and TensorBoard). The oracle is ``otel-valgen show``'s
selection over the job's own records: what one sampler would have kept and counted.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from otel_valgen import contract
from otel_valgen.exporter.backends.mlflow import MlflowConfig
from otel_valgen.exporter.backends.tensorboard import TensorBoardConfig
from otel_valgen.reader import read_paths
from otel_valgen.selection import StepSelection, select_steps
from tests.e2e.cluster import Cluster, cluster_env
from tests.e2e.harness import Collector, StandIn, wait_for
from tests.e2e.partial_job import K
from tests.exporter.mlflow_server import MlflowServer
from tests.exporter.tensorboard_files import read_texts
from tests.support.ports import free_port
from tests.support.require import require_module

mlflow = require_module("mlflow", "mlflow (its tracking server) is not installed; pip install -e '.[dev]'")
REPO = Path(__file__).resolve().parents[2]
KEY = "val/generations"
DECISION_WAIT = "2s"
# A sampler whose part of a step has announced sources that never end there (their end records
# went to the new owner) closes it at max_step_duration (6 h by default; short here).
MAX_STEP_DURATION = "6s"


@pytest.fixture
def stack(tmp_path: Path, loki_stand_in: StandIn) -> Iterator[Cluster]:
    """An empty cluster on loopback: the test starts the samplers and the exporter service."""
    cluster = Cluster(tmp_path, cluster_env(free_port(), loki_stand_in.endpoint, DECISION_WAIT, MAX_STEP_DURATION))
    yield cluster
    cluster.stop()


def start_exporter(stack: Cluster, mlflow_server: MlflowServer) -> None:
    """The exporter service, writing to MLflow on ``mlflow_server`` and to TensorBoard."""
    configs = {
        "mlflow": MlflowConfig(tracking_uri=mlflow_server.uri),
        "tensorboard": TensorBoardConfig(root=str(stack.home / "boards")),
    }
    stack.start_exporter(["mlflow", "tensorboard"], configs)


def job_records(folder: Path, run_id: str, step: int, mlflow_run: str) -> list[dict[str, Any]]:
    """Run the job (embedded sink); its OTLP/JSON requests, in the order it wrote them."""
    env = {"PATH": str(Path(sys.executable).parent), "MLFLOW_RUN_ID": mlflow_run, "HOME": str(folder)}
    subprocess.run(
        [sys.executable, "-m", "tests.e2e.partial_job", str(folder / "raw"), run_id, str(step)],
        cwd=REPO,
        env=env,
        check=True,
        timeout=120,
    )
    lines = [line for path in sorted((folder / "raw").glob("*.jsonl")) for line in path.read_text().splitlines()]
    return [json.loads(line) for line in lines if line.strip()]


def split_in_two(requests: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any], int]:
    """Two requests: the start records and the first half of the generations; then the rest.

    Returns them and how many generation records the first holds.
    """
    items = [
        (resource_logs["resource"], scope_logs.get("scope", {}), record)
        for request in requests
        for resource_logs in request["resourceLogs"]
        for scope_logs in resource_logs["scopeLogs"]
        for record in scope_logs["logRecords"]
    ]
    generations = [item for item in items if item[2].get("eventName") == contract.EVENT_GENERATION]
    first = {id(item[2]) for item in generations[: len(generations) // 2]}
    first |= {id(item[2]) for item in items if item[2].get("eventName") == contract.EVENT_VALIDATION_START}

    def request(chosen: list[tuple[Any, Any, Any]]) -> dict[str, Any]:
        return {
            "resourceLogs": [
                {"resource": resource, "scopeLogs": [{"scope": scope, "logRecords": [record]}]}
                for resource, scope, record in chosen
            ]
        }

    part_a = [item for item in items if id(item[2]) in first]
    part_b = [item for item in items if id(item[2]) not in first]
    return request(part_a), request(part_b), len(generations) // 2


def routed_step(
    stack: Cluster, mlflow_server: MlflowServer, mlflow_run: str, run_id: str, step: int
) -> tuple[StepSelection, tuple[dict[str, Any], dict[str, Any], int]]:
    """The job's step, its oracle, and its two parts; the exporter service and samplers a and b started."""
    requests = job_records(stack.home, run_id, step, mlflow_run)
    start_exporter(stack, mlflow_server)
    stack.start_sampler("a")
    stack.start_sampler("b")
    return oracle(stack.home), split_in_two(requests)


def post(collector: Collector, request: dict[str, Any]) -> None:
    """Send one OTLP/JSON request to a sampler's OTLP/HTTP receiver."""
    body = json.dumps(request).encode()
    call = urllib.request.Request(
        f"http://{collector.http_endpoint}/v1/logs", body, {"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(call, timeout=10) as response:
        assert response.status == 200


def oracle(folder: Path) -> StepSelection:
    """The step as one sampler would keep and count it: ``show``'s selection over the job's own records."""
    (selection,) = select_steps(read_paths(sorted((folder / "raw").glob("*.jsonl")), lambda _: None))
    return selection


def mlflow_step(server: MlflowServer, run_id: str, step: int, folder: Path) -> tuple[list[str], dict[str, float]]:
    """The step's artifact's sample ids, and the latest value of each of its summary metrics."""
    client = mlflow.MlflowClient(server.uri)
    rows = json.loads(Path(client.download_artifacts(run_id, f"val_step{step}.json", str(folder))).read_text())
    metrics = {}
    for name in ("seen", "kept", "missing"):
        history = client.get_metric_history(run_id, f"{KEY}/{name}")
        metrics[name] = max(history, key=lambda m: (m.timestamp, m.value)).value if history else -1.0
    return [row["sample_id"] for row in rows], metrics


def shown(stack: Cluster) -> StepSelection:
    """``otel-valgen show``'s selection over every sampler's file output."""
    (selection,) = select_steps(read_paths(sampler_files(stack), lambda _: None))
    return selection


def sampler_files(stack: Cluster) -> list[Path]:
    """Every sampler's file output so far."""
    return [collector.file_path for collector in stack.collectors.values() if collector.file_path.exists()]


def show_command(stack: Cluster) -> str:
    """What ``otel-valgen show`` prints over every sampler's file output."""
    args = [sys.executable, "-m", "otel_valgen.cli", "show", *map(str, sampler_files(stack))]
    env = {"PATH": str(Path(sys.executable).parent), "COLUMNS": "250", "HOME": str(stack.home)}
    return subprocess.run(args, capture_output=True, text=True, check=True, env=env, timeout=60).stdout


@pytest.mark.timeout(180)
@pytest.mark.parametrize("case", ["both_alive", "killed_and_restarted"])
def test_a_step_in_two_parts_is_written_exact(
    case: str, stack: Cluster, mlflow_server: MlflowServer, mlflow_run: str
) -> None:
    """The parts of two samplers merge: MLflow is rewritten, TensorBoard gets a marked correction, show agrees."""
    expected, (first, rest, _) = routed_step(stack, mlflow_server, mlflow_run, "rerouted", 7)
    a, b = stack.collectors["a"], stack.collectors["b"]

    post(a, first)
    if case == "killed_and_restarted":
        stack.kill("a")
    else:  # a's part is written before b's arrives: the case a rewrite or correction is for
        wait_for(lambda: stack.written("mlflow") == 1 and stack.written("tensorboard") == 1, 30, "a's part written")
    post(b, rest)
    if case == "killed_and_restarted":
        wait_for(lambda: stack.written("mlflow") == 1, 30, "b's part written")
        stack.start_sampler("a")  # resumes its open group from storage and closes it
    wait_for(lambda: stack.written("mlflow") == 2 and stack.written("tensorboard") == 2, 60, "the merged step")

    expected_ids = [g.sample_id for g in expected.generations]
    assert len(expected_ids) == K
    ids, metrics = mlflow_step(mlflow_server, mlflow_run, 7, stack.home / "download")
    assert ids == expected_ids, "MLflow's artifact is rewritten with the exact bottom-k"
    assert metrics == {"seen": float(expected.seen), "kept": float(K), "missing": 0.0}
    corrected = read_texts((stack.home / "boards") / "otel-valgen" / "rerouted", f"{KEY}/corrected")
    assert list(corrected) == [7], "TensorBoard cannot change a past step: the merged step is a marked correction"
    assert [f"{g.input}@7" in corrected[7] for g in expected.generations] == [True] * K
    assert corrected[7].count("### Sample") == K
    assert list(read_texts((stack.home / "boards") / "otel-valgen" / "rerouted", KEY)) == [7]
    assert stack.stats()["merged_steps"] == 1

    selection = shown(stack)
    assert [g.sample_id for g in selection.generations] == expected_ids
    assert (selection.seen, selection.complete) == (expected.seen, True)
    assert selection.summary is not None
    assert selection.summary[contract.SAMPLERS] == ["a", "b"]
    assert selection.summary[contract.MISSING] == 0
    assert selection.score_mean == pytest.approx(expected.score_mean)
    assert "merged from samplers a, b" in show_command(stack)


@pytest.mark.timeout(180)
def test_a_part_lost_for_good_is_named_missing(stack: Cluster, mlflow_server: MlflowServer, mlflow_run: str) -> None:
    """A sampler killed with its stored state gone: the step is written once, with exactly what is missing."""
    expected, (first, rest, lost) = routed_step(stack, mlflow_server, mlflow_run, "lost", 9)
    post(stack.collectors["a"], first)
    stack.kill("a")
    shutil.rmtree(stack.home / "a")  # its volume is gone too
    del stack.collectors["a"]
    post(stack.collectors["b"], rest)
    wait_for(lambda: stack.written("mlflow") == 1 and stack.written("tensorboard") == 1, 60, "b's part written")

    _, metrics = mlflow_step(mlflow_server, mlflow_run, 9, stack.home / "download")
    assert metrics == {"seen": float(expected.seen), "kept": float(K), "missing": float(lost)}
    selection = shown(stack)
    assert selection.summary is not None
    assert selection.summary[contract.MISSING] == lost
    assert selection.summary[contract.CLOSED_REASON] != "complete"
    assert selection.seen == expected.seen
    assert selection.complete is False
    assert f"{lost} missing" in show_command(stack)
    assert stack.stats()["merged_steps"] == 0
