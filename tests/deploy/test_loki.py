"""User story: a job's steps go through the collector to Loki, and the dashboard's queries find them.

No Loki runs here: Loki is AGPL-licensed, so no test builds or runs it (the compose stack runs
its official image, the user's choice). What the collector sends to Loki's ``/otlp/v1/logs``
is captured by an OTLP/HTTP stand-in and mapped to Loki's storage model as Loki documents it
(tests/deploy/loki_model.py, with the index labels of docker/loki/loki.yaml). The tests check
those requests against the documented mapping, and run the dashboard's queries over the mapped
entries with our evaluator of the LogQL subset the dashboard uses (tests/deploy/logql_subset.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
import yaml
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2

from dashboards import validation_generations as vgd
from otel_valgen import tokens
from otel_valgen.sampling import untagged
from tests.deploy import grafana_table, harness, logql_subset, loki_model
from tests.deploy.loki_query import substitute, variables
from tests.deploy.steps import (
    CONVERSATION_RUN,
    CONVERSATION_TURNS,
    PROMPTS,
    ROLLOUT_K,
    ROLLOUT_PROMPTS,
    ROLLOUT_RESPONSES,
    ROLLOUT_STEP,
    Job,
    expected_ids,
    extra_columns,
    run_job,
    score,
    send_conversation,
    send_late_generation,
    send_token_rollouts,
    token_rows,
)
from tests.support.otlp_http import OtlpHttpStandIn

DASHBOARD = harness.REPO / "docker" / "grafana" / "dashboards" / "validation-generations.json"
LOKI_PATH = "/otlp/v1/logs"
# Late generations are forwarded (not the compose default, `drop`) so that the dashboard's
# "Late generations" panel has something to show.
MISMATCH_TABLE_ID = 62  # the kept rollout responses with per-token figures (dashboards: mismatch_panels)
COLLECTOR_ENV = {"VALGEN_DECISION_WAIT": "60s", "VALGEN_LATE_RECORDS": "forward"}


class LokiStandIn:
    """The collector's requests to Loki, mapped to Loki's model and queried in process."""

    def __init__(self, job: Job, collector_http: str, sink: OtlpHttpStandIn) -> None:
        self.job = job
        self.collector_http = collector_http
        self._sink = sink
        self.index = loki_model.index_label_attributes()

    @property
    def requests(self) -> list[logs_service_pb2.ExportLogsServiceRequest]:
        """Every request the collector has posted to Loki's OTLP path so far."""
        return self._sink.at(LOKI_PATH)

    @property
    def entries(self) -> list[loki_model.Entry]:
        """Those requests as the entries Loki stores."""
        return [entry for request in self.requests for entry in loki_model.entries(request, self.index)]

    def logs(self, query: str) -> list[dict[str, str]]:
        """The label sets (labels, structured metadata, parsed fields) of the lines a log query returns."""
        return logql_subset.select(query, self.entries)

    def metric(self, query: str) -> dict[str, float]:
        """An instant metric query aggregated `by` one label: {label value: value}."""
        return logql_subset.metric(query, self.entries)


def _summaries(loki: LokiStandIn) -> list[dict[str, str]]:
    return loki.logs(substitute(vgd.Q_SUMMARIES, **variables(loki.job)))


@pytest.fixture(scope="module")
def loki(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LokiStandIn]:
    """The job sent through collector.yaml to the Loki stand-in."""
    workdir = tmp_path_factory.mktemp("loki-stand-in")
    with harness.otlp_http_sink() as sink:
        env = {"VALGEN_LOKI_OTLP_ENDPOINT": f"{sink.base_url}/otlp", **COLLECTOR_ENV}
        with harness.collector(["collector.yaml"], env, workdir) as running:
            job = run_job(running.http_endpoint, extra=True)
            send_token_rollouts(running.http_endpoint)
            stand_in = LokiStandIn(job, running.http_endpoint, sink)
            harness.wait_for(
                lambda: len(_summaries(stand_in)) == len(job.steps), 30, "the step summaries at the Loki stand-in"
            )
            # A rollout part names no expected sources: its step closes after the decision wait (60 s here).
            harness.wait_for(
                lambda: stand_in.logs(substitute(vgd.Q_ROLLOUT_SUMMARIES, **variables(job))) != [],
                90,
                "the rollout step's summary at the Loki stand-in",
            )
            yield stand_in
            assert [path for path, _ in sink.by_path if path != LOKI_PATH] == []


