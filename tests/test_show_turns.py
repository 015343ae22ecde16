"""User story: a researcher compares one agentic trajectory across two steps, turn by turn.

``otel-valgen diff --steps`` and ``otel-valgen show --prompt`` read the embedded files as users run
them and say at which turn the conversations first part and which tool calls one step adds or drops.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import otel_valgen as vg
from otel_valgen.cli.turns import compare_turns

PROMPT = [{"role": "user", "content": "Find the population of Lyon, then double it."}]


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


STEP_1 = [
    {"role": "assistant", "content": "Searching.", "tool_calls": [_call("a", "search", {"q": "Lyon population"})]},
    {"role": "tool", "tool_call_id": "a", "content": "522,250"},
    {"role": "assistant", "content": "Doubling.", "tool_calls": [_call("b", "calc", {"expr": "522250*2"})]},
    {"role": "tool", "tool_call_id": "b", "content": "1044500"},
    {"role": "assistant", "content": "1,044,500"},
]
STEP_2 = [
    *STEP_1[:2],
    {"role": "assistant", "content": "It is about 1,044,500."},
]


def _otel_valgen(*args: str) -> str:
    """The installed command as a user runs it, in a terminal 200 columns wide."""
    script = Path(sys.executable).parent / "otel-valgen"
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([str(script), *args], capture_output=True, text=True, check=True, env=env).stdout


def _log(folder: Path) -> None:
    vg.configure(run_id="turns", count=4, directory=str(folder), endpoint="")
    for step, turns in ((1, STEP_1), (2, STEP_2)):
        vg.log_generations([PROMPT], [turns], [1.0], step=step, sample_ids=["lyon"])
    vg.shutdown()


def test_diff_says_where_two_steps_conversations_part(tmp_path: Path) -> None:
    """Step 2 skips the calculator: they part at turn 2, and step 2 drops calc({"expr": "522250*2"})."""
    _log(tmp_path)
    (diff,) = [
        json.loads(line)
        for line in _otel_valgen("diff", str(tmp_path), "--steps", "1", "2", "--format", "json").splitlines()
    ]
    (pair,) = diff["both"]
    assert pair["turns"] == {
        "turns_a": 3,
        "turns_b": 2,
        "first_difference": 2,
        "tool_calls_added": [],
        "tool_calls_dropped": ['calc({"expr": "522250*2"})'],
    }
    table = " ".join(_otel_valgen("diff", str(tmp_path), "--steps", "1", "2").split())
    assert "turns 3→2 · differs at turn 2" in table
    assert "[assistant] Searching. ⏎ → search(" in table, "a conversation's rendering, on one line, not read as markup"


def test_show_prompt_compares_each_step_with_the_previous(tmp_path: Path) -> None:
    """`show --prompt`: the first step has nothing to compare with; the second names the turn and the dropped call."""
    _log(tmp_path)
    rows = [
        json.loads(line)
        for line in _otel_valgen("show", str(tmp_path), "--prompt", "lyon", "--format", "json").splitlines()
    ]
    first, second = (row["generations"][0] for row in rows)
    assert first["turns_vs_previous"] is None
    assert second["turns_vs_previous"]["first_difference"] == 2
    assert second["turns_vs_previous"]["tool_calls_dropped"] == ['calc({"expr": "522250*2"})']
    assert second["output_messages"][-1]["parts"] == [{"type": "text", "content": "It is about 1,044,500."}]


def test_equal_conversations_and_added_calls() -> None:
    """Equal conversations do not differ; a call B makes beyond A's is added, counted with multiplicity."""
    a = [{"role": "assistant", "parts": [{"type": "tool_call", "id": "1", "name": "f", "arguments": {"x": 1}}]}]
    b = [
        {
            "role": "assistant",
            "parts": [*a[0]["parts"], {"type": "tool_call", "id": "2", "name": "f", "arguments": {"x": 1}}],
        }
    ]
    assert compare_turns(a, a).first_difference is None
    assert compare_turns(a, a).summary() == "same 1 turns"
    changed = compare_turns(a, b)
    assert (changed.first_difference, changed.added, changed.dropped) == (1, ('f({"x": 1})',), ())
    before = [{"role": "user", "parts": []}]
    assert compare_turns(before, [{"role": "system", "parts": []}]).first_difference == 0
