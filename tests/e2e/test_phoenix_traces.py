"""User story: a team reads its validation steps in Arize Phoenix, one trace per step, as LLM conversations.

The same agentic job as tests/e2e/test_mlflow_traces.py logs one validation step of multi-turn,
tool-calling trajectories through the built collector started with collector.yaml and the
traces-phoenix.yaml overlay, whose ``valgen_spans/phoenix`` connector sends the GenAI messages
as JSON strings (``message_encoding: json``, the only form Phoenix converts) to a real
``phoenix serve`` (its OTLP/HTTP endpoint, /v1/traces, project from the x-project-name header).
Read back with Phoenix's REST API (/v1/projects/<project>/spans): one trace per step, its id the
step's; a span per kept trajectory (AGENT) with its score event and its whole conversation; under
it a span per assistant turn that Phoenix turned into an LLM span with its input and output
messages (Phoenix's ``llm.input_messages`` / ``llm.output_messages``, converted from the GenAI
messages, each output message with its ``finish_reason``, the tool calls with their names and
arguments), and a TOOL span per tool call with its arguments and result.

Phoenix (arize-phoenix) cannot share the dev lock (requirements/phoenix.in says why): ``make
phoenix`` (part of ``make test``) installs requirements/phoenix.lock into build/tools/phoenix-venv,
whose ``phoenix`` the test runs; ``VALGEN_PHOENIX`` names another executable. Missing, the test is
skipped, saying so, and fails under ``VALGEN_REQUIRE_ALL=1``.
"""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from otel_valgen import contract
from tests.e2e import harness
from tests.e2e.agentic_job import trajectory
from tests.e2e.harness import REPO, wait_for
from tests.e2e.traces import SPANS_PER_TRAJECTORY, run_agentic_steps, step_trace_id, trajectory_index
from tests.support.ports import free_port
from tests.support.process import ServerProcess, launch
from tests.support.require import require_or_skip

RUN_ID = "phoenix-agentic"
K = 3
STEP = 5
PROJECT = "valgen-e2e"
PHOENIX_VENV = REPO / "build" / "tools" / "phoenix-venv"


def _phoenix_binary() -> str:
    """``VALGEN_PHOENIX``, else the ``phoenix`` of the venv ``make phoenix`` installs."""
    binary = Path(os.environ.get("VALGEN_PHOENIX") or PHOENIX_VENV / "bin" / "phoenix")
    require_or_skip(
        binary.is_file() and os.access(binary, os.X_OK),
        f"Phoenix is not installed: {binary} is missing; `make phoenix` installs requirements/phoenix.lock"
        f" into {PHOENIX_VENV.relative_to(REPO)} (or set VALGEN_PHOENIX=<path to phoenix>)",
    )
    return str(binary)


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``phoenix serve`` on free loopback ports with a SQLite store of its own; its base URL."""
    binary = _phoenix_binary()
    home = tmp_path_factory.mktemp("phoenix")
    port = free_port()
    env = os.environ | {
        "PHOENIX_WORKING_DIR": str(home),
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(free_port()),  # its default, 4317, is the collector's
        "PHOENIX_TELEMETRY_ENABLED": "false",
    }
    server = ServerProcess(
        "phoenix", launch("phoenix", [binary, "serve"], env, home, "phoenix.log"), home / "phoenix.log"
    )
    base = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        try:
            with urllib.request.urlopen(f"{base}/healthz", timeout=2) as response:
                return int(response.status) == 200
        except OSError:
            return False

    try:
        server.wait_ready(ready, timeout_s=180)
        yield base
    finally:
        server.stop()


def _spans(base: str) -> list[dict[str, Any]]:
    try:
        return list(_get(f"{base}/v1/projects/{PROJECT}/spans?limit=1000")["data"])
    except OSError:  # the project does not exist before its first span
        return []


def _messages(attributes: dict[str, Any], prefix: str, key: str = "content") -> list[tuple[str, Any]]:
    """(role, content, or another field) of Phoenix's flattened llm.input_messages / llm.output_messages."""
    out = []
    index = 0
    while f"{prefix}.{index}.message.role" in attributes:
        role = attributes[f"{prefix}.{index}.message.role"]
        out.append((role, attributes.get(f"{prefix}.{index}.message.{key}", "")))
        index += 1
    return out


def _tool_call(attributes: dict[str, Any], message: int = 0) -> tuple[str, str, dict[str, Any]]:
    """(id, function name, arguments) of an output message's first tool call, as Phoenix converted it."""
    call = f"llm.output_messages.{message}.message.tool_calls.0.tool_call"
    return (
        attributes[f"{call}.id"],
        attributes[f"{call}.function.name"],
        json.loads(attributes[f"{call}.function.arguments"]),
    )


