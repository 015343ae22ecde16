"""``otel-valgen resend`` follows the OTLP exporter specification: Retry-After, timeout, TLS certificate.

Each test replays a spool file the library's embedded sink wrote to a real HTTP(S) server on
loopback that answers as scripted and records when each request arrived.
"""

from __future__ import annotations

import datetime
import email.utils
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2

import otel_valgen as vg
from otel_valgen.cli.resend import MAX_RETRY_AFTER_S, progress_path, resend_paths, resolve_target


@dataclass
class Scripted:
    """A loopback OTLP/HTTP server answering from a script: (status, headers, delay before answering).

    Headers may be a function, called when the answer is sent.
    """

    script: list[tuple[int, dict[str, str] | Callable[[], dict[str, str]], float]]
    arrivals: list[float] = field(default_factory=list)
    accepted: list[logs_service_pb2.ExportLogsServiceRequest] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        """The logs URL (scheme follows whether TLS was set up)."""
        assert self.server is not None
        scheme = "https" if isinstance(self.server.socket, ssl.SSLSocket) else "http"
        return f"{scheme}://127.0.0.1:{self.server.server_address[1]}/v1/logs"

    def handler(self) -> type[BaseHTTPRequestHandler]:
        scripted = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                scripted.arrivals.append(time.monotonic())
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                status, headers, delay = scripted.script[min(len(scripted.arrivals), len(scripted.script)) - 1]
                time.sleep(delay)
                if status == 200:
                    request = logs_service_pb2.ExportLogsServiceRequest()
                    request.ParseFromString(body)
                    scripted.accepted.append(request)
                try:
                    self.send_response(status)
                    for name, value in (headers() if callable(headers) else headers).items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                except OSError:  # the client gave up waiting (timeout test)
                    pass

            def log_message(self, *args: Any) -> None:
                return None

        return Handler


@pytest.fixture
def serve() -> Iterator[Any]:
    """Start ``Scripted`` servers (optionally TLS); all are stopped at teardown."""
    started: list[ThreadingHTTPServer] = []

    def start(scripted: Scripted, tls: ssl.SSLContext | None = None) -> Scripted:
        server = ThreadingHTTPServer(("127.0.0.1", 0), scripted.handler())
        if tls is not None:
            server.socket = tls.wrap_socket(server.socket, server_side=True)
        scripted.server = server
        threading.Thread(target=server.serve_forever, daemon=True).start()
        started.append(server)
        return scripted

    yield start
    for server in started:
        server.shutdown()
        server.server_close()


@pytest.fixture
def spool(tmp_path: Path) -> Path:
    """One file of OTLP-JSON lines written by the embedded sink (a step's start, generations, end)."""
    folder = tmp_path / "spool"
    vg.configure(run_id="resend-run", count=4, directory=str(folder))
    with vg.validation(step=1, source="trainer", sources_expected=1):
        vg.log_generations([f"q{i}" for i in range(4)], ["a"] * 4, [0.5] * 4)
    vg.shutdown()
    (path,) = folder.glob("*.jsonl")
    return path


def _http_date(seconds_from_now: float) -> str:
    when = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=seconds_from_now)
    return email.utils.format_datetime(when, usegmt=True)


def test_retry_after_in_seconds_and_as_a_date_is_waited_for(
    spool: Path, serve: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """429 with Retry-After: 2 and 503 with an HTTP date 3 s ahead: the retries come no earlier."""
    server = serve(
        Scripted(
            [
                (429, {"Retry-After": "2"}, 0.0),
                (503, lambda: {"Retry-After": _http_date(3)}, 0.0),
                (200, {}, 0.0),
            ]
        )
    )
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", server.url)
    result = resend_paths([spool], resolve_target(None), lambda message: None)
    assert result.failures == []
    first, second, third = server.arrivals[:3]
    assert second - first >= 2.0  # the backoff alone would have waited about 0.5 s
    assert third - second >= 2.0  # an HTTP date has whole seconds: 3 s ahead is at least 2 s after
    assert len(server.accepted) == result.lines_sent


def test_a_retry_after_beyond_the_bound_stops_the_replay_and_keeps_the_progress(
    spool: Path, serve: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server asking for more than MAX_RETRY_AFTER_S gets no early retry: resend stops, says why, sends later."""
    server = serve(Scripted([(503, {"Retry-After": str(int(MAX_RETRY_AFTER_S) + 60)}, 0.0)]))
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", server.url)
    result = resend_paths([spool], resolve_target(None), lambda message: None)
    assert len(server.arrivals) == 1
    assert "run resend again later" in result.failures[0]
    assert not progress_path(spool).exists() or progress_path(spool).read_text() == "0"


def test_the_logs_timeout_bounds_each_request(spool: Path, serve: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """OTEL_EXPORTER_OTLP_LOGS_TIMEOUT (over the generic one) gives up on a slow answer and retries."""
    server = serve(Scripted([(200, {}, 3.0), (200, {}, 0.0)]))
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", server.url)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "30")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_LOGS_TIMEOUT", "0.5")
    result = resend_paths([spool], resolve_target(None), lambda message: None)
    assert result.failures == []
    assert len(server.arrivals) == result.lines_sent + 1  # the first request timed out and was sent again


def _self_signed(folder: Path, name: str) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, as PEM files."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    import ipaddress

    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / f"{name}.crt", folder / f"{name}.key"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


def test_the_logs_certificate_verifies_a_self_signed_collector(
    spool: Path, serve: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """OTEL_EXPORTER_OTLP_LOGS_CERTIFICATE (over a wrong generic one) is the trust root; without it TLS fails."""
    cert, key = _self_signed(tmp_path, "collector")
    wrong, _ = _self_signed(tmp_path, "other")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = serve(Scripted([(200, {}, 0.0)]), tls=context)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", server.url)

    untrusted = resend_paths([spool], resolve_target(None), lambda message: None)
    assert "SSLError" in untrusted.failures[0]
    assert server.accepted == []

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", str(wrong))
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_LOGS_CERTIFICATE", str(cert))
    trusted = resend_paths([spool], resolve_target(None), lambda message: None)
    assert trusted.failures == []
    assert len(server.accepted) == trusted.lines_sent > 0


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({}, "no endpoint: pass --endpoint"),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
            "resend sends OTLP/HTTP, but OTEL_EXPORTER_OTLP_PROTOCOL is grpc",
        ),
    ],
)
def test_without_an_otlp_http_endpoint_resend_is_a_usage_error(
    spool: Path, monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], message: str
) -> None:
    """No endpoint anywhere, or only a gRPC one: exit 2 with a message naming the fix."""
    from click.testing import CliRunner

    from otel_valgen.cli.main import main

    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    result = CliRunner().invoke(main, ["resend", str(spool)])
    assert result.exit_code == 2
    assert message in result.output
