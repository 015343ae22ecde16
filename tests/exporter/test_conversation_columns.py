"""The conversation column: written by the real wandb SDK (offline) and TensorBoard, read back from their files.

A step with a conversation (a kept record carrying ``gen_ai.input.messages`` /
``gen_ai.output.messages``) gets a ``conversation`` column; a text-only step keeps its columns.
wandb's cell is an HTML page (read from the run's media files and parsed); TensorBoard's text is
Markdown, turned into HTML by TensorBoard's own renderer, as its text dashboard shows it.
"""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from otel_valgen import contract
from otel_valgen.exporter.backends.tensorboard import TensorBoardBackend, TensorBoardConfig
from otel_valgen.exporter.ledger import Ledger
from otel_valgen.exporter.tables import ROLLOUT_COLUMNS, ROW_COLUMNS

from .conftest import (
    PROMPT_MESSAGES,
    ROLLOUT_KEY,
    TURNS,
    conversation_step,
    group_order,
    request,
    rollout,
    serve_requests,
    step_request,
    summary,
    wandb_backend,
)
from .tensorboard_files import read_texts
from .test_layouts import ROW_FIELDS_SENT, verl_columns
from .wandb_files import read_run

KEY = "val/generations"
ROLES = ["system", "user", "assistant", "tool #c1", "assistant"]  # the turns, in order, as labelled


class _Page(HTMLParser):
    """The role labels, the text shown, and the elements of an HTML page."""

    def __init__(self) -> None:
        super().__init__()
        self.roles: list[str] = []
        self.text: list[str] = []
        self.tags: list[str] = []
        self._in_role = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self._in_role = ("class", "role") in attrs

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._in_role:
            self.roles.append(data)
            self._in_role = False


def page(files: dict[str, Path], value: dict[str, Any]) -> _Page:
    """Parse the HTML file of a wandb Html cell (``files``: the table artifact's files by path)."""
    assert value["_type"] == "html-file"
    parsed = _Page()
    parsed.feed(files[value["path"]].read_text(encoding="utf-8"))
    return parsed


def assert_conversation_page(parsed: _Page) -> None:
    """The page shows every turn in order, the tool call with its arguments, the cut mark; markup stays text."""
    assert parsed.roles == ROLES
    shown = "".join(parsed.text)
    for needed in ("Use the calc tool.", "I should call calc.", '"expr": "2+2"', "calc", "**4** <b>done</b>"):
        assert needed in shown
    assert "<script>alert(1)</script> 4" in shown, "the tool result is shown as text"
    assert "cut to fit: 300000 bytes before the cut" in shown
    assert parsed.tags.count("b") == 1, "only the tool call's name is bold: the texts' tags are text"
    assert "script" not in parsed.tags


def test_wandb_rows_layout_gets_an_html_conversation_column_only_for_conversation_steps(wandb_dir: Path) -> None:
    """A conversation step's table has ``conversation`` after the row columns; a text-only step is unchanged."""
    serve_requests([wandb_backend("rows")], conversation_step("conv-r", 1), step_request("conv-r", 2, 2))
    files = read_run(wandb_dir, "conv-r")
    (table, media), (plain, _) = files.artifact_tables(KEY)
    assert table["columns"] == [*ROW_COLUMNS, "conversation", "attempt"]
    row, text_row = table["data"]
    assert row[ROW_COLUMNS.index("input")] == "[system] Use the calc tool.\n[user] 2+2? Answer in **bold**."
    assert text_row[ROW_COLUMNS.index("input")] == "q1"
    assert text_row[len(ROW_COLUMNS)] is None, "a generation without messages has no conversation"
    assert_conversation_page(page(media, row[len(ROW_COLUMNS)]))
    assert plain["columns"] == [*ROW_COLUMNS, "attempt"]
    assert plain["data"][0] == [2, "s000", "gsm8k", "trainer", "q0", "a0@2", "t0", 0.5, None, None, ""]
    assert [step for step, _ in files.tables(KEY)] == [1, 2]


def test_wandb_verl_layout_gets_a_conversation_column_per_sample(wandb_dir: Path) -> None:
    """In verl's wide table the conversation is ``conversation_<i>`` among the row fields, HTML cells."""
    serve_requests([wandb_backend("verl")], step_request("conv-v", 1, 2), conversation_step("conv-v", 2))
    (before, _), (after, media) = read_run(wandb_dir, "conv-v").artifact_tables(KEY)
    assert before["columns"] == verl_columns(2), "the text-only step as before"
    assert after["columns"] == verl_columns(2, tuple(sorted((*ROW_FIELDS_SENT, "conversation"))))
    start = after["columns"].index("conversation_1")
    step_one, step_two = after["data"]
    assert step_one[start : start + 2] == [None, None]
    assert step_two[start + 1] is None
    assert_conversation_page(page(media, step_two[start]))


