"""A block's lifecycle on the wire: start, progress while open, end, the attempt on every record."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time
from typing import Any

import pytest
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter

import otel_valgen as vg
from otel_valgen import _process, contract
from otel_valgen.reader import EndRecord, Generation, ProgressRecord, StartRecord, records_from_request
from otel_valgen.sampling import SortKey, bottom_k, sample_key, untagged
from otel_valgen.selection import select_steps
from otel_valgen.testing import capture_records, record_to_dict
from tests.conftest import REPO, OtlpHttpReceiver
from tests.e2e.harness import wait_for

END = contract.EVENT_VALIDATION_END
LIFECYCLE = (contract.EVENT_VALIDATION_START, contract.EVENT_VALIDATION_PROGRESS, contract.EVENT_VALIDATION_END)


def _of(records: list[dict[str, Any]], event: str) -> list[dict[str, Any]]:
    return [r for r in records if r["event_name"] == event]


def test_a_block_sends_start_progress_and_end_with_one_attempt() -> None:
    """Start first (with k and sources_expected), progress while open, end last; one attempt on all."""
    with capture_records(run_id="r", count=3, launch_id="L7", progress_interval_s=0.05) as records:
        with vg.validation(step=4, source="trainer", sources_expected=2):
            vg.log_generations([f"q{i}" for i in range(10)], ["a"] * 10, None)
            wait_for(lambda: vg.stats().get("progress_records_emitted", 0) >= 3, 10, "three progress records")
        vg.flush()
        after = len(records)
        time.sleep(0.3)  # six progress intervals: none may come after the end
        vg.flush()
        assert len(records) == after, "progress records after the block ended"
    events = [r["event_name"] for r in records]
    assert events[0] == contract.EVENT_VALIDATION_START
    assert events[-1] == contract.EVENT_VALIDATION_END
    (start,) = _of(records, contract.EVENT_VALIDATION_START)
    assert start["attributes"][contract.SAMPLE_COUNT] == 3
    assert start["attributes"][contract.SOURCES_EXPECTED] == 2
    assert start["severity_text"] == "INFO"
    progress = _of(records, contract.EVENT_VALIDATION_PROGRESS)
    assert len(progress) >= 3
    assert progress[-1]["attributes"][contract.SEEN] == 10
    assert len(_of(records, contract.EVENT_GENERATION)) == 3
    for record in records:
        attributes = record["attributes"]
        assert attributes[contract.ATTEMPT] == "L7.1"
        assert (attributes[contract.RUN_ID], attributes[contract.STEP]) == ("r", 4)
        if record["event_name"] in LIFECYCLE:
            assert attributes[contract.SOURCE] == "trainer"
    assert len({r["trace_id"] for r in records}) == 1
    stats = vg.stats()
    assert stats["start_records_emitted"] == 1
    assert stats["progress_records_emitted"] == len(progress)


def test_progress_can_be_turned_off() -> None:
    """OTEL_VALGEN_PROGRESS_INTERVAL=0: no progress records, start and end still sent."""
    with capture_records(run_id="r", count=3, progress_interval_s=0) as records, vg.validation(step=1):
        vg.log_generations(["q"], ["a"], None)
        time.sleep(0.2)
    assert not _of(records, contract.EVENT_VALIDATION_PROGRESS)
    assert len(_of(records, contract.EVENT_VALIDATION_START)) == 1


def test_validating_a_step_again_in_one_process_is_a_new_attempt() -> None:
    """The n of <launch>.<n> counts how often this process already ended that (step, source)."""
    with capture_records(run_id="r", count=2, launch_id="L", progress_interval_s=0) as records:
        for _ in range(2):
            with vg.validation(step=9, source="s"):
                vg.log_generations(["q"], ["a"], None)
        with vg.validation(step=9, source="other"):
            vg.log_generations(["q"], ["a"], None)
        with vg.validation(step=10, source="s"):
            vg.log_generations(["q"], ["a"], None)
    attempts = [
        (r["attributes"][contract.STEP], r["attributes"][contract.SOURCE], r["attributes"][contract.ATTEMPT])
        for r in _of(records, contract.EVENT_VALIDATION_START)
    ]
    assert attempts == [(9, "s", "L.1"), (9, "s", "L.2"), (9, "other", "L.1"), (10, "s", "L.1")]
    ends = [r["attributes"][contract.ATTEMPT] for r in _of(records, contract.EVENT_VALIDATION_END)]
    assert ends == ["L.1", "L.2", "L.1", "L.1"]


def test_reconfiguring_keeps_counting_attempts() -> None:
    """A second configure() of the same launch does not reuse an attempt already ended."""
    with capture_records(run_id="r", count=2, launch_id="L", progress_interval_s=0) as records:
        with vg.validation(step=3):
            vg.log_generations(["q"], ["a"], None)
        emitter = _process._emitter
        assert emitter is not None
        second = InMemoryLogRecordExporter()  # type: ignore[no-untyped-call]
        _process.install_for_testing(emitter.settings, second)  # shuts the first emitter (and exporter) down
        with vg.validation(step=3):
            vg.log_generations(["q"], ["a"], None)
        later = [record_to_dict(record) for record in second.get_finished_logs()]
    ends = _of([*records, *later], contract.EVENT_VALIDATION_END)
    assert [r["attributes"][contract.ATTEMPT] for r in ends] == ["L.1", "L.2"]


def test_the_launch_id_goes_to_ray_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """worker_env() forwards the driver's launch id and progress interval, as it does the run id."""
    from otel_valgen import ray as vg_ray

    vg.configure(run_id="r", launch_id="driver-launch", progress_interval_s=2)
    env = vg_ray.worker_env()
    assert env["OTEL_VALGEN_LAUNCH_ID"] == "driver-launch"
    assert float(env["OTEL_VALGEN_PROGRESS_INTERVAL"]) == 2.0
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert vg.configure().launch_id == "driver-launch"  # type: ignore[union-attr]


