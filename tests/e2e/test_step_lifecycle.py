"""User stories: steps that survive real timing (slow sources, long validations, resumes, SIGTERM, late records).

Each story runs training processes (``tests/e2e/lifecycle_worker.py``, the real otel_valgen and
OTel SDK) against the built collector with its shipped config. Time is scaled through the
config: ``decision_wait`` 1 s, ``max_step_duration`` 10 s, a progress record every 0.2 s; a
source is "slow" when it works several times longer than ``decision_wait``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from click.testing import CliRunner

from otel_valgen import contract
from otel_valgen.cli.main import main as cli_main
from otel_valgen.sampling import SortKey, bottom_k, sample_key, untagged
from tests.e2e.conftest import StartCollector
from tests.e2e.harness import REPO, Collector, Record, records_of_file, wait_for

RUN_ID = "lifecycle-run"
K = 4
SEED = 7
WAIT = "1s"
MAX_STEP = "10s"  # the long streamed validation spans 5 s of pauses plus process start and export: keep 2x headroom


def ids(prefix: str, count: int, start: int = 0) -> list[str]:
    """Sample ids ``prefix-000``, ``prefix-001``, ..."""
    return [f"{prefix}-{i:03d}" for i in range(start, start + count)]


def true_bottom_k(sample_ids: list[str], k: int = K) -> list[str]:
    """Bottom-k of the generation ids (``<id>/0``: one response per prompt), by the sampling rule."""
    full = [f"{i}/0" for i in sample_ids]
    return [i for _, i in bottom_k(((SortKey.of(sample_key(SEED, i), i), i) for i in full), k)]


class Worker:
    """One training process validating one source's part of a step."""

    def __init__(self, endpoint: str, launch: str, args: list[str], **env: str) -> None:
        full_env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
            "OTEL_VALGEN_RUN_ID": RUN_ID,
            "OTEL_VALGEN_COUNT": str(K),
            "OTEL_VALGEN_SEED": str(SEED),
            "OTEL_VALGEN_LAUNCH_ID": launch,
            "OTEL_VALGEN_PROGRESS_INTERVAL": "0.2",
            "OTEL_BLRP_SCHEDULE_DELAY": "100",
            **env,
        }
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.e2e.lifecycle_worker", *args],
            env=full_env,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )

    def wait_for_line(self, expected: str) -> None:
        """Read the worker's output until ``expected`` (it prints after each batch)."""
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.strip() == expected:
                return
        raise AssertionError(f"worker exited ({self.process.wait()}) before printing {expected!r}")

    def finish(self, timeout_s: float = 60) -> int:
        """Wait for the worker to exit; its return code."""
        return self.process.wait(timeout_s)


def worker_args(step: int, source: str, sample_ids: list[str], **options: Any) -> list[str]:
    """Command-line arguments of lifecycle_worker."""
    args = ["--step", str(step), "--source", source, "--ids", ",".join(sample_ids)]
    for name, value in options.items():
        flag = f"--{name.replace('_', '-')}"
        args += [flag] if value is True else [flag, str(value)]
    return args


@pytest.fixture
def collector(start_collector: StartCollector, request: pytest.FixtureRequest) -> Collector:
    """The built collector (shipped config) with the scaled-down lifecycle timings."""
    late = getattr(request, "param", "drop")
    return start_collector(
        "collector",
        ["collector.yaml"],
        {
            "VALGEN_TRACKER_EXPORTER_ENDPOINT": "127.0.0.1:9",  # unused here: the file output is read
            "VALGEN_LOKI_OTLP_ENDPOINT": "http://127.0.0.1:9/otlp",
            "VALGEN_DECISION_WAIT": WAIT,
            "VALGEN_MAX_STEP_DURATION": MAX_STEP,
            "VALGEN_LATE_RECORDS": late,
        },
    )


@pytest.fixture
def workers(collector: Collector) -> Iterator[Callable[..., Worker]]:
    """Start workers against the collector; every one still running is killed at teardown."""
    started: list[Worker] = []

    def start(launch: str, args: list[str], **env: str) -> Worker:
        worker = Worker(f"http://{collector.http_endpoint}", launch, args, **env)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        if worker.process.poll() is None:
            worker.process.kill()
            worker.process.wait(10)


def summaries(collector: Collector, step: int) -> list[Record]:
    """The step's summaries in the collector's file output, in arrival order."""
    return [
        r
        for r in records_of_file(collector.file_path)
        if r.event == contract.EVENT_STEP_SUMMARY and r.attributes[contract.STEP] == step
    ]


