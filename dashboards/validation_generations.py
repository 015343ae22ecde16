"""The "Validation generations" dashboard: what the sampler kept, read from Loki.

Its last row, "Pipeline health" (dashboards/pipeline_health.py), reads the collector's and the
exporter service's own metrics from Prometheus instead.

Built with grafana-foundation-sdk's builders (dashboard, table, bar chart and text panels,
Loki queries, variables); dashboards/parts.py has what the SDK leaves free-form.

How Loki stores what the collector sends (docker/loki/loki.yaml): the index labels are only
``service_name`` (and namespace/environment when set); every record attribute is structured
metadata with dots turned into underscores (``valgen.run_id`` -> ``valgen_run_id``); the
record's trace id is the structured metadata ``trace_id``; the map body
``{input, output, ground_truth}`` is the log line, as JSON. Loki does not keep the OTLP event
name, so the queries tell the records apart by attributes only the sampler sets: kept
generations carry ``valgen.rank``, step summaries ``valgen.closed_reason``, and late
generations forwarded with ``late_records: forward`` carry ``valgen.late = true``.

Two kinds of records share the pipeline (``valgen.kind``): validation (absent on records of
releases before kinds) and training rollouts. The validation panels keep every record whose
kind is not ``rollout``, so older records still show; the rollout panels keep only rollouts;
the prompt panel, like ``otel-valgen show --prompt``, shows both.

Run, step and prompt are structured metadata, not labels (one stream per run or step would
make Loki's index grow without bound), so Loki's label API cannot list them: they are
free-text variables (regular expressions, ``.+`` = all), and the tables link to them.
"""

from __future__ import annotations

from typing import cast

from grafana_foundation_sdk.builders import barchart, loki, table, text
from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as dashboard_builders
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.models import dashboard as dashboard_models
from grafana_foundation_sdk.models.common import (
    FieldTextAlignment,
    LegendDisplayMode,
    LegendPlacement,
    SortOrder,
    StackingMode,
    TableAutoCellOptions,
    TableCellHeight,
    TooltipDisplayMode,
    VisibilityMode,
    VizOrientation,
)
from grafana_foundation_sdk.models.dashboard import (
    DashboardCursorSync,
    DataTransformerConfig,
    DynamicConfigValue,
    GridPos,
    VariableHide,
    VariableOption,
    VariableRefresh,
    VariableSort,
)
from grafana_foundation_sdk.models.loki import LokiQueryType, QueryEditorMode
from grafana_foundation_sdk.models.text import TextMode

from dashboards import parts, pipeline_health, trajectory
from dashboards.parts import LOKI, grid
from otel_valgen import contract

UID = "valgen-generations"
TITLE = "Validation generations"


def loki_name(attribute: str) -> str:
    """The name Loki gives an OTLP attribute (structured metadata or label)."""
    return attribute.replace(".", "_")


RUN_ID = loki_name(contract.RUN_ID)
STEP = loki_name(contract.STEP)
RANK = loki_name(contract.RANK)
SAMPLE_ID = loki_name(contract.SAMPLE_ID)
SCORE = loki_name(contract.SCORE)
DATA_SOURCE = loki_name(contract.DATA_SOURCE)
SOURCE = loki_name(contract.SOURCE)
SEEN = loki_name(contract.SEEN)
SCORE_COUNT = loki_name(contract.SCORE_COUNT)
SCORE_MEAN = loki_name(contract.SCORE_MEAN)
KEPT = loki_name(contract.KEPT)
LATE = loki_name(contract.LATE)
MISSING = loki_name(contract.MISSING)
SOURCES = loki_name(contract.SOURCES)
SOURCES_EXPECTED = loki_name(contract.SOURCES_EXPECTED)
CLOSED_REASON = loki_name(contract.CLOSED_REASON)
ATTEMPT = loki_name(contract.ATTEMPT)
KIND = loki_name(contract.KIND)
PROMPT_ID = loki_name(contract.PROMPT_ID)
SLOTS = loki_name(contract.SLOTS)  # keyed, lowest, highest: set on kept records of steps that keep extremes
ADVANTAGE = loki_name(contract.ADVANTAGE)
RESPONSE_LENGTH = loki_name(contract.RESPONSE_LENGTH)
OUTPUT_LENGTH = loki_name(contract.OUTPUT_LENGTH)  # the output's UTF-8 bytes, set only when it was cut
TRUNCATED = loki_name(contract.TRUNCATED)
PROMPTS_SEEN = loki_name(contract.PROMPTS_SEEN)
PROMPTS_KEPT = loki_name(contract.PROMPTS_KEPT)
# The trainer's parameter version of a fully-async rollout, when the job sends it as an
# attribute; sent as an extra column (valgen.extra.param_version) it shows among the extras.
PARAM_VERSION = "valgen_param_version"
EXTRA = loki_name(contract.EXTRA_PREFIX)  # valgen_extra_<name>: the extra columns of a generation
# A kept rollout response's per-token figures (valgen.mismatch.<figure>), and a rollout step
# summary's distribution of every response's (valgen.mismatch, a map Loki flattens to
# valgen_mismatch_<figure>_<p50|p90|p99|max|mean>; otel_valgen/tokens.py).
MISMATCH = loki_name(contract.MISMATCH_PREFIX)
MISMATCH_COLUMNS = tuple(f"{MISMATCH}{name}" for name in ("mean_abs", "max_abs", "kl", "masked"))
TRACE_ID = "trace_id"  # Loki's structured metadata for LogRecord.trace_id (hex)
SERVICE = loki_name("service.name")  # the one index label the queries select streams by

