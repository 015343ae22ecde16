"""End to end: emitting processes -> the built collector (collector.yaml) -> this service -> offline run.

Needs ``build/otelcol-valgen`` (built from collector/); skipped with a message without it.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from otel_valgen import contract
from otel_valgen.exporter.backends import create_backends
from otel_valgen.exporter.backends.tensorboard import TensorBoardConfig
from otel_valgen.exporter.backends.wandb import WriterConfig
from otel_valgen.exporter.server import ExporterServer
from otel_valgen.exporter.service import ExporterService, ServiceConfig
from otel_valgen.reader import read_paths
from otel_valgen.selection import select_steps
from tests.e2e.harness import records_of_file, records_of_json
from tests.support.ports import free_port
from tests.support.require import require_or_skip

from .conftest import ROLLOUT_KEY, wait_for, written
from .emit_steps import DATA_SOURCES
from .tensorboard_files import read_texts
from .wandb_files import read_run

ROOT = Path(__file__).resolve().parents[2]
BINARY = ROOT / "build" / "otelcol-valgen"
CONFIG = ROOT / "collector-config" / "collector.yaml"
EMITTER = "tests.exporter.emit_steps"


@pytest.fixture(autouse=True)
def _require_collector() -> None:
    """Skip, saying why, without the built collector (a failure under VALGEN_REQUIRE_ALL=1)."""
    require_or_skip(
        BINARY.exists() and CONFIG.exists(),
        f"end-to-end test needs the built collector at {BINARY} and {CONFIG}; build it with `make collector`",
    )


class Exporter:
    """The exporter (wandb and TensorBoard) on a fixed loopback gRPC port, restartable on that port and state."""

    def __init__(self, port: int, state: Path, tensorboard_root: Path) -> None:
        config = ServiceConfig(state_dir=str(state), retry_after_s=1)
        configs = {
            "wandb": WriterConfig(layout="rows", mode="offline"),
            "tensorboard": TensorBoardConfig(root=str(tensorboard_root)),
        }
        self.service = ExporterService(config, create_backends(["wandb", "tensorboard"], str(state), configs))
        self.server = ExporterServer(self.service, http=None, grpc_address=f"127.0.0.1:{port}")
        self.service.start()
        self.server.start()

    def stop(self) -> None:
        """Stop serving and write what is held."""
        self.server.stop(1)
        self.service.stop()


@pytest.fixture
def collector(tmp_path: Path) -> Iterator[tuple[str, int]]:
    """The built collector on loopback ports, exporting to a gRPC port for this service."""
    wandb_port, http_port, grpc_port, health = free_port(), free_port(), free_port(), free_port()
    env = os.environ | {
        "VALGEN_TRACKER_EXPORTER_ENDPOINT": f"127.0.0.1:{wandb_port}",
        "VALGEN_OTLP_HTTP_ENDPOINT": f"127.0.0.1:{http_port}",
        "VALGEN_OTLP_GRPC_ENDPOINT": f"127.0.0.1:{grpc_port}",
        "VALGEN_HEALTH_ENDPOINT": f"127.0.0.1:{health}",
        "VALGEN_METRICS_PORT": str(free_port()),  # not the default 8888: collectors of other test files run beside it
        "VALGEN_STATE_DIR": str(tmp_path / "collector"),
        "VALGEN_FILE_PATH": str(tmp_path / "collector" / "valgen.jsonl"),
        "VALGEN_LOKI_OTLP_ENDPOINT": f"http://127.0.0.1:{free_port()}/otlp",
        "VALGEN_COUNT": "3",
        "VALGEN_DECISION_WAIT": "3s",
        "VALGEN_BATCH_TIMEOUT": "200ms",
    }
    log = (tmp_path / "collector.log").open("w")
    process = subprocess.Popen([str(BINARY), "--config", str(CONFIG)], env=env, stdout=log, stderr=log)

    def healthy() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{health}/", timeout=1) as response:
                return bool(response.status == 200)
        except OSError:
            return process.poll() is not None

    try:
        wait_for(healthy, 30)
        assert process.poll() is None, (tmp_path / "collector.log").read_text()
        yield f"http://127.0.0.1:{http_port}", wandb_port
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


def summarized_steps(path: Path) -> set[int]:
    """The steps with a ``valgen.step.summary`` in the collector's file exporter output so far."""
    if not path.exists():
        return set()
    steps = set()
    for line in path.read_text(encoding="utf-8").split("\n"):
        try:
            data = json.loads(line)
        except ValueError:
            continue  # a line still being written
        steps |= {
            record.attributes[contract.STEP]
            for record in records_of_json(data)
            if record.event == contract.EVENT_STEP_SUMMARY
        }
    return steps