def test_phoenix_shows_each_step_as_a_trace_of_llm_conversations(phoenix: str, tmp_path: Path) -> None:
    """One trace per step; the kept trajectories, their turns as LLM spans with their messages, their tool calls."""
    with ExitStack() as stack:
        trackers = stack.enter_context(harness.wandb_stand_in())
        loki = stack.enter_context(harness.loki_stand_in())
        env = {
            "VALGEN_TRACKER_EXPORTER_ENDPOINT": trackers.endpoint,
            "VALGEN_LOKI_OTLP_ENDPOINT": loki.endpoint,
            "VALGEN_DECISION_WAIT": "3s",
            "VALGEN_PHOENIX_ENDPOINT": phoenix,
            "VALGEN_PHOENIX_PROJECT": PROJECT,
        }
        collector = harness.start_collector(tmp_path, "collector", ["collector.yaml", "traces-phoenix.yaml"], env)
        stack.callback(collector.stop)
        kept = run_agentic_steps(collector, RUN_ID, K, {STEP: range(12)})[STEP]
        want = 1 + K * SPANS_PER_TRAJECTORY
        try:
            wait_for(lambda: len(_spans(phoenix)) == want, 90, f"{want} spans in Phoenix")
        except AssertionError as error:
            raise AssertionError(f"{error}\ncollector log:\n{collector.log_tail(60)}") from None

    spans = _spans(phoenix)
    assert {s["context"]["trace_id"] for s in spans} == {step_trace_id(RUN_ID, STEP)}
    (root,) = [s for s in spans if s["parent_id"] is None]
    assert root["name"] == f"valgen validation step {STEP}"
    by_sample = {s["attributes"][contract.SAMPLE_ID]: s for s in spans if s["parent_id"] == root["context"]["span_id"]}
    assert sorted(by_sample) == sorted(r.attributes[contract.SAMPLE_ID] for r in kept)
    for record in kept:
        index = trajectory_index(record)
        prompt, turns, score = trajectory(index)
        span = by_sample[record.attributes[contract.SAMPLE_ID]]
        assert (span["name"], span["span_kind"]) == ("invoke_agent", "AGENT")
        (evaluation,) = span["events"]
        assert evaluation["name"] == "gen_ai.evaluation.result"
        assert evaluation["attributes"]["gen_ai.evaluation.score.value"] == score
        below = sorted(
            (s for s in spans if s["parent_id"] == span["context"]["span_id"]), key=lambda s: s["start_time"]
        )
        assert [(s["name"], s["span_kind"]) for s in below] == [
            ("chat", "LLM"),
            ("execute_tool calc", "TOOL"),
            ("chat", "LLM"),
            ("execute_tool calc", "TOOL"),
            ("chat", "LLM"),
        ]
        first, calc_1, second, calc_2, last = (s["attributes"] for s in below)
        product, total = index * 7, index * 7 + index % 5
        thinking = f"(thinking) {turns[2]['reasoning_content']}"  # message_parts chat_ui
        # Phoenix's span view reads llm.input_messages / llm.output_messages, which it makes from the
        # GenAI messages: the trajectory's whole conversation on its span, each turn's on the turn's.
        # Each output message has a finish_reason (one without would drop the span's whole list).
        conversation = [
            ("assistant", turns[0]["content"]),
            ("tool", str(product)),
            ("assistant", thinking),
            ("tool", str(total)),
            ("assistant", turns[4]["content"]),
        ]
        assert _messages(span["attributes"], "llm.output_messages") == conversation
        assert [reason for _, reason in _messages(span["attributes"], "llm.output_messages", "finish_reason")] == [
            "tool_call",
            "stop",
            "tool_call",
            "stop",
            "stop",
        ]
        assert _messages(first, "llm.input_messages") == [
            ("system", prompt[0]["content"]),
            ("user", prompt[1]["content"]),
        ]
        assert _messages(first, "llm.output_messages") == [("assistant", turns[0]["content"])]
        assert _messages(first, "llm.output_messages", "finish_reason") == [("assistant", "tool_call")]
        assert _tool_call(first) == (f"call_{index}_0", "calc", {"expr": f"{index}*7"})
        assert _messages(second, "llm.input_messages") == [("tool", str(product))]
        assert second["llm.input_messages.0.message.tool_call_id"] == f"call_{index}_0"
        assert _messages(second, "llm.output_messages") == [("assistant", thinking)]
        assert _tool_call(second) == (f"call_{index}_1", "calc", {"expr": f"{product}+{index % 5}"})
        assert _messages(last, "llm.input_messages") == [("tool", str(total))]
        assert _messages(last, "llm.output_messages", "finish_reason") == [("assistant", "stop")]
        assert _messages(last, "llm.output_messages") == [("assistant", turns[4]["content"])]
        for call, expr, result in ((calc_1, f"{index}*7", product), (calc_2, f"{product}+{index % 5}", total)):
            # Phoenix reads gen_ai.tool.call.arguments (a JSON string) as the tool's parameters.
            assert (call["tool.name"], call["tool.parameters.expr"], call["output.value"]) == (
                "calc",
                expr,
                str(result),
            )
