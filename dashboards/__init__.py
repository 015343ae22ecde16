"""Grafana dashboards of otel-valgen, written as code.

`python -m dashboards` writes every dashboard's JSON under ``docker/grafana/dashboards/``
(provisioned by the compose stack); `python -m dashboards --check` exits non-zero when a
committed file differs from what the code generates.
"""

from __future__ import annotations

from dashboards.validation_generations import dashboard as validation_generations

__all__ = ["DASHBOARDS", "validation_generations"]

# File name under docker/grafana/dashboards/ -> function building the dashboard.
DASHBOARDS = {"validation-generations.json": validation_generations}
