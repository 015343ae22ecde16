"""The compose stack run for real: a Docker engine, our images, `docker compose` with stand-ins.

`images()` makes sure an engine answers and Compose v2 and the local base images exist
(tools/docker/*.sh, which `make test` runs first), then builds our two images from their
Dockerfiles and the Loki/Grafana stand-ins, under test tags. `Stack` runs
`docker compose -f docker/docker-compose.yml -f tests/deploy/compose.standins.yml` as a project
of its own, with every published port moved to a free loopback port.

Set VALGEN_SKIP_DOCKER=1 to skip these tests on a machine that cannot run Docker (the skip says
so); under `make test` they run.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.deploy import harness

REPO = harness.REPO
TOOLS = REPO / "tools" / "docker"
COMPOSE_BIN = REPO / "build" / "tools" / "docker-compose"
COMPOSE_FILE = REPO / "docker" / "docker-compose.yml"
AUTH_FILE = REPO / "docker" / "docker-compose.auth.yml"
STANDINS_FILE = REPO / "tests" / "deploy" / "compose.standins.yml"
STANDINS_DIR = REPO / "tests" / "deploy" / "standins"
BASE_IMAGE = "otel-valgen-local/bookworm:latest"
GOLANG_IMAGE = "otel-valgen-local/golang:latest"
TAG = "otel-valgen-test"


def docker_client() -> str:
    """The Docker client tools/docker/client.sh picks (Debian's, which builds with BuildKit)."""
    return subprocess.run(["bash", str(TOOLS / "client.sh")], capture_output=True, text=True, check=True).stdout.strip()


def run(args: Sequence[str], *, env: dict[str, str] | None = None, timeout_s: float = 600) -> str:
    """Run a command; on failure raise with its output, so the test report shows why."""
    result = subprocess.run(
        list(args),
        env={**os.environ, **(env or {})},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if result.returncode != 0:
        raise AssertionError(
            f"`{shlex.join(args)}` exited with {result.returncode}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        )
    return result.stdout


@dataclass(frozen=True)
class Images:
    """The image names the stack tests built."""

    docker: str
    collector: str
    exporter: str
    standin: str

    def compose_env(self) -> dict[str, str]:
        """The variables tests/deploy/compose.standins.yml reads."""
        return {
            "VALGEN_TEST_COLLECTOR_IMAGE": self.collector,
            "VALGEN_TEST_EXPORTER_IMAGE": self.exporter,
            "VALGEN_TEST_STANDIN_IMAGE": self.standin,
        }


@contextmanager
def images() -> Iterator[Images]:
    """Build our images and the stand-ins on local bases; remove the tags afterwards."""
    if os.environ.get("VALGEN_SKIP_DOCKER") == "1":
        pytest.skip("VALGEN_SKIP_DOCKER=1: the compose stack tests did not run")
    for script in ("engine.sh", "compose.sh", "base-images.sh"):
        run(["bash", str(TOOLS / script)], timeout_s=1200)
    docker = docker_client()
    built = Images(
        docker=docker,
        collector=f"{TAG}/collector:{uuid.uuid4().hex[:8]}",
        exporter=f"{TAG}/tracker-exporter:{uuid.uuid4().hex[:8]}",
        standin=f"{TAG}/standin:{uuid.uuid4().hex[:8]}",
    )
    build = [docker, "build", "--quiet", "--network", "host"]
    buildkit = {"DOCKER_BUILDKIT": "1"}
    try:
        run(
            [
                *build,
                *("--build-arg", f"GO_IMAGE={GOLANG_IMAGE}", "--build-arg", f"RUNTIME_IMAGE={BASE_IMAGE}"),
                *("-f", "docker/collector.Dockerfile", "-t", built.collector, "."),
            ],
            env=buildkit,
            timeout_s=1800,
        )
        run(
            [
                *build,
                *("--build-arg", f"PYTHON_IMAGE={BASE_IMAGE}"),
                *("-f", "docker/tracker-exporter.Dockerfile", "-t", built.exporter, "."),
            ],
            env=buildkit,
            timeout_s=1800,
        )
        run([*build, "--build-arg", f"BASE_IMAGE={BASE_IMAGE}", "-t", built.standin, str(STANDINS_DIR)], env=buildkit)
        yield built
    finally:
        subprocess.run(
            [docker, "rmi", "--force", built.collector, built.exporter, built.standin],
            capture_output=True,
            check=False,
        )


@dataclass
class Stack:
    """One compose project of the stack; `up()` starts it, `down()` removes all it made."""

    images: Images
    workdir: Path
    env: dict[str, str] = field(default_factory=dict)
    project: str = field(default_factory=lambda: f"valgen-test-{uuid.uuid4().hex[:8]}")
    ports: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.ports = {
            name: harness.free_port()
            for name in ("VALGEN_OTLP_GRPC_PORT", "VALGEN_OTLP_HTTP_PORT", "VALGEN_LOKI_PORT", "VALGEN_GRAFANA_PORT")
        }

    def compose(self, *args: str, auth: bool = False, timeout_s: float = 300) -> str:
        """`docker compose` on this project's files (and the auth overlay when `auth`)."""
        files = [COMPOSE_FILE, *([AUTH_FILE] if auth else []), STANDINS_FILE]
        command = [str(COMPOSE_BIN), "-p", self.project]
        for path in files:
            command += ["-f", str(path)]
        env = {
            **self.images.compose_env(),
            **{name: str(port) for name, port in self.ports.items()},
            "DOCKER_HOST": os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock"),
            **self.env,
        }
        return run([*command, *args], env=env, timeout_s=timeout_s)

    def up(self, *services: str, auth: bool = False) -> None:
        """Start (or recreate) services and wait until every health check passes."""
        self.compose("up", "--detach", "--no-build", "--wait", "--wait-timeout", "240", *services, auth=auth)

    def down(self) -> None:
        """Remove the project's containers, networks and volumes, whatever state they are in."""
        with suppress(AssertionError):
            self.compose("down", "--volumes", "--remove-orphans", "--timeout", "30")

    def logs(self) -> str:
        """The last lines of every service's log, for failure reports."""
        try:
            return self.compose("logs", "--no-color", "--tail", "40")
        except AssertionError as error:
            return str(error)

    def container(self, service: str) -> str:
        """The id of the service's container."""
        ids = self.compose("ps", "--all", "--quiet", service).split()
        assert len(ids) == 1, f"expected one {service} container, got {ids}"
        return ids[0]

    def inspect(self, service: str) -> dict[str, Any]:
        """`docker inspect` of the service's container."""
        loaded: list[dict[str, Any]] = json.loads(run([self.images.docker, "inspect", self.container(service)]))
        return loaded[0]

    def exec(self, service: str, *command: str) -> str:
        """Run a command in the service's container as its image's user."""
        return run([self.images.docker, "exec", self.container(service), *command])

    def copy_out(self, service: str, path: str, destination: Path) -> Path:
        """Copy `path` from the service's container to `destination` on this host."""
        destination.parent.mkdir(parents=True, exist_ok=True)
        run([self.images.docker, "cp", f"{self.container(service)}:{path}", str(destination)])
        return destination

    def url(self, port_variable: str, path: str = "") -> str:
        """http://127.0.0.1:<published port><path>."""
        return f"http://127.0.0.1:{self.ports[port_variable]}{path}"

    @property
    def otlp_http(self) -> str:
        """host:port where training jobs on this host send OTLP/HTTP."""
        return f"127.0.0.1:{self.ports['VALGEN_OTLP_HTTP_PORT']}"
