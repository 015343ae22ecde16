"""The fully-async trainer's published step and runs (``integrations._trainer_step``), as the rollouter reads them.

The trainer and the rollouter are processes of one Ray job; what one publishes, the other reads
from Ray's GCS key-value store through ``ray.experimental.internal_kv``. Every test here runs
against a real local Ray cluster, started once for the module by ``ray.init`` in the test
process: the test process is the trainer (a driver, with its real job id), a real actor of its
job is the rollouter, and another job is a second driver, a subprocess connected to the same
cluster. The whole verl launch runs in tests/verl/test_entry_point.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

import otel_valgen as vg
from otel_valgen.integrations import _trainer_step
from tests.conftest import REPO
from tests.support.require import require_module

ray = require_module("ray")
internal_kv = require_module("ray.experimental.internal_kv")

pytestmark = pytest.mark.ray

KEY_PREFIX = "verl/trainer_step/"
"""The start of every job's entry in otel-valgen's namespace of the GCS key-value store."""

# A driver of another Ray job on the same cluster: what it reads before and after publishing its own step.
OTHER_JOB = """
import json, sys
import ray
from otel_valgen.integrations import _trainer_step
ray.init(address=sys.argv[1], log_to_driver=False)
before = _trainer_step.read()
_trainer_step.publish(int(sys.argv[2]))
after = _trainer_step.read()
job = ray.get_runtime_context().get_job_id()
ray.shutdown()
print(json.dumps({"job": job, "before": before and before.step, "after": after and after.step}))
"""


@dataclass(frozen=True)
class RayJob:
    """The Ray job of the test process (the trainer's) and its cluster's GCS address."""

    job_id: str
    gcs_address: str
    rollouter: Any  # a handle to the JobPeer actor, a process of this job


@ray.remote(num_cpus=0)
class JobPeer:
    """Another process of the trainer's Ray job (where verl's rollouter runs), reading what the trainer published."""

    def read(self) -> _trainer_step.Published | None:
        """What the trainer of this Ray job published last, as the rollouter sees it."""
        return _trainer_step.read()


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[RayJob]:
    """A new local Ray cluster, this process its first driver, with a rollouter actor; shut down after the module.

    ``address="local"`` always starts a new cluster: never one named by ``RAY_ADDRESS`` or
    started by ``ray start`` elsewhere on the machine. Workers import otel_valgen from this checkout.
    """
    ray.init(
        address="local",
        num_cpus=1,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": str(REPO)}},
    )
    try:
        context = ray.get_runtime_context()
        rollouter = JobPeer.remote()
        ray.get(rollouter.__ray_ready__.remote(), timeout=120)
        yield RayJob(context.get_job_id(), context.gcs_address, rollouter)
    finally:
        ray.shutdown()


@pytest.fixture
def ray_job(ray_cluster: RayJob) -> RayJob:
    """The trainer's Ray job, with no step published yet by any job of the cluster."""
    for key in internal_kv._internal_kv_list(KEY_PREFIX, namespace=_trainer_step.NAMESPACE):
        internal_kv._internal_kv_del(key, namespace=_trainer_step.NAMESPACE)
    assert _trainer_step.read() is None
    return ray_cluster


def other_job(ray_job: RayJob, step: int) -> dict[str, Any]:
    """Run a driver of a new Ray job on the cluster that reads, publishes ``step``, reads again: what it saw."""
    done = subprocess.run(
        [sys.executable, "-c", OTHER_JOB, ray_job.gcs_address, str(step)],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return seen


def test_the_rollouter_reads_the_step_the_trainer_published_last(ray_job: RayJob) -> None:
    """Every assignment of current_param_version is published; a read gives the latest one."""
    for step in (0, 3, 4):
        _trainer_step.publish(step)
    published = ray.get(ray_job.rollouter.read.remote(), timeout=60)
    assert published is not None
    assert published.step == 4


def test_the_published_step_is_the_ray_jobs_own(ray_job: RayJob) -> None:
    """A trainer's step is read by the processes of its own Ray job only, never another job's."""
    _trainer_step.publish(5)
    seen = other_job(ray_job, 2)
    assert seen["job"] != ray_job.job_id  # a second, real Ray job
    assert (seen["before"], seen["after"]) == (None, 2)  # it sees its own step only
    published = ray.get(ray_job.rollouter.read.remote(), timeout=60)
    assert published is not None
    assert published.step == 5  # the other job's step is not this job's


def test_only_an_int_step_is_published(ray_job: RayJob) -> None:
    """A bool, a float or a string assigned to current_param_version is no step: the last int stays."""
    _trainer_step.publish(4)
    for value in (True, 5.0, "6", None):
        _trainer_step.publish(value)
    published = _trainer_step.read()
    assert published is not None
    assert published.step == 4
    assert vg.stats()["internal_errors"] == 0


def test_a_made_up_run_id_is_not_published(ray_job: RayJob) -> None:
    """A trainer with no run of its own and nothing forwarded publishes no run id (a generated one would change)."""
    _trainer_step.publish(1)
    published = _trainer_step.read()
    assert published is not None
    assert (published.run_id, published.resource) == (None, {})


def test_the_trainers_runs_come_with_its_step(ray_job: RayJob, monkeypatch: pytest.MonkeyPatch) -> None:
    """The trainer's run id and its tracker runs (resource attributes) reach the rollouter with the step.

    The rollouter actor's process has none of the trainer's tracker variables: the runs travel through the GCS.
    """
    monkeypatch.setenv("WANDB_RUN_ID", "wandb-run-1")
    monkeypatch.setenv("WANDB_PROJECT", "my-project")
    monkeypatch.setenv("MLFLOW_RUN_ID", "mlflow-run-1")
    _trainer_step.publish(7)
    published = ray.get(ray_job.rollouter.read.remote(), timeout=60)
    assert published is not None
    assert (published.step, published.run_id) == (7, "wandb-run-1")
    assert published.resource["wandb.project"] == "my-project"
    assert published.resource["wandb.run_id"] == "wandb-run-1"
    assert published.resource["mlflow.run_id"] == "mlflow-run-1"


def test_a_configured_trainer_publishes_its_emitters_run_id(ray_job: RayJob) -> None:
    """A trainer whose emitter is configured publishes the run id its own records carry."""
    vg.configure(run_id="trainer-run")
    _trainer_step.publish(9)
    published = _trainer_step.read()
    assert published is not None
    assert (published.step, published.run_id) == (9, "trainer-run")
