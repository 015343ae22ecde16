"""Skips for a tool, binary or package the project installs: failures under ``make test``.

``make test`` installs everything the tests need (the dev extra, the collector build, Docker)
and runs pytest with ``VALGEN_REQUIRE_ALL=1`` (or ``pytest --require-all``). There a missing
one means the installation broke, so the test fails instead of skipping silently. Under a
plain ``pytest`` it stays a skip that says what is missing and how to get it.

Skips for what the project deliberately does not provide (``VALGEN_SKIP_DOCKER=1``, a system
without ``/dev/full``) do not go through here: they stay skips.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import NoReturn

import pytest

REQUIRE_ALL = "VALGEN_REQUIRE_ALL"


def require_all() -> bool:
    """Whether a missing tool the project installs fails the test (``VALGEN_REQUIRE_ALL=1``)."""
    return os.environ.get(REQUIRE_ALL) == "1"


def missing(reason: str) -> NoReturn:
    """Fail under ``VALGEN_REQUIRE_ALL=1``, else skip, naming what is missing."""
    if require_all():
        pytest.fail(f"{reason} ({REQUIRE_ALL}=1: make test installs it, so it must be there)", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def require_or_skip(condition: bool, reason: str) -> None:
    """Go on when ``condition`` holds; otherwise ``missing(reason)``."""
    if not condition:
        missing(reason)


def require_module(name: str, reason: str | None = None) -> ModuleType:
    """Import ``name``, an installed dependency of the tests; ``missing`` when it cannot be imported."""
    try:
        return importlib.import_module(name)
    except ImportError as error:
        missing(reason or f"{name} is not installed ({error}); pip install -e '.[dev]'")
