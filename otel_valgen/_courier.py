"""The courier: a background thread that sends spooled records once the endpoint answers again.

While the endpoint is away the training thread writes to the spool and never waits; the
courier probes the endpoint with backoff (or the server's ``Retry-After``), sends the spool's
lines in order, keeps the progress in ``<file>.resent``, and hands delivery back to the
exporter when the spool is empty and the endpoint answers in time. At start it also sends
the spool files an ended process of the same run left behind (``_spool.claim_orphans``).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

import requests
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

from otel_valgen import _spool, _stats
from otel_valgen._otlp_post import PostOutcome, Target, payload_of, post_once, record_count, request_of
from otel_valgen._settings import Settings

_logger = logging.getLogger("otel_valgen")

FIRST_BACKOFF_S = 1.0
MAX_BACKOFF_S = 10.0  # a probe is one request: cheap enough to find a collector back within 10 s
_REFUSED = {400, 413}  # the request itself is refused: sending it again cannot help


class Sender(Protocol):
    """Sends one export request once."""

    def send(self, request: ExportLogsServiceRequest) -> PostOutcome: ...

    def close(self) -> None: ...


class HttpSender:
    """OTLP/HTTP (protobuf or JSON), with the transport the library resolved."""

    def __init__(self, target: Target) -> None:
        self._target = target
        self._session = requests.Session()

    def send(self, request: ExportLogsServiceRequest) -> PostOutcome:
        """POST the request once."""
        return post_once(self._session, self._target, payload_of(request, self._target.protocol))

    def close(self) -> None:
        """Close the connection pool."""
        self._session.close()


class GrpcSender:
    """OTLP/gRPC; TLS when the endpoint is ``https://`` or a certificate is configured."""

    def __init__(self, settings: Settings) -> None:
        import grpc
        from opentelemetry.proto.collector.logs.v1.logs_service_pb2_grpc import LogsServiceStub

        endpoint = settings.endpoint or ""
        parts = urlsplit(endpoint if "://" in endpoint else f"//{endpoint}")
        address = parts.netloc or endpoint
        transport = settings.transport
        if parts.scheme == "https" or transport.certificate_file:
            root = Path(transport.certificate_file).read_bytes() if transport.certificate_file else None
            self._channel = grpc.secure_channel(address, grpc.ssl_channel_credentials(root_certificates=root))
        else:
            self._channel = grpc.insecure_channel(address)
        self._export = LogsServiceStub(self._channel).Export  # type: ignore[no-untyped-call]
        self._metadata = [(key.lower(), value) for key, value in transport.headers.items()]
        self._timeout_s = transport.timeout_s or None
        self._grpc = grpc

    def send(self, request: ExportLogsServiceRequest) -> PostOutcome:
        """Call Export once."""
        try:
            self._export(request, metadata=self._metadata, timeout=self._timeout_s)
        except self._grpc.RpcError as error:
            code = error.code() if hasattr(error, "code") else None
            refused = code == self._grpc.StatusCode.INVALID_ARGUMENT
            return PostOutcome(f"gRPC {getattr(code, 'name', error)}", not refused, None, 400 if refused else None)
        return PostOutcome()

    def close(self) -> None:
        """Close the channel."""
        self._channel.close()


def _asked(outcome: PostOutcome) -> float | None:
    """The server's ``Retry-After``, at least half a second (0 would make the courier spin)."""
    return None if outcome.retry_after_s is None else max(outcome.retry_after_s, FIRST_BACKOFF_S / 2)


def sender_for(settings: Settings) -> Sender:
    """The sender for the settings' endpoint and protocol."""
    if settings.protocol == "grpc":
        return GrpcSender(settings)
    return HttpSender(Target(settings.endpoint or "", settings.protocol, settings.transport))


