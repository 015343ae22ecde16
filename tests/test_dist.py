"""User story: the install command docs/verl.md gives works in a fresh environment (no release on PyPI yet).

``make dist`` builds the wheel; ``pip install "dist/<wheel>[cli]"`` in a new virtual environment (its
own pip, dependencies from the index) gives the hooks a verl job names and the CLI.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO


def _run(command: list[str], cwd: Path = REPO) -> str:
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, f"{command}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout


def test_the_wheel_of_make_dist_installs_with_pip_into_a_new_environment(tmp_path: Path) -> None:
    """`make dist`, `pip install "dist/<wheel>[cli]"`: the Ray hooks import, the verl hooks install, the CLI runs."""
    _run(["make", "dist", f"DIST={tmp_path / 'dist'}"])
    (wheel,) = (tmp_path / "dist").glob("otel_valgen-*-py3-none-any.whl")
    uv = next(REPO.glob("build/tools/uv-*/bin/uv"))
    venv = tmp_path / "venv"
    _run([str(uv), "venv", "--quiet", "--seed", "--python", sys.executable, str(venv)])  # --seed: pip, as users have
    _run([str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check", f"{wheel}[cli]"])
    check = (
        "from otel_valgen.ray import runtime_env_hook, setup_worker\n"
        "from otel_valgen.integrations import verl\n"
        "assert callable(runtime_env_hook) and callable(setup_worker)\n"
        "print(verl.install())\n"
    )
    assert _run([str(venv / "bin" / "python"), "-c", check], cwd=tmp_path).strip() == "True"
    assert "show" in _run([str(venv / "bin" / "otel-valgen"), "--help"], cwd=tmp_path)
