"""Benchmark: what a failing OTLP endpoint costs the training thread, and what it loses.

For each of eight failure modes of the endpoint, a fresh job process runs
``vg.configure(run_id=..., count=8, endpoint=...)`` with ``OTEL_VALGEN_ROLLOUT_COUNT=2``, its
own ``OTEL_VALGEN_DIR`` and every other setting at its default (inherited ``OTEL_*`` variables
are removed). A training step is one ``with vg.validation(step=s)`` block around
``vg.log_generations`` of 200 generations, then ``vg.log_rollouts`` of 16 rollouts (4 prompts
x 4 responses). The job runs ``--baseline-steps`` steps with the endpoint healthy, then
``--steps`` steps during the fault; then the endpoint recovers and the job waits until
``stats()["spool_records_waiting"]`` is 0 and the endpoint holds every record, then calls
``vg.shutdown()``.

Modes 1-7 talk to an OTLP/HTTP server of this benchmark, run in the parent process (so that
its threads do not share the job's interpreter), which decodes each POST /v1/logs (protobuf,
gzip or deflate) and keeps the records it accepted. At the start of every fault it drops the
connections it holds (as a restarted or reconfigured server would), so a pooled keep-alive
connection cannot hide the fault:

1. refused: the listening socket is closed; recovery listens again on the same port.
2. silent: connections are accepted and requests read, never answered; at recovery the hung
   connections are closed unanswered and the server answers again.
3. slow: every request is answered 200 (and its records kept) after 5 s.
4. 503: ``503 Service Unavailable`` with ``Retry-After: 2``.
5. 429: ``429 Too Many Requests`` without ``Retry-After`` (mode 4 covers the header; this one
   the courier's own backoff).
6. dns: the endpoint is ``http://valgen-collector.invalid:<port>``. During the baseline the job's
   ``socket.getaddrinfo`` answers 127.0.0.1 for that name (a DNS entry that exists); from the
   fault on, the machine's real resolver is asked, which cannot resolve ``.invalid``. No
   recovery: the job ends with its spool, and "drain" is the time a new process of the same
   run (same ``run_id`` and ``OTEL_VALGEN_DIR``, an endpoint that works) takes from its
   ``configure`` until the server holds everything the first process emitted.
7. tls: an https endpoint, the job trusting a CA of ours (``OTEL_EXPORTER_OTLP_CERTIFICATE``);
   during the fault the server presents a self-signed certificate the job does not trust
   (a botched certificate rotation); recovery presents the CA-signed one again.
   ``REQUESTS_CA_BUNDLE`` / ``CURL_CA_BUNDLE`` stay as the machine has them: the library's
   exporter trusts the OTLP certificate over them (before, it did not, and the endpoint flapped).
8. collector-kill: the real collector (``build/otelcol-valgen``, ``collector.yaml``, launched by
   ``tests/e2e/harness.py`` with stand-ins for wandb and Loki, ``VALGEN_DECISION_WAIT=2s``) is
   SIGKILLed inside the first fault step's block (after the baseline reached its file output)
   and launched again ``--outage`` (30) seconds later on the same ports and state directory.

Figures per mode: the training thread's time per step (both calls) over the median of the
baseline steps, for the first fault step and the later ones (p50, p99); records lost: the
records the job handed to the SDK (seen by a log record processor added to the job's
provider; identified by event, kind, step, source, sample id and timestamp) that the endpoint
never received (mode 8: the kept generations the collector's file output lacks); the spool at
the end of the fault (records and bytes of ``<OTEL_VALGEN_DIR>/spool/*.jsonl``); time to drain
from recovery until the spool was empty and the endpoint held everything; log lines at
WARNING and above of ``otel_valgen`` and of the OTel SDK (``opentelemetry``), with
``otel_valgen``'s INFO lines. Counters missing from ``vg.stats()`` count as 0.

Run: ``python bench/endpoint_failures_bench.py [--steps 20] [--only refused,tls,8]`` (mode 8
needs ``make collector``; with a non-blocking core, about 3 minutes on 2 cores, 30 s of it
mode 8's outage).
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import math
import os
import queue
import shutil
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any, Final, Protocol

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's otel_valgen and tests

from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.sdk._logs import LogRecordProcessor, ReadWriteLogRecord

import otel_valgen as vg
from otel_valgen import _process, contract
from tests.e2e import harness
from tests.support.ports import free_port

K: Final = 8
GENERATIONS: Final = 200
ROLLOUT_PROMPTS: Final = 4
RESPONSES: Final = 4
SLOW_ANSWER_S: Final = 5.0
RETRY_AFTER_S: Final = "2"
DNS_HOST: Final = "valgen-collector.invalid"
PREFIX: Final = "@@bench "
POLL_S: Final = 0.02
CA_NAME: Final = "valgen bench CA"

Identity = tuple[str, str, int, str, str, int]
"""A record: event name, kind, step, source, sample id, timestamp (ns)."""


@dataclass(frozen=True)
class Mode:
    """One failure mode of the endpoint."""

    number: int
    name: str
    title: str


MODES: Final = (
    Mode(1, "refused", "connection refused (nothing listens)"),
    Mode(2, "silent", "accepts TCP, never answers"),
    Mode(3, "slow", "answers 200 after 5 s"),
    Mode(4, "503", "503, Retry-After: 2"),
    Mode(5, "429", "429, no Retry-After"),
    Mode(6, "dns", "host name does not resolve"),
    Mode(7, "tls", "TLS: untrusted server certificate"),
    Mode(8, "collector-kill", "collector SIGKILLed mid-step, back after the outage"),
)


class BenchError(Exception):
    """A mode could not be measured (the job died, a timeout, a missing tool)."""


# -- identities ------------------------------------------------------------------------------


def _as_int(value: object) -> int:
    return value if isinstance(value, int) else -1


def _identity(event: str, attributes: dict[str, Any], timestamp: int) -> Identity:
    """A record's identity from its event name, attribute values and timestamp."""
    return (
        event,
        str(attributes.get(contract.KIND) or contract.KIND_VALIDATION),
        _as_int(attributes.get(contract.STEP)),
        str(attributes.get(contract.SOURCE, "")),
        str(attributes.get(contract.SAMPLE_ID, "")),
        timestamp,
    )


