"""User story: the compose stack's services, run as local processes with the stack's own settings.

No Docker engine here, so this is the closest run of `docker compose up`: the wandb exporter
is started through the image's entrypoint script with the compose command line and no wandb
key (so offline), the built collector with `collector.yaml` and the compose environment, and
a real Loki with docker/loki/loki.yaml (the stand-in when build/tools/loki is absent). Only
listen addresses, host names and volume paths are rewritten to loopback ports and a temporary
folder. A job's steps must then reach both the offline wandb run and Loki.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from dashboards import validation_generations as vgd
from tests.deploy import compose, harness
from tests.deploy.loki_query import LOKI_BIN, LokiBackend, loki_binary, loki_config, substitute, variables
from tests.deploy.steps import Job, run_job

ENV = {"GF_SECURITY_ADMIN_PASSWORD": "x"}
ENTRYPOINT = harness.REPO / "docker" / "wandb-exporter-entrypoint.sh"


def _rewrite(value: str, hosts: dict[str, str], volumes: dict[str, Path]) -> str:
    """A compose value with container addresses and volume paths mapped to this machine."""
    for host, replacement in hosts.items():
        value = value.replace(host, replacement)
    for path, local in volumes.items():
        value = value.replace(path, str(local))
    return re.sub(r"0\.0\.0\.0:\d+", lambda _: f"127.0.0.1:{harness.free_port()}", value)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Job, Path, LokiBackend | None]]:
    """The stack's processes; yields the job it ran, the exporter's WANDB_DIR and Loki (or None)."""
    pytest.importorskip("wandb", reason="the wandb exporter needs the wandb extra")
    harness.require_collector()
    root = tmp_path_factory.mktemp("stack")
    model = compose.resolved(ENV)
    services = model["services"]
    exporter_grpc, exporter_http = harness.free_port(), harness.free_port()
    volumes = {
        "/var/lib/valgen-exporter": root / "wandb-exporter",
        "/var/lib/otelcol-valgen/state": root / "collector-queue",
        "/var/lib/otelcol-valgen/files": root / "collector-files",
    }
    with ExitStack() as stack:
        # The wandb exporter: the image's entrypoint, the compose command, no key.
        wandb_dir = volumes["/var/lib/valgen-exporter"]
        args = ["sh", str(ENTRYPOINT)]
        ports = {"0.0.0.0:4417": f"127.0.0.1:{exporter_grpc}", "0.0.0.0:4418": f"127.0.0.1:{exporter_http}"}
        args += [_rewrite(arg, ports, volumes) for arg in services["wandb-exporter"]["command"]]
        exporter_env = {
            **{key: str(value) for key, value in services["wandb-exporter"]["environment"].items()},
            "WANDB_DIR": str(wandb_dir),
            "WANDB_SILENT": "true",
            "WANDB_DISABLE_GIT": "true",
        }
        assert exporter_env["WANDB_API_KEY"] == "", "the stack must start without a key"
        stack.enter_context(
            harness.started(
                "wandb-exporter", args, exporter_env, wandb_dir, f"http://127.0.0.1:{exporter_http}/healthz", 60
            )
        )

        # Loki: the real one with the stack's config when built, else the OTLP stand-in.
        loki: LokiBackend | None = None
        if loki_binary() is not None:
            http_port, grpc_port = harness.free_port(), harness.free_port()
            loki_args = [
                str(LOKI_BIN),
                f"-config.file={loki_config(root / 'loki')}",
                "-server.http-listen-address=127.0.0.1",
                f"-server.http-listen-port={http_port}",
                f"-server.grpc-listen-port={grpc_port}",
                "-ingester.min-ready-duration=0s",
            ]
            loki_url = f"http://127.0.0.1:{http_port}"
            stack.enter_context(harness.started("loki", loki_args, {}, root / "loki", f"{loki_url}/ready", 60))
        else:
            loki_url = stack.enter_context(harness.otlp_http_sink()).base_url

        # The collector: the compose environment, rewritten.
        hosts = {"wandb-exporter:4417": f"127.0.0.1:{exporter_grpc}", "http://loki:3100": loki_url}
        collector_env = {
            key: _rewrite(str(value), hosts, volumes) for key, value in services["collector"]["environment"].items()
        }
        # The harness gives the listeners free loopback ports (and waits on that health port).
        for listener in ("VALGEN_OTLP_GRPC_ENDPOINT", "VALGEN_OTLP_HTTP_ENDPOINT", "VALGEN_HEALTH_ENDPOINT"):
            assert collector_env.pop(listener).startswith("127.0.0.1:")
        assert collector_env.pop("VALGEN_METRICS_HOST") == "0.0.0.0", "metrics stay on loopback here"
        collector_env["VALGEN_BATCH_TIMEOUT"] = "200ms"
        configs = [Path(arg).name for arg in services["collector"]["command"] if arg != "--config"]
        running = stack.enter_context(harness.collector(configs, collector_env, root / "collector"))
        job = run_job(running.http_endpoint)
        if LOKI_BIN.is_file():
            loki = LokiBackend(job, running.http_endpoint, loki_url)
        yield job, wandb_dir, loki


def test_a_job_reaches_wandb_offline_and_loki_through_the_stack(stack: tuple[Job, Path, LokiBackend | None]) -> None:
    """Each step of the job appears in Loki (summary and k generations) and, after the exporter stops, in wandb."""
    job, wandb_dir, loki = stack
    if loki is not None:
        query = substitute(vgd.Q_SUMMARIES, **variables(job))
        harness.wait_for(lambda: len(loki.logs(query)) == len(job.steps), 30, "the step summaries in Loki")
        for step in job.steps:
            rows = loki.logs(substitute(vgd.Q_STEP_GENERATIONS, **variables(job, step=str(step))))
            assert len(rows) == job.k
    runs = wandb_dir / "wandb"
    harness.wait_for(lambda: any(runs.glob(f"offline-run-*-{job.run_id}")), 60, "the offline wandb run")


def test_offline_run_holds_the_verl_table_of_every_step(stack: tuple[Job, Path, LokiBackend | None]) -> None:
    """Started without WANDB_API_KEY, the exporter wrote the verl table (k generations per step) offline."""
    from tests.wandb_exporter.wandb_files import read_run

    job, wandb_dir, _ = stack

    def tables() -> list[tuple[int, dict[str, object]]]:
        try:
            return read_run(wandb_dir, job.run_id).tables("val/generations")
        except (OSError, ValueError, AssertionError):
            return []  # the run file is still being written

    harness.wait_for(lambda: len(tables()) == len(job.steps), 60, "a table per step in the offline run")
    # The compose default layout is verl's: one row per step, [step, input_1, output_1, score_1, ...],
    # the table logged again at each step with the earlier rows.
    step, table = tables()[-1]
    assert step == job.steps[-1]
    assert table["columns"][:4] == ["step", "input_1", "output_1", "score_1"]  # type: ignore[index]
    rows = {row[0]: row[1:] for row in table["data"]}  # type: ignore[attr-defined]
    assert sorted(rows) == list(job.steps)
    for row_step, cells in rows.items():
        outputs = cells[1::3]
        assert len(outputs) == job.k
        assert all(output.startswith(f"At step {row_step} ") for output in outputs)
