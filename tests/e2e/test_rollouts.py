"""User story: a training step's rollouts, split over two processes, reach the file as k whole prompts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from typing import Any

from dashboards import validation_generations as vgd
from dashboards.render import render
from otel_valgen import contract
from otel_valgen.reader import read_paths
from otel_valgen.sampling import SortKey, group_view, sample_key, untagged
from otel_valgen.selection import select_steps
from tests.deploy import grafana_table, logql_subset, loki_model
from tests.deploy.loki_query import substitute
from tests.e2e.conftest import StartCollector
from tests.e2e.harness import REPO, StandIn, records_of_file, wait_for

RUN_ID, SEED, K, N, STEP = "e2e-rollouts", 7, 3, 4, 12
PROMPTS = {"trainer-a": [f"a{p}" for p in range(5)], "trainer-b": [f"b{p}" for p in range(6)]}
VALIDATION_K = 2


def _emit(endpoint: str) -> None:
    """Each source is its own OS process (tests/e2e/rollout_worker.py) of one launch: N responses per prompt."""
    launch = uuid.uuid4().hex[:12]  # both processes are one launch, so their parts share the attempt
    workers = []
    for source, prompts in PROMPTS.items():
        env = os.environ | {
            "PYTHONPATH": str(REPO),
            "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
            "OTEL_VALGEN_RUN_ID": RUN_ID,
            "OTEL_VALGEN_SEED": str(SEED),
            "OTEL_VALGEN_ROLLOUT_COUNT": str(K),
            "OTEL_VALGEN_COUNT": str(VALIDATION_K),
            "OTEL_VALGEN_SOURCE": source,
            "OTEL_VALGEN_LAUNCH_ID": launch,
        }
        args = ["--step", str(STEP), "--prompts", ",".join(prompts), "--responses", str(N)]
        command = [sys.executable, "-m", "tests.e2e.rollout_worker", *args]
        workers.append(subprocess.Popen(command, env=env, cwd=REPO, stdout=subprocess.PIPE, text=True))
    for worker in workers:
        output, _ = worker.communicate(timeout=60)
        assert worker.returncode == 0, output


def _oracle() -> list[str]:
    """The sample ids the group view keeps, in rank order, from the oracle that sorts."""
    every = [p for prompts in PROMPTS.values() for p in prompts]
    keys = (
        (SortKey.of(sample_key(SEED, p), p), SortKey.of(sample_key(SEED, f"{p}/{i}"), f"{p}/{i}"), f"{p}/{i}")
        for p in every
        for i in range(N)
    )
    return [sample_id for _, _, sample_id in group_view(keys, K)]


def test_rollouts_of_a_split_step_keep_k_whole_prompts(
    start_collector: StartCollector, wandb_stand_in: StandIn, loki_stand_in: StandIn
) -> None:
    """The collector keeps the k smallest prompts of both processes with all N responses, as show and the oracle do."""
    collector = start_collector(
        "collector",
        ["collector.yaml"],
        {
            "VALGEN_TRACKER_EXPORTER_ENDPOINT": wandb_stand_in.endpoint,
            "VALGEN_LOKI_OTLP_ENDPOINT": loki_stand_in.endpoint,
            "VALGEN_DECISION_WAIT": "2s",  # block-less parts announce no sources_expected: closed by silence
        },
    )
    _emit(f"http://{collector.http_endpoint}")

    def summaries() -> list[dict[str, object]]:
        return [r.attributes for r in records_of_file(collector.file_path) if r.event == contract.EVENT_STEP_SUMMARY]

    wait_for(lambda: len(summaries()) == 2, 30, "a validation and a rollout summary")
    by_kind = {s[contract.KIND]: s for s in summaries()}
    rollout = by_kind[contract.KIND_ROLLOUT]
    every = [p for prompts in PROMPTS.values() for p in prompts]
    assert (rollout[contract.PROMPTS_KEPT], rollout[contract.PROMPTS_SEEN]) == (K, len(every))
    assert (rollout[contract.KEPT], rollout[contract.SEEN]) == (K * N, len(every) * N)
    assert rollout[contract.SOURCES] == 2
    assert by_kind[contract.KIND_VALIDATION][contract.KEPT] == VALIDATION_K
    assert rollout[contract.ATTEMPT] == by_kind[contract.KIND_VALIDATION][contract.ATTEMPT]

    oracle = _oracle()
    kept = [
        r.attributes
        for r in records_of_file(collector.file_path)
        if r.event == contract.EVENT_GENERATION and r.attributes[contract.KIND] == contract.KIND_ROLLOUT
    ]
    assert [a[contract.RANK] for a in kept] == list(range(1, K * N + 1))
    assert [untagged(a[contract.SAMPLE_ID]) for a in kept] == oracle
    assert {a[contract.SOURCE] for a in kept} <= set(PROMPTS)
    (shown,) = select_steps(read_paths([collector.file_path], lambda e: None), kind=contract.KIND_ROLLOUT)
    assert [untagged(g.sample_id) for g in shown.generations] == oracle
    _assert_the_dashboard_shows_them(loki_stand_in, oracle)


def _assert_the_dashboard_shows_them(loki: StandIn, oracle: list[str]) -> None:
    """What reached the Loki stand-in, as Loki stores it: the rollout table shows the kept prompts whole, in order.

    The validation table of the same step shows its own k generations and no rollout.
    """
    index = loki_model.index_label_attributes()

    def rows(expr: str) -> list[dict[str, str]]:
        entries = [entry for request in list(loki.requests) for entry in loki_model.entries(request, index)]
        return logql_subset.select(substitute(expr, service=".+", run=RUN_ID, step=str(STEP)), entries)

    wait_for(lambda: len(rows(vgd.Q_ROLLOUT_GENERATIONS)) == K * N, 30, "the kept rollouts at the Loki stand-in")
    table = grafana_table.sorted_rows(_panel_of(vgd.Q_ROLLOUT_GENERATIONS), rows(vgd.Q_ROLLOUT_GENERATIONS))
    assert [untagged(row[vgd.SAMPLE_ID]) for row in table] == oracle
    assert [row[vgd.PROMPT_ID] for row in table] == [sample_id.split("/")[0] for sample_id in oracle]
    missing = grafana_table.kept_columns(_panel_of(vgd.Q_ROLLOUT_GENERATIONS)) - set().union(*table)
    assert missing == {vgd.PARAM_VERSION}, "every column but the param version (not sent here) has its values"
    validation = rows(vgd.Q_STEP_GENERATIONS)
    assert len(validation) == VALIDATION_K
    assert {row[vgd.KIND] for row in validation} == {contract.KIND_VALIDATION}


def _panel_of(expr: str) -> dict[str, Any]:
    """The dashboard's panel whose query is `expr`, as JSON (what test_dashboard checks is committed)."""
    panels = json.loads(render(vgd.dashboard()))["panels"]
    return next(panel for panel in panels if expr in [target["expr"] for target in panel.get("targets", [])])