def test_wandb_rollout_table_gets_the_conversation_column(wandb_dir: Path) -> None:
    """A rollout step whose responses are conversations: ``conversation`` after the rollout columns."""
    messages = {contract.GEN_AI_INPUT_MESSAGES: PROMPT_MESSAGES, contract.GEN_AI_OUTPUT_MESSAGES: TURNS}
    logs = [rollout("conv-ro", 3, p, i, rank=r, **messages) for r, (p, i) in enumerate(group_order(), 1)]
    closing = summary("conv-ro", 3, len(logs), seen=12, prompts=2)
    serve_requests([wandb_backend("rows")], request(*logs, closing, resource={"service.name": "t"}))
    ((table, media),) = read_run(wandb_dir, "conv-ro").artifact_tables(ROLLOUT_KEY)
    assert table["columns"] == [*ROLLOUT_COLUMNS, "conversation", "attempt"]
    for row in table["data"]:
        assert_conversation_page(page(media, row[len(ROLLOUT_COLUMNS)]))


def test_tensorboard_shows_the_turns_as_markdown_and_text_samples_as_before(tmp_path: Path) -> None:
    """The conversation sample's turns replace its one-line input and output; TensorBoard renders them safely."""
    from tensorboard.plugin_util import markdown_to_safe_html

    backend = TensorBoardBackend(TensorBoardConfig(root=str(tmp_path)), Ledger(None))
    resource = {"service.name": "t", "tensorboard.log_dir": "logs"}
    serve_requests([backend], conversation_step("conv-tb", 1, resource=resource))
    text = read_texts(tmp_path / "logs", KEY)[1]
    conversation, plain = text.split("### Sample 2\n")
    assert plain.startswith("**Input:** q1\n\n**Output:** a1@1\n\n**Score:** 0.5\n\n"), "a text sample as before"
    assert "**Input:**" not in conversation
    shown = markdown_to_safe_html(conversation)
    position = 0
    for label in ("[system]", "[user]", "[assistant]", "[tool #c1]", "[assistant]"):  # in this order
        position = shown.index(f"<strong>{label}</strong>", position) + 1
    assert "&lt;script&gt;alert(1)&lt;/script&gt; 4" in shown, "markup in a text is shown, not run"
    assert "<script>" not in shown
    assert "**4** &lt;b&gt;done&lt;/b&gt;" in shown, "a text reads as written"
    assert "```end" in shown, "a fence inside a text does not end its block"
    assert "<em>cut to fit: 300000 bytes before the cut</em>" in shown
    assert "<pre><code>{\n  &quot;expr&quot;: &quot;2+2&quot;\n}" in shown, "the tool call's arguments, indented"


def test_tensorboard_rollouts_show_the_prompt_once_and_each_responses_turns(tmp_path: Path) -> None:
    """A rollout step with conversations: each prompt's messages once, then each response's generated turns."""
    messages = {contract.GEN_AI_INPUT_MESSAGES: PROMPT_MESSAGES, contract.GEN_AI_OUTPUT_MESSAGES: TURNS}
    logs = [rollout("conv-tbr", 3, p, i, rank=r, **messages) for r, (p, i) in enumerate(group_order(), 1)]
    closing = summary("conv-tbr", 3, len(logs), seen=12, prompts=2)
    backend = TensorBoardBackend(TensorBoardConfig(root=str(tmp_path)), Ledger(None))
    serve_requests([backend], request(*logs, closing, resource={"service.name": "t", "tensorboard.log_dir": "r"}))
    text = read_texts(tmp_path / "r", ROLLOUT_KEY)[3]
    assert text.startswith("**Rollouts - Step 3**\n\n## Prompt 1: p1\n**Input:**\n\n**[system]**\n\n```text\nUse the")
    assert text.count("**[system]**") == 2, "each prompt's messages once"
    assert text.count("### Response p1/0\n**output:**\n\n**[assistant]**\n\n*thinking*\n\n") == 1
    assert text.count("**[tool \\#c1]**") == 4, "every response's turns"
    assert "conversation" not in text
    assert "**score:** 0.0" in text
