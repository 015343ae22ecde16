"""The ClearML backend in offline mode: the trainer is verl 0.9.1's own ClearML tracking in another process.

The exporter opens the trainer's task by id (``Task.get_task``) on the shared offline cache and
writes verl's validation table and the scalars; they are read back from the offline session's
files (``task.json``, ``metrics.jsonl``), since importing a session needs a ClearML server.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from otel_valgen import contract
from otel_valgen.exporter.backends import create_backends
from otel_valgen.exporter.service import ExporterService, ServiceConfig
from otel_valgen.exporter.tables import ROLLOUT_COLUMNS
from otel_valgen.otlp_json import to_otlp_json
from tests.support.require import require_module

from .conftest import (
    ROLLOUT_KEY,
    conversation_step,
    generation,
    request,
    rollout_request,
    rollout_rows,
    summary,
    wait_for,
    written,
)

ROOT = Path(__file__).resolve().parents[2]
KEY = "val/generations"
require_module("clearml", "clearml is not installed; pip install -e '.[dev]'")
require_module("verl", "verl is not installed; pip install -e '.[dev]'")


def offline_events(folder: Path) -> list[dict[str, Any]]:
    """Every event of an offline ClearML session folder."""
    events: list[dict[str, Any]] = []
    for line in (folder / "metrics.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            events.extend(json.loads(line))
    return events


def tables(folder: Path, title: str = "Validation") -> dict[int, list[dict[str, Any]]]:
    """The tables of ``title`` (verl's "Validation", or "Training" for rollouts) by iteration, as lists of row dicts."""
    out = {}
    for event in offline_events(folder):
        if event["type"] == "plot" and event["metric"] == title:
            data = json.loads(event["plot_str"])["data"][0]
            header = [h[0] if isinstance(h, list) else h for h in data["header"]["values"]]
            rows = zip(*data["cells"]["values"], strict=True)
            out[event["iter"]] = [dict(zip(header, row, strict=True)) for row in rows]
    return out


@pytest.fixture
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """ClearML offline mode with its cache and home under tmp_path, for the trainer and the exporter."""
    env = {"CLEARML_OFFLINE_MODE": "1", "CLEARML_CACHE_DIR": str(tmp_path / "cache"), "HOME": str(tmp_path / "home")}
    (tmp_path / "home").mkdir()
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


@pytest.mark.timeout(300)
def test_steps_land_in_the_trainers_task_as_verl_tables_and_scalars(offline: dict[str, str], tmp_path: Path) -> None:
    """K rows per step in verl's "Validation" table of the trainer's own task, extra columns included.

    The rollouts of step 2 go to a "Training" table of their own, one row per response by prompt.
    Step 4 has a conversation: its table gets a ``conversation`` column of plotly table HTML.
    """
    facts_path, work = tmp_path / "trainer.json", tmp_path / "job"
    work.mkdir()
    # Run from a folder outside any git repository, as a copied script: ClearML's Task.init
    # analyses the script's repository and packages, which takes minutes on this repository.
    script = shutil.copy(Path(__file__).with_name("clearml_trainer.py"), work / "trainer.py")
    env = os.environ | offline | {"PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, str(script), str(facts_path)], cwd=work, env=env, check=True, timeout=240)
    facts = json.loads(facts_path.read_text())
    resource = facts["resource"]
    assert resource["clearml.task_id"].startswith("offline-")
    service = ExporterService(ServiceConfig(), create_backends(["clearml"], None, {}))
    service.start()
    for step in (1, 2):
        logs = [generation("cm", step, i) for i in range(3)]
        for i, log in enumerate(logs):
            log.attributes.add(key=f"{contract.EXTRA_PREFIX}acc").value.double_value = float(i % 2)
        service.accept(to_otlp_json(request(*logs, summary("cm", step, 3, seen=9), resource=resource)))
    wait_for(lambda: written(service, "clearml") == 2, 60)
    # A step of a real attempt sent again (a retried request) is recorded under that attempt: written once.
    attempt = [generation("cm", 3, 0, attempt="L1.1"), summary("cm", 3, 1, attempt="L1.1", attempt_start=5_000)]
    for _ in range(2):
        service.accept(to_otlp_json(request(*attempt, resource=resource)))
    wait_for(lambda: service.stats()["backends"]["clearml"]["unchanged_steps"] == 1, 60)
    service.accept(to_otlp_json(rollout_request("cm", 2, resource=resource)))
    wait_for(lambda: written(service, "clearml") == 4, 60)
    service.accept(to_otlp_json(conversation_step("cm", 4, resource=resource)))
    wait_for(lambda: written(service, "clearml") == 5, 60)
    service.stop()
    assert service.stats()["backends"]["clearml"]["kinds"]["rollout"]["written_steps"] == 1
    folder = Path(facts["folder"])
    assert json.loads((folder / "task.json").read_text())["name"] == "grpo"  # the trainer's task, unchanged
    got = tables(folder)
    assert sorted(got) == [1, 2, 3, 4]
    plots = [e["iter"] for e in offline_events(folder) if e["type"] == "plot" and e["metric"] == "Validation"]
    assert sorted(plots) == [1, 2, 3, 4]  # step 3 once
    assert "conversation" not in got[2][0], "text-only steps keep their columns"
    turns, text_only = (row["conversation"] for row in got[4])
    assert turns.startswith("<i>── prompt ──</i><br><b>[system]</b> Use the calc tool.<br><b>[user]</b> 2+2?")
    assert "<b>[assistant]</b> (thinking) I should call calc.<br>Let me compute.<br>" in turns
    assert '→ calc({"expr": "2+2"}) #c1<br><b>[tool #c1]</b> &lt;script&gt;alert(1)&lt;/script&gt; 4<br>' in turns
    assert "[cut to fit: 300000 bytes before the cut]<br><b>[assistant]</b> **4** &lt;b&gt;done&lt;/b&gt;" in turns
    assert text_only is None
    assert [(row["step"], row["input"], row["output"], row["score"]) for row in got[2]] == [
        (2, "q0", "a0@2", 0.5),
        (2, "q1", "a1@2", 0.5),
        (2, "q2", "a2@2", 0.5),
    ]
    assert [row["acc"] for row in got[1]] == [0.0, 1.0, 0.0]
    kept = [e for e in offline_events(folder) if e["type"] == "training_stats_scalar" and e["variant"] == "kept"]
    assert sorted((e["iter"], e["value"]) for e in kept if e["metric"] == KEY) == [
        (1, 3.0),
        (2, 3.0),
        (3, 1.0),
        (4, 2.0),
    ]
    assert [(e["iter"], e["value"]) for e in kept if e["metric"] == ROLLOUT_KEY] == [(2, 4.0)]
    (rollouts,) = tables(folder, "Training").values()
    columns = [*ROLLOUT_COLUMNS, "attempt"]
    assert [[row[name] for name in columns] for row in rollouts] == rollout_rows(2)


def test_records_without_a_task_are_counted_not_written(offline: dict[str, str]) -> None:
    """Without clearml.task_id the step is a failed step for ClearML (counted), and the service goes on."""
    service = ExporterService(ServiceConfig(), create_backends(["clearml"], None, {}))
    service.start()
    service.accept(to_otlp_json(request(generation("none", 1, 0), summary("none", 1, 1))))
    wait_for(service.idle, 30)
    service.stop()
    stats = service.stats()["backends"]["clearml"]
    assert (stats["failed_steps"], stats["written_steps"]) == (1, 0)
