"""Configuration precedence (argument > environment > default) and bad values."""

from __future__ import annotations

import logging
import sys
import types

import pytest

from otel_valgen._settings import DEFAULT_COUNT, DEFAULT_FLUSH_TIMEOUT_S, resolve_settings


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
    """A library never fails on a bad variable: it warns and uses the default (false for a boolean)."""
    monkeypatch.setenv("OTEL_VALGEN_COUNT", "many")
    monkeypatch.setenv("OTEL_VALGEN_PRESAMPLE", "maybe")
    monkeypatch.setenv("OTEL_VALGEN_FLUSH_TIMEOUT", "nan")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "carrier-pigeon")
    with caplog.at_level(logging.WARNING, "otel_valgen"):
        settings = resolve_settings(run_id="r")
    assert (settings.count, settings.presample, settings.flush_timeout_s, settings.protocol) == (
        64,
        False,
        DEFAULT_FLUSH_TIMEOUT_S,
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


@pytest.mark.parametrize(
    ("variables", "protocol", "expected"),
    [
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318"}, None, "http://a:4318/v1/logs"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318/mycollector/"}, None, "http://a:4318/mycollector/v1/logs"),
        ({"OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": "http://b:4318/custom"}, None, "http://b:4318/custom"),
        ({"OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": "http://b:4318"}, None, "http://b:4318"),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318", "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": "http://b:1/x/"},
            None,
            "http://b:1/x/",
        ),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4317"}, "grpc", "http://a:4317"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318"}, "http/json", "http://a:4318/v1/logs"),
    ],
)
def test_endpoint_urls_follow_the_exporter_specification(
    monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], protocol: str | None, expected: str
) -> None:
    """OTLP/HTTP: the LOGS variable as it is, the generic one + v1/logs; gRPC: as it is."""
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert resolve_settings(run_id="r", protocol=protocol).endpoint == expected


def test_a_generic_endpoint_ending_in_v1_logs_is_still_a_base_url(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The specification appends v1/logs to OTEL_EXPORTER_OTLP_ENDPOINT whatever it ends with; a warning says so."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4318/v1/logs")
    with caplog.at_level(logging.WARNING, "otel_valgen"):
        assert resolve_settings(run_id="r").endpoint == "http://a:4318/v1/logs/v1/logs"
    assert "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT" in caplog.text


@pytest.mark.parametrize(
    ("raw", "expected"), [("http/json", "http/json"), ("HTTP/JSON", "http/json"), ("GRPC", "grpc")]
)
def test_every_protocol_of_the_specification_is_supported(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, raw: str, expected: str
) -> None:
    """grpc, http/protobuf and http/json are kept (case-insensitive, as enums are), without a warning."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_LOGS_PROTOCOL", raw)
    with caplog.at_level(logging.WARNING, "otel_valgen"):
        assert resolve_settings(run_id="r").protocol == expected
    assert caplog.text == ""


@pytest.mark.parametrize(
    ("raw", "expected", "warned"),
    [
        ("true", True, False),
        ("TRUE", True, False),
        (" True ", True, False),
        ("false", False, False),
        ("FALSE", False, False),
        ("1", False, True),
        ("yes", False, True),
        ("on", False, True),
        ("0", False, True),
        ("", None, False),  # empty is unset: the setting's default
    ],
)
@pytest.mark.parametrize("name", ["OTEL_VALGEN_PRESAMPLE", "OTEL_VALGEN_SPOOL", "OTEL_VALGEN_VERL"])
def test_boolean_variables_accept_only_true_and_false(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    name: str,
    raw: str,
    expected: bool | None,
    warned: bool,
) -> None:
    """Only "true" (any case) is true; any other value but "false" is false with a warning; every boolean alike."""
    from otel_valgen.integrations import verl

    monkeypatch.setenv(name, raw)
    default = True  # all three default to on
    with caplog.at_level(logging.WARNING, "otel_valgen"):
        if name == "OTEL_VALGEN_VERL":
            value = verl.install()
        else:
            settings = resolve_settings(run_id="r")
            value = settings.presample if name == "OTEL_VALGEN_PRESAMPLE" else settings.spool
    assert value is (default if expected is None else expected)
    assert (name in caplog.text) is warned


def test_transport_variables_signal_specific_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """Headers, certificate files, compression and timeout: each LOGS variable wins over its generic form."""
    for generic, specific, bad, good in [
        ("HEADERS", "LOGS_HEADERS", "a=1", "Authorization=Bearer%20t,x=y"),
        ("CERTIFICATE", "LOGS_CERTIFICATE", "/wrong.pem", "/ca.pem"),
        ("CLIENT_CERTIFICATE", "LOGS_CLIENT_CERTIFICATE", "/wrong.crt", "/client.crt"),
        ("CLIENT_KEY", "LOGS_CLIENT_KEY", "/wrong.key", "/client.key"),
        ("COMPRESSION", "LOGS_COMPRESSION", "none", "GZIP"),
        ("TIMEOUT", "LOGS_TIMEOUT", "30", "2.5"),
    ]:
        monkeypatch.setenv(f"OTEL_EXPORTER_OTLP_{generic}", bad)
        monkeypatch.setenv(f"OTEL_EXPORTER_OTLP_{specific}", good)
    transport = resolve_settings(run_id="r").transport
    assert transport.headers == {"authorization": "Bearer t", "x": "y"}
    assert (transport.certificate_file, transport.client_certificate_file, transport.client_key_file) == (
        "/ca.pem",
        "/client.crt",
        "/client.key",
    )
    assert (transport.compression, transport.timeout_s) == ("gzip", 2.5)
    assert "Bearer" not in repr(transport)  # credentials stay out of logged settings


def test_bad_transport_values_warn_and_fall_back(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An unknown compression sends uncompressed; a bad timeout is the 10 s default; both warn."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "brotli")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_LOGS_TIMEOUT", "-1")
    with caplog.at_level(logging.WARNING, "otel_valgen"):
        transport = resolve_settings(run_id="r").transport
    assert (transport.compression, transport.timeout_s) == ("none", 10.0)
    assert "brotli" in caplog.text
    assert "OTEL_EXPORTER_OTLP_LOGS_TIMEOUT" in caplog.text


def test_run_id_precedence_without_a_wandb_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """OTEL_VALGEN_RUN_ID > WANDB_RUN_ID (with WANDB_PROJECT/ENTITY as resource) > the driver's default > generated."""
    monkeypatch.setitem(sys.modules, "wandb", types.ModuleType("wandb"))  # imported, no run
    monkeypatch.setenv("OTEL_VALGEN_DEFAULT_RUN_ID", "drivers")
    assert (resolve_settings().run_id, resolve_settings().run_id_origin) == ("drivers", "default")
    monkeypatch.setenv("WANDB_RUN_ID", "wb-env")
    monkeypatch.setenv("WANDB_PROJECT", "proj")
    settings = resolve_settings()
    assert (settings.run_id, settings.run_id_origin) == ("wb-env", "wandb_environment")
    assert settings.resource_attributes == {"wandb.project": "proj", "wandb.run_id": "wb-env"}
    monkeypatch.setenv("OTEL_VALGEN_RUN_ID", "explicit")
    assert (resolve_settings().run_id, resolve_settings().run_id_origin) == ("explicit", "environment")
