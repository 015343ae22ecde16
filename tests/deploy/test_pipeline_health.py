"""The dashboard's "Pipeline health" row: every PromQL name exists, Prometheus scrapes what the stack serves.

The names a query may use come from the two sources of truth, never from a list written here:

- the sampler's metrics: collector/valgensamplerprocessor/metadata.yaml with the collector's
  exposure rule (``otelcol_`` + the name, no ``_total``, no unit suffix; a non-monotonic sum is a
  gauge), checked once against a real scrape of the built collector (skipped without it);
- the exporter service's: a scrape of a running ``ExporterService``'s registry (the registry
  ``--metrics-address`` serves), with a TensorBoard backend so that the per-backend series exist.

The scrape config (docker/prometheus/prometheus.yml) must target compose services at the port
each serves its metrics on, and the datasource the panels use must be the one provisioned.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.exposition import generate_latest

from dashboards import parts, pipeline_health
from otel_valgen.exporter.backends.tensorboard import TensorBoardBackend, TensorBoardConfig
from otel_valgen.exporter.ledger import Ledger
from otel_valgen.exporter.metrics import registry_for
from otel_valgen.exporter.service import ExporterService, ServiceConfig
from tests.deploy import compose, harness
from tests.support.ports import free_port

REPO = harness.REPO
DASHBOARD_FILE = REPO / "docker" / "grafana" / "dashboards" / "validation-generations.json"
PROMETHEUS_CONFIG = REPO / "docker" / "prometheus" / "prometheus.yml"
DATASOURCES = REPO / "docker" / "grafana" / "provisioning" / "datasources"
METADATA = REPO / "collector" / "valgensamplerprocessor" / "metadata.yaml"
COLLECTOR_CONFIG = REPO / "collector-config" / "collector.yaml"
ENV = {"GF_SECURITY_ADMIN_PASSWORD": "x"}
# Labels Prometheus adds to every scraped series.
TARGET_LABELS = {"instance", "job"}
PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset", "and", "or", "unless"}


@dataclass
class Metric:
    """A metric as Prometheus stores it: its type, its labels and the label values seen."""

    type: str  # counter or gauge
    labels: set[str] = field(default_factory=set)
    values: dict[str, set[str]] = field(default_factory=dict)


@dataclass
class Query:
    """The names one PromQL expression refers to."""

    metrics: set[str]
    grouping: set[str]
    matchers: list[tuple[str, str]]  # (label, value) of equality matchers
    rated: set[str]  # metrics inside rate()/increase()


def promql(expr: str) -> Query:
    """The metric names, grouping labels and label matchers of `expr` (the subset the dashboard writes)."""
    matchers = re.findall(r'(\w+)\s*=\s*"([^"]*)"', expr)
    rated = set(re.findall(r"\b(?:rate|increase|irate)\(\s*([A-Za-z_:][\w:]*)", expr))
    grouping = {
        label.strip() for group in re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", expr) for label in group.split(",")
    }
    text = re.sub(r"\b(?:by|without)\s*\([^)]*\)", " ", expr)
    text = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", text)
    metrics = {
        match[1]
        for match in re.finditer(r"([A-Za-z_:][\w:]*)\s*(\(?)", text)
        if not match[2] and match[1] not in PROMQL_WORDS
    }
    return Query(metrics, grouping - {""}, matchers, rated)


def collector_metrics() -> dict[str, Metric]:
    """The sampler's metrics as the collector exposes them, from metadata.yaml and the exposure rule."""
    metadata = yaml.safe_load(METADATA.read_text(encoding="utf-8"))
    enums = {name: spec.get("enum") for name, spec in metadata["attributes"].items()}
    out = {}
    for name, spec in metadata["telemetry"]["metrics"].items():
        kind = "counter" if spec.get("sum", {}).get("monotonic") else "gauge"
        labels = set(spec.get("attributes", []))
        values = {label: set(enums[label]) for label in labels if enums.get(label)}
        out[f"otelcol_{name}"] = Metric(kind, labels | TARGET_LABELS, values)
    return out


SAMPLE = re.compile(r"^([A-Za-z_:][\w:]*)(?:\{(.*)\})?\s+\S+")


def scraped(text: str) -> dict[str, Metric]:
    """Every series name of a Prometheus text scrape as Prometheus stores it, with its type and labels.

    Read line by line, as Prometheus reads it: the name is the sample's, as written (a counter
    the collector exposes without ``_total`` stays without it; prometheus_client's parser would
    add one, so it is not used here).
    """
    types: dict[str, str] = {}
    out: dict[str, Metric] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(maxsplit=3)
            types[name] = kind.strip()
            continue
        match = SAMPLE.match(line)
        if line.startswith("#") or not match:
            continue
        name, labels = match[1], dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match[2] or ""))
        family = name if name in types else re.sub(r"_total$", "", name)
        metric = out.setdefault(name, Metric(types.get(family, "untyped")))
        metric.labels |= set(labels) | TARGET_LABELS
        for label, value in labels.items():
            metric.values.setdefault(label, set()).add(value)
    return out