class Courier:
    """Sends the spool (this process's, and orphans of the run) in the background, in order.

    ``resume`` is called when the own spool was sent and the last answer came within
    ``healthy_s``; it returns True when delivery went back to the endpoint.
    """

    def __init__(
        self,
        sender: Sender,
        stats: _stats.Stats,
        description: str,
        healthy_s: float,
        resume: Callable[[], bool],
        own: Callable[[], Path | None],
        orphans: Callable[[], list[_spool.Orphan]],
        report: Callable[[], None] = lambda: None,
    ) -> None:
        self._sender = sender
        self._stats = stats
        self._description = description
        self._healthy_s = healthy_s
        self._resume = resume
        self._own = own
        self._claim = orphans
        self._report = report  # tells the spool's size on: each round and each line sent
        self._orphans: list[_spool.Orphan] = []
        self._away = False
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.own_settled = 0  # records of the own spool sent or refused: no longer waiting

    @property
    def orphans_waiting(self) -> int:
        """Records of claimed orphan spools not yet sent."""
        with self._lock:
            return sum(orphan.waiting for orphan in self._orphans)

    def start(self, *, away: bool) -> None:
        """Run the thread (once); ``away``: the own spool needs sending."""
        with self._lock:
            self._away = self._away or away
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(target=self._run, name="otel-valgen-courier", daemon=True)
                self._thread.start()
        self._wake.set()

    def stop(self, timeout_s: float = 1.0) -> None:
        """Stop sending (the rest stays in the spool for the next process or ``resend``)."""
        self._stop.set()
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)
        with self._lock:
            orphans, self._orphans = self._orphans, []
        for orphan in orphans:
            orphan.release(sent_all=False)
        self._sender.close()

    def _run(self) -> None:
        with self._lock:
            self._orphans = self._claim()
        backoff = FIRST_BACKOFF_S
        while not self._stop.is_set():
            self._report()  # again each round: a metrics backend that missed a value gets it again
            try:
                done, wait_s = self._round()
            except Exception as error:  # the courier must outlive any surprise; the spool keeps the records
                self._stats.failed("sending the spool", error)
                done, wait_s = False, None
            if done:
                backoff = FIRST_BACKOFF_S
                self._wake.wait()
                self._wake.clear()
                continue
            delay = wait_s if wait_s is not None else backoff * (0.5 + random.random() / 2)
            backoff = FIRST_BACKOFF_S if wait_s == 0.0 else min(backoff * 2, MAX_BACKOFF_S)
            self._stop.wait(min(delay, MAX_BACKOFF_S * 2))

    def _round(self) -> tuple[bool, float | None]:
        """Send what waits; (nothing left to do, how long the server asked to wait)."""
        sent, asked = self._send_orphans()
        if not sent:
            return False, asked
        with self._lock:
            away = self._away
        if not away:
            return True, None
        healthy, asked = self._send_own()
        if not healthy:
            return False, asked
        if self._hand_back():
            return True, None
        return False, 0.0  # the endpoint is fine, the job spooled more meanwhile: again at once

    def _send_orphans(self) -> tuple[bool, float | None]:
        """Send the claimed orphan spools, removing each once sent: (all sent, Retry-After)."""
        with self._lock:
            orphans = list(self._orphans)
        for orphan in orphans:
            sent, _, asked = self._send_file(orphan.path, orphan)
            if not sent:
                return False, asked
            orphan.release(sent_all=True)
            with self._lock:
                self._orphans.remove(orphan)
            _logger.info("otel_valgen: sent the spool %s that an ended process of this run left", orphan.path)
        return True, None

    def _send_own(self) -> tuple[bool, float | None]:
        """Send this process's spool, then know the endpoint answers in time: (healthy, Retry-After)."""
        own = self._own()
        if own is not None:
            sent, healthy, asked = self._send_file(own, None)
            if not sent:
                return False, asked
            if healthy:
                return True, None
        started = time.monotonic()  # nothing sent, or slowly: ask the endpoint with an empty request
        outcome = self._sender.send(ExportLogsServiceRequest())
        if outcome.failure is not None:
            return False, _asked(outcome)
        return time.monotonic() - started <= self._healthy_s, None

    def _hand_back(self) -> bool:
        """Put delivery back to the endpoint, if the spool is still all sent."""
        with self._lock:  # cleared first: an outage that starts during resume() sets it again
            self._away = False
        if self._resume():
            return True
        with self._lock:
            self._away = True
        return False

    def _send_file(self, path: Path, orphan: _spool.Orphan | None) -> tuple[bool, bool, float | None]:
        """Send the unsent lines of ``path``: (all sent, the last answer came in time, Retry-After)."""
        healthy = False
        offset = _spool.read_offset(path)
        for end, raw in _spool.complete_lines(path, offset):
            if self._stop.is_set():
                return False, False, None
            if raw.strip():
                try:
                    request = request_of(raw)
                except (ValueError, TypeError) as error:
                    self._stats.add(_stats.DROP_PREFIX + "spool_unreadable")
                    self._stats.warn(
                        "spool_unreadable", "a line of the spool %s does not parse (%s); skipped", path, error
                    )
                    request = None
                if request is not None:
                    started = time.monotonic()
                    outcome = self._sender.send(request)
                    if outcome.failure is not None and outcome.status not in _REFUSED:
                        _logger.debug("otel_valgen: %s still away: %s", self._description, outcome.failure)
                        return False, False, _asked(outcome)
                    records = record_count(request)
                    if outcome.failure is not None:  # counted once: spooled, then dropped for this reason
                        self._stats.add(_stats.DROP_PREFIX + "spool_refused", records)
                        self._stats.warn(
                            "spool_refused",
                            "%s refused %d spooled record(s): %s",
                            self._description,
                            records,
                            outcome.failure,
                        )
                    else:
                        self._stats.add(_stats.RECORDS_RESENT, records)
                    healthy = time.monotonic() - started <= self._healthy_s
                    with self._lock:
                        if orphan is not None:
                            orphan.waiting = max(0, orphan.waiting - records)
                        else:
                            self.own_settled += records
                    self._report()
            _spool.write_offset(path, end)
        return True, healthy, None
