"""The "Pipeline health" row: the collector's and the exporter service's own metrics, from Prometheus.

The sampler's metrics are the collector's own telemetry (collector-config/collector.yaml,
``service.telemetry.metrics``, port 8888), named as the collector exposes them: ``otelcol_``
before the name of collector/valgensamplerprocessor/metadata.yaml, with neither a ``_total``
nor a unit suffix (the collector's Prometheus reader leaves both out; a non-monotonic sum such
as ``groups_open`` is a gauge). The exporter service's are ``valgen_exporter_*``
(otel_valgen/exporter/metrics.py, ``--metrics-address``, port 4419 in the compose stack).
tests/deploy/test_dashboard.py checks every name and label here against those two sources.

In the compose stack, Prometheus (docker/prometheus/prometheus.yml) scrapes both; elsewhere
(Kubernetes) the ``prometheus`` variable picks the user's Prometheus datasource.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as dashboard_builders
from grafana_foundation_sdk.builders import prometheus, stat, text, timeseries
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.models import dashboard as dashboard_models
from grafana_foundation_sdk.models.common import (
    BigValueColorMode,
    BigValueGraphMode,
    BigValueTextMode,
    LegendDisplayMode,
    LegendPlacement,
    SortOrder,
    TooltipDisplayMode,
)
from grafana_foundation_sdk.models.dashboard import GridPos, ValueMap, ValueMappingResult
from grafana_foundation_sdk.models.prometheus import QueryEditorMode
from grafana_foundation_sdk.models.text import TextMode

from dashboards import parts
from dashboards.parts import PROMETHEUS, aggregated, grid, per_second

TITLE = "Pipeline health"

# The collector's own telemetry: the sampler (collector/valgensamplerprocessor/metadata.yaml).
SAMPLER = "otelcol_valgen_sampler_"
GROUPS_OPEN = SAMPLER + "groups_open"
GROUPS_CLOSED = SAMPLER + "groups_closed"
RECORDS_LATE = SAMPLER + "records_late"
RECORDS_DROPPED = SAMPLER + "records_dropped"
# The exporter service (otel_valgen/exporter/metrics.py).
EXPORTER = "valgen_exporter_"
REQUESTS = EXPORTER + "requests_total"
STEPS_FLAGGED = EXPORTER + "steps_flagged_total"
STEPS = EXPORTER + "steps_total"
STEPS_HELD = EXPORTER + "steps_held"
STEPS_HELD_LIMIT = EXPORTER + "steps_held_limit"
OLDEST_HELD_AGE = EXPORTER + "oldest_held_step_age_seconds"
BACKEND_UP = EXPORTER + "backend_up"

# A metric of the collector appears at its first change (no late record yet: no series), so its
# panels say so rather than "No data"; the exporter's series exist from its start.
NOT_COUNTED = "None counted yet (or the collector is not scraped)"

INTRO = """\
The pipeline's own metrics, from Prometheus (the **prometheus** variable): the sampler's, from
the collector's telemetry (`otelcol_valgen_sampler_*`, port 8888), and the exporter service's
(`valgen_exporter_*`, port 4419). Rates are per second.
"""


def query(ref_id: str, expr: str, legend: str) -> prometheus.Dataquery:
    """A PromQL range query, as written in the code editor, each series named by `legend`."""
    return (
        prometheus.Dataquery()
        .ref_id(ref_id)
        .datasource(PROMETHEUS)
        .editor_mode(QueryEditorMode.CODE)
        .range()
        .expr(expr)
        .legend_format(legend)
    )


def chart(
    panel_id: int,
    title: str,
    description: str,
    position: GridPos,
    unit: str,
    *queries: prometheus.Dataquery,
    no_value: str | None = None,
) -> timeseries.Panel:
    """A time series panel of Prometheus queries, from 0 up; `no_value` is shown while they return nothing."""
    panel = (
        timeseries.Panel()
        .id(panel_id)
        .title(title)
        .description(description)
        .grid_pos(position)
        .datasource(PROMETHEUS)
        .unit(unit)
        .min(0)
        .legend(
            common_builders.VizLegendOptions()
            .display_mode(LegendDisplayMode.LIST)
            .placement(LegendPlacement.BOTTOM)
            .show_legend(True)
        )
        .tooltip(common_builders.VizTooltipOptions().mode(TooltipDisplayMode.MULTI).sort(SortOrder.NONE))
    )
    for each in queries:
        panel.with_target(each)
    if no_value is not None:
        panel.no_value(no_value)
    return panel


def backend_up(panel_id: int, position: GridPos) -> stat.Panel:
    """Each backend's last backend_up: up (green) or down (red)."""
    mapping = ValueMap(
        options={
            "0": ValueMappingResult(text="down", color="red", index=0),
            "1": ValueMappingResult(text="up", color="green", index=1),
        }
    )
    return (
        stat.Panel()
        .id(panel_id)
        .title("Exporter: backend up")
        .description(
            f"{BACKEND_UP}: down while the last write found the tracker unavailable (the steps are held and "
            "retried), else up."
        )
        .grid_pos(position)
        .datasource(PROMETHEUS)
        .with_target(query("A", aggregated("min", BACKEND_UP, ("backend",)), "{{backend}}"))
        .mappings([mapping])
        .reduce_options(common_builders.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
        .color_mode(BigValueColorMode.BACKGROUND)
        .graph_mode(BigValueGraphMode.NONE)
        .text_mode(BigValueTextMode.VALUE_AND_NAME)
    )


def panels(top: int, first_id: int) -> list[Builder[dashboard_models.Panel]]:
    """The row's panels, below its header at grid row `top`, with ids from `first_id`."""
    ids = iter(range(first_id, first_id + 100))
    about = text.Panel().id(next(ids)).title(TITLE).grid_pos(grid(0, top, 24, 2)).mode(TextMode.MARKDOWN).content(INTRO)
    y = top + 2
    return [
        about,
        chart(
            next(ids),
            "Sampler: open groups",
            f"{GROUPS_OPEN}: steps (groups) the sampler holds open, per collector instance. It should fall back "
            "to 0 after each validation; a steady rise means steps that never end (see closed by reason). The "
            "collector exposes it once a group stays open past the request that opened it (a step sent whole in "
            "one request opens and closes at once): until then there is no series, and no open group.",
            grid(0, y, 8, 8),
            "none",
            query("A", aggregated("sum", GROUPS_OPEN, ("instance",)), "{{instance}}"),
            no_value=NOT_COUNTED,
        ),
        chart(
            next(ids),
            "Sampler: groups closed by reason",
            f"{GROUPS_CLOSED}: complete (every source ended), wait (decision_wait of silence), max_duration (a "
            "source never ended), max_groups (too many open groups) or shutdown.",
            grid(8, y, 8, 8),
            "cps",
            query("A", per_second(GROUPS_CLOSED, ("reason",)), "{{reason}}"),
            no_value=NOT_COUNTED,
        ),
        chart(
            next(ids),
            "Sampler: late records",
            f"{RECORDS_LATE}: records that arrived for a step already closed (dropped, or forwarded with "
            "late_records: forward). Steady late records mean decision_wait is too short for the job.",
            grid(16, y, 8, 8),
            "cps",
            query("A", per_second(RECORDS_LATE), "late"),
            no_value=NOT_COUNTED,
        ),
        chart(
            next(ids),
            "Sampler: records dropped by reason",
            f"{RECORDS_DROPPED}: missing_attribute or invalid_attribute (a record that breaks the wire contract) "
            "and late (a late record dropped).",
            grid(0, y + 8, 8, 8),
            "cps",
            query("A", per_second(RECORDS_DROPPED, ("reason",)), "{{reason}}"),
            no_value=NOT_COUNTED,
        ),
        chart(
            next(ids),
            "Exporter: requests by outcome",
            f"{REQUESTS}: the collector's OTLP requests: accepted; refused (503, the collector retries: a backend "
            "holds too many steps or every backend is failing); malformed (4xx, not retried); failed (500).",
            grid(8, y + 8, 8, 8),
            "reqps",
            query("A", per_second(REQUESTS, ("outcome",)), "{{outcome}}"),
        ),
        chart(
            next(ids),
            "Exporter: steps flagged by reason",
            f"{STEPS_FLAGGED}: steps written with a warning: without_summary, summary_without_records, split "
            "(attempts at once), unhooked, merged (a part of another sampler merged in, the step written again), "
            "part_unmerged.",
            grid(16, y + 8, 8, 8),
            "cps",
            query("A", per_second(STEPS_FLAGGED, ("reason",)), "{{reason}}"),
        ),
        chart(
            next(ids),
            "Exporter: steps written per backend and kind",
            f'{STEPS} with outcome="written": steps each tracker backend wrote, validation and rollout.',
            grid(0, y + 16, 8, 8),
            "cps",
            query("A", per_second(STEPS, ("backend", "kind"), 'outcome="written"'), "{{backend}} {{kind}}"),
        ),
        chart(
            next(ids),
            "Exporter: steps held per backend",
            f"{STEPS_HELD}: steps queued for a backend and not yet written. At the limit ({STEPS_HELD_LIMIT}, "
            "--max-pending-steps) the exporter refuses requests and the collector's queue holds them.",
            grid(8, y + 16, 8, 8),
            "none",
            query("A", aggregated("sum", STEPS_HELD, ("backend",)), "{{backend}}"),
            query("B", aggregated("max", STEPS_HELD_LIMIT), "limit"),
        ),
        chart(
            next(ids),
            "Exporter: oldest held step age per backend",
            f"{OLDEST_HELD_AGE}: how long the oldest step held for a backend has waited (0 when none). It grows "
            "while a tracker is down.",
            grid(16, y + 16, 8, 8),
            "s",
            query("A", aggregated("max", OLDEST_HELD_AGE, ("backend",)), "{{backend}}"),
        ),
        backend_up(next(ids), grid(0, y + 24, 24, 4)),
    ]


def row(top: int, row_id: int) -> Builder[dashboard_models.RowPanel]:
    """The row's header at grid row `top` (open: its panels follow it on the dashboard)."""
    return dashboard_builders.Row(TITLE).id(row_id).grid_pos(grid(0, top, 24, 1)).collapsed(False)


def variable() -> dashboard_builders.DatasourceVariable:
    """The Prometheus datasource of the row, the compose stack's by default."""
    return (
        dashboard_builders.DatasourceVariable(parts.PROMETHEUS_VARIABLE)
        .label("Prometheus")
        .type("prometheus")
        .hide(dashboard_models.VariableHide.DONT_HIDE)
        .current(dashboard_models.VariableOption(text="Prometheus", value=parts.DEFAULT_PROMETHEUS_UID))
    )
