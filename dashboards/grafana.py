"""Small builders for the parts of Grafana's dashboard JSON model (schemaVersion 41) we use.

Each returns a plain dict, so a dashboard is an ordinary data structure that serialises the
same way every time. Only the fields a panel needs are set; Grafana fills in the rest.
"""

from __future__ import annotations

import re
from typing import Any

JSON = dict[str, Any]

SCHEMA_VERSION = 41
# The Loki datasource is chosen by a dashboard variable, so that the dashboard also works in
# a Grafana whose Loki datasource has another uid; the compose stack provisions this uid.
DATASOURCE_VARIABLE = "loki"
DEFAULT_DATASOURCE_UID = "valgen-loki"
DATASOURCE: JSON = {"type": "loki", "uid": f"${{{DATASOURCE_VARIABLE}}}"}


def loki_target(ref_id: str, expr: str, *, instant: bool = False, max_lines: int | None = None) -> JSON:
    """A Loki query: a log query over the time range, or an instant metric query."""
    target: JSON = {
        "datasource": DATASOURCE,
        "editorMode": "code",
        "expr": expr,
        "queryType": "instant" if instant else "range",
        "refId": ref_id,
    }
    if max_lines is not None:
        target["maxLines"] = max_lines
    return target


def grid(x: int, y: int, w: int, h: int) -> JSON:
    """A panel's position on the 24-column grid."""
    return {"h": h, "w": w, "x": x, "y": y}


def extract_label_fields() -> JSON:
    """Turn the labels of each log line (stream labels, structured metadata, parsed fields) into columns."""
    options = {"format": "auto", "keepTime": False, "replace": False, "source": "labels"}
    return {"id": "extractFields", "options": options}


def convert_to_number(*fields: str) -> JSON:
    """Convert string columns (Loki gives every label as a string) into numbers."""
    conversions = [{"destinationType": "number", "targetField": field} for field in fields]
    return {"id": "convertFieldType", "options": {"conversions": conversions, "fields": {}}}


def sort_by(*fields: str) -> JSON:
    """Sort rows by the given columns, ascending."""
    return {"id": "sortBy", "options": {"sort": [{"desc": False, "field": field} for field in fields]}}


def organize(columns: dict[str, str]) -> JSON:
    """Keep only `columns` (name -> header), in this order; every other column is hidden."""
    return {
        "id": "organize",
        "options": {
            "excludeByName": {},
            "includeByName": dict.fromkeys(columns, True),
            "indexByName": {name: index for index, name in enumerate(columns)},
            "renameByName": {name: header for name, header in columns.items() if header != name},
        },
    }


def link_to_variable(title: str, variable: str, keep: list[str]) -> JSON:
    """A data link (on a column) that reloads this dashboard with `variable` set to the clicked value.

    The time range and the variables in `keep` stay as they are.
    """
    kept = "".join(f"&${{{name}:queryparam}}" for name in keep if name != variable)
    value = "${__value.raw:percentencode}"
    return {"title": title, "url": f"/d/${{__dashboard.uid}}?${{__url_time_range}}{kept}&var-{variable}={value}"}


def column_override(names: list[str], properties: list[JSON]) -> JSON:
    """Field config for one column, matched by any of `names` (its Loki name or its header)."""
    pattern = "^(" + "|".join(re.escape(name) for name in dict.fromkeys(names)) + ")$"
    return {"matcher": {"id": "byRegexp", "options": pattern}, "properties": properties}


def table_panel(
    panel_id: int,
    title: str,
    description: str,
    position: JSON,
    targets: list[JSON],
    transformations: list[JSON],
    overrides: list[JSON] | None = None,
) -> JSON:
    """A table panel."""
    return {
        "datasource": DATASOURCE,
        "description": description,
        "fieldConfig": {
            "defaults": {"custom": {"align": "auto", "cellOptions": {"type": "auto"}, "inspect": True}},
            "overrides": overrides or [],
        },
        "gridPos": position,
        "id": panel_id,
        "options": {"cellHeight": "md", "footer": {"show": False}, "showHeader": True},
        "targets": targets,
        "title": title,
        "transformations": transformations,
        "type": "table",
    }


def barchart_panel(
    panel_id: int,
    title: str,
    description: str,
    position: JSON,
    targets: list[JSON],
    transformations: list[JSON],
    x_field: str,
    unit: str = "none",
) -> JSON:
    """A bar chart with a category x axis (the step), one bar group per row."""
    return {
        "datasource": DATASOURCE,
        "description": description,
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "gridPos": position,
        "id": panel_id,
        "options": {
            "barWidth": 0.8,
            "groupWidth": 0.8,
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "orientation": "vertical",
            "showValue": "auto",
            "stacking": "none",
            "tooltip": {"mode": "multi", "sort": "none"},
            "xField": x_field,
            "xTickLabelRotation": 0,
        },
        "targets": targets,
        "title": title,
        "transformations": transformations,
        "type": "barchart",
    }


def text_panel(panel_id: int, title: str, position: JSON, markdown: str) -> JSON:
    """A markdown text panel."""
    return {
        "gridPos": position,
        "id": panel_id,
        "options": {"content": markdown, "mode": "markdown"},
        "title": title,
        "type": "text",
    }


def datasource_variable(name: str, label: str, plugin: str, default_uid: str) -> JSON:
    """A variable choosing a datasource of one plugin type."""
    return {
        "current": {"text": "Loki", "value": default_uid},
        "hide": 0,
        "label": label,
        "name": name,
        "query": plugin,
        "refresh": 1,
        "type": "datasource",
    }


def label_values_variable(name: str, label: str, stream_label: str) -> JSON:
    """A variable listing the values of a Loki index label, with "All" matching any value."""
    return {
        "allValue": ".+",
        "current": {"text": "All", "value": "$__all"},
        "datasource": DATASOURCE,
        "definition": f"label_values({stream_label})",
        "hide": 0,
        "includeAll": True,
        "label": label,
        "multi": False,
        "name": name,
        "query": {"label": stream_label, "refId": "LokiVariableQueryEditor-VariableQuery", "stream": "", "type": 1},
        "refresh": 2,
        "sort": 1,
        "type": "query",
    }


def textbox_variable(name: str, label: str, default: str, description: str) -> JSON:
    """A free-text variable (used as a LogQL regular expression)."""
    return {
        "current": {"text": default, "value": default},
        "description": description,
        "hide": 0,
        "label": label,
        "name": name,
        "query": default,
        "type": "textbox",
    }


def dashboard_model(uid: str, title: str, description: str, variables: list[JSON], panels: list[JSON]) -> JSON:
    """The dashboard object."""
    return {
        "annotations": {"list": []},
        "description": description,
        "editable": False,
        "fiscalYearStartMonth": 0,
        "graphTooltip": 1,
        "links": [],
        "panels": panels,
        "refresh": "1m",
        "schemaVersion": SCHEMA_VERSION,
        "tags": ["otel-valgen", "loki"],
        "templating": {"list": variables},
        "time": {"from": "now-24h", "to": "now"},
        "timepicker": {},
        "timezone": "utc",
        "title": title,
        "uid": uid,
        "version": 1,
    }