@pytest.fixture(scope="module")
def exporter_metrics(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Metric]]:
    """A scrape of a running exporter service's registry (one TensorBoard backend)."""
    root = tmp_path_factory.mktemp("exporter")
    service = ExporterService(
        ServiceConfig(), [TensorBoardBackend(TensorBoardConfig(root=str(root / "boards")), Ledger(None))]
    )
    service.start()
    try:
        yield scraped(generate_latest(registry_for(service)).decode())
    finally:
        service.stop()


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    """The committed dashboard JSON."""
    loaded: dict[str, Any] = json.loads(DASHBOARD_FILE.read_text(encoding="utf-8"))
    return loaded


def _row_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """The panels after the "Pipeline health" row header."""
    panels = dashboard["panels"]
    start = next(i for i, p in enumerate(panels) if p["type"] == "row" and p["title"] == pipeline_health.TITLE)
    return list(panels[start + 1 :])


def _prometheus_targets(dashboard: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (panel["title"], target)
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
        if target["datasource"]["type"] == "prometheus"
    ]


def _check(title: str, expr: str, known: dict[str, Metric]) -> list[str]:
    """What is wrong with `expr` against the known metrics ([] when nothing)."""
    query = promql(expr)
    errors = [f"{title}: {name} is not exposed" for name in sorted(query.metrics - set(known))]
    if errors or len(query.metrics) != 1:
        return errors or [f"{title}: {expr} selects {sorted(query.metrics)}, not one metric"]
    metric = known[next(iter(query.metrics))]
    labels = query.grouping | {label for label, _ in query.matchers}
    errors += [f"{title}: no label {label}" for label in sorted(labels - metric.labels)]
    for label, value in query.matchers:
        if label in metric.values and value not in metric.values[label]:
            errors.append(f"{title}: {label}={value!r} is never exposed")
    rated_ok = all(known[name].type == "counter" for name in query.rated)
    gauges_ok = all(known[name].type == "gauge" for name in query.metrics - query.rated)
    if not (rated_ok and gauges_ok):
        errors.append(f"{title}: rate() must take the counters and only them")
    return errors


def test_the_row_has_the_panels_the_issue_asks_for(dashboard: dict[str, Any]) -> None:
    """Sampler: open, closed by reason, late, dropped by reason; exporter: held, age, up, written, requests, flagged."""
    row = _row_panels(dashboard)
    wanted = {
        "Sampler: open groups": ("groups_open", set()),
        "Sampler: groups closed by reason": ("groups_closed", {"reason"}),
        "Sampler: late records": ("records_late", set()),
        "Sampler: records dropped by reason": ("records_dropped", {"reason"}),
        "Exporter: steps held per backend": ("steps_held", {"backend"}),
        "Exporter: oldest held step age per backend": ("oldest_held_step_age_seconds", {"backend"}),
        "Exporter: backend up": ("backend_up", {"backend"}),
        "Exporter: steps written per backend and kind": ("steps_total", {"backend", "kind"}),
        "Exporter: requests by outcome": ("requests_total", {"outcome"}),
        "Exporter: steps flagged by reason": ("steps_flagged_total", {"reason"}),
    }
    titles = {panel["title"]: panel for panel in row}
    for title, (metric, by) in wanted.items():
        assert title in titles, title
        first = promql(titles[title]["targets"][0]["expr"])
        assert any(name.endswith(metric) for name in first.metrics), title
        assert first.grouping >= by, title
    assert promql(titles["Exporter: steps written per backend and kind"]["targets"][0]["expr"]).matchers == [
        ("outcome", "written")
    ]
    for panel in dashboard["panels"]:
        if panel in row:
            continue
        assert all(t["datasource"]["type"] == "loki" for t in panel.get("targets", [])), panel["title"]


def test_every_prometheus_query_uses_exposed_names(
    dashboard: dict[str, Any], exporter_metrics: dict[str, Metric]
) -> None:
    """Each query's one metric exists (sampler: metadata.yaml's rule; exporter: a real scrape), with its labels."""
    known = {**collector_metrics(), **exporter_metrics}
    targets = _prometheus_targets(dashboard)
    assert len(targets) >= 10
    errors = [error for title, target in targets for error in _check(title, target["expr"], known)]
    assert errors == []
    flagged = exporter_metrics[pipeline_health.STEPS_FLAGGED]
    assert "merged" in flagged.values["reason"], "merged steps are flagged steps (otel_valgen.partials)"


