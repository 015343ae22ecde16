"""Attempts in files: `otel-valgen show` and ``otel_valgen.selection`` pick one attempt per step.

The shared vectors in ``testdata/lifecycle/*.json`` (also replayed by the Go processor's tests)
are checked here through ``otel_valgen.selection``: each group's kept set, and the attempt
shown, both from the raw records (embedded-sink rule) and from the collector output the
vector expects (sampler rule).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import otel_valgen as vg
from otel_valgen import contract
from otel_valgen.reader import Record, records_from_request
from otel_valgen.selection import choose_attempt, select_attempts, select_steps
from otel_valgen.tools.cli import main
from tests.conftest import REPO

VECTORS = sorted((REPO / "testdata" / "lifecycle").glob("*.json"))
EPOCH_MS = 1_700_000_000_000  # vector times are ms since an arbitrary epoch; files need real ones


def _value(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, list):
        return {"arrayValue": {"values": [_value(v) for v in value]}}
    return {"stringValue": str(value)}


def _request(event: str, attributes: dict[str, Any], instance: str, t_ms: int, body: Any = None) -> dict[str, Any]:
    log: dict[str, Any] = {
        "timeUnixNano": str((EPOCH_MS + t_ms) * 1_000_000),
        "eventName": event,
        "attributes": [{"key": k, "value": _value(v)} for k, v in attributes.items() if v is not None],
    }
    if body is not None:
        log["body"] = {"kvlistValue": {"values": [{"key": k, "value": _value(v)} for k, v in body.items()]}}
    resource = {"attributes": [{"key": "service.instance.id", "value": {"stringValue": instance}}]}
    return {"resourceLogs": [{"resource": resource, "scopeLogs": [{"logRecords": [log]}]}]}


_FIELDS = {
    "run_id": contract.RUN_ID,
    "step": contract.STEP,
    "source": contract.SOURCE,
    "attempt": contract.ATTEMPT,
    "sample_id": contract.SAMPLE_ID,
    "sample_key": contract.SAMPLE_KEY,
    "seen": contract.SEEN,
    "emitted": contract.EMITTED,
    "sources_expected": contract.SOURCES_EXPECTED,
}


def _vector_request(record: dict[str, Any], **extra: Any) -> dict[str, Any]:
    attributes = {_FIELDS[k]: v for k, v in record.items() if k in _FIELDS}
    attributes.update(extra)
    body = {"input": record["sample_id"], "output": ""} if record["event"] == contract.EVENT_GENERATION else None
    return _request(record["event"], attributes, record["instance"], record["timestamp_ms"], body)


def _records(requests: list[dict[str, Any]]) -> list[Record]:
    return [r for request in requests for r in records_from_request(request)]


def _load(path: Path) -> dict[str, Any]:
    vector: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return vector


def _arrivals(vector: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    return [(event["t_ms"], event["record"]) for event in vector["events"] if "record" in event]


def _collector_output(vector: dict[str, Any]) -> list[dict[str, Any]]:
    """What the sampler writes for the vector: ranked kept records, summaries, forwarded late ones, late reports."""
    by_id = {(r.get("attempt", ""), r["sample_id"]): r for _, r in _arrivals(vector) if "sample_id" in r}
    requests = []
    for group in vector["expected"]["groups"]:
        attempt = group["attempt"]
        for rank, sample_id in enumerate(group["kept_ids"], start=1):
            requests.append(_vector_request(by_id[(attempt, sample_id)], **{contract.RANK: rank}))
        summary = {
            contract.RUN_ID: group["run_id"],
            contract.STEP: group["step"],
            contract.ATTEMPT: attempt,
            contract.ATTEMPT_START: (EPOCH_MS + group["attempt_start_ms"]) * 1_000_000,
            contract.CLOSED_REASON: group["closed_reason"],
            contract.SEEN: group["seen"],
            contract.KEPT: len(group["kept_ids"]),
            contract.SOURCES_ENDED: group["sources_ended"],
            contract.SOURCES_MISSING: group["sources_missing"],
            contract.LATE: 0,
        }
        requests.append(_request(contract.EVENT_STEP_SUMMARY, summary, "collector", group["closed_at_ms"]))
        for late in group.get("late_reports", []):
            report = {contract.RUN_ID: group["run_id"], contract.STEP: group["step"], contract.ATTEMPT: attempt}
            requests.append(_request(contract.EVENT_STEP_LATE, {**report, contract.LATE: late}, "collector", 0))
    for sample_id in vector["expected"].get("forwarded_ids", []):
        (record,) = [r for (_, i), r in by_id.items() if i == sample_id]
        requests.append(_vector_request(record, **{contract.LATE: True}))
    return requests


def test_the_shared_vectors_are_here() -> None:
    """The lifecycle vectors both suites read are in testdata/lifecycle."""
    assert len(VECTORS) >= 9


@pytest.mark.parametrize("path", VECTORS, ids=lambda p: p.stem)
def test_vector_groups_keep_the_bottom_k_of_what_arrived_before_the_close(path: Path) -> None:
    """Per expected group: bottom-k of its attempt's records that arrived by closed_at = kept_ids."""
    vector = _load(path)
    count = vector["config"]["count"]
    for group in vector["expected"]["groups"]:
        arrived = [
            _vector_request(record)
            for t_ms, record in _arrivals(vector)
            if record.get("attempt", "") == group["attempt"] and t_ms <= group["closed_at_ms"]
        ]
        attempts = select_attempts(_records(arrived), count=count)[(group["run_id"], group["step"])]
        (selection,) = [a for a in attempts if a.attempt == group["attempt"]]
        assert [g.sample_id for g in selection.generations] == group["kept_ids"]
        assert selection.attempt_start == (EPOCH_MS + group["attempt_start_ms"]) * 1_000_000


