"""The compose stack as an operator starts it: valid, loopback-only, no default secrets.

No Docker engine runs here: the files are checked against the Compose Specification's JSON
schema and read with the specification's interpolation and merge rules (tests/deploy/compose.py).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.deploy import compose
from tests.deploy.compose import InterpolationError
from tests.support.require import require_module

REPO = Path(__file__).resolve().parents[2]
ENV = {"GF_SECURITY_ADMIN_PASSWORD": "s3cret-for-test", "VALGEN_AUTH_TOKEN": "t0ken-for-test"}
PINNED_TAG = re.compile(r"^[\w./-]+:v?\d+\.\d+\.\d+$")  # prom/prometheus tags are vX.Y.Z


def _models() -> list[tuple[str, dict[str, Any]]]:
    return [("plain", compose.resolved(ENV)), ("auth", compose.resolved(ENV, auth=True))]


@pytest.fixture(scope="module")
def validator() -> jsonschema.protocols.Validator:
    """A validator for the Compose Specification schema (skips without check-jsonschema)."""
    require_module("check_jsonschema", "check-jsonschema (pyproject dev extra) ships the compose schema")
    schema = compose.compose_schema()
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema)


@pytest.mark.parametrize("path", [compose.COMPOSE, compose.COMPOSE_AUTH], ids=lambda p: p.name)
def test_compose_files_follow_the_compose_specification(path: Path, validator: Any) -> None:
    """Each compose file, as written, validates against the Compose Specification schema."""
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(compose.load(path))]
    assert errors == []


@pytest.mark.parametrize(("name", "model"), _models(), ids=["plain", "auth"])
def test_interpolated_stack_follows_the_compose_specification(name: str, model: dict[str, Any], validator: Any) -> None:
    """The stack after interpolation (and with the auth overlay merged) is still valid."""
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(model)]
    assert errors == [], name


def test_interpolation_follows_the_specification() -> None:
    """The test helper substitutes as compose does (defaults, required values, $$)."""
    env = {"SET": "v", "EMPTY": ""}
    cases = {
        "${SET}": "v",
        "$SET/x": "v/x",
        "${UNSET:-d}": "d",
        "${EMPTY:-d}": "d",
        "${EMPTY-d}": "",
        "${SET:+alt}": "alt",
        "${UNSET:+alt}": "",
        "$${SET}": "${SET}",
        "${UNSET}": "",
    }
    assert {text: compose.interpolate(text, env) for text in cases} == cases
    with pytest.raises(InterpolationError, match="boom"):
        compose.interpolate("${EMPTY:?boom}", env)
    assert compose.interpolate("${EMPTY?boom}", env) == ""


def test_grafana_requires_an_admin_password_and_has_no_default() -> None:
    """Without GF_SECURITY_ADMIN_PASSWORD compose refuses to start; anonymous access and sign-up are off."""
    with pytest.raises(InterpolationError, match="GF_SECURITY_ADMIN_PASSWORD"):
        compose.resolved({})
    grafana = compose.resolved(ENV)["services"]["grafana"]["environment"]
    assert grafana["GF_SECURITY_ADMIN_PASSWORD"] == ENV["GF_SECURITY_ADMIN_PASSWORD"]
    assert grafana["GF_AUTH_ANONYMOUS_ENABLED"] == "false"
    assert grafana["GF_USERS_ALLOW_SIGN_UP"] == "false"


def test_auth_overlay_requires_a_token_and_adds_the_auth_config() -> None:
    """The auth overlay refuses to start without VALGEN_AUTH_TOKEN and merges auth.yaml after collector.yaml."""
    with pytest.raises(InterpolationError, match="VALGEN_AUTH_TOKEN"):
        compose.resolved({"GF_SECURITY_ADMIN_PASSWORD": "x"}, auth=True)
    collector = compose.resolved(ENV, auth=True)["services"]["collector"]
    assert collector["command"] == [
        "--config",
        "/etc/otelcol-valgen/collector.yaml",
        "--config",
        "/etc/otelcol-valgen/auth.yaml",
        "--feature-gates=confmap.enableMergeAppendOption",
    ]
    assert collector["environment"]["VALGEN_AUTH_TOKEN"] == ENV["VALGEN_AUTH_TOKEN"]
    assert collector["environment"]["VALGEN_OTLP_HTTP_ENDPOINT"] == "0.0.0.0:4318", "overlay must keep base env"


@pytest.mark.parametrize(("name", "model"), _models(), ids=["plain", "auth"])
def test_every_published_port_is_on_loopback(name: str, model: dict[str, Any]) -> None:
    """Ports are published on 127.0.0.1 only; the wandb exporter is not published at all."""
    published = {service: spec.get("ports", []) for service, spec in model["services"].items() if spec.get("ports")}
    assert set(published) == {"collector", "loki", "grafana"}
    for service, ports in published.items():
        for port in ports:
            assert isinstance(port, str), f"{service}: use the short string form with a host address"
            assert port.startswith("127.0.0.1:"), f"{service}: {port} is not bound to loopback"
    assert sorted(published["collector"]) == ["127.0.0.1:4317:4317", "127.0.0.1:4318:4318"]


def test_the_exporter_serves_its_metrics_on_the_compose_network_only() -> None:
    """The exporter service's --metrics-address listens in its container, exposed to the network, never published."""
    services = compose.resolved(ENV)["services"]
    exporters = [
        (name, spec)
        for name, spec in services.items()
        if any(str(arg).startswith("--metrics-address=") for arg in spec.get("command", []))
    ]
    assert len(exporters) == 1
    name, spec = exporters[0]
    assert "--metrics-address=0.0.0.0:4419" in spec["command"]
    assert "4419" in [str(port) for port in spec["expose"]]
    assert "ports" not in spec, f"{name} publishes no port"


