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
        [sys.executable, "-m", "otel_valgen.cli", "resend", str(spool), "--endpoint", endpoint],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        check=False,
    )
    assert done.returncode in {0, 3}, done.stderr  # 3: nothing found


def _step(step: int) -> None:
    with vg.validation(step=step, source="trainer", sources_expected=1):
        vg.log_generations([f"q{step}-{i}" for i in range(4)], ["a"] * 4, [0.5] * 4)


@pytest.mark.timeout(60)
def test_records_spooled_after_a_resend_are_replayed_by_the_next_resend(
    otlp_http: OtlpHttpReceiver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two outages, two resends: both steps' end records reach the collector."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    vg.configure(run_id="faults-spool", count=4, endpoint=f"http://127.0.0.1:{free_port()}", flush_timeout_s=1)
    spool = tmp_path / "sink" / "spool"
    for step, spooled in ((1, 5), (2, 10)):
        _step(step)
        wait_for(lambda n=spooled: vg.stats()["records_spooled"] == n, 15, f"step {step} spooled")
        _resend(spool, otlp_http.endpoint)
    ends = [
        r.attributes[contract.STEP]
        for data in otlp_http.json_requests()
        for r in records_of_json(data)
        if r.event == contract.EVENT_VALIDATION_END
    ]
    assert sorted(ends) == [1, 2]
