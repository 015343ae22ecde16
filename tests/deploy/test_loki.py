"""User story: a job's steps go through the collector to Loki, and the dashboard's queries find them.

Two Lokis, the same assertions:
- ``stand-in``: an OTLP/HTTP sink at ``/otlp/v1/logs`` whose requests are mapped to Loki's
  storage model as Loki documents it (tests/deploy/loki_model.py, with the index labels of
  docker/loki/loki.yaml) and queried with a small evaluator of the dashboard's LogQL shapes
  (tests/deploy/logql_subset.py). Runs wherever the collector is built.
- ``loki``: a real Loki v3.7.8 (the compose stack's version) started from
  docker/loki/loki.yaml with only paths and listen addresses changed, queried over its HTTP
  API. Needs ``build/tools/loki``, which the tests build with
  ``bash tools/deploy/install-tools.sh --loki`` when it is absent; skipped when that fails or
  takes longer than a few minutes (an empty Go module cache).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

import pytest
import yaml

from dashboards import validation_generations as vgd
from otel_valgen.sampling import SortKey, bottom_k, sample_key
from tests.deploy import harness, logql_subset, loki_model
from tests.deploy.loki_query import LOKI_BIN, LokiBackend, loki_binary, loki_config, substitute, variables
from tests.deploy.steps import PROMPTS, SEED, Job, run_job, send_late_generation

DASHBOARD = harness.REPO / "docker" / "grafana" / "dashboards" / "validation-generations.json"


class Backend(Protocol):
    """Something that answers the dashboard's queries, fed by a collector at `collector_http`."""

    job: Job
    collector_http: str

    def logs(self, query: str) -> list[dict[str, str]]:
        """The label sets (labels, structured metadata, parsed fields) of the lines a log query returns."""
        ...

    def metric(self, query: str) -> dict[str, float]:
        """An instant metric query aggregated `by` one label: {label value: value}."""
        ...


def expected_ids() -> list[str]:
    """The sample ids the sampler keeps at every step (bottom-k of the job's prompts)."""
    ids = [f"prompt-{i:03d}/0" for i in range(PROMPTS)]
    chosen = bottom_k(((SortKey.of(sample_key(SEED, i), i), i) for i in ids), Job().k)
    return [sample_id for _, sample_id in chosen]


class StandInBackend:
    """The collector's requests to Loki, mapped to Loki's model and queried in process."""

    def __init__(self, job: Job, collector_http: str, entries: Callable[[], list[loki_model.Entry]]) -> None:
        self.job = job
        self.collector_http = collector_http
        self._entries = entries

    @property
    def entries(self) -> list[loki_model.Entry]:
        """Everything the stand-in has received so far, mapped to Loki entries."""
        return self._entries()

    def logs(self, query: str) -> list[dict[str, str]]:
        """Evaluate a log query over the mapped entries."""
        return logql_subset.select(query, self.entries)

    def metric(self, query: str) -> dict[str, float]:
        """Evaluate an instant metric query over the mapped entries."""
        return logql_subset.metric(query, self.entries)


def _summaries(backend: Backend) -> list[dict[str, str]]:
    return backend.logs(substitute(vgd.Q_SUMMARIES, **variables(backend.job)))


# Late generations are forwarded (not the compose default, `drop`) so that the dashboard's
# "Late generations" panel has something to show.
COLLECTOR_ENV = {"VALGEN_DECISION_WAIT": "60s", "VALGEN_LATE_RECORDS": "forward"}


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandInBackend]:
    """The job sent through collector.yaml to the Loki stand-in."""
    workdir = tmp_path_factory.mktemp("loki-stand-in")
    index = loki_model.index_label_attributes()
    with harness.otlp_http_sink() as sink:
        env = {"VALGEN_LOKI_OTLP_ENDPOINT": f"{sink.base_url}/otlp", **COLLECTOR_ENV}
        with harness.collector(["collector.yaml"], env, workdir) as running:
            job = run_job(running.http_endpoint)
            backend = StandInBackend(
                job,
                running.http_endpoint,
                lambda: [e for r in sink.at("/otlp/v1/logs") for e in loki_model.entries(r, index)],
            )
            harness.wait_for(
                lambda: len(_summaries(backend)) == len(job.steps), 30, "the step summaries at the Loki stand-in"
            )
            yield backend
            assert [path for path, _ in sink.by_path if path != "/otlp/v1/logs"] == []