def kept(collector: Collector, step: int, attempt: str) -> list[str]:
    """Sample ids of the ranked (not late) generations of one attempt, in rank order."""
    records = [
        r
        for r in records_of_file(collector.file_path)
        if r.event == contract.EVENT_GENERATION
        and r.attributes[contract.STEP] == step
        and r.attributes.get(contract.ATTEMPT) == attempt
        and contract.RANK in r.attributes
    ]
    return [
        untagged(r.attributes[contract.SAMPLE_ID]) for r in sorted(records, key=lambda r: r.attributes[contract.RANK])
    ]


def shown(collector: Collector) -> dict[int, dict[str, Any]]:
    """``otel-valgen show --format json`` over the collector's file output, by step."""
    result = CliRunner().invoke(cli_main, ["show", str(collector.file_path), "--format", "json"])
    assert result.exit_code == 0, result.output
    return {entry["step"]: entry for entry in map(json.loads, result.stdout.splitlines())}


@pytest.mark.parametrize("sources_expected", [None, 2], ids=["announced", "expected"])
def test_a_slow_source_keeps_its_step_open(
    workers: Callable[..., Worker], collector: Collector, sources_expected: int | None
) -> None:
    """B ends 3.5 s (3.5 decision_waits) after A: one complete step holding both parts, nothing late."""
    expected_option = {} if sources_expected is None else {"sources_expected": sources_expected}
    fast = workers("L1", worker_args(1, "a", ids("a", 20), **expected_option))
    slow = workers("L1", worker_args(1, "b", ids("b", 20), hold=3.5, **expected_option))
    assert fast.finish() == 0
    assert slow.finish() == 0
    wait_for(lambda: summaries(collector, 1), 20, "the step's summary")
    (summary,) = summaries(collector, 1)
    assert summary.attributes[contract.CLOSED_REASON] == "complete"
    assert summary.attributes[contract.SEEN] == 40
    assert summary.attributes[contract.SOURCES_ENDED] == 2
    assert kept(collector, 1, "L1.1") == true_bottom_k(ids("a", 20) + ids("b", 20))


def test_a_long_streamed_validation_is_not_cut(workers: Callable[..., Worker], collector: Collector) -> None:
    """Three batches 2.5 s apart (presampling off): the step holds all 60, the true bottom-k is kept."""
    worker = workers("L1", worker_args(2, "a", ids("s", 60), batches=3, pause=2.5, presample="false"))
    assert worker.finish() == 0
    wait_for(lambda: summaries(collector, 2), 20, "the step's summary")
    (summary,) = summaries(collector, 2)
    assert summary.attributes[contract.CLOSED_REASON] == "complete"
    assert summary.attributes[contract.SEEN] == 60
    assert kept(collector, 2, "L1.1") == true_bottom_k(ids("s", 60))


def test_a_resumed_run_shows_its_complete_retry(workers: Callable[..., Worker], collector: Collector) -> None:
    """A job SIGKILLed after 10 of 30, resumed as a new launch: the complete retry is the step's sample."""
    crashed = workers("L1", worker_args(20, "a", ids("r", 30), batches=3, pause=30, presample="false"))
    crashed.wait_for_line("logged 10")
    crashed.process.kill()
    wait_for(lambda: summaries(collector, 20), 20, "the partial attempt's summary")
    retry = workers("L2", worker_args(20, "a", ids("r", 31)))
    assert retry.finish() == 0
    wait_for(lambda: len(summaries(collector, 20)) == 2, 20, "the retry's summary")
    first, second = summaries(collector, 20)
    assert first.attributes[contract.ATTEMPT] == "L1.1"
    assert first.attributes[contract.CLOSED_REASON] == "wait"
    assert first.attributes[contract.SEEN] == 10
    assert second.attributes[contract.ATTEMPT] == "L2.1"
    assert second.attributes[contract.CLOSED_REASON] == "complete"
    assert second.attributes[contract.SEEN] == 31
    step = shown(collector)[20]
    assert (step["attempt"], step["attempts"], step["seen"]) == ("L2.1", 2, 31)
    assert [untagged(g["sample_id"]) for g in step["generations"]] == true_bottom_k(ids("r", 31))


