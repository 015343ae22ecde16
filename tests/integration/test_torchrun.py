"""User story: a plain torchrun job whose ranks each validate part of a step shows the whole step as one attempt.

Real ``torchrun`` (the venv's ``torch.distributed.run``) starts the ranks on CPU with the gloo
backend (``tests/integration/torchrun_rank.py``); they get only ``OTEL_VALGEN_RUN_ID`` and, for
the collector, ``OTEL_EXPORTER_OTLP_ENDPOINT``. ``otel-valgen show`` then reads the built
collector's file output, or the embedded sink's files.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from otel_valgen import contract
from otel_valgen._settings import DEFAULT_COUNT, DEFAULT_SEED
from otel_valgen.cli.main import main as cli_main
from otel_valgen.sampling import SortKey, bottom_k, sample_key, untagged
from tests.conftest import REPO
from tests.e2e import harness
from tests.support.require import require_module, require_or_skip

require_module("torch", "torch is not installed (torchrun); pip install -e '.[dev]'")

RANK = Path(__file__).with_name("torchrun_rank.py")
RUN_ID = "torchrun-run"
RANKS = 2
PROMPTS = 150  # more than k = 64 (the default), so the sample must choose among every rank's


def all_generations() -> list[str]:
    """The sample ids every rank together logged (one response per prompt)."""
    return [f"prompt-{i:03d}/0" for i in range(PROMPTS)]


def true_bottom_k() -> list[str]:
    """The step's sample by the sampling rule, computed from everything the ranks logged."""
    keyed = ((SortKey.of(sample_key(DEFAULT_SEED, i), i), i) for i in all_generations())
    return [sample_id for _, sample_id in bottom_k(keyed, DEFAULT_COUNT)]


def torchrun(folder: Path, *options: str, **env: str) -> None:
    """Run the ranks under torchrun in ``folder``; fail with their output unless all exit 0."""
    environment = {k: v for k, v in os.environ.items() if k != "OTEL_VALGEN_DIR"}  # the conftest's; use the default
    environment.update(PYTHONPATH=str(REPO), OTEL_VALGEN_RUN_ID=RUN_ID, **env)
    command = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={RANKS}", *options, str(RANK)]
    result = subprocess.run(
        [*command, str(PROMPTS)], cwd=folder, env=environment, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def shown(path: Path) -> list[dict[str, Any]]:
    """``otel-valgen show PATH --format json``: one object per (run, step)."""
    result = CliRunner().invoke(cli_main, ["show", str(path), "--format", "json"])
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines()]


def assert_one_attempt_of_all_ranks(steps: list[dict[str, Any]]) -> str:
    """Step 1 shows one attempt holding every rank's generations and the exact bottom-k of them; its attempt."""
    (step,) = steps
    assert (step["run_id"], step["step"], step["attempts"]) == (RUN_ID, 1, 1)
    assert step["seen"] == PROMPTS
    kept = [untagged(g["sample_id"]) for g in step["generations"]]
    assert kept == true_bottom_k()
    assert {int(i.split("-")[1].split("/")[0]) % RANKS for i in kept} == set(range(RANKS))
    return str(step["attempt"])


@pytest.fixture
def collector(tmp_path: Path) -> Iterator[harness.Collector]:
    """The built collector with its shipped config; its destinations other than the file are unreachable."""
    require_or_skip(harness.COLLECTOR_BIN.is_file(), "build/otelcol-valgen is absent; build it with `make collector`")
    started = harness.start_collector(
        tmp_path,
        "collector",
        ["collector.yaml"],
        {"VALGEN_TRACKER_EXPORTER_ENDPOINT": "127.0.0.1:9", "VALGEN_LOKI_OTLP_ENDPOINT": "http://127.0.0.1:9/otlp"},
    )
    yield started
    started.stop()


def test_torchrun_ranks_form_one_attempt_in_the_collector(tmp_path: Path, collector: harness.Collector) -> None:
    """Each rank ends its part with sources_expected=2: the collector closes the step at once, complete, all ranks."""
    torchrun(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=f"http://{collector.http_endpoint}")

    def summaries() -> list[harness.Record]:
        records = harness.records_of_file(collector.file_path)
        return [r for r in records if r.event == contract.EVENT_STEP_SUMMARY]

    harness.wait_for(lambda: bool(summaries()), 30, "the step's summary (a split step waits for max_step_duration)")
    (summary,) = summaries()
    assert summary.attributes[contract.CLOSED_REASON] == "complete"
    assert summary.attributes[contract.SOURCES_ENDED] == RANKS
    attempt = assert_one_attempt_of_all_ranks(shown(collector.file_path))
    assert attempt.startswith("torchelastic-")


def test_torchrun_ranks_form_one_attempt_in_the_embedded_sink(tmp_path: Path) -> None:
    """No endpoint: each rank writes its own file under ./valgen-data; show merges them into one attempt."""
    torchrun(tmp_path)
    attempt = assert_one_attempt_of_all_ranks(shown(tmp_path / "valgen-data"))
    assert attempt.startswith("torchelastic-")


def test_torchrun_without_a_rendezvous_id_still_forms_one_attempt(tmp_path: Path) -> None:
    """With --master-port and no --rdzv-id every rank gets TORCHELASTIC_RUN_ID=none; the endpoint names the launch."""
    port = harness.free_port()
    torchrun(tmp_path, f"--master-port={port}")
    attempt = assert_one_attempt_of_all_ranks(shown(tmp_path / "valgen-data"))
    assert attempt == f"torchelastic-127.0.0.1:{port}.1"
