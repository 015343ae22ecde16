"""User story: the README's `docker compose ... up -d --build`, for real, and a job on the host.

The command is read from the README and run as written from the repository root, on an engine
whose build cache was emptied first (tests/deploy/docker_stack.py): our images are built as a
user's first build builds them, on local stand-ins for the official base images, and Loki,
Grafana and Prometheus are stand-ins under their official names. A training process on this host
sends its steps to the collector's published loopback port. The tests run in file order on one
stack: the restart and auth checks come last because they recreate the collector.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from packaging.utils import canonicalize_name

from otel_valgen.sampling import untagged
from tests.deploy import harness, loki_model
from tests.deploy.docker_stack import REPO, Stack, Started, our_images, readme_stack, run
from tests.deploy.steps import Job, expected_ids, run_job, send_part
from tests.deploy.test_build_contexts import is_static_elf
from tests.deploy.test_pipeline_health import promql
from tests.test_locks import pins

# The first test also builds the images: a cold build of the collector image compiles the whole
# distribution (minutes on 2 cores), far beyond the suite's default per-test timeout.
pytestmark = pytest.mark.timeout(2400)

COLLECTOR_FILE = "/var/lib/otelcol-valgen/files/valgen.jsonl"
EXPORTER_DIR = "/var/lib/valgen-exporter"
# Short enough for a quick test; a step with sources_expected closes as soon as it is complete.
STACK_ENV = {"GF_SECURITY_ADMIN_PASSWORD": "stack-test", "VALGEN_DECISION_WAIT": "5s"}
RESTART_STEP = 300
TOKEN = "stack-test-token-0123456789abcdef"


@pytest.fixture(scope="module")
def started() -> Iterator[Started]:
    """The README's `docker compose ... up -d --build` on an empty build cache, healthy; torn down afterwards."""
    with readme_stack(dict(STACK_ENV)) as up:
        print(f"\nthe README's compose command built and started the stack in {up.seconds:.0f} s", file=sys.stderr)
        try:
            yield up
        except BaseException:
            print(up.stack.logs(), file=sys.stderr)
            raise


@pytest.fixture(scope="module")
def stack(started: Started) -> Stack:
    """The compose project the README's command started."""
    return started.stack


@pytest.fixture(scope="module")
def job(stack: Stack) -> Job:
    """The job's steps, sent from this host to the collector's published OTLP/HTTP port."""
    return run_job(stack.otlp_http)


def test_the_readme_command_builds_every_step_anew_and_the_stack_turns_healthy(started: Started) -> None:
    """No RUN step of either image came from a cache: the dependency installs and the collector build ran."""
    headers = dict(re.findall(r"^#(\d+) \[([^\]]+)\] RUN ", started.output, re.MULTILINE))
    assert {step.split()[0] for step in headers.values()} == {"collector", "tracker-exporter"}, headers
    cached_steps = re.findall(r"^#(\d+) CACHED$", started.output, re.MULTILINE)
    cached = [headers[number] for number in cached_steps if number in headers]
    assert not cached, f"steps served from a build cache: {cached}"
    for image in our_images():
        created = run([started.stack.docker, "image", "inspect", "--format", "{{.Created}}", image]).strip()
        assert datetime.fromisoformat(created[:26].rstrip("Z")).timestamp() >= started.began - 5, image


def test_the_exporter_image_holds_exactly_its_lock(stack: Stack) -> None:
    """The image's pip lists the lock's pins and this package, nothing else."""
    listed = json.loads(stack.exec("tracker-exporter", "pip", "list", "--format=json", "--disable-pip-version-check"))
    have = {canonicalize_name(entry["name"]): entry["version"] for entry in listed}
    assert have.pop("otel-valgen", None) is not None
    have.pop("pip", None)  # the venv's own installer
    assert have == pins(REPO / "requirements" / "exporter.lock")


def test_the_collector_image_runs_a_static_binary(stack: Stack, tmp_path: Path) -> None:
    """The binary needs no C library, so the official Alpine runtime image runs it (ours is Debian)."""
    binary = stack.copy_out("collector", "/usr/local/bin/otelcol-valgen", tmp_path / "otelcol-valgen")
    assert is_static_elf(binary)


