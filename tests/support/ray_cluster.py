"""A Ray cluster started as a user starts one (``ray start --head``), for job submission tests.

The head runs on loopback with every port of its own, a short temp dir (Ray's socket paths must fit
in 107 bytes) and the dashboard on (jobs are submitted to it), and is stopped with its whole
session. ``ray stop`` is never used: it stops every Ray process of the machine's user.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from tests.e2e.harness import free_port, wait_for

REPO = Path(__file__).resolve().parents[2]
RAY = Path(sys.executable).with_name("ray")
# Variables of the machine that would change what a launched job does; never inherited.
NOT_INHERITED = ("OTEL_", "WANDB_", "RAY_", "VERL_", "PYTHONPATH")
# Ray 2.60 starts clusters with token authentication; the head, its jobs and the job CLI share this token.
AUTH = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}


def ray_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The test's environment without otel-valgen's, OTel's, wandb's, Ray's and verl's variables, plus ``extra``.

    A test launches as a user would: only what the docs say to set. The cluster's token is in it.
    """
    env = {name: value for name, value in os.environ.items() if not name.startswith(NOT_INHERITED)}
    return {**env, **AUTH, **(extra or {})}


@dataclass(frozen=True)
class RayCluster:
    """A running head node: what ``ray job submit --address`` and a driver's ``ray.init`` take."""

    process: subprocess.Popen[bytes]
    gcs_address: str
    dashboard_address: str
    log: Path


def _dashboard_up(address: str) -> bool:
    """Whether the dashboard answers HTTP (401 included: token authentication is on)."""
    try:
        with urllib.request.urlopen(f"{address}/api/version", timeout=2):
            return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False


STARTED = b"Ray runtime started."  # what `ray start` logs once its node registered with the GCS
START_ATTEMPTS = 3


@contextmanager
def ray_head(env: Mapping[str, str], log_dir: Path, num_cpus: int = 2) -> Iterator[RayCluster]:
    """``ray start --head --block`` with ``env`` (``ray_env(...)``); its session is stopped on exit.

    On a loaded 2-core machine the head can give up before its raylet registers (Ray waits 30 s,
    a constant): its dashboard answers for a while and then goes away with it. The head counts as
    up once it logged ``Ray runtime started.``; one that exited before is started again, on new
    ports, up to ``START_ATTEMPTS`` times.
    """
    for attempt in range(1, START_ATTEMPTS + 1):
        head, temp_dir = _start_head(env, log_dir / f"ray-head-{attempt}.log", num_cpus)
        try:
            wait_for(lambda: head.process.poll() is not None or _up(head), 240, "the Ray head")  # noqa: B023
        except BaseException:
            _stop_session(head.process)
            shutil.rmtree(temp_dir, ignore_errors=True)
            raise
        if head.process.poll() is None:
            break
        _stop_session(head.process)
        shutil.rmtree(temp_dir, ignore_errors=True)
    else:
        raise AssertionError(f"the Ray head exited {START_ATTEMPTS} times; last log:\n{head.log.read_text()[-3000:]}")
    try:
        yield head
    finally:
        _stop_session(head.process)
        shutil.rmtree(temp_dir, ignore_errors=True)


def _up(head: RayCluster) -> bool:
    """Whether the head's node registered (its log says so) and its dashboard answers."""
    return STARTED in head.log.read_bytes() and _dashboard_up(head.dashboard_address)


def _start_head(env: Mapping[str, str], log: Path, num_cpus: int) -> tuple[RayCluster, Path]:
    """Start ``ray start --head --block`` on ports of its own; the head and its temp dir."""
    temp_dir = Path(tempfile.mkdtemp(prefix="rv-", dir="/tmp"))
    gcs_port, dashboard_port = free_port(), free_port()
    ports = {
        "--port": gcs_port,
        "--dashboard-port": dashboard_port,
        "--ray-client-server-port": free_port(),
        "--dashboard-agent-listen-port": free_port(),
        "--dashboard-agent-grpc-port": free_port(),
        "--node-manager-port": free_port(),
        "--object-manager-port": free_port(),
        "--metrics-export-port": free_port(),
        "--runtime-env-agent-port": free_port(),
    }
    args = [
        str(RAY),
        "start",
        "--head",
        "--block",
        "--node-ip-address=127.0.0.1",
        "--dashboard-host=127.0.0.1",
        "--include-dashboard=true",
        "--disable-usage-stats",
        f"--num-cpus={num_cpus}",
        "--num-gpus=0",
        f"--object-store-memory={200 * 1024 * 1024}",
        f"--temp-dir={temp_dir}",
        *(f"{flag}={port}" for flag, port in ports.items()),
    ]
    with log.open("wb") as out:
        process = subprocess.Popen(
            args, env=dict(env), cwd=log.parent, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    return RayCluster(process, f"127.0.0.1:{gcs_port}", f"http://127.0.0.1:{dashboard_port}", log), temp_dir


def _stop_session(process: subprocess.Popen[bytes], timeout_s: float = 30) -> None:
    """SIGTERM the ``ray start --block`` process (it stops what it started), then SIGKILL its session."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        with suppress(subprocess.TimeoutExpired):
            process.wait(timeout_s)
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    if process.poll() is None:
        process.wait(5)
