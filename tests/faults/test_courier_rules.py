"""User story: the collector is overloaded or slow for a while; the job neither hammers it nor waits for it.

While the endpoint is away the courier sends the spool in the background. A collector that asks
for time (503 or 429 with ``Retry-After``) gets that time before the courier asks again, whatever
the courier's own backoff would say. A collector that answers again, but slower than the flush
timeout, is not given delivery back: the courier keeps sending to it, so the training thread's
calls keep writing the spool and never wait for a slow answer, and every record still arrives.

The endpoint is a real OTLP/HTTP server on loopback; the job is the real library with its real
OTLP/HTTP exporter and courier.
"""

from __future__ import annotations

import gzip
import itertools
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2

import otel_valgen as vg
from otel_valgen import contract
from tests.e2e.harness import Record, records_of_request, wait_for

K = 4
PER_STEP = 12
# The SDK's OTLP/HTTP exporter names itself so; the courier's requests do not.
SDK_USER_AGENT = "OTel-OTLP-Exporter-Python"


@dataclass
class _Hit:
    """One request the endpoint received, and what it answered."""

    arrived: float  # time.monotonic()
    from_sdk: bool  # the job's own export (the SDK's exporter), not the courier
    records: list[Record]
    status: int = 0
    answered: float = 0.0  # time.monotonic() when the answer went out


@dataclass(frozen=True)
class _Answer:
    """How the endpoint answers one request."""

    status: int = 200
    retry_after: str | None = None
    after_s: float = 0.0  # how long it takes to answer


@dataclass
class _Endpoint:
    """An OTLP/HTTP logs endpoint on loopback: ``answer`` decides each answer; every request is kept."""

    answer: Callable[[_Hit], _Answer]
    hits: list[_Hit] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                encoding = self.headers.get("Content-Encoding")
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                request = logs_service_pb2.ExportLogsServiceRequest.FromString(body)
                hit = _Hit(
                    time.monotonic(),
                    self.headers.get("User-Agent", "").startswith(SDK_USER_AGENT),
                    records_of_request(request),
                )
                with endpoint._lock:
                    endpoint.hits.append(hit)
                    answer = endpoint.answer(hit)
                if answer.after_s:
                    time.sleep(answer.after_s)
                with endpoint._lock:
                    hit.status, hit.answered = answer.status, time.monotonic()
                self.send_response(answer.status)
                if answer.retry_after is not None:
                    self.send_header("Retry-After", answer.retry_after)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def courier_requests(self) -> list[_Hit]:
        """The requests that did not come from the SDK's exporter, in order of arrival."""
        with self._lock:
            return [hit for hit in self.hits if not hit.from_sdk]

    def answered_after_the_spool(self) -> bool:
        """Whether a courier request after its last one carrying records has been answered."""
        requests = self.courier_requests()
        lines = [i for i, hit in enumerate(requests) if hit.records]
        return bool(lines) and any(hit.status for hit in requests[lines[-1] + 1 :])

    def received(self) -> set[tuple[object, ...]]:
        """Each accepted record's identity (event, step, sample id): a record delivered twice is one."""
        with self._lock:
            accepted = [record for hit in self.hits if hit.status == 200 for record in hit.records]
        return {(r.event, r.attributes[contract.STEP], r.attributes.get(contract.SAMPLE_ID)) for r in accepted}

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _step(step: int) -> float:
    """One validation step as a block-less call (a complete part); the seconds it held the training thread."""
    ids = [f"s{step}-{i}" for i in range(PER_STEP)]
    started = time.monotonic()
    vg.log_generations([f"q {i}" for i in ids], [f"a {i}" for i in ids], [0.5] * PER_STEP, step=step, sample_ids=ids)
    return time.monotonic() - started


def _spool_sent() -> bool:
    """Records went to the spool and none waits there any more."""
    stats = vg.stats()
    return stats["records_spooled"] > 0 and stats["spool_records_waiting"] == 0


def _handed() -> int:
    """Records the job handed to the SDK (progress records are off in these tests)."""
    stats = vg.stats()
    return stats["generations_emitted"] + stats["start_records_emitted"] + stats["end_records_emitted"]


RETRY_AFTER_S = 3


