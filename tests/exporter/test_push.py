"""``push``: which attempt of a step it writes, and what it tells the ledger about it."""

from __future__ import annotations

import json
from pathlib import Path

from otel_valgen.exporter.backends.tensorboard import TensorBoardBackend, TensorBoardConfig
from otel_valgen.exporter.ledger import Ledger, ShownAttempt
from otel_valgen.exporter.push import push_paths
from otel_valgen.otlp_json import to_otlp_json

from .conftest import generation, request, summary
from .tensorboard_files import read_texts

KEY = "val/generations"


def attempt_request(attempt: str, start: int, reason: str, text: str) -> object:
    """Step 2 of run "push": two ranked generations of ``attempt`` and its summary (closed for ``reason``)."""
    logs = [generation("push", 2, i, attempt=attempt, text=text) for i in range(2)]
    closing = summary("push", 2, 2, attempt=attempt, attempt_start=start, closed_reason=reason)
    return request(*logs, closing, resource={"service.name": "trainer", "tensorboard.log_dir": "logs"})


def write(path: Path, *requests: object) -> Path:
    """OTLP-JSON lines of ``requests``, as the collector's file exporter writes them."""
    path.write_text("".join(json.dumps(to_otlp_json(item)) + "\n" for item in requests), encoding="utf-8")
    return path


def test_push_marks_an_attempt_complete_only_when_its_summary_says_so(tmp_path: Path) -> None:
    """A pushed attempt cut by max_duration stays incomplete, so a complete one pushed later is still written."""
    root, state = tmp_path / "root", tmp_path / "state"
    cut = write(tmp_path / "cut.jsonl", attempt_request("L2.1", 3_000_000, "max_duration", "-cut"))
    first = push_paths([cut], [TensorBoardBackend(TensorBoardConfig(root=str(root)), Ledger(state))])
    assert first.steps == 1
    assert Ledger(state).shown("push", 2) == ShownAttempt("L2.1", 3_000_000, False)

    done = write(tmp_path / "done.jsonl", attempt_request("L1.1", 1_000_000, "complete", "-done"))
    second = push_paths([cut, done], [TensorBoardBackend(TensorBoardConfig(root=str(root)), Ledger(state))])
    assert (second.steps, second.steps_skipped) == (1, 0)
    assert Ledger(state).shown("push", 2) == ShownAttempt("L1.1", 1_000_000, True)
    texts = read_texts(root / "logs", KEY)
    assert "q0-done" in texts[2]