@pytest.mark.parametrize(
    ("expr", "wrong"),
    [
        ("sum (otelcol_valgen_sampler_groups_open_total)", "is not exposed"),  # the rule has no _total
        ("sum by (reason) (rate(valgen_exporter_requests_total[5m]))", "no label reason"),
        ('sum (rate(valgen_exporter_steps_total{outcome="writen"}[5m]))', "never exposed"),
        ("sum (rate(otelcol_valgen_sampler_groups_open[5m]))", "rate()"),
        ("sum (valgen_exporter_requests)", "is not exposed"),
        ("max (valgen_exporter_steps_held) + max (valgen_exporter_steps_held_limit)", "not one metric"),
    ],
)
def test_the_name_check_notices_a_wrong_query(expr: str, wrong: str, exporter_metrics: dict[str, Metric]) -> None:
    """The check above can fail: a misspelt name, label or value, a rate of a gauge."""
    errors = _check("t", expr, {**collector_metrics(), **exporter_metrics})
    assert any(wrong in error for error in errors), errors


def test_the_collector_exposes_its_metrics_by_the_default_rule() -> None:
    """collector.yaml's Prometheus reader sets no naming option, so the rule the real scrape shows applies."""
    config = yaml.safe_load(COLLECTOR_CONFIG.read_text(encoding="utf-8"))
    readers = config["service"]["telemetry"]["metrics"]["readers"]
    exporters = [reader["pull"]["exporter"]["prometheus"] for reader in readers if "pull" in reader]
    assert len(exporters) == 1
    assert set(exporters[0]) <= {"host", "port"}, "a naming option changes the names the dashboard queries"


def _send(endpoint: str, attributes: dict[str, object]) -> None:
    """One valgen.generation record over OTLP/HTTP JSON."""

    def value(v: object) -> dict[str, str]:
        return {"intValue": str(v)} if isinstance(v, int) else {"stringValue": str(v)}

    record = {
        "timeUnixNano": str(time.time_ns()),
        "eventName": "valgen.generation",
        "severityNumber": 9,
        "body": {"kvlistValue": {"values": [{"key": "input", "value": {"stringValue": "q"}}]}},
        "attributes": [{"key": k, "value": value(v)} for k, v in attributes.items()],
    }
    body = {"resourceLogs": [{"resource": {}, "scopeLogs": [{"scope": {"name": "t"}, "logRecords": [record]}]}]}
    request = urllib.request.Request(
        f"http://{endpoint}/v1/logs", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


def test_a_real_collector_scrape_has_every_sampler_name_the_rule_gives(tmp_path: Path) -> None:
    """The built collector, after an open group, a close, a late and a dropped record: the rule's names, typed."""
    metrics_port = free_port()
    env = {"VALGEN_METRICS_PORT": str(metrics_port), "VALGEN_DECISION_WAIT": "300ms"}
    with harness.collector(["collector.yaml"], env, tmp_path) as running:
        generation = {"valgen.run_id": "r", "valgen.step": 1, "valgen.sample_id": "s/0", "valgen.attempt": "l.1"}

        def scrape() -> dict[str, Metric]:
            url = f"http://127.0.0.1:{metrics_port}/metrics"
            with urllib.request.urlopen(url, timeout=5) as response:
                return scraped(response.read().decode())

        _send(running.http_endpoint, generation)
        _send(running.http_endpoint, {"valgen.step": 1})  # no run id: dropped
        harness.wait_for(lambda: "otelcol_valgen_sampler_groups_closed" in scrape(), 20, "the group to close")
        _send(running.http_endpoint, generation)  # late
        harness.wait_for(lambda: "otelcol_valgen_sampler_records_late" in scrape(), 20, "the late record")
        real = scrape()
    rule = collector_metrics()
    used = {name for _, target in _prometheus_targets_of_file() for name in promql(target["expr"]).metrics}
    for name in sorted(n for n in used if n.startswith("otelcol_")):
        assert name in real, f"{name} is not in the real scrape: {sorted(real)}"
        assert real[name].type == rule[name].type, name
        assert real[name].labels <= rule[name].labels, name
    assert not [name for name in real if name.startswith("otelcol_valgen_") and name.endswith("_total")]


def _prometheus_targets_of_file() -> list[tuple[str, dict[str, Any]]]:
    return _prometheus_targets(json.loads(DASHBOARD_FILE.read_text(encoding="utf-8")))


def _collector_metrics_address(spec: dict[str, Any]) -> tuple[str, int]:
    """Where the compose collector serves its own metrics: collector.yaml's reader, with its environment."""
    config = yaml.safe_load(COLLECTOR_CONFIG.read_text(encoding="utf-8"))
    reader = config["service"]["telemetry"]["metrics"]["readers"][0]["pull"]["exporter"]["prometheus"]
    env = {name: value for name, value in spec["environment"].items() if value is not None}

    def resolve(text: str) -> str:
        return re.sub(r"\$\{env:(\w+):-([^}]*)\}", lambda m: str(env.get(m[1]) or m[2]), str(text))

    return resolve(reader["host"]), int(resolve(reader["port"]))


def _exporter_metrics_address(spec: dict[str, Any]) -> tuple[str, int]:
    """Where the compose exporter serves /metrics: its --metrics-address."""
    address = next(arg.split("=", 1)[1] for arg in spec["command"] if arg.startswith("--metrics-address="))
    host, port = address.rsplit(":", 1)
    return host, int(port)


def test_prometheus_scrapes_the_services_where_they_serve_their_metrics() -> None:
    """Every 15 s, collector:8888 and tracker-exporter:4419: compose services listening there on all interfaces."""
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text(encoding="utf-8"))
    assert config["global"]["scrape_interval"] == "15s"
    services = compose.resolved(ENV)["services"]
    serving = {
        "collector": _collector_metrics_address(services["collector"]),
        "tracker-exporter": _exporter_metrics_address(services["tracker-exporter"]),
    }
    targets = []
    for job in config["scrape_configs"]:
        assert job.get("metrics_path", "/metrics") == "/metrics"
        assert job.get("scrape_interval", config["global"]["scrape_interval"]) == "15s"
        for static in job["static_configs"]:
            targets += static["targets"]
    assert sorted(targets) == ["collector:8888", "tracker-exporter:4419"]
    for target in targets:
        host, port = target.rsplit(":", 1)
        assert host in services, f"{target}: no compose service {host}"
        assert serving[host] == ("0.0.0.0", int(port)), f"{target}: {host} serves its metrics on {serving[host]}"
        assert port in [str(p) for p in services[host].get("expose", [])], f"{target}: not exposed"


