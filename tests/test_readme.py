"""The README's code blocks run as written, so the README cannot rot.

Every fenced block is tagged ``python``, ``sh`` or ``text``. Python and shell blocks run: the
blocks of one section in order, in one temporary folder, each in a fresh process, with what
the section's fixture adds (data the block names, checks of what it did). ``text`` blocks
(diagrams, formulas) are prose. A block that must not run is preceded by
``<!-- readme-test: skip: <why> -->``; that list stays short.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO

README = REPO / "README.md"
LANGUAGES = {"python", "sh", "text"}
SKIP = re.compile(r"<!-- readme-test: skip: (?P<why>.+?) -->")
MAX_SKIPPED = 2


@dataclass(frozen=True)
class Block:
    """One fenced code block of the README."""

    section: str
    language: str
    code: str
    line: int
    skip: str | None


def readme_blocks(text: str) -> list[Block]:
    """Every fenced block, with the heading it sits under and the skip marker right above it."""
    blocks: list[Block] = []
    section, lines = "", text.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.startswith("#"):
            section = line.lstrip("#").strip()
        elif line.startswith("```"):
            start, language = index, line[3:].strip()
            index += 1
            body: list[str] = []
            while not lines[index].startswith("```"):
                body.append(lines[index])
                index += 1
            marker = SKIP.fullmatch(lines[start - 1].strip()) if start else None
            skip = marker.group("why") if marker else None
            blocks.append(Block(section, language, "\n".join(body) + "\n", start + 1, skip))
        index += 1
    return blocks


BLOCKS = readme_blocks(README.read_text(encoding="utf-8"))
SECTIONS: dict[str, list[Block]] = defaultdict(list)
for _block in BLOCKS:
    if _block.language != "text" and _block.skip is None:
        SECTIONS[_block.section].append(_block)


@dataclass(frozen=True)
class Fixture:
    """What a section's blocks get: code run before (prelude) and after (epilogue) each language's blocks."""

    prelude: dict[str, str]
    epilogue: dict[str, str]


TRAINING_DATA = """\
inputs = [f"prompt {i}" for i in range(10)]
outputs = [f"answer {i}" for i in range(10)]
scores = [i / 10 for i in range(10)]
gts = [f"truth {i}" for i in range(10)]
uids = [f"uid-{i}" for i in range(10)]
srcs = ["math"] * 10
accs = [float(i % 2) for i in range(10)]
"""

RAY_WORKER_CHECK = """\
@ray.remote(num_cpus=0)
def _validate_in_a_worker():
    with vg.validation(step=1, source="worker"):
        vg.log_generations(["q"], ["a"], [1.0])
    return vg.current_settings().run_id

assert ray.get(_validate_in_a_worker.remote()) == wandb.run.id, "the worker's run id is not the wandb run's"
assert vg.current_settings().run_id == wandb.run.id
ray.shutdown()
"""

FIXTURES = {
    "Use it in a training job": Fixture(prelude={"python": TRAINING_DATA}, epilogue={}),
    "Ray": Fixture(prelude={}, epilogue={"python": RAY_WORKER_CHECK}),
    "Run identity": Fixture(prelude={}, epilogue={"sh": 'printf "WANDB_RUN_ID=%s" "$WANDB_RUN_ID"\n'}),
}


def _environment(folder: Path) -> dict[str, str]:
    """A clean environment: none of the caller's OTel or wandb settings, wandb offline, this checkout first."""
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "WANDB_", "RAY_"))}
    return {
        **keep,
        "PYTHONPATH": str(REPO),
        "WANDB_MODE": "offline",
        "WANDB_DIR": str(folder),
        "WANDB_SILENT": "true",
        "WANDB_DISABLE_GIT": "true",
    }


def _run(block: Block, fixture: Fixture, folder: Path) -> subprocess.CompletedProcess[str]:
    code = fixture.prelude.get(block.language, "") + block.code + fixture.epilogue.get(block.language, "")
    interpreter = [sys.executable, "-c"] if block.language == "python" else ["bash", "-euo", "pipefail", "-c"]
    command = [*interpreter, code]
    return subprocess.run(
        command, cwd=folder, env=_environment(folder), capture_output=True, text=True, timeout=240, check=False
    )


