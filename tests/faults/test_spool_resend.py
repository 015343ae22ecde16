"""User story: the collector goes away twice during a long job; the operator replays the spool each time.

``otel-valgen resend`` keeps its progress in ``<file>.resent``. The emitting process keeps
the spool file open for appending, so what it spools after the first replay must be found,
and only that sent, by the second.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import otel_valgen as vg
from otel_valgen import contract
from tests.conftest import OtlpHttpReceiver
from tests.e2e.harness import REPO, free_port, records_of_json, wait_for


def _resend(spool: Path, endpoint: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "otel_valgen.cli.main", "resend", str(spool), "--endpoint", endpoint],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        check=False,
    )
    assert done.returncode in {0, 3}, done.stderr  # 3: nothing found


def _handed(stats: dict[str, int]) -> int:
    """Records handed to the SDK so far: generations and the start, progress and end records."""
    return sum(
        stats.get(name, 0)
        for name in ("generations_emitted", "start_records_emitted", "progress_records_emitted", "end_records_emitted")
    )


def _step(step: int) -> None:
    with vg.validation(step=step, source="trainer", sources_expected=1):
        vg.log_generations([f"q{step}-{i}" for i in range(4)], ["a"] * 4, [0.5] * 4)


@pytest.mark.timeout(60)
def test_records_spooled_after_a_resend_are_replayed_by_the_next_resend(
    otlp_http: OtlpHttpReceiver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two outages, two resends: both steps' start and end records reach the collector, each once."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    vg.configure(run_id="faults-spool", count=4, endpoint=f"http://127.0.0.1:{free_port()}", flush_timeout_s=1)
    spool = tmp_path / "sink" / "spool"
    for step in (1, 2):
        _step(step)
        stats = vg.stats()
        assert (stats["start_records_emitted"], stats["generations_emitted"], stats["end_records_emitted"]) == (
            step,
            4 * step,
            step,
        ), stats
        wait_for(
            lambda: vg.stats()["records_spooled"] == _handed(vg.stats()) and vg.stats()["records_unconfirmed"] == 0,
            15,
            f"every record of step {step} spooled",
        )
        _resend(spool, otlp_http.endpoint)
    resent = [r for data in otlp_http.json_requests() for r in records_of_json(data)]
    assert len(resent) == vg.stats()["records_spooled"]  # each spooled record sent once
    for event in (contract.EVENT_VALIDATION_START, contract.EVENT_VALIDATION_END):
        assert sorted(r.attributes[contract.STEP] for r in resent if r.event == event) == [1, 2], event
