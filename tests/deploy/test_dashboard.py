"""The "Validation generations" dashboard: generated JSON committed, well-formed, provisioned, valid LogQL."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dashboards import DASHBOARDS
from dashboards.__main__ import main as generate
from dashboards.render import render
from tests.deploy import compose, harness, loki_model

GRAFANA = harness.REPO / "docker" / "grafana"
DASHBOARD_FILE = GRAFANA / "dashboards" / "validation-generations.json"
LOGQLCHECK = harness.TOOLS / "logqlcheck"
VARIABLE = re.compile(r"\$\{?(\w+)")
BUILTIN_VARIABLES = {"__range", "__dashboard", "__url_time_range", "__value"}


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    """The committed dashboard JSON."""
    loaded: dict[str, Any] = json.loads(DASHBOARD_FILE.read_text(encoding="utf-8"))
    return loaded


def _targets(dashboard: dict[str, Any]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            yield panel, target


def _columns(panel: dict[str, Any]) -> set[str]:
    organize = next(t for t in panel["transformations"] if t["id"] == "organize")
    return set(organize["options"]["includeByName"])


def _panel(dashboard: dict[str, Any], title_part: str) -> dict[str, Any]:
    return next(p for p in dashboard["panels"] if title_part in p["title"])


def test_committed_json_is_what_the_code_generates(tmp_path: Path) -> None:
    """Regenerating every dashboard gives the committed files byte for byte (`python -m dashboards --check`)."""
    for name, build in DASHBOARDS.items():
        assert (GRAFANA / "dashboards" / name).read_text(encoding="utf-8") == render(build()), (
            f"{name} is stale: run `python -m dashboards`"
        )
    assert generate(["--check"]) == 0
    (tmp_path / "validation-generations.json").write_text("{}\n", encoding="utf-8")
    assert generate(["--check", "--out", str(tmp_path)]) == 1, "--check must notice a stale file"


def test_layout_and_identity(dashboard: dict[str, Any]) -> None:
    """A stable uid and title, unique panel ids, panels on the 24-column grid without overlap."""
    assert (dashboard["uid"], dashboard["title"]) == ("valgen-generations", "Validation generations")
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for panel in dashboard["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] >= 0, panel["title"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        area = {(x, y) for x in range(pos["x"], pos["x"] + pos["w"]) for y in range(pos["y"], pos["y"] + pos["h"])}
        assert not cells & area, f"{panel['title']} overlaps another panel"
        cells |= area


def test_variables_for_service_run_and_step(dashboard: dict[str, Any]) -> None:
    """Variables: the Loki datasource, service (an index label), run, step and prompt; queries use no other."""
    variables = {variable["name"]: variable for variable in dashboard["templating"]["list"]}
    assert list(variables) == ["loki", "service", "run", "step", "sample"]
    assert variables["loki"]["type"] == "datasource"
    assert variables["service"]["query"]["label"] == "service_name"
    for name in ("run", "step", "sample"):
        assert variables[name]["type"] == "textbox", "structured metadata cannot be listed by Loki's label API"
    for panel, target in _targets(dashboard):
        used = set(VARIABLE.findall(target["expr"])) | set(VARIABLE.findall(panel["title"]))
        assert used <= set(variables) | BUILTIN_VARIABLES, panel["title"]
        assert target["datasource"] == {"type": "loki", "uid": "${loki}"}


def test_queries_select_streams_by_index_labels_only(dashboard: dict[str, Any]) -> None:
    """Every stream selector uses only labels that loki.yaml indexes; run and step are filtered as metadata."""
    index_labels = {loki_model.normalize(name) for name in loki_model.index_label_attributes()}
    for panel, target in _targets(dashboard):
        selectors = re.findall(r"\{([^}]*)\}", target["expr"].replace("${", "$("))
        assert selectors, panel["title"]
        for selector in selectors:
            names = set(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", selector))
            assert names <= index_labels, f"{panel['title']}: {names}"
        assert '| valgen_run_id=~"$run"' in target["expr"], panel["title"]


def test_panels_the_issue_asks_for(dashboard: dict[str, Any]) -> None:
    """Step table (input, output, score, data source), one prompt across steps, score and counts per step, trace ids."""
    step_table = _panel(dashboard, "Sampled generations of step")
    assert {"input", "output", "valgen_score", "valgen_data_source", "trace_id"} <= _columns(step_table)
    assert '| valgen_step=~"$step"' in step_table["targets"][0]["expr"]
    prompt = _panel(dashboard, "one prompt across steps")
    assert {"valgen_step", "output", "trace_id"} <= _columns(prompt)
    assert '| valgen_sample_id=~"$sample"' in prompt["targets"][0]["expr"]
    summaries = _panel(dashboard, "Steps: seen, kept, late, missing")
    assert {"valgen_seen", "valgen_kept", "valgen_late", "valgen_missing", "trace_id"} <= _columns(summaries)
    counts = _panel(dashboard, "Seen, kept, late, missing per step")
    unwrapped = [re.search(r"unwrap (\w+)", t["expr"])[1] for t in counts["targets"]]  # type: ignore[index]
    assert unwrapped == ["valgen_seen", "valgen_kept", "valgen_late", "valgen_missing"]
    score = _panel(dashboard, "score")
    assert "unwrap valgen_score" in score["targets"][0]["expr"]
    for panel in dashboard["panels"]:
        if panel["type"] == "table":
            assert "trace_id" in _columns(panel), f"{panel['title']} shows no trace id"


def _logqlcheck() -> Path:
    if not LOGQLCHECK.is_file():
        try:
            subprocess.run(
                ["bash", "tools/deploy/install-tools.sh"],
                cwd=harness.REPO,
                capture_output=True,
                timeout=240,
                check=True,
            )
        except (subprocess.SubprocessError, OSError) as error:
            pytest.skip(f"logqlcheck could not be built ({error}); run `{harness.INSTALL_TOOLS}`")
    return LOGQLCHECK


def _parse(queries: list[str]) -> list[dict[str, str]]:
    result = subprocess.run(
        [str(_logqlcheck())], input=json.dumps(queries), capture_output=True, text=True, timeout=60, check=True
    )
    parsed: list[dict[str, str]] = json.loads(result.stdout)
    return parsed


def test_every_query_parses_with_lokis_logql_parser(dashboard: dict[str, Any]) -> None:
    """Loki's own parser (pkg/logql/syntax v3.7.8) accepts every query with its variables filled in."""
    values = {"service": ".+", "run": "run-1", "step": "100", "sample": "abc/0", "__range": "1h"}
    queries = []
    for _, target in _targets(dashboard):
        expr = target["expr"]
        for name in sorted(values, key=len, reverse=True):
            expr = expr.replace(f"${name}", values[name])
        queries.append(expr)
    results = _parse([*queries, '{service_name=~".+"} | json input,'])
    errors = {r["query"]: r["error"] for r in results[:-1] if r["error"]}
    assert errors == {}
    assert results[-1]["error"], "the parser must reject a broken query for this check to mean anything"


def test_grafana_provisioning_matches_the_stack(dashboard: dict[str, Any]) -> None:
    """The provisioned datasource is the dashboard's default; the provider reads where compose mounts the JSON."""
    datasources = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "loki.yaml").read_text())["datasources"]
    assert [(d["type"], d["uid"], d["url"]) for d in datasources] == [("loki", "valgen-loki", "http://loki:3100")]
    loki_variable = next(v for v in dashboard["templating"]["list"] if v["name"] == "loki")
    assert loki_variable["current"]["value"] == "valgen-loki"
    providers = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "otel-valgen.yaml").read_text())["providers"]
    grafana = compose.resolved({"GF_SECURITY_ADMIN_PASSWORD": "x"})["services"]["grafana"]
    mounts = {volume.split(":")[1]: volume.split(":")[0] for volume in grafana["volumes"]}
    assert mounts[providers[0]["options"]["path"]] == "./grafana/dashboards"
    assert mounts["/etc/grafana/provisioning"] == "./grafana/provisioning"
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert Path(home).parent.as_posix() == providers[0]["options"]["path"]
    assert (GRAFANA / "dashboards" / Path(home).name).is_file()