# The stream selector and the filters shared by every query.
STREAMS = f'{{{SERVICE}=~"$service"}}'
OF_RUN = f'| {RUN_ID}=~"$run"'
# The generations of some data sources (valgen.data_source; `.*`, the default, also matches
# generations without one). Step summaries are not filtered: they are per step.
OF_DATA_SOURCE = f'| {DATA_SOURCE}=~"$data_source"'
KEPT_ONLY = f'| {RANK}!=""'
SUMMARIES_ONLY = f'| {CLOSED_REASON}!=""'
# != rather than = validation: records of releases before kinds have no valgen_kind at all.
VALIDATION = f'| {KIND}!="{contract.KIND_ROLLOUT}"'
ROLLOUTS = f'| {KIND}="{contract.KIND_ROLLOUT}"'
BODY = f"| json {contract.BODY_INPUT}, {contract.BODY_OUTPUT}, {contract.BODY_GROUND_TRUTH}"

Q_STEP_GENERATIONS = f'{STREAMS} {OF_RUN} {VALIDATION} | {STEP}=~"$step" {OF_DATA_SOURCE} {KEPT_ONLY} {BODY}'
# One prompt's kept rows at every step, of both kinds, as `otel-valgen show --prompt ID` lists them:
# ID is a sample id with or without its response index and part tag (`<base>/<i>@<tag>`, README,
# *Sample ids*: the tag differs at every step), or a prompt's base id, which is also a rollout's
# valgen.prompt_id (its sample ids are `<prompt id>/<i>@<tag>`).
PROMPT_MATCH = f'{SAMPLE_ID}=~"$sample(/[0-9]+)?(@[0-9a-f]*)?"'
Q_PROMPT_ACROSS_STEPS = f"{STREAMS} {OF_RUN} | {PROMPT_MATCH} {OF_DATA_SOURCE} {KEPT_ONLY} {BODY}"
Q_SUMMARIES = f"{STREAMS} {OF_RUN} {VALIDATION} {SUMMARIES_ONLY}"
Q_LATE = f'{STREAMS} {OF_RUN} | {LATE}="true" {OF_DATA_SOURCE} {BODY}'
Q_MEAN_SCORE = (
    f'avg by ({STEP}) (avg_over_time({STREAMS} {OF_RUN} {VALIDATION} {OF_DATA_SOURCE} {KEPT_ONLY} | {SCORE}!="" '
    f'| unwrap {SCORE} | __error__="" [$__range]))'
)
Q_ROLLOUT_SUMMARIES = f"{STREAMS} {OF_RUN} {ROLLOUTS} {SUMMARIES_ONLY}"
Q_ROLLOUT_GENERATIONS = f'{STREAMS} {OF_RUN} {ROLLOUTS} | {STEP}=~"$step" {OF_DATA_SOURCE} {KEPT_ONLY} {BODY}'
# The kept responses of a rollout step that carry per-token figures (the most disagreeing first, in the table).
Q_MISMATCHED = f'{STREAMS} {OF_RUN} {ROLLOUTS} | {STEP}=~"$step" {OF_DATA_SOURCE} {KEPT_ONLY} | {MISMATCH}kl!="" {BODY}'


