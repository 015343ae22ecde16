"""The one serialisation of a dashboard: stable key order, two-space indent, final newline."""

from __future__ import annotations

import json

from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import Dashboard


def render(dashboard: Dashboard) -> str:
    """Dashboard JSON text exactly as committed (the SDK's JSON encoding, keys sorted)."""
    return json.dumps(dashboard, cls=JSONEncoder, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