@pytest.mark.parametrize("path", VECTORS, ids=lambda p: p.stem)
def test_vector_shown_attempt_from_the_raw_records(path: Path) -> None:
    """Embedded-sink rule over every record of the vector: the attempt shown is the expected one."""
    vector = _load(path)
    selections = select_steps(_records([_vector_request(r) for _, r in _arrivals(vector)]))
    shown = [{"run_id": s.run_id, "step": s.step, "attempt": s.attempt} for s in selections]
    assert shown == vector["expected"]["shown"]


@pytest.mark.parametrize("path", VECTORS, ids=lambda p: p.stem)
def test_vector_complete_groups_count_each_sources_largest_end_record(path: Path) -> None:
    """Embedded-sink rule: a group that closed complete with nothing late is complete, with the collector's seen.

    A source may send several end records (block-less parts); each counts cumulatively, so the
    largest counts, whatever order they arrive in (``blockless_parts``).
    """
    vector = _load(path)
    for group in vector["expected"]["groups"]:
        if group["closed_reason"] != "complete" or group["late"]:
            continue
        arrived = [_vector_request(r) for _, r in _arrivals(vector) if r.get("attempt", "") == group["attempt"]]
        attempts = select_attempts(_records(arrived))[(group["run_id"], group["step"])]
        (selection,) = [a for a in attempts if a.attempt == group["attempt"]]
        assert (selection.complete, selection.seen) == (True, group["seen"])


@pytest.mark.parametrize("path", VECTORS, ids=lambda p: p.stem)
def test_vector_shown_attempt_from_the_collector_output(path: Path) -> None:
    """Sampler rule over the expected summaries: the shown attempt, its kept set, never a late record."""
    vector = _load(path)
    selections = select_steps(_records(_collector_output(vector)))
    shown = [{"run_id": s.run_id, "step": s.step, "attempt": s.attempt} for s in selections]
    assert shown == vector["expected"]["shown"]
    groups = {g["attempt"]: g for g in vector["expected"]["groups"]}
    for selection in selections:
        group = groups[selection.attempt]
        assert [g.sample_id for g in selection.generations] == group["kept_ids"]
        assert selection.attempts == len(vector["expected"]["groups"])
        assert selection.late == group["late"]
        assert selection.seen == group["seen"]


# -- the rule --------------------------------------------------------------------------------


