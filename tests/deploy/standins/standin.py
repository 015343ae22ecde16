"""Stand-ins for Loki, Grafana and Prometheus in the compose stack tests: the HTTP endpoints the stack uses.

Their official images cannot be pulled on the test machines, so the tests build this script into an
image per service (its role in ``VALGEN_STANDIN_ROLE``) and tag it with the official image's name,
so that docker/docker-compose.yml runs unchanged; the arguments compose passes the real service
(``-config.file=...``) are ignored. python3 only, standard library:

  standin.py loki     :3100  GET /ready; POST /otlp/v1/logs (OTLP/HTTP protobuf, as Loki takes
                             it) kept in memory and listed by GET /standin/requests
  standin.py grafana  :3000  GET /api/health
  standin.py prometheus  :9090  GET /-/ready, /-/healthy (the stack test fetches the scrape
                             targets from inside this container, where Prometheus would)
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SERVICES = {"loki": 3100, "grafana": 3000, "prometheus": 9090}
_received: list[dict[str, str]] = []
_lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    """Answers the endpoints of the service named on the command line."""

    service = "loki"

    def _reply(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.service == "loki" and self.path == "/ready":
            self._reply(200, b"ready\n", "text/plain")
        elif self.service == "loki" and self.path == "/standin/requests":
            with _lock:
                self._reply(200, json.dumps(_received).encode())
        elif self.service == "prometheus" and self.path in ("/-/ready", "/-/healthy"):
            self._reply(200, b"Prometheus Server is Ready.\n", "text/plain")
        elif self.service == "grafana" and self.path == "/api/health":
            self._reply(200, json.dumps({"database": "ok", "version": "stand-in"}).encode())
        else:
            self._reply(404, b"{}")

    def do_POST(self) -> None:
        if self.service != "loki" or self.path != "/otlp/v1/logs":
            self._reply(404, b"{}")
            return
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.headers.get("Content-Encoding", "") == "gzip":
            body = gzip.decompress(body)
        with _lock:
            _received.append(
                {
                    "content_type": self.headers.get("Content-Type", ""),
                    "body": base64.b64encode(body).decode(),
                }
            )
        # An empty ExportLogsServiceResponse: full success.
        self._reply(200, b"", "application/x-protobuf")

    def log_message(self, format: str, *args: object) -> None:
        sys.stderr.write(f"{self.service}: {format % args}\n")


def main() -> None:
    """Serve the stand-in (named on the command line, else by the image) on all interfaces, at its service's port."""
    service = sys.argv[1] if sys.argv[1:2] and sys.argv[1] in SERVICES else os.environ["VALGEN_STANDIN_ROLE"]
    port = SERVICES[service]
    Handler.service = service
    ThreadingHTTPServer(("0.0.0.0", port), Handler).serve_forever()


if __name__ == "__main__":
    main()
