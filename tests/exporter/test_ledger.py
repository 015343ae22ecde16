"""The ledger across a restart of the exporter service: which attempt each step shows, and since when."""

from __future__ import annotations

import json
from pathlib import Path

from otel_valgen import contract
from otel_valgen.exporter.backends.tensorboard import TensorBoardBackend, TensorBoardConfig
from otel_valgen.exporter.ledger import Ledger, ShownAttempt, ledger_dir
from otel_valgen.exporter.service import ExporterService

from .conftest import generation, request, rollout_request, serve_requests, summary
from .tensorboard_files import read_texts

KEY = "val/generations"
RESOURCE = {"service.name": "trainer", "tensorboard.log_dir": "logs"}


def attempt_request(attempt: str, start: int, text: str) -> object:
    """Step 6 of run "led", two generations of ``attempt`` that started at ``start`` (complete)."""
    logs = [generation("led", 6, i, attempt=attempt, text=text) for i in range(2)]
    closing = summary("led", 6, 2, attempt=attempt, attempt_start=start)
    return request(*logs, closing, resource=RESOURCE)


def serve(root: Path, state: Path, *requests: object) -> ExporterService:
    """A TensorBoard-only service with its ledger in ``state``, fed ``requests`` and stopped."""
    ledger = Ledger(ledger_dir(state, "tensorboard"))
    return serve_requests([TensorBoardBackend(TensorBoardConfig(root=str(root)), ledger)], *requests)


def test_after_a_restart_an_older_attempt_never_replaces_the_newer_one_shown(tmp_path: Path) -> None:
    """The restarted service knows when the shown attempt started: an older complete attempt is not written."""
    first = serve(tmp_path / "root", tmp_path / "state", attempt_request("L2.1", 2_000_000, "-new"))
    assert first.stats()["backends"]["tensorboard"]["written_steps"] == 1
    reloaded = Ledger(ledger_dir(tmp_path / "state", "tensorboard"))
    assert reloaded.shown("led", 6) == ShownAttempt("L2.1", 2_000_000, True)

    second = serve(tmp_path / "root", tmp_path / "state", attempt_request("L0.1", 1_000_000, "-old"))
    stats = second.stats()["backends"]["tensorboard"]
    assert (stats["written_steps"], stats["unchanged_steps"]) == (0, 1)
    (text,) = read_texts(tmp_path / "root" / "logs", KEY).values()
    assert "q0-new" in text
    assert "q0-old" not in text


def test_the_kinds_of_a_step_have_ledgers_of_their_own(tmp_path: Path) -> None:
    """A rollout step with the (run, step, attempt) of a written validation step is written, and each is shown apart."""
    rollouts = rollout_request("led", 6, attempt="L0.1", attempt_start=1_000_000, resource=RESOURCE)
    first = serve(tmp_path / "root", tmp_path / "state", attempt_request("L0.1", 2_000_000, ""), rollouts)
    stats = first.stats()["backends"]["tensorboard"]
    assert stats["kinds"]["validation"]["written_steps"] == stats["kinds"]["rollout"]["written_steps"] == 1
    reloaded = Ledger(ledger_dir(tmp_path / "state", "tensorboard"))
    assert reloaded.shown("led", 6) == ShownAttempt("L0.1", 2_000_000, True)
    assert reloaded.shown("led", 6, contract.KIND_ROLLOUT) == ShownAttempt("L0.1", 1_000_000, True)
    assert reloaded.committed_samples("led", 6, "L0.1", contract.KIND_ROLLOUT) == {"p0/0", "p0/1", "p1/0", "p1/1"}

    # A newer validation attempt replaces the validation only; both sent again add nothing.
    again = [attempt_request("L2.1", 3_000_000, "-new"), attempt_request("L2.1", 3_000_000, "-new"), rollouts]
    second = serve(tmp_path / "root", tmp_path / "state", *again)
    kinds = second.stats()["backends"]["tensorboard"]["kinds"]
    assert (kinds["validation"]["written_steps"], kinds["validation"]["unchanged_steps"]) == (1, 1)
    assert (kinds["rollout"]["written_steps"], kinds["rollout"]["unchanged_steps"]) == (0, 1)
    reloaded = Ledger(ledger_dir(tmp_path / "state", "tensorboard"))
    assert reloaded.shown("led", 6, contract.KIND_ROLLOUT) == ShownAttempt("L0.1", 1_000_000, True)
    assert sorted(read_texts(tmp_path / "root" / "logs", "train/generations")) == [6]


def test_ledger_lines_without_a_kind_are_validation(tmp_path: Path) -> None:
    """A ledger written before rollouts reached the backends (no "kind") reads as validation."""
    line = {"group": "old", "step": 3, "samples": ["s000"], "row": None, "attempt": "L1.1", "attempt_start": 5}
    (tmp_path / "ledger.jsonl").write_text(json.dumps(line) + "\n", encoding="utf-8")
    ledger = Ledger(tmp_path)
    assert ledger.is_committed("old", 3, "L1.1")
    assert not ledger.is_committed("old", 3, "L1.1", contract.KIND_ROLLOUT)
    assert ledger.shown("old", 3, contract.KIND_ROLLOUT) is None
    ledger.commit("old", 3, ["p0/0"], shown=ShownAttempt("L1.1", 5), kind=contract.KIND_ROLLOUT)
    assert json.loads((tmp_path / "ledger.jsonl").read_text().splitlines()[1])["kind"] == "rollout"
    assert Ledger(tmp_path).committed_samples("old", 3, "L1.1", contract.KIND_ROLLOUT) == {"p0/0"}