def test_every_block_is_tagged_and_few_are_skipped() -> None:
    """Each block says its language; a block is skipped only with a reason, and only a few are."""
    assert {block.language for block in BLOCKS} <= LANGUAGES, [(b.line, b.language) for b in BLOCKS]
    skipped = [block for block in BLOCKS if block.skip is not None]
    assert len(skipped) <= MAX_SKIPPED, [(block.line, block.skip) for block in skipped]
    assert all(block.language != "text" for block in skipped), "text blocks never run: no marker needed"
    assert {"Use it in a training job", "Ray", "Run identity"} <= set(SECTIONS)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("section", sorted(SECTIONS))
def test_the_readme_section_runs_as_written(section: str, tmp_path: Path) -> None:
    """The section's blocks run in order and exit 0; its fixture checks what they did."""
    fixture = FIXTURES.get(section, Fixture(prelude={}, epilogue={}))
    outputs = []
    for block in SECTIONS[section]:
        done = _run(block, fixture, tmp_path)
        assert done.returncode == 0, f"README.md:{block.line} ({block.language}):\n{done.stdout}\n{done.stderr}"
        outputs.append(done.stdout)
    if section == "Use it in a training job":
        shown = subprocess.run(
            [sys.executable, "-m", "otel_valgen.cli.main", "show", "valgen-data", "--format", "json"],
            cwd=tmp_path,
            env=_environment(tmp_path),
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        (step,) = [json.loads(line) for line in shown.stdout.splitlines()]
        assert (step["run_id"], step["step"], len(step["generations"])) == ("r1", 100, 10)
        assert {g["input"]: g["extra"]["acc"] for g in step["generations"]} == {
            f"prompt {i}": float(i % 2) for i in range(10)
        }
        assert (step["score_count"], step["score_mean"]) == (10, pytest.approx(0.45))
        assert "r1" in outputs[-1]  # the shell block printed the step's table
    if section == "Run identity":
        assert re.fullmatch(r"WANDB_RUN_ID=[0-9a-f]{12}", outputs[-1].strip().splitlines()[-1])


ROLLOUTS_DOC = REPO / "docs" / "rollouts.md"
TRY_IT = "Try it"  # docs/rollouts.md's section a newcomer runs as written


@pytest.mark.timeout(300)
def test_the_rollouts_try_it_runs_as_written(tmp_path: Path) -> None:
    """docs/rollouts.md's *Try it* runs as written (``_run``, as a README block) and does what the page says.

    Its Python block, then its shell block (``otel-valgen show valgen-data --kind rollout``), in one empty
    folder with no endpoint: both exit 0, the table names the run. Read back with ``show --format json``:
    steps 1 and 2, each keeping the same 2 of 6 prompts, each prompt with all 4 of its responses.
    """
    blocks = [block for block in readme_blocks(ROLLOUTS_DOC.read_text(encoding="utf-8")) if block.section == TRY_IT]
    assert [block.language for block in blocks] == ["python", "sh"], blocks
    outputs = []
    for block in blocks:
        done = _run(block, Fixture(prelude={}, epilogue={}), tmp_path)
        assert done.returncode == 0, f"docs/rollouts.md:{block.line} ({block.language}):\n{done.stdout}\n{done.stderr}"
        outputs.append(done.stdout)
    assert "try-rollouts" in outputs[-1]
    assert "prompts 2 of 6 · responses 8 of 24" in outputs[-1]
    shown = subprocess.run(
        [sys.executable, "-m", "otel_valgen.cli.main", "show", "valgen-data", "--kind", "rollout", "--format", "json"],
        cwd=tmp_path,
        env=_environment(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    steps = [json.loads(line) for line in shown.stdout.splitlines()]
    assert [(step["run_id"], step["step"], step["kind"]) for step in steps] == [
        ("try-rollouts", 1, "rollout"),
        ("try-rollouts", 2, "rollout"),
    ]
    kept_prompts = []
    for step in steps:
        assert (step["prompts_seen"], step["prompts_kept"], step["seen"], step["kept"]) == (6, 2, 24, 8)
        by_prompt: dict[str, list[str]] = defaultdict(list)
        for generation in step["generations"]:
            by_prompt[generation["input"]].append(generation["output"])
        assert len(by_prompt) == 2
        for prompt, answers in by_prompt.items():  # "What is p + p?": 2p twice (right), 2p+1 twice
            p = int(prompt.split()[2])
            assert sorted(answers) == sorted([str(2 * p), str(2 * p), str(2 * p + 1), str(2 * p + 1)]), prompt
        kept_prompts.append(set(by_prompt))
    assert kept_prompts[0] == kept_prompts[1]  # a prompt's key does not depend on the step
