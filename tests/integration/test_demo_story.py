"""User story: on a fresh machine, `otel-valgen demo` runs verl's fully-async layout and shows k per step."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from otel_valgen.sampling import untagged
from tests.support.require import require_module

require_module("ray")
pytestmark = pytest.mark.ray


def test_demo_samples_k_generations_per_step_from_every_actor(tmp_path: Path) -> None:
    """The demo writes the embedded sink; `show` finds k per step over all actors' generations."""
    sink = tmp_path / "sink"
    demo = subprocess.run(
        [sys.executable, "-m", "otel_valgen.cli.main", "demo", "--steps", "2", "--count", "5", "--prompts", "96",
         "--directory", str(sink)],
        capture_output=True, text=True, timeout=240, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert demo.returncode == 0, demo.stderr
    assert "step 1" in demo.stderr
    assert "kept 5 of 192" in demo.stdout
    shown = subprocess.run(
        [sys.executable, "-m", "otel_valgen.cli.main", "show", str(sink), "--format", "json"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    steps = [json.loads(line) for line in shown.stdout.splitlines()]
    assert [(s["step"], s["seen"], s["kept"]) for s in steps] == [(1, 192, 5), (2, 192, 5)]
    assert [untagged(g["sample_id"]) for g in steps[0]["generations"]] == [
        untagged(g["sample_id"]) for g in steps[1]["generations"]
    ]
    sources = {g["source"] for s in steps for g in s["generations"]}
    assert sources <= {"trainer", "generation-0", "generation-1", "generation-2"}
