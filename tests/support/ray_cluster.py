"""A Ray cluster started as a user starts one (``ray start --head``), for job submission and Ray client tests."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.e2e.harness import free_port

REPO = Path(__file__).resolve().parents[2]
RAY = Path(sys.executable).with_name("ray")
# Ray 2.60 starts clusters with token authentication; the head, its jobs and its clients share this token.
AUTH = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}


@dataclass(frozen=True)
class RayCluster:
    """The addresses of a running head node."""

    gcs_address: str
    dashboard_address: str  # http://...: what `ray job submit --address` takes
    client_address: str  # ray://...: what a Ray client's ray.init takes
    env: dict[str, str]  # the environment it was started with


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of this process without otel-valgen's, Ray's and wandb's variables, plus ``extra``.

    A test launches as a user would: only what the docs say to set.
    """
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("OTEL_", "RAY_", "WANDB_", "VERL_")) and name != "PYTHONPATH"
    }
    env["PYTHONPATH"] = str(REPO)  # the tests' own helper modules (setup_hook_probe) import in workers
    env.update(AUTH)
    return {**env, **(extra or {})}


def _dashboard_up(address: str) -> bool:
    """Whether the dashboard answers HTTP (401 included: Ray 2.60 turns token authentication on)."""
    try:
        with urllib.request.urlopen(f"{address}/api/version", timeout=2):
            return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False


@contextmanager
def ray_head(env: Mapping[str, str] | None = None, num_cpus: int = 2) -> Iterator[RayCluster]:
    """``ray start --head --block`` on loopback with its own ports and folder; its process group is stopped on exit.

    Never ``ray stop``: that stops every Ray cluster of the machine, other tests' too.
    """
    port, dashboard, client = free_port(), free_port(), free_port()
    folder = tempfile.mkdtemp(prefix="rvg-", dir="/tmp")  # Ray's socket paths must stay short
    started_env = clean_env(env)
    command = [
        str(RAY),
        "start",
        "--head",
        "--block",
        "--node-ip-address=127.0.0.1",
        f"--port={port}",
        "--dashboard-host=127.0.0.1",
        f"--dashboard-port={dashboard}",
        f"--ray-client-server-port={client}",
        f"--num-cpus={num_cpus}",
        "--num-gpus=0",
        f"--temp-dir={folder}",
        "--disable-usage-stats",
    ]
    log = Path(folder) / "ray-start.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            command, env=started_env, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )
    cluster = RayCluster(f"127.0.0.1:{port}", f"http://127.0.0.1:{dashboard}", f"ray://127.0.0.1:{client}", started_env)
    try:
        deadline = time.monotonic() + 240  # a loaded 2-core machine: tens of seconds
        while not _dashboard_up(cluster.dashboard_address):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"ray start did not come up:\n{log.read_text(errors='replace')[-3000:]}")
            time.sleep(1)
        yield cluster
    finally:
        _stop_group(process)
        shutil.rmtree(folder, ignore_errors=True)


def _stop_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the head's process group (``ray start --block`` stops its nodes), SIGKILL what is left."""
    for sig, wait_s in ((signal.SIGTERM, 30.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(wait_s)
        except subprocess.TimeoutExpired:
            continue
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)  # workers left in the group after the head exited