def test_the_prometheus_service_is_internal_pinned_and_keeps_its_data() -> None:
    """An official image pinned by tag, not published, its config mounted read-only, its data in a named volume."""
    model = compose.resolved(ENV)
    prometheus = model["services"]["prometheus"]
    assert re.fullmatch(r"prom/prometheus:v\d+\.\d+\.\d+", prometheus["image"])
    assert "ports" not in prometheus, "Grafana reaches Prometheus over the compose network"
    flags = dict(arg.split("=", 1) for arg in prometheus["command"])
    mounts = {volume.split(":")[1]: volume.split(":")[0] for volume in prometheus["volumes"]}
    assert mounts[flags["--config.file"]] == "./prometheus/prometheus.yml"
    assert f"./prometheus/prometheus.yml:{flags['--config.file']}:ro" in prometheus["volumes"]
    assert mounts[flags["--storage.tsdb.path"]] == "prometheus-data"
    assert "prometheus-data" in model["volumes"]
    assert prometheus["read_only"] is True
    assert prometheus["cap_drop"] == ["ALL"]
    assert "no-new-privileges:true" in prometheus["security_opt"]
    assert model["services"]["grafana"]["depends_on"]["prometheus"] == {"condition": "service_healthy"}


def test_the_panels_datasource_is_the_provisioned_prometheus(dashboard: dict[str, Any]) -> None:
    """The row's queries use the prometheus variable, defaulting to the uid provisioned at prometheus:9090."""
    provisioned = [
        source
        for path in sorted(DATASOURCES.glob("*.yaml"))
        for source in yaml.safe_load(path.read_text(encoding="utf-8"))["datasources"]
        if source["type"] == "prometheus"
    ]
    assert len(provisioned) == 1
    uid = provisioned[0]["uid"]
    assert uid == parts.DEFAULT_PROMETHEUS_UID
    variable = next(v for v in dashboard["templating"]["list"] if v["name"] == parts.PROMETHEUS_VARIABLE)
    assert (variable["type"], variable["query"], variable["current"]["value"]) == ("datasource", "prometheus", uid)
    for title, target in _prometheus_targets(dashboard):
        assert target["datasource"] == {"type": "prometheus", "uid": "${prometheus}"}, title
    for panel in _row_panels(dashboard):
        if panel.get("targets"):
            assert panel["datasource"] == {"type": "prometheus", "uid": "${prometheus}"}, panel["title"]
    prometheus = compose.resolved(ENV)["services"]["prometheus"]
    listen = next(arg.split("=", 1)[1] for arg in prometheus["command"] if arg.startswith("--web.listen-address="))
    assert provisioned[0]["url"] == f"http://prometheus:{listen.rsplit(':', 1)[1]}"
