"""When the embedded sink writes: at a flush in the caller's thread, at a full batch, and by itself after the delay."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

import otel_valgen as vg
from otel_valgen import contract


def _events(directory: Path) -> list[str]:
    """The event name of every record the sink has written so far, in file order."""
    events = []
    for path in sorted(directory.glob("valgen-*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            for resource in json.loads(line)["resourceLogs"]:
                for scope in resource["scopeLogs"]:
                    events += [record.get("eventName", "") for record in scope["logRecords"]]
    return events


def test_a_record_reaches_the_file_after_the_delay_without_a_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A block's start record is written while the block is still open (a crash later keeps it)."""
    monkeypatch.setenv("OTEL_BLRP_SCHEDULE_DELAY", "50")
    vg.configure(run_id="r", directory=str(tmp_path))
    with vg.validation(step=1):
        deadline = time.monotonic() + 10
        while contract.EVENT_VALIDATION_START not in _events(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _events(tmp_path) == [contract.EVENT_VALIDATION_START]
    vg.shutdown()


def test_the_call_that_fills_a_batch_writes_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Presampling off, 25 generations, batches of 10: two batches are on disk when the call returns."""
    monkeypatch.setenv("OTEL_BLRP_SCHEDULE_DELAY", "600000")  # the worker never writes in this test
    monkeypatch.setenv("OTEL_BLRP_MAX_EXPORT_BATCH_SIZE", "10")
    vg.configure(run_id="r", directory=str(tmp_path), presample=False)
    with vg.validation(step=1):
        vg.log_generations([f"p{i}" for i in range(25)], ["o"] * 25, [1.0] * 25)
        assert len(_events(tmp_path)) == 20  # the start record and 19 generations; 6 still wait
    events = _events(tmp_path)
    assert events.count(contract.EVENT_GENERATION) == 25
    assert events[-1] == contract.EVENT_VALIDATION_END  # the block's end flushed the rest before returning
    vg.shutdown()


@pytest.mark.skipif(sys.platform == "win32", reason="os.fork")
def test_a_forked_child_does_not_write_its_parents_waiting_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Records waiting in the parent at the fork are the parent's to write: each reaches the file once."""
    monkeypatch.setenv("OTEL_BLRP_SCHEDULE_DELAY", "600000")
    vg.configure(run_id="r", directory=str(tmp_path))
    block = vg.validation(step=1, source="parent")
    block.__enter__()  # its start record waits in the parent's batch
    pid = os.fork()
    if pid == 0:  # the child: its own block, flushed at its end
        code = 0
        try:
            with vg.validation(step=1, source="child"):
                vg.log_generations(["c"], ["o"], [1.0])
        except BaseException:
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    vg.log_generations(["p"], ["o"], [1.0])
    block.__exit__(None, None, None)
    vg.shutdown()
    events = _events(tmp_path)
    assert events.count(contract.EVENT_VALIDATION_START) == 2  # the parent's once, the child's once
    assert events.count(contract.EVENT_GENERATION) == 2
    assert events.count(contract.EVENT_VALIDATION_END) == 2