def test_loki_config_keeps_run_and_step_out_of_the_index() -> None:
    """Only low-cardinality resource attributes become labels; OTLP needs structured metadata enabled."""
    config = yaml.safe_load(loki_model.LOKI_CONFIG.read_text(encoding="utf-8"))
    index = loki_model.index_label_attributes()
    assert "service.name" in index
    for high_cardinality in ("service.instance.id", "wandb.run_id", "ray.job_id", "ray.actor_id", "k8s.pod.name"):
        assert high_cardinality not in index
    assert config["limits_config"]["allow_structured_metadata"] is True
    assert "otlp_config" not in config["limits_config"], "no per-tenant override may promote attributes to labels"
    assert config["schema_config"]["configs"][-1]["schema"] == "v13"
    assert config["common"]["path_prefix"] == "/loki", "the compose volume loki-data is mounted at /loki"


def test_only_low_cardinality_labels_index_the_records(loki: LokiStandIn) -> None:
    """Every stream is labelled by service_name alone; run, step, instance and trace ids are metadata."""
    assert {tuple(sorted(entry.labels.items())) for entry in loki.entries} == {(("service_name", "deploy-test"),)}
    kept = [entry for entry in loki.entries if "valgen_rank" in entry.metadata]
    assert kept
    for entry in kept:
        assert {"valgen_run_id", "valgen_step", "service_instance_id", "trace_id"} <= set(entry.metadata)
        assert set(json.loads(entry.line)) == {"input", "output", "ground_truth"}


def _bytes(size: str) -> int:
    """A Loki byte size from its config ("1MB", "64KB", "256KiB"): SI units, or binary with "i"."""
    parsed = re.fullmatch(r"(\d+)\s*([KMG]i?)?B", size.strip())
    assert parsed, f"not a byte size: {size!r}"
    number, unit = parsed.groups()
    scale = {None: 1, "K": 10**3, "M": 10**6, "G": 10**9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}[unit]
    return int(number) * scale


def test_the_model_reproduces_lokis_documented_sample() -> None:
    """The sample log of Loki's "native OTLP endpoint vs Loki Exporter" page maps as that page shows."""
    request = logs_service_pb2.ExportLogsServiceRequest()
    resource_logs = request.resource_logs.add()
    for key, value in {"service.name": "auth", "service.namespace": "dev", "service.kind": "app"}.items():
        resource_logs.resource.attributes.add(key=key).value.string_value = value
    record = resource_logs.scope_logs.add().log_records.add(time_unix_nano=1715247552000000000, severity_text="INFO")
    record.body.string_value = "user logged in"
    record.attributes.add(key="email").value.string_value = "foo@bar.com"
    nested = record.attributes.add(key="http.request").value.kvlist_value.values.add(key="method")
    nested.value.string_value = "GET"
    (entry,) = loki_model.entries(request, list(loki_model.DEFAULT_INDEX_LABEL_ATTRIBUTES))
    assert entry.labels == {"service_name": "auth", "service_namespace": "dev"}
    # The page's structured metadata, plus a nested attribute flattened with "_" (same page's rules).
    assert entry.metadata == {
        "service_kind": "app",
        "severity_text": "INFO",
        "email": "foo@bar.com",
        "http_request_method": "GET",
    }
    assert (entry.line, entry.timestamp_ns) == ("user logged in", 1715247552000000000)
    assert loki_model.name_collisions(request) == []
    record.attributes.add(key="http_request.method").value.string_value = "POST"
    assert loki_model.name_collisions(request) == [
        ("http_request_method", "record attribute http.request", "record attribute http_request.method")
    ]