def _generation_key(identity: Identity) -> Identity:
    """What of a generation the collector's output keeps comparable: kind, step, sample id."""
    return (contract.EVENT_GENERATION, identity[1], identity[2], "", identity[4], 0)


def _identities(raw: Iterable[Sequence[Any]]) -> frozenset[Identity]:
    """Identities sent as JSON lists."""
    return frozenset((str(a), str(b), int(c), str(d), str(e), int(f)) for a, b, c, d, e, f in raw)


@dataclass(frozen=True)
class Expected:
    """What the endpoint must hold: these identities, or (no tap in the job) this many records."""

    identities: frozenset[Identity]
    count: int

    def missing(self, received: set[Identity]) -> int:
        """How many expected records ``received`` lacks (by count alone without identities)."""
        if self.identities:
            return len(self.identities - received)
        return max(0, self.count - len(received))


def _handed(stats: dict[str, int]) -> int:
    """Records the job handed to the SDK, by its counters."""
    names = ("generations_emitted", "start_records_emitted", "end_records_emitted", "progress_records_emitted")
    return sum(stats.get(name, 0) for name in names)


# -- the job (child process) -----------------------------------------------------------------


class _Tap(LogRecordProcessor):
    """Notes every record the job hands to the SDK (a processor beside the library's own)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: list[Identity] = []
        self.installed = False

    def on_emit(self, log_record: ReadWriteLogRecord) -> None:
        """Note the record's identity."""
        record = log_record.log_record
        identity = _identity(record.event_name or "", dict(record.attributes or {}), int(record.timestamp or 0))
        with self._lock:
            self._seen.append(identity)

    def identities(self) -> list[Identity]:
        """Everything noted so far."""
        with self._lock:
            return list(self._seen)

    def shutdown(self) -> None:
        """Nothing to release."""

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Nothing is buffered."""
        return True


def _install_tap() -> _Tap:
    """Add the tap to the configured emitter's provider; an uninstalled tap if the layout changed."""
    tap = _Tap()
    emitter = _process.current_emitter()
    provider = getattr(getattr(emitter, "pipeline", None), "provider", None)
    add = getattr(provider, "add_log_record_processor", None)
    if callable(add):
        add(tap)
        tap.installed = True
    return tap


class _LogCapture(logging.Handler):
    """Keeps otel_valgen's and the SDK's lines (INFO and up) and any other WARNING+ line."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[tuple[str, int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        """Keep the line."""
        try:
            message = record.getMessage()
        except Exception:  # a bad format string still counts as a line
            message = str(record.msg)
        self.lines.append((record.name, record.levelno, message[:500]))


def _capture_logs() -> _LogCapture:
    capture = _LogCapture()
    logging.getLogger().addHandler(capture)
    for name in ("otel_valgen", "opentelemetry"):
        logging.getLogger(name).setLevel(logging.INFO)
    return capture


def _say(event: str, **fields: Any) -> None:
    print(PREFIX + json.dumps({"event": event, **fields}), flush=True)


def _ask(event: str, **fields: Any) -> dict[str, Any]:
    """Tell the parent, and wait for its answer."""
    _say(event, **fields)
    line = sys.stdin.readline()
    if not line:
        raise SystemExit("the benchmark's parent went away")
    answer: dict[str, Any] = json.loads(line)
    return answer


def _resolve_until(broken: threading.Event, host: str) -> None:
    """Resolve ``host`` to 127.0.0.1 until ``broken`` is set; after that the real resolver answers."""
    real = socket.getaddrinfo

    def getaddrinfo(name: Any, *args: Any, **kwargs: Any) -> Any:
        if name == host and not broken.is_set():
            return real("127.0.0.1", *args, **kwargs)
        return real(name, *args, **kwargs)

    socket.getaddrinfo = getaddrinfo  # type: ignore[assignment]


@dataclass(frozen=True)
class StepData:
    """One training step's arguments, built before the step is timed."""

    prompts: list[str]
    outputs: list[str]
    scores: list[float]
    rollout_prompts: list[str]
    responses: list[str]
    rewards: list[float]
    prompt_ids: list[str]


def _step_data(step: int) -> StepData:
    """The same 200 validation prompts at every step, new training prompts at every step."""
    prompts = [f"Problem {i}: what is {i} times {i + 1}? " + "Show the work. " * 8 for i in range(GENERATIONS)]
    outputs = [f"Step {step}: {i} x {i + 1} = {i * (i + 1)}, " + "as the work shows. " * 24 for i in range(GENERATIONS)]
    scores = [((i * 7 + step) % 10) / 10 for i in range(GENERATIONS)]
    ids = [f"s{step}-q{j}" for j in range(ROLLOUT_PROMPTS) for _ in range(RESPONSES)]
    return StepData(
        prompts=prompts,
        outputs=outputs,
        scores=scores,
        rollout_prompts=[f"Training prompt {pid}: " + "solve it. " * 20 for pid in ids],
        responses=[f"Response {n} to {pid}: " + "thinking... " * 30 for n, pid in enumerate(ids)],
        rewards=[float(n % 2) for n in range(len(ids))],
        prompt_ids=ids,
    )


def _run_step(step: int, inside: Callable[[], float] | None = None) -> float:
    """Milliseconds the training thread spent in one step's calls (``inside``'s own seconds left out)."""
    data = _step_data(step)
    paused = 0.0
    started = time.perf_counter()
    with vg.validation(step=step):
        vg.log_generations(data.prompts, data.outputs, data.scores)
        if inside is not None:
            paused = inside()
    vg.log_rollouts(data.rollout_prompts, data.responses, data.rewards, step=step, prompt_ids=data.prompt_ids)
    return (time.perf_counter() - started - paused) * 1000


