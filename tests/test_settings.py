"""Configuration precedence (argument > environment > default) and bad values."""

from __future__ import annotations

import logging
import sys
import types

import pytest

from otel_valgen._settings import DEFAULT_COUNT, resolve_settings


def test_defaults() -> None:
    """With nothing set: k=64, seed 42, presampling on, embedded sink."""
    settings = resolve_settings(run_id="r")
    assert (settings.count, settings.seed, settings.presample, settings.embedded) == (DEFAULT_COUNT, 42, True, True)
    assert settings.protocol == "http/protobuf"


def test_argument_beats_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """An argument wins over its environment variable, which wins over the default."""
    monkeypatch.setenv("OTEL_VALGEN_COUNT", "10")
    monkeypatch.setenv("OTEL_VALGEN_SEED", "9")
    monkeypatch.setenv("OTEL_VALGEN_PRESAMPLE", "false")
    settings = resolve_settings(run_id="r", count=3)
    assert (settings.count, settings.seed, settings.presample) == (3, 9, False)


def test_bad_environment_values_warn_and_fall_back(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A library never fails on a bad variable: it warns and uses the default."""
    monkeypatch.setenv("OTEL_VALGEN_COUNT", "many")
    monkeypatch.setenv("OTEL_VALGEN_PRESAMPLE", "maybe")
    monkeypatch.setenv("OTEL_VALGEN_FLUSH_TIMEOUT", "nan")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "carrier-pigeon")
    with caplog.at_level(logging.WARNING, "otel_valgen"):
        settings = resolve_settings(run_id="r")
    assert (settings.count, settings.presample, settings.flush_timeout_s, settings.protocol) == (
        64,
        True,
        10.0,
        "http/protobuf",
    )
    for name in ("OTEL_VALGEN_COUNT", "OTEL_VALGEN_PRESAMPLE", "OTEL_VALGEN_FLUSH_TIMEOUT", "carrier-pigeon"):
        assert name in caplog.text


def test_run_id_falls_back_to_the_wandb_run_then_a_generated_id(monkeypatch: pytest.MonkeyPatch) -> None:
    """No run id: the active wandb run's id (and its project/entity as resource); else a generated id."""
    fake_wandb = types.ModuleType("wandb")
    fake_wandb.run = types.SimpleNamespace(id="wb123", project="proj", entity="team")  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "wandb", fake_wandb)
    settings = resolve_settings()
    assert (settings.run_id, settings.run_id_origin) == ("wb123", "wandb")
    assert settings.resource_attributes == {"wandb.project": "proj", "wandb.entity": "team", "wandb.run_id": "wb123"}
    monkeypatch.setitem(sys.modules, "wandb", types.ModuleType("wandb"))
    generated = resolve_settings()
    assert generated.run_id_origin == "generated"
    assert generated.run_id.startswith("valgen-")


def test_signal_specific_endpoint_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    """OTEL_EXPORTER_OTLP_LOGS_ENDPOINT is preferred over OTEL_EXPORTER_OTLP_ENDPOINT."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4318")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", "http://b:4318/v1/logs")
    assert resolve_settings(run_id="r").endpoint == "http://b:4318/v1/logs"
    assert resolve_settings(run_id="r", endpoint="").endpoint is None
