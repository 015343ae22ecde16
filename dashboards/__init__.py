"""Grafana dashboards of otel-valgen, written as code with grafana-foundation-sdk.

`python -m dashboards` writes every dashboard's JSON under ``docker/grafana/dashboards/``
(provisioned by the compose stack); `python -m dashboards --check` exits non-zero when a
committed file differs from what the code generates.
"""

from __future__ import annotations

from collections.abc import Callable

from grafana_foundation_sdk.models.dashboard import Dashboard

from dashboards import validation_generations

__all__ = ["DASHBOARDS"]

# File name under docker/grafana/dashboards/ -> function building the dashboard.
DASHBOARDS: dict[str, Callable[[], Dashboard]] = {"validation-generations.json": validation_generations.dashboard}