@pytest.mark.parametrize(("raw", "expected"), [("", 5.0), ("0", 0.0), ("0.01", 0.05), ("2.5", 2.5), ("-1", 5.0)])
def test_progress_interval_from_the_environment(monkeypatch: pytest.MonkeyPatch, raw: str, expected: float) -> None:
    """Default 5 s, 0 = off, at least 0.05, a bad value is the default."""
    monkeypatch.setenv("OTEL_VALGEN_PROGRESS_INTERVAL", raw)
    from otel_valgen._settings import resolve_settings

    assert resolve_settings(run_id="r").progress_interval_s == expected


def test_start_and_progress_on_the_otlp_wire(otlp_http: OtlpHttpReceiver) -> None:
    """Over OTLP/HTTP the start, progress and end records arrive with their attempt."""
    vg.configure(run_id="wire", count=2, endpoint=otlp_http.endpoint, launch_id="W", progress_interval_s=0.05)
    with vg.validation(step=2, source="a", sources_expected=1):
        vg.log_generations(["q1", "q2", "q3"], ["x", "y", "z"], None)
        wait_for(lambda: vg.stats().get("progress_records_emitted", 0) >= 1, 10, "a progress record")
    records = [r for request in otlp_http.json_requests() for r in records_from_request(request)]
    starts = [r for r in records if isinstance(r, StartRecord)]
    progress = [r for r in records if isinstance(r, ProgressRecord)]
    ends = [r for r in records if isinstance(r, EndRecord)]
    generations = [r for r in records if isinstance(r, Generation)]
    assert [(s.source, s.attempt, s.sample_count, s.sources_expected) for s in starts] == [("a", "W.1", 2, 1)]
    assert progress
    assert {p.attempt for p in progress} == {"W.1"}
    assert progress[-1].seen == 3
    assert [(e.attempt, e.seen, e.emitted) for e in ends] == [("W.1", 3, 2)]
    assert {g.attempt for g in generations} == {"W.1"}
    assert all(r.timestamp > 0 for r in [*starts, *progress, *ends, *generations])
    assert starts[0].instance == ends[0].instance != ""


# -- SIGTERM --------------------------------------------------------------------------------

