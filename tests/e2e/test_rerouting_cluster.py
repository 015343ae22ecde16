"""User story: the cluster changes mid-step (a sampler lost, restarted, added, or all replaced in turn).

Two agents and three samplers (built collectors, shipped configs) on loopback, the exporter
service writing to TensorBoard. Two training processes, one per node's agent, keep twelve steps
open across a pause; the test changes the cluster during the pause. A ring change is made as the
``k8s``/``dns`` resolvers make it when a sampler's endpoint goes or comes: the agents are
restarted on their queues with the new list. Every step must end up written exact (the bottom-k
of everything the jobs sent, merged from parts where the step was re-routed) or, where a part
was lost for good, say exactly how many generations are missing. Each case prints its figures
(docs/deployment.md, *Failure cases*).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from otel_valgen.exporter.backends.mlflow import MlflowConfig
from otel_valgen.exporter.backends.tensorboard import TensorBoardConfig
from otel_valgen.reader import read_paths
from otel_valgen.sampling import SortKey, bottom_k, sample_key, untagged
from otel_valgen.selection import select_steps
from tests.e2e.cluster import Cluster, cluster_env
from tests.e2e.harness import StandIn, wait_for
from tests.e2e.rerouting_job import PER_SOURCE, SEED, K, sample_ids
from tests.exporter.mlflow_server import MlflowServer
from tests.exporter.tensorboard_files import read_scalars, read_texts
from tests.faults.conftest import metric_sum, metrics
from tests.support.ports import free_port
from tests.support.require import require_module

mlflow = require_module("mlflow", "mlflow (its tracking server) is not installed; pip install -e '.[dev]'")

REPO = Path(__file__).resolve().parents[2]
KEY = "val/generations"
STEPS = list(range(1, 13))
SOURCES = ("trainer", "rollouter")  # one process on each node
# A part whose sources ended elsewhere closes at max_step_duration: long enough for the pause.
DECISION_WAIT, MAX_STEP_DURATION = "2s", "20s"


@pytest.fixture
def cluster(tmp_path: Path, loki_stand_in: StandIn, mlflow_server: MlflowServer) -> Iterator[Cluster]:
    """Samplers s0-s2, agents a0 and a1 routing to them, and the exporter service (MLflow, TensorBoard)."""
    running = Cluster(tmp_path, cluster_env(free_port(), loki_stand_in.endpoint, DECISION_WAIT, MAX_STEP_DURATION))
    configs = {
        "mlflow": MlflowConfig(tracking_uri=mlflow_server.uri),
        "tensorboard": TensorBoardConfig(root=str(tmp_path / "boards")),
    }
    running.start_exporter(["mlflow", "tensorboard"], configs)
    for name in ("s0", "s1", "s2"):
        running.start_sampler(name)
    for agent in ("a0", "a1"):
        running.start_agent(agent, ["s0", "s1", "s2"])
    yield running
    running.stop()


def expected_ids(step: int) -> list[str]:
    """The exact bottom-k of everything both processes sent at ``step``."""
    ids = [f"{sample}/0" for source in SOURCES for sample in sample_ids(source, step)]
    return [sample for _, sample in bottom_k(((SortKey.of(sample_key(SEED, i), i), i) for i in ids), K)]


def start_jobs(cluster: Cluster, go: Path, mlflow_run: str) -> list[subprocess.Popen[bytes]]:
    """One training process per node, each sending to its node's agent; they pause mid-step until ``go``."""
    steps = ",".join(map(str, STEPS))
    env = os.environ | {"MLFLOW_RUN_ID": mlflow_run}
    jobs = []
    for source, agent in zip(SOURCES, ("a0", "a1"), strict=True):
        endpoint = f"http://{cluster.collectors[agent].http_endpoint}"
        args = [sys.executable, "-m", "tests.e2e.rerouting_job", endpoint, "cluster", source, steps, str(go)]
        jobs.append(subprocess.Popen(args, cwd=REPO, env=env))
    cluster.jobs += jobs  # killed at teardown if a failure leaves them paused
    return jobs


def mlflow_steps(server: MlflowServer, run_id: str, folder: Path) -> dict[int, tuple[list[str], float]]:
    """Each step's artifact (its sample ids, as last written) and its latest ``missing`` metric."""
    client = mlflow.MlflowClient(server.uri)
    history = client.get_metric_history(run_id, f"{KEY}/missing")
    missing = {m.step: m.value for m in sorted(history, key=lambda m: m.timestamp)}
    out = {}
    for step in STEPS:
        path = client.download_artifacts(run_id, f"val_step{step}.json", str(folder / str(step)))
        out[step] = ([untagged(row["sample_id"]) for row in json.loads(Path(path).read_text())], missing[step])
    return out


