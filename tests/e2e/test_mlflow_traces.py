"""User story: a team reads its validation steps in MLflow's trace UI, one trace per step, linked to the job's run.

A training process with an MLflow run (``MLFLOW_RUN_ID``) logs two validation steps of
multi-turn, tool-calling trajectories (tests/e2e/agentic_job.py: a system and a user prompt, two
assistant turns that call the ``calc`` tool, one with reasoning, a final answer) through the
built collector started with collector.yaml and the traces-mlflow.yaml overlay, which sends the
``valgen_spans`` connector's traces to a real ``mlflow server``'s OTLP endpoint (/v1/traces).
Read back with MLflow's own client:

- one trace per step, its id the step's (the trace id the job's records carry), linked to the run
  by the overlay's one-run header (``VALGEN_MLFLOW_RUN_ID``; tests/e2e/test_mlflow_run_links.py
  links each job's traces to its own run from the exporter service instead);
- under its root, one span per kept generation (exactly the sampler's k, by rank), typed AGENT,
  whose inputs and outputs MLflow took from the GenAI messages: the record's, with reasoning as a
  text part (the connector's chat-view form), and the score as a ``gen_ai.evaluation.result`` event;
- under each, a chat span per assistant turn and an execute_tool span per tool call, with its
  arguments and the tool's result.

Then headless Chromium opens MLflow's trace view of one kept trajectory, clicks its span as a
user would, and finds the conversation's turns and the tool call on the page; the screenshot is
kept (build/screenshots/mlflow-trace-view.png).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from otel_valgen import contract
from tests.e2e import harness
from tests.e2e.agentic_job import trajectory
from tests.e2e.harness import REPO, Record, wait_for
from tests.e2e.test_agentic_trajectories import _genai
from tests.e2e.traces import (
    SPANS_PER_TRAJECTORY,
    chat_ui,
    run_agentic_steps,
    step_trace_id,
    trajectory_index,
    with_finish_reasons,
)
from tests.exporter.mlflow_server import MlflowServer
from tests.support.chromium import headless_chromium

RUN_ID = "traced-agentic"
K = 3
STEPS = {1: range(12), 2: range(12, 24)}  # step -> the trajectories its process logs
SCREENSHOTS = REPO / "build" / "screenshots"


@dataclass
class TracedJob:
    """What the job left: the MLflow server, its experiment and run, the kept records and the traces by step."""

    server: MlflowServer
    experiment_id: str
    run_id: str
    kept: dict[int, list[Record]]
    traces: dict[int, Any]  # step -> mlflow.entities.Trace


@pytest.fixture(scope="module")
def traced_job(mlflow_server: MlflowServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TracedJob]:
    """Run the job's two steps through the collector with traces-mlflow.yaml; wait for both traces in MLflow."""
    import mlflow

    client = mlflow.MlflowClient(mlflow_server.uri)
    experiment_id = client.create_experiment(f"valgen-traces-{tmp_path_factory.getbasetemp().name}")
    run_id = str(client.create_run(experiment_id, run_name="agentic-job").info.run_id)
    with ExitStack() as stack:
        trackers = stack.enter_context(harness.wandb_stand_in())
        loki = stack.enter_context(harness.loki_stand_in())
        env = {
            "VALGEN_TRACKER_EXPORTER_ENDPOINT": trackers.endpoint,
            "VALGEN_LOKI_OTLP_ENDPOINT": loki.endpoint,
            "VALGEN_DECISION_WAIT": "3s",
            "VALGEN_MLFLOW_TRACKING_URI": mlflow_server.uri,
            "VALGEN_MLFLOW_EXPERIMENT_ID": experiment_id,
            "VALGEN_MLFLOW_RUN_ID": run_id,
        }
        state = tmp_path_factory.mktemp("traced-collector")
        collector = harness.start_collector(state, "collector", ["collector.yaml", "traces-mlflow.yaml"], env)
        stack.callback(collector.stop)
        # The job's MLflow run: its records carry it (resource attribute mlflow.run_id).
        kept = run_agentic_steps(collector, RUN_ID, K, STEPS, {"MLFLOW_RUN_ID": run_id})
        want_spans = 1 + K * SPANS_PER_TRAJECTORY  # the root, then each kept trajectory's spans

        def stored() -> dict[int, Any]:
            by_step = {}
            for trace in client.search_traces(locations=[experiment_id], max_results=100):
                root = next(s for s in trace.data.spans if s.parent_id is None)
                by_step[int(root.attributes[contract.STEP])] = trace
            return by_step

        try:
            wait_for(
                lambda: {s: len(t.data.spans) for s, t in stored().items()} == dict.fromkeys(STEPS, want_spans),
                90,
                f"{len(STEPS)} traces of {want_spans} spans in MLflow",
            )
        except AssertionError as error:
            raise AssertionError(f"{error}\ncollector log:\n{collector.log_tail(60)}") from None
        yield TracedJob(mlflow_server, experiment_id, run_id, kept, stored())


