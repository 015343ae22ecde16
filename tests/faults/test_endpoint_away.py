"""User story: the collector goes away during a job and comes back; the training loop never waits for it.

The built collector (shipped config) is SIGKILLed in the middle of a step and started again on
its ports and state folder while the job goes on. The job waits for it once (at most the flush
timeout), then its records go to the spool and no step end waits; when the collector is back
the spool is sent by itself, in order: every step arrives once, exact, at every destination,
with no ``otel-valgen resend``. The job's log says it once each way. A spool that outlives its
process is sent by the next process of the same run, and only by that run's.
"""

from __future__ import annotations

import gzip
import logging
import os
import subprocess
import sys
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2

import otel_valgen as vg
from otel_valgen import contract
from otel_valgen.sampling import SortKey, bottom_k, sample_key, untagged
from tests.e2e.harness import Record, StandIn, free_port, records_of_request, wait_for
from tests.e2e.steps import by_step
from tests.faults.conftest import Collectors, file_records

RUN_ID = "faults-away"
K = 4
SEED = 42
PER_STEP = 12
FLUSH_TIMEOUT_S = 1.0


def _ids(run: str, step: int) -> list[str]:
    return [f"{run}-{step}-{i}" for i in range(PER_STEP)]


def _step(step: int, *, between: object = None) -> float:
    """One validation step of PER_STEP generations; the seconds its end blocked the training thread."""
    with vg.validation(step=step, source="trainer", sources_expected=1):
        ids = _ids(RUN_ID, step)
        vg.log_generations([f"q {i}" for i in ids], [f"a {i}" for i in ids], [0.5] * len(ids), sample_ids=ids)
        if callable(between):
            between()
        started = time.monotonic()
    return time.monotonic() - started


def _bottom_k(ids: list[str]) -> list[str]:
    full = [f"{i}/0" for i in ids]
    return [i for _, i in bottom_k(((SortKey.of(sample_key(SEED, i), i), i) for i in full), K)]


def _assert_each_step_once(name: str, records: list[Record], run: str, steps: list[int]) -> None:
    kept, summaries = by_step([r for r in records if r.attributes.get(contract.RUN_ID) == run])
    for step in steps:
        ranked = sorted(kept[step], key=lambda r: r.attributes[contract.RANK])
        got = [untagged(r.attributes[contract.SAMPLE_ID]) for r in ranked]
        assert got == _bottom_k(_ids(run, step)), f"{name} step {step}"
        assert len(summaries[step]) == 1, f"{name} step {step}: {len(summaries[step])} summaries"
        assert summaries[step][0].attributes[contract.CLOSED_REASON] == "complete", f"{name} step {step}"


def _env(wandb: StandIn, loki: StandIn) -> dict[str, str]:
    return {
        "VALGEN_TRACKER_EXPORTER_ENDPOINT": wandb.endpoint,
        "VALGEN_LOKI_OTLP_ENDPOINT": loki.endpoint,
        "VALGEN_DECISION_WAIT": "2s",
    }