@pytest.fixture(scope="module")
def real_loki(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LokiBackend]:
    """The job sent through collector.yaml to a real Loki running the compose stack's config."""
    harness.require_collector()
    if loki_binary() is None:
        pytest.skip(f"{LOKI_BIN.relative_to(harness.REPO)} could not be built; run `{harness.INSTALL_TOOLS} --loki`")
    workdir = tmp_path_factory.mktemp("loki")
    http_port, grpc_port = harness.free_port(), harness.free_port()
    args = [
        str(LOKI_BIN),
        f"-config.file={loki_config(workdir)}",
        "-server.http-listen-address=127.0.0.1",
        f"-server.http-listen-port={http_port}",
        f"-server.grpc-listen-port={grpc_port}",
        "-ingester.min-ready-duration=0s",
    ]
    base_url = f"http://127.0.0.1:{http_port}"
    with harness.started("loki", args, {}, workdir, f"{base_url}/ready", 60):
        env = {"VALGEN_LOKI_OTLP_ENDPOINT": f"{base_url}/otlp", **COLLECTOR_ENV}
        with harness.collector(["collector.yaml"], env, workdir / "collector") as running:
            job = run_job(running.http_endpoint)
            backend = LokiBackend(job, running.http_endpoint, base_url)
            harness.wait_for(lambda: len(_summaries(backend)) == len(job.steps), 30, "the step summaries in Loki")
            yield backend


@pytest.fixture(params=["stand-in", "loki"])
def backend(request: pytest.FixtureRequest) -> Backend:
    """Each Loki in turn."""
    name = "stand_in" if request.param == "stand-in" else "real_loki"
    return request.getfixturevalue(name)  # type: ignore[no-any-return]


def test_loki_verifies_the_compose_config(tmp_path: Path) -> None:
    """Loki v3.7.8 itself accepts docker/loki/loki.yaml (strict: an unknown key fails)."""
    if loki_binary() is None:
        pytest.skip(f"{LOKI_BIN.relative_to(harness.REPO)} could not be built; run `{harness.INSTALL_TOOLS} --loki`")
    args = [str(LOKI_BIN), f"-config.file={loki_config(tmp_path)}", "-verify-config"]
    result = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    broken = tmp_path / "broken.yaml"
    broken.write_text(loki_config(tmp_path).read_text().replace("max_line_size:", "max_line_sise:"), encoding="utf-8")
    broken_args = [args[0], f"-config.file={broken}", "-verify-config"]
    refused = subprocess.run(broken_args, capture_output=True, timeout=60, check=False)
    assert refused.returncode != 0, "verify-config must reject unknown keys for this check to mean anything"


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


def test_only_low_cardinality_labels_index_the_records(stand_in: StandInBackend) -> None:
    """Every stream is labelled by service_name alone; run, step, instance and trace ids are metadata."""
    assert {tuple(sorted(entry.labels.items())) for entry in stand_in.entries} == {(("service_name", "deploy-test"),)}
    kept = [entry for entry in stand_in.entries if "valgen_rank" in entry.metadata]
    assert kept
    for entry in kept:
        assert {"valgen_run_id", "valgen_step", "service_instance_id", "trace_id"} <= set(entry.metadata)
        assert set(json.loads(entry.line)) == {"input", "output", "ground_truth"}


def test_real_loki_indexes_no_run_or_step(real_loki: LokiBackend) -> None:
    """Loki's label API lists service_name but none of the per-run or per-step names."""
    names = real_loki.label_names()
    assert "service_name" in names
    assert not {"valgen_run_id", "valgen_step", "valgen_sample_id", "service_instance_id", "trace_id"} & set(names)


