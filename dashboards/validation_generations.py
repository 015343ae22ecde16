"""The "Validation generations" dashboard: what the sampler kept, read from Loki.

How Loki stores what the collector sends (docker/loki/loki.yaml): the index labels are only
``service_name`` (and namespace/environment when set); every record attribute is structured
metadata with dots turned into underscores (``valgen.run_id`` -> ``valgen_run_id``); the
record's trace id is the structured metadata ``trace_id``; the map body
``{input, output, ground_truth}`` is the log line, as JSON. Loki does not keep the OTLP event
name, so the queries tell the records apart by attributes only the sampler sets: kept
generations carry ``valgen.rank``, step summaries ``valgen.closed_reason``, and late
generations forwarded with ``late_records: forward`` carry ``valgen.late = true``.

Run, step and prompt are structured metadata, not labels (one stream per run or step would
make Loki's index grow without bound), so Loki's label API cannot list them: they are
free-text variables (regular expressions, ``.+`` = all), and the tables link to them.
"""

from __future__ import annotations

from dashboards import grafana as g
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
KEPT = loki_name(contract.KEPT)
LATE = loki_name(contract.LATE)
MISSING = loki_name(contract.MISSING)
SOURCES = loki_name(contract.SOURCES)
SOURCES_EXPECTED = loki_name(contract.SOURCES_EXPECTED)
CLOSED_REASON = loki_name(contract.CLOSED_REASON)
ATTEMPT = loki_name(contract.ATTEMPT)
TRACE_ID = "trace_id"  # Loki's structured metadata for LogRecord.trace_id (hex)
SERVICE = loki_name("service.name")  # the one index label the queries select streams by

# The stream selector and the filters shared by every query.
STREAMS = f'{{{SERVICE}=~"$service"}}'
OF_RUN = f'| {RUN_ID}=~"$run"'
KEPT_ONLY = f'| {RANK}!=""'
SUMMARIES_ONLY = f'| {CLOSED_REASON}!=""'
BODY = f"| json {contract.BODY_INPUT}, {contract.BODY_OUTPUT}, {contract.BODY_GROUND_TRUTH}"

Q_STEP_GENERATIONS = f'{STREAMS} {OF_RUN} | {STEP}=~"$step" {KEPT_ONLY} {BODY}'
Q_PROMPT_ACROSS_STEPS = f'{STREAMS} {OF_RUN} | {SAMPLE_ID}=~"$sample" {KEPT_ONLY} {BODY}'
Q_SUMMARIES = f"{STREAMS} {OF_RUN} {SUMMARIES_ONLY}"
Q_LATE = f'{STREAMS} {OF_RUN} | {LATE}="true" {BODY}'
Q_MEAN_SCORE = (
    f'avg by ({STEP}) (avg_over_time({STREAMS} {OF_RUN} {KEPT_ONLY} | {SCORE}!="" '
    f'| unwrap {SCORE} | __error__="" [$__range]))'
)


def summary_count(field: str) -> str:
    """One count of the step summaries per step (max, so a summary delivered twice counts once)."""
    return (
        f"max by ({STEP}) (max_over_time({STREAMS} {OF_RUN} {SUMMARIES_ONLY} "
        f'| unwrap {field} | __error__="" [$__range]))'
    )


WRAP = {"id": "custom.cellOptions", "value": {"type": "auto", "wrapText": True}}
WIDE = {"id": "custom.minWidth", "value": 320}


def _text_columns(*fields: str) -> list[g.JSON]:
    return [g.column_override([field, field.replace("_", " ")], [WRAP, WIDE]) for field in fields]


VARIABLE_NAMES = [g.DATASOURCE_VARIABLE, "service", "run", "step", "sample"]


def _linked(field: str, header: str, title: str, variable: str) -> g.JSON:
    link = g.link_to_variable(title, variable, keep=VARIABLE_NAMES)
    return g.column_override([field, header], [{"id": "links", "value": [link]}])


def _per_step_counts() -> list[g.JSON]:
    """Instant metric queries -> one table with a row per step and a column per count."""
    return [
        {"id": "labelsToFields", "options": {"mode": "columns"}},
        {"id": "merge", "options": {}},
        {"id": "organize", "options": {"excludeByName": {"Time": True}, "indexByName": {}, "renameByName": {}}},
        g.convert_to_number(STEP),
        g.sort_by(STEP),
    ]


INTRO = """\
Generations the otel-valgen sampler kept, read from Loki. **run**, **step** and **prompt**
are regular expressions over the records' structured metadata (`.+` = all): type a run id, or
click a step or a sample id in a table. Each row shows its trace id: every record of one
(run, step) shares it. Counts come from the sampler's `valgen.step.summary` records.
"""


def variables() -> list[g.JSON]:
    """Datasource, service (an index label), run, step and prompt (structured metadata)."""
    return [
        g.datasource_variable(g.DATASOURCE_VARIABLE, "Loki", "loki", g.DEFAULT_DATASOURCE_UID),
        g.label_values_variable("service", "service", SERVICE),
        g.textbox_variable("run", "run", ".+", f"Regular expression over {RUN_ID}, the training run."),
        g.textbox_variable("step", "step", ".+", f"Regular expression over {STEP}, the trainer's step."),
        g.textbox_variable("sample", "prompt", ".+", f"Regular expression over {SAMPLE_ID}, one prompt's response."),
    ]


