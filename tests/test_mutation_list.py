"""The mutation list follows the code: each snippet it breaks is in its file exactly once.

``tools/mutation_check.py`` runs by hand (about 10 minutes), so a snippet that the code moved
away from would only show when someone runs it; this keeps the list honest on every change.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _mutation_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mutation_check", ROOT / "tools" / "mutation_check.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their annotations through sys.modules
    spec.loader.exec_module(module)
    return module


_MODULE = _mutation_module()
_MUTATIONS = list(_MODULE.MUTATIONS)


def test_the_list_is_found() -> None:
    """The module's mutations are read, each under its own name."""
    assert len(_MUTATIONS) > 100
    assert len({mutation.name for mutation in _MUTATIONS}) == len(_MUTATIONS)


@pytest.mark.parametrize("mutation", _MUTATIONS, ids=lambda mutation: mutation.name)
def test_snippet_found_once(mutation: object) -> None:
    """Each mutation's original snippet is in its file exactly once, and the replacement differs."""
    text = (ROOT / mutation.file).read_text(encoding="utf-8")  # type: ignore[attr-defined]
    assert text.count(mutation.original) == 1, f"{mutation.file}: snippet not found exactly once"  # type: ignore[attr-defined]
    assert mutation.replacement != mutation.original  # type: ignore[attr-defined]