def test_each_step_is_one_trace_of_its_kept_trajectories(traced_job: TracedJob) -> None:
    """One trace per step, its id the step's; a span per kept trajectory with its messages, score, turns and tools."""
    assert sorted(traced_job.traces) == sorted(STEPS)
    for step, trace in traced_job.traces.items():
        kept = traced_job.kept[step]
        assert len(kept) == K
        assert trace.info.trace_id == f"tr-{step_trace_id(RUN_ID, step)}"
        # The job's log records carry the same trace id: a log line leads to its step's trace.
        assert {r.trace_id for r in kept} == {step_trace_id(RUN_ID, step)}
        spans = trace.data.spans
        (root,) = [s for s in spans if s.parent_id is None]
        assert root.name == f"valgen validation step {step}"
        assert (root.attributes[contract.RUN_ID], root.attributes[contract.SEEN]) == (RUN_ID, len(STEPS[step]))
        children = {s.span_id: s for s in spans if s.parent_id == root.span_id}
        by_sample = {s.attributes[contract.SAMPLE_ID]: s for s in children.values()}
        # Exactly the kept generations, no others; in rank order.
        assert list(by_sample) == [r.attributes[contract.SAMPLE_ID] for r in kept]
        for record in kept:
            index = trajectory_index(record)
            prompt, turns, score = trajectory(index)
            span = by_sample[record.attributes[contract.SAMPLE_ID]]
            assert (span.name, span.span_type) == ("invoke_agent", "AGENT")
            assert span.attributes[contract.RANK] == record.attributes[contract.RANK]
            # MLflow took the span's inputs and outputs from gen_ai.input/output.messages.
            assert span.inputs == _genai(prompt)
            assert span.outputs == with_finish_reasons(chat_ui(_genai(turns)))
            (evaluation,) = span.events
            assert evaluation.name == "gen_ai.evaluation.result"
            assert evaluation.attributes["gen_ai.evaluation.name"] == "score"
            assert evaluation.attributes["gen_ai.evaluation.score.value"] == score
            # Its trajectory: a chat span per assistant turn, an execute_tool span per tool call.
            below = sorted((s for s in spans if s.parent_id == span.span_id), key=lambda s: s.start_time_ns)
            assert [(s.name, s.span_type) for s in below] == [
                ("chat", "CHAT_MODEL"),
                ("execute_tool calc", "TOOL"),
                ("chat", "CHAT_MODEL"),
                ("execute_tool calc", "TOOL"),
                ("chat", "CHAT_MODEL"),
            ]
            first, calc_1, second, calc_2, last = below
            assert first.inputs == _genai(prompt)
            assert first.outputs == with_finish_reasons(chat_ui(_genai(turns[:1])))
            assert second.inputs == _genai(turns[1:2])  # the tool's result, since the previous turn
            assert second.outputs == with_finish_reasons(chat_ui(_genai(turns[2:3])))
            assert last.outputs == with_finish_reasons(_genai(turns[4:5]))
            assert calc_1.attributes["gen_ai.tool.name"] == "calc"
            assert calc_1.attributes["gen_ai.tool.call.id"] == f"call_{index}_0"
            assert calc_1.inputs == {"expr": f"{index}*7"}
            assert calc_1.outputs == str(index * 7)
            assert calc_2.inputs == {"expr": f"{index * 7}+{index % 5}"}
            assert calc_2.outputs == str(index * 7 + index % 5)


def test_traces_are_linked_to_the_jobs_mlflow_run(traced_job: TracedJob) -> None:
    """The job's run lists the job's steps as its traces (its page's Traces tab); another run lists none.

    MLflow's OTLP endpoint links the traces of a request to the run its x-mlflow-run-id header
    names (traces-mlflow.yaml: VALGEN_MLFLOW_RUN_ID), the run the job's records name.
    """
    import mlflow

    client = mlflow.MlflowClient(traced_job.server.uri)
    for step in STEPS:
        assert {r.resource["mlflow.run_id"] for r in traced_job.kept[step]} == {traced_job.run_id}
    linked = client.search_traces(locations=[traced_job.experiment_id], run_id=traced_job.run_id)
    assert sorted(t.info.trace_id for t in linked) == sorted(f"tr-{step_trace_id(RUN_ID, s)}" for s in STEPS)
    other = str(client.create_run(traced_job.experiment_id).info.run_id)
    assert list(client.search_traces(locations=[traced_job.experiment_id], run_id=other)) == []


def test_mlflow_trace_view_shows_a_kept_trajectory_as_a_conversation(traced_job: TracedJob, tmp_path: Path) -> None:
    """Headless Chromium: MLflow's trace view, its first kept trajectory clicked, shows its turns and tool call."""
    step = min(STEPS)
    trace = traced_job.traces[step]
    record = traced_job.kept[step][0]
    index = trajectory_index(record)
    prompt, turns, _ = trajectory(index)
    experiment = f"{traced_job.server.uri}/#/experiments/{traced_job.experiment_id}"
    url = f"{experiment}/traces?selectedEvaluationId={trace.info.trace_id}"
    with headless_chromium(tmp_path / "chromium") as page:
        page.open(url)
        # The trace's span tree: the step, its kept trajectories, their turns and tool calls.
        page.wait_for_text(f"valgen validation step {step}", "invoke_agent", "execute_tool calc")
        page.click_label("Close")  # the MLflow Assistant's side panel, when it opens
        assert page.click_label("Full screen"), "the trace view has no Full screen button"
        page.click_text("invoke_agent")  # the first, rank 1
        shown = page.wait_for_text(
            prompt[0]["content"],  # the system prompt
            prompt[1]["content"],  # the user's question
            turns[0]["content"],  # the first turn, which calls calc
            f"(thinking) {turns[2]['reasoning_content']}",  # the second turn's reasoning
            turns[4]["content"],  # the final answer
        )
        # The tool call: its name, its arguments and the tool's result.
        assert "calc" in shown
        assert f"{index}*7" in shown
        assert str(index * 7 + index % 5) in shown
        screenshot = page.screenshot(tmp_path / "mlflow-trace-view.png")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(screenshot, SCREENSHOTS / "mlflow-trace-view.png")
    assert screenshot.stat().st_size > 10_000
