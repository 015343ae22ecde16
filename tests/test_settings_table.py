"""The settings table is the one place a setting is declared: everything else agrees with it."""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import pytest

import otel_valgen as vg
from otel_valgen import _env
from otel_valgen import ray as vg_ray
from otel_valgen._settings import (
    DEFAULT_COUNT,
    DEFAULT_SEED,
    SETTINGS,
    Settings,
    markdown_table,
    resolve_settings,
    variable_names,
)
from tests.conftest import REPO

ARGUMENTS = {setting.argument for setting in SETTINGS if setting.argument}


def test_the_readme_table_is_generated_from_the_settings_table() -> None:
    """README's configuration table is exactly ``python -m otel_valgen._settings``."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    begin = text.index("<!-- settings-table: generated")
    table = text[text.index("\n", begin) + 1 : text.index("<!-- settings-table: end -->")]
    assert table == markdown_table()


def test_every_variable_the_library_names_is_in_the_table() -> None:
    """Each variable constant of ``otel_valgen._env`` is some setting's variable."""
    named = {value for key, value in vars(_env).items() if key.isupper() and key == value}
    assert named
    assert named - set(variable_names()) == set()


def test_configure_takes_exactly_the_table_arguments() -> None:
    """``configure()`` and ``resolve_settings()`` take one keyword per argument row, each a Settings field."""
    for function in (vg.configure, resolve_settings):
        assert set(inspect.signature(function).parameters) == ARGUMENTS, function
    assert {field.name for field in Settings.__dataclass_fields__.values()} >= ARGUMENTS


def test_configure_documents_each_argument_with_its_variable() -> None:
    """Each configure() argument's docstring entry names the variable the table gives it."""
    doc = inspect.getdoc(vg.configure) or ""
    entries = dict(re.findall(r"^    (\w+): (.*(?:\n        .*)*)", doc, re.MULTILINE))
    assert set(entries) == ARGUMENTS
    for setting in SETTINGS:
        if setting.argument:
            assert any(name in entries[setting.argument] for name in setting.variables), setting.argument


@pytest.mark.parametrize(
    "setting", [s for s in SETTINGS if not s.variables[0].endswith("*")], ids=lambda s: s.variables[0]
)
def test_runtime_env_forwards_the_rows_marked_forwarded(
    setting: object, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A variable set in the driver reaches Ray workers exactly when its row says forwarded."""
    from otel_valgen._settings import Setting

    assert isinstance(setting, Setting)
    name = setting.variables[-1]
    value = "true" if "INSECURE" in name or name.endswith(("PRESAMPLE", "SPOOL", "VERL")) else "7"
    if name == _env.OTEL_VALGEN_DIR:
        value = str(tmp_path / "sink")
    monkeypatch.setenv(name, value)
    forwarded = vg_ray.worker_env()
    assert (name in forwarded) is setting.forwarded


def test_the_shared_defaults_agree_everywhere() -> None:
    """The default k and seed: the library, collector.yaml and (in Go) the processor match testdata/defaults.json."""
    defaults = json.loads((REPO / "testdata" / "defaults.json").read_text(encoding="utf-8"))
    assert (defaults["count"], defaults["seed"]) == (DEFAULT_COUNT, DEFAULT_SEED)
    config = (REPO / "collector-config" / "collector.yaml").read_text(encoding="utf-8")
    assert f"count: ${{env:VALGEN_COUNT:-{defaults['count']}}}" in config
    assert f"seed: ${{env:VALGEN_SEED:-{defaults['seed']}}}" in config
    compose = (REPO / "docker" / "docker-compose.yml").read_text(encoding="utf-8")
    assert ":-64" not in compose  # compose passes the variable through; collector.yaml holds the default
