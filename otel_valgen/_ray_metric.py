"""The spool's size as a Ray metric, in processes connected to Ray (Prometheus scrapes Ray's nodes)."""

from __future__ import annotations

import sys
from typing import Any, Final

SPOOL_METRIC: Final = "otel_valgen_spool_records_waiting"
"""A Ray metric: Prometheus scrapes it from the node as ``ray_otel_valgen_spool_records_waiting``."""
_spool_gauge: Any = None


def report_spool_waiting(run_id: str, records: int) -> None:
    """In a process connected to Ray, set the spool's waiting records as a Ray metric (else nothing).

    Ray exports it from every node's metrics port with the process's ``WorkerId``; ``sum by
    (run_id)`` gives a run's records waiting in spools while its collector is away.
    """
    global _spool_gauge
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return
    if _spool_gauge is None:
        from ray.util.metrics import Gauge

        _spool_gauge = Gauge(
            SPOOL_METRIC, description="otel-valgen records waiting in this process's spool", tag_keys=("run_id",)
        )
    _spool_gauge.set(records, tags={"run_id": run_id})
