"""``push``: which attempt of a step it writes, and what it tells the ledger about it."""

from __future__ import annotations

import json
from pathlib import Path

from otel_valgen import contract
from otel_valgen.exporter.backends.tensorboard import TensorBoardBackend, TensorBoardConfig
from otel_valgen.exporter.ledger import Ledger, ShownAttempt
from otel_valgen.exporter.push import push_paths
from otel_valgen.otlp_json import to_otlp_json

from .conftest import ROLLOUT_KEY, both_kinds, generation, request, rollout, summary
from .tensorboard_files import read_texts

KEY = "val/generations"
RESOURCE = {"service.name": "trainer", "tensorboard.log_dir": "logs"}


def attempt_request(attempt: str, start: int, reason: str, text: str) -> object:
    """Step 2 of run "push": two ranked generations of ``attempt`` and its summary (closed for ``reason``)."""
    logs = [generation("push", 2, i, attempt=attempt, text=text) for i in range(2)]
    closing = summary("push", 2, 2, attempt=attempt, attempt_start=start, closed_reason=reason)
    return request(*logs, closing, resource=RESOURCE)


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


def tensorboard(root: Path, state: Path) -> TensorBoardBackend:
    """A TensorBoard backend under ``root`` with its ledger in ``state``."""
    return TensorBoardBackend(TensorBoardConfig(root=str(root)), Ledger(state))


def test_push_writes_both_kinds_by_default_and_kind_restricts_it(tmp_path: Path) -> None:
    """--kind rollout writes the rollouts only; a later push of both adds the validation, and the rollouts once."""
    root, state = tmp_path / "root", tmp_path / "state"
    data = write(tmp_path / "both.jsonl", *both_kinds("pk", 3, RESOURCE))
    first = push_paths([data], [tensorboard(root, state)], kinds=(contract.KIND_ROLLOUT,))
    assert (first.steps, first.rows, list(first.kinds)) == (1, 4, [contract.KIND_ROLLOUT])
    assert read_texts(root / "logs", KEY) == {}
    assert sorted(read_texts(root / "logs", ROLLOUT_KEY)) == [3]

    second = push_paths([data], [tensorboard(root, state)])
    counts = {kind: (c.steps, c.rows, c.steps_skipped) for kind, c in second.kinds.items()}
    assert counts == {contract.KIND_VALIDATION: (1, 2, 0), contract.KIND_ROLLOUT: (0, 0, 1)}
    assert sorted(read_texts(root / "logs", KEY)) == [3]
    assert Ledger(state).shown("pk", 3, contract.KIND_ROLLOUT) is not None


def test_pushed_rollouts_of_files_without_a_summary_keep_each_prompts_responses_together(tmp_path: Path) -> None:
    """Embedded-sink files (no ranks, no summary): push selects k prompts and writes them by prompt."""
    records = [rollout("sink", 2, p, i) for i in range(2) for p in range(3)]  # keys interleave the prompts
    data = write(tmp_path / "sink.jsonl", request(*records, resource=RESOURCE))
    report = push_paths([data], [tensorboard(tmp_path / "root", tmp_path / "state")])
    assert report.kinds[contract.KIND_ROLLOUT].rows == 4  # k = 2 prompts (valgen.sample_count), 2 responses each
    text = read_texts(tmp_path / "root" / "logs", ROLLOUT_KEY)[2]
    assert [line.split()[-1] for line in text.splitlines() if line.startswith("### Response")] == [
        "p2/0",
        "p2/1",
        "p1/0",
        "p1/1",
    ]
