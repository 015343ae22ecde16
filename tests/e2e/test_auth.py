"""User story: an operator who exposes the collector requires a bearer token from every emitter."""

from __future__ import annotations

import urllib.error
import urllib.request

from opentelemetry.proto.collector.logs.v1 import logs_service_pb2

from tests.e2e.conftest import StartCollector
from tests.e2e.harness import StandIn

TOKEN = "e2e-secret-token"


def _post(endpoint: str, token: str | None) -> int:
    request = urllib.request.Request(
        f"http://{endpoint}/v1/logs",
        data=logs_service_pb2.ExportLogsServiceRequest().SerializeToString(),
        headers={"Content-Type": "application/x-protobuf"},
        method="POST",
    )
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def test_auth_overlay_rejects_requests_without_the_token(
    start_collector: StartCollector, wandb_stand_in: StandIn, loki_stand_in: StandIn
) -> None:
    """With collector.yaml + auth.yaml, OTLP/HTTP answers 401 without the token and 200 with it."""
    collector = start_collector(
        "collector",
        ["collector.yaml", "auth.yaml"],
        {
            "VALGEN_AUTH_TOKEN": TOKEN,
            "VALGEN_TRACKER_EXPORTER_ENDPOINT": wandb_stand_in.endpoint,
            "VALGEN_LOKI_OTLP_ENDPOINT": loki_stand_in.endpoint,
        },
    )
    assert _post(collector.http_endpoint, None) == 401
    assert _post(collector.http_endpoint, "wrong-token") == 401
    assert _post(collector.http_endpoint, TOKEN) == 200