def rollout_summary_value(field: str) -> str:
    """One figure of the rollout step summaries per step (max, so a summary delivered twice counts once)."""
    return (
        f"max by ({STEP}) (max_over_time({STREAMS} {OF_RUN} {ROLLOUTS} {SUMMARIES_ONLY} "
        f'| unwrap {field} | __error__="" [$__range]))'
    )


# The step's distribution over every response (the summary): |trainer - rollout| per response, and the largest token.
MISMATCH_SERIES = (
    f"{MISMATCH}mean_abs_p50",
    f"{MISMATCH}mean_abs_p90",
    f"{MISMATCH}mean_abs_p99",
    f"{MISMATCH}max_abs_max",
)
# One kept generation of either kind (dashboards/trajectory.py), its line the body's rendering, turn by turn.
Q_TRAJECTORY = (
    f'{STREAMS} {OF_RUN} | {STEP}=~"$step" | {SAMPLE_ID}=~"${trajectory.VARIABLE}(@[0-9a-f]*)?" {KEPT_ONLY} {BODY} '
    + trajectory.LINE_FORMAT
)


def summary_count(field: str) -> str:
    """One figure of the validation step summaries per step (max, so a summary delivered twice counts once)."""
    return (
        f"max by ({STEP}) (max_over_time({STREAMS} {OF_RUN} {VALIDATION} {SUMMARIES_ONLY} "
        f'| unwrap {field} | __error__="" [$__range]))'
    )


VARIABLE_NAMES = [
    parts.DATASOURCE_VARIABLE,
    "service",
    "run",
    "step",
    "sample",
    "data_source",
    trajectory.VARIABLE,
    parts.PROMETHEUS_VARIABLE,
]
WIDE_TEXT = [parts.wrap_text(), parts.min_width(320)]


def logs_query(ref_id: str, expr: str, max_lines: int) -> loki.Dataquery:
    """A Loki log query over the dashboard's time range, as written in the code editor."""
    return (
        loki.Dataquery()
        .ref_id(ref_id)
        .datasource(LOKI)
        .editor_mode(QueryEditorMode.CODE)
        .query_type(LokiQueryType.RANGE)
        .expr(expr)
        .max_lines(max_lines)
    )


def instant_query(ref_id: str, expr: str) -> loki.Dataquery:
    """A Loki metric query evaluated once, at the end of the time range."""
    return (
        loki.Dataquery()
        .ref_id(ref_id)
        .datasource(LOKI)
        .editor_mode(QueryEditorMode.CODE)
        .query_type(LokiQueryType.INSTANT)
        .expr(expr)
    )


def table_panel(
    panel_id: int,
    title: str,
    description: str,
    position: GridPos,
    query: loki.Dataquery,
    transformations: list[DataTransformerConfig],
) -> table.Panel:
    """A table of log lines: one row per line, its labels as columns."""
    return (
        table.Panel()
        .id(panel_id)
        .title(title)
        .description(description)
        .grid_pos(position)
        .datasource(LOKI)
        .with_target(query)
        .transformations(transformations)
        .align(FieldTextAlignment.AUTO)
        .cell_options(TableAutoCellOptions())
        .inspect(True)
        .cell_height(TableCellHeight.MD)
        .footer(common_builders.TableFooterOptions().show(False))
        .show_header(True)
    )


def with_columns(panel: table.Panel, *columns: tuple[list[str], list[DynamicConfigValue]]) -> table.Panel:
    """Per-column settings, each column matched by its Loki name or its header."""
    for names, properties in columns:
        panel.override_by_regexp(parts.column_pattern(*names), properties)
    return panel


def text_columns(*fields: str) -> list[tuple[list[str], list[DynamicConfigValue]]]:
    """Wide, wrapping columns for long text (inputs, outputs)."""
    return [([field, field.replace("_", " ")], WIDE_TEXT) for field in fields]


def linked_column(field: str, header: str, title: str, variable: str) -> tuple[list[str], list[DynamicConfigValue]]:
    """A column whose values link to this dashboard with `variable` set to the clicked value."""
    return [field, header], [parts.link_to_variable(title, variable, keep=VARIABLE_NAMES)]