def emit(endpoint: str, steps: str, *, rollouts: bool = False, env: dict[str, str] | None = None) -> str:
    """Two emitting processes (trainer and rollouter) of one launch send their parts of ``steps``.

    Plain processes (no launcher the library knows) share the fallback launch id ``run`` of their
    run; each launch here gets its own ``OTEL_VALGEN_LAUNCH_ID`` (one new value per launch, README
    *Launches*), so that the two launches' attempts differ. With ``rollouts`` each also sends the
    steps' training rollouts; with ``OTEL_VALGEN_SAMPLE_BY`` in ``env``, its generations'
    data sources. Returns the launch id.
    """
    launch = uuid.uuid4().hex[:12]
    environment = os.environ | {"OTEL_VALGEN_LAUNCH_ID": launch, **(env or {})}
    mode = "rollouts" if rollouts else "data_sources" if "OTEL_VALGEN_SAMPLE_BY" in environment else ""
    args = [sys.executable, "-m", "tests.exporter.emit_steps", endpoint, "e2e"]
    procs = [
        subprocess.Popen([*args, source, steps, *([mode] if mode else [])], cwd=ROOT, env=environment)
        for source in ("trainer", "rollouter")
    ]
    for proc in procs:
        assert proc.wait(60) == 0
    return launch


@pytest.mark.timeout(150)
def test_collector_to_offline_run_k_rows_per_step_across_a_restart(
    wandb_dir: Path, tmp_path: Path, collector: tuple[str, int]
) -> None:
    """K rows per step in every backend, one closed step per request; a restart writes each step once."""
    endpoint, port = collector
    state, boards = tmp_path / "exporter-state", tmp_path / "tensorboard"
    exporter = Exporter(port, state, boards)
    first = emit(endpoint, "10,20")
    wait_for(lambda: written(exporter.service) == 2 and written(exporter.service, "tensorboard") == 2, 60)
    counts = exporter.service.stats()
    assert (counts["steps"], counts["summaries"], counts["without_summary"]) == (2, 2, 0)
    exporter.stop()  # the collector keeps running and queues for the service
    second = emit(endpoint, "30")
    # Step 30 closes at the collector (its file exporter has the summary) while the service is down.
    wait_for(lambda: 30 in summarized_steps(tmp_path / "collector" / "valgen.jsonl"), 30)
    exporter = Exporter(port, state, boards)
    wait_for(lambda: written(exporter.service) == 1 and written(exporter.service, "tensorboard") == 1, 60)
    wait_for(exporter.service.idle, 30)
    exporter.stop()
    texts = read_texts(boards / "otel-valgen" / "e2e", "val/generations")
    assert sorted(texts) == [10, 20, 30]
    assert all(text.count("### Sample") == 3 for text in texts.values())
    tables = read_run(wandb_dir, "e2e").tables("val/generations")
    rows = [row for _, table in tables for row in table["data"]]
    per_step = {step: sorted(row[1] for row in rows if row[0] == step) for step in (10, 20, 30)}
    assert [step for step, _ in tables] == [10, 20, 30]
    for step, samples in per_step.items():
        assert len(samples) == 3, (step, samples)
        assert len(set(samples)) == 3
    # Both processes of a launch form one attempt of each step: its first (and only) attempt.
    attempt = tables[0][1]["columns"].index("attempt")
    attempts = {step: {row[attempt] for row in rows if row[0] == step} for step in (10, 20, 30)}
    assert attempts == {10: {f"{first}.1"}, 20: {f"{first}.1"}, 30: {f"{second}.1"}}
    assert {row[3] for row in rows} <= {"trainer", "rollouter"}


@pytest.mark.timeout(150)
def test_collector_to_backends_a_steps_rollouts_beside_its_validation(
    wandb_dir: Path, tmp_path: Path, collector: tuple[str, int]
) -> None:
    """The sampler's rollout group lands in train/generations as `show --kind rollout` picks it, by prompt."""
    endpoint, port = collector
    boards, output = tmp_path / "tensorboard", tmp_path / "collector" / "valgen.jsonl"
    exporter = Exporter(port, tmp_path / "exporter-state", boards)
    emit(endpoint, "40", rollouts=True)
    wait_for(lambda: written(exporter.service) == 2 and written(exporter.service, "tensorboard") == 2, 60)
    exporter.stop()
    counts = exporter.service.stats()
    assert (counts["validation_steps"], counts["rollout_steps"], counts["without_summary"]) == (1, 1, 0)

    def shown() -> list[str]:
        selections = select_steps(read_paths([output], lambda _: None), kind=contract.KIND_ROLLOUT)
        return [g.sample_id for selection in selections for g in selection.generations]

    wait_for(lambda: len(shown()) == 2 * 3, 30)  # k = 2 prompts of 8, with their 3 responses each
    files = read_run(wandb_dir, "e2e")
    ((step, table),) = files.tables(ROLLOUT_KEY)
    assert step == 40
    assert [row[2] for row in table["data"]] == shown()
    assert len([prompt for prompt, _ in itertools.groupby(row[1] for row in table["data"])]) == 2
    ((_, validation),) = files.tables("val/generations")
    assert len(validation["data"]) == 3
    assert sorted(read_texts(boards / "otel-valgen" / "e2e", ROLLOUT_KEY)) == [40]


