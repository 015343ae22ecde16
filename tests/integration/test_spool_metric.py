"""User story: an operator's Prometheus shows how many records wait in the spools of a Ray job.

While the collector is away, each process of a Ray job sets the Ray metric
``otel_valgen_spool_records_waiting`` (tagged with the run id); Ray exports it from the node's
metrics port, where Prometheus scrapes it as ``ray_otel_valgen_spool_records_waiting``. Here a
real local Ray cluster with a known metrics port, a driver whose endpoint refuses connections,
and a scrape of that port.
"""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator

import pytest

import otel_valgen as vg
from otel_valgen._ray_metric import SPOOL_METRIC
from tests.e2e.harness import free_port, wait_for
from tests.support.require import require_module

ray = require_module("ray")

pytestmark = pytest.mark.ray

RUN_ID = "spool-metric"


@pytest.fixture
def metrics_port() -> Iterator[int]:
    """A local Ray cluster exporting its metrics on a free port."""
    port = free_port()
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, _metrics_export_port=port)
    try:
        yield port
    finally:
        ray.shutdown()


def _scraped(port: int) -> float | None:
    """The run's waiting records as Prometheus reads them from the node, or None before Ray exports it."""
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    except OSError:
        return None
    pattern = rf'^ray_{SPOOL_METRIC}\{{[^}}]*run_id="{RUN_ID}"[^}}]*\}} (\S+)$'
    values = [float(m.group(1)) for m in re.finditer(pattern, text, re.MULTILINE)]
    return sum(values) if values else None


@pytest.mark.timeout(120)
def test_records_waiting_in_the_spool_are_a_metric_prometheus_scrapes(metrics_port: int) -> None:
    """Two steps spooled while the endpoint is away: the node's metrics show the same count as vg.stats()."""
    vg.configure(run_id=RUN_ID, count=4, endpoint=f"http://127.0.0.1:{free_port()}", flush_timeout_s=0.5)
    for step in (1, 2):
        with vg.validation(step=step, source="driver"):
            vg.log_generations([f"p{i}" for i in range(10)], ["o"] * 10)
    waiting = vg.stats()["spool_records_waiting"]
    assert waiting == vg.stats()["records_spooled"] > 0
    # Ray exports every few seconds once its metrics agent is up; the courier sets the value again each round.
    wait_for(lambda: _scraped(metrics_port) == waiting, 90, f"{SPOOL_METRIC} = {waiting} on the metrics port")
