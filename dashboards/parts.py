"""The pieces of a panel that grafana-foundation-sdk types only loosely, as SDK model objects.

The SDK has builders for dashboards, panels, queries and variables, but a transformation's
options and a field override's property value are free-form (``object``) in Grafana's schema.
These helpers give them the shape Grafana's transformations and overrides expect.
"""

from __future__ import annotations

import re

from grafana_foundation_sdk.models.common import DataSourceRef
from grafana_foundation_sdk.models.dashboard import DataTransformerConfig, DynamicConfigValue, GridPos

# The Loki datasource is chosen by a dashboard variable, so that the dashboard also works in a
# Grafana whose Loki datasource has another uid; the compose stack provisions this uid.
DATASOURCE_VARIABLE = "loki"
DEFAULT_DATASOURCE_UID = "valgen-loki"
LOKI = DataSourceRef(type_val="loki", uid=f"${{{DATASOURCE_VARIABLE}}}")
# The Prometheus datasource of the "Pipeline health" row (the collector's and the exporter
# service's own metrics), chosen the same way; the compose stack provisions this uid
# (docker/grafana/provisioning/datasources/prometheus.yaml).
PROMETHEUS_VARIABLE = "prometheus"
DEFAULT_PROMETHEUS_UID = "valgen-prometheus"
PROMETHEUS = DataSourceRef(type_val="prometheus", uid=f"${{{PROMETHEUS_VARIABLE}}}")


def per_second(metric: str, by: tuple[str, ...] = (), matchers: str = "") -> str:
    """PromQL: the per-second rate of counter `metric` (every series, optionally only `matchers`), summed `by`."""
    grouping = f" by ({', '.join(by)})" if by else ""
    selector = f"{metric}{{{matchers}}}" if matchers else metric
    return f"sum{grouping} (rate({selector}[$__rate_interval]))"


def aggregated(function: str, metric: str, by: tuple[str, ...] = ()) -> str:
    """PromQL: gauge `metric` aggregated with `function` (sum, max, min) `by` the given labels."""
    grouping = f" by ({', '.join(by)})" if by else ""
    return f"{function}{grouping} ({metric})"


def extract_label_fields() -> DataTransformerConfig:
    """Turn each log line's labels (stream labels, structured metadata, parsed fields) into columns."""
    options = {"format": "auto", "keepTime": False, "replace": False, "source": "labels"}
    return DataTransformerConfig(id_val="extractFields", options=options)


def convert_to_number(*fields: str) -> DataTransformerConfig:
    """Convert string columns (Loki gives every label as a string) into numbers."""
    conversions = [{"destinationType": "number", "targetField": field} for field in fields]
    return DataTransformerConfig(id_val="convertFieldType", options={"conversions": conversions, "fields": {}})


def sort_by(*fields: str, descending: bool = False) -> DataTransformerConfig:
    """Sort rows by the given columns, ascending (or descending).

    Grafana 12's sortBy reads only the first entry of the list (its source says so: multi-sort
    is for future versions), so the first field alone decides the order Grafana shows.
    """
    return DataTransformerConfig(id_val="sortBy", options={"sort": [{"desc": descending, "field": f} for f in fields]})


def organize(columns: dict[str, str], keep_others: bool = False) -> DataTransformerConfig:
    """Show `columns` (name -> header) first, in this order; every other column is hidden unless `keep_others`.

    Kept other columns follow, in the order they came (Grafana puts columns without an index last).
    """
    options = {
        "excludeByName": {},
        "includeByName": {} if keep_others else dict.fromkeys(columns, True),
        "indexByName": {name: index for index, name in enumerate(columns)},
        "renameByName": {name: header for name, header in columns.items() if header != name},
    }
    return DataTransformerConfig(id_val="organize", options=options)


def keep_columns(names: list[str], pattern: str) -> DataTransformerConfig:
    """Keep the columns named `names` and those whose whole name matches `pattern`; hide every other.

    Grafana anchors a pattern that does not start with `/` (``^pattern$``).
    """
    return DataTransformerConfig(id_val="filterFieldsByName", options={"include": {"names": names, "pattern": pattern}})


def rename_by_regex(regex: str, rename_pattern: str) -> DataTransformerConfig:
    """Rename the columns whose whole name matches `regex` to `rename_pattern` (``$1``: its first group)."""
    return DataTransformerConfig(id_val="renameByRegex", options={"regex": regex, "renamePattern": rename_pattern})


def labels_to_columns() -> DataTransformerConfig:
    """Metric series labels (the `by` label of an aggregation) as columns."""
    return DataTransformerConfig(id_val="labelsToFields", options={"mode": "columns"})


def merge() -> DataTransformerConfig:
    """Several queries' frames merged into one table (rows joined on equal columns)."""
    return DataTransformerConfig(id_val="merge", options={})


def hide_columns(*names: str) -> DataTransformerConfig:
    """Hide the given columns and keep every other one."""
    options = {"excludeByName": dict.fromkeys(names, True), "indexByName": {}, "renameByName": {}}
    return DataTransformerConfig(id_val="organize", options=options)


PART_TAG_PATTERN = r"^(.*/[0-9]+)@[0-9a-f]*$"
"""A sample id and its part's tag (README, *Sample ids*): group 1 is the id without the tag."""


def column_pattern(*names: str) -> str:
    """An anchored regular expression matching a column by any of `names` (its Loki name or its header)."""
    return "^(" + "|".join(re.escape(name) for name in dict.fromkeys(names)) + ")$"


def wrap_text() -> DynamicConfigValue:
    """Table cells that wrap long text instead of cutting it."""
    return DynamicConfigValue(id_val="custom.cellOptions", value={"type": "auto", "wrapText": True})


def min_width(pixels: int) -> DynamicConfigValue:
    """A table column at least `pixels` wide."""
    return DynamicConfigValue(id_val="custom.minWidth", value=pixels)


def link_to_variable(title: str, variable: str, keep: list[str], shown: bool = False) -> DynamicConfigValue:
    """A data link (on a column) that reloads this dashboard with `variable` set to the clicked value.

    The time range and the variables in `keep` stay as they are. `shown`: the value as the
    column displays it (after its value mappings), else the raw value.
    """
    kept = "".join(f"&${{{name}:queryparam}}" for name in keep if name != variable)
    value = "${__value.text:percentencode}" if shown else "${__value.raw:percentencode}"
    url = f"/d/${{__dashboard.uid}}?${{__url_time_range}}{kept}&var-{variable}={value}"
    return DynamicConfigValue(id_val="links", value=[{"title": title, "url": url}])


def without_part_tag() -> DynamicConfigValue:
    """Show sample ids without their part's tag: `<prompt>/<i>@<tag>` as `<prompt>/<i>`, the same at every step."""
    mapping = {"type": "regex", "options": {"pattern": PART_TAG_PATTERN, "result": {"text": "$1", "index": 0}}}
    return DynamicConfigValue(id_val="mappings", value=[mapping])


def grid(x: int, y: int, w: int, h: int) -> GridPos:
    """A panel's position on the 24-column grid."""
    return GridPos(h=h, w=w, x=x, y=y)
