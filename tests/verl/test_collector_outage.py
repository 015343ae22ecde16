"""User story: the collector goes away for two training steps of verl's real ``main_ppo``; nothing is lost.

``python -m verl.trainer.main_ppo`` (verl 0.9.1, its default v1 trainer, launched as
``test_main_ppo_entry_point.py`` launches it: the documented variables, the CPU plugin, the built collector with
its shipped config) trains 4 steps with rollouts on (``OTEL_VALGEN_ROLLOUT_COUNT``) and validates at
``global_steps`` 0, 2 and 4 (``val_before_train``, ``trainer.test_freq=2``). Once verl has logged step 1 and
step 1's rollouts have reached the collector, the collector is SIGKILLed; it stays down while verl trains steps
2 and 3 (the validation of step 2 among them) and is started again on the same ports and state folder once verl
has logged step 3. Nothing else is done: no ``otel-valgen resend``. What the SDK could not deliver goes to the
spool (``<OTEL_VALGEN_DIR>/spool``) and is sent again by itself once the collector is back.

The trainer is verl's default, v1: its real agent-loop workers take about 2 s per step here, time enough to
stage an outage between steps. The legacy trainer launches in about half the time, but its CPU stand-ins train
a step in about 0.1 s: all 4 steps are over before the collector could be stopped after step 1.

Asserted, once verl exited 0 and the collector closed every step: each validation verl ran (its
``validation_data_dir`` dump) and each training step's rollouts are at the collector's file output exactly once
(the exact bottom-k, each kept sample id once, one summary per step counting everything verl generated), under
the trainer's wandb run, and the tracker stand-in (where the exporter service listens) received the same
records, each once. verl's own per-step ``timing_s/*`` metrics (its console logger's lines) are printed next to
the wall time of each step and the part of it the collector was down; timings are printed, never asserted. In v1
the rollouts are sent from ``_compute_metrics``, after verl's ``step`` timer: a wait for them shows in the wall
time only (the validation's in ``timing_s/testing``).

Why SIGKILL: the collector gets no chance to drain or store anything and every connection of the SDK breaks at
once, as in a crash or an OOM kill; a SIGTERM would be the easier case. Step 1's rollouts (and possibly the
validation before training, which closes ``decision_wait`` after its last record) are then in open groups,
which the sampler stored before acknowledging them. The kill comes half a second after the last record was
accepted and seconds before the validation of step 0 closes (``decision_wait`` after its last record), when
nothing is being exported, so the two windows a SIGKILL is documented to hit (docs/reliability.md: a step's
output closed in the last second not yet written; a queued batch exported but not yet deleted, sent again) are
not what this test measures.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from otel_valgen import contract
from tests.e2e import harness as e2e
from tests.faults.conftest import Collectors, RunningCollector, file_records, metric_sum
from tests.support.ray_cluster import ray_env
from tests.verl import harness, launcher
from tests.verl.conftest import VerlFiles

pytestmark = [pytest.mark.ray, pytest.mark.timeout(900)]  # one launch of 4 steps: about 3 minutes on 2 cores

K = 4  # trainer.log_val_generations
STEPS = 4  # trainer.total_training_steps
TEST_FREQ = 2  # validations at 0 (before training), 2 (collector down) and 4 (after the restart, the last step)
KILLED_AFTER = 1  # the training step whose records reach the collector before it is killed
DOWN_FOR = 2  # training steps verl runs while the collector is down
N = 2  # actor_rollout_ref.rollout.n (launcher.main_ppo_overrides)
PROMPTS = 4  # data.train_batch_size
# Generation records the trainer sends up to step 1, presampled (the default): the validation's bottom-k, then
# k prompts with all n responses each.
SENT_BY_STEP_1 = K + launcher.ROLLOUT_COUNT * N
QUIET_S = 0.5  # no record accepted for this long: the part's end record has arrived too
DELIVERY_S = 90.0  # after verl exits, for the spool to arrive and the collector to close every step
COLLECTOR = "collector"
CONSOLE_STEP = re.compile(r"\bstep:(\d+) - (.*)$")  # verl's console logger: "step:3 - key:value - key:value"
NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf)")
TIMINGS = ("timing_s/step", "timing_s/update_actor", "timing_s/testing")


def _metrics_lines(root: Path) -> list[dict[str, Any]]:
    """The lines of verl's file tracker so far; a last line still being written is left for the next read."""
    path = root / launcher.METRICS_FILE
    if not path.exists():
        return []
    lines = []
    for line in path.read_text(encoding="utf-8").split("\n"):
        with suppress(ValueError):
            lines.append(json.loads(line))
    return lines


def _trained(root: Path) -> list[int]:
    """The training steps verl has logged so far."""
    lines = _metrics_lines(root)
    return [line["step"] for line in lines if any(key.startswith(launcher.TRAINING_KEYS) for key in line["data"])]


