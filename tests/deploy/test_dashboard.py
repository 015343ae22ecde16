"""The "Validation generations" dashboard: generated JSON committed, well-formed, provisioned, valid LogQL.

Its queries run over Loki-model entries of both kinds (validation, also without valgen_kind as
older releases sent it, and training rollouts): each panel shows only its own kind.

The dashboard is built with grafana-foundation-sdk; Grafana itself does not run here, so its
rendering is not checked. The queries are parsed by our LogQL-subset parser and checked to
refer only to names that Loki's documented OTLP mapping produces (tests/deploy/loki_model.py).
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from grafana_foundation_sdk.cog.plugins import register_default_plugins
from grafana_foundation_sdk.models.dashboard import Dashboard

from dashboards import DASHBOARDS
from dashboards import validation_generations as vgd
from dashboards.__main__ import main as generate
from dashboards.render import render
from otel_valgen import contract, tokens
from otel_valgen.sampling import split_sample_id, untagged
from tests.deploy import compose, grafana_table, harness, logql_subset, loki_model
from tests.deploy.loki_query import substitute

GRAFANA = harness.REPO / "docker" / "grafana"
DASHBOARD_FILE = GRAFANA / "dashboards" / "validation-generations.json"
VARIABLE = re.compile(r"\$\{?(\w+)")
BUILTIN_VARIABLES = {"__range", "__dashboard", "__url_time_range", "__value"}
ABSENT = object()


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    """The committed dashboard JSON."""
    loaded: dict[str, Any] = json.loads(DASHBOARD_FILE.read_text(encoding="utf-8"))
    return loaded


def _columns(panel: dict[str, Any]) -> set[str]:
    return grafana_table.kept_columns(panel)


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
    """Variables: the Loki datasource, service (a label), run, step, prompt, data source, trajectory, Prometheus."""
    variables = {variable["name"]: variable for variable in dashboard["templating"]["list"]}
    assert list(variables) == ["loki", "service", "run", "step", "sample", "data_source", "trajectory", "prometheus"]
    assert variables["prometheus"]["type"] == "datasource"
    assert variables["loki"]["type"] == "datasource"
    assert variables["service"]["query"]["label"] == "service_name"
    assert variables["data_source"]["current"]["value"] == ".*", "by default, generations without one show too"
    assert variables["trajectory"]["current"]["value"] == "", "no trajectory until one is picked"
    for name in ("run", "step", "sample", "data_source", "trajectory"):
        assert variables[name]["type"] == "textbox", "structured metadata cannot be listed by Loki's label API"
    for panel, target in harness.loki_targets(dashboard):
        used = set(VARIABLE.findall(target["expr"])) | set(VARIABLE.findall(panel["title"]))
        assert used <= set(variables) | BUILTIN_VARIABLES, panel["title"]
        assert target["datasource"] == {"type": "loki", "uid": "${loki}"}


def test_queries_select_streams_by_index_labels_only(dashboard: dict[str, Any]) -> None:
    """Every stream selector uses only labels that loki.yaml indexes; run and step are filtered as metadata."""
    index_labels = {loki_model.normalize(name) for name in loki_model.index_label_attributes()}
    for panel, target in harness.loki_targets(dashboard):
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
    assert {"valgen_step", "valgen_kind", "valgen_score", "output", "trace_id"} <= _columns(prompt)
    assert '| valgen_sample_id=~"$sample(/[0-9]+)?(@[0-9a-f]*)?"' in prompt["targets"][0]["expr"]
    (sample_column,) = [
        o for o in step_table["fieldConfig"]["overrides"] if "valgen_sample_id" in o["matcher"]["options"]
    ]
    properties = {p["id"]: p["value"] for p in sample_column["properties"]}
    (mapping,) = properties["mappings"]  # the table shows <prompt>/<i>, and links to it, not one part's id
    assert (
        re.sub(
            mapping["options"]["pattern"], mapping["options"]["result"]["text"].replace("$", "\\"), "ab/0@5f2e9c1a7b3d"
        )
        == "ab/0"
    )
    assert "var-sample=${__value.text:percentencode}" in properties["links"][0]["url"]
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


def test_the_generations_table_shows_every_extra_column(dashboard: dict[str, Any]) -> None:
    """valgen_extra_<name> metadata becomes a column <name> after the fixed ones; other metadata stays hidden."""
    row = dict.fromkeys(vgd.GENERATION_COLUMNS, "x")
    row |= {"valgen_extra_acc": "1", "valgen_extra_format_reward": "0.5", "valgen_seed": "42"}
    row |= {"service_instance_id": "i", "valgen_extra_": "no name", "xvalgen_extra_acc": "not an extra"}
    generations = _panel(dashboard, "Sampled generations of step")
    headers = grafana_table.columns(generations, [row])
    assert headers == [*vgd.GENERATION_COLUMNS.values(), "acc", "format_reward"]
    without_extras = {name: value for name, value in row.items() if "extra" not in name}
    assert grafana_table.columns(generations, [without_extras]) == list(vgd.GENERATION_COLUMNS.values())
    # A job that sends no response sizes (only verl's rows have them) gets no empty size columns.
    without_sizes = {name: value for name, value in without_extras.items() if name not in vgd.GENERATION_OPTIONAL}
    assert grafana_table.columns(generations, [without_sizes]) == [
        label for name, label in vgd.GENERATION_COLUMNS.items() if name not in vgd.GENERATION_OPTIONAL
    ]
    rollouts = _panel(dashboard, "Rollout prompts of step")
    for panel in dashboard["panels"]:
        if panel["type"] == "table" and panel not in (generations, rollouts):
            assert not {"acc", "format_reward", "valgen_extra_acc"} & set(grafana_table.columns(panel, [row]))


def test_the_table_model_notices_a_broken_extra_pattern(dashboard: dict[str, Any]) -> None:
    """The check above can fail: an unanchored-looking typo in the pattern or the rename shows."""
    generations = json.loads(json.dumps(_panel(dashboard, "Sampled generations of step")))
    row = {"valgen_extra_acc": "1", "input": "q"}
    for transformation in generations["transformations"]:
        if transformation["id"] == "filterFieldsByName":
            transformation["options"]["include"]["pattern"] = "valgen_extra_"
    assert "acc" not in grafana_table.columns(generations, [row])


def test_step_summaries_show_the_score_statistics(dashboard: dict[str, Any]) -> None:
    """The steps table shows the summary's scored count and mean score; the mean score chart adds it per step."""
    summaries = _panel(dashboard, "Steps: seen, kept, late, missing")
    assert {"valgen_score_count", "valgen_score_mean"} <= _columns(summaries)
    chart = _panel(dashboard, "Mean score per step")
    assert [re.search(r"unwrap (\w+)", t["expr"])[1] for t in chart["targets"]] == [  # type: ignore[index]
        "valgen_score",
        "valgen_score_mean",
    ]


