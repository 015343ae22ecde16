"""User story: the collector is SIGKILLed and restarted in the middle of a validation step.

What survives a SIGKILL: records still in the emitting process (presampled, or in the SDK's
retries), records the SDK gave up on (spooled, replayed with ``otel-valgen resend``), sampled
batches already in an exporter's persistent queue (``file_storage/queue``), and what the
collector had acknowledged into a step that was still open: the sampler stores its open steps
and its closed-steps cache (``file_storage/sampler``) before it acknowledges a batch, so the
step resumes after the restart and closes once, complete; a step closed before a restart and
delivered again after it (the same records, so the same attempt) is counted late and reported
in a ``valgen.step.late`` record.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

import otel_valgen as vg
from otel_valgen import contract
from otel_valgen.cli.resend import progress_path
from otel_valgen.sampling import SortKey, bottom_k, sample_key, untagged
from tests.e2e.harness import Record, StandIn, free_port, wait_for
from tests.e2e.steps import by_step
from tests.faults.conftest import Collectors, RunningCollector, file_records, grpc_stand_in_at, metric_sum

RUN_ID = "faults-kill"
K = 4
SEED = 42
PER_SOURCE = 6


def _ids(source: str, step: int) -> list[str]:
    return [f"{source}-{step}-{i}" for i in range(PER_SOURCE)]


def _emit(source: str, step: int) -> None:
    """One source's part of ``step`` (PER_SOURCE generations), ended with two sources expected."""
    with vg.validation(step=step, source=source, sources_expected=2):
        ids = _ids(source, step)
        vg.log_generations([f"q {i}" for i in ids], [f"a {i}" for i in ids], [0.5] * len(ids), sample_ids=ids)


def _bottom_k(ids: list[str]) -> list[str]:
    """The expected kept sample ids, in rank order (each prompt has one response: ``/0``)."""
    full = [f"{i}/0" for i in ids]
    return [i for _, i in bottom_k(((SortKey.of(sample_key(SEED, i), i), i) for i in full), K)]


def _assert_once(name: str, records: list[Record], step: int, want: list[str], reason: str, sources: int) -> None:
    kept, summaries = by_step(records)
    got = [
        untagged(r.attributes[contract.SAMPLE_ID])
        for r in sorted(kept[step], key=lambda r: r.attributes[contract.RANK])
    ]
    assert got == want, f"{name} step {step}: {got} != {want}"
    assert len(summaries[step]) == 1, f"{name} step {step}: {len(summaries[step])} summaries"
    summary = summaries[step][0].attributes
    assert summary[contract.CLOSED_REASON] == reason, f"{name} step {step}: {summary}"
    assert summary[contract.SOURCES] == sources, f"{name} step {step}: {summary}"


def _env(wandb_endpoint: str, loki: StandIn) -> dict[str, str]:
    return {
        "VALGEN_TRACKER_EXPORTER_ENDPOINT": wandb_endpoint,
        "VALGEN_LOKI_OTLP_ENDPOINT": loki.endpoint,
        "VALGEN_DECISION_WAIT": "2s",
        "VALGEN_COUNT": str(K),
    }


