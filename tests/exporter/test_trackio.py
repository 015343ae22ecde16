"""The Trackio backend on a local store: the trainer is verl 0.9.1's own Trackio tracking in another process.

The exporter runs as ``otel-valgen exporter --backend trackio`` with the job's ``TRACKIO_DIR``,
and the store is read back with Trackio's own storage API; each side in a process of its own,
since Trackio reads ``TRACKIO_DIR`` when it is imported.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from otel_valgen import contract
from otel_valgen.exporter.tables import ROLLOUT_COLUMNS
from tests.support.process import ServerProcess, launch
from tests.support.require import require_module

from .conftest import (
    ROLLOUT_KEY,
    conversation_step,
    generation,
    post_protobuf,
    request,
    rollout_request,
    rollout_rows,
    summary,
    wait_for,
)
from .mlflow_server import free_port

ROOT = Path(__file__).resolve().parents[2]
require_module("trackio", "trackio is not installed; pip install -e '.[dev]'")
require_module("verl", "verl is not installed; pip install -e '.[dev]'")


def job(args: list[str], env: dict[str, str], work: Path) -> str:
    """Run trackio_job.py (copied out of the repository) with ``args``; its stdout."""
    script = shutil.copy(Path(__file__).with_name("trackio_job.py"), work / "trackio_job.py")
    done = subprocess.run(
        [sys.executable, str(script), *args], cwd=work, env=env, check=True, timeout=240, capture_output=True, text=True
    )
    return done.stdout


@pytest.mark.timeout(300)
def test_steps_land_in_the_trainers_run_as_traces_tables_and_scalars(tmp_path: Path) -> None:
    """K traces and table rows per step in the trainer's own Trackio run, also after the store was locked.

    The rollouts of step 2 go under train/generations: a trace per response and a table of their own.
    Step 5 has a conversation: its trace holds the turns as chat messages, its table a conversation column.
    """
    work = tmp_path / "job"
    work.mkdir()
    env = os.environ | {"TRACKIO_DIR": str(tmp_path / "trackio"), "PYTHONPATH": str(ROOT)}
    job(["trainer", str(tmp_path / "trainer.json")], env, work)
    resource: dict[str, Any] = json.loads((tmp_path / "trainer.json").read_text())
    assert (resource["trackio.project"], resource["trackio.run_name"]) == ("valgen-proj", "grpo")

    port = free_port()
    args = [sys.executable, "-m", "otel_valgen.cli.main", "exporter", "--backend", "trackio", "--grpc", ""]
    args += ["--http", f"127.0.0.1:{port}", "--state-dir", str(tmp_path / "state")]
    folder = tmp_path / "exporter"
    exporter = ServerProcess("exporter", launch("exporter", args, env, folder, "log"), folder / "log")
    try:
        for step in (1, 2):
            logs = [generation("tk", step, i) for i in range(3)]
            for i, log in enumerate(logs):
                log.attributes.add(key=f"{contract.EXTRA_PREFIX}acc").value.double_value = float(i % 2)
            body = request(*logs, summary("tk", step, 3, seen=9), resource=resource).SerializeToString()
            wait_for(lambda body=body: post_protobuf(port, body), 60)
        ledger = tmp_path / "state" / "trackio" / "ledger.jsonl"
        wait_for(lambda: ledger.exists() and len(ledger.read_text().splitlines()) == 2, 120)
        # A store another process holds locked: Trackio only warns that it could not store the
        # step; the backend finds it missing, keeps it, and writes it once the lock is gone.
        with (tmp_path / "trackio" / "valgen-proj.lock").open("w") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            assert post_protobuf(
                port, request(generation("tk", 3, 0), summary("tk", 3, 1), resource=resource).SerializeToString()
            )
            wait_for(lambda: "was not stored" in exporter.log_path.read_text(), 60)
            assert len(ledger.read_text().splitlines()) == 2
        wait_for(lambda: len(ledger.read_text().splitlines()) == 3, 120)
        # A step of a real attempt sent again (a retried request) is recorded under that attempt: written once.
        attempt = [generation("tk", 4, 0, attempt="L1.1"), summary("tk", 4, 1, attempt="L1.1", attempt_start=5_000)]
        # Each POST is retried until accepted (a busy service can answer after the client's 10 s):
        # a request sent again is what this part tests.
        retried = request(*attempt, resource=resource).SerializeToString()
        for _ in range(2):
            wait_for(lambda: post_protobuf(port, retried), 60)
        wait_for(lambda: len(ledger.read_text().splitlines()) == 4, 120)
        rollouts = rollout_request("tk", 2, resource=resource).SerializeToString()
        wait_for(lambda: post_protobuf(port, rollouts), 60)
        wait_for(lambda: len(ledger.read_text().splitlines()) == 5, 120)
        conversation = conversation_step("tk", 5, resource=resource).SerializeToString()
        wait_for(lambda: post_protobuf(port, conversation), 60)
        wait_for(lambda: len(ledger.read_text().splitlines()) == 6, 120)
    finally:
        assert exporter.stop() == 0, exporter.log_tail()
    stored = json.loads(job(["read", "valgen-proj", "grpo"], env, work))
    assert [run["id"] for run in stored["runs"]] == [resource["trackio.run_id"]]  # no second run was made
    tables = {row["step"]: row["val/generations/table"] for row in stored["logs"] if "val/generations/table" in row}
    assert sorted(tables) == [1, 2, 3, 4, 5]
    # step 3 once (written after the lock), step 4 once (its retried request wrote nothing)
    assert [row["step"] for row in stored["logs"] if "val/generations/table" in row] == [1, 2, 3, 4, 5]
    assert "conversation" not in tables[2][0], "text-only steps keep their columns"
    turns, text_only = (row["conversation"] for row in tables[5])
    assert turns.splitlines()[:4] == [
        "── prompt ──",
        "[system] Use the calc tool.",
        "[user] 2+2? Answer in **bold**.",
        "── generated ──",
    ]
    assert '→ calc({"expr": "2+2"}) #c1\n[tool #c1] <script>alert(1)</script> 4' in turns
    assert text_only is None
    conversation = next(t for t in stored["traces"] if t["step"] == 5 and t["metadata"]["sample_index"] == 0)
    assert [m["role"] for m in conversation["messages"]] == ["system", "user", "assistant", "tool", "assistant"]
    call = conversation["messages"][2]["tool_calls"][0]
    assert (call["id"], call["function"]["name"], json.loads(call["function"]["arguments"])) == (
        "c1",
        "calc",
        {"expr": "2+2"},
    )
    assert conversation["messages"][3]["tool_call_id"] == "c1"  # Trackio pairs the call with its result
    assert conversation["messages"][3]["content"].endswith("```end\n[cut to fit: 300000 bytes before the cut]")
    text_trace = next(t for t in stored["traces"] if t["step"] == 5 and t["metadata"]["sample_index"] == 1)
    assert [m["role"] for m in text_trace["messages"]] == ["user", "assistant"]
    assert [(row["step"], row["sample_id"], row["output"], row["acc"]) for row in tables[2]] == [
        (2, "s000", "a0@2", 0.0),
        (2, "s001", "a1@2", 1.0),
        (2, "s002", "a2@2", 0.0),
    ]
    kept = {row["step"]: row["val/generations/kept"] for row in stored["logs"] if "val/generations/kept" in row}
    assert kept == {1: 3, 2: 3, 3: 1, 4: 1, 5: 2}
    traces = sorted((t for t in stored["traces"] if t["step"] == 1), key=lambda t: t["metadata"]["sample_index"])
    assert [t["messages"][1]["content"] for t in traces] == ["a0@1", "a1@1", "a2@1"]  # in rank order
    assert [t["metadata"]["score"] for t in traces] == [0.5, 0.5, 0.5]
    (rollouts,) = [row[f"{ROLLOUT_KEY}/table"] for row in stored["logs"] if f"{ROLLOUT_KEY}/table" in row]
    assert [[row[name] for name in [*ROLLOUT_COLUMNS, "attempt"]] for row in rollouts] == rollout_rows(2)
    responses = [t for t in stored["traces"] if t["metadata"]["source"] == "rollout_generations"]
    responses.sort(key=lambda t: t["metadata"]["sample_index"])
    assert [t["messages"][1]["content"] for t in responses] == [row[4] for row in rollout_rows(2)]
    assert [t["metadata"]["advantage"] for t in responses] == [row[6] for row in rollout_rows(2)]
    assert all(t["metadata"]["source"] == "validation_generations" for t in stored["traces"] if t["step"] != 2)
