"""One OTLP/gRPC logs server on loopback, for every suite that needs a stand-in.

It stands in for the collector (the SDK's gRPC exporter talks to it) and for the exporter
service (the collector's ``otlp_grpc/trackers`` exporter talks to it), keeping every
``ExportLogsServiceRequest`` it accepted. Like both (``max_recv_msg_size_mib: 64`` in the
collector's configs, ``MAX_BODY_BYTES`` in the exporter service), it takes messages of up to
64 MiB: a step of agentic rollouts is more than gRPC's default 4 MiB.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from typing import Any

from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc

from otel_valgen.exporter.server import MAX_BODY_BYTES


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
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=4), options=[("grpc.max_receive_message_length", MAX_BODY_BYTES)]
    )
    logs_service_pb2_grpc.add_LogsServiceServicer_to_server(stand_in, server)
    host = endpoint.rsplit(":", 1)[0]
    stand_in.endpoint = f"{host}:{server.add_insecure_port(endpoint)}"
    server.start()
    try:
        yield stand_in
    finally:
        server.stop(grace=None)