# Values a user could give the variables (Grafana substitutes them before Loki sees the query).
VALUES = {"service": ".+", "run": "run-1", "step": "100", "sample": "abc/0", "data_source": ".*", "trajectory": "abc/0"}


def _queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, query with the variables filled in) of every target."""
    return [(panel["title"], substitute(target["expr"], **VALUES)) for panel, target in harness.loki_targets(dashboard)]


def _record_attributes() -> set[str]:
    """Every record attribute key of the wire contract (otel_valgen.contract), maps' keys as Loki flattens them.

    Of the maps, the ones the dashboard reads: a kept response's ``valgen.mismatch.<figure>`` and
    a rollout summary's ``valgen.mismatch`` figures (``<figure>.<mean|p50|p90|p99|max>``).
    """
    plain = {
        value
        for name, value in vars(contract).items()
        if name.isupper() and not name.startswith("EVENT_") and isinstance(value, str) and value.startswith("valgen.")
    }
    figures = {contract.MISMATCH_PREFIX + figure for figure in (*tokens.FIGURES, tokens.TOKENS)}
    suffixes = (".mean", ".max", *(suffix for suffix, _ in tokens.QUANTILES))
    flattened = {f"{contract.MISMATCH}_{figure}{suffix}" for figure in tokens.FIGURES for suffix in suffixes}
    return plain | figures | flattened


def test_every_query_parses_with_our_logql_subset_parser(dashboard: dict[str, Any]) -> None:
    """Each query, with its variables filled in, is LogQL of the subset our evaluator runs."""
    for title, query in _queries(dashboard):
        try:
            logql_subset.parse(query)
        except logql_subset.LogQLError as error:
            pytest.fail(f"{title}: {error}")


@pytest.mark.parametrize(
    ("correct", "typo"),
    [
        ("| json ", "| jsn "),
        ("}", ""),
        ("| unwrap ", "| unwarp "),
        ("=~", "~="),
        ("input, output", "input,, output"),
        ('"', "'"),
        ("[1h]", "[1h"),
        ("))", ")))"),
        ('"abc/0(', '"abc/(0('),
    ],
)
def test_the_parser_rejects_a_typo_in_a_dashboard_query(dashboard: dict[str, Any], correct: str, typo: str) -> None:
    """Every query broken by one typo no longer parses, so the check above can fail."""
    broken = [query.replace(correct, typo, 1) for _, query in _queries(dashboard) if correct in query]
    assert broken, f"no query contains {correct!r}"
    for query in broken:
        with pytest.raises(logql_subset.LogQLError):
            logql_subset.parse(query)


def test_queries_refer_only_to_names_lokis_mapping_produces(dashboard: dict[str, Any]) -> None:
    """Stream selectors use index labels; filters, unwraps and groupings use stored names or parsed body fields.

    The stored names are what loki_model's documented mapping makes of the contract's record
    attributes and the log record's fields; the body fields are the generation body's keys.
    """
    index_labels = {loki_model.normalize(name) for name in loki_model.index_label_attributes()}
    stored = {loki_model.normalize(name) for name in _record_attributes()} | index_labels
    stored |= {*loki_model.RECORD_FIELDS, *loki_model.SCOPE_FIELDS}
    body = {contract.BODY_INPUT, contract.BODY_OUTPUT, contract.BODY_GROUND_TRUTH}
    for title, query in _queries(dashboard):
        names = logql_subset.names(logql_subset.parse(query))
        assert names.stream_labels <= index_labels, f"{title}: {names.stream_labels - index_labels}"
        assert names.fields <= stored, f"{title}: {names.fields - stored} are not stored by Loki"
        assert names.parsed <= body, f"{title}: {names.parsed - body} are not fields of the body"
    typo = logql_subset.names(logql_subset.parse('{service_name=~".+"} | valgen_stpe="1"'))
    assert not typo.fields <= stored, "a misspelt name must fail this check"


def test_the_sdk_reads_the_committed_json_back_without_losing_a_field(dashboard: dict[str, Any]) -> None:
    """Every field of the committed JSON is one grafana-foundation-sdk's dashboard schema knows.

    The SDK's reader keeps the fields its (Grafana's) schema has, adding defaults; a field outside
    it would be dropped. Free-form parts (transformation options, override values) pass through.
    """
    register_default_plugins()

    def lost(original: Any, read: Any, path: str = "") -> list[str]:
        if isinstance(original, dict):
            if not isinstance(read, dict):
                return [path]
            return [p for key, value in original.items() for p in lost(value, read.get(key, ABSENT), f"{path}/{key}")]
        if isinstance(original, list):
            if not isinstance(read, list) or len(read) != len(original):
                return [path]
            return [p for i, (a, b) in enumerate(zip(original, read, strict=True)) for p in lost(a, b, f"{path}[{i}]")]
        return [] if original == read else [path]

    def read_back(model: dict[str, Any]) -> Any:
        return json.loads(render(Dashboard.from_json(model)))

    assert lost(dashboard, read_back(dashboard)) == []
    misspelt = json.loads(json.dumps(dashboard))
    misspelt["panels"][1]["options"]["cellHieght"] = "md"
    assert lost(misspelt, read_back(misspelt)) == ["/panels[1]/options/cellHieght"], "a stray field must be noticed"


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


# Records of both kinds as Loki stores them (loki_model's names), for the kind tests below.
KIND = loki_model.normalize(contract.KIND)
RUN = VALUES["run"]
ROLLOUT_PROMPTS = {100: ["p7", "p3"], 200: ["p3", "p9"]}  # per step, in the sampler's rank order
RESPONSES = 3


def _entry(step: int, kind: str | None, metadata: dict[str, object], line: str = "") -> loki_model.Entry:
    """One stored line of run RUN at `step`; kind None: a record of a release before kinds."""
    stored = {"valgen_run_id": RUN, "valgen_step": str(step), "valgen_attempt": "launch.1", "trace_id": f"{step:032x}"}
    if kind is not None:
        stored[KIND] = kind
    stored |= {name: str(value).lower() if isinstance(value, bool) else str(value) for name, value in metadata.items()}
    return loki_model.Entry({"service_name": "svc"}, stored, line)


def _body(prompt: str, response: str) -> str:
    return json.dumps({"input": prompt, "output": response, "ground_truth": "42"})


def _validation(step: int, kind: str | None) -> list[loki_model.Entry]:
    """Three kept validation generations and the step's summary."""
    kept = [
        _entry(
            step,
            kind,
            {"valgen_rank": rank, "valgen_sample_id": f"q{rank}/0", "valgen_score": 0.25 * rank},
            _body(f"question {rank}", f"answer {rank} at {step}"),
        )
        for rank in (1, 2, 3)
    ]
    summary = {
        "valgen_closed_reason": "complete",
        "valgen_seen": 10,
        "valgen_kept": 3,
        "valgen_late": 0,
        "valgen_missing": 0,
        "valgen_score_count": 10,
        "valgen_score_mean": 0.5,
    }
    return [*kept, _entry(step, kind, summary)]


