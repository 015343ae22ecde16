"""User stories of plain scripts (no launcher) through the built collector: what `show` and a tracker get.

Each job is ``tests/e2e/plain_job.py`` run by ``bash`` as a terminal runs a command line (a
process group of its own), with only the environment the README tells users to set.

- Distinct generations: two processes answering the same 20 prompts, and one process making two
  sampling passes over them, are 40 generations each; with k = 40 all 40 are kept.
- A resumed job: the script validates step 20, stops, and is started again; the step shows the
  second run's rows, in `otel-valgen show` and in TensorBoard (`otel-valgen push`).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from otel_valgen import contract
from otel_valgen.cli.main import main
from otel_valgen.exporter.backends.tensorboard import TensorBoardBackend, TensorBoardConfig
from otel_valgen.exporter.ledger import Ledger
from otel_valgen.exporter.push import push_paths
from tests.e2e.conftest import StartCollector
from tests.e2e.harness import REPO, Collector, StandIn, records_of_file, wait_for
from tests.e2e.steps import by_step
from tests.exporter.tensorboard_files import read_texts
from tests.support.process import run_in_a_terminal

JOB = f"{shlex.quote(sys.executable)} {shlex.quote(str(Path(__file__).with_name('plain_job.py')))}"


def _collector(start_collector: StartCollector, wandb_stand_in: StandIn, loki_stand_in: StandIn) -> Collector:
    """The shipped single collector; a step closes after 2 s of silence (no job says how many sources)."""
    env = {
        "VALGEN_TRACKER_EXPORTER_ENDPOINT": wandb_stand_in.endpoint,
        "VALGEN_LOKI_OTLP_ENDPOINT": loki_stand_in.endpoint,
        "VALGEN_DECISION_WAIT": "2s",
    }
    return start_collector("collector", ["collector.yaml"], env)


def _in_a_terminal(script: str, collector: Collector, extra: dict[str, str] | None = None) -> None:
    """Run ``script`` as a terminal runs a command line, with the variables the README names."""
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://{collector.http_endpoint}",
        "OTEL_VALGEN_RUN_ID": "plain-job",
        "OTEL_VALGEN_COUNT": "40",
        **(extra or {}),
    }
    run_in_a_terminal(script, env, timeout_s=180)


def _show(path: Path, step: int) -> dict[str, Any]:
    """`otel-valgen show --format json` of one step of the collector's file output."""
    result = CliRunner().invoke(
        main, ["show", str(path), "--run", "plain-job", "--step", str(step), "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    (shown,) = [json.loads(line) for line in result.stdout.splitlines()]
    return shown


def test_distinct_generations_of_one_prompt_are_all_kept(
    start_collector: StartCollector, wandb_stand_in: StandIn, loki_stand_in: StandIn
) -> None:
    """Two processes validating the same 20 prompts, and one process sampling them twice: 40 of 40 each."""
    collector = _collector(start_collector, wandb_stand_in, loki_stand_in)
    _in_a_terminal(f"{JOB} --step 1 --label a & {JOB} --step 1 --label b & wait", collector)
    _in_a_terminal(f"{JOB} --step 2 --label n --passes 2", collector)
    wait_for(lambda: len(by_step(records_of_file(collector.file_path))[1]) == 2, 60, "both steps' summaries")

    kept, summaries = by_step(records_of_file(collector.file_path))
    for step, answers in ((1, {"a pass 0", "b pass 0"}), (2, {"n pass 0", "n pass 1"})):
        (summary,) = summaries[step]
        figures = {name: summary.attributes[name] for name in (contract.SEEN, contract.KEPT, contract.DROPPED)}
        assert figures == {contract.SEEN: 40, contract.KEPT: 40, contract.DROPPED: 0}
        assert summary.attributes[f"{contract.DROPPED_PREFIX}sampled"] == 0
        assert len({record.attributes[contract.SAMPLE_ID] for record in kept[step]}) == 40
        shown = _show(collector.file_path, step)
        assert (shown["seen"], shown["kept"]) == (40, 40)
        outputs = {g["output"] for g in shown["generations"]}
        assert len(outputs) == 40
        assert {output.partition(":")[0] for output in outputs} == answers
        assert len({g["input"] for g in shown["generations"]}) == 20


def test_a_resumed_plain_job_shows_its_new_attempt(
    tmp_path: Path, start_collector: StartCollector, wandb_stand_in: StandIn, loki_stand_in: StandIn
) -> None:
    """`python plain_job.py` validates step 20, stops, and is started again: show and TensorBoard show the second."""
    collector = _collector(start_collector, wandb_stand_in, loki_stand_in)
    tracker = {"TENSORBOARD_DIR": "logs"}  # the folder the job's TensorBoard logger writes to, as verl sets it
    _in_a_terminal(f"{JOB} --step 20 --label first", collector, tracker)
    wait_for(lambda: len(by_step(records_of_file(collector.file_path))[1].get(20, [])) == 1, 60, "the first summary")
    _in_a_terminal(f"{JOB} --step 20 --label resumed", collector, tracker)
    wait_for(lambda: len(by_step(records_of_file(collector.file_path))[1].get(20, [])) == 2, 60, "the second summary")

    _, summaries = by_step(records_of_file(collector.file_path))
    attempts = [summary.attributes[contract.ATTEMPT] for summary in summaries[20]]
    assert len(set(attempts)) == 2  # two launches, two attempts: the second is not late
    assert all(summary.attributes.get(contract.LATE, 0) == 0 for summary in summaries[20])

    shown = _show(collector.file_path, 20)
    assert shown["attempt"] == attempts[1]
    assert {g["output"].partition(":")[0] for g in shown["generations"]} == {"resumed pass 0"}

    root = tmp_path / "tensorboard"
    report = push_paths(
        [collector.file_path], [TensorBoardBackend(TensorBoardConfig(root=str(root)), Ledger(tmp_path / "ledger"))]
    )
    assert report.steps >= 1
    table = read_texts(root / "logs", "val/generations")[20]
    assert "resumed pass 0" in table
    assert "first pass 0" not in table