def open_groups(cluster: Cluster, sampler: str) -> float:
    """The sampler's open groups (its own telemetry)."""
    return metric_sum(metrics(cluster.collectors[sampler].metrics_port), "otelcol_valgen_sampler_groups_open")


def received(cluster: Cluster, sampler: str) -> float:
    """The generation records the sampler has received (its own telemetry)."""
    values = metrics(cluster.collectors[sampler].metrics_port)
    return metric_sum(values, "otelcol_valgen_sampler_records_received")


def wait_first_halves(cluster: Cluster, samplers: list[str]) -> dict[str, float]:
    """Wait until the samplers hold every first half; the open groups of each."""
    first_halves = len(STEPS) * len(SOURCES) * PER_SOURCE // 2
    wait_for(lambda: sum(received(cluster, s) for s in samplers) == first_halves, 60, "every first half received")
    wait_for(lambda: sum(open_groups(cluster, s) for s in samplers) == len(STEPS), 60, "every step open")
    return {sampler: open_groups(cluster, sampler) for sampler in samplers}


def reroute(cluster: Cluster, samplers: list[str]) -> None:
    """The agents' ring becomes ``samplers``, as a resolver makes it (restart on their queues)."""
    for agent in ("a0", "a1"):
        cluster.collectors[agent].stop()
        cluster.start_agent(agent, samplers)


def kill_the_busiest_sampler(cluster: Cluster) -> tuple[str, dict[str, float]]:
    """Once every first half is held, SIGKILL the sampler with the most open steps and re-route to the others.

    Returns its name and the open steps each sampler held.
    """
    samplers = ["s0", "s1", "s2"]
    open_by = wait_first_halves(cluster, samplers)
    busiest = max(open_by, key=lambda name: open_by[name])
    cluster.kill(busiest)
    reroute(cluster, [name for name in samplers if name != busiest])
    return busiest, open_by


def texts(folder: Path, tag: str) -> dict[int, str]:
    """The text under ``tag`` by step; none before the first write made the folder."""
    return read_texts(folder, tag) if folder.exists() else {}


def final_texts(boards: Path) -> dict[int, str]:
    """Each step's table as a reader sees it last: the correction where one was written."""
    folder = boards / "otel-valgen" / "cluster"
    return texts(folder, KEY) | texts(folder, f"{KEY}/corrected")


def inputs(text: str) -> list[str]:
    """The sample ids a TensorBoard table shows, in its order."""
    return [line.split("**Input:** q ", 1)[1] + "/0" for line in text.splitlines() if line.startswith("**Input:** q ")]


def finish(cluster: Cluster, jobs: list[subprocess.Popen[bytes]], go: Path) -> None:
    """Let the jobs send their second halves and end every step."""
    go.touch()
    for job in jobs:
        assert job.wait(60) == 0


def report(case: str, cluster: Cluster, parts: int) -> None:
    """The figures docs/deployment.md's failure table quotes."""
    stats = cluster.stats()
    board = stats["backends"]["tensorboard"]
    print(
        f"\n[{case}] steps {len(STEPS)}: received {stats['steps']} step requests, {parts} re-routed steps, "
        f"merged {stats['merged_steps']}, TensorBoard writes {board['written_steps']} "
        f"({board['written_steps'] - len(STEPS)} corrections)"
    )


def assert_exact(cluster: Cluster, mlflow_server: MlflowServer, mlflow_run: str) -> None:
    """Every step's last table is its exact bottom-k, in rank order, in TensorBoard and MLflow; show agrees."""
    boards = cluster.home / "boards"
    wait_for(lambda: {s: inputs(t) for s, t in final_texts(boards).items()} == {s: expected_ids(s) for s in STEPS}, 90)
    wait_for(cluster.idle, 30, "every backend written")
    written = mlflow_steps(mlflow_server, mlflow_run, cluster.home / "mlflow")
    assert written == {step: (expected_ids(step), 0.0) for step in STEPS}, "MLflow rewrote merged steps in place"
    files = [c.file_path for name, c in cluster.collectors.items() if name.startswith("s") and c.file_path.exists()]
    shown = {selection.step: selection for selection in select_steps(read_paths(files, lambda _: None))}
    assert {step: [untagged(g.sample_id) for g in shown[step].generations] for step in STEPS} == {
        step: expected_ids(step) for step in STEPS
    }
    assert all(shown[step].complete and shown[step].seen == PER_SOURCE * len(SOURCES) for step in STEPS)


