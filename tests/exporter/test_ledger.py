"""The ledger across a restart of the exporter service: which attempt each step shows, and since when."""

from __future__ import annotations

from pathlib import Path

from otel_valgen.exporter.backends.tensorboard import TensorBoardBackend, TensorBoardConfig
from otel_valgen.exporter.ledger import Ledger, ShownAttempt, ledger_dir
from otel_valgen.exporter.service import ExporterService

from .conftest import generation, request, serve_requests, summary
from .tensorboard_files import read_texts

KEY = "val/generations"


def attempt_request(attempt: str, start: int, text: str) -> object:
    """Step 6 of run "led", two generations of ``attempt`` that started at ``start`` (complete)."""
    logs = [generation("led", 6, i, attempt=attempt, text=text) for i in range(2)]
    closing = summary("led", 6, 2, attempt=attempt, attempt_start=start)
    return request(*logs, closing, resource={"service.name": "trainer", "tensorboard.log_dir": "logs"})


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