def trajectory_link() -> DynamicConfigValue:
    """A link from a sample id (its raw value, with its part's tag: one record) to the trajectory panel."""
    return parts.link_to_variable("Show this trajectory turn by turn", trajectory.VARIABLE, keep=VARIABLE_NAMES)


def sample_id_column(title: str) -> tuple[list[str], list[DynamicConfigValue]]:
    """The sample id column: ids without their part's tag, linking to the prompt across steps and to the trajectory."""
    prompt_link = parts.link_to_variable(title, "sample", keep=VARIABLE_NAMES, shown=True)
    value = [*cast(list[object], prompt_link.value), *cast(list[object], trajectory_link().value)]
    links = DynamicConfigValue(id_val="links", value=value)
    return [SAMPLE_ID, "sample id"], [parts.without_part_tag(), links]


def per_step_chart(
    panel_id: int, title: str, description: str, position: GridPos, queries: list[loki.Dataquery]
) -> barchart.Panel:
    """A bar chart with the step as category x axis: instant metric queries -> a row per step."""
    chart = (
        barchart.Panel()
        .id(panel_id)
        .title(title)
        .description(description)
        .grid_pos(position)
        .datasource(LOKI)
        .transformations(
            [
                parts.labels_to_columns(),
                parts.merge(),
                parts.hide_columns("Time"),
                parts.convert_to_number(STEP),
                parts.sort_by(STEP),
            ]
        )
        .unit("none")
        .x_field(STEP)
        .orientation(VizOrientation.VERTICAL)
        .bar_width(0.8)
        .group_width(0.8)
        .show_value(VisibilityMode.AUTO)
        .stacking(StackingMode.NONE)
        .x_tick_label_rotation(0)
        .legend(
            common_builders.VizLegendOptions()
            .display_mode(LegendDisplayMode.LIST)
            .placement(LegendPlacement.BOTTOM)
            .show_legend(True)
        )
        .tooltip(common_builders.VizTooltipOptions().mode(TooltipDisplayMode.MULTI).sort(SortOrder.NONE))
    )
    for query in queries:
        chart.with_target(query)
    return chart


INTRO = """\
Generations the otel-valgen sampler kept, read from Loki. **run**, **step** and **prompt**
are regular expressions over the records' structured metadata (`.+` = all): type a run id, or
click a step or a sample id in a table. Each row shows its trace id: every record of one
(run, step) shares it. Counts come from the sampler's `valgen.step.summary` records.
The panels up to *Late generations* show validation; training rollouts are below them.
"""
ROLLOUT_INTRO = """\
**Training rollouts** (`vg.log_rollouts`, `valgen.kind = rollout`): per step the sampler keeps
k prompts, each with **all** its responses (a GRPO group, whole), so that a response's advantage
reads next to its siblings'. Set **run** and **step** to one value each, or click a step in the
rollout steps table.
"""


def textbox(name: str, label: str, description: str, everything: str = ".+") -> dashboard_builders.TextBoxVariable:
    """A free-text variable used as a LogQL regular expression, ``everything`` (all) by default."""
    return (
        dashboard_builders.TextBoxVariable(name)
        .label(label)
        .description(description)
        .hide(VariableHide.DONT_HIDE)
        .default_value(everything)
        .current(VariableOption(text=everything, value=everything))
    )


