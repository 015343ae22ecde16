"""OTLP/HTTP (``POST /v1/logs``) and OTLP/gRPC (``LogsService/Export``) front ends.

Answers follow the OTLP specification: success (with ``partial_success`` counting the log
records rejected, and why); HTTP 400 / gRPC ``INVALID_ARGUMENT`` for a malformed payload,
which the sender must not retry; HTTP 503 with ``Retry-After`` / gRPC ``UNAVAILABLE`` while
the service cannot take data, which the sender retries. Both bind loopback by default.
"""

from __future__ import annotations

import gzip
import logging
import socket
import threading
import zlib
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from google.protobuf.json_format import MessageToJson
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse

from otel_valgen.exporter.service import ExporterService, Outcome, Unavailable
from otel_valgen.otlp_json import MalformedPayload, parse_request

__all__ = ["MAX_BODY_BYTES", "ExporterServer", "ListenError", "parse_address"]

_logger = logging.getLogger("otel_valgen.exporter")

MAX_BODY_BYTES = 64 * 1024 * 1024
"""Largest request body accepted (HTTP) or message received (gRPC)."""
_GRPC_INVALID_ARGUMENT, _GRPC_UNAVAILABLE = 3, 14


def parse_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` for IPv6) as a (host, port) pair."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not host or int(port) > 65535:
        raise ValueError(f"expected HOST:PORT (port 0 to 65535), got {address!r}")
    return host.strip("[]"), int(port)


class ListenError(Exception):
    """A front end (``protocol``: ``http`` or ``grpc``) cannot listen on its address."""

    def __init__(self, protocol: str, message: str) -> None:
        super().__init__(message)
        self.protocol = protocol


def decode_body(body: bytes, content_encoding: str | None = None) -> bytes:
    """Undo ``Content-Encoding`` (gzip, deflate or none)."""
    encoding = (content_encoding or "").strip().lower()
    try:
        if encoding in ("gzip", "x-gzip"):
            return gzip.decompress(body)
        if encoding == "deflate":
            return zlib.decompress(body)
    except (OSError, zlib.error, EOFError) as error:
        raise MalformedPayload(f"cannot decompress {encoding} body: {error}") from error
    if encoding not in ("", "identity"):
        raise MalformedPayload(f"unsupported content encoding {encoding!r}")
    return body


def _response(outcome: Outcome, *, as_json: bool) -> bytes:
    response = ExportLogsServiceResponse()
    if outcome.rejected:
        response.partial_success.rejected_log_records = outcome.rejected
        response.partial_success.error_message = outcome.message
    return MessageToJson(response).encode() if as_json else bytes(response.SerializeToString())


def _status(code: int, message: str, *, as_json: bool) -> bytes:
    status = Status(code=code, message=message)
    return MessageToJson(status).encode() if as_json else bytes(status.SerializeToString())


class _Handler(BaseHTTPRequestHandler):
    server_version = "otel-valgen-wandb-exporter"
    protocol_version = "HTTP/1.1"
    service: ExporterService  # set on the subclass made per server

    def log_message(self, format: str, *args: Any) -> None:
        _logger.debug("%s " + format, self.address_string(), *args)

    def _send(self, code: int, body: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        """Health check at ``/healthz``."""
        if self.path == "/healthz":
            self._send(200, b"ok\n", "text/plain")
        else:
            self._send(404, b"not found\n", "text/plain")

    def do_POST(self) -> None:
        """Receive one ``ExportLogsServiceRequest``."""
        if self.path.split("?")[0] != "/v1/logs":
            self._send(404, b"not found\n", "text/plain")
            return
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        as_json = content_type == "application/json"
        reply_type = "application/json" if as_json else "application/x-protobuf"
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            self.service.count_request("malformed")
            self.close_connection = True
            self._send(413, _status(_GRPC_INVALID_ARGUMENT, "body too large", as_json=as_json), reply_type)
            return
        body = self.rfile.read(length)
        if content_type not in ("application/x-protobuf", "application/protobuf", "application/json"):
            self.service.count_request("malformed")
            self._send(415, _status(_GRPC_INVALID_ARGUMENT, f"unsupported {content_type!r}", as_json=False), reply_type)
            return
        try:
            raw = decode_body(body, self.headers.get("Content-Encoding"))
            outcome = self.service.accept(parse_request(raw, json_body=as_json))
        except MalformedPayload as error:
            self.service.count_request("malformed")
            _logger.warning("malformed request from %s: %s", self.address_string(), error)
            self._send(400, _status(_GRPC_INVALID_ARGUMENT, str(error), as_json=as_json), reply_type)
            return
        except Unavailable as error:
            retry = str(max(1, round(error.retry_after_s)))
            self._send(503, _status(_GRPC_UNAVAILABLE, str(error), as_json=as_json), reply_type, {"Retry-After": retry})
            return
        except Exception:
            self.service.count_request("failed")
            _logger.exception("request failed")
            self._send(500, _status(13, "internal error", as_json=as_json), reply_type)
            return
        self._send(200, _response(outcome, as_json=as_json), reply_type)


_GRPC_SERVICE = "opentelemetry.proto.collector.logs.v1.LogsService"


def _grpc_handler(service: ExporterService) -> Any:
    """A generic handler for ``LogsService/Export`` that parses the request itself.

    The generated servicer would let grpc decode the message, and a payload that is not
    protobuf would be answered ``INTERNAL``; parsing here answers ``INVALID_ARGUMENT``.
    """

    def export(body: bytes, context: Any) -> bytes:
        try:
            outcome = service.accept(parse_request(body, json_body=False))
        except MalformedPayload as error:
            service.count_request("malformed")
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
        except Unavailable as error:
            context.abort(grpc.StatusCode.UNAVAILABLE, str(error))
        except Exception:
            service.count_request("failed")
            raise
        return _response(outcome, as_json=False)

    method = grpc.unary_unary_rpc_method_handler(export)  # bytes in, bytes out
    return grpc.method_handlers_generic_handler(_GRPC_SERVICE, {"Export": method})


class _HTTPServer6(ThreadingHTTPServer):
    address_family = socket.AF_INET6


class ExporterServer:
    """Serves one ``ExporterService`` over OTLP/HTTP and/or OTLP/gRPC."""

    def __init__(self, service: ExporterService, *, http: str | None, grpc_address: str | None) -> None:
        self.service = service
        self._http_address, self._grpc_address = http, grpc_address
        self._http: ThreadingHTTPServer | None = None
        self._grpc: Any = None
        self.http_port: int | None = None
        self.grpc_port: int | None = None

    def start(self) -> None:
        """Bind and start serving (port 0 picks a free port; see ``http_port``/``grpc_port``).

        Raises:
            ListenError: an address cannot be bound; nothing is left listening.

        """
        if self._http_address:
            handler = type("Handler", (_Handler,), {"service": self.service})
            host, port = parse_address(self._http_address)
            server_class = _HTTPServer6 if ":" in host else ThreadingHTTPServer
            try:
                self._http = server_class((host, port), handler)
            except OSError as error:
                raise ListenError(
                    "http", f"OTLP/HTTP cannot listen on {self._http_address}: {error.strerror or error}"
                ) from error
            self._http.daemon_threads = True
            self.http_port = int(self._http.server_address[1])
            threading.Thread(target=self._http.serve_forever, name="valgen-otlp-http", daemon=True).start()
        if self._grpc_address:
            options = [("grpc.max_receive_message_length", MAX_BODY_BYTES)]
            server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), options=options)
            server.add_generic_rpc_handlers((_grpc_handler(self.service),))
            host, port = parse_address(self._grpc_address)
            try:
                self.grpc_port = server.add_insecure_port(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
            except RuntimeError as error:  # grpc says only "Failed to bind"
                self.stop()
                raise ListenError(
                    "grpc", f"OTLP/gRPC cannot listen on {self._grpc_address} (in use, or not an address of this host)"
                ) from error
            self._grpc = server
            self._grpc.start()

    def stop(self, grace_s: float = 5.0) -> None:
        """Stop accepting requests (in-flight ones finish within ``grace_s``); safe to call again."""
        if self._grpc is not None:
            self._grpc.stop(grace_s).wait(grace_s)
            self._grpc = None
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None
