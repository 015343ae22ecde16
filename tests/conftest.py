"""Shared fixtures: a clean emitter per test and real OTLP receivers on loopback."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from otel_valgen import _process
from otel_valgen._settings import variable_names
from otel_valgen.otlp_json import to_otlp_json
from tests.support.otlp_grpc import OtlpGrpcStandIn, otlp_grpc_stand_in
from tests.support.otlp_http import OtlpHttpStandIn
from tests.support.require import REQUIRE_ALL

REPO = Path(__file__).resolve().parent.parent


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--require-all``: a missing tool the project installs fails the test (tests/support/require.py)."""
    parser.addoption(
        "--require-all",
        action="store_true",
        help=f"a missing tool, binary or package the project installs fails the test ({REQUIRE_ALL}=1)",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Pass ``--require-all`` on as ``VALGEN_REQUIRE_ALL=1`` (subprocesses of the tests see it too).

    Under pytest-xdist each worker also gets a temporary folder of its own (``TMPDIR``), which Ray
    reads on Linux: a ``ray.init()`` with no address joins the cluster named in
    ``$TMPDIR/ray/ray_current_cluster``, so without it a test's driver would join the ``ray start``
    cluster of a test running on another worker.
    """
    if config.getoption("--require-all"):
        os.environ[REQUIRE_ALL] = "1"
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        own = Path(tempfile.gettempdir()) / f"valgen-{worker}"
        own.mkdir(exist_ok=True)
        os.environ["TMPDIR"] = str(own)
        tempfile.tempdir = None  # gettempdir() reads TMPDIR again


# Under pytest-xdist (`make test-py`) the work unit handed to a worker is a group of test files, run
# one after another (`GroupScheduling`). The files that start Ray clusters, and those that launch
# verl, form one group each: on 2 cores, Ray clusters starting beside each other miss Ray's own 30 s
# start-up deadline. Every other file is a group of its own, so its module fixtures (a collector,
# the compose stack) are set up once. The two serial groups and the compose stack, whose cold image
# build is the longest single step, are handed out first. (xdist's own `loadgroup` cannot do this
# here: it renames node ids, which pytest 9 no longer lets a plugin do.)
SERIAL_GROUPS = {
    # tests/test_ray_launch_styles.py's `ray start --head` timed out starting its node while verl's
    # entry points (16 prompts x 4 responses) ran their own Ray on the 2 cores (both
    # clean-clone CI runs at 23396e4): they share one worker, and the head is started again when it
    # gives up (tests/support/ray_cluster.py).
    "verl": ("tests/verl/", "tests/test_ray_launch_styles.py"),
    "ray": (
        "tests/integration/",
        "tests/e2e/test_ray_tasks.py",
        "tests/faults/test_actor_killed.py",
        "tests/test_launchers.py",
        "tests/test_readme.py",
        "tests/test_trainer_step.py",
    ),
}
FIRST_FILES = ("tests/deploy/test_docker_stack.py",)


def xdist_group(path: str) -> str:
    """The xdist group of a test file (its path relative to the repository)."""
    for group, prefixes in SERIAL_GROUPS.items():
        if path.startswith(prefixes):
            return group
    return path


@pytest.hookimpl(optionalhook=True)  # the range lanes run without xdist
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """The scheduler by scope of pytest-xdist, with `xdist_group` of each test's file as its scope."""
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return xdist_group(nodeid.split("::", 1)[0])

    return GroupScheduling(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Put the serial groups and the compose stack first."""

    def rank(item: pytest.Item) -> int:
        path = Path(item.path).relative_to(REPO).as_posix()
        group = xdist_group(path)
        if group in SERIAL_GROUPS:
            return list(SERIAL_GROUPS).index(group)
        return len(SERIAL_GROUPS) if path in FIRST_FILES else len(SERIAL_GROUPS) + 1

    items.sort(key=rank)  # stable: collection order within each rank


_exit_status: int | None = None


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Keep the run's exit status for ``pytest_unconfigure``."""
    global _exit_status
    _exit_status = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """End the process with the run's status once pytest has reported, skipping interpreter teardown.

    A full run once passed every test and then died with SIGSEGV while the interpreter tore down
    the native libraries the suite loads (torch, tokenizers, grpc, Ray's), exit 139, no test
    failed. The results are all reported by now, so the process ends here, as pytest would.
    """
    if _exit_status is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_exit_status)


# Every variable of the settings table, so that no test inherits the machine's configuration.
_ENV = variable_names()


@pytest.fixture(autouse=True)
def clean_emitter(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """Each test starts with no emitter, no valgen environment and its own sink folder."""
    for name in _ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OTEL_VALGEN_DIR", str(tmp_path / "sink"))
    # Collectors started by the suite share 2 cores with it and can answer later than the 2 s default,
    # which makes the endpoint away (records then go to the spool): tests about something else wait
    # longer. The outage tests set their own bound (tests/faults/test_endpoint_away.py and others).
    monkeypatch.setenv("OTEL_VALGEN_FLUSH_TIMEOUT", "10")
    _process.reset_for_testing()
    yield
    _process.reset_for_testing()


class OtlpHttpReceiver(OtlpHttpStandIn):
    """A real OTLP/HTTP logs endpoint for the SDK exporter, at ``endpoint`` + ``/v1/logs``."""

    @property
    def endpoint(self) -> str:
        """The base URL to give the SDK (it appends /v1/logs)."""
        return self.base_url

    def json_requests(self) -> list[dict[str, Any]]:
        """Every received request in OTLP/JSON form."""
        return [to_otlp_json(request) for request in self.requests]


@pytest.fixture
def otlp_http() -> Iterator[OtlpHttpReceiver]:
    """An OTLP/HTTP receiver on a free loopback port."""
    receiver = OtlpHttpReceiver()
    receiver.thread.start()
    yield receiver
    receiver.server.shutdown()
    receiver.server.server_close()


@pytest.fixture
def otlp_grpc() -> Iterator[tuple[str, OtlpGrpcStandIn]]:
    """An OTLP/gRPC receiver on a free loopback port: (endpoint URL, the stand-in)."""
    with otlp_grpc_stand_in() as stand_in:
        yield f"http://{stand_in.endpoint}", stand_in