def panels() -> list[g.JSON]:
    """Every panel, top to bottom."""
    generation_columns = {
        RUN_ID: "run",
        STEP: "step",
        ATTEMPT: "attempt",
        RANK: "rank",
        SAMPLE_ID: "sample id",
        contract.BODY_INPUT: "input",
        contract.BODY_OUTPUT: "output",
        contract.BODY_GROUND_TRUTH: "ground truth",
        SCORE: "score",
        DATA_SOURCE: "data source",
        SOURCE: "source",
        TRACE_ID: "trace id",
    }
    summary_columns = {
        RUN_ID: "run",
        STEP: "step",
        ATTEMPT: "attempt",
        SEEN: "seen",
        KEPT: "kept",
        LATE: "late",
        MISSING: "missing",
        SOURCES: "sources",
        SOURCES_EXPECTED: "sources expected",
        CLOSED_REASON: "closed",
        TRACE_ID: "trace id",
    }
    return [
        g.text_panel(1, "About", g.grid(0, 0, 24, 3), INTRO),
        g.table_panel(
            2,
            "Steps: seen, kept, late, missing",
            "One row per step summary the sampler emitted, one per attempt of a step (a resumed or retried run "
            "validates a step again as a new attempt; otel-valgen show and the wandb exporter show the latest "
            "complete one). closed = complete (every source ended), wait (decision_wait of silence), max_duration "
            "(a source never ended), max_groups or shutdown; missing > 0 means records a source announced never "
            "arrived.",
            g.grid(0, 3, 14, 9),
            [g.loki_target("A", Q_SUMMARIES, max_lines=5000)],
            [
                g.extract_label_fields(),
                g.convert_to_number(STEP, SEEN, KEPT, LATE, MISSING, SOURCES, SOURCES_EXPECTED),
                g.sort_by(RUN_ID, STEP, ATTEMPT),
                g.organize(summary_columns),
            ],
            [_linked(STEP, "step", "Show the generations of this step", "step")],
        ),
        g.barchart_panel(
            3,
            "Seen, kept, late, missing per step",
            "From the step summaries. Choose one run: counts of several runs are not added up.",
            g.grid(14, 3, 10, 9),
            [
                g.loki_target(ref, summary_count(field), instant=True)
                for ref, field in zip("ABCD", (SEEN, KEPT, LATE, MISSING), strict=True)
            ],
            _per_step_counts(),
            x_field=STEP,
        ),
        g.table_panel(
            4,
            "Sampled generations of step $step",
            "The generations the sampler kept for the step, in sampling order (rank), for each attempt of it.",
            g.grid(0, 12, 24, 12),
            [g.loki_target("A", Q_STEP_GENERATIONS, max_lines=5000)],
            [
                g.extract_label_fields(),
                g.convert_to_number(STEP, RANK, SCORE),
                g.sort_by(RUN_ID, STEP, ATTEMPT, RANK),
                g.organize(generation_columns),
            ],
            [
                *_text_columns(contract.BODY_INPUT, contract.BODY_OUTPUT),
                _linked(SAMPLE_ID, "sample id", "Show this prompt across steps", "sample"),
            ],
        ),
        g.table_panel(
            5,
            "Outputs for one prompt across steps",
            "The same prompts are sampled at every step: set the prompt variable (or click a sample id above) to "
            "read how the model's answer to it changes.",
            g.grid(0, 24, 14, 10),
            [g.loki_target("A", Q_PROMPT_ACROSS_STEPS, max_lines=5000)],
            [
                g.extract_label_fields(),
                g.convert_to_number(STEP, SCORE),
                g.sort_by(SAMPLE_ID, STEP),
                g.organize(
                    {
                        SAMPLE_ID: "sample id",
                        STEP: "step",
                        contract.BODY_OUTPUT: "output",
                        SCORE: "score",
                        RUN_ID: "run",
                        TRACE_ID: "trace id",
                    }
                ),
            ],
            _text_columns(contract.BODY_OUTPUT),
        ),
        g.barchart_panel(
            6,
            "Mean score of the kept generations per step",
            "Average valgen.score of the sampled generations of each step (records without a score are left out).",
            g.grid(14, 24, 10, 10),
            [g.loki_target("A", Q_MEAN_SCORE, instant=True)],
            _per_step_counts(),
            x_field=STEP,
        ),
        g.table_panel(
            7,
            "Late generations",
            "Generations that arrived after their step closed; shown only when the collector runs with "
            "VALGEN_LATE_RECORDS=forward (by default they are dropped and counted in the collector's metrics).",
            g.grid(0, 34, 24, 7),
            [g.loki_target("A", Q_LATE, max_lines=1000)],
            [
                g.extract_label_fields(),
                g.convert_to_number(STEP, SCORE),
                g.sort_by(RUN_ID, STEP),
                g.organize(
                    {RUN_ID: "run", STEP: "step", SAMPLE_ID: "sample id", SOURCE: "source", TRACE_ID: "trace id"}
                ),
            ],
        ),
    ]


def dashboard() -> g.JSON:
    """The whole dashboard."""
    return g.dashboard_model(
        UID,
        TITLE,
        "Validation generations (prompt, output, score) sampled per step by otel-valgen, from Loki.",
        variables(),
        panels(),
    )
