"""The ``wandb-exporter`` and ``push`` commands: the CLI surface, SIGTERM shutdown, backfill."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

import otel_valgen.exporter as package
from otel_valgen.cli.exporter_commands import exporter_command, push_command, wandb_exporter_command
from otel_valgen.otlp_json import to_otlp_json
from tests.support.ports import free_port

from .conftest import ROLLOUT_KEY, both_kinds, post_protobuf, step_request, wait_for
from .tensorboard_files import read_texts
from .wandb_files import read_run

ROOT = Path(__file__).resolve().parents[2]


def test_public_names_stay_as_they_are() -> None:
    """The package facade exports exactly these names."""
    assert package.__all__ == ["ClosedStep", "Ledger", "assemble"]


def test_commands_are_named_for_the_core_cli() -> None:
    """The commands carry the names the core CLI registers them under; wandb-exporter is an alias of exporter."""
    assert (exporter_command.name, wandb_exporter_command.name, push_command.name) == (
        "exporter",
        "wandb-exporter",
        "push",
    )
    assert [p.name for p in exporter_command.params] == [p.name for p in wandb_exporter_command.params]


def test_importing_the_cli_does_not_import_wandb_or_grpc() -> None:
    """``otel-valgen --help`` stays fast: the commands' module imports neither wandb nor grpc."""
    code = "import sys, otel_valgen.cli.exporter_commands; print('wandb' in sys.modules, 'grpc' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.split() == ["False", "False"]


def test_push_command_backfills_files(wandb_dir: Path, tmp_path: Path) -> None:
    """``push PATH --layout rows`` writes the steps of OTLP-JSON files and reports them."""
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps(to_otlp_json(step_request("cli-push", 4, 3))) + "\n", encoding="utf-8")
    result = CliRunner().invoke(push_command, [str(data), "--layout", "rows", "--wandb-mode", "offline"])
    assert result.exit_code == 0, result.output
    assert "pushed 1 steps (3 rows)" in result.output
    assert len(read_run(wandb_dir, "cli-push").tables("val/generations")[0][1]["data"]) == 3


def test_service_process_sigterm_flushes_and_exits_cleanly(wandb_dir: Path, tmp_path: Path) -> None:
    """The service as a process writes received steps in each backend and, on SIGTERM, exits 0."""
    port = free_port()
    state = tmp_path / "state"
    code = "from otel_valgen.cli.exporter_commands import exporter_command as c; c()"
    args = ["--http", f"127.0.0.1:{port}", "--grpc", "", "--layout", "verl", "--state-dir", str(state)]
    args += ["--backend", "wandb,tensorboard", "--tensorboard-dir", str(tmp_path / "boards")]
    process = subprocess.Popen(
        [sys.executable, "-c", code, *args], cwd=ROOT, env=os.environ.copy(), stderr=subprocess.PIPE, text=True
    )
    try:
        wait_for(lambda: post_protobuf(port, step_request("cli-svc", 1, 2).SerializeToString()), 30)
        assert post_protobuf(port, step_request("cli-svc", 2, 2).SerializeToString())
        wait_for(lambda: _ledger_steps(state / "wandb") == _ledger_steps(state / "tensorboard") == [1, 2], 30)
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    assert "exporter stopped" in err
    assert [step for step, _ in read_run(wandb_dir, "cli-svc").tables("val/generations")] == [1, 2]
    assert sorted(read_texts(tmp_path / "boards" / "otel-valgen" / "cli-svc", "val/generations")) == [1, 2]


def _ledger_steps(folder: Path) -> list[int]:
    ledger = folder / "ledger.jsonl"
    if not ledger.exists():
        return []
    return sorted(json.loads(line)["step"] for line in ledger.read_text().splitlines())


def test_push_command_kind_restricts_the_stream(tmp_path: Path) -> None:
    """``push --kind rollout`` writes the rollouts only, and the summary line counts per kind."""
    data = tmp_path / "data.jsonl"
    lines = [json.dumps(to_otlp_json(item)) for item in both_kinds("cli-kind", 2, {"tensorboard.log_dir": "logs"})]
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    boards = ["--backend", "tensorboard", "--tensorboard-dir", str(tmp_path / "boards")]
    result = CliRunner().invoke(push_command, [str(data), *boards, "--kind", "rollout"])
    assert result.exit_code == 0, result.output
    assert "pushed 1 steps (4 rows); 0 already written [rollout 1 steps (4 rows), 0 already written]" in result.output
    assert read_texts(tmp_path / "boards" / "logs", "val/generations") == {}
    assert sorted(read_texts(tmp_path / "boards" / "logs", ROLLOUT_KEY)) == [2]
    shared = CliRunner().invoke(push_command, [str(data), *boards, "--rollout-table-key", "val/generations"])
    assert shared.exit_code == 2
    assert "validation and rollouts would share one table" in shared.output
