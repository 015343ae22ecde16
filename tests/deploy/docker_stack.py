"""The compose stack run for real: the README's own command, on an engine with an empty build cache.

`readme_stack()` makes sure an engine answers and Compose v2 and the local base images exist
(tools/docker/*.sh, which `make test` runs first). The official images the stack names cannot be
pulled on our test machines, so each is tagged onto a local stand-in for the run, and only where
the engine does not hold that name already (the tags are removed afterwards): the Dockerfiles'
base images onto the debootstrapped bases of tools/docker/base-images.sh, Loki's, Grafana's and
Prometheus's onto tests/deploy/standins, built once per role. Our own images are removed and the
engine's build cache emptied, so that the build is a user's first one: no cached layer or
download can hide a step that no longer builds. Then it runs the collector-stack command of the
README, read from the README itself, from the repository root, as `docker compose` (Compose v2 as
the Docker CLI's plugin), with the variables the README exports.

Set VALGEN_SKIP_DOCKER=1 to skip these tests on a machine that cannot run Docker (the skip says
so); under `make test` they run.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy import harness
from tests.support.ports import bindable

REPO = harness.REPO
TOOLS = REPO / "tools" / "docker"
COMPOSE_BIN = REPO / "build" / "tools" / "docker-compose"
# tools/docker/compose.sh links Compose there as the plugin of the Docker CLI (`docker compose`).
DOCKER_CONFIG = REPO / "build" / "tools" / "docker-config"
COMPOSE_FILE = REPO / "docker" / "docker-compose.yml"
AUTH_FILE = REPO / "docker" / "docker-compose.auth.yml"
STANDINS_DIR = REPO / "tests" / "deploy" / "standins"
BASE_IMAGE = "otel-valgen-local/bookworm:latest"
GOLANG_IMAGE = "otel-valgen-local/golang:latest"
# Each base-image build argument of our Dockerfiles, and the local image that stands in for its default.
BASE_STAND_INS = {"PYTHON_IMAGE": BASE_IMAGE, "GO_IMAGE": GOLANG_IMAGE, "RUNTIME_IMAGE": BASE_IMAGE}
STAND_IN_SERVICES = ("loki", "grafana", "prometheus")
# The host ports the stack publishes when none of its port variables is set, as the README runs it.
PUBLISHED = {
    "VALGEN_OTLP_GRPC_PORT": 4317,
    "VALGEN_OTLP_HTTP_PORT": 4318,
    "VALGEN_LOKI_PORT": 3100,
    "VALGEN_GRAFANA_PORT": 3000,
}
# Not passed on from this shell to Docker: the README leaves the key unset (offline wandb runs) and
# the ports at their defaults.
NOT_INHERITED = ("WANDB_API_KEY", *PUBLISHED)


def docker_client() -> str:
    """The Docker client tools/docker/client.sh picks (Debian's, which builds with BuildKit)."""
    return subprocess.run(["bash", str(TOOLS / "client.sh")], capture_output=True, text=True, check=True).stdout.strip()


def environment(extra: dict[str, str]) -> dict[str, str]:
    """The environment every Docker command here runs with: the shell's less `NOT_INHERITED`, plus `extra`."""
    return {name: value for name, value in os.environ.items() if name not in NOT_INHERITED} | extra


def run(args: Sequence[str], *, env: dict[str, str] | None = None, timeout_s: float = 600, check: bool = True) -> str:
    """Run a command from the repository root; on failure raise with its output, so the report shows why."""
    result = subprocess.run(
        list(args),
        env=environment(env or {}),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"`{shlex.join(args)}` exited with {result.returncode}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        )
    return result.stdout


def readme_commands() -> tuple[dict[str, str], list[str]]:
    """The README's "Run the collector stack" block: the variables it exports and its `docker compose` command."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## Run the collector stack", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert block, "the README's collector-stack section has no sh block"
    exported: dict[str, str] = {}
    command: list[str] = []
    for line in block[1].splitlines():
        words = shlex.split(line, comments=True)
        if words[:1] == ["export"]:
            name, _, value = words[1].partition("=")
            exported[name] = value
        elif words[:2] == ["docker", "compose"]:
            command = words
    assert command, "the README's collector-stack block has no `docker compose` command"
    return exported, command


def image_exists(docker: str, image: str) -> bool:
    """Whether the engine holds `image` (`docker image inspect` prints `[]` for one it lacks: the exit status tells)."""
    return subprocess.run([docker, "image", "inspect", image], capture_output=True, check=False).returncode == 0


def _dockerfile_defaults(dockerfile: Path) -> dict[str, str]:
    """`ARG NAME=default` lines of a Dockerfile."""
    found = re.findall(r"^ARG (\w+)=(\S+)$", dockerfile.read_text(encoding="utf-8"), re.MULTILINE)
    return dict(found)


def services() -> dict[str, dict[str, Any]]:
    """The services of docker/docker-compose.yml, uninterpolated."""
    model: dict[str, Any] = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))
    return dict(model["services"])


def official_stand_ins() -> dict[str, tuple[str, str]]:
    """Each official image the stack needs -> (how it stands in: "tag" or a stand-in role, the local source)."""
    stack = services()
    wanted: dict[str, tuple[str, str]] = {}
    for service in stack.values():
        if "build" in service:
            for name, default in _dockerfile_defaults(REPO / service["build"]["dockerfile"]).items():
                if name in BASE_STAND_INS:
                    wanted[default] = ("tag", BASE_STAND_INS[name])
    for role in STAND_IN_SERVICES:
        wanted[stack[role]["image"]] = ("role", role)
    return wanted


def our_images() -> list[str]:
    """The images the compose file builds (`image:` of each service with a `build:`)."""
    return [service["image"] for service in services().values() if "build" in service]


@contextmanager
def stand_ins(docker: str) -> Iterator[list[str]]:
    """Tag every official image the stack needs onto its local stand-in; untag them afterwards."""
    added: list[str] = []
    try:
        for official, (how, source) in official_stand_ins().items():
            if image_exists(docker, official):
                continue  # the engine has it (a machine with a registry): use it
            if how == "tag":
                run([docker, "tag", source, official])
            else:
                build = [docker, "build", "--quiet", "--build-arg", f"BASE_IMAGE={BASE_IMAGE}"]
                run([*build, "--build-arg", f"ROLE={source}", "-t", official, str(STANDINS_DIR)])
            added.append(official)
        yield added
    finally:
        if added:
            run([docker, "rmi", *added], check=False)


def empty_build_cache(docker: str) -> None:
    """Remove our images and every build cache record of the engine: the next build is a first build."""
    present = [image for image in our_images() if image_exists(docker, image)]
    if present:
        run([docker, "rmi", "--force", *present])
    run([docker, "builder", "prune", "--all", "--force"])


@dataclass
class Stack:
    """The compose project the README's command started; `compose()` runs further commands on it."""

    docker: str
    env: dict[str, str] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=lambda: dict(PUBLISHED))

    def compose(self, *args: str, auth: bool = False, timeout_s: float = 300) -> str:
        """`docker compose` on the stack's file (and the auth overlay when `auth`)."""
        files = [COMPOSE_FILE, *([AUTH_FILE] if auth else [])]
        command = [str(COMPOSE_BIN)]
        for path in files:
            command += ["-f", str(path)]
        return run([*command, *args], env=self.env, timeout_s=timeout_s)

    def up(self, *services: str, auth: bool = False) -> None:
        """Start (or recreate) services and wait until every health check passes."""
        self.compose("up", "--detach", "--no-build", "--wait", "--wait-timeout", "240", *services, auth=auth)

    def wait_healthy(self, timeout_s: float = 240) -> None:
        """Wait until every service's container reports healthy (the README's `up -d` does not wait)."""
        deadline = time.monotonic() + timeout_s
        expected = set(services())
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            listed = self.compose("ps", "--all", "--format", "json")
            rows = [json.loads(line) for line in listed.splitlines() if line.strip()]
            states = {row["Service"]: row.get("Health") or row.get("State", "") for row in rows}
            if set(states) == expected and set(states.values()) == {"healthy"}:
                return
            time.sleep(1)
        raise AssertionError(f"the stack did not turn healthy in {timeout_s}s: {states}\n{self.logs()}")

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
        loaded: list[dict[str, Any]] = json.loads(run([self.docker, "inspect", self.container(service)]))
        return loaded[0]

    def exec(self, service: str, *command: str) -> str:
        """Run a command in the service's container as its image's user."""
        return run([self.docker, "exec", self.container(service), *command])

    def copy_out(self, service: str, path: str, destination: Path) -> Path:
        """Copy `path` from the service's container to `destination` on this host."""
        destination.parent.mkdir(parents=True, exist_ok=True)
        run([self.docker, "cp", f"{self.container(service)}:{path}", str(destination)])
        return destination

    def url(self, port_variable: str, path: str = "") -> str:
        """http://127.0.0.1:<published port><path>."""
        return f"http://127.0.0.1:{self.ports[port_variable]}{path}"

    @property
    def otlp_http(self) -> str:
        """host:port where training jobs on this host send OTLP/HTTP."""
        return f"127.0.0.1:{self.ports['VALGEN_OTLP_HTTP_PORT']}"


@dataclass(frozen=True)
class Started:
    """What bringing the stack up took: the README's command's output and wall time."""

    stack: Stack
    output: str
    began: float  # the time (epoch seconds) the command was started
    seconds: float


@contextmanager
def readme_stack(extra_env: dict[str, str]) -> Iterator[Started]:
    """The stack as the README starts it, on an empty build cache; torn down (volumes too) afterwards."""
    if os.environ.get("VALGEN_SKIP_DOCKER") == "1":
        pytest.skip("VALGEN_SKIP_DOCKER=1: the compose stack tests did not run")
    for script in ("engine.sh", "compose.sh", "base-images.sh"):
        run(["bash", str(TOOLS / script)], timeout_s=1200)
    docker = docker_client()
    exported, command = readme_commands()
    # The README's exports, with a value of our own for the required password; WANDB_API_KEY stays
    # unset, as the README allows (the exporter then writes offline runs).
    env = {
        **{name: value for name, value in exported.items() if name not in NOT_INHERITED},
        "GF_SECURITY_ADMIN_PASSWORD": "stack-test",
        "DOCKER_CONFIG": str(DOCKER_CONFIG),
        **extra_env,
    }
    stack = Stack(docker, env)
    stack.down()  # a project left behind by an interrupted run (it holds the ports checked next)
    busy = [port for port in PUBLISHED.values() if not bindable(port)]
    assert not busy, f"the README's stack publishes 127.0.0.1 ports {busy}, which something here holds already"
    with stand_ins(docker):
        empty_build_cache(docker)
        began, started = time.time(), time.monotonic()
        try:
            result = subprocess.run(
                command,
                env=environment(env),
                cwd=REPO,
                capture_output=True,
                text=True,
                timeout=2400,
                check=False,
            )
            output = result.stdout + result.stderr
            assert result.returncode == 0, f"`{shlex.join(command)}` exited with {result.returncode}:\n{output[-4000:]}"
            stack.wait_healthy()
            yield Started(stack, output, began, time.monotonic() - started)
        finally:
            stack.down()
