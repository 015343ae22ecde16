"""One OTLP/gRPC logs server on loopback, for every suite that needs a stand-in.

It stands in for the collector (the SDK's gRPC exporter talks to it) and for the exporter
service (the collector's ``otlp_grpc/trackers`` exporter talks to it), keeping every
``ExportLogsServiceRequest`` it accepted.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from typing import Any

from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc


class OtlpGrpcStandIn(logs_service_pb2_grpc.LogsServiceServicer):
    """Accepts every export and keeps its request; ``endpoint`` is ``host:port``."""

    def __init__(self) -> None:
        self.requests: list[logs_service_pb2.ExportLogsServiceRequest] = []
        self.endpoint = ""

    def Export(self, request: Any, context: Any) -> logs_service_pb2.ExportLogsServiceResponse:
        """Keep the request and answer success."""
        self.requests.append(request)
        return logs_service_pb2.ExportLogsServiceResponse()


@contextmanager
def otlp_grpc_stand_in(endpoint: str = "127.0.0.1:0") -> Iterator[OtlpGrpcStandIn]:
    """Serve a stand-in at ``endpoint`` (port 0: a free one) until the block ends."""
    import grpc

    stand_in = OtlpGrpcStandIn()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    logs_service_pb2_grpc.add_LogsServiceServicer_to_server(stand_in, server)
    host = endpoint.rsplit(":", 1)[0]
    stand_in.endpoint = f"{host}:{server.add_insecure_port(endpoint)}"
    server.start()
    try:
        yield stand_in
    finally:
        server.stop(grace=None)