def variables() -> list[Builder[dashboard_models.VariableModel]]:
    """Datasource, service (an index label), run, step, prompt, data source (structured metadata), Prometheus."""
    datasource = (
        dashboard_builders.DatasourceVariable(parts.DATASOURCE_VARIABLE)
        .label("Loki")
        .type("loki")
        .hide(VariableHide.DONT_HIDE)
        .current(VariableOption(text="Loki", value=parts.DEFAULT_DATASOURCE_UID))
    )
    service = (
        dashboard_builders.QueryVariable("service")
        .label("service")
        .hide(VariableHide.DONT_HIDE)
        .datasource(LOKI)
        # Loki's label-values query of the Loki datasource's variable editor (type 1).
        .query({"label": SERVICE, "refId": "LokiVariableQueryEditor-VariableQuery", "stream": "", "type": 1})
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(VariableSort.ALPHABETICAL_ASC)
        .multi(False)
        .include_all(True)
        .all_value(".+")
        .current(VariableOption(text="All", value="$__all"))
    )
    return [
        datasource,
        service,
        textbox("run", "run", f"Regular expression over {RUN_ID}, the training run."),
        textbox("step", "step", f"Regular expression over {STEP}, the trainer's step."),
        textbox(
            "sample",
            "prompt",
            f"Regular expression over {SAMPLE_ID} without its response index and part's tag: a prompt id "
            "(every response, validation and rollouts), or <prompt>/<i> (one response).",
        ),
        textbox(
            "data_source",
            "data source",
            f"Regular expression over {DATA_SOURCE}, the generation's data set (verl's data_source): "
            "the generation panels show those data sources only; .* (the default) also keeps generations without one.",
            everything=".*",
        ),
        trajectory.variable(),
        pipeline_health.variable(),
    ]


GENERATION_COLUMNS = {
    RUN_ID: "run",
    STEP: "step",
    ATTEMPT: "attempt",
    RANK: "rank",
    SLOTS: "slots",
    SAMPLE_ID: "sample id",
    contract.BODY_INPUT: "input",
    contract.BODY_OUTPUT: "output",
    contract.BODY_GROUND_TRUTH: "ground truth",
    SCORE: "score",
    RESPONSE_LENGTH: "response length",
    TRUNCATED: "truncated",
    DATA_SOURCE: "data source",
    SOURCE: "source",
    TRACE_ID: "trace id",
}
# Columns only some rows have: the response's tokens and whether it was cut (verl's rows, docs/verl.md).
GENERATION_OPTIONAL = (RESPONSE_LENGTH, TRUNCATED, SLOTS)  # slots: only steps that keep extremes
SUMMARY_COLUMNS = {
    RUN_ID: "run",
    STEP: "step",
    ATTEMPT: "attempt",
    SEEN: "seen",
    KEPT: "kept",
    LATE: "late",
    MISSING: "missing",
    SOURCES: "sources",
    SOURCES_EXPECTED: "sources expected",
    SCORE_COUNT: "scored",
    SCORE_MEAN: "mean score",
    CLOSED_REASON: "closed",
    TRACE_ID: "trace id",
}
PROMPT_COLUMNS = {
    STEP: "step",
    KIND: "kind",
    RANK: "rank",
    SAMPLE_ID: "sample id",
    SOURCE: "source",
    contract.BODY_OUTPUT: "output",
    SCORE: "score",
    RESPONSE_LENGTH: "response length",
    OUTPUT_LENGTH: "output bytes (cut)",
    ATTEMPT: "attempt",
    RUN_ID: "run",
    TRACE_ID: "trace id",
}
# Columns only some rows have: a rollout's response length, a cut output's size.
PROMPT_OPTIONAL = (RESPONSE_LENGTH, OUTPUT_LENGTH)
LATE_COLUMNS = {
    RUN_ID: "run",
    STEP: "step",
    KIND: "kind",
    SAMPLE_ID: "sample id",
    SOURCE: "source",
    TRACE_ID: "trace id",
}
ROLLOUT_SUMMARY_COLUMNS = {
    RUN_ID: "run",
    STEP: "step",
    ATTEMPT: "attempt",
    PROMPTS_SEEN: "prompts seen",
    PROMPTS_KEPT: "prompts kept",
    SEEN: "responses seen",
    KEPT: "responses kept",
    LATE: "late",
    MISSING: "missing",
    SOURCES: "sources",
    SCORE_COUNT: "rewarded",
    SCORE_MEAN: "mean reward",
    CLOSED_REASON: "closed",
    TRACE_ID: "trace id",
}
ROLLOUT_COLUMNS = {
    RUN_ID: "run",
    STEP: "step",
    ATTEMPT: "attempt",
    RANK: "rank",
    PROMPT_ID: "prompt id",
    contract.BODY_INPUT: "prompt",
    contract.BODY_OUTPUT: "response",
    SCORE: "reward",
    ADVANTAGE: "advantage",
    RESPONSE_LENGTH: "response length",
    TRUNCATED: "truncated",
    PARAM_VERSION: "param version",
    contract.BODY_GROUND_TRUTH: "ground truth",
    DATA_SOURCE: "data source",
    SAMPLE_ID: "sample id",
    SOURCE: "source",
    TRACE_ID: "trace id",
}