def _rollouts(step: int) -> list[loki_model.Entry]:
    """The kept prompts of a rollout step, each with all its responses, and the step's summary."""
    kept = []
    for p, prompt_id in enumerate(ROLLOUT_PROMPTS[step]):
        for i in range(RESPONSES):
            metadata: dict[str, object] = {
                "valgen_rank": p * RESPONSES + i + 1,
                "valgen_prompt_id": prompt_id,
                "valgen_sample_id": f"{prompt_id}/{i}",
                "valgen_score": float(i == 0),
                "valgen_advantage": 1.0 if i == 0 else -0.5,
                "valgen_response_length": 100 + i,
                "valgen_truncated": i == 2,
                "valgen_param_version": step // 10,
                "valgen_extra_acc": i % 2,
                "valgen_data_source": "math",
                "valgen_source": "trainer",
            }
            kept.append(_entry(step, contract.KIND_ROLLOUT, metadata, _body(f"prompt {prompt_id}", f"r{i}")))
    summary = {
        "valgen_closed_reason": "complete",
        "valgen_seen": 24,
        "valgen_kept": len(kept),
        "valgen_prompts_seen": 8,
        "valgen_prompts_kept": 2,
        "valgen_late": 0,
        "valgen_missing": 0,
        "valgen_score_count": 24,
        "valgen_score_mean": 0.9,
    }
    return [*kept, _entry(step, contract.KIND_ROLLOUT, summary)]


