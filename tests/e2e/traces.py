"""What the trace UI tests share: the agentic job's steps through a collector, and what its traces must hold.

tests/e2e/agentic_job.py logs multi-turn, tool-calling trajectories; ``run_agentic_steps`` runs
it for each step (one process each, as a terminal would) against a collector, waits for the
steps' summaries and returns the kept records by step. The ``valgen_spans`` connector makes
one trace per step whose id is the one the job's records carry (``step_trace_id``).
"""

from __future__ import annotations

import hashlib
import shlex
import sys
from pathlib import Path
from typing import Any

from otel_valgen import contract
from tests.e2e.harness import REPO, Collector, Record, records_of_file, wait_for
from tests.support.process import run_in_a_terminal

JOB = f"{shlex.quote(sys.executable)} {shlex.quote(str(Path(__file__).with_name('agentic_job.py')))}"
# Per kept trajectory of agentic_job: its span, a chat span per assistant turn (3), an
# execute_tool span per tool call (2).
SPANS_PER_TRAJECTORY = 1 + 3 + 2


def step_trace_id(run_id: str, step: int) -> str:
    """A validation step's trace id (hex), as otel_valgen._tracing.derived_ids and the connector derive it."""
    digest = hashlib.sha256(f"valgen.trace\0{run_id}\0{step}".encode()).digest()
    return digest[:16].hex()


def chat_ui(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """GenAI messages as the connector sends them to chat views: a reasoning part becomes a text part."""
    return [
        {
            **message,
            "parts": [
                {"type": "text", "content": f"(thinking) {part['content']}"} if part["type"] == "reasoning" else part
                for part in message["parts"]
            ],
        }
        for message in messages
    ]


def with_finish_reasons(messages: list[dict[str, Any]], truncated: bool = False) -> list[dict[str, Any]]:
    """Output messages as the connector sends them: each with its ``finish_reason``.

    The connector's rule (collector/valgenspanconnector/README.md, "Finish reasons"): the message's
    own, else ``length`` for the last message of a truncated generation, else ``tool_call`` when
    its last part is a tool call, else ``stop``. ``messages`` is a whole output list, or a turn's.
    """
    out = []
    for index, message in enumerate(messages):
        parts = message.get("parts") or []
        if message.get("finish_reason"):
            reason = message["finish_reason"]
        elif truncated and index == len(messages) - 1:
            reason = "length"
        elif parts and isinstance(parts[-1], dict) and parts[-1].get("type") == "tool_call":
            reason = "tool_call"
        else:
            reason = "stop"
        out.append({**message, "finish_reason": reason})
    return out


def trajectory_index(record: Record) -> int:
    """Which trajectory of agentic_job a kept record is: its user prompt names it."""
    user = record.attributes[contract.GEN_AI_INPUT_MESSAGES][1]["parts"][0]["content"]
    return int(user.removeprefix("Compute (").split(" ")[0])


def run_agentic_steps(
    collector: Collector, run_id: str, k: int, steps: dict[int, range], env: dict[str, str] | None = None
) -> dict[int, list[Record]]:
    """Log each step's trajectories (step -> their indices) through ``collector``; the kept records by step, by rank."""
    job_env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(REPO),
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://{collector.http_endpoint}",
        "OTEL_VALGEN_RUN_ID": run_id,
        "OTEL_VALGEN_COUNT": str(k),
        **(env or {}),
    }
    commands = [
        f"{JOB} --step {step} --source trainer --first {indices.start} --count {len(indices)}"
        for step, indices in steps.items()
    ]
    run_in_a_terminal(" && ".join(commands), job_env)

    def summaries() -> int:
        return sum(r.event == contract.EVENT_STEP_SUMMARY for r in records_of_file(collector.file_path))

    wait_for(lambda: summaries() == len(steps), 60, "the steps' summaries in the collector's file")
    records = records_of_file(collector.file_path)
    return {
        step: sorted(
            (
                r
                for r in records
                if r.event == contract.EVENT_GENERATION
                and r.attributes[contract.STEP] == step
                and contract.RANK in r.attributes
            ),
            key=lambda r: r.attributes[contract.RANK],
        )
        for step in steps
    }