@pytest.mark.timeout(60)
@pytest.mark.parametrize("status", [503, 429])
def test_the_courier_waits_the_retry_after_the_endpoint_asked_for(status: int) -> None:
    """After a 503 or 429 with Retry-After, the courier asks again no sooner than that, not at its own backoff."""
    refused: list[_Hit] = []

    def answer(hit: _Hit) -> _Answer:
        # Busy until the courier itself was told to wait once, then up.
        if refused:
            return _Answer()
        if not hit.from_sdk:
            refused.append(hit)
        return _Answer(status, str(RETRY_AFTER_S))

    endpoint = _Endpoint(answer)
    try:
        # The courier's own backoff starts at 0.5-1 s: without the Retry-After it would ask again well
        # within the 3 s asked for.
        vg.configure(run_id="retry-after", count=K, endpoint=endpoint.url, flush_timeout_s=0.5, progress_interval_s=0)
        _step(1)
        assert vg.stats()["endpoint_away"] == 1
        wait_for(lambda: vg.stats()["endpoint_away"] == 0, 30, "delivery back to the endpoint")
        assert vg.flush(10)

        requests = endpoint.courier_requests()
        told = [hit for hit in requests if hit.status == status]
        assert told, [(hit.status, hit.from_sdk) for hit in endpoint.hits]
        assert any(hit.from_sdk for hit in endpoint.hits)  # the job's own export is told apart from the courier
        for earlier, later in itertools.pairwise(requests):
            if earlier.status == status:
                waited = later.arrived - earlier.answered
                assert waited >= 0.9 * RETRY_AFTER_S, f"asked again {waited:.2f}s after Retry-After: {RETRY_AFTER_S}"
        assert requests[-1].status == 200
        stats = vg.stats()
        assert (stats["spool_records_waiting"], stats["records_export_failed"], stats["endpoint_outages"]) == (0, 0, 1)
        assert len(endpoint.received()) == _handed()  # nothing lost
    finally:
        endpoint.close()


FLUSH_TIMEOUT_S = 1.0
SLOW_S = 1.5  # the endpoint's answer once it is back: later than the flush timeout


@pytest.mark.timeout(90)
def test_a_slow_endpoint_keeps_being_served_by_the_courier_and_the_training_thread_never_waits_for_it() -> None:
    """Delivery goes back to the endpoint only when its last answer came within the flush timeout.

    An endpoint that answers, but slower than that, keeps being served by the courier; no training-thread
    call waits for it, and every record still arrives.
    """
    mode = ["up"]

    def answer(hit: _Hit) -> _Answer:
        if mode[0] == "down":
            return _Answer(503)
        return _Answer(after_s=SLOW_S if mode[0] == "slow" else 0.0)

    endpoint = _Endpoint(answer)
    try:
        vg.configure(
            run_id="slow-endpoint",
            count=K,
            endpoint=endpoint.url,
            flush_timeout_s=FLUSH_TIMEOUT_S,
            progress_interval_s=0,
        )
        _step(1)  # up: delivered directly
        mode[0] = "down"
        _step(2)  # finds the outage: waits at most the flush timeout, then the records go to the spool
        assert vg.stats()["endpoint_away"] == 1
        outages = vg.stats()["endpoint_outages"]
        mode[0] = "slow"

        # The courier sends the spool to the slow endpoint, then asks it once more (an empty request):
        # answered, but slowly. That is where delivery would go back to the endpoint.
        wait_for(_spool_sent, 30, "the spool sent to the slow endpoint")
        wait_for(
            lambda: endpoint.answered_after_the_spool() or vg.stats()["endpoint_away"] == 0,
            30,
            "the courier's request after the spool answered",
        )
        time.sleep(0.5)  # time for a hand-back to take effect
        away_after_slow_answer = vg.stats()["endpoint_away"]

        # Handed back, the next step end would wait the flush timeout for the slow answer (then go away again).
        blocked = [_step(3), _step(4)]
        assert max(blocked) < 0.75 * FLUSH_TIMEOUT_S, blocked  # the training thread did not wait for the endpoint
        assert away_after_slow_answer == 1  # the slow endpoint was not handed back
        wait_for(lambda: len(endpoint.received()) == _handed(), 30, "every record at the slow endpoint")
        # The courier counts a line delivered once it has read the (slow) answer, a moment after the endpoint sent it.
        wait_for(lambda: vg.stats()["spool_records_waiting"] == 0, 30, "the spool's lines counted delivered")
        stats = vg.stats()
        assert (stats["spool_records_waiting"], stats["records_export_failed"]) == (0, 0), stats
        assert (stats["endpoint_away"], stats["endpoint_outages"]) == (1, outages), stats
    finally:
        endpoint.close()


@pytest.mark.timeout(60)
def test_a_zero_flush_timeout_still_hands_a_prompt_endpoint_back() -> None:
    """flush_timeout_s = 0 (no call waits at all): an endpoint that answers at once gets delivery back.

    The courier's "in time" bound is the delivery's own (at least MIN_ANSWER_WAIT_S), not the raw setting.
    """
    mode = ["down"]
    endpoint = _Endpoint(lambda hit: _Answer(503) if mode[0] == "down" else _Answer())
    try:
        vg.configure(run_id="zero-timeout", count=K, endpoint=endpoint.url, flush_timeout_s=0, progress_interval_s=0)
        _step(1)  # waits for nothing: the outage is found by the export in the background
        wait_for(lambda: vg.stats()["endpoint_away"] == 1, 30, "the outage found")
        mode[0] = "up"
        wait_for(lambda: vg.stats()["endpoint_away"] == 0, 30, "delivery back to a prompt endpoint")
        _step(2)
        assert vg.flush(10)
        assert len(endpoint.received()) == _handed()
    finally:
        endpoint.close()