def _ask_mid() -> float:
    """Tell the parent the job is inside a step (it kills the collector then); seconds that took."""
    started = time.perf_counter()
    _ask("mid")
    return time.perf_counter() - started


def _records_in_line(line: bytes) -> int:
    try:
        request = json.loads(line)
    except ValueError:
        return 0
    resources = request.get("resourceLogs", []) if isinstance(request, dict) else []
    return sum(len(scope.get("logRecords", [])) for resource in resources for scope in resource.get("scopeLogs", []))


def _spool_on_disk(directory: Path) -> tuple[int, int]:
    """Records and bytes in the spool files under ``directory``."""
    records = size = 0
    for path in sorted((directory / "spool").glob("*.jsonl")):
        data = path.read_bytes()
        size += len(data)
        records += sum(_records_in_line(line) for line in data.split(b"\n") if line.strip())
    return records, size


def _wait_drained(timeout_s: float) -> float | None:
    """When the job's spool became empty with nothing unconfirmed (monotonic); None on timeout or no such counter."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        stats = vg.stats()
        if "spool_records_waiting" not in stats:  # a core without a courier: nothing empties the spool
            return None
        if stats.get("spool_records_waiting", 0) == 0 and stats.get("records_unconfirmed", 0) == 0:
            return time.monotonic()
        time.sleep(POLL_S)
    return None


def _child_drain(capture: _LogCapture, configured_at: float) -> None:
    """Mode 6's second process: wait until the parent saw the spool delivered, then end."""
    _ask("started", t=configured_at)
    stats = vg.stats()
    started = time.perf_counter()
    vg.shutdown()
    _say("done", stats=stats, logs=capture.lines, shutdown_s=time.perf_counter() - started, emitted=[], tap=False)


def _child(args: argparse.Namespace) -> None:
    """The job: baseline steps, fault steps, wait for the drain, shut down; reports to the parent."""
    capture = _capture_logs()
    broken = threading.Event()
    if args.child == "dns":
        _resolve_until(broken, DNS_HOST)
    configured_at = time.monotonic()
    vg.configure(run_id=args.run_id, count=K, endpoint=args.endpoint)
    if args.child == "dns-drain":
        _child_drain(capture, configured_at)
        return
    tap = _install_tap()
    baseline = [_run_step(step) for step in range(1, args.baseline_steps + 1)]
    _ask("baseline_done", steps_ms=baseline, emitted=tap.identities(), log_index=len(capture.lines))
    broken.set()
    fault: list[float] = []
    ends: list[float] = []
    for index, step in enumerate(range(args.baseline_steps + 1, args.baseline_steps + 1 + args.steps)):
        fault.append(_run_step(step, _ask_mid if args.child == "collector-kill" and index == 0 else None))
        ends.append(time.monotonic())
    records, size = _spool_on_disk(Path(os.environ["OTEL_VALGEN_DIR"]))
    answer = _ask(
        "fault_end", steps_ms=fault, step_ends=ends, spool_records=records, spool_bytes=size, stats=vg.stats()
    )
    if answer.get("recovered"):
        drained = _wait_drained(args.drain_timeout)
        _ask("drained", t=drained, emitted=tap.identities(), stats=vg.stats())
    started = time.perf_counter()
    vg.shutdown()
    shutdown_s = time.perf_counter() - started
    _say(
        "done", shutdown_s=shutdown_s, stats=vg.stats(), emitted=tap.identities(), logs=capture.lines, tap=tap.installed
    )


# -- the endpoint of modes 1-7 (parent process) -----------------------------------------------


class Received:
    """The records an endpoint accepted, per run: unique identities and the total with repeats."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._unique: dict[str, set[Identity]] = {}
        self._total: Counter[str] = Counter()

    def add(self, request: logs_service_pb2.ExportLogsServiceRequest) -> None:
        """Keep every record of ``request``."""
        for resource_logs in request.resource_logs:
            for scope_logs in resource_logs.scope_logs:
                for record in scope_logs.log_records:
                    attributes = {kv.key: _proto_value(kv.value) for kv in record.attributes}
                    run = str(attributes.get(contract.RUN_ID, ""))
                    identity = _identity(record.event_name, attributes, record.time_unix_nano)
                    with self._lock:
                        self._unique.setdefault(run, set()).add(identity)
                        self._total[run] += 1

    def unique(self, run: str) -> set[Identity]:
        """The distinct records of ``run`` received so far."""
        with self._lock:
            return set(self._unique.get(run, ()))

    def total(self, run: str) -> int:
        """Records of ``run`` received, repeats included."""
        with self._lock:
            return self._total[run]


def _proto_value(value: Any) -> object:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind in ("string_value", "int_value", "double_value", "bool_value") else None


def _decoded(body: bytes, encoding: str) -> logs_service_pb2.ExportLogsServiceRequest:
    """The export request of a POST body (gzip or deflate per Content-Encoding)."""
    if encoding == "gzip":
        body = gzip.decompress(body)
    elif encoding == "deflate":
        body = zlib.decompress(body)
    request = logs_service_pb2.ExportLogsServiceRequest()
    request.ParseFromString(body)
    return request


class _Handler(BaseHTTPRequestHandler):
    """OTLP/HTTP logs, behaving as the endpoint's current fault says."""

    protocol_version = "HTTP/1.1"
    server: _Server

    def setup(self) -> None:
        if isinstance(self.request, ssl.SSLSocket):  # the handshake, off the accepting thread
            self.request.settimeout(10)
            self.request.do_handshake()
            self.request.settimeout(None)
        super().setup()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: one line per request would drown the table."""

    def do_POST(self) -> None:
        """Answer an export request."""
        endpoint = self.server.endpoint
        behaviour = endpoint.behaviour
        if behaviour == "hang":
            endpoint.released.wait()
            self.close_connection = True  # closed unanswered
            return
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if behaviour in ("503", "429"):
            self._answer(int(behaviour), b"", {"Retry-After": RETRY_AFTER_S} if behaviour == "503" else {})
            return
        if behaviour == "slow":
            time.sleep(SLOW_ANSWER_S)
        if self.path != "/v1/logs" or "protobuf" not in (self.headers.get("Content-Type") or ""):
            self._answer(404 if self.path != "/v1/logs" else 415, b"", {})
            return
        try:
            request = _decoded(body, (self.headers.get("Content-Encoding") or "").lower())
        except Exception:
            self._answer(400, b"", {})
            return
        endpoint.received.add(request)
        self._answer(200, logs_service_pb2.ExportLogsServiceResponse().SerializeToString(), {})

    def _answer(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)


class _Server(ThreadingHTTPServer):
    """A threading HTTP(S) server that lets its endpoint track and drop connections."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], endpoint: FaultyEndpoint) -> None:
        self.endpoint = endpoint
        super().__init__(address, _Handler)

    def get_request(self) -> tuple[socket.socket, Any]:
        connection, address = super().get_request()
        context = self.endpoint.tls
        if context is not None:
            connection = context.wrap_socket(connection, server_side=True, do_handshake_on_connect=False)
        return connection, address

    def process_request(self, request: Any, client_address: Any) -> None:
        self.endpoint.track(request, add=True)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        self.endpoint.track(request, add=False)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A refused handshake or a dropped connection: expected here, not printed."""


@dataclass(frozen=True)
class TlsContexts:
    """The CA the job trusts, and the server's trusted and untrusted certificates."""

    ca_file: Path
    trusted: ssl.SSLContext
    untrusted: ssl.SSLContext