def panels() -> list[Builder[dashboard_models.Panel]]:
    """Every panel, top to bottom: validation, then training rollouts."""
    about = text.Panel().id(1).title("About").grid_pos(grid(0, 0, 24, 3)).mode(TextMode.MARKDOWN).content(INTRO)
    steps = table_panel(
        2,
        "Steps: seen, kept, late, missing",
        "One row per step summary the sampler emitted, one per attempt of a step (a resumed or retried run "
        "validates a step again as a new attempt; otel-valgen show and the wandb exporter show the latest "
        "complete one). closed = complete (every source ended), wait (decision_wait of silence), max_duration "
        "(a source never ended), max_groups or shutdown; missing > 0 means records a source announced never "
        "arrived. scored and mean score: the generations with a valid score among all the sources saw (not only "
        "the kept ones), and their mean.",
        grid(0, 3, 14, 9),
        logs_query("A", Q_SUMMARIES, max_lines=5000),
        [
            parts.extract_label_fields(),
            parts.convert_to_number(
                STEP, SEEN, KEPT, LATE, MISSING, SOURCES, SOURCES_EXPECTED, SCORE_COUNT, SCORE_MEAN
            ),
            parts.sort_by(RUN_ID, STEP, ATTEMPT),
            parts.organize(SUMMARY_COLUMNS),
        ],
    )
    counts = per_step_chart(
        3,
        "Seen, kept, late, missing per step",
        "From the step summaries. Choose one run: counts of several runs are not added up.",
        grid(14, 3, 10, 9),
        [
            instant_query(ref, summary_count(field))
            for ref, field in zip("ABCD", (SEEN, KEPT, LATE, MISSING), strict=True)
        ],
    )
    generations = table_panel(
        4,
        "Sampled generations of step $step",
        "The generations the sampler kept for the step, in sampling order (rank), for each attempt of it. "
        "response length and truncated: the response's tokens and whether it was cut at the length limit, when "
        "the job sends them (verl's rows do). The extra columns a job logs (log_generations(..., extra=...), "
        "valgen.extra.<name>; verl's reward_extra_info) come last, named as Loki stores them (characters other "
        "than letters, digits and _ become _).",
        grid(0, 12, 24, 12),
        logs_query("A", Q_STEP_GENERATIONS, max_lines=5000),
        [
            parts.extract_label_fields(),
            parts.convert_to_number(STEP, RANK, SCORE, RESPONSE_LENGTH),
            parts.sort_by(RUN_ID, STEP, ATTEMPT, RANK),
            parts.keep_columns(
                [c for c in GENERATION_COLUMNS if c not in GENERATION_OPTIONAL],
                "|".join([f"{EXTRA}.+", *GENERATION_OPTIONAL]),
            ),
            parts.organize(GENERATION_COLUMNS, keep_others=True),
            parts.rename_by_regex(f"{EXTRA}(.+)", "$1"),
        ],
    )
    prompt = table_panel(
        5,
        "Outputs for one prompt across steps",
        "What otel-valgen show --prompt ID lists: the prompt's kept rows at every step, validation and training "
        "rollouts (kind; empty on records of releases before kinds), in step order. Set the prompt variable to a "
        "prompt id (every response; a rollout's prompt id too) or <prompt>/<i> (one response), or click a sample "
        "id above. response length: the response's tokens (rollouts, verl's validation rows); output bytes (cut): "
        "the output's size before it was cut "
        "to max_field_bytes (its head and tail kept around a '…[N characters omitted]…' line), empty when whole. "
        "Unlike show, every attempt of a step is listed.",
        grid(0, 24, 14, 10),
        logs_query("A", Q_PROMPT_ACROSS_STEPS, max_lines=5000),
        [
            parts.extract_label_fields(),
            parts.convert_to_number(STEP, RANK, SCORE, RESPONSE_LENGTH, OUTPUT_LENGTH),
            parts.sort_by(STEP),  # the first field alone decides (parts.sort_by); sample ids differ by tag per step
            parts.keep_columns([c for c in PROMPT_COLUMNS if c not in PROMPT_OPTIONAL], "|".join(PROMPT_OPTIONAL)),
            parts.organize(PROMPT_COLUMNS, keep_others=True),
        ],
    )
    mean_score = per_step_chart(
        6,
        "Mean score per step: kept generations (A), every generation seen (B)",
        "A: average valgen.score of the sampled generations of each step (records without a score are left "
        "out). B: the step summary's valgen.score.mean, over every generation the sources saw with a valid "
        "score, kept or not (absent for steps of SDKs or collectors that did not count them).",
        grid(14, 24, 10, 10),
        [instant_query("A", Q_MEAN_SCORE), instant_query("B", summary_count(SCORE_MEAN))],
    )
    late = table_panel(
        7,
        "Late generations",
        "Generations that arrived after their step closed, validation and rollouts (kind; empty on records of "
        "releases before kinds); shown only when the collector runs with VALGEN_LATE_RECORDS=forward (by default "
        "they are dropped and counted in the collector's metrics).",
        grid(0, 34, 24, 7),
        logs_query("A", Q_LATE, max_lines=1000),
        [
            parts.extract_label_fields(),
            parts.convert_to_number(STEP, SCORE),
            parts.sort_by(RUN_ID, STEP),
            parts.organize(LATE_COLUMNS),
        ],
    )
    return [
        about,
        with_columns(steps, linked_column(STEP, "step", "Show the generations of this step", "step")),
        counts,
        with_columns(
            generations,
            *text_columns(contract.BODY_INPUT, contract.BODY_OUTPUT),
            sample_id_column("Show this prompt across steps"),
        ),
        with_columns(prompt, *text_columns(contract.BODY_OUTPUT), sample_id_column("Show this response across steps")),
        mean_score,
        late,
        *rollout_panels(top=41),
        *mismatch_panels(top=MISMATCH_TOP),
    ]