def test_step_table_lists_the_kept_generations_of_the_step(backend: Backend) -> None:
    """The step panel's query returns the k kept generations of that step, with every column the table shows."""
    rows = backend.logs(substitute(vgd.Q_STEP_GENERATIONS, **variables(backend.job, step="200")))
    assert sorted(row["valgen_sample_id"] for row in rows) == sorted(expected_ids())
    assert sorted(int(row["valgen_rank"]) for row in rows) == list(range(1, backend.job.k + 1))
    for row in rows:
        assert row["valgen_step"] == "200"
        assert row["input"].startswith("What is ")
        assert row["output"].startswith("At step 200 ")
        assert row["ground_truth"].isdigit()
        assert row["valgen_data_source"] == "synthetic-math"
        assert 0.0 <= float(row["valgen_score"]) <= 1.0
        assert len(row["trace_id"]) == 32
    assert len({row["trace_id"] for row in rows}) == 1, "one trace id per (run, step)"


def test_prompt_panel_follows_one_prompt_across_steps(backend: Backend) -> None:
    """The prompt panel's query returns the chosen prompt's output once per step."""
    sample = expected_ids()[0]
    rows = backend.logs(substitute(vgd.Q_PROMPT_ACROSS_STEPS, **variables(backend.job, sample=sample)))
    assert sorted(int(row["valgen_step"]) for row in rows) == list(backend.job.steps)
    assert {row["valgen_sample_id"] for row in rows} == {sample}
    assert all(row["output"].startswith(f"At step {row['valgen_step']} ") for row in rows)


def test_summary_table_and_counts_per_step(backend: Backend) -> None:
    """The summary panel lists one summary per step; the count queries give seen, kept, late and missing per step."""
    rows = _summaries(backend)
    assert sorted(int(row["valgen_step"]) for row in rows) == list(backend.job.steps)
    for row in rows:
        assert (row["valgen_seen"], row["valgen_kept"], row["valgen_closed_reason"]) == (
            str(PROMPTS),
            str(backend.job.k),
            "complete",
        )
        assert len(row["trace_id"]) == 32
    values = variables(backend.job)
    steps = {str(step) for step in backend.job.steps}
    expected = {vgd.SEEN: PROMPTS, vgd.KEPT: backend.job.k, vgd.LATE: 0, vgd.MISSING: 0}
    for field, count in expected.items():
        assert backend.metric(substitute(vgd.summary_count(field), **values)) == dict.fromkeys(steps, count), field


def test_mean_score_per_step(backend: Backend) -> None:
    """The score panel's query averages the kept generations' scores per step."""
    values = variables(backend.job)
    means = backend.metric(substitute(vgd.Q_MEAN_SCORE, **values))
    assert set(means) == {str(step) for step in backend.job.steps}
    for step, mean in means.items():
        rows = backend.logs(substitute(vgd.Q_STEP_GENERATIONS, **variables(backend.job, step=step)))
        assert mean == pytest.approx(sum(float(row["valgen_score"]) for row in rows) / len(rows))


def test_every_table_column_is_in_what_loki_returns(backend: Backend) -> None:
    """Each column a table panel keeps (organize) is a field of the rows its query returns."""
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    checked = 0
    for panel in dashboard["panels"]:
        if panel["type"] != "table" or "Late" in panel["title"]:
            continue  # late generations exist only with late_records: forward
        organize = next(t for t in panel["transformations"] if t["id"] == "organize")
        rows = backend.logs(substitute(panel["targets"][0]["expr"], **variables(backend.job, step="100")))
        assert rows, panel["title"]
        missing = set(organize["options"]["includeByName"]) - set().union(*rows)
        assert not missing, f"{panel['title']}: {missing}"
        checked += 1
    assert checked == 3


def test_late_panel_lists_generations_that_arrive_after_their_step_closed(backend: Backend) -> None:
    """A generation for a closed step, forwarded as late, is listed by the late panel and by no sampled panel."""
    send_late_generation(backend.collector_http, step=100, sample_id="straggler-prompt")
    query = substitute(vgd.Q_LATE, **variables(backend.job))
    harness.wait_for(lambda: len(backend.logs(query)) == 1, 30, "the late generation")
    (row,) = backend.logs(query)
    assert (row["valgen_step"], row["valgen_sample_id"]) == ("100", "straggler-prompt/0")
    assert (row["input"], row["output"]) == ("a late question", "a late answer")
    kept = backend.logs(substitute(vgd.Q_STEP_GENERATIONS, **variables(backend.job, step="100")))
    assert "straggler-prompt/0" not in {r["valgen_sample_id"] for r in kept}
