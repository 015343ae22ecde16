"""What the real SDK exporters put on the wire, received by real OTLP endpoints on loopback."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import otel_valgen as vg
from otel_valgen import contract
from otel_valgen.cli.main import main
from otel_valgen.otlp_json import to_otlp_json
from otel_valgen.reader import EndRecord, Generation, records_from_request
from otel_valgen.sampling import sample_key, untagged
from tests.conftest import OtlpHttpReceiver


def _records(requests: list[dict]) -> list[Generation | EndRecord]:
    return [r for request in requests for r in records_from_request(request)]  # type: ignore[misc]


def test_otlp_http_carries_event_name_body_attributes_and_trace(otlp_http: OtlpHttpReceiver) -> None:
    """Over OTLP/HTTP each generation arrives with event name, body, attributes and the step's trace id."""
    vg.configure(run_id="wire", count=3, seed=5, endpoint=otlp_http.endpoint)
    with vg.validation(step=11, source="rollouter", sources_expected=1) as block:
        vg.log_generations(
            [f"q{i}" for i in range(10)],
            [f"a{i}" for i in range(10)],
            [i / 10 for i in range(10)],
            ground_truths=["g"] * 10,
        )
    assert block.flushed is True
    raw_logs = [
        log
        for request in otlp_http.json_requests()
        for rl in request["resourceLogs"]
        for sl in rl["scopeLogs"]
        for log in sl["logRecords"]
    ]
    assert {log["eventName"] for log in raw_logs} == {
        contract.EVENT_VALIDATION_START,
        contract.EVENT_GENERATION,
        contract.EVENT_VALIDATION_END,
    }
    assert all(log["severityNumber"] == "SEVERITY_NUMBER_INFO" for log in raw_logs)
    assert {log["traceId"] for log in raw_logs} == {block.trace_id()}
    records = _records(otlp_http.json_requests())
    generations = [r for r in records if isinstance(r, Generation)]
    assert len(generations) == 3
    for generation in generations:
        assert generation.run_id == "wire"
        assert generation.step == 11
        assert generation.sample_key == sample_key(5, generation.sample_id)
        assert generation.ground_truth == "g"
        assert generation.source == "rollouter"
        assert generation.sample_count == 3
        assert generation.output == "a" + generation.input[1:]
    (end,) = [r for r in records if isinstance(r, EndRecord)]
    assert (end.seen, end.emitted, end.sources_expected) == (10, 3, 1)
    resource = otlp_http.json_requests()[0]["resourceLogs"][0]["resource"]
    keys = {a["key"] for a in resource["attributes"]}
    assert {"service.name", "service.instance.id"} <= keys


def test_otlp_endpoint_from_the_environment(otlp_http: OtlpHttpReceiver, monkeypatch: pytest.MonkeyPatch) -> None:
    """OTEL_EXPORTER_OTLP_ENDPOINT alone routes records to the collector, /v1/logs appended."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp_http.endpoint)
    monkeypatch.setenv("OTEL_VALGEN_RUN_ID", "env-run")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "my-trainer")
    vg.log_generations(["q"], ["a"], [1.0], step=1)
    assert vg.end_step(1) is True
    request = otlp_http.json_requests()[0]
    resource = {a["key"]: a["value"].get("stringValue") for a in request["resourceLogs"][0]["resource"]["attributes"]}
    assert resource["service.name"] == "my-trainer"
    assert any(isinstance(r, Generation) and r.run_id == "env-run" for r in _records(otlp_http.json_requests()))


def test_otlp_grpc_protocol(otlp_grpc: tuple[str, object], monkeypatch: pytest.MonkeyPatch) -> None:
    """With OTEL_EXPORTER_OTLP_PROTOCOL=grpc the SDK's gRPC exporter delivers the records."""
    endpoint, service = otlp_grpc
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    vg.configure(run_id="g", count=2, endpoint=endpoint)
    with vg.validation(step=2):
        vg.log_generations(["a", "b", "c"], ["x", "y", "z"], [1, 2, 3])
    requests = [to_otlp_json(r) for r in service.requests]  # type: ignore[attr-defined]
    records = _records(requests)
    assert sum(isinstance(r, Generation) for r in records) == 2
    assert sum(isinstance(r, EndRecord) for r in records) == 1


def test_unreachable_collector_never_blocks_longer_than_the_flush_timeout() -> None:
    """With nothing listening, the end of a step returns within the bound and counts the failure."""
    vg.configure(run_id="r", count=2, endpoint="http://127.0.0.1:9", flush_timeout_s=1.0)
    started = time.monotonic()
    with vg.validation(step=1) as block:
        vg.log_generations(["a"], ["b"], [1.0])
    elapsed = time.monotonic() - started
    assert block.flushed is False
    assert elapsed < 3.0
    stats = vg.stats()
    assert stats["records_exported"] == 0
    # Counted as an outage, whichever came first: the refused connection or the flush's bound.
    assert (stats["endpoint_outages"], stats["endpoint_away"]) == (1, True)