MISMATCH_TABLE_COLUMNS = {
    SAMPLE_ID: "sample id",
    STEP: "step",
    DATA_SOURCE: "data source",
    f"{MISMATCH}kl": "KL (k3)",
    f"{MISMATCH}mean_abs": "mean |diff|",
    f"{MISMATCH}max_abs": "max |diff|",
    f"{MISMATCH}masked": "masked",
    f"{MISMATCH}tokens": "tokens compared",
    SCORE: "reward",
    contract.BODY_OUTPUT: "response",
    TRACE_ID: "trace id",
}


def mismatch_panels(top: int) -> list[Builder[dashboard_models.Panel]]:
    """Where the rollout engine and the trainer disagree: the steps' distribution, kept responses worst first."""
    chart = per_step_chart(
        61,
        "Training-inference mismatch per rollout step: |trainer - rollout| log-probability",
        "From the rollout step summaries, over every response of the step (not only the kept ones) that carried "
        "per-token log-probabilities (log_rollouts(..., tokens=...)): A, B, C: the p50, p90 and p99 of the "
        "responses' mean |trainer - rollout| over their model tokens (estimates within 1%); D: the largest "
        "difference of any token. Choose one run.",
        grid(0, top, 10, 10),
        [instant_query(ref, rollout_summary_value(field)) for ref, field in zip("ABCD", MISMATCH_SERIES, strict=True)],
    )
    worst = table_panel(
        62,
        "Kept responses of step $step, the most disagreeing first",
        "The kept rollout responses that carry per-token figures, by their KL estimate (k3, the mean of e^d - 1 - d "
        "with d = trainer - rollout over the model's tokens), largest first: the first row is the step's worst kept "
        "response. Click its sample id to read it; `otel-valgen show --tokens SAMPLE_ID` colours each token.",
        grid(10, top, 14, 10),
        logs_query("A", Q_MISMATCHED, max_lines=1000),
        [
            parts.extract_label_fields(),
            parts.convert_to_number(STEP, SCORE, *MISMATCH_COLUMNS, f"{MISMATCH}tokens"),
            parts.sort_by(f"{MISMATCH}kl", descending=True),
            parts.organize(MISMATCH_TABLE_COLUMNS),
        ],
    )
    return [
        chart,
        with_columns(
            worst, ([contract.BODY_OUTPUT, "response"], WIDE_TEXT), ([SAMPLE_ID, "sample id"], [trajectory_link()])
        ),
    ]


