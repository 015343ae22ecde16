"""Fixtures for tests against the real verl 0.9.1 (installed by the dev extra, verl-test)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.verl import harness


@dataclass
class VerlFiles:
    """A tiny local tokenizer directory and the train/validation parquet files."""

    root: Path
    tokenizer_dir: Path
    tokenizer: Any
    train_path: str
    val_path: str


@pytest.fixture(scope="module")
def verl_files(tmp_path_factory: pytest.TempPathFactory) -> VerlFiles:
    """Tokenizer and 6 validation prompts, shared by the tests of a module."""
    root = tmp_path_factory.mktemp("verl")
    tokenizer = harness.make_tokenizer(root / "tokenizer")
    train_path, val_path = harness.make_dataset(root / "data", 6)
    return VerlFiles(root, root / "tokenizer", tokenizer, train_path, val_path)