def test_choose_attempt_prefers_complete_then_latest_then_larger_attempt() -> None:
    """Latest start among complete attempts; else latest start; ties by the larger attempt string."""
    from otel_valgen.selection import StepSelection

    def sel(attempt: str, start: int, complete: bool) -> StepSelection:
        return StepSelection("r", 1, 4, attempt=attempt, attempt_start=start, complete=complete)

    def pick(*candidates: StepSelection) -> str:
        chosen = choose_attempt(candidates)
        assert chosen is not None
        return chosen.attempt

    assert pick(sel("a.1", 10, True), sel("b.1", 20, False)) == "a.1"
    assert pick(sel("a.1", 10, True), sel("b.1", 20, True)) == "b.1"
    assert pick(sel("a.1", 10, False), sel("b.1", 20, False)) == "b.1"
    assert pick(sel("a.1", 10, True), sel("b.1", 10, True)) == "b.1"
    assert choose_attempt([]) is None


# -- show over crafted collector output -------------------------------------------------------


def _gen(attempt: str, sample_id: str, key: int, t_ms: int, **extra: Any) -> dict[str, Any]:
    attributes = {
        contract.RUN_ID: "run",
        contract.STEP: 7,
        contract.ATTEMPT: attempt,
        contract.SAMPLE_ID: sample_id,
        contract.SAMPLE_KEY: key,
        contract.SOURCE: "s",
        contract.SAMPLE_COUNT: 3,
        **extra,
    }
    return _request(contract.EVENT_GENERATION, attributes, "i-" + attempt, t_ms, {"input": sample_id, "output": "o"})


def _summary(attempt: str, start_ms: int, reason: str, seen: int, kept: int, late: int = 0) -> dict[str, Any]:
    attributes = {
        contract.RUN_ID: "run",
        contract.STEP: 7,
        contract.ATTEMPT: attempt,
        contract.ATTEMPT_START: (EPOCH_MS + start_ms) * 1_000_000,
        contract.CLOSED_REASON: reason,
        contract.SEEN: seen,
        contract.KEPT: kept,
        contract.LATE: late,
    }
    return _request(contract.EVENT_STEP_SUMMARY, attributes, "collector", start_ms + 500)


def _late(attempt: str, late: int) -> dict[str, Any]:
    attributes = {contract.RUN_ID: "run", contract.STEP: 7, contract.ATTEMPT: attempt, contract.LATE: late}
    return _request(contract.EVENT_STEP_LATE, attributes, "collector", 9000)


def _write(path: Path, requests: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in requests), encoding="utf-8")
    return path


def _show_json(*paths: Path) -> list[dict[str, Any]]:
    result = CliRunner().invoke(main, ["show", *map(str, paths), "--format", "json"])
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_show_uses_the_samplers_choice_of_the_latest_complete_attempt(tmp_path: Path) -> None:
    """Two attempts in collector output, late generations forwarded: the ranked records of the chosen one."""
    path = _write(
        tmp_path / "valgen.jsonl",
        [
            _gen("L1.1", "x/0", 40, 100, **{contract.RANK: 1}),
            _gen("L1.1", "x/1", 50, 100, **{contract.RANK: 2}),
            _summary("L1.1", 0, "wait", 9, 2),
            _gen("L2.1", "y/0", 20, 3100, **{contract.RANK: 1}),
            _gen("L2.1", "y/1", 30, 3100, **{contract.RANK: 2}),
            _gen("L2.1", "y/2", 60, 3100, **{contract.RANK: 3}),
            _summary("L2.1", 3000, "complete", 12, 3),
            # forwarded late generations with the smallest keys: never part of the sample
            _gen("L2.1", "late/0", 1, 5000, **{contract.LATE: True}),
            _gen("L1.1", "late/1", 2, 5000, **{contract.LATE: True}),
            _late("L2.1", 1),
            _late("L2.1", 2),
            _late("L1.1", 5),
        ],
    )
    (step,) = _show_json(path)
    assert (step["run_id"], step["step"], step["attempt"], step["attempts"], step["late"]) == ("run", 7, "L2.1", 2, 2)
    assert (step["seen"], step["kept"]) == (12, 3)
    assert [g["sample_id"] for g in step["generations"]] == ["y/0", "y/1", "y/2"]


def test_show_falls_back_to_the_older_complete_attempt(tmp_path: Path) -> None:
    """A later attempt that did not complete loses to an earlier complete one."""
    path = _write(
        tmp_path / "valgen.jsonl",
        [
            _gen("L1.1", "x/0", 40, 100, **{contract.RANK: 1}),
            _summary("L1.1", 0, "complete", 1, 1),
            _gen("L2.1", "y/0", 20, 3100, **{contract.RANK: 1}),
            _summary("L2.1", 3000, "max_duration", 1, 1),
        ],
    )
    (step,) = _show_json(path)
    assert (step["attempt"], step["attempts"]) == ("L1.1", 2)
    assert [g["sample_id"] for g in step["generations"]] == ["x/0"]


