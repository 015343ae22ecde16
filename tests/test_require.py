"""Skips for what the project installs are failures under ``make test`` (VALGEN_REQUIRE_ALL=1)."""

from __future__ import annotations

import pytest

from tests.support.require import REQUIRE_ALL, require_module, require_or_skip


def test_a_missing_tool_skips_under_plain_pytest(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without VALGEN_REQUIRE_ALL a missing tool is a skip that names it."""
    monkeypatch.delenv(REQUIRE_ALL, raising=False)
    with pytest.raises(pytest.skip.Exception, match="frobnicator is absent"):
        require_or_skip(False, "frobnicator is absent")
    require_or_skip(True, "not reached")


def test_a_missing_tool_fails_under_require_all(monkeypatch: pytest.MonkeyPatch) -> None:
    """With VALGEN_REQUIRE_ALL=1 (make test) the same absence fails the test, naming it."""
    monkeypatch.setenv(REQUIRE_ALL, "1")
    with pytest.raises(pytest.fail.Exception, match="frobnicator is absent"):
        require_or_skip(False, "frobnicator is absent")
    with pytest.raises(pytest.fail.Exception, match="no_such_module_for_valgen"):
        require_module("no_such_module_for_valgen")
    assert require_module("json").dumps([]) == "[]"