@pytest.mark.timeout(90)
def test_sigkill_mid_step_delivers_what_the_sdk_spool_and_queues_held_once(
    collectors: Collectors, loki_stand_in: StandIn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Closed steps in the persistent queue, and a part spooled during the outage, arrive at every exporter once."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "2")  # the SDK gives up (and spools) after 2 s
    wandb_endpoint = f"127.0.0.1:{free_port()}"  # the wandb exporter is down until after the restart
    env = _env(wandb_endpoint, loki_stand_in)
    collector = collectors.start("c", env)
    vg.configure(run_id=RUN_ID, count=K, seed=SEED, endpoint=f"http://{collector.http_endpoint}", flush_timeout_s=1)

    # Step 1 closes complete before the kill; it reaches Loki and the file, wandb's copy waits in the queue.
    _emit("A", 1)
    _emit("B", 1)
    wait_for(lambda: 1 in by_step(file_records(collector.file_path))[1], 20, "step 1 in the file")
    wait_for(lambda: 1 in by_step(loki_stand_in.records())[1], 20, "step 1 at Loki")
    # The persistent queue deletes a batch only after its export returned: a SIGKILL in between
    # sends it again after the restart (the queue delivers at least once). This test is about the
    # kill during step 2, so step 1's queue entries get a moment to be deleted first.
    time.sleep(1.0)

    # Step 2: A is validating (its presampled records are still in the process) when the collector dies.
    with vg.validation(step=2, source="A", sources_expected=2):
        ids = _ids("A", 2)
        vg.log_generations([f"q {i}" for i in ids], [f"a {i}" for i in ids], [0.5] * len(ids), sample_ids=ids)
        Collectors.kill(collector)
    # Leaving the block returned within the flush timeout; the SDK retried, gave up, and spooled.
    # Wait until every record handed to the SDK is settled, not for a count: the start, the kept
    # records and the end record may leave in separate batches, each retried for 2 s, and a spool
    # replayed before the last of them is spooled would miss it (the step then never completes).
    wait_for(lambda: vg.stats()["records_unconfirmed"] == 0, 20, "every record of A's part of step 2 settled")
    assert vg.stats()["records_spooled"] >= K + 1  # the kept records and the end record, at least
    assert vg.stats()["records_export_failed"] == 0

    with grpc_stand_in_at(wandb_endpoint) as wandb_stand_in:
        collector = collectors.start("c", env)  # same ports, same queue directory
        spool = tmp_path / "sink" / "spool"
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "otel_valgen.cli.main",
                "resend",
                str(spool),
                "--endpoint",
                f"http://{collector.http_endpoint}",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        _emit("B", 2)
        assert vg.flush(10)

        destinations = {
            "wandb": wandb_stand_in.records,
            "loki": loki_stand_in.records,
            "file": lambda: file_records(collector.file_path),
        }
        for name, records in destinations.items():
            wait_for(lambda r=records: {1, 2} <= set(by_step(r())[1]), 30, f"{name}: both summaries")
        for name, records in destinations.items():
            for step in (1, 2):
                _assert_once(name, records(), step, _bottom_k(_ids("A", step) + _ids("B", step)), "complete", 2)
        assert metric_sum(collector.metrics(), "otelcol_valgen_sampler_records_dropped") == 0


def _kill_after_one_source_ended(collectors: Collectors, loki: StandIn, wandb: StandIn) -> RunningCollector:
    """Source A ends step 5 (acknowledged into the open group), SIGKILL, restart, then B ends; wait for the summary."""
    env = _env(wandb.endpoint, loki)
    collector = collectors.start("c", env)
    vg.configure(run_id=RUN_ID, count=K, seed=SEED, endpoint=f"http://{collector.http_endpoint}", flush_timeout_s=5)
    _emit("A", 5)
    assert vg.stats()["records_unconfirmed"] == 0  # the collector acknowledged all of A's records
    wait_for(lambda: metric_sum(collector.metrics(), "otelcol_valgen_sampler_groups_open") == 1, 10, "group open")
    Collectors.kill(collector)
    collector = collectors.start("c", env)
    _emit("B", 5)
    wait_for(lambda: 5 in by_step(file_records(collector.file_path))[1], 30, "step 5 closed")
    return collector


@pytest.mark.timeout(60)
def test_sigkill_keeps_an_open_steps_acknowledged_part_and_the_summary_counts_it(
    collectors: Collectors, loki_stand_in: StandIn, wandb_stand_in: StandIn
) -> None:
    """The part acknowledged into the killed collector's open group survives: the summary counts both sources."""
    collector = _kill_after_one_source_ended(collectors, loki_stand_in, wandb_stand_in)
    summary = by_step(file_records(collector.file_path))[1][5][0].attributes
    assert summary[contract.SOURCES_EXPECTED] == 2
    assert summary[contract.SOURCES] == 2
    assert summary[contract.SEEN] == 2 * PER_SOURCE  # A's generations, stored before the kill, are counted
    assert summary[contract.MISSING] == 0
    assert summary[contract.LATE] == 0
    values = collector.metrics()
    assert metric_sum(values, "otelcol_valgen_sampler_storage_errors") == 0
    assert metric_sum(values, "otelcol_valgen_sampler_groups_closed", reason="complete") == 1
    assert summary[contract.SOURCES_ANNOUNCED] == 2  # A's start record, stored before the kill, is counted too
    assert summary[contract.SOURCES_ENDED] == 2
    assert summary[contract.SOURCES_MISSING] == []
    # Nothing was sent twice by the emitter: the collector had confirmed A's records, and kept them.
    # Each source sent one start record, its presampled K generations and one end record (and a
    # progress record for each progress interval its block happened to span).
    stats = vg.stats()
    assert (stats["generations_emitted"], stats["start_records_emitted"], stats["end_records_emitted"]) == (2 * K, 2, 2)
    progress = stats.get("progress_records_emitted", 0)
    assert stats["records_exported"] == 2 * K + 2 + 2 + progress


@pytest.mark.timeout(60)
def test_sigkill_mid_step_still_delivers_the_step_complete(
    collectors: Collectors, loki_stand_in: StandIn, wandb_stand_in: StandIn
) -> None:
    """The promise of a collector restart: a step whose first source ended before the SIGKILL still arrives complete."""
    collector = _kill_after_one_source_ended(collectors, loki_stand_in, wandb_stand_in)
    want = _bottom_k(_ids("A", 5) + _ids("B", 5))
    _assert_once("file", file_records(collector.file_path), 5, want, "complete", 2)


def _resend(files: list[Path], endpoint: str) -> None:
    """``otel-valgen resend`` of ``files`` (OTLP-JSON lines) to a collector's OTLP/HTTP ``endpoint``."""
    done = subprocess.run(
        [sys.executable, "-m", "otel_valgen.cli.main", "resend", *map(str, files), "--endpoint", f"http://{endpoint}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def _late_reported(records: list[Record], step: int, attempt: str) -> int:
    """The largest late count of the ``valgen.step.late`` reports for (step, attempt); 0 without one."""
    return max(
        (
            r.attributes[contract.LATE]
            for r in records
            if r.event == contract.EVENT_STEP_LATE
            and r.attributes[contract.STEP] == step
            and r.attributes[contract.ATTEMPT] == attempt
        ),
        default=0,
    )


@pytest.mark.timeout(60)
def test_a_step_redelivered_after_a_restart_is_late_not_a_second_step(
    collectors: Collectors, loki_stand_in: StandIn, wandb_stand_in: StandIn, tmp_path: Path
) -> None:
    """A step closed before a restart and delivered again after it stays one step: the redelivered records are late.

    A redelivery is the same records again, attempt included (an SDK retry whose answer was lost, a
    spool replayed twice); the step's records are kept in the embedded sink's files so that
    ``otel-valgen resend`` can deliver them twice. (A new process emitting the step again would be a
    new attempt, a group of its own: see the architecture's step lifecycle.)
    """
    env = _env(wandb_stand_in.endpoint, loki_stand_in)
    collector = collectors.start("c", env)
    sink = tmp_path / "step-7"
    vg.configure(run_id=RUN_ID, count=K, seed=SEED, endpoint="", directory=str(sink))
    _emit("A", 7)
    _emit("B", 7)
    assert vg.flush(10)
    stats = vg.stats()
    assert (stats["generations_emitted"], stats["start_records_emitted"], stats["end_records_emitted"]) == (2 * K, 2, 2)
    # Per source: a start record, its presampled K generations, an end record (and a progress record
    # for each progress interval its block happened to span).
    sent = 2 * K + 2 + 2 + stats.get("progress_records_emitted", 0)
    files = sorted(sink.glob("*.jsonl"))
    records = [r for path in files for r in file_records(path)]
    assert len(records) == sent
    attempts = {r.attributes[contract.ATTEMPT] for r in records}
    assert len(attempts) == 1, attempts  # both sources of one process, one launch: one attempt
    (attempt,) = attempts

    _resend(files, collector.http_endpoint)
    wait_for(lambda: 7 in by_step(file_records(collector.file_path))[1], 20, "step 7 closed")
    assert collector.stop() == 0
    collector = collectors.start("c", env)
    for path in files:
        progress_path(path).unlink()  # replay every line again
    _resend(files, collector.http_endpoint)

    # Every redelivered record (start, generation, end) is late, reported by valgen.step.late.
    wait_for(
        lambda: _late_reported(file_records(collector.file_path), 7, attempt) == sent,
        20,
        f"a valgen.step.late report of {sent} records for step 7",
    )
    want = _bottom_k(_ids("A", 7) + _ids("B", 7))
    _assert_once("file", file_records(collector.file_path), 7, want, "complete", 2)
    assert by_step(file_records(collector.file_path))[1][7][0].attributes[contract.ATTEMPT] == attempt
    values = collector.metrics()
    assert metric_sum(values, "otelcol_valgen_sampler_records_late") == sent
    assert metric_sum(values, "otelcol_valgen_sampler_groups_closed") == 0  # no second group for step 7