def test_show_of_an_old_collectors_output_is_unchanged(tmp_path: Path) -> None:
    """Summaries and records without attempt: attempt "", the ranked records, the summary's late count."""
    requests = [_gen("", f"x/{i}", 10 * i, 100, **{contract.RANK: i + 1}) for i in range(3)]
    requests.append(_summary("", 0, "complete", 30, 3, late=4))
    (step,) = _show_json(_write(tmp_path / "old.jsonl", requests))
    assert (step["attempt"], step["attempts"], step["late"], step["kept"]) == ("", 1, 4, 3)


# -- show over embedded-sink files --------------------------------------------------------------


def _validate(directory: Path, launch: str, prefix: str) -> None:
    vg.configure(run_id="emb", count=4, directory=str(directory), launch_id=launch, progress_interval_s=0)
    with vg.validation(step=3, source="trainer"):
        vg.log_generations(
            [f"{prefix} {i}" for i in range(30)], ["o"] * 30, None, sample_ids=[f"{prefix}-{i}" for i in range(30)]
        )
    vg.shutdown()


def test_show_of_embedded_files_picks_the_later_launchs_attempt(tmp_path: Path) -> None:
    """A resumed job (new launch) validates step 3 again: show prints the new attempt's bottom-k only."""
    _validate(tmp_path, "first", "old")
    _validate(tmp_path, "second", "new")
    (step,) = _show_json(tmp_path)
    assert (step["attempt"], step["attempts"], step["seen"], step["kept"], step["late"]) == ("second.1", 2, 30, 4, 0)
    assert all(g["sample_id"].startswith("new-") for g in step["generations"])


def test_show_of_embedded_files_skips_a_later_attempt_that_never_ended(tmp_path: Path) -> None:
    """The later attempt's source started but never ended (killed): the earlier complete one is shown."""
    _validate(tmp_path, "first", "old")
    start = {contract.RUN_ID: "emb", contract.STEP: 3, contract.SOURCE: "trainer", contract.ATTEMPT: "zz.1"}
    far = int(time.time() * 1000) - EPOCH_MS + 60_000  # a minute after the first launch's records
    killed = [_request(contract.EVENT_VALIDATION_START, start, "i-killed", far)]
    killed += [
        _request(
            contract.EVENT_GENERATION,
            {**start, contract.SAMPLE_ID: f"k/{i}", contract.SAMPLE_KEY: i},
            "i-killed",
            far + 1,
            {"input": "k", "output": "o"},
        )
        for i in range(3)
    ]
    _write(tmp_path / "killed.jsonl", killed)
    (step,) = _show_json(tmp_path)
    assert (step["attempt"], step["attempts"]) == ("first.1", 2)
    assert all(g["sample_id"].startswith("old-") for g in step["generations"])


def test_an_embedded_step_is_complete_only_when_sources_expected_sources_ended() -> None:
    """Without a summary, a step whose end records promise two sources is complete once two have ended."""
    common = {contract.RUN_ID: "emb", contract.STEP: 4, contract.ATTEMPT: "L.1"}

    def part(source: str, t_ms: int) -> list[dict[str, Any]]:
        attributes = {**common, contract.SOURCE: source}
        generation = {**attributes, contract.SAMPLE_ID: f"{source}/0", contract.SAMPLE_KEY: t_ms}
        end = {**attributes, contract.SEEN: 1, contract.EMITTED: 1, contract.SOURCES_EXPECTED: 2}
        return [
            _request(contract.EVENT_GENERATION, generation, f"i-{source}", t_ms, {"input": "q", "output": "o"}),
            _request(contract.EVENT_VALIDATION_END, end, f"i-{source}", t_ms + 1),
        ]

    (one,) = select_steps(_records(part("A", 10)))
    assert (one.complete, one.seen) == (False, 1)
    (both,) = select_steps(_records([*part("A", 10), *part("B", 20)]))
    assert (both.complete, both.seen) == (True, 2)