def test_requests_to_loki_fit_its_documented_mapping_and_the_configs_limits(loki: LokiStandIn) -> None:
    """What the collector posts to /otlp/v1/logs: timed records, no two keys on one Loki name, within limits."""
    config = yaml.safe_load(loki_model.LOKI_CONFIG.read_text(encoding="utf-8"))["limits_config"]
    max_line, max_metadata = _bytes(config["max_line_size"]), _bytes(config["max_structured_metadata_size"])
    max_entries = int(config["max_structured_metadata_entries_count"])
    assert loki.requests
    label_name = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
    for request in loki.requests:
        assert loki_model.name_collisions(request) == []
        for entry in loki_model.entries(request, loki.index):
            assert entry.timestamp_ns > 0, "without a record time Loki would use the time of ingestion"
            assert len(entry.labels) <= loki_model.MAX_INDEX_LABELS
            assert all(label_name.fullmatch(name) for name in (*entry.labels, *entry.metadata))
            assert len(entry.line.encode()) <= max_line
            # The limit is on the structured metadata of a line; names plus values, as we read it.
            assert sum(len(k.encode()) + len(v.encode()) for k, v in entry.metadata.items()) <= max_metadata
            assert len(entry.metadata) <= max_entries


def test_dashboard_queries_use_only_names_in_what_loki_stores(loki: LokiStandIn) -> None:
    """Each query selects by stored labels and filters, unwraps and groups by stored or parsed names."""
    entries = loki.entries
    labels = set().union(*(entry.labels for entry in entries))
    stored = labels | set().union(*(entry.metadata for entry in entries))
    body_fields = set().union(*(json.loads(entry.line) for entry in entries if entry.line.startswith("{")))
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    checked = 0
    for panel, target in harness.loki_targets(dashboard):
        names = logql_subset.names(logql_subset.parse(substitute(target["expr"], **variables(loki.job))))
        assert names.stream_labels <= labels, panel["title"]
        assert names.fields <= stored, f"{panel['title']}: {names.fields - stored}"
        assert names.parsed <= body_fields, f"{panel['title']}: {names.parsed - body_fields}"
        checked += 1
    assert checked == 18


def test_step_table_lists_the_kept_generations_of_the_step(loki: LokiStandIn) -> None:
    """The step panel's query returns the k kept generations of that step, with every column the table shows."""
    rows = loki.logs(substitute(vgd.Q_STEP_GENERATIONS, **variables(loki.job, step="200")))
    assert sorted(untagged(row["valgen_sample_id"]) for row in rows) == sorted(expected_ids())
    assert sorted(int(row["valgen_rank"]) for row in rows) == list(range(1, loki.job.k + 1))
    for row in rows:
        assert row["valgen_step"] == "200"
        assert row["input"].startswith("What is ")
        assert row["output"].startswith("At step 200 ")
        assert row["ground_truth"].isdigit()
        assert row["valgen_data_source"] == "synthetic-math"
        assert 0.0 <= float(row["valgen_score"]) <= 1.0
        assert len(row["trace_id"]) == 32
    assert len({row["trace_id"] for row in rows}) == 1, "one trace id per (run, step)"


def test_prompt_panel_follows_one_prompt_across_steps(loki: LokiStandIn) -> None:
    """The prompt panel's query returns the chosen prompt's output once per step."""
    sample = expected_ids()[0]
    rows = loki.logs(substitute(vgd.Q_PROMPT_ACROSS_STEPS, **variables(loki.job, sample=sample)))
    assert sorted(int(row["valgen_step"]) for row in rows) == list(loki.job.steps)
    assert {untagged(row["valgen_sample_id"]) for row in rows} == {sample}
    assert all(row["output"].startswith(f"At step {row['valgen_step']} ") for row in rows)


