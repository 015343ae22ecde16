"""User story: otel-valgen reaches every worker however the Ray job is launched, and keeps the job's own setup hook.

A head node started with ``ray start --head``; drivers launched as users launch them: ``ray job
submit`` with ``--runtime-env-json`` or with the variables in the ``ray start`` environment, a
driver with its own setup function, ``uv run``. Each driver prints what its worker got
(``tests/support/launch_probe.py``). Ray client is not here: Ray runs no
``worker_process_setup_hook`` for a Ray client job (docs/verl.md, *Launch styles*).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.ray_cluster import RAY, REPO, RayCluster, ray_env, ray_head

pytestmark = pytest.mark.ray

PROBE = REPO / "tests" / "support" / "launch_probe.py"
JOB_HOOK = "tests.support.setup_hook_probe.mark"
ENDPOINT = "http://127.0.0.1:4318"  # forwarded only: nothing is sent (no generation is logged)
TESTS_ON_PATH = {"PYTHONPATH": str(REPO)}  # setup_hook_probe, a job's own hook, imports in workers
USER_ENV = {"RAY_RUNTIME_ENV_HOOK": "otel_valgen.ray.runtime_env_hook", "OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayCluster]:
    """One head node for the module's drivers; its workers import the tests' helper modules."""
    with ray_head(ray_env(TESTS_ON_PATH), tmp_path_factory.mktemp("ray")) as head:
        yield head


def _probe(command: list[str], env: dict[str, str], cwd: Path | None = None) -> dict[str, Any]:
    """Run a driver (or `ray job submit`) to its end; what its worker reported on the ``PROBE`` line.

    A head whose dashboard is up may not have its job agent yet: Ray then refuses the submission
    ("No available agent ... try again later"), and it is submitted again, as Ray asks.
    """
    deadline = time.monotonic() + 120
    while True:
        result = subprocess.run(command, check=False, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
        if "No available agent to submit job" not in result.stderr or time.monotonic() > deadline:
            break
        time.sleep(2)
    output = f"exit {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    assert result.returncode == 0, output
    lines = [line for line in result.stdout.splitlines() if line.startswith("PROBE ")]
    assert lines, output
    return dict(json.loads(lines[-1].removeprefix("PROBE ")))


def _submit(cluster: RayCluster, runtime_env: dict[str, Any]) -> dict[str, Any]:
    command = [
        str(RAY),
        "job",
        "submit",
        "--address",
        cluster.dashboard_address,
        "--runtime-env-json",
        json.dumps(runtime_env),
        "--",
        sys.executable,
        str(PROBE),
    ]
    return _probe(command, ray_env(TESTS_ON_PATH))


def test_ray_job_submit_with_the_variables_in_runtime_env_json(cluster: RayCluster) -> None:
    """`ray job submit --runtime-env-json '{"env_vars": {...}}'`: the entrypoint's ray.init runs the env hook."""
    seen = _submit(cluster, {"env_vars": USER_ENV})
    assert seen["verl_integration_installed"] is True
    assert seen["endpoint"].startswith(ENDPOINT)


def test_ray_job_submit_with_the_variables_in_the_ray_start_environment(tmp_path: Path) -> None:
    """The variables set where the cluster was started (`ray start`): every submitted job gets otel-valgen."""
    with ray_head(ray_env({**TESTS_ON_PATH, **USER_ENV}), tmp_path) as cluster_with_variables:
        seen = _submit(cluster_with_variables, {})
    assert seen["verl_integration_installed"] is True
    assert seen["endpoint"].startswith(ENDPOINT)


def test_ray_job_submit_keeps_the_jobs_own_setup_hook(cluster: RayCluster) -> None:
    """A submitted job with its own worker_process_setup_hook: each worker runs it and otel-valgen's."""
    seen = _submit(cluster, {"env_vars": USER_ENV, "worker_process_setup_hook": JOB_HOOK})
    assert seen["job_hook_ran"] is True
    assert seen["verl_integration_installed"] is True


def test_a_local_driver_chains_its_own_setup_function(cluster: RayCluster, tmp_path: Path) -> None:
    """ray.init(runtime_env={"worker_process_setup_hook": <a function>}) under the env hook: both run."""
    driver = tmp_path / "driver.py"
    driver.write_text(
        "import json, os, sys, ray\n"
        f"sys.path.insert(0, {str(PROBE.parent)!r})\n"
        "import launch_probe\n"
        "def job_hook():\n"
        "    os.environ['VALGEN_PROBE_JOB_HOOK'] = 'ran'\n"
        f"ray.init(address={cluster.gcs_address!r}, runtime_env={{'worker_process_setup_hook': job_hook}})\n"
        "print('PROBE ' + json.dumps(ray.get(launch_probe.report.remote())), flush=True)\n",
        encoding="utf-8",
    )
    seen = _probe([sys.executable, str(driver)], ray_env({**TESTS_ON_PATH, **USER_ENV}))
    assert seen["job_hook_ran"] is True
    assert seen["verl_integration_installed"] is True


def test_uv_run_with_rays_uv_hook_flag_off(cluster: RayCluster, tmp_path: Path) -> None:
    """`uv run` with RAY_ENABLE_UV_RUN_RUNTIME_ENV=0: the env hook runs and keeps Ray's uv environment."""
    uv = next(REPO.glob("build/tools/uv-*/bin/uv"), None)
    assert uv is not None, "build/tools/uv-*/bin/uv is missing: `make install-dev` installs it"
    project = tmp_path / "job"  # Ray's uv hook uploads the working directory: keep it small
    project.mkdir()
    (project / "launch_probe.py").write_text(PROBE.read_text(encoding="utf-8"), encoding="utf-8")
    env = ray_env({**TESTS_ON_PATH, **USER_ENV, "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"})
    command = [str(uv), "run", "--no-project", "--python", sys.executable, "python", "launch_probe.py"]
    command.append(cluster.gcs_address)
    seen = _probe(command, env, cwd=project)
    assert seen["under_uv_run"] is True  # Ray's uv hook, which the env hook called, started the worker
    assert seen["verl_integration_installed"] is True
    assert seen["endpoint"].startswith(ENDPOINT)
