"""One OTLP/HTTP logs endpoint on loopback, for every suite that needs a stand-in.

It is a real HTTP server decoding each protobuf ``ExportLogsServiceRequest`` POST (gzip or
not) and answering as OTLP/HTTP does; it stands in for the collector (the SDK's exporter
talks to it) and for Loki's ``/otlp/v1/logs``.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.logs.v1 import logs_service_pb2


class OtlpHttpStandIn:
    """Keeps every request posted to it, with its path; answers ``status`` on ``path``.

    Requests to another path get 404 and are listed in ``wrong_paths``.
    """

    def __init__(self, path: str | None = "/v1/logs", status: int = 200) -> None:
        self.path = path
        self.status = status
        self.hits = 0
        self.requests: list[logs_service_pb2.ExportLogsServiceRequest] = []
        self.by_path: list[tuple[str, logs_service_pb2.ExportLogsServiceRequest]] = []
        self.wrong_paths: list[str] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                payload = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                stand_in.hits += 1
                if stand_in.path is not None and self.path != stand_in.path:
                    stand_in.wrong_paths.append(self.path)
                    self.send_response(404)
                    self.end_headers()
                    return
                if stand_in.status != 200:
                    self.send_response(stand_in.status)
                    self.end_headers()
                    return
                if self.headers.get("Content-Encoding") == "gzip":  # the collector's otlp_http default
                    payload = gzip.decompress(payload)
                request = logs_service_pb2.ExportLogsServiceRequest()
                request.ParseFromString(payload)
                stand_in.requests.append(request)
                stand_in.by_path.append((self.path, request))
                body = logs_service_pb2.ExportLogsServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                return None

        return Handler

    def at(self, path: str) -> list[logs_service_pb2.ExportLogsServiceRequest]:
        """The requests received at ``path``."""
        return [request for got, request in list(self.by_path) if got == path]

    def start(self) -> OtlpHttpStandIn:
        """Serve in a background thread."""
        self.thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and release the port."""
        self.server.shutdown()
        self.server.server_close()


@contextmanager
def otlp_http_stand_in(path: str | None = "/v1/logs", status: int = 200) -> Iterator[OtlpHttpStandIn]:
    """An OTLP/HTTP stand-in on a free loopback port for the duration of the block."""
    stand_in = OtlpHttpStandIn(path, status).start()
    try:
        yield stand_in
    finally:
        stand_in.stop()