def test_summary_table_and_counts_per_step(loki: LokiStandIn) -> None:
    """The summary panel lists one summary per step; the count queries give seen, kept, late and missing per step."""
    rows = _summaries(loki)
    assert sorted(int(row["valgen_step"]) for row in rows) == list(loki.job.steps)
    for row in rows:
        assert (row["valgen_seen"], row["valgen_kept"], row["valgen_closed_reason"]) == (
            str(PROMPTS),
            str(loki.job.k),
            "complete",
        )
        assert len(row["trace_id"]) == 32
    values = variables(loki.job)
    steps = {str(step) for step in loki.job.steps}
    expected = {vgd.SEEN: PROMPTS, vgd.KEPT: loki.job.k, vgd.LATE: 0, vgd.MISSING: 0}
    for field, count in expected.items():
        assert loki.metric(substitute(vgd.summary_count(field), **values)) == dict.fromkeys(steps, count), field


def test_mean_score_per_step(loki: LokiStandIn) -> None:
    """The score panel averages the kept generations' scores per step (A) and shows the summaries' mean (B)."""
    values = variables(loki.job)
    means = loki.metric(substitute(vgd.Q_MEAN_SCORE, **values))
    assert set(means) == {str(step) for step in loki.job.steps}
    for step, mean in means.items():
        rows = loki.logs(substitute(vgd.Q_STEP_GENERATIONS, **variables(loki.job, step=step)))
        assert mean == pytest.approx(sum(float(row["valgen_score"]) for row in rows) / len(rows))
    overall = loki.metric(substitute(vgd.summary_count(vgd.SCORE_MEAN), **values))
    for step in loki.job.steps:  # every prompt's score, kept or not
        assert overall[str(step)] == pytest.approx(sum(score(i, step) for i in range(PROMPTS)) / PROMPTS)
    assert overall != means, "the kept generations' mean is another figure"


def test_the_generations_table_shows_the_extra_columns_loki_stores(loki: LokiStandIn) -> None:
    """The kept generations' valgen.extra.* reach Loki as valgen_extra_* metadata; the table shows them by name."""
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    panel = next(p for p in dashboard["panels"] if p["title"].startswith("Sampled generations of step"))
    rows = loki.logs(substitute(vgd.Q_STEP_GENERATIONS, **variables(loki.job, step="200")))
    assert len(rows) == loki.job.k
    sent = extra_columns(200)
    for row in rows:
        i = int(row["valgen_sample_id"].split("-")[1].split("/")[0])
        assert float(row["valgen_extra_acc"]) == sent["acc"][i]  # Loki keeps values as strings
        assert row["valgen_extra_format_ok"] == str(sent["format_ok"][i]).lower()
        assert row["valgen_extra_judge_verdict"] == sent["judge/verdict"][i]  # "/" became "_"
    headers = grafana_table.columns(panel, rows)
    assert headers[-3:] == ["acc", "format_ok", "judge_verdict"]
    # This job sends no response sizes (verl's rows do), so their optional columns are not shown.
    assert headers[:-3] == [
        label for name, label in vgd.GENERATION_COLUMNS.items() if name not in vgd.GENERATION_OPTIONAL
    ]


def test_every_table_column_is_in_what_loki_returns(loki: LokiStandIn) -> None:
    """Each column a table panel keeps (organize) is a field of the rows its query returns."""
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    checked = 0
    for panel in dashboard["panels"]:
        if panel["type"] != "table" or "Late" in panel["title"]:
            continue  # late generations exist only with late_records: forward
        if panel["title"].startswith("Rollout"):
            continue  # tests/e2e/test_rollouts.py checks the rollout tables
        step = str(ROLLOUT_STEP) if panel["id"] == MISMATCH_TABLE_ID else "100"  # its rollout step, with tokens
        rows = loki.logs(substitute(panel["targets"][0]["expr"], **variables(loki.job, step=step)))
        assert rows, panel["title"]
        missing = grafana_table.kept_columns(panel) - set().union(*rows)
        assert not missing, f"{panel['title']}: {missing}"
        checked += 1
    assert checked == 4


