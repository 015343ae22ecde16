"""User story: a GRPO group's responses logged by three processes form one group, exactly.

Three processes of one launch (one script, as a terminal starts it) each log their share of every
prompt's 8 responses, in two calls each (``tests/e2e/split_rollout_job.py``): 64 prompts x 8
responses at one step, k = 3. Through the built collector and on the embedded files, the step
keeps the 3 prompts with the smallest prompt keys with all 8 responses each (24 of 24, against an
oracle that sorts), counts 64 distinct prompts, and says no kept prompt is incomplete; `otel-valgen
show` agrees.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from otel_valgen import contract
from otel_valgen.cli.main import main
from otel_valgen.sampling import sample_key
from tests.e2e.conftest import StartCollector
from tests.e2e.harness import REPO, StandIn, records_of_file, wait_for
from tests.support.process import run_in_a_terminal

JOB = f"{shlex.quote(sys.executable)} {shlex.quote(str(Path(__file__).with_name('split_rollout_job.py')))}"
PARTS, PROMPTS, RESPONSES, K, STEP, RUN = 3, 64, 8, 3, 5, "split-groups"
SEED = 0x5EED  # OTEL_VALGEN_SEED's default is not what this test pins: it sets its own


def _oracle() -> dict[str, set[str]]:
    """The k prompts with the smallest (prompt key, id), each with the texts of all its responses."""
    ids = sorted((f"q{p:02d}" for p in range(PROMPTS)), key=lambda pid: (sample_key(SEED, pid), pid.encode()))
    return {pid: {f"response {r} to prompt {int(pid[1:])}" for r in range(RESPONSES)} for pid in ids[:K]}


def _run_parts(sink: dict[str, str]) -> None:
    """The three processes, started together by one script as a terminal runs it; each must succeed."""
    starts = " ".join(f"{JOB} --part {part} & p{part}=$!;" for part in range(PARTS))
    waits = " && ".join(f"wait $p{part}" for part in range(PARTS))
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "OTEL_VALGEN_RUN_ID": RUN,
        "OTEL_VALGEN_ROLLOUT_COUNT": str(K),
        "OTEL_VALGEN_SEED": str(SEED),
        **sink,
    }
    if "OTEL_EXPORTER_OTLP_ENDPOINT" not in sink:  # the embedded default: no collector named
        env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    run_in_a_terminal(f"{starts} {waits}", env, timeout_s=180)


def _show(path: Path) -> dict[str, Any]:
    result = CliRunner().invoke(main, ["show", str(path), "--kind", "rollout", "--format", "json"])
    assert result.exit_code == 0, result.output
    (shown,) = [json.loads(line) for line in result.stdout.splitlines()]
    return shown


def _assert_shown(shown: dict[str, Any], oracle: dict[str, set[str]]) -> None:
    groups: dict[str, set[str]] = {}
    for generation in shown["generations"]:
        groups.setdefault(generation["prompt_id"], set()).add(generation["output"])
    assert groups == oracle
    assert (shown["kept"], shown["seen"]) == (K * RESPONSES, PROMPTS * RESPONSES)
    assert (shown["prompts_kept"], shown["prompts_seen"]) == (K, PROMPTS)
    assert (shown["prompts_seen_estimated"], shown["prompts_incomplete"]) == (False, 0)


@pytest.mark.timeout(300)
def test_a_group_split_over_three_processes_is_kept_whole_through_the_collector(
    start_collector: StartCollector, wandb_stand_in: StandIn, loki_stand_in: StandIn
) -> None:
    """24 of 24 through the built collector: the summary, the kept records and show agree with the oracle."""
    env = {
        "VALGEN_TRACKER_EXPORTER_ENDPOINT": wandb_stand_in.endpoint,
        "VALGEN_LOKI_OTLP_ENDPOINT": loki_stand_in.endpoint,
        "VALGEN_DECISION_WAIT": "2s",
    }
    collector = start_collector("collector", ["collector.yaml"], env)
    _run_parts({"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://{collector.http_endpoint}"})

    def summaries() -> list[dict[str, Any]]:
        return [r.attributes for r in records_of_file(collector.file_path) if r.event == contract.EVENT_STEP_SUMMARY]

    wait_for(lambda: len(summaries()) == 1, 60, "the rollout step's summary")
    (summary,) = summaries()
    assert (summary[contract.KEPT], summary[contract.SEEN]) == (K * RESPONSES, PROMPTS * RESPONSES)
    assert (summary[contract.PROMPTS_KEPT], summary[contract.PROMPTS_SEEN]) == (K, PROMPTS)
    assert summary[contract.PROMPTS_SEEN_ESTIMATED] is False
    assert (summary[contract.PROMPTS_INCOMPLETE], summary[contract.SOURCES_ENDED]) == (0, PARTS)
    oracle = _oracle()
    kept = [r.attributes for r in records_of_file(collector.file_path) if r.event == contract.EVENT_GENERATION]
    per_prompt = Counter(attributes[contract.PROMPT_ID] for attributes in kept)
    assert per_prompt == dict.fromkeys(oracle, RESPONSES)
    assert len({attributes[contract.SAMPLE_ID] for attributes in kept}) == K * RESPONSES
    _assert_shown(_show(collector.file_path), oracle)


def test_a_group_split_over_three_processes_is_kept_whole_in_show(tmp_path: Path) -> None:
    """The same job with no collector (the embedded files): show keeps 24 of 24 and counts 64 prompts."""
    _run_parts({"OTEL_VALGEN_DIR": str(tmp_path)})
    _assert_shown(_show(tmp_path), _oracle())
