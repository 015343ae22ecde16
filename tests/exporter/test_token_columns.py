"""Per-token data in the trackers' rollout tables: written by the real wandb SDK (offline) and TensorBoard, read back.

A rollout step whose kept responses carry per-token data gets the responses' figures as numbers
(``mismatch_mean_abs`` ...) and a ``tokens`` column: for wandb an HTML page (each token coloured
by its log-probability difference, masked tokens struck through, a tool's tokens dimmed, each
token's values on hover), for the trackers that show cells as text a line naming the tokens the
trainer and the engine disagree on most.
"""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np

from otel_valgen import contract, tokens
from otel_valgen.exporter.backends.tensorboard import TensorBoardBackend, TensorBoardConfig
from otel_valgen.exporter.ledger import Ledger
from otel_valgen.exporter.tables import ROLLOUT_COLUMNS
from otel_valgen.exporter.token_cells import MISMATCH_COLUMNS

from .conftest import ROLLOUT_KEY, group_order, request, rollout, serve_requests, summary, wandb_backend
from .tensorboard_files import read_texts
from .wandb_files import read_run

PIECES = ["The", " sum", " is", " <tool_call>", "calc(3+4)", " 7", ".", " So", " 7", "<b>x</b>"]


def _token_attributes(prompt: int, i: int) -> dict[str, Any]:
    """Response ``i`` of ``prompt``'s packed tokens and figures, as the library sends them."""
    trainer = np.array([-0.1, -0.5, -0.2, -1.0, -0.3, -0.9, -0.05, -0.7, -0.2, -0.4], dtype=np.float32)
    rollout_lp = trainer + np.array([0.001, 0.02, 0, 0.4, 0, 0, 0.002, 0.15, -1.3 - i, 0], dtype=np.float32)
    model = np.array([1, 1, 1, 1, 1, 0, 0, 1, 1, 1], dtype=bool)  # " 7." is the tool's
    masked = np.zeros(10, dtype=bool)
    masked[8] = True
    columns = {
        "ids": [np.arange(10) + 100 * prompt],
        "pieces": [PIECES],
        "rollout": [rollout_lp],
        "trainer": [trainer],
        "model": [model],
        "masked": [masked],
    }
    read = tokens.read_response(columns, 0)
    assert read is not None
    figures = tokens.response_figures(read)
    assert figures is not None
    attributes: dict[str, Any] = {contract.MISMATCH_PREFIX + name: value for name, value in figures.items()}
    attributes[contract.TOKENS] = tokens.encode(read, 1 << 20)[0]
    return attributes


class _Page(HTMLParser):
    """Each token span of a token page: its text, style, classes and hover title."""

    def __init__(self) -> None:
        super().__init__()
        self.spans: list[dict[str, str]] = []
        self.tags: list[str] = []
        self._open: dict[str, str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        values = {name: value or "" for name, value in attrs}
        self._open = values if tag == "span" and "title" in values else None

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self.spans.append({**self._open, "text": data})
            self._open = None


def test_wandb_rollout_table_gets_the_figures_and_a_coloured_token_page(wandb_dir: Path) -> None:
    """Figures as numbers; the tokens a page: coloured by difference, masked struck, a tool's dimmed."""
    logs = [rollout("tok-w", 3, p, i, rank=r, **_token_attributes(p, i)) for r, (p, i) in enumerate(group_order(), 1)]
    closing = summary("tok-w", 3, len(logs), seen=12, prompts=2)
    serve_requests([wandb_backend("rows")], request(*logs, closing, resource={"service.name": "t"}))
    ((table, media),) = read_run(wandb_dir, "tok-w").artifact_tables(ROLLOUT_KEY)
    assert table["columns"] == [*ROLLOUT_COLUMNS, *MISMATCH_COLUMNS, "tokens", "attempt"]
    at = len(ROLLOUT_COLUMNS)
    for row, (prompt, i) in zip(table["data"], group_order(), strict=True):
        want = _token_attributes(prompt, i)
        assert row[at : at + 4] == [want[contract.MISMATCH_PREFIX + name] for name in tokens.FIGURES]
        cell = row[at + 4]
        assert cell["_type"] == "html-file"
        page = _Page()
        page.feed(media[cell["path"]].read_text(encoding="utf-8"))
        assert [span["text"] for span in page.spans] == PIECES, "every token, in order, its text escaped"
        assert "b" not in page.tags, "a token's markup stays text"
        worst = page.spans[8]
        assert worst["class"] == "m", "masked: struck through (the page's style for class m)"
        assert worst["style"] == "color:#cf222e", "a difference of 1 or more is red"
        assert f"diff {-(-1.3 - i):+.4g}"[:6] in worst["title"]
        assert f"id {100 * prompt + 8}" in worst["title"]
        assert page.spans[5]["class"] == "t", "a tool's token is dimmed"
        assert "style" not in page.spans[2], "no difference, no colour"


def test_tensorboard_rollouts_name_the_most_disagreeing_tokens(tmp_path: Path) -> None:
    """Text trackers get a line per response: the tokens, the largest differences with their tokens, the masked."""
    logs = [rollout("tok-tb", 3, p, i, rank=r, **_token_attributes(p, i)) for r, (p, i) in enumerate(group_order(), 1)]
    closing = summary("tok-tb", 3, len(logs), seen=12, prompts=2)
    backend = TensorBoardBackend(TensorBoardConfig(root=str(tmp_path)), Ledger(None))
    serve_requests([backend], request(*logs, closing, resource={"service.name": "t", "tensorboard.log_dir": "r"}))
    text = read_texts(tmp_path / "r", ROLLOUT_KEY)[3]
    assert "**tokens:** 10 tokens · largest trainer - rollout: ' 7' #8 +1.3, ' <tool_call>' #3 -0.4" in text
    assert "· masked 1" in text
    shown = [float(line.split(":** ")[1]) for line in text.splitlines() if line.startswith("**mismatch_max_abs:**")]
    assert shown == [_token_attributes(p, i)[contract.MISMATCH_PREFIX + tokens.MAX_ABS] for p, i in group_order()]