class FaultyEndpoint:
    """The OTLP/HTTP endpoint of modes 1-7, on one loopback port, made to fail and recover."""

    def __init__(self, tls: TlsContexts | None = None) -> None:
        self.port = free_port()
        self.received = Received()
        self.behaviour = "ok"
        self.released = threading.Event()
        self.released.set()
        self._tls = tls
        self.tls = tls.trusted if tls is not None else None
        self._lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        self._server: _Server | None = None
        self.listen()

    @property
    def url(self) -> str:
        """The base URL the job is configured with."""
        return f"{'https' if self._tls else 'http'}://127.0.0.1:{self.port}"

    def listen(self) -> None:
        """Accept connections on the port."""
        self._server = _Server(("127.0.0.1", self.port), self)
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()

    def track(self, connection: socket.socket, add: bool) -> None:
        """Note a connection opened (``add``) or closed."""
        with self._lock:
            if add:
                self._connections.add(connection)
            else:
                self._connections.discard(connection)

    def drop_connections(self) -> None:
        """Shut every open connection (a handler blocked reading sees the end)."""
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                continue

    def _stop_listening(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()

    def start_fault(self, fault: str) -> None:
        """Misbehave as ``fault`` says from now on."""
        if fault == "refused":
            self._stop_listening()
        elif fault in ("hang", "slow", "503", "429"):
            if fault == "hang":
                self.released.clear()
            self.behaviour = fault
        elif fault == "tls" and self._tls is not None:
            self.tls = self._tls.untrusted
        self.drop_connections()

    def recover(self) -> None:
        """Answer 200 again, with the trusted certificate, on a listening port."""
        if self._server is None:
            self.listen()
        self.behaviour = "ok"
        self.released.set()
        if self._tls is not None:
            self.tls = self._tls.trusted

    def close(self) -> None:
        """Stop for good."""
        self.released.set()
        self._stop_listening()
        self.drop_connections()


def _tls_contexts(directory: Path) -> TlsContexts:
    """A CA, a server certificate it signed and a self-signed one (127.0.0.1, localhost); EC keys."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)

    def certificate(
        subject: str, key: ec.EllipticCurvePrivateKey, issuer: x509.Name | None, signer: ec.EllipticCurvePrivateKey
    ) -> x509.Certificate:
        """A CA certificate when ``subject`` is the CA, else a server certificate for loopback."""
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
        builder = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(issuer or name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
        )
        if subject == CA_NAME:
            builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        else:
            names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        return builder.sign(signer, hashes.SHA256())

    def write(stem: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> tuple[Path, Path]:
        cert_file, key_file = directory / f"{stem}.pem", directory / f"{stem}-key.pem"
        cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_file.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        return cert_file, key_file

    def context(files: tuple[Path, Path]) -> ssl.SSLContext:
        server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server.load_cert_chain(*files)
        return server

    ca_key, server_key, rogue_key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(3))
    ca = certificate(CA_NAME, ca_key, None, ca_key)
    ca_file, _ = write("ca", ca, ca_key)
    trusted = write("server", certificate("valgen bench collector", server_key, ca.subject, ca_key), server_key)
    untrusted = write("rogue", certificate("valgen bench rogue", rogue_key, None, rogue_key), rogue_key)
    return TlsContexts(ca_file, context(trusted), context(untrusted))


# -- driving one job (parent process) -----------------------------------------------------------


def _wait_until(condition: Callable[[], bool], deadline: float, interval: float = 0.05) -> float | None:
    """When ``condition`` first held (monotonic), polling until ``deadline``; None if it never did."""
    while True:
        if condition():
            return time.monotonic()
        if time.monotonic() >= deadline:
            return None
        time.sleep(interval)


class Child:
    """A job process: JSON messages on its stdout, answers on its stdin, stderr to a file."""

    def __init__(self, argv: list[str], env: dict[str, str], stderr_path: Path) -> None:
        self._stderr_path = stderr_path
        self._stderr: IO[bytes] = stderr_path.open("wb")
        self.process = subprocess.Popen(
            argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr
        )
        self._messages: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        stdout = self.process.stdout
        if stdout is not None:
            for raw in stdout:
                line = raw.decode("utf-8", "replace")
                if line.startswith(PREFIX):
                    self._messages.put(json.loads(line[len(PREFIX) :]))
        self._messages.put(None)

    def receive(self, timeout_s: float) -> dict[str, Any]:
        """The job's next message."""
        try:
            message = self._messages.get(timeout=timeout_s)
        except queue.Empty:
            raise BenchError(f"no word from the job in {timeout_s:.0f} s; stderr: {self._tail()}") from None
        if message is None:
            raise BenchError(f"the job exited with {self.process.wait()}; stderr: {self._tail()}")
        return message

    def reply(self, answer: dict[str, Any]) -> None:
        """Answer the job's last message."""
        stdin = self.process.stdin
        if stdin is not None:
            stdin.write(json.dumps(answer).encode() + b"\n")
            stdin.flush()

    def _tail(self) -> str:
        self._stderr.flush()
        return " | ".join(self._stderr_path.read_text(errors="replace").strip().splitlines()[-6:])

    def close(self) -> None:
        """Wait for the job to exit (kill it after 20 s)."""
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
        self._stderr.close()


@dataclass
class Timeline:
    """Moments (monotonic) the parent saw; None when they did not happen."""

    recovered: float | None = None
    spool_empty: float | None = None
    complete: float | None = None
    fault_end: float | None = None
    killed: float | None = None
    notes: list[str] = field(default_factory=list)


class Controller(Protocol):
    """Makes the endpoint fail and recover at the job's word, and checks what arrived."""

    timeline: Timeline

    def handle(self, event: str, message: dict[str, Any]) -> dict[str, Any]:
        """Act on a message of the job; the answer it waits for."""
        ...


def _expected(message: dict[str, Any]) -> Expected:
    return Expected(_identities(message.get("emitted", [])), _handed(message.get("stats", {})))


class EndpointController:
    """Modes 1-7: our endpoint fails from the end of the baseline until the fault steps are done."""

    def __init__(self, endpoint: FaultyEndpoint, fault: str, run_id: str, drain_timeout_s: float) -> None:
        self.endpoint = endpoint
        self.fault = fault
        self.run_id = run_id
        self.drain_timeout_s = drain_timeout_s
        self.timeline = Timeline()

    def handle(self, event: str, message: dict[str, Any]) -> dict[str, Any]:
        """Start the fault, end it, wait for the endpoint to hold everything."""
        if event == "baseline_done":
            self.endpoint.start_fault(self.fault)
        elif event == "fault_end":
            self.timeline.fault_end = time.monotonic()
            if self.fault == "dns":  # nothing makes the name resolve: a new process drains the spool
                return {"recovered": False}
            self.endpoint.recover()
            self.timeline.recovered = time.monotonic()
            return {"recovered": True}
        elif event == "drained":
            self.timeline.spool_empty = message.get("t")
            expected = _expected(message)
            deadline = (self.timeline.recovered or time.monotonic()) + self.drain_timeout_s
            self.timeline.complete = _wait_until(lambda: self.missing(expected) == 0, deadline)
        return {}

    def missing(self, expected: Expected) -> int:
        """Expected records the endpoint has not received."""
        return expected.missing(self.endpoint.received.unique(self.run_id))

    def duplicates(self) -> int:
        """Records received more than once (a spooled copy and a late answer, say)."""
        return self.endpoint.received.total(self.run_id) - len(self.endpoint.received.unique(self.run_id))


class CollectorController:
    """Mode 8: the built collector, SIGKILLed inside a step and launched again after the outage."""

    def __init__(self, home: Path, env: dict[str, str], run_id: str, outage_s: float, drain_timeout_s: float) -> None:
        self.home = home
        self.env = env
        self.run_id = run_id
        self.outage_s = outage_s
        self.drain_timeout_s = drain_timeout_s
        self.ports = (free_port(), free_port(), free_port(), free_port())
        self.timeline = Timeline()
        self.restarted = threading.Event()
        self.restart_error: str | None = None
        self.collector = self._launch()

    @property
    def url(self) -> str:
        """The collector's OTLP/HTTP base URL."""
        return f"http://{self.collector.http_endpoint}"

    def _launch(self) -> harness.Collector:
        collector = harness.launch_collector(self.home, "collector", ["collector.yaml"], self.env, self.ports)
        try:
            collector.wait_ready(collector.healthy)
        except BaseException:
            collector.stop()
            raise
        return collector

    def _restart_later(self, killed: float) -> None:
        time.sleep(max(0.0, killed + self.outage_s - time.monotonic()))
        try:
            self.collector = self._launch()
            self.timeline.recovered = time.monotonic()
        except (AssertionError, OSError) as error:
            self.restart_error = str(error)[:300]
        self.restarted.set()

    def _output(self) -> tuple[list[Identity], set[tuple[str, int]]] | None:
        """The kept generations of the run in the file output, and its (kind, step) summaries; None mid-write."""
        try:
            records = harness.records_of_file(self.collector.file_path)
        except ValueError:
            return None
        generations: list[Identity] = []
        summaries: set[tuple[str, int]] = set()
        for record in records:
            if record.attributes.get(contract.RUN_ID) != self.run_id:
                continue
            identity = _identity(record.event, record.attributes, 0)
            if record.event == contract.EVENT_GENERATION:
                generations.append(_generation_key(identity))
            elif record.event == contract.EVENT_STEP_SUMMARY:
                summaries.add((identity[1], identity[2]))
        return generations, summaries

    def missing(self, expected: Expected) -> int:
        """Kept generations, and summaries of their (kind, step), the file lacks."""
        output = self._output()
        if output is None:
            return max(1, len(expected.identities))
        generations, summaries = output
        keys = frozenset(_generation_key(i) for i in expected.identities if i[0] == contract.EVENT_GENERATION)
        lacking = Expected(keys, expected.count).missing(set(generations))
        return lacking + len({(kind, step) for _, kind, step, _, _, _ in keys} - summaries)

    def lost(self, expected: Expected) -> tuple[int, int]:
        """(kept generations the file lacks, steps without a summary)."""
        output = None
        for _ in range(20):
            output = self._output()
            if output is not None:
                break
            time.sleep(0.1)
        generations, summaries = output or ([], set())
        keys = frozenset(_generation_key(i) for i in expected.identities if i[0] == contract.EVENT_GENERATION)
        steps = {(kind, step) for _, kind, step, _, _, _ in keys}
        return Expected(keys, expected.count).missing(set(generations)), len(steps - summaries)

    def duplicates(self) -> int:
        """Kept generations the file holds more than once."""
        output = self._output()
        return len(output[0]) - len(set(output[0])) if output is not None else 0

    def handle(self, event: str, message: dict[str, Any]) -> dict[str, Any]:
        """Wait for the baseline in the file, kill mid-step, relaunch after the outage, wait for the drain."""
        if event == "baseline_done":
            expected = _expected(message)
            if _wait_until(lambda: self.missing(expected) == 0, time.monotonic() + 30) is None:
                self.timeline.notes.append("baseline not complete in the file before the kill")
            time.sleep(1.0)  # past the file exporter's flush: the kill is about the open step, not closed ones
        elif event == "mid":
            self.collector.process.kill()
            self.collector.process.wait(10)
            self.timeline.killed = time.monotonic()
            threading.Thread(target=self._restart_later, args=(self.timeline.killed,), daemon=True).start()
        elif event == "fault_end":
            self.timeline.fault_end = time.monotonic()
            self.restarted.wait(self.outage_s + 120)
            if self.restart_error is not None or self.timeline.recovered is None:
                raise BenchError(f"the collector did not come back: {self.restart_error}")
            self.timeline.recovered = max(self.timeline.recovered, self.timeline.fault_end)
            return {"recovered": True}
        elif event == "drained":
            self.timeline.spool_empty = message.get("t")
            expected = _expected(message)
            deadline = (self.timeline.recovered or time.monotonic()) + self.drain_timeout_s
            self.timeline.complete = _wait_until(lambda: self.missing(expected) == 0, deadline, 0.25)
        return {}

    def stop(self) -> None:
        """Stop the collector (SIGTERM, then SIGKILL)."""
        self.collector.stop(10)


def _drive(child: Child, controller: Controller, timeout_s: float) -> dict[str, dict[str, Any]]:
    """Answer the job's messages until it is done; every message by its event."""
    messages: dict[str, dict[str, Any]] = {}
    while True:
        message = child.receive(timeout_s)
        event = str(message.get("event"))
        messages[event] = message
        if event == "done":
            return messages
        child.reply(controller.handle(event, message))


# -- one mode ---------------------------------------------------------------------------------


@dataclass
class ModeResult:
    """What one mode measured."""

    mode: Mode
    wall_s: float = 0.0
    error: str | None = None
    baseline_ms: list[float] = field(default_factory=list)
    fault_ms: list[float] = field(default_factory=list)
    spool_records: int = 0
    spool_bytes: int = 0
    drain_s: float | None = None
    spool_empty_s: float | None = None
    lost: int | None = None
    lost_exact: bool = True
    duplicates: int = 0
    shutdown_s: float = 0.0
    stats: dict[str, int] = field(default_factory=dict)
    logs: list[tuple[str, int, str]] = field(default_factory=list)
    fault_log_index: int = 0
    notes: list[str] = field(default_factory=list)


def _job_env(home: Path, extra: dict[str, str]) -> dict[str, str]:
    """The job's environment: no inherited OTel setting, two rollout prompts, its own folder."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("OTEL_")}
    env.update({"OTEL_VALGEN_ROLLOUT_COUNT": "2", "OTEL_VALGEN_DIR": str(home / "valgen"), **extra})
    return env


def _child_argv(args: argparse.Namespace, role: str, run_id: str, endpoint: str) -> list[str]:
    return [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        role,
        "--run-id",
        run_id,
        "--endpoint",
        endpoint,
        "--steps",
        str(args.steps),
        "--baseline-steps",
        str(args.baseline_steps),
        "--drain-timeout",
        str(args.drain_timeout),
    ]


def _message_timeout(args: argparse.Namespace) -> float:
    """Generous: a blocking core spends about 7 s per fault step."""
    return float(120 + 30 * (args.steps + args.baseline_steps) + args.drain_timeout + args.outage)


def _fill(result: ModeResult, messages: dict[str, dict[str, Any]], timeline: Timeline) -> None:
    """The figures of the job's messages and the parent's timeline."""
    done = messages["done"]
    result.baseline_ms = messages.get("baseline_done", {}).get("steps_ms", [])
    result.fault_log_index = messages.get("baseline_done", {}).get("log_index", 0)
    fault_end = messages.get("fault_end", {})
    result.fault_ms = fault_end.get("steps_ms", [])
    result.spool_records = fault_end.get("spool_records", 0)
    result.spool_bytes = fault_end.get("spool_bytes", 0)
    result.shutdown_s = done.get("shutdown_s", 0.0)
    result.stats = {**messages.get("drained", {}).get("stats", {}), **done.get("stats", {})}
    result.logs += [(str(n), int(level), str(text)) for n, level, text in done.get("logs", [])]
    result.lost_exact = bool(done.get("tap"))
    if not result.lost_exact:
        result.notes.append("no tap in the job: lost by counts")
    if timeline.recovered is not None and timeline.spool_empty is not None:
        result.spool_empty_s = timeline.spool_empty - timeline.recovered
    if timeline.recovered is not None and timeline.complete is not None and timeline.spool_empty is not None:
        result.drain_s = max(timeline.complete, timeline.spool_empty) - timeline.recovered
    result.notes += timeline.notes


def _run_endpoint_mode(mode: Mode, args: argparse.Namespace, home: Path, result: ModeResult) -> None:
    """Modes 1-7 against our own endpoint."""
    tls = _tls_contexts(home) if mode.name == "tls" else None
    fault = {"silent": "hang", "slow": "slow", "503": "503", "429": "429"}.get(mode.name, mode.name)
    run_id = f"bench-{mode.name}-{uuid.uuid4().hex[:8]}"
    endpoint = FaultyEndpoint(tls)
    try:
        url = endpoint.url.replace("127.0.0.1", DNS_HOST) if mode.name == "dns" else endpoint.url
        env = _job_env(home, {"OTEL_EXPORTER_OTLP_CERTIFICATE": str(tls.ca_file)} if tls is not None else {})
        controller = EndpointController(endpoint, fault, run_id, args.drain_timeout)
        child = Child(_child_argv(args, mode.name, run_id, url), env, home / "job.stderr")
        try:
            messages = _drive(child, controller, _message_timeout(args))
        finally:
            child.close()
        _fill(result, messages, controller.timeline)
        expected = _expected(messages["done"])
        if mode.name == "dns":
            _drain_in_new_process(args, home, env, run_id, endpoint, expected, result)
        else:
            _wait_until(lambda: controller.missing(expected) == 0, time.monotonic() + 3)
        result.lost = controller.missing(expected)
        result.duplicates = controller.duplicates()
    finally:
        endpoint.close()


def _drain_in_new_process(
    args: argparse.Namespace,
    home: Path,
    env: dict[str, str],
    run_id: str,
    endpoint: FaultyEndpoint,
    expected: Expected,
    result: ModeResult,
) -> None:
    """Mode 6: a new process of the run, with an endpoint that works, sends the spool left behind."""
    child = Child(_child_argv(args, "dns-drain", run_id, endpoint.url), env, home / "drain.stderr")
    try:
        started = child.receive(_message_timeout(args))
        complete = _wait_until(
            lambda: expected.missing(endpoint.received.unique(run_id)) == 0, time.monotonic() + args.drain_timeout
        )
        child.reply({})
        done = child.receive(_message_timeout(args))
    finally:
        child.close()
    result.drain_s = complete - float(started["t"]) if complete is not None else None
    result.logs += [(f"[new process] {n}", int(level), str(text)) for n, level, text in done.get("logs", [])]
    resent = done.get("stats", {}).get("records_resent", 0)
    result.notes.append(f"drained by a new process (it resent {resent})")


def _run_collector_mode(mode: Mode, args: argparse.Namespace, home: Path, result: ModeResult) -> None:
    """Mode 8 against the built collector."""
    if not harness.COLLECTOR_BIN.is_file():
        raise BenchError("build/otelcol-valgen is absent; run `make collector`")
    run_id = f"bench-{mode.name}-{uuid.uuid4().hex[:8]}"
    with ExitStack() as stack:
        wandb = stack.enter_context(harness.wandb_stand_in())
        loki = stack.enter_context(harness.loki_stand_in())
        collector_env = {
            "VALGEN_TRACKER_EXPORTER_ENDPOINT": wandb.endpoint,
            "VALGEN_LOKI_OTLP_ENDPOINT": loki.endpoint,
            "VALGEN_DECISION_WAIT": "2s",
            "VALGEN_COUNT": str(K),
            "VALGEN_LOG_LEVEL": "warn",
        }
        controller = CollectorController(home / "collector", collector_env, run_id, args.outage, args.drain_timeout)
        stack.callback(controller.stop)
        child = Child(_child_argv(args, mode.name, run_id, controller.url), _job_env(home, {}), home / "job.stderr")
        try:
            messages = _drive(child, controller, _message_timeout(args))
        finally:
            child.close()
        _fill(result, messages, controller.timeline)
        result.lost, no_summary = controller.lost(_expected(messages["done"]))
        result.duplicates = controller.duplicates()
        ends = messages.get("fault_end", {}).get("step_ends", [])
        restarted = controller.timeline.recovered or 0.0
        during = sum(1 for end in ends if end < restarted)
        result.notes.append(f"{during}/{len(ends)} fault steps ended during the {args.outage:g} s outage")
        if no_summary:
            result.notes.append(f"{no_summary} (kind, step) without a summary in the file")


def run_mode(mode: Mode, args: argparse.Namespace, workdir: Path) -> ModeResult:
    """Measure one mode in a fresh job process; errors end up in the result, not raised."""
    result = ModeResult(mode)
    home = workdir / f"{mode.number}-{mode.name}"
    home.mkdir(parents=True)
    started = time.monotonic()
    print(f"mode {mode.number} ({mode.name}): {mode.title} ...", file=sys.stderr, flush=True)
    try:
        if mode.name == "collector-kill":
            _run_collector_mode(mode, args, home, result)
        else:
            _run_endpoint_mode(mode, args, home, result)
    except Exception as error:  # one mode's failure is a row of the table, not the end of the run
        result.error = f"{type(error).__name__}: {error}"[:400]
    result.wall_s = time.monotonic() - started
    print(f"  done in {result.wall_s:.0f} s", file=sys.stderr, flush=True)
    return result


# -- the report -------------------------------------------------------------------------------


def _percentile(values: Sequence[float], percent: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(percent / 100 * len(ordered)) - 1)]


def _ms(value: float) -> str:
    return f"{value:+.1f}" if abs(value) < 100 else f"{value:+,.0f}"


def _seconds(value: float | None) -> str:
    return "not drained" if value is None else f"{value:.1f}"


def _levels(logs: Sequence[tuple[str, int, str]], *loggers: str) -> list[int]:
    """The levels of the lines of ``loggers`` (a name's last word: the drain process's are prefixed)."""
    return [level for name, level, _ in logs if name.split(" ")[-1].split(".")[0] in loggers]


def _log_counts(result: ModeResult) -> str:
    """From the fault on: ``ours W+ / SDK W+ (ours INFO)``; other loggers' and the baseline's WARNING+ if any."""
    during = result.logs[result.fault_log_index :]
    ours, sdk = _levels(during, "otel_valgen"), _levels(during, "opentelemetry")
    text = f"{sum(lv >= logging.WARNING for lv in ours)} / {sum(lv >= logging.WARNING for lv in sdk)}"
    text += f" ({sum(lv == logging.INFO for lv in ours)} INFO)"
    other = sum(level >= logging.WARNING for _, level, _ in during) - sum(lv >= logging.WARNING for lv in ours + sdk)
    before = sum(level >= logging.WARNING for _, level, _ in result.logs[: result.fault_log_index])
    return text + (f", {other} other W+" if other else "") + (f", {before} W+ in the baseline" if before else "")


def _main_row(result: ModeResult) -> list[str]:
    label = f"{result.mode.number}. {result.mode.title}"
    if result.error is not None or not result.baseline_ms or not result.fault_ms:
        return [label, "-", "-", "-", "-", "-", "-", f"error: {result.error or 'no steps measured'}"]
    base = statistics.median(result.baseline_ms)
    first = result.fault_ms[0] - base
    later = [ms - base for ms in result.fault_ms[1:]] or [first]
    lost = "-" if result.lost is None else f"{result.lost}" if result.lost_exact else f"~{result.lost}"
    return [
        label,
        f"{base:.1f} / {_percentile(result.baseline_ms, 99):.1f}",
        _ms(first),
        f"{_ms(_percentile(later, 50))} / {_ms(_percentile(later, 99))}",
        lost,
        f"{result.spool_records} / {result.spool_bytes / 1024:,.0f}",
        _seconds(result.drain_s),
        _log_counts(result),
    ]


def _counter_row(result: ModeResult) -> list[str]:
    stats = result.stats
    names = ("records_exported", "records_spooled", "records_resent", "records_export_failed", "dropped.spool_full")
    return [
        str(result.mode.number),
        *(str(stats.get(name, 0)) for name in names),
        str(stats.get("endpoint_outages", 0)),
        str(stats.get("flush_timeouts", 0)),
        str(result.duplicates),
        "-" if result.spool_empty_s is None else f"{result.spool_empty_s:.1f}",
        f"{result.shutdown_s:.2f}",
        f"{result.wall_s:.0f}",
        "; ".join(result.notes) or "-",
    ]


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
    lines += ["| " + " | ".join(cell.replace("|", "/") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def _log_lines(results: Sequence[ModeResult]) -> list[str]:
    """Each mode's WARNING+ lines and otel_valgen INFO lines, repeats folded."""
    out: list[str] = []
    for result in results:
        folded: Counter[str] = Counter()
        for name, level, text in result.logs:
            if level >= logging.WARNING or (level == logging.INFO and "otel_valgen" in name):
                folded[f"{logging.getLevelName(level)} {name}: {' '.join(text.split())[:220]}"] += 1
        if folded:
            out.append(f"- mode {result.mode.number} ({result.mode.name}):")
            out += [f"  - {line}" + (f" (x{count})" if count > 1 else "") for line, count in folded.items()]
    return out


def report(results: Sequence[ModeResult], args: argparse.Namespace, wall_s: float) -> str:
    """The Markdown report."""
    main = _table(
        [
            "endpoint failure",
            "healthy steps p50 / p99 (ms)",
            "1st fault step (+ms)",
            "later fault steps p50 / p99 (+ms)",
            "records lost",
            "spool at fault end (records / KiB)",
            "drain after recovery (s)",
            "log lines from the fault on: W+ ours / SDK (ours INFO)",
        ],
        [_main_row(result) for result in results],
    )
    counters = _table(
        [
            "mode",
            "exported",
            "spooled",
            "resent",
            "export failed",
            "dropped spool_full",
            "outages",
            "flush timeouts",
            "duplicates at endpoint",
            "spool empty after (s)",
            "shutdown (s)",
            "mode wall (s)",
            "notes",
        ],
        [_counter_row(result) for result in results],
    )
    head = (
        f"Per step: 1 validation block of {GENERATIONS} generations (k = {K}) + log_rollouts of "
        f"{ROLLOUT_PROMPTS * RESPONSES} rollouts (k = 2 prompts); {args.baseline_steps} healthy steps, "
        f"{args.steps} fault steps; library defaults otherwise. Added time = step time - median healthy step."
    )
    lines = [head, "", main, "", "Delivery counters (vg.stats() at the end of the job):", "", counters]
    logged = _log_lines(results)
    if logged:
        lines += ["", "Log lines of the jobs (WARNING and up; otel_valgen INFO):", "", *logged]
    lines += ["", f"Total wall time: {wall_s:.0f} s ({len(results)} modes)."]
    return "\n".join(lines)


# -- entry point ------------------------------------------------------------------------------


def _selected(only: str | None) -> list[Mode]:
    if not only:
        return list(MODES)
    wanted = {part.strip() for part in only.split(",") if part.strip()}
    chosen = [mode for mode in MODES if mode.name in wanted or str(mode.number) in wanted]
    unknown = wanted - {mode.name for mode in chosen} - {str(mode.number) for mode in chosen}
    if unknown:
        sys.exit(f"unknown mode(s) {sorted(unknown)}; choose from {[m.name for m in MODES]} or 1-8")
    return chosen


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20, help="training steps during the fault (default 20)")
    parser.add_argument("--baseline-steps", type=int, default=4, help="healthy steps before the fault (default 4)")
    parser.add_argument("--only", help="comma-separated modes, by name or number (default: all 8)")
    parser.add_argument("--drain-timeout", type=float, default=60.0, help="longest wait for the drain, s (60)")
    parser.add_argument("--outage", type=float, default=30.0, help="mode 8: seconds until the restart (30)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (jobs' stderr, spools, collector)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--run-id", help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", help=argparse.SUPPRESS)
    return parser


def main() -> None:
    """Run the selected modes and print the report."""
    args = _parser().parse_args()
    if args.child:
        _child(args)
        return
    if args.steps < 1 or args.baseline_steps < 1:
        sys.exit("--steps and --baseline-steps must be at least 1")
    modes = _selected(args.only)
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="valgen-endpoint-bench-"))
    try:
        results = [run_mode(mode, args, workdir) for mode in modes]
    finally:
        if args.keep:
            print(f"work folder kept: {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    print(report(results, args, time.monotonic() - started))


if __name__ == "__main__":
    main()