def _started(container: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(container["State"]["StartedAt"][:26].rstrip("Z"))


def _first_healthy(container: dict[str, Any]) -> datetime:
    passed = [entry for entry in container["State"]["Health"]["Log"] if entry["ExitCode"] == 0]
    assert passed, f"{container['Name']} never passed its health check"
    return datetime.fromisoformat(passed[0]["End"][:26].rstrip("Z"))


def _collector_records(stack: Stack, tmp: Path) -> list[dict[str, Any]]:
    """Every log record in the collector-files volume, with its resource attributes."""
    path = stack.copy_out("collector", COLLECTOR_FILE, tmp / "valgen.jsonl")
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        for resource_logs in json.loads(line).get("resourceLogs", []):
            for scope_logs in resource_logs.get("scopeLogs", []):
                for record in scope_logs.get("logRecords", []):
                    attributes = {kv["key"]: next(iter(kv["value"].values())) for kv in record.get("attributes", [])}
                    records.append({"event": record.get("eventName", ""), "attributes": attributes})
    return records


def _summaries(records: list[dict[str, Any]], step: int) -> list[dict[str, Any]]:
    return [
        r["attributes"]
        for r in records
        if r["event"] == "valgen.step.summary" and int(r["attributes"].get("valgen.step", -1)) == step
    ]


def _wait_for_summaries(stack: Stack, tmp: Path, steps: tuple[int, ...]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []

    def closed() -> bool:
        nonlocal found
        try:
            found = _collector_records(stack, tmp)
        except AssertionError:
            return False  # the file does not exist before the first export
        return all(_summaries(found, step) for step in steps)

    harness.wait_for(closed, 60, f"the summaries of steps {steps} in the collector-files volume")
    return found


def test_every_service_turns_healthy_in_dependency_order(stack: Stack) -> None:
    """Every health check passes; the collector starts after Loki and the exporter, Grafana after Loki, Prometheus."""
    containers = {
        name: stack.inspect(name) for name in ("collector", "tracker-exporter", "loki", "prometheus", "grafana")
    }
    for name, container in containers.items():
        assert container["State"]["Health"]["Status"] == "healthy", name
    collector_start = _started(containers["collector"])
    assert collector_start >= _first_healthy(containers["loki"])
    assert collector_start >= _first_healthy(containers["tracker-exporter"])
    assert _started(containers["grafana"]) >= _first_healthy(containers["loki"])
    assert _started(containers["grafana"]) >= _first_healthy(containers["prometheus"])
    assert urllib.request.urlopen(stack.url("VALGEN_GRAFANA_PORT", "/api/health"), timeout=5).status == 200


def test_every_published_port_is_on_loopback(stack: Stack) -> None:
    """Docker publishes the stack's ports on 127.0.0.1 only; the exporter and Prometheus publish none."""
    for name in ("collector", "tracker-exporter", "loki", "prometheus", "grafana"):
        bindings = stack.inspect(name)["NetworkSettings"]["Ports"] or {}
        hosts = {binding["HostIp"] for published in bindings.values() if published for binding in published}
        assert hosts <= {"127.0.0.1"}, (name, bindings)
        if name in ("tracker-exporter", "prometheus"):
            assert not hosts


def test_file_volume_holds_k_records_per_step_as_show_chooses(stack: Stack, job: Job, tmp_path: Path) -> None:
    """The collector's file output has exactly k ranked records per step: the bottom-k `show` also picks."""
    records = _wait_for_summaries(stack, tmp_path, job.steps)
    for step in job.steps:
        (summary,) = _summaries(records, step)
        assert summary["valgen.closed_reason"] == "complete"
        kept = [
            untagged(r["attributes"]["valgen.sample_id"])
            for r in records
            if r["event"] == "valgen.generation" and int(r["attributes"]["valgen.step"]) == step
        ]
        assert sorted(kept) == sorted(expected_ids(range(job.generations_per_step), job.k))
    shown = subprocess.run(
        [sys.executable, "-m", "otel_valgen.cli.main", "show", "--format", "json", str(tmp_path / "valgen.jsonl")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    by_step = {entry["step"]: entry for entry in map(json.loads, shown.splitlines())}
    for step in job.steps:
        shown_ids = sorted(untagged(g["sample_id"]) for g in by_step[step]["generations"])
        assert shown_ids == sorted(expected_ids(range(job.generations_per_step), job.k))


def test_exporter_volume_holds_the_offline_run_with_k_rows_per_step(stack: Stack, job: Job, tmp_path: Path) -> None:
    """Without WANDB_API_KEY the exporter writes an offline run into its volume: verl's table, k generations a step."""
    from tests.exporter.wandb_files import read_run

    _wait_for_summaries(stack, tmp_path, job.steps)

    def tables() -> list[tuple[int, dict[str, Any]]]:
        try:
            copied = stack.copy_out("tracker-exporter", f"{EXPORTER_DIR}/wandb", tmp_path / "exporter" / "wandb")
            return read_run(copied.parent, job.run_id).tables("val/generations")
        except (OSError, ValueError, AssertionError):
            return []  # not written yet
        finally:
            shutil.rmtree(tmp_path / "exporter", ignore_errors=True)

    found: list[tuple[int, dict[str, Any]]] = []

    def complete() -> bool:
        nonlocal found
        found = tables()
        return len(found) == len(job.steps)

    harness.wait_for(complete, 90, "a verl table per step in the exporter's offline run")
    step, table = found[-1]
    assert step == job.steps[-1]
    rows = {row[0]: row for row in table["data"]}
    assert sorted(rows) == list(job.steps)
    output_columns = [i for i, name in enumerate(table["columns"]) if name.startswith("output_")]
    for row_step, cells in rows.items():
        outputs = [cells[i] for i in output_columns]
        assert len(outputs) == job.k
        assert all(output.startswith(f"At step {row_step} ") for output in outputs)


def test_loki_received_the_labels_and_metadata_the_docs_promise(stack: Stack, job: Job, tmp_path: Path) -> None:
    """What the collector sent to Loki's /otlp/v1/logs maps to docs/deployment.md's labels, metadata and line."""
    _wait_for_summaries(stack, tmp_path, job.steps)
    url = stack.url("VALGEN_LOKI_PORT", "/standin/requests")

    def entries() -> list[loki_model.Entry]:
        with urllib.request.urlopen(url, timeout=5) as response:
            received = json.loads(response.read())
        out = []
        for request in received:
            assert request["content_type"] == "application/x-protobuf"
            message = logs_service_pb2.ExportLogsServiceRequest.FromString(base64.b64decode(request["body"]))
            out += loki_model.entries(message, loki_model.index_label_attributes())
        return out

    kept: list[loki_model.Entry] = []

    def arrived() -> bool:
        nonlocal kept
        kept = [e for e in entries() if "valgen_rank" in e.metadata and e.metadata.get("valgen_run_id") == job.run_id]
        return len(kept) == job.k * len(job.steps)

    harness.wait_for(arrived, 60, "k ranked records per step at the Loki stand-in")
    for entry in kept:
        assert entry.labels == {"service_name": job.service}, "only low-cardinality resource attributes are labels"
        for name in ("valgen_run_id", "valgen_step", "valgen_sample_id", "valgen_score", "service_instance_id"):
            assert entry.metadata.get(name), name
        assert len(entry.metadata["trace_id"]) == 32
        line = json.loads(entry.line)
        assert line["input"].startswith("What is ")
        assert line["output"].startswith("At step ")
    summaries = [e for e in entries() if "valgen_closed_reason" in e.metadata]
    assert {int(e.metadata["valgen_step"]) for e in summaries} >= set(job.steps)


# A sampler metric appears at its first change: the job sends no late or invalid record, and
# each of its steps opens and completes within one request, so the open groups never change
# between requests (the row shows "None counted yet" for these).
NOT_YET_COUNTED = {
    "otelcol_valgen_sampler_records_late",
    "otelcol_valgen_sampler_records_dropped",
    "otelcol_valgen_sampler_groups_open",
}


def test_prometheus_reaches_every_scrape_target_with_the_dashboards_names(stack: Stack, job: Job) -> None:
    """From the prometheus container, each target of prometheus.yml serves /metrics with the row's metric names."""
    config = yaml.safe_load((harness.REPO / "docker" / "prometheus" / "prometheus.yml").read_text(encoding="utf-8"))
    targets = [
        target for scrape in config["scrape_configs"] for s in scrape["static_configs"] for target in s["targets"]
    ]
    dashboard = json.loads(
        (harness.REPO / "docker" / "grafana" / "dashboards" / "validation-generations.json").read_text()
    )
    wanted = {
        name
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
        if target["datasource"]["type"] == "prometheus"
        for name in promql(target["expr"]).metrics
    }
    served: set[str] = set()

    def scraped_all() -> bool:
        for target in targets:
            text = stack.exec("prometheus", "wget", "-q", "-O", "-", f"http://{target}/metrics")
            served.update(line.split("{")[0].split(" ")[0] for line in text.splitlines() if not line.startswith("#"))
        return wanted - served <= NOT_YET_COUNTED

    harness.wait_for(scraped_all, 60, f"the dashboard's metric names at {targets}")
    assert wanted - served <= NOT_YET_COUNTED, sorted(wanted - served)
    assert "otelcol_valgen_sampler_groups_closed" in served, "the job's steps closed"


def test_containers_run_as_their_users_and_write_their_volumes(stack: Stack) -> None:
    """The collector and the exporter run as uid 10001 and can write every volume they mount."""
    volumes = {
        "collector": ["/var/lib/otelcol-valgen/state", "/var/lib/otelcol-valgen/files"],
        "tracker-exporter": [EXPORTER_DIR],
    }
    for service, paths in volumes.items():
        assert stack.inspect(service)["Config"]["User"] == "10001:10001"
        status = stack.exec(service, "cat", "/proc/1/status")
        uids = next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1:]
        assert set(uids) == {"10001"}, (service, uids)
        for path in paths:
            stack.exec(service, "sh", "-c", f"touch {path}/.probe && rm {path}/.probe")


def test_a_step_split_by_a_collector_restart_completes_exactly_once(stack: Stack, job: Job, tmp_path: Path) -> None:
    """One source ends, the collector restarts, the other ends: one complete summary, k records, no duplicates."""
    send_part(stack.otlp_http, RESTART_STEP, "first", range(10), sources_expected=2)
    stack.compose("restart", "collector")
    stack.up("collector")
    send_part(stack.otlp_http, RESTART_STEP, "second", range(10, 20), sources_expected=2)
    records = _wait_for_summaries(stack, tmp_path, (RESTART_STEP,))
    (summary,) = _summaries(records, RESTART_STEP)
    assert summary["valgen.closed_reason"] == "complete"
    assert int(summary["valgen.sources_ended"]) == 2
    kept = [
        untagged(r["attributes"]["valgen.sample_id"])
        for r in records
        if r["event"] == "valgen.generation" and int(r["attributes"]["valgen.step"]) == RESTART_STEP
    ]
    assert sorted(kept) == sorted(expected_ids(range(20), job.k))


def _post_logs(stack: Stack, token: str | None) -> int:
    return harness.post_logs(stack.otlp_http, {"Authorization": f"Bearer {token}"} if token else {})


def test_with_the_auth_overlay_only_jobs_with_the_token_get_in(stack: Stack) -> None:
    """docker-compose.auth.yml: a request without the bearer token gets 401, with it 200."""
    assert _post_logs(stack, None) == 200, "the base stack takes jobs without a token"
    stack.env["VALGEN_AUTH_TOKEN"] = TOKEN
    stack.compose("up", "--detach", "--no-build", "--wait", "--wait-timeout", "240", "collector", auth=True)
    assert _post_logs(stack, None) == 401
    assert _post_logs(stack, "not-the-token") == 401
    assert _post_logs(stack, TOKEN) == 200
