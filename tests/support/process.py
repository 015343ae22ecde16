"""One wrapper for the server processes the suites start (collectors, exporters).

Start with a log file, wait until ready, stop as an operator would (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass
class ServerProcess:
    """A started server process and the file its output goes to."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of its log, for failure messages."""
        text = self.log_path.read_text(encoding="utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout_s: float = 20.0) -> int:
        """SIGTERM (so that it flushes), then SIGKILL after ``timeout_s``; its exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        return int(self.process.returncode)

    def wait_ready(self, ready: Callable[[], bool], timeout_s: float = 30.0) -> None:
        """Poll ``ready`` until it holds; raise with the log's tail if the process exits or time runs out."""
        deadline = time.monotonic() + timeout_s
        while not ready():
            if self.process.poll() is not None:
                raise AssertionError(f"{self.name} exited with {self.process.returncode}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name} not ready after {timeout_s}s:\n{self.log_tail()}")
            time.sleep(0.1)


def launch(name: str, args: list[str], env: Mapping[str, str], workdir: Path, log_name: str) -> subprocess.Popen[bytes]:
    """Start ``args`` in ``workdir`` with ``env``, its output appended to ``workdir/log_name``."""
    workdir.mkdir(parents=True, exist_ok=True)
    with (workdir / log_name).open("ab") as log:
        return subprocess.Popen(args, env=dict(env), stdout=log, stderr=subprocess.STDOUT, cwd=workdir)


def run_in_a_terminal(script: str, env: Mapping[str, str], timeout_s: float = 120) -> str:
    """Run a shell script as a terminal runs a command line (a process group of its own); its stdout.

    The script must succeed. A process group of its own is what a plain job gets from a
    terminal, and what tells its launch (``otel_valgen._launch_group``) from the test run's.
    """
    done = subprocess.run(
        ["bash", "-c", script],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        start_new_session=True,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def run_show(folder: Path, output_format: str) -> str:
    """``otel-valgen show FOLDER --format FORMAT`` run as users run it (the installed script); its standard output."""
    return run_cli(["show", str(folder), "--format", output_format])


def run_cli(arguments: list[str]) -> str:
    """``otel-valgen ARGUMENTS`` run as users run it (the installed script); its standard output."""
    script = Path(sys.executable).parent / "otel-valgen"
    done = subprocess.run([str(script), *arguments], capture_output=True, text=True, check=True)
    return done.stdout