def _late(kind: str) -> loki_model.Entry:
    return _entry(100, kind, {"valgen_late": True, "valgen_sample_id": f"late-{kind}/0"}, _body("late", "late"))


def _both_kinds() -> tuple[list[loki_model.Entry], list[loki_model.Entry]]:
    """(validation entries, rollout entries): step 100's validation has no valgen_kind, step 200's has it."""
    validation = [*_validation(100, None), *_validation(200, contract.KIND_VALIDATION)]
    rollouts = [*_rollouts(100), *_rollouts(200)]
    random.Random(0).shuffle(rollouts)  # Loki's order is not the rank's
    return validation, rollouts


VALIDATION_PANELS = (
    "Steps: seen, kept, late, missing",
    "Seen, kept, late, missing per step",
    "Sampled generations of step",
    "Mean score per step",
)
ROLLOUT_PANELS = (
    "Rollout steps: prompts seen and kept",
    "Rollout prompts of step",
    "Training-inference mismatch per rollout step",
    "Kept responses of step $step, the most disagreeing first",
)
BOTH_KINDS_PANELS = ("Outputs for one prompt across steps", "Late generations", "Trajectory")


def _run_query(expr: str, entries: list[loki_model.Entry], **values: str) -> list[dict[str, str]] | dict[str, float]:
    """What a panel's query returns over `entries`: rows of a log query, {step: value} of a metric query."""
    query = substitute(expr, **{**VALUES, "step": ".+", "sample": ".+", "trajectory": "", **values})
    if isinstance(logql_subset.parse(query), logql_subset.MetricQuery):
        return logql_subset.metric(query, entries)
    return logql_subset.select(query, entries)


def test_every_panel_with_a_query_is_of_one_kind_or_the_late_panel(dashboard: dict[str, Any]) -> None:
    """A new panel must say which kind it shows (by being listed above) before the kind tests cover it."""
    titles = [panel["title"] for panel, _ in harness.loki_targets(dashboard)]
    for title in titles:
        assert sum(title.startswith(part) for part in (*VALIDATION_PANELS, *ROLLOUT_PANELS, *BOTH_KINDS_PANELS)) == 1, (
            title
        )