@pytest.mark.timeout(120)
def test_a_collector_killed_and_restarted_mid_job_gets_every_step_once_without_resend(
    collectors: Collectors,
    wandb_stand_in: StandIn,
    loki_stand_in: StandIn,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Waited for once, then spooled without waiting; back: sent by itself, every step once and exact."""
    collector = collectors.start("c", _env(wandb_stand_in, loki_stand_in))
    vg.configure(
        run_id=RUN_ID, count=K, seed=SEED, endpoint=f"http://{collector.http_endpoint}", flush_timeout_s=FLUSH_TIMEOUT_S
    )
    caplog.set_level(logging.INFO)
    blocked = [_step(1), _step(2)]

    def kill() -> None:
        # The exporters' persistent queues deliver at least once: a SIGKILL between a 2xx and the
        # queue's delete sends a batch again (docs/reliability.md). This test is about the emitter's
        # side, so steps 1 and 2 leave the queues first.
        for stand_in in (wandb_stand_in, loki_stand_in):
            wait_for(lambda s=stand_in: {1, 2} <= set(by_step(s.records())[1]), 20, "steps 1-2 delivered")
        time.sleep(1.0)
        Collectors.kill(collector)

    blocked.append(_step(3, between=kill))  # killed mid-step
    blocked += [_step(4), _step(5)]
    assert vg.stats()["endpoint_away"] == 1
    assert vg.stats()["spool_records_waiting"] > 0
    collector = collectors.start("c", _env(wandb_stand_in, loki_stand_in))  # same ports and state folder
    wait_for(lambda: vg.stats()["endpoint_away"] == 0, 60, "the courier found the collector back")
    blocked += [_step(6), _step(7)]
    assert vg.flush(10)

    # The first step end of the outage waited at most the flush timeout; the next ones did not wait.
    assert blocked[2] <= FLUSH_TIMEOUT_S + 0.5, blocked
    assert max(blocked[3:5]) < FLUSH_TIMEOUT_S / 2, blocked
    stats = vg.stats()
    assert stats["records_resent"] == stats["records_spooled"] > 0, stats
    assert (stats["spool_records_waiting"], stats["endpoint_outages"], stats["records_export_failed"]) == (0, 1, 0)

    steps = list(range(1, 8))
    destinations = {
        "file": lambda: file_records(collector.file_path),
        "wandb": wandb_stand_in.records,
        "loki": loki_stand_in.records,
    }
    for name, records in destinations.items():
        wait_for(lambda r=records: set(steps) <= set(by_step(r())[1]), 30, f"{name}: every summary")
        _assert_each_step_once(name, records(), RUN_ID, steps)

    # Quiet and clear: one WARNING going away, one INFO coming back, no SDK retry line.
    ours = [r for r in caplog.records if r.name == "otel_valgen" and r.levelno >= logging.INFO]
    away = [r for r in ours if "is not answering" in r.getMessage()]
    back = [r for r in ours if "answers again" in r.getMessage()]
    assert [(r.levelname, len(away), len(back)) for r in away] == [("WARNING", 1, 1)], [r.getMessage() for r in ours]
    assert back[0].levelname == "INFO"
    sdk = [r.getMessage() for r in caplog.records if r.name.startswith("opentelemetry") and r.levelno >= logging.INFO]
    assert sdk == []
    vg.shutdown()
    assert list((tmp_path / "sink" / "spool").glob("*.jsonl")) == []  # sent in full: removed at shutdown


_JOB = textwrap.dedent(
    """
    import sys, time
    import otel_valgen as vg

    run, endpoint, steps, wait = sys.argv[1], sys.argv[2], sys.argv[3].split(","), float(sys.argv[4])
    vg.configure(run_id=run, count={k}, seed={seed}, endpoint=endpoint, flush_timeout_s=1)
    for step in steps:
        ids = [f"{{run}}-{{step}}-{{i}}" for i in range({per_step})]
        with vg.validation(step=int(step), source="trainer", sources_expected=1):
            vg.log_generations([f"q {{i}}" for i in ids], [f"a {{i}}" for i in ids], [0.5] * len(ids), sample_ids=ids)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and vg.stats()["spool_records_waiting"]:
        time.sleep(0.1)
    print(vg.stats()["spool_records_waiting"], vg.stats()["records_resent"])
    """
).format(k=K, seed=SEED, per_step=PER_STEP)


def _job(run: str, endpoint: str, steps: str, directory: Path, wait_s: float = 0.0) -> tuple[int, int]:
    """A job as a process of its own, in ``directory``; (records still waiting in spools, records it resent)."""
    env = {**os.environ, "OTEL_VALGEN_DIR": str(directory)}
    done = subprocess.run(
        [sys.executable, "-c", _JOB, run, endpoint, steps, str(wait_s)],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    waiting, resent = done.stdout.split()
    return int(waiting), int(resent)


@pytest.mark.timeout(150)
def test_a_spool_left_by_an_ended_process_is_sent_by_the_next_process_of_the_same_run(
    collectors: Collectors, wandb_stand_in: StandIn, loki_stand_in: StandIn, tmp_path: Path
) -> None:
    """The job ends during the outage; another run's process leaves its spool alone; the run's next one sends it."""
    collector = collectors.start("c", _env(wandb_stand_in, loki_stand_in))
    endpoint = f"http://{collector.http_endpoint}"
    assert collector.stop() == 0
    shared = tmp_path / "valgen"
    waiting, _ = _job("run-a", endpoint, "1,2", shared)  # ends while the collector is away
    assert waiting > 0
    (left,) = (shared / "spool").glob("*.jsonl")

    collector = collectors.start("c", _env(wandb_stand_in, loki_stand_in))
    assert _job("run-b", endpoint, "1", shared, wait_s=3) == (0, 0)  # not its run: not its spool to send
    assert left.exists()
    assert _job("run-a", endpoint, "3", shared, wait_s=30)[0] == 0
    assert not left.exists()  # sent in full, then removed

    records = lambda: file_records(collector.file_path)  # noqa: E731
    wait_for(lambda: {1, 2, 3} <= set(by_step([r for r in records() if _run(r) == "run-a"])[1]), 30, "run-a's steps")
    _assert_each_step_once("file", records(), "run-a", [1, 2, 3])
    _assert_each_step_once("file", records(), "run-b", [1])


def _run(record: Record) -> str:
    return str(record.attributes.get(contract.RUN_ID))


@pytest.mark.timeout(60)
def test_a_full_spool_counts_and_names_what_it_could_not_hold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """OTEL_VALGEN_SPOOL_MAX_MB bounds the file; what does not fit is dropped.spool_full, warned with the fix."""
    monkeypatch.setenv("OTEL_VALGEN_SPOOL_MAX_MB", "1")
    vg.configure(run_id="faults-full", endpoint=f"http://127.0.0.1:{free_port()}", presample=False, flush_timeout_s=0.5)
    for step in (1, 2, 3):
        with vg.validation(step=step, source="trainer"):
            vg.log_generations([f"p{step}-{i}" for i in range(200)], ["x" * 4000] * 200)
    vg.shutdown()
    stats = vg.stats()
    handed = stats["generations_emitted"] + stats["start_records_emitted"] + stats["end_records_emitted"]
    handed += stats.get("progress_records_emitted", 0)
    full = stats.get("dropped.spool_full", 0)
    assert full > 0, stats
    assert stats["records_export_failed"] == full, stats  # lost for that reason only
    assert stats["records_spooled"] + full == handed, stats  # every record spooled or counted
    (spool,) = (tmp_path / "sink" / "spool").glob("*.jsonl")
    assert spool.stat().st_size < 2 * 1024 * 1024  # the bound, passed by one batch at most
    warned = [r.getMessage() for r in caplog.records if "[spool_full #" in r.getMessage()]
    assert warned
    assert "OTEL_VALGEN_SPOOL_MAX_MB" in warned[0]


class _FlappingEndpoint:
    """An OTLP/HTTP endpoint that answers 503 while ``down`` and keeps every record it accepts."""

    def __init__(self) -> None:
        self.down = False
        self.records: list[Record] = []
        self._lock = threading.Lock()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if endpoint.down:
                    self.send_response(503)
                else:
                    if self.headers.get("Content-Encoding") == "gzip":
                        body = gzip.decompress(body)
                    request = logs_service_pb2.ExportLogsServiceRequest.FromString(body)
                    with endpoint._lock:
                        endpoint.records += records_of_request(request)
                    self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def received(self) -> set[tuple[object, ...]]:
        """Each record's identity: event, step, sample id."""
        with self._lock:
            return {(r.event, r.attributes[contract.STEP], r.attributes.get(contract.SAMPLE_ID)) for r in self.records}

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.mark.timeout(90)
def test_an_endpoint_that_comes_and_goes_gets_every_record_and_no_spool_line_is_left_behind() -> None:
    """Down and up every 0.3 s during 30 steps: the hand-overs between spool and endpoint strand nothing."""
    endpoint = _FlappingEndpoint()
    try:
        vg.configure(run_id="flapping", count=K, endpoint=endpoint.url, flush_timeout_s=0.5, progress_interval_s=0)
        stop = threading.Event()

        def flap() -> None:
            while not stop.wait(0.3):
                endpoint.down = not endpoint.down

        flapper = threading.Thread(target=flap, daemon=True)
        flapper.start()
        for step in range(1, 31):
            with vg.validation(step=step, source="trainer"):
                vg.log_generations([f"q{step}-{i}" for i in range(PER_STEP)], ["a"] * PER_STEP)
            time.sleep(0.15)  # the training step between validations
        stop.set()
        flapper.join()
        endpoint.down = False
        wait_for(lambda: vg.stats()["endpoint_away"] == 0, 30, "delivery back to the endpoint")
        assert vg.flush(10)
        stats = vg.stats()
        handed = stats["generations_emitted"] + stats["start_records_emitted"] + stats["end_records_emitted"]
        assert stats["endpoint_outages"] >= 1, stats
        assert (stats["spool_records_waiting"], stats["records_export_failed"]) == (0, 0), stats
        assert len(endpoint.received()) == handed  # each record at least once, none missing
    finally:
        endpoint.close()