@dataclass
class Progress:
    """When the test first saw each of verl's metrics lines (step 0: the validation before training)."""

    root: Path
    seen: dict[int, float] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)

    def poll(self) -> None:
        """Note the time of every step logged since the last poll."""
        for line in _metrics_lines(self.root):
            self.seen.setdefault(line["step"], time.monotonic())

    def run(self) -> None:
        """Poll every 0.1 s until told to stop."""
        while not self.stop.wait(0.1):
            self.poll()


@contextmanager
def _watching(root: Path) -> Iterator[Progress]:
    """A thread noting when verl logs each step, for the wall times of the table."""
    progress = Progress(root)
    thread = threading.Thread(target=progress.run, name="verl-progress", daemon=True)
    thread.start()
    try:
        yield progress
    finally:
        progress.stop.set()
        thread.join(5)
        progress.poll()


def _tail(running: launcher.Running, lines: int = 40) -> str:
    return "\n".join(running.output.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])


def _wait(running: launcher.Running, condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll ``condition`` while verl runs; fail with verl's last lines if it exits first or time runs out."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if running.process.poll() is not None:
            raise AssertionError(f"verl exited ({running.process.returncode}) before {what}:\n{_tail(running)}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}:\n{_tail(running)}")
        time.sleep(0.1)


@dataclass
class Arrivals:
    """The collector's count of accepted records, and when it last changed."""

    collector: RunningCollector
    accepted: float = -1.0
    changed: float = 0.0

    def received_step_1(self) -> bool:
        """Step 1's generations reached the sampler and no record was accepted for ``QUIET_S``."""
        values = self.collector.metrics()
        accepted = metric_sum(values, "otelcol_receiver_accepted_log_records")
        if accepted != self.accepted:
            self.accepted, self.changed = accepted, time.monotonic()
        received = metric_sum(values, "otelcol_valgen_sampler_records_received")
        return received >= SENT_BY_STEP_1 and time.monotonic() - self.changed >= QUIET_S


def _kind(record: e2e.Record) -> str:
    return str(record.attributes.get(contract.KIND, contract.KIND_VALIDATION))  # absent: validation


def _generations(records: list[e2e.Record]) -> Counter[tuple[str, int, str]]:
    """(kind, step, sample id) of every kept generation, with how often it arrived."""
    return Counter(
        (_kind(r), r.attributes[contract.STEP], r.attributes[contract.SAMPLE_ID])
        for r in records
        if r.event == contract.EVENT_GENERATION
    )


def _summaries(records: list[e2e.Record]) -> Counter[tuple[str, int]]:
    """(kind, step) of every step summary, with how often it arrived."""
    return Counter((_kind(r), r.attributes[contract.STEP]) for r in records if r.event == contract.EVENT_STEP_SUMMARY)


def _spooled(directory: Path) -> int:
    """Records in the spool files under ``directory`` (OTLP-JSON lines), a line being written left out."""
    return sum(len(file_records(path)) for path in directory.glob("**/*.jsonl"))


def _number(text: str) -> float | None:
    """The number in one of verl's console values (``0.25``, ``np.float64(0.25)``), or None."""
    match = NUMBER.search(text)
    return float(match.group()) if match else None


def console_metrics(text: str) -> dict[int, dict[str, float]]:
    """The numbers of verl's console logger lines by step (``step:N - key:value - ...``, after Ray's prefix)."""
    out: dict[int, dict[str, float]] = {}
    for line in text.splitlines():
        match = CONSOLE_STEP.search(line)
        if not match:
            continue
        values = out.setdefault(int(match.group(1)), {})
        for item in match.group(2).split(" - "):
            key, colon, value = item.rpartition(":")
            number = _number(value) if colon else None
            if number is not None:
                values[key] = number
    return out


def timing_table(text: str, seen: dict[int, float], down: tuple[float, float]) -> str:
    """One row per training step: the wall time since the previous step, how much of it was down, verl's timings."""
    metrics = console_metrics(text)
    rows = [f"{'step':>4} {'collector':>14} {'wall s':>7} " + " ".join(f"{name:>21}" for name in TIMINGS)]
    for step in sorted(s for s in seen if s > 0 and s - 1 in seen):
        start, end = seen[step - 1], seen[step]
        away = max(0.0, min(end, down[1]) - max(start, down[0]))
        state = "up" if away == 0 else f"down {away:4.1f}s"
        values = " ".join(f"{metrics.get(step, {}).get(name, float('nan')):21.3f}" for name in TIMINGS)
        rows.append(f"{step:>4} {state:>14} {end - start:7.1f} {values}")
    return "\n".join(rows)


def test_two_training_steps_without_a_collector_arrive_once_by_themselves(
    verl_files: VerlFiles, tmp_path: Path
) -> None:
    """SIGKILL after step 1, restart after step 3: each validation and rollout step reaches file and tracker once."""
    assert e2e.COLLECTOR_BIN.is_file(), "build/otelcol-valgen is missing: `make collector` builds it"
    model_dir = harness.make_model_dir(tmp_path / "model", verl_files.tokenizer)
    run_root = tmp_path / "run"
    run_root.mkdir()
    collectors = Collectors(tmp_path / "collectors")  # a restart under the same name: same ports, same state
    with e2e.wandb_stand_in() as tracker, e2e.loki_stand_in() as loki:
        env = {
            "VALGEN_TRACKER_EXPORTER_ENDPOINT": tracker.endpoint,
            "VALGEN_LOKI_OTLP_ENDPOINT": loki.endpoint,
            "VALGEN_DECISION_WAIT": "10s",  # as test_main_ppo_entry_point.py: v1's validation outlasts 2 s
        }
        collector = collectors.start(COLLECTOR, env)
        file_path = collector.file_path
        valgen_dir = run_root / "valgen"  # OTEL_VALGEN_DIR (documented): the spool is its spool/ folder
        job_env = {
            **launcher.user_env(collector.http_endpoint),
            **launcher.test_only_env(run_root),
            "OTEL_VALGEN_DIR": str(valgen_dir),
        }
        overrides = [
            *launcher.main_ppo_overrides(run_root, verl_files, model_dir, K, use_v1=True),
            f"trainer.total_training_steps={STEPS}",
            f"trainer.total_epochs={STEPS}",  # the 6 train prompts make one batch of 4 per epoch
            f"trainer.test_freq={TEST_FREQ}",
        ]
        running = launcher.start_local(run_root, overrides, ray_env(job_env), module=launcher.MAIN_PPO)
        try:
            with _watching(run_root) as progress:
                arrivals = Arrivals(collector)
                _wait(
                    running,
                    lambda: KILLED_AFTER in _trained(run_root) and arrivals.received_step_1(),
                    600,
                    f"verl to log step {KILLED_AFTER} and the collector to receive its rollouts",
                )
                Collectors.kill(collector)
                killed_at, trained_at_kill = time.monotonic(), _trained(run_root)
                print(f"collector SIGKILLed after {arrivals.accepted:.0f} records; verl had logged {trained_at_kill}")

                last_down = KILLED_AFTER + DOWN_FOR
                _wait(running, lambda: last_down in _trained(run_root), 600, f"verl to log step {last_down}")
                spooled_at_restart = _spooled(valgen_dir / "spool")
                collector = collectors.start(COLLECTOR, env)
                restarted_at, trained_at_restart = time.monotonic(), _trained(run_root)
                print(
                    f"collector restarted after {restarted_at - killed_at:.1f}s; verl had logged {trained_at_restart};"
                    f" {spooled_at_restart} records in the spool"
                )
                launch = running.finish(600)
            print(f"main_ppo (v1 trainer) ran {launch.seconds:.1f}s, exit code {launch.returncode}")
            print(timing_table(launch.text(), progress.seen, (killed_at, restarted_at)))
            assert launch.returncode == 0, launch.tail()

            # The story ran as told: the collector was down from within step 2 until step 3 was logged.
            assert trained_at_kill == [KILLED_AFTER], trained_at_kill
            assert trained_at_restart == list(range(1, last_down + 1)), trained_at_restart
            trained = launch.training_steps()
            assert trained == list(range(1, STEPS + 1)), trained
            validations = launch.validations()
            assert [v.trainer_step for v in validations] == [0, 2, 4]

            waited = time.monotonic()
            launcher.wait_for_steps(file_path, [v.trainer_step for v in validations], DELIVERY_S)
            launcher.wait_for_steps(file_path, trained, DELIVERY_S, kind=contract.KIND_ROLLOUT)
            print(
                f"every step closed {time.monotonic() - waited:.1f}s after verl exited;"
                f" {_spooled(valgen_dir / 'spool')} records in the spool"
            )
            for validation in validations:
                launcher.assert_validation_sampled(file_path, validation, K, "trainer", cut_at_limit=True)
            for step in trained:
                launcher.assert_rollouts_sampled(file_path, step, n=N, prompts=PROMPTS, cut=True)
            at_file = e2e.records_of_file(file_path)
            steps_records = [r for r in at_file if r.event in {contract.EVENT_GENERATION, contract.EVENT_STEP_SUMMARY}]
            assert {r.attributes[contract.RUN_ID] for r in steps_records} == {launch.wandb_run_id()}
            late = [r.attributes for r in at_file if r.event == contract.EVENT_STEP_LATE]
            print("late reports (records delivered again after their step closed):", late or "none")

            # The tracker stand-in: the same records as the file, each once, one summary per step.
            expected = {(contract.KIND_VALIDATION, v.trainer_step) for v in validations}
            expected |= {(contract.KIND_ROLLOUT, step) for step in trained}
            e2e.wait_for(lambda: expected <= set(_summaries(tracker.records())), 60, "every summary at the tracker")
            at_tracker = tracker.records()
            assert _summaries(at_tracker) == Counter(dict.fromkeys(expected, 1))
            assert _generations(at_tracker) == _generations(at_file)
            assert set(_generations(at_tracker).values()) == {1}
        finally:
            running.kill()
            collectors.stop_all()