def test_validation_panels_show_validation_only_old_records_included(dashboard: dict[str, Any]) -> None:
    """Over records of both kinds, each validation query returns what it returns over validation alone."""
    validation, rollouts = _both_kinds()
    for title in VALIDATION_PANELS:
        for target in _panel(dashboard, title)["targets"]:
            shown = _run_query(target["expr"], validation + rollouts)
            assert shown, title
            assert shown == _run_query(target["expr"], validation), title
            assert _run_query(target["expr"], rollouts) in ([], {}), f"{title} shows rollouts"
    generations = _panel(dashboard, "Sampled generations of step")["targets"][0]["expr"]
    rows = _run_query(generations, validation + rollouts)
    assert sorted((r["valgen_step"], r.get(KIND, "")) for r in rows) == [("100", "")] * 3 + [("200", "validation")] * 3


def test_rollout_panels_show_rollouts_only_each_prompt_with_all_its_responses(dashboard: dict[str, Any]) -> None:
    """The rollout step table lists rollout summaries; the rollout table a step's prompts, responses together."""
    validation, rollouts = _both_kinds()
    summaries = _run_query(_panel(dashboard, "Rollout steps")["targets"][0]["expr"], validation + rollouts)
    assert isinstance(summaries, list)
    assert sorted((r["valgen_step"], r["valgen_prompts_kept"]) for r in summaries) == [("100", "2"), ("200", "2")]
    table = _panel(dashboard, "Rollout prompts of step")
    for step, prompts in ROLLOUT_PROMPTS.items():
        rows = _run_query(table["targets"][0]["expr"], validation + rollouts, step=str(step))
        assert isinstance(rows, list)
        assert {r[KIND] for r in rows} == {contract.KIND_ROLLOUT}
        shown = grafana_table.sorted_rows(table, rows)
        assert [r["valgen_prompt_id"] for r in shown] == [p for p in prompts for _ in range(RESPONSES)]
        assert [r["output"] for r in shown] == [f"r{i}" for _ in prompts for i in range(RESPONSES)]
        headers = grafana_table.columns(table, shown)
        assert headers == [*vgd.ROLLOUT_COLUMNS.values(), "acc"]
    wanted = {"prompt id", "prompt", "response", "reward", "advantage", "response length", "truncated", "param version"}
    assert wanted <= set(grafana_table.columns(table, [dict.fromkeys(vgd.ROLLOUT_COLUMNS, "x")]))


def test_the_kind_checks_notice_a_panel_without_its_filter(dashboard: dict[str, Any]) -> None:
    """The checks above can fail: without the kind filter, rollouts reach the validation table."""
    validation, rollouts = _both_kinds()
    expr = _panel(dashboard, "Sampled generations of step")["targets"][0]["expr"]
    unfiltered = expr.replace(f'| {KIND}!="rollout" ', "")
    assert unfiltered != expr
    assert _run_query(unfiltered, validation + rollouts) != _run_query(unfiltered, validation)
    table = _panel(dashboard, "Rollout prompts of step")
    unsorted = {**table, "transformations": [t for t in table["transformations"] if t["id"] != "sortBy"]}
    rows = _run_query(table["targets"][0]["expr"], rollouts, step="100")
    assert isinstance(rows, list)
    ids = [r["valgen_prompt_id"] for r in grafana_table.sorted_rows(unsorted, rows)]
    assert ids != sorted(ids, key=ROLLOUT_PROMPTS[100].index), "the shuffle must need the sort"


def test_late_panel_shows_both_kinds_with_their_kind(dashboard: dict[str, Any]) -> None:
    """A late generation of either kind is listed, with a kind column."""
    validation, rollouts = _both_kinds()
    late = _panel(dashboard, "Late generations")
    rows = _run_query(late["targets"][0]["expr"], [*validation, *rollouts, _late("validation"), _late("rollout")])
    assert isinstance(rows, list)
    assert sorted(r[KIND] for r in rows) == ["rollout", "validation"]
    assert "kind" in grafana_table.columns(late, rows)