@pytest.mark.timeout(240)
def test_a_sampler_lost_for_good_leaves_its_steps_naming_what_is_missing(
    cluster: Cluster, tmp_path: Path, mlflow_server: MlflowServer, mlflow_run: str
) -> None:
    """Killed with its volume: its steps are written from the rest, each saying 10 generations are missing."""
    go = tmp_path / "go"
    jobs = start_jobs(cluster, go, mlflow_run)
    lost, open_by = kill_the_busiest_sampler(cluster)
    finish(cluster, jobs, go)

    boards = cluster.home / "boards" / "otel-valgen" / "cluster"
    wait_for(lambda: len(texts(boards, KEY)) == len(STEPS), 90, "every step written")
    missing = read_scalars(boards, f"{KEY}/missing")
    lost_steps = sorted(step for step, value in missing.items() if value > 0)
    assert len(lost_steps) == open_by[lost], "exactly the steps the lost sampler held"
    assert {missing[step] for step in lost_steps} == {PER_SOURCE * len(SOURCES) / 2}, "the first halves it held"
    kept = {step: inputs(text) for step, text in read_texts(boards, KEY).items()}
    assert all(kept[step] == expected_ids(step) for step in STEPS if step not in lost_steps)
    wait_for(cluster.idle, 30, "every backend written")
    written = mlflow_steps(mlflow_server, mlflow_run, cluster.home / "mlflow")
    assert {step: value for step, (_, value) in written.items()} == missing
    assert all(written[step][0] == kept[step] for step in STEPS)
    report("lost", cluster, len(lost_steps))


@pytest.mark.timeout(240)
def test_a_sampler_killed_and_restarted_on_its_volume_merges_its_parts(
    cluster: Cluster, tmp_path: Path, mlflow_server: MlflowServer, mlflow_run: str
) -> None:
    """Its steps move while it is down; back, it closes its parts from storage and they merge exactly."""
    go = tmp_path / "go"
    jobs = start_jobs(cluster, go, mlflow_run)
    killed, open_by = kill_the_busiest_sampler(cluster)
    finish(cluster, jobs, go)
    cluster.start_sampler(killed)
    assert_exact(cluster, mlflow_server, mlflow_run)
    assert cluster.stats()["merged_steps"] == open_by[killed]
    report("killed and restarted", cluster, int(open_by[killed]))


@pytest.mark.timeout(240)
def test_a_fourth_sampler_added_mid_step(
    cluster: Cluster, tmp_path: Path, mlflow_server: MlflowServer, mlflow_run: str
) -> None:
    """The ring grows: the steps that move come in two parts and merge; the others are untouched."""
    go = tmp_path / "go"
    jobs = start_jobs(cluster, go, mlflow_run)
    wait_first_halves(cluster, ["s0", "s1", "s2"])
    cluster.start_sampler("s3")
    reroute(cluster, ["s0", "s1", "s2", "s3"])
    finish(cluster, jobs, go)
    assert_exact(cluster, mlflow_server, mlflow_run)
    moved = sum(1 for step in STEPS if step in _steps_closed_by(cluster, "s3"))
    assert cluster.stats()["merged_steps"] == moved
    report("fourth added", cluster, moved)


@pytest.mark.timeout(240)
def test_a_rolling_replacement_of_every_sampler(
    cluster: Cluster, tmp_path: Path, mlflow_server: MlflowServer, mlflow_run: str
) -> None:
    """Each sampler in turn stopped and started on its volume at its address: nothing moves, every step exact."""
    go = tmp_path / "go"
    jobs = start_jobs(cluster, go, mlflow_run)
    wait_first_halves(cluster, ["s0", "s1", "s2"])
    for number, name in enumerate(("s0", "s1", "s2")):
        cluster.collectors[name].stop()  # SIGTERM: open groups are stored, not flushed
        cluster.start_sampler(name)
        if number == 0:
            go.touch()  # the second halves arrive while the rollout goes on
    finish(cluster, jobs, go)
    assert_exact(cluster, mlflow_server, mlflow_run)
    assert cluster.stats()["merged_steps"] == 0
    report("rolling replacement", cluster, 0)


def _steps_closed_by(cluster: Cluster, sampler: str) -> set[int]:
    path = cluster.collectors[sampler].file_path
    if not path.exists():
        return set()
    return {selection.step for selection in select_steps(read_paths([path], lambda _: None))}
