"""Every ``otel-valgen`` command ends an error with one line: exit 2 for usage, 1 for the rest.

The reproductions run the real CLI in a process of its own; ``--verbose`` / ``-v`` adds the
traceback above the same line.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from otel_valgen.cli._support import OperationalError, ValgenCommand
from otel_valgen.cli.main import main
from otel_valgen.otlp_json import to_otlp_json
from tests.exporter.conftest import step_request

REPO = Path(__file__).resolve().parent.parent
RUN_CLI = "import sys; from otel_valgen.cli.main import main; main(prog_name='otel-valgen')"


@pytest.fixture
def occupied_port() -> Iterator[int]:
    """A port on 127.0.0.1 that something already listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


@pytest.fixture
def data_file(tmp_path: Path) -> Path:
    """One closed step in OTLP/JSON, as the collector's file exporter writes it."""
    path = tmp_path / "data.jsonl"
    path.write_text(json.dumps(to_otlp_json(step_request("cli-errors", 1, 3))) + "\n", encoding="utf-8")
    return path


def _run(args: list[str], tmp_path: Path, *, code: str = RUN_CLI) -> subprocess.CompletedProcess[str]:
    """``otel-valgen ARGS`` of this checkout with no wandb credentials: a fresh HOME, no API key, no WANDB_MODE."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    env |= {"HOME": str(tmp_path), "WANDB_DIR": str(tmp_path), "WANDB_CONFIG_DIR": str(tmp_path / "wandb-config")}
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )


# (arguments, exit status, what the line says); {data} and {port} are filled in per test
REPRODUCTIONS = {
    "push without WANDB_API_KEY": (["push", "{data}"], 1, ["No API key", "set WANDB_API_KEY", "--wandb-mode offline"]),
    "push --count -1": (["push", "--count", "-1", "{data}"], 2, ["'--count'", "otel-valgen push --help"]),
    "wandb-exporter --http bogus": (["wandb-exporter", "--http", "bogus"], 2, ["'--http'", "HOST:PORT"]),
    "wandb-exporter --log-level bogus": (["wandb-exporter", "--log-level", "bogus"], 2, ["'--log-level'", "'info'"]),
    "wandb-exporter on a port in use": (
        ["wandb-exporter", "--http", "127.0.0.1:{port}", "--grpc", "", "--wandb-mode", "offline", "--state-dir", ""],
        1,
        ["cannot listen on 127.0.0.1:{port}", "pass --http a free HOST:PORT"],
    ),
    "exporter --metrics-address bogus": (
        ["exporter", "--metrics-address", "bogus"],
        2,
        ["'--metrics-address'", "HOST:PORT"],
    ),
    "exporter with its metrics address in use": (
        ["exporter", "--http", "127.0.0.1:0", "--grpc", "", "--state-dir", "", "--metrics-address", "127.0.0.1:{port}"],
        1,
        ["metrics cannot listen on 127.0.0.1:{port}", "pass --metrics-address a free HOST:PORT"],
    ),
    "show a missing path": (["show", "/nonexistent"], 2, ["'/nonexistent' does not exist"]),
    "diff with neither --steps nor --runs": (
        ["diff", "{data}"],
        2,
        ["give either --steps A B (two steps of one run) or --runs R1 R2 --step S", "otel-valgen diff --help"],
    ),
    "diff --runs without --step": (["diff", "{data}", "--runs", "a", "b"], 2, ["--runs R1 R2 needs --step S"]),
    "push a missing path": (["push", "/nonexistent"], 2, ["'/nonexistent' does not exist"]),
    "resend a missing path": (["resend", "/nonexistent", "--endpoint", "http://x"], 2, ["does not exist"]),
    "wandb-exporter with a state folder it cannot make": (
        ["wandb-exporter", "--http", "127.0.0.1:0", "--grpc", "", "--wandb-mode", "offline", "--state-dir", "{data}/x"],
        1,
        ["Not a directory", "check the path"],
    ),
}


@pytest.mark.parametrize("verbose", [False, True], ids=["plain", "verbose"])
@pytest.mark.parametrize("case", list(REPRODUCTIONS))
def test_each_reproduction_ends_in_one_line_and_verbose_adds_the_traceback(
    case: str, verbose: bool, tmp_path: Path, data_file: Path, occupied_port: int
) -> None:
    """The error is one line starting `Error:` with the documented exit status; -v prints the traceback first."""
    template, status, fragments = REPRODUCTIONS[case]
    args = [arg.format(data=data_file, port=occupied_port) for arg in template]
    done = _run([*args, "-v"] if verbose else args, tmp_path)
    assert done.returncode == status, done.stderr
    lines = done.stderr.splitlines()
    assert lines[-1].startswith("Error: ")
    for fragment in fragments:
        assert fragment.format(port=occupied_port) in lines[-1]
    if verbose:
        assert "Traceback (most recent call last)" in done.stderr
    else:
        assert lines == lines[-1:], done.stderr
        assert "Traceback" not in done.stderr


def test_grpc_port_in_use_names_the_grpc_option(tmp_path: Path, occupied_port: int) -> None:
    """With the gRPC address taken the line names --grpc (grpc's own log line may precede it)."""
    args = ["wandb-exporter", "--http", "", "--grpc", f"127.0.0.1:{occupied_port}", "--wandb-mode", "offline"]
    done = _run([*args, "--state-dir", ""], tmp_path)
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines()[-1].endswith("or pass --grpc a free HOST:PORT ('' = off)")
    assert "Traceback" not in done.stderr


def test_demo_without_ray_says_how_to_install_it(tmp_path: Path) -> None:
    """Without Ray importable, `demo` names the extra to install."""
    done = _run(["demo"], tmp_path, code="import sys; sys.modules['ray'] = None; " + RUN_CLI)
    assert done.returncode == 1
    assert (
        done.stderr
        == "Error: the demo runs on Ray, which is not installed; install it: pip install 'otel-valgen[ray]'\n"
    )


def test_verbose_is_a_group_option_too(tmp_path: Path) -> None:
    """`otel-valgen -v show MISSING` and `--verbose` before the command print the traceback as well."""
    for flag in ("-v", "--verbose"):
        result = CliRunner().invoke(main, [flag, "show", str(tmp_path / "missing")], prog_name="otel-valgen")
        assert result.exit_code == 2
        assert "Traceback (most recent call last)" in result.stderr
        assert result.stderr.splitlines()[-1].endswith("(see 'otel-valgen show --help')")


def test_an_unexpected_error_is_one_line_that_points_at_verbose() -> None:
    """An exception no command anticipated becomes one line, exit 1; with -v its traceback."""

    @click.command(cls=ValgenCommand)
    def broken() -> None:
        raise KeyError("surprise")

    plain = CliRunner().invoke(broken, [])
    assert (plain.exit_code, plain.stderr) == (
        1,
        "Error: KeyError: 'surprise' (unexpected; --verbose prints the traceback)\n",
    )
    verbose = CliRunner().invoke(broken, ["-v"])
    assert verbose.exit_code == 1
    assert 'raise KeyError("surprise")' in verbose.stderr


def test_an_operational_error_names_problem_and_fix() -> None:
    """OperationalError puts the problem and its fix on one line, exit 1."""

    @click.command(cls=ValgenCommand)
    def failing() -> None:
        raise OperationalError("the disk is full.", "free some space")

    result = CliRunner().invoke(failing, [])
    assert (result.exit_code, result.stderr) == (1, "Error: the disk is full; free some space\n")