def test_late_panel_lists_generations_that_arrive_after_their_step_closed(loki: LokiStandIn) -> None:
    """A generation for a closed step, forwarded as late, is listed by the late panel and by no sampled panel."""
    send_late_generation(loki.collector_http, step=100, sample_id="straggler-prompt")
    query = substitute(vgd.Q_LATE, **variables(loki.job))
    harness.wait_for(lambda: len(loki.logs(query)) == 1, 30, "the late generation")
    (row,) = loki.logs(query)
    assert (row["valgen_step"], untagged(row["valgen_sample_id"])) == ("100", "straggler-prompt/0")
    assert (row["input"], row["output"]) == ("a late question", "a late answer")
    kept = loki.logs(substitute(vgd.Q_STEP_GENERATIONS, **variables(loki.job, step="100")))
    assert "straggler-prompt/0" not in {untagged(r["valgen_sample_id"]) for r in kept}


def test_the_trajectory_panel_shows_a_kept_conversation_turn_by_turn(loki: LokiStandIn) -> None:
    """A job's tool-calling trajectory, through the collector: the panel's line shows its turns; details, messages."""
    send_conversation(loki.collector_http)
    kept = substitute(vgd.Q_STEP_GENERATIONS, **variables(loki.job, run=CONVERSATION_RUN))
    harness.wait_for(lambda: len(loki.logs(kept)) == 1, 30, "the kept conversation")
    ((row,),) = [loki.logs(kept)]
    query = substitute(
        vgd.Q_TRAJECTORY, **variables(loki.job, run=CONVERSATION_RUN, trajectory=row["valgen_sample_id"])
    )
    assert logql_subset.lines(query, loki.entries) == [
        "[system] Use the calc tool.\n[user] 2+2?\n\n--- generated ---\n"
        '[assistant] Let me compute.\n→ calc({"expr": "2+2"}) #c1\n[tool #c1] 4\n[assistant] 4'
    ]
    (details,) = loki.logs(query)  # what the line's details list: its structured metadata
    roles = [message["role"] for message in json.loads(details["gen_ai_output_messages"])]
    assert roles == [message["role"] for message in CONVERSATION_TURNS]
    none = substitute(vgd.Q_TRAJECTORY, **variables(loki.job, run=CONVERSATION_RUN, trajectory=""))
    assert logql_subset.lines(none, loki.entries) == [], "no trajectory until one is picked"


def test_the_mismatch_panels_show_the_steps_distribution_and_its_worst_kept_response(loki: LokiStandIn) -> None:
    """The chart's queries give the rollout summary's quantiles over every response; the table ranks the kept by KL."""
    whole = tokens.MismatchFigures()
    for prompt in range(ROLLOUT_PROMPTS):
        for response in range(ROLLOUT_RESPONSES):
            columns = {name: [values] for name, values in token_rows(prompt, response).items()}
            read = tokens.read_response(columns, 0)
            assert read is not None
            figures = tokens.response_figures(read)
            assert figures is not None
            whole.add(figures)
    expected = tokens.summary(whole.attribute())
    assert expected is not None
    values = variables(loki.job)
    for field in vgd.MISMATCH_SERIES:
        key = field.removeprefix(vgd.MISMATCH).replace("_p", ".p").replace("abs_max", "abs.max")
        got = loki.metric(substitute(vgd.rollout_summary_value(field), **values))
        assert got == {str(ROLLOUT_STEP): pytest.approx(expected[key], rel=1e-9)}, field
    rows = loki.logs(substitute(vgd.Q_MISMATCHED, **variables(loki.job, step=str(ROLLOUT_STEP))))
    assert len(rows) == ROLLOUT_K * ROLLOUT_RESPONSES
    kept = {row["valgen_prompt_id"] for row in rows}
    worst = max(rows, key=lambda row: float(row[f"{vgd.MISMATCH}kl"]))
    prompt = int(worst["input"].removeprefix("rollout prompt "))
    assert prompt == max(int(row["input"].removeprefix("rollout prompt ")) for row in rows), "the most drift is worst"
    assert len(kept) == ROLLOUT_K