_CHILD = """
import os, signal, sys, time
import otel_valgen as vg
mode = sys.argv[1]
if mode == "handler":
    def previous(signum, frame):
        open(os.path.join(sys.argv[2], "previous-called"), "w").close()
        sys.exit(7)
    signal.signal(signal.SIGTERM, previous)
elif mode == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
vg.configure(run_id="sig", count=3, directory=sys.argv[2], progress_interval_s=0, launch_id="S")
with vg.validation(step=5, source="main"):
    vg.log_generations([f"q{i}" for i in range(20)], ["a"] * 20, None)
    print("inside", flush=True)
    for _ in range(40):
        time.sleep(0.05)
    print("still running", flush=True)
print("after block", flush=True)
"""


def _run_child(mode: str, directory: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OTEL_VALGEN_FLUSH_TIMEOUT": "5"}
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, mode, directory],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "inside"
    child.send_signal(15)
    try:
        out, err = child.communicate(timeout=30 if mode != "ignore" else 40)
    except subprocess.TimeoutExpired:
        child.kill()
        out, err = child.communicate()
    return subprocess.CompletedProcess(child.args, child.returncode, "inside\n" + out, err)


def _delivered(directory: str) -> list[object]:
    from otel_valgen.reader import read_paths

    return list(read_paths([directory], pytest.fail))


@pytest.mark.parametrize("mode", ["default", "handler"])
def test_sigterm_inside_a_block_delivers_it(tmp_path: Any, mode: str) -> None:
    """SIGTERM in a block: the block's records reach the sink, then the previous disposition runs."""
    result = _run_child(mode, str(tmp_path))
    if mode == "default":
        assert result.returncode == -15, result.stderr  # still dies by the signal
    else:
        assert result.returncode == 7, result.stderr
        assert (tmp_path / "previous-called").exists()
    assert "still running" not in result.stdout
    records = _delivered(str(tmp_path))
    generations = [r for r in records if isinstance(r, Generation)]
    ends = [r for r in records if isinstance(r, EndRecord)]
    assert len(generations) == 3
    assert [(e.step, e.seen, e.emitted, e.attempt) for e in ends] == [(5, 20, 3, "S.1")]