def test_collector_errors_are_counted_and_the_records_kept() -> None:
    """A collector answering 4xx: the records are counted as spooled (or failed), never silently lost."""
    receiver = OtlpHttpReceiver(status=400)
    receiver.thread.start()
    try:
        vg.configure(run_id="r", count=2, endpoint=receiver.endpoint)
        with vg.validation(step=1) as block:
            vg.log_generations(["a", "b"], ["c", "d"], [1, 2])
        assert block.flushed is False
        stats = vg.stats()
        assert stats["records_spooled"] == 4  # two generations, the start and the end record
        assert stats["records_exported"] == 0
    finally:
        receiver.server.shutdown()
        receiver.server.server_close()


def test_records_the_collector_did_not_accept_are_spooled_and_resent(tmp_path: Path) -> None:
    """Collector down: records land in the spool (counted), and `otel-valgen resend` delivers them later."""
    vg.configure(run_id="spool", count=3, endpoint="http://127.0.0.1:9", directory=str(tmp_path), flush_timeout_s=30)
    with vg.validation(step=1, source="s") as block:
        vg.log_generations([f"q{i}" for i in range(10)], ["a"] * 10, [1.0] * 10)
    assert block.flushed is False
    stats = vg.stats()
    assert (stats["records_spooled"], stats["records_export_failed"], stats["records_unconfirmed"]) == (5, 0, 0)
    spooled = list((tmp_path / "spool").glob("*.jsonl"))
    assert len(spooled) == 1
    receiver = OtlpHttpReceiver()
    receiver.thread.start()
    try:
        result = CliRunner().invoke(main, ["resend", str(tmp_path / "spool"), "--endpoint", receiver.endpoint])
        assert result.exit_code == 0, result.output
        records = _records(receiver.json_requests())
        assert sum(isinstance(r, Generation) for r in records) == 3
        (end,) = [r for r in records if isinstance(r, EndRecord)]
        assert (end.seen, end.emitted) == (10, 3)
        assert {r.trace_id for r in records if isinstance(r, Generation)} == {block.trace_id()}
        again = CliRunner().invoke(main, ["resend", str(tmp_path / "spool"), "--endpoint", receiver.endpoint])
        assert again.exit_code == 0
        assert len(_records(receiver.json_requests())) == len(records)  # nothing sent twice
    finally:
        receiver.server.shutdown()
        receiver.server.server_close()


def test_spool_can_be_turned_off(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """With OTEL_VALGEN_SPOOL=false undeliverable records are counted as failed, not written."""
    monkeypatch.setenv("OTEL_VALGEN_SPOOL", "false")
    vg.configure(run_id="nospool", count=3, endpoint="http://127.0.0.1:9", directory=str(tmp_path), flush_timeout_s=30)
    with vg.validation(step=1):
        vg.log_generations(["q"], ["a"], [1.0])
    assert vg.stats()["records_export_failed"] == 3  # start, generation, end
    assert not (tmp_path / "spool").exists()


@pytest.mark.parametrize("seed", [2**63, 2**64 - 1, 2**64 + 7, -1, -(2**63), -(2**64) - 3])
def test_any_accepted_seed_gives_records_that_encode_and_export(otlp_http: OtlpHttpReceiver, seed: int) -> None:
    """A seed of 2^63 and more, or a negative one, travels as its 64 bits read as int64 and keys by seed mod 2^64."""
    settings = vg.configure(run_id="seed", count=3, seed=seed, endpoint=otlp_http.endpoint, progress_interval_s=0)
    assert settings is not None
    assert settings.seed == seed  # accepted as given
    with vg.validation(step=2, source="s", sources_expected=1) as block:
        vg.log_generations([f"q{i}" for i in range(8)], ["a"] * 8, None, sample_ids=["u"] * 4 + ["v"] * 4)
    assert block.flushed is True
    assert vg.stats()["records_export_failed"] == 0
    unsigned = seed % 2**64
    generations = [r for r in _records(otlp_http.json_requests()) if isinstance(r, Generation)]
    assert len(generations) == 3
    for generation in generations:
        assert generation.seed is not None
        assert generation.seed % 2**64 == unsigned
        assert -(2**63) <= generation.seed < 2**63
        assert generation.sample_key == sample_key(unsigned, generation.sample_id)
    ids = [f"{uid}/{i}" for uid in "uv" for i in range(4)]
    expected = sorted(ids, key=lambda sample_id: (sample_key(unsigned, sample_id), sample_id))[:3]
    assert sorted(untagged(g.sample_id) for g in generations) == sorted(expected)
