"""The "Trajectory, turn by turn" panel: one kept generation's conversation, as Grafana's logs panel shows it.

Its query runs over entries as Loki stores a conversation record (tests/deploy/loki_model.py: the
body's rendering is the line, the GenAI messages are structured metadata as JSON), with our
evaluator of the LogQL subset, ``line_format`` included; test_loki.py sends one through the collector.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from dashboards import trajectory
from dashboards import validation_generations as vgd
from otel_valgen import contract
from otel_valgen.conversations import render, to_messages
from tests.deploy import harness, logql_subset, loki_model
from tests.deploy.loki_query import substitute

PROMPT = [{"role": "user", "content": "Find <b>x</b>."}]
TURNS = [
    {
        "role": "assistant",
        "reasoning_content": "search",
        "tool_calls": [{"id": "s1", "type": "function", "function": {"name": "search", "arguments": '{"q": "x"}'}}],
    },
    {"role": "tool", "tool_call_id": "s1", "content": "x = 3"},
    {"role": "assistant", "content": "x is 3"},
]


def _entry(step: int, sample_id: str, rank: int | None, kind: str = contract.KIND_VALIDATION) -> loki_model.Entry:
    """A record of run r at ``step`` holding the conversation, as Loki stores it; rank None: not kept."""
    given, produced = to_messages(PROMPT).messages, to_messages(TURNS).messages
    metadata = {"valgen_run_id": "r", "valgen_step": str(step), "valgen_sample_id": sample_id, "valgen_kind": kind}
    metadata |= {"gen_ai_input_messages": json.dumps(given), "gen_ai_output_messages": json.dumps(produced)}
    metadata |= {"valgen_rank": str(rank)} if rank is not None else {"valgen_late": "true"}
    line = json.dumps({"input": render(given), "output": render(produced), "ground_truth": "3"})
    return loki_model.Entry({"service_name": "svc"}, metadata, line)


ENTRIES = [
    _entry(100, "p1/0@ab12", 1),
    _entry(100, "p2/0@ab12", 2),
    _entry(200, "p1/0@cd34", 1, contract.KIND_ROLLOUT),
    _entry(300, "p1/0@ef56", None),  # late: not kept
]
SHOWN = (
    "[user] Find <b>x</b>.\n\n--- generated ---\n"
    '[assistant] (thinking) search\n→ search({"q": "x"}) #s1\n[tool #s1] x = 3\n[assistant] x is 3'
)


def _lines(trajectory_id: str, step: str = ".+") -> list[str]:
    values = {"service": ".+", "run": "r", "step": step, "trajectory": trajectory_id}
    return logql_subset.lines(substitute(vgd.Q_TRAJECTORY, **values), ENTRIES)


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    """The committed dashboard JSON."""
    loaded: dict[str, Any] = json.loads(
        (harness.REPO / "docker/grafana/dashboards/validation-generations.json").read_text()
    )
    return loaded


def test_a_logs_panel_of_the_trajectory_query(dashboard: dict[str, Any]) -> None:
    """A core logs panel, lines wrapped (a line's breaks are its turns), details on, oldest first."""
    (panel,) = [p for p in dashboard["panels"] if p["title"] == trajectory.TITLE]
    assert panel["type"] == "logs"
    assert (panel["options"]["wrapLogMessage"], panel["options"]["enableLogDetails"]) == (True, True)
    assert panel["options"]["sortOrder"] == "Ascending"
    assert [t["expr"] for t in panel["targets"]] == [vgd.Q_TRAJECTORY]


@pytest.mark.parametrize(
    ("picked", "step", "shown"),
    [("p1/0@ab12", ".+", [SHOWN]), ("p1/0", ".+", [SHOWN, SHOWN]), ("p1/0", "100", [SHOWN]), ("", ".+", [])],
)
def test_the_panel_shows_the_picked_trajectory_turn_by_turn(picked: str, step: str, shown: list[str]) -> None:
    """One kept record per pick (a tagged id; an untagged one at each step, of either kind); never a late one."""
    assert _lines(picked, step) == shown


def test_sample_ids_link_to_the_trajectory(dashboard: dict[str, Any]) -> None:
    """Each table's sample id column has a link that sets the trajectory variable to the row's own id."""
    for title in ("Sampled generations of step", "Outputs for one prompt across steps", "Rollout prompts of step"):
        panel = next(p for p in dashboard["panels"] if p["title"].startswith(title))
        links = [
            link
            for override in panel["fieldConfig"]["overrides"]
            if "valgen_sample_id" in override["matcher"]["options"]
            for prop in override["properties"]
            if prop["id"] == "links"
            for link in prop["value"]
        ]
        urls = [link["url"] for link in links if "var-trajectory=" in link["url"]]
        assert len(urls) == 1, title
        assert urls[0].endswith("&var-trajectory=${__value.raw:percentencode}"), "the id with its tag: one record"


def test_the_checks_notice_a_broken_line_format() -> None:
    """A template naming a field the query does not parse, or an action outside the subset, fails the checks."""
    typo = vgd.Q_TRAJECTORY.replace("{{.output}}", "{{.outptu}}")
    names = logql_subset.names(logql_subset.parse(substitute(typo, trajectory="x", step="1", run="r", service=".+")))
    assert "outptu" in names.fields, "a misspelt field is not among the parsed body fields"
    with pytest.raises(logql_subset.LogQLError):
        logql_subset.parse(vgd.Q_TRAJECTORY.replace("{{.output}}", "{{ .output | ToUpper }}"))