def test_sigterm_with_sig_ign_delivers_and_keeps_running(tmp_path: Any) -> None:
    """A process that ignored SIGTERM keeps running; its open block was delivered when the signal came."""
    result = _run_child("ignore", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "after block" in result.stdout
    ends = [r for r in _delivered(str(tmp_path)) if isinstance(r, EndRecord)]
    assert [(e.seen, e.emitted) for e in ends] == [(20, 3)]


def test_ending_an_ended_step_again_sends_no_new_attempt() -> None:
    """end_step after the block already ended it: no empty attempt that would outrank the real one."""
    with capture_records(run_id="r", count=2, launch_id="L", progress_interval_s=0) as records:
        with vg.validation(step=6):
            vg.log_generations(["q"], ["a"], None)
        vg.end_step(6)
        vg.end_step(8)  # never opened: an empty part, announced and ended
    starts = [
        (r["attributes"][contract.STEP], r["attributes"][contract.ATTEMPT])
        for r in _of(records, contract.EVENT_VALIDATION_START)
    ]
    ends = [
        (r["attributes"][contract.STEP], r["attributes"][contract.ATTEMPT])
        for r in _of(records, contract.EVENT_VALIDATION_END)
    ]
    assert starts == ends == [(6, "L.1"), (8, "L.1")]


def test_no_sigterm_handler_is_installed_outside_the_main_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """Signal handlers can only be set from the main thread: elsewhere none is installed, nothing raises."""
    import signal
    import threading

    monkeypatch.setattr(_process, "_sigterm_installed", False)
    before = signal.getsignal(signal.SIGTERM)
    errors: list[BaseException] = []

    def install() -> None:
        try:
            _process._install_sigterm_handler()
        except BaseException as error:  # pragma: no cover - the assertion below reports it
            errors.append(error)

    worker = threading.Thread(target=install)
    worker.start()
    worker.join()
    assert errors == []
    assert signal.getsignal(signal.SIGTERM) is before
    assert _process._sigterm_installed is False


# -- block-less calls: each is a complete part ------------------------------------------------


def _bottom_k_ids(seed: int, sample_ids: list[str], k: int) -> list[str]:
    """The sampling rule's choice (otel_valgen.sampling) over generations ``<id>/0``."""
    full = [f"{i}/0" for i in sample_ids]
    return [i for _, i in bottom_k(((SortKey.of(sample_key(seed, i), i), i) for i in full), k)]


def test_a_blockless_call_is_delivered_before_it_returns() -> None:
    """log_generations(step=N) with no block: start, its bottom-k and its end record are exported on return."""
    ids = [f"p{i}" for i in range(20)]
    with capture_records(run_id="r", count=3, seed=5, launch_id="B", progress_interval_s=0) as records:
        assert vg.log_generations(ids, ["a"] * 20, None, sample_ids=ids, step=2) == 20
        delivered = list(records)  # no flush, no end_step, no exit
    events = [r["event_name"] for r in delivered]
    assert events[0] == contract.EVENT_VALIDATION_START
    assert events[-1] == contract.EVENT_VALIDATION_END
    assert sorted(
        untagged(r["attributes"][contract.SAMPLE_ID]) for r in _of(delivered, contract.EVENT_GENERATION)
    ) == sorted(_bottom_k_ids(5, ids, 3))
    (end,) = _of(delivered, contract.EVENT_VALIDATION_END)
    assert (end["attributes"][contract.SEEN], end["attributes"][contract.EMITTED]) == (20, 3)
    assert {r["attributes"][contract.ATTEMPT] for r in delivered} == {"B.1"}
    assert len(records) == len(delivered), "records exported after the call (at exit or shutdown)"


@pytest.mark.parametrize("presample", [True, False])
def test_blockless_calls_of_one_step_merge_into_the_exact_bottom_k(tmp_path: Any, presample: bool) -> None:
    """Block-less calls: parts of one attempt, cumulative end counts; the files always hold the exact bottom-k."""
    rng = random.Random(3)
    ids = [f"q{i}" for i in range(300)]
    vg.configure(run_id="parts", count=8, seed=9, directory=str(tmp_path), launch_id="P", presample=presample)
    logged: list[str] = []
    cut = 0
    while cut < len(ids):
        batch = ids[cut : cut + rng.randint(1, 40)]
        cut += len(batch)
        assert vg.log_generations(batch, ["o"] * len(batch), [0.5] * len(batch), sample_ids=batch, step=4) == len(batch)
        logged += batch
        # What is on disk right after the call, as `otel-valgen show` reads it:
        (selection,) = select_steps(_delivered(str(tmp_path)))
        assert [untagged(g.sample_id) for g in selection.generations] == _bottom_k_ids(9, logged, 8)
        assert (selection.attempt, selection.seen, selection.attempts) == ("P.1", len(logged), 1)
        assert selection.complete
    records = _delivered(str(tmp_path))
    starts = [r for r in records if isinstance(r, StartRecord)]
    ends = [r for r in records if isinstance(r, EndRecord)]
    generations = [r for r in records if isinstance(r, Generation)]
    assert len(starts) == 1
    assert [e.seen for e in ends] == sorted({e.seen for e in ends})  # one end per call, cumulative
    assert ends[-1].seen == 300
    assert [e.emitted for e in ends][-1] == len(generations)
    assert len({g.sample_id for g in generations}) == len(generations)  # no generation sent twice
    if presample:
        assert len(generations) < 300
    assert {r.attempt for r in records} == {"P.1"}


def test_end_step_after_blockless_calls_ends_the_same_attempt(caplog: pytest.LogCaptureFixture) -> None:
    """end_step after block-less calls: no 'already ended' warning, no new attempt; sources_expected goes out."""
    with capture_records(run_id="r", count=2, launch_id="E", progress_interval_s=0) as records:
        vg.log_generations(["a", "b", "c"], ["x"] * 3, None, step=5)
        vg.log_generations(["d"], ["x"], None, step=5)
        assert vg.end_step(5, sources_expected=3) is True
        assert vg.end_step(5) is True  # ended now: warned, nothing sent
        vg.log_generations(["e"], ["x"], None, step=5)  # after the end: a new attempt, as after a block
    assert "step_already_ended #1]" in caplog.text
    assert "step_already_ended #2]" not in caplog.text
    ends = [
        (
            r["attributes"][contract.ATTEMPT],
            r["attributes"][contract.SEEN],
            r["attributes"].get(contract.SOURCES_EXPECTED),
        )
        for r in _of(records, contract.EVENT_VALIDATION_END)
    ]
    assert ends == [("E.1", 3, None), ("E.1", 4, None), ("E.1", 4, 3), ("E.2", 1, None)]
    starts = [r["attributes"][contract.ATTEMPT] for r in _of(records, contract.EVENT_VALIDATION_START)]
    assert starts == ["E.1", "E.2"]


def test_end_step_after_blockless_calls_sends_nothing_new_without_news() -> None:
    """end_step without sources_expected after block-less calls: everything is out already, no extra record."""
    with capture_records(run_id="r", count=2, launch_id="N", progress_interval_s=0) as records:
        vg.log_generations(["a", "b"], ["x", "y"], None, step=6)
        before = len(records)
        assert vg.end_step(6) is True
        assert len(records) == before
    assert vg.stats().get("end_records_emitted") == 1


def test_a_block_after_blockless_calls_continues_their_part() -> None:
    """A block of a step that already had block-less calls keeps their attempt and counts; its end ends the step."""
    with capture_records(run_id="r", count=2, launch_id="C", progress_interval_s=0) as records:
        vg.log_generations(["a", "b", "c"], ["x"] * 3, None, step=7)
        with vg.validation(step=7):
            vg.log_generations(["d", "e"], ["x"] * 2, None)
    assert [r["attributes"][contract.ATTEMPT] for r in _of(records, contract.EVENT_VALIDATION_START)] == ["C.1"]
    ends = [(e["attributes"][contract.SEEN], e["attributes"][contract.EMITTED]) for e in _of(records, END)]
    assert ends[-1][0] == 5
    assert ends[-1][1] == len(_of(records, contract.EVENT_GENERATION)) <= 4
    assert {r["attributes"][contract.ATTEMPT] for r in records} == {"C.1"}


def test_a_call_for_another_step_inside_a_block_is_a_blockless_part() -> None:
    """Inside a block of step 1, log_generations(step=2) is delivered as a part of step 2 at once."""
    with capture_records(run_id="r", count=2, launch_id="O", progress_interval_s=0) as records, vg.validation(step=1):
        vg.log_generations(["a"], ["x"], None)
        vg.log_generations(["b", "c"], ["y", "z"], None, step=2)
        step_2 = [r["attributes"][contract.STEP] for r in records]
    assert step_2 == [1, 2, 2, 2, 2]  # the block's start, then step 2's start, 2 generations, end
    assert [r["attributes"][contract.STEP] for r in _of(records, contract.EVENT_VALIDATION_END)] == [2, 1]


def test_a_blockless_call_in_another_thread_joins_the_open_block_of_its_step() -> None:
    """A thread without the block's context logs at the block's step: the records join the block's part."""
    with capture_records(run_id="r", count=4, launch_id="T", progress_interval_s=0) as records, vg.validation(step=3):
        worker = threading.Thread(target=vg.log_generations, args=(["a", "b"], ["x", "y"]), kwargs={"step": 3})
        worker.start()
        worker.join()
        assert not _of(records, contract.EVENT_VALIDATION_END)
    (end,) = _of(records, contract.EVENT_VALIDATION_END)
    assert end["attributes"][contract.SEEN] == 2


_ABRUPT = """
import os, sys
import otel_valgen as vg
vg.configure(run_id="abrupt", count=4, seed=1, directory=sys.argv[1], progress_interval_s=0, launch_id="X")
ids = [f"g{i}" for i in range(50)]
vg.log_generations(ids, ["a"] * 50, [0.5] * 50, sample_ids=ids, step=1)
os._exit(0)  # no atexit, no shutdown: what a framework ending its worker does
"""


def test_a_process_ended_without_exit_handlers_keeps_its_blockless_part(tmp_path: Any) -> None:
    """A plain process calls log_generations(step=1) and ends with os._exit: the step is complete on disk."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-c", _ABRUPT, str(tmp_path)], env=env, check=True, timeout=60)
    (selection,) = select_steps(_delivered(str(tmp_path)))
    assert [untagged(g.sample_id) for g in selection.generations] == _bottom_k_ids(1, [f"g{i}" for i in range(50)], 4)
    assert (selection.seen, selection.complete) == (50, True)


def test_a_blockless_step_forgotten_after_many_others_starts_a_new_attempt(caplog: pytest.LogCaptureFixture) -> None:
    """Block-less state is bounded: after MAX_OPEN_STEPS other steps, step 0's next call is a new attempt, warned."""
    from otel_valgen._emitter import MAX_OPEN_STEPS

    with capture_records(run_id="r", count=1, launch_id="M", progress_interval_s=0) as records:
        for step in range(MAX_OPEN_STEPS + 1):
            vg.log_generations(["a"], ["x"], None, step=step)
        vg.log_generations(["b"], ["x"], None, step=MAX_OPEN_STEPS)  # still remembered: same attempt
        vg.log_generations(["b"], ["x"], None, step=0)
    ends = [(r["attributes"][contract.STEP], r["attributes"][contract.ATTEMPT]) for r in _of(records, END)]
    assert ends[-2:] == [(MAX_OPEN_STEPS, "M.1"), (0, "M.2")]
    assert "step_reopened #1]" in caplog.text
    assert "step_reopened #2]" not in caplog.text


def test_past_max_open_steps_the_oldest_open_block_is_ended_early(caplog: pytest.LogCaptureFixture) -> None:
    """Opening one block more than MAX_OPEN_STEPS ends the oldest open one at once; the newest stays open."""
    from contextlib import ExitStack

    from otel_valgen._emitter import MAX_OPEN_STEPS

    with capture_records(run_id="r", count=1, progress_interval_s=0) as records, ExitStack() as blocks:
        for step in range(MAX_OPEN_STEPS + 1):
            blocks.enter_context(vg.validation(step=step))
        vg.flush(5.0)
        early = [r["attributes"][contract.STEP] for r in _of(records, END)]
        vg.log_generations(["a"], ["x"], None)  # the innermost block, still open
    assert early == [0]
    assert "more than 256 steps open; ending step 0" in caplog.text
    last = [r for r in _of(records, END) if r["attributes"][contract.STEP] == MAX_OPEN_STEPS]
    assert [r["attributes"][contract.SEEN] for r in last] == [1]


def test_the_end_record_carries_the_steps_own_count() -> None:
    """A step's k (count= on the block or the call) is its end record's sample_count, not the configured k."""
    with capture_records(run_id="r", count=4, progress_interval_s=0) as records:
        with vg.validation(step=1, count=2):
            vg.log_generations(["a", "b", "c"], ["x", "y", "z"], None)
        vg.log_generations(["a"], ["x"], None, step=2, count=3)
        vg.log_generations(["a"], ["x"], None, step=3)
    counts = {r["attributes"][contract.STEP]: r["attributes"][contract.SAMPLE_COUNT] for r in _of(records, END)}
    assert counts == {1: 2, 2: 3, 3: 4}


def test_validating_a_step_a_third_and_fourth_time_gives_a_new_attempt_each_time(tmp_path: Any) -> None:
    """Blocks and block-less parts of one (step, source) ended four times are attempts L.1 to L.4; show picks L.4."""
    vg.configure(run_id="r", count=2, launch_id="L", directory=str(tmp_path), progress_interval_s=0)
    try:
        for n in range(4):
            if n % 2:
                vg.log_generations([f"q{n}"], ["a"], None, step=9, source="s")
                vg.end_step(9, source="s")
            else:
                with vg.validation(step=9, source="s"):
                    vg.log_generations([f"q{n}"], ["a"], None)
    finally:
        vg.shutdown()
    from otel_valgen.reader import read_paths

    records = list(read_paths([str(tmp_path)], lambda error: None))
    ends = [r.attempt for r in records if isinstance(r, EndRecord)]
    assert ends == ["L.1", "L.2", "L.3", "L.4"]
    (step,) = select_steps(records)
    assert (step.attempt, step.attempts) == ("L.4", 4)
    assert [g.input for g in step.generations] == ["q3"]