def _one_step_to_the_run(collector: tuple[str, int], tmp_path: Path, step: str, env: dict[str, str]) -> Path:
    """Both processes send ``step`` with ``env`` added; once the service wrote it, the collector's output file."""
    endpoint, port = collector
    exporter = Exporter(port, tmp_path / "exporter-state", tmp_path / "tensorboard")
    emit(endpoint, step, env=env)
    wait_for(lambda: written(exporter.service) == 1, 60)
    exporter.stop()
    return tmp_path / "collector" / "valgen.jsonl"


@pytest.mark.timeout(150)
def test_k_per_data_source_from_the_jobs_variable_to_the_offline_run(
    wandb_dir: Path, tmp_path: Path, collector: tuple[str, int]
) -> None:
    """OTEL_VALGEN_SAMPLE_BY=data_source: k of each data source kept, and each one's figures in the run's history."""
    output = _one_step_to_the_run(collector, tmp_path, "50", {"OTEL_VALGEN_SAMPLE_BY": "data_source"})

    (selection,) = select_steps(read_paths([output], lambda _: None))
    assert selection.by_data_source
    names = ("gsm8k", "math", "")
    kept = {name: sum(1 for g in selection.generations if (g.data_source or "") == name) for name in names}
    assert kept == {"gsm8k": 3, "math": 3, "": 2}, "k = 3 of each data source, all of a smaller one"
    sent = [(DATA_SOURCES[i] or "", i / 8) for _ in ("trainer", "rollouter") for i in range(8)]
    figures = {figure.data_source: figure for figure in selection.data_sources or ()}
    for name in ("gsm8k", "math", ""):
        scores = [score for source, score in sent if source == name]
        assert (figures[name].seen, figures[name].kept) == (len(scores), kept[name])
        assert figures[name].score_mean == pytest.approx(sum(scores) / len(scores))

    files = read_run(wandb_dir, "e2e")
    ((step, table),) = files.tables("val/generations")
    assert step == 50
    column = table["columns"].index("data_source")
    assert sorted(str(row[column]) for row in table["data"]) == sorted(
        str(g.data_source) for g in selection.generations
    )
    for name, metric in (("gsm8k", "gsm8k"), ("math", "math"), ("", "none")):
        prefix = f"val/generations/data_source/{metric}"
        assert files.scalars(f"{prefix}/kept") == [(50, kept[name])]
        assert files.scalars(f"{prefix}/seen") == [(50, figures[name].seen)]
        assert files.scalars(f"{prefix}/score_mean") == [(50, pytest.approx(figures[name].score_mean))]


@pytest.mark.timeout(150)
def test_the_best_and_the_worst_from_the_jobs_variable_to_the_offline_run(
    wandb_dir: Path, tmp_path: Path, collector: tuple[str, int]
) -> None:
    """OTEL_VALGEN_EXTREMES=1: the keyed picks keep their ranks, then the lowest and highest, marked in every output."""
    output = _one_step_to_the_run(collector, tmp_path, "60", {"OTEL_VALGEN_EXTREMES": "1"})

    records = [r for r in records_of_file(output) if r.event == contract.EVENT_GENERATION]
    ranked = sorted(records, key=lambda r: r.attributes[contract.RANK])
    slots = [tuple(r.attributes[contract.SLOTS]) for r in ranked]
    assert [s[0] for s in slots[:3]] == ["keyed"] * 3, "k = 3 keyed picks first, ranked by key"
    lowest = [r for r in ranked if "lowest" in r.attributes[contract.SLOTS]]
    highest = [r for r in ranked if "highest" in r.attributes[contract.SLOTS]]
    # Both sources score their eight generations 0/8 .. 7/8: the ties go to the smaller sample key.
    assert [r.attributes[contract.SCORE] for r in lowest] == [0.0]
    assert [r.attributes[contract.SCORE] for r in highest] == [7 / 8]
    summary = next(r.attributes for r in records_of_file(output) if r.event == contract.EVENT_STEP_SUMMARY)
    assert summary[contract.EXTREMES] == 1
    assert summary[contract.KEPT] == len(ranked)

    # otel-valgen show recomputes the choice from the kept records and agrees with the sampler.
    (selection,) = select_steps(read_paths([output], lambda _: None))
    assert [(g.sample_id, g.slots) for g in selection.generations] == [
        (r.attributes[contract.SAMPLE_ID], tuple(r.attributes[contract.SLOTS])) for r in ranked
    ]
    ((_, table),) = read_run(wandb_dir, "e2e").tables("val/generations")
    column = table["columns"].index("slots")
    assert [row[column] for row in table["data"]] == [",".join(s) for s in slots]