def rollout_panels(top: int) -> list[Builder[dashboard_models.Panel]]:
    """The training rollouts, below the validation panels from grid row `top`."""
    about = (
        text.Panel()
        .id(8)
        .title("Training rollouts")
        .grid_pos(grid(0, top, 24, 3))
        .mode(TextMode.MARKDOWN)
        .content(ROLLOUT_INTRO)
    )
    steps = table_panel(
        9,
        "Rollout steps: prompts seen and kept",
        "One row per rollout step summary (per attempt). prompts seen: the distinct prompts the sources saw; "
        "prompts kept: k, each kept with every response; responses seen and kept count responses. rewarded and "
        "mean reward: the responses with a valid reward among all the sources saw, and their mean.",
        grid(0, top + 3, 24, 8),
        logs_query("A", Q_ROLLOUT_SUMMARIES, max_lines=5000),
        [
            parts.extract_label_fields(),
            parts.convert_to_number(
                STEP, PROMPTS_SEEN, PROMPTS_KEPT, SEEN, KEPT, LATE, MISSING, SOURCES, SCORE_COUNT, SCORE_MEAN
            ),
            parts.sort_by(STEP),
            parts.organize(ROLLOUT_SUMMARY_COLUMNS),
        ],
    )
    generations = table_panel(
        10,
        "Rollout prompts of step $step, each with all its responses",
        "The prompts the sampler kept for the step, each followed by every one of its responses, in rank order "
        "(the sampler ranks by prompt, then by response), so a prompt's responses sit together with their "
        "rewards and advantages. Choose one run and one step: rows of several steps interleave by rank. Extra "
        "columns (reward_extra_info, valgen.extra.<name>) come last.",
        grid(0, top + 11, 24, 14),
        logs_query("A", Q_ROLLOUT_GENERATIONS, max_lines=5000),
        [
            parts.extract_label_fields(),
            parts.convert_to_number(STEP, RANK, SCORE, ADVANTAGE, RESPONSE_LENGTH),
            parts.sort_by(RANK),
            parts.keep_columns(list(ROLLOUT_COLUMNS), f"{EXTRA}.+"),
            parts.organize(ROLLOUT_COLUMNS, keep_others=True),
            parts.rename_by_regex(f"{EXTRA}(.+)", "$1"),
        ],
    )
    return [
        about,
        with_columns(steps, linked_column(STEP, "step", "Show the rollouts of this step", "step")),
        with_columns(
            generations,
            ([contract.BODY_INPUT, "prompt"], WIDE_TEXT),
            ([contract.BODY_OUTPUT, "response"], WIDE_TEXT),
            ([SAMPLE_ID, "sample id"], [trajectory_link()]),
        ),
    ]


MISMATCH_TOP = 66  # below the rollouts
TRAJECTORY_TOP = MISMATCH_TOP + 10
PIPELINE_TOP = TRAJECTORY_TOP + 14


def dashboard() -> dashboard_models.Dashboard:
    """The whole dashboard, as grafana-foundation-sdk's model."""
    builder = (
        dashboard_builders.Dashboard(TITLE)
        .uid(UID)
        .description(
            "Validation generations (prompt, output, score) and training rollouts (prompts with all their "
            "responses) sampled per step by otel-valgen, from Loki; the pipeline's health (the sampler's and the "
            "exporter service's metrics) from Prometheus."
        )
        .tags(["otel-valgen", "loki", "prometheus"])
        .readonly()
        .tooltip(DashboardCursorSync.CROSSHAIR)
        .refresh("1m")
        .time("now-24h", "now")
        .timezone("utc")
        .version(1)
        .variables(variables())
    )
    for panel in panels():
        builder.with_panel(panel)
    query = logs_query("A", Q_TRAJECTORY, max_lines=50)  # one record per step of a sample id
    builder.with_panel(trajectory.panel(60, grid(0, TRAJECTORY_TOP, 24, PIPELINE_TOP - TRAJECTORY_TOP), query))
    # Below the trajectory: the pipeline's own metrics, from Prometheus.
    builder.with_row(pipeline_health.row(top=PIPELINE_TOP, row_id=11))
    for panel in pipeline_health.panels(top=PIPELINE_TOP + 1, first_id=12):
        builder.with_panel(panel)
    return builder.build()
