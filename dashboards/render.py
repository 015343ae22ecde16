"""The one serialisation of a dashboard: stable key order, two-space indent, final newline."""

from __future__ import annotations

import json

from dashboards.grafana import JSON


def render(dashboard: JSON) -> str:
    """Dashboard JSON text exactly as committed."""
    return json.dumps(dashboard, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