@pytest.mark.parametrize(
    ("data_source", "expected"), [(".*", [1, 2, 3, 4]), ("gsm8k", [1, 2]), ("math|gsm8k", [1, 2, 3]), ("none", [])]
)
def test_the_data_source_variable_filters_the_generation_panels(
    dashboard: dict[str, Any], data_source: str, expected: list[int]
) -> None:
    """The generations of the chosen data sources; the default keeps those without one; summaries stay per step."""
    sources = {1: "gsm8k", 2: "gsm8k", 3: "math", 4: None}
    entries = [
        _entry(
            100,
            contract.KIND_VALIDATION,
            {"valgen_rank": rank, "valgen_sample_id": f"q{rank}/0", "valgen_score": float(rank)}
            | ({"valgen_data_source": source} if source else {}),
            _body(f"question {rank}", "answer"),
        )
        for rank, source in sources.items()
    ]
    entries += _validation(100, contract.KIND_VALIDATION)[-1:]  # the step's summary

    def query(title: str) -> list[dict[str, str]] | dict[str, float]:
        return _run_query(_panel(dashboard, title)["targets"][0]["expr"], entries, data_source=data_source)

    rows = query("Sampled generations of step")
    assert isinstance(rows, list)
    assert sorted(int(r["valgen_rank"]) for r in rows) == expected
    assert query("Mean score per step") == ({"100": sum(expected) / len(expected)} if expected else {})
    assert len(query("Steps: seen, kept")) == 1


def _prompt_entries() -> list[loki_model.Entry]:
    """Prompt p7's kept rows: validation at steps 100, 200, 300 (2 responses), rollouts at 150, 250; p70 and xp7 too.

    Each part's tag sorts against its step (step 100's tag is the largest), as random tags may.
    """
    entries = []
    for step, tag in ((100, "ff01"), (150, "c0de"), (200, "a1b2"), (250, "5e5e"), (300, "0a0b")):
        kind = contract.KIND_ROLLOUT if step % 100 else contract.KIND_VALIDATION
        for rank, (prompt, i) in enumerate([("p7", 0), ("p7", 1), ("p70", 0), ("xp7", 0)], start=1):
            metadata: dict[str, object] = {"valgen_rank": rank, "valgen_sample_id": f"{prompt}/{i}@{tag}"}
            metadata |= {"valgen_score": 0.5, "valgen_source": "trainer"}
            if kind == contract.KIND_ROLLOUT:
                metadata |= {"valgen_prompt_id": prompt, "valgen_response_length": 10 * step + i}
            entries.append(_entry(step, kind, metadata, _body(f"question {prompt}", f"{prompt}/{i} at {step}")))
    return entries


def _of(entry: loki_model.Entry, prompt: str) -> bool:
    """Whether `show --prompt` lists `entry` (history.matches): the id, untagged, its base, or the prompt id."""
    sample_id = entry.metadata["valgen_sample_id"]
    ids = (sample_id, untagged(sample_id), split_sample_id(sample_id)[0], entry.metadata.get("valgen_prompt_id"))
    return prompt in ids


@pytest.mark.parametrize("prompt", ["p7", "p7/1", "p7/0@a1b2", "p70"])
def test_the_prompt_panel_lists_what_show_prompt_lists_in_step_order(dashboard: dict[str, Any], prompt: str) -> None:
    """A prompt id, <prompt>/<i> or a tagged id gives its rows of both kinds at every step, sorted by step."""
    panel = _panel(dashboard, "one prompt across steps")
    entries = _prompt_entries()
    rows = _run_query(panel["targets"][0]["expr"], entries, sample=prompt)
    assert isinstance(rows, list)
    shown = grafana_table.sorted_rows(panel, rows)
    ids = [(int(r["valgen_step"]), r["valgen_sample_id"]) for r in shown]
    expected = sorted(
        (int(e.metadata["valgen_step"]), e.metadata["valgen_sample_id"]) for e in entries if _of(e, prompt)
    )
    assert [step for step, _ in ids] == sorted(step for step, _ in ids), "rows in step order"
    assert sorted(ids) == expected
    assert expected
    headers = grafana_table.columns(panel, shown)
    assert headers[:3] == ["step", "kind", "rank"]
    assert {"score", "output", "trace id"} <= set(headers)
    if prompt == "p7":  # rollouts among its rows: their response length shows
        assert "response length" in headers
    by_id = [r["valgen_step"] for r in sorted(rows, key=lambda r: r["valgen_sample_id"])]
    if prompt == "p7":  # sorted by sample id (before tagged ids) the steps came in their tags' order
        assert by_id != [r["valgen_step"] for r in shown]
