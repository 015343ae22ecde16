"""Run the real ``otel-valgen exporter`` service as a process, offline, on a loopback port."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.e2e.harness import REPO


@dataclass
class ExporterProcess:
    """A running ``otel-valgen exporter`` (offline) and where it keeps its state and log."""

    process: subprocess.Popen[bytes]
    grpc_endpoint: str
    state_dir: Path
    log_path: Path

    def written_steps(self, run_id: str) -> list[int]:
        """Steps of ``run_id`` the ledger says were written (one entry per write)."""
        ledger = self.state_dir / "wandb" / "ledger.jsonl"
        if not ledger.exists():
            return []
        steps = []
        for line in ledger.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("group") == run_id:
                steps.append(int(entry["step"]))
        return steps

    def stop(self, timeout_s: float = 60.0) -> int:
        """SIGTERM: write closed steps, finish the attachments, exit."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(5)
        return int(self.process.returncode)

    def kill(self) -> None:
        """SIGKILL the process group (the service and wandb's own service process)."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(5)


def start_exporter(
    grpc_endpoint: str, state_dir: Path, wandb_dir: Path, log_path: Path, env: dict[str, str]
) -> ExporterProcess:
    """Start ``otel-valgen exporter --grpc ENDPOINT --layout rows`` in offline mode, its own process group."""
    full_env = {
        **os.environ,
        "WANDB_MODE": "offline",
        "WANDB_DIR": str(wandb_dir),
        "WANDB_SILENT": "true",
        "WANDB_DISABLE_GIT": "true",
        "PYTHONPATH": str(REPO),
        **env,
    }
    args = [sys.executable, "-m", "otel_valgen.cli.main", "exporter", "--grpc", grpc_endpoint, "--http", ""]
    args += ["--layout", "rows", "--state-dir", str(state_dir), "--wandb-mode", "offline", "--retry-after", "1"]
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            args, env=full_env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True
        )
    return ExporterProcess(process, grpc_endpoint, state_dir, log_path)