def test_a_resume_within_the_wait_never_merges(workers: Callable[..., Worker], collector: Collector) -> None:
    """Two launches validating step 30 at once stay two attempts; the later-started one is shown."""
    first = workers("L1", worker_args(30, "a", ids("m", 20), hold=1.0))
    first.wait_for_line("logged 20")
    second = workers("L2", worker_args(30, "a", ids("m", 20), hold=0.2))
    assert first.finish() == 0
    assert second.finish() == 0
    wait_for(lambda: len(summaries(collector, 30)) == 2, 20, "both attempts' summaries")
    assert sorted(s.attributes[contract.SEEN] for s in summaries(collector, 30)) == [20, 20]
    step = shown(collector)[30]
    assert (step["attempt"], step["attempts"]) == ("L2.1", 2)
    assert [untagged(g["sample_id"]) for g in step["generations"]] == true_bottom_k(ids("m", 20))


@pytest.mark.parametrize("collector", ["forward"], indirect=True)
def test_late_records_are_counted_per_step_and_never_mixed_in(
    workers: Callable[..., Worker], collector: Collector
) -> None:
    """A restarted process of the same launch re-sends a closed attempt: reported late, forwarded tagged, not shown."""
    assert workers("L3", worker_args(40, "a", ids("x", 20))).finish() == 0
    wait_for(lambda: summaries(collector, 40), 20, "the step's summary")
    again = workers("L3", worker_args(40, "a", ids("y", 20), presample="false"), OTEL_VALGEN_PROGRESS_INTERVAL="0")
    assert again.finish() == 0

    def late_count() -> int:
        reports = [r for r in records_of_file(collector.file_path) if r.event == contract.EVENT_STEP_LATE]
        return max((r.attributes[contract.LATE] for r in reports if r.attributes[contract.STEP] == 40), default=0)

    wait_for(lambda: late_count() == 22, 20, "a late report of 22 records (start, 20 generations, end)")
    forwarded = [
        r
        for r in records_of_file(collector.file_path)
        if r.event == contract.EVENT_GENERATION and r.attributes.get(contract.LATE) is True
    ]
    assert sorted(untagged(r.attributes[contract.SAMPLE_ID]) for r in forwarded) == sorted(
        f"{i}/0" for i in ids("y", 20)
    )
    step = shown(collector)[40]
    assert step["late"] == 22
    assert [untagged(g["sample_id"]) for g in step["generations"]] == true_bottom_k(ids("x", 20))


def test_sigterm_inside_a_block_delivers_the_step(workers: Callable[..., Worker], collector: Collector) -> None:
    """A job preempted with SIGTERM mid-block still delivers its part, and dies by SIGTERM."""
    worker = workers("L1", worker_args(50, "a", ids("t", 20), hold=60))
    worker.wait_for_line("logged 20")
    worker.process.send_signal(signal.SIGTERM)
    assert worker.finish() == -signal.SIGTERM
    wait_for(lambda: summaries(collector, 50), 20, "the step's summary")
    (summary,) = summaries(collector, 50)
    assert summary.attributes[contract.CLOSED_REASON] == "complete"
    assert summary.attributes[contract.SEEN] == 20
    assert kept(collector, 50, "L1.1") == true_bottom_k(ids("t", 20))


def test_a_source_killed_mid_validation_is_reported_missing(
    workers: Callable[..., Worker], collector: Collector
) -> None:
    """Of 3 expected sources one is SIGKILLed: the step closes at max_step_duration, the others' records all kept."""
    parts = {"a": ids("a", 10), "b": ids("b", 10)}
    everyone = {"OTEL_VALGEN_COUNT": "64"}  # k above what arrives: every delivered generation is kept
    dying = workers("L1", worker_args(60, "c", ids("c", 10), hold=60, sources_expected=3, flush=True), **everyone)
    dying.wait_for_line("logged 10")  # its start record was exported; its presampled generations were not
    alive = [workers("L1", worker_args(60, s, p, hold=2.0, sources_expected=3), **everyone) for s, p in parts.items()]
    dying.process.kill()
    assert [w.finish() for w in alive] == [0, 0]
    wait_for(lambda: summaries(collector, 60), 20, "the step's summary")
    (summary,) = summaries(collector, 60)
    assert summary.attributes[contract.CLOSED_REASON] == "max_duration"
    assert summary.attributes[contract.SOURCES_ENDED] == 2
    (missing,) = summary.attributes[contract.SOURCES_MISSING]
    assert missing.startswith("c@")
    assert sorted(kept(collector, 60, "L1.1")) == sorted(f"{i}/0" for i in parts["a"] + parts["b"])
