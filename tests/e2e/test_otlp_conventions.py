"""User story: a job configured only by the OTLP exporter variables reaches the built collector.

The collector's OTLP/HTTP receiver listens for logs at ``/custom/logs`` (an overlay on
``collector.yaml``), so only a URL used as it is can reach it, and it reports the size of each
request body it received (``metrics: detailed``), so compression is visible on the wire.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import otel_valgen as vg
from otel_valgen import _process, contract
from otel_valgen.sampling import untagged
from tests.e2e.harness import REPO, free_port, wait_for
from tests.faults.conftest import Collectors, RunningCollector, file_records, metric_sum

OVERLAY = """\
receivers:
  otlp:
    protocols:
      http:
        logs_url_path: /custom/logs
service:
  telemetry:
    metrics:
      level: detailed
"""


@pytest.fixture
def collector(tmp_path: Path) -> Iterator[RunningCollector]:
    """The built collector, its logs path moved to /custom/logs; destinations other than the file are down."""
    overlay = tmp_path / "custom-path.yaml"
    overlay.write_text(OVERLAY, encoding="utf-8")
    started = Collectors(tmp_path / "collectors")
    env = {
        "VALGEN_TRACKER_EXPORTER_ENDPOINT": f"127.0.0.1:{free_port()}",
        "VALGEN_LOKI_OTLP_ENDPOINT": f"http://127.0.0.1:{free_port()}/otlp",
    }
    try:
        yield started.start("collector", env, configs=["collector.yaml", str(overlay)])
    finally:
        started.stop_all()


def _logs_url(collector: RunningCollector) -> str:
    return f"http://{collector.http_endpoint}/custom/logs"


def _step(run_id: str, step: int, text: str = "") -> None:
    with vg.validation(step=step, source="trainer", sources_expected=1):
        vg.log_generations([f"q{i}{text}" for i in range(3)], [f"a{i}" for i in range(3)], [0.5, 0.6, 0.7])


def _kept(collector: RunningCollector, run_id: str, step: int) -> list[str]:
    return sorted(
        untagged(r.attributes[contract.SAMPLE_ID])
        for r in file_records(collector.file_path)
        if r.event == contract.EVENT_GENERATION
        and r.attributes[contract.RUN_ID] == run_id
        and r.attributes[contract.STEP] == step
    )


def test_the_logs_endpoint_is_used_as_it_is(collector: RunningCollector, monkeypatch: pytest.MonkeyPatch) -> None:
    """OTEL_EXPORTER_OTLP_LOGS_ENDPOINT=<collector>/custom/logs: records arrive there, no /v1/logs appended."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", _logs_url(collector))
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{free_port()}")  # loses to the LOGS one
    vg.configure(run_id="as-is", count=3, spool=False)
    _step("as-is", 1)
    wait_for(lambda: len(_kept(collector, "as-is", 1)) == 3, 30, "the step's 3 generations in the file")
    assert vg.stats()["records_export_failed"] == 0


def test_http_json_reaches_the_collector(
    collector: RunningCollector, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """OTEL_EXPORTER_OTLP_PROTOCOL=http/json: the OTLP/JSON exporter sends, the collector decodes every record."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", _logs_url(collector))
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
    settings = vg.configure(run_id="json-run", count=3, spool=False)
    assert settings is not None
    assert settings.protocol == "http/json"
    _step("json-run", 2)
    wait_for(lambda: len(_kept(collector, "json-run", 2)) == 3, 30, "the step's 3 generations in the file")
    assert "not supported" not in caplog.text
    emitter = _process._emitter
    assert emitter is not None
    assert emitter.pipeline.description.startswith("OTLP/HTTP JSON ")


def _resend(spool: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_EXPORTER_OTLP")}
    return subprocess.run(
        [sys.executable, "-m", "otel_valgen.cli.main", "resend", str(spool)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**clean, **env},
        timeout=120,
        check=False,
    )


def _request_bytes(collector: RunningCollector) -> float:
    return metric_sum(collector.metrics(), "http_server_request_body_size_sum", http_route="/custom/logs")


def test_resend_takes_the_logs_endpoint_and_compression_from_the_environment(
    collector: RunningCollector, tmp_path: Path
) -> None:
    """``resend``, no --endpoint: the LOGS endpoint as it is, LOGS compression over the generic one, gzip sent."""
    sink = tmp_path / "sink"
    vg.configure(run_id="resent", count=3, directory=str(sink))
    _step("resent", 3, text=" padding" * 4000)  # ~32 KB per input: compresses to a small fraction
    vg.shutdown()
    (spool,) = sink.glob("*.jsonl")
    raw_bytes = spool.stat().st_size
    before = _request_bytes(collector)
    done = _resend(
        spool,
        {
            "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": _logs_url(collector),
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{free_port()}",
            "OTEL_EXPORTER_OTLP_COMPRESSION": "none",
            "OTEL_EXPORTER_OTLP_LOGS_COMPRESSION": "gzip",
        },
    )
    assert done.returncode == 0, done.stderr
    assert f"replaying to {_logs_url(collector)} " in done.stderr
    wait_for(lambda: len(_kept(collector, "resent", 3)) == 3, 30, "the resent step's 3 generations in the file")
    sent = _request_bytes(collector) - before
    assert 0 < sent < raw_bytes / 10, (sent, raw_bytes)  # gzip on the wire, not the ~100 KB of protobuf
