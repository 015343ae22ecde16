"""The trace UI overlays (collector-config/traces-*.yaml) as the built collector reads them.

`collector/validate.sh` (run by `make collector`) validates every shipped configuration; here it
runs again under pytest, and the overlays' own promises are checked: each one is in its list,
each fails closed without the list-append merge (the base's exporters are never silently
dropped), an endpoint without a default must be set, and Phoenix's connector (JSON messages)
merges beside the others' (structured messages).
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest
import yaml

from tests.deploy import harness

OVERLAYS = sorted(path.name for path in harness.CONFIG_DIR.glob("traces-*.yaml"))
VALIDATE_SH = harness.REPO / "collector" / "validate.sh"


def _validate(configs: list[str], env: dict[str, str], *flags: str) -> subprocess.CompletedProcess[str]:
    binary = harness.require_collector()
    args = [str(binary), "validate"]
    for config in configs:
        args += ["--config", str(harness.CONFIG_DIR / config)]
    return subprocess.run([*args, *flags], env=env, capture_output=True, text=True, timeout=60, check=False)


def test_there_is_an_overlay_per_trace_ui() -> None:
    """MLflow, Weave, Phoenix, Langfuse and Tempo each have theirs."""
    assert [f"traces-{ui}.yaml" for ui in ("langfuse", "mlflow", "phoenix", "tempo", "weave")] == OVERLAYS


def test_validate_sh_lists_every_shipped_config() -> None:
    """Every file of collector-config/ is validated by collector/validate.sh, each overlay on its own too."""
    lines = re.findall(r'^\s*"(collector-config/[^"]+)"\s*$', VALIDATE_SH.read_text(encoding="utf-8"), re.M)
    named = {path.split("/")[-1] for line in lines for path in line.split()}
    assert named == {path.name for path in harness.CONFIG_DIR.glob("*.yaml")}
    for overlay in OVERLAYS:
        assert f"collector-config/collector.yaml collector-config/{overlay}" in lines


def test_validate_sh_accepts_every_config() -> None:
    """`bash collector/validate.sh` passes: each of its lines is a configuration the collector accepts."""
    harness.require_collector()
    result = subprocess.run(["bash", str(VALIDATE_SH)], capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("validate.sh: ok") == len(
        re.findall(r"^\s*\"collector-config/", VALIDATE_SH.read_text(), re.M)
    )


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_fails_closed_without_the_list_append_merge(overlay: str) -> None:
    """Without the feature gate the overlay's exporters would replace the logs pipeline's: the collector refuses."""
    env = {**os.environ, "VALGEN_WEAVE_TRACES_ENDPOINT": "https://trace.example/otel/v1/traces"}
    with_gate = _validate(["collector.yaml", overlay], env, harness.MERGE_APPEND)
    assert with_gate.returncode == 0, with_gate.stdout + with_gate.stderr
    without = _validate(["collector.yaml", overlay], env)
    assert without.returncode != 0
    assert '"forward/loki" used as receiver in [logs/loki] pipeline but not used' in without.stderr


def test_weave_overlay_needs_its_endpoint() -> None:
    """Weave's endpoint is not on this machine, so it has no default: unset, the collector refuses to start."""
    env = {key: value for key, value in os.environ.items() if key != "VALGEN_WEAVE_TRACES_ENDPOINT"}
    result = _validate(["collector.yaml", "traces-weave.yaml"], env, harness.MERGE_APPEND)
    assert result.returncode != 0
    assert "otlp_http/weave: at least one endpoint must be specified" in result.stderr


def test_phoenix_overlay_has_a_connector_of_its_own() -> None:
    """Merged with MLflow's overlay, both connectors feed the logs pipeline: JSON messages for Phoenix only."""
    binary = harness.require_collector()
    args = [str(binary), "print-config", "--mode", "unredacted", harness.MERGE_APPEND]
    for config in ("collector.yaml", "traces-mlflow.yaml", "traces-phoenix.yaml"):
        args += ["--config", str(harness.CONFIG_DIR / config)]
    result = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    merged = yaml.safe_load(result.stdout)
    encodings = {
        name: config["message_encoding"] for name, config in merged["connectors"].items() if "valgen_spans" in name
    }
    assert encodings == {"valgen_spans": "structured", "valgen_spans/phoenix": "json"}
    pipelines = merged["service"]["pipelines"]
    assert {"valgen_spans", "valgen_spans/phoenix"} <= set(pipelines["logs"]["exporters"])
    assert pipelines["traces/mlflow"]["receivers"] == ["valgen_spans"]
    assert pipelines["traces/phoenix"]["receivers"] == ["valgen_spans/phoenix"]