def test_collector_listens_inside_its_container_and_reaches_the_services_by_name() -> None:
    """The collector listens on 0.0.0.0 in its container and exports to tracker-exporter and loki."""
    env = compose.resolved(ENV)["services"]["collector"]["environment"]
    assert env["VALGEN_OTLP_GRPC_ENDPOINT"] == "0.0.0.0:4317"
    assert env["VALGEN_OTLP_HTTP_ENDPOINT"] == "0.0.0.0:4318"
    assert env["VALGEN_TRACKER_EXPORTER_ENDPOINT"] == "tracker-exporter:4417"
    assert env["VALGEN_LOKI_OTLP_ENDPOINT"] == "http://loki:3100/otlp"


def test_the_deprecated_service_name_still_resolves_to_the_exporter() -> None:
    """`wandb-exporter`, the exporter service's former name, is its network alias; the volume keeps its name."""
    model = compose.resolved(ENV)
    services = model["services"]
    assert "wandb-exporter" not in services
    exporter = services["tracker-exporter"]
    assert exporter["networks"] == {"default": {"aliases": ["wandb-exporter"]}}
    assert "wandb-exporter:/var/lib/valgen-exporter" in exporter["volumes"]
    assert "wandb-exporter" in model["volumes"]
    collector = services["collector"]["environment"]
    assert "VALGEN_WANDB_EXPORTER_ENDPOINT" not in collector, "the collector is configured with the current name"


def test_state_is_kept_in_named_volumes() -> None:
    """The collector's queue, its file output and Loki's data are named volumes at the paths the configs use."""
    model = compose.resolved(ENV)
    services = model["services"]

    def mounts(service: str) -> dict[str, str]:
        out = {}
        for volume in services[service]["volumes"]:
            source, target = volume.split(":")[:2]
            out[target] = source
        return out

    collector_env = services["collector"]["environment"]
    collector = mounts("collector")
    assert collector[collector_env["VALGEN_STATE_DIR"]] == "collector-queue"
    assert collector[str(Path(collector_env["VALGEN_FILE_PATH"]).parent)] == "collector-files"
    assert mounts("loki")["/loki"] == "loki-data"
    assert mounts("prometheus")["/prometheus"] == "prometheus-data"
    assert {"collector-queue", "collector-files", "loki-data", "prometheus-data"} <= set(model["volumes"])
    for service, spec in services.items():
        for volume in spec.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):  # a bind mount of a file in this repository
                assert (compose.DOCKER / source).exists(), f"{service}: {source} does not exist"


def test_health_checks_and_start_order() -> None:
    """Every service has a health check; dependants wait for their dependencies to be healthy."""
    services = compose.resolved(ENV)["services"]
    for name, spec in services.items():
        assert spec.get("healthcheck", {}).get("test"), f"{name} has no health check"
    assert services["collector"]["depends_on"] == {
        "loki": {"condition": "service_healthy"},
        "tracker-exporter": {"condition": "service_healthy"},
    }
    assert services["grafana"]["depends_on"] == {
        "loki": {"condition": "service_healthy"},
        "prometheus": {"condition": "service_healthy"},
    }


def test_images_are_pinned_and_built_from_this_repository() -> None:
    """Third-party images carry an exact version tag; ours are built from docker/*.Dockerfile."""
    services = compose.resolved(ENV)["services"]
    for name, spec in services.items():
        assert PINNED_TAG.match(spec["image"]), f"{name}: {spec['image']} is not pinned to x.y.z"
        if "build" in spec:
            assert (REPO / spec["build"]["dockerfile"]).is_file()
            assert (compose.DOCKER / spec["build"]["context"]).resolve() == REPO


def test_wandb_key_comes_only_from_the_environment() -> None:
    """WANDB_API_KEY is passed through from the environment, empty by default, and no file holds a key."""
    raw = compose.load(compose.COMPOSE)["services"]["tracker-exporter"]
    assert raw["environment"]["WANDB_API_KEY"] == "${WANDB_API_KEY:-}"
    assert "env_file" not in raw
    assert "secrets" not in raw
    assert compose.resolved(ENV)["services"]["tracker-exporter"]["environment"]["WANDB_API_KEY"] == ""


def test_collector_mounts_the_shipped_configs() -> None:
    """The collector's --config files are the repository's collector-config/ files, mounted read-only."""
    for auth in (False, True):
        collector = compose.resolved(ENV, auth=auth)["services"]["collector"]
        assert "../collector-config:/etc/otelcol-valgen:ro" in collector["volumes"]
        for arg in collector["command"]:
            if arg.startswith("/etc/otelcol-valgen/"):
                assert (REPO / "collector-config" / Path(arg).name).is_file()
