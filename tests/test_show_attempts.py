"""Attempts in files: `otel-valgen show` and ``otel_valgen.selection`` pick one attempt per step.

The shared vectors in ``testdata/lifecycle/*.json`` (also replayed by the Go processor's tests)
are checked here through ``otel_valgen.selection``: each group's kept set, its balance (seen =
kept + dropped by reason), the attempts that ran concurrently, and the attempt shown, both
from the raw records (embedded-sink rule) and from the collector output the vector expects
(sampler rule). Generations without ``valgen.sample_id`` (the sampler drops them as invalid)
are rejected by the reader; the balance rule itself is checked with them too.
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
from otel_valgen.balance import SourceFigures, step_balance
from otel_valgen.cli.main import main
from otel_valgen.reader import Record, records_from_request
from otel_valgen.selection import StepSelection, choose_attempt, select_attempts, select_steps
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
    "dropped": contract.DROPPED,
    "integration": contract.INTEGRATION,
    "unhooked_reason": contract.UNHOOKED_REASON,
    "kind": contract.KIND,
    "prompt_id": contract.PROMPT_ID,
    "prompt_key": contract.PROMPT_KEY,
    "prompts_seen": contract.PROMPTS_SEEN,
}


def _kind(item: dict[str, Any]) -> str:
    """The kind of a vector record, group or shown entry: absent is validation."""
    kind: str = item.get("kind", contract.KIND_VALIDATION)
    return kind


def _shown(selections: list[StepSelection]) -> list[dict[str, Any]]:
    """Shown attempts as ``expected.shown`` lists them: the kind only when not validation."""
    return [
        {"run_id": s.run_id, "step": s.step, "attempt": s.attempt}
        | ({"kind": s.kind} if s.kind != contract.KIND_VALIDATION else {})
        for s in selections
    ]


def _vector_kinds(vector: dict[str, Any]) -> list[str]:
    """The kinds of a vector's groups, validation first."""
    return sorted({_kind(g) for g in vector["expected"]["groups"]}, key=lambda k: k != contract.KIND_VALIDATION)


def _vector_request(record: dict[str, Any], **extra: Any) -> dict[str, Any]:
    attributes = {_FIELDS[k]: v for k, v in record.items() if k in _FIELDS}
    attributes.update(extra)
    body = (
        {"input": record.get("sample_id", ""), "output": ""} if record["event"] == contract.EVENT_GENERATION else None
    )
    return _request(record["event"], attributes, record["instance"], record["timestamp_ms"], body)


def _records(requests: list[dict[str, Any]]) -> list[Record]:
    return [r for request in requests for r in records_from_request(request)]


def _load(path: Path) -> dict[str, Any]:
    vector: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return vector


def _invalid(record: dict[str, Any]) -> bool:
    """A generation without a sample id: dropped as invalid by the sampler, rejected by the reader."""
    return record["event"] == contract.EVENT_GENERATION and "sample_id" not in record


def _arrivals(vector: dict[str, Any], *, invalid: bool = False) -> list[tuple[int, dict[str, Any]]]:
    """The vector's records with their arrival times; ``invalid``: with the invalid generations."""
    events = [(event["t_ms"], event["record"]) for event in vector["events"] if "record" in event]
    return [(t_ms, record) for t_ms, record in events if invalid or not _invalid(record)]


def _group_arrivals(vector: dict[str, Any], group: dict[str, Any], *, invalid: bool = False) -> list[dict[str, Any]]:
    """The records of the group's attempt that arrived by its close."""
    return [
        record
        for t_ms, record in _arrivals(vector, invalid=invalid)
        if record.get("attempt", "") == group["attempt"]
        and _kind(record) == _kind(group)
        and t_ms <= group["closed_at_ms"]
    ]


def _collector_output(vector: dict[str, Any]) -> list[dict[str, Any]]:
    """What the sampler writes for the vector: ranked kept records, summaries, forwarded late ones, late reports."""
    by_id = {(r.get("attempt", ""), _kind(r), r["sample_id"]): r for _, r in _arrivals(vector) if "sample_id" in r}
    requests = []
    for group in vector["expected"]["groups"]:
        attempt = group["attempt"]
        for rank, sample_id in enumerate(group["kept_ids"], start=1):
            requests.append(_vector_request(by_id[(attempt, _kind(group), sample_id)], **{contract.RANK: rank}))
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
            contract.DROPPED: sum(group["dropped"].values()),
            **{contract.DROPPED_PREFIX + reason: n for reason, n in group["dropped"].items()},
            contract.ATTEMPTS_CONCURRENT: group["attempts_concurrent"],
            contract.SOURCES_UNHOOKED: group["sources_unhooked"],
            contract.KIND: _kind(group),
            contract.PROMPTS_SEEN: group.get("prompts_seen"),
            contract.PROMPTS_KEPT: group.get("prompts_kept"),
        }
        requests.append(_request(contract.EVENT_STEP_SUMMARY, summary, "collector", group["closed_at_ms"]))
        for late in group.get("late_reports", []):
            report = {
                contract.RUN_ID: group["run_id"],
                contract.STEP: group["step"],
                contract.ATTEMPT: attempt,
                contract.KIND: _kind(group),
            }
            requests.append(_request(contract.EVENT_STEP_LATE, {**report, contract.LATE: late}, "collector", 0))
    for sample_id in vector["expected"].get("forwarded_ids", []):
        (record,) = [r for (_, _, i), r in by_id.items() if i == sample_id]
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
        arrived = [_vector_request(record) for record in _group_arrivals(vector, group)]
        attempts = select_attempts(_records(arrived), count=count, kind=_kind(group))[(group["run_id"], group["step"])]
        (selection,) = [a for a in attempts if a.attempt == group["attempt"]]
        assert [g.sample_id for g in selection.generations] == group["kept_ids"]
        assert selection.attempt_start == (EPOCH_MS + group["attempt_start_ms"]) * 1_000_000


@pytest.mark.parametrize("path", VECTORS, ids=lambda p: p.stem)
def test_vector_shown_attempt_from_the_raw_records(path: Path) -> None:
    """Embedded-sink rule over every record of the vector: the attempt shown is the expected one."""
    vector = _load(path)
    records = _records([_vector_request(r) for _, r in _arrivals(vector)])
    selections = [s for kind in _vector_kinds(vector) for s in select_steps(records, kind=kind)]
    assert _shown(selections) == vector["expected"]["shown"]


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
        arrived = [
            _vector_request(r)
            for _, r in _arrivals(vector)
            if r.get("attempt", "") == group["attempt"] and _kind(r) == _kind(group)
        ]
        by_step = select_attempts(_records(arrived), count=vector["config"]["count"], kind=_kind(group))
        (selection,) = [a for a in by_step[(group["run_id"], group["step"])] if a.attempt == group["attempt"]]
        assert (selection.complete, selection.seen) == (True, group["seen"])


@pytest.mark.parametrize("path", VECTORS, ids=lambda p: p.stem)
def test_vector_shown_attempt_from_the_collector_output(path: Path) -> None:
    """Sampler rule over the expected summaries: the shown attempt, its kept set, never a late record."""
    vector = _load(path)
    records = _records(_collector_output(vector))
    selections = [s for kind in _vector_kinds(vector) for s in select_steps(records, kind=kind)]
    assert _shown(selections) == vector["expected"]["shown"]
    groups = {(g["attempt"], _kind(g)): g for g in vector["expected"]["groups"]}
    for selection in selections:
        group = groups[(selection.attempt, selection.kind)]
        assert [g.sample_id for g in selection.generations] == group["kept_ids"]
        assert selection.attempts == sum(1 for g in vector["expected"]["groups"] if _kind(g) == selection.kind)
        assert (selection.prompts_seen, selection.prompts_kept) == (
            group.get("prompts_seen"),
            group.get("prompts_kept"),
        )
        assert selection.late == group["late"]
        assert selection.seen == group["seen"]
        assert selection.dropped == group["dropped"]
        concurrent = [
            g for g in vector["expected"]["groups"] if g["attempts_concurrent"] > 0 and _kind(g) == selection.kind
        ]
        assert selection.split_attempts == len(concurrent)
        assert selection.sources_unhooked == group["sources_unhooked"]


@pytest.mark.parametrize("path", VECTORS, ids=lambda p: p.stem)
def test_vector_balance_by_the_shared_rule(path: Path) -> None:
    """``otel_valgen.balance`` over each group's sources as they stood at its close: the expected seen and dropped."""
    vector = _load(path)
    for group in vector["expected"]["groups"]:
        figures: dict[tuple[str, str], dict[str, Any]] = {}
        kept: set[tuple[tuple[str, str], str]] = set()
        for record in _group_arrivals(vector, group, invalid=True):
            source = (record["source"], record["instance"])
            f = figures.setdefault(source, {"ended": False, "received": 0, "invalid": 0, "progress_seen": 0})
            if record["event"] == contract.EVENT_VALIDATION_END:
                f["ended"] = True
                for name in ("seen", "emitted", "dropped"):
                    f[name] = max(f.get(name, 0), record.get(name, 0))
            elif record["event"] == contract.EVENT_VALIDATION_PROGRESS:
                f["progress_seen"] = max(f["progress_seen"], record["seen"])
            elif _invalid(record):
                f["invalid"] += 1
            elif record["event"] == contract.EVENT_GENERATION:
                f["received"] += 1
                if record["sample_id"] in group["kept_ids"]:
                    kept.add((source, record["sample_id"]))
        sources = [SourceFigures(**f, kept=sum(1 for s, _ in kept if s == source)) for source, f in figures.items()]
        assert step_balance(sources) == (group["seen"], group["dropped"]), group["attempt"]


@pytest.mark.parametrize("path", VECTORS, ids=lambda p: p.stem)
def test_vector_balance_from_embedded_files(path: Path) -> None:
    """Embedded-sink rule over what arrived by the close: the collector's seen and dropped by reason.

    Groups with invalid generations are left out: the reader rejects those records, which the
    sampler counts (checked by ``test_vector_balance_by_the_shared_rule``).
    """
    vector = _load(path)
    for group in vector["expected"]["groups"]:
        if group["dropped"]["invalid"]:
            continue
        arrived = [_vector_request(record) for record in _group_arrivals(vector, group)]
        attempts = select_attempts(_records(arrived), count=vector["config"]["count"], kind=_kind(group))
        (selection,) = [a for a in attempts[(group["run_id"], group["step"])] if a.attempt == group["attempt"]]
        assert (selection.seen, selection.dropped) == (group["seen"], group["dropped"])
        assert selection.seen == selection.kept + sum(group["dropped"].values())


@pytest.mark.parametrize("path", VECTORS, ids=lambda p: p.stem)
def test_vector_concurrent_attempts_from_the_raw_records(path: Path) -> None:
    """Embedded-sink rule over every record: each attempt counts the concurrent ones the collector counts."""
    vector = _load(path)
    records = _records([_vector_request(r) for _, r in _arrivals(vector)])
    got = {
        (a.run_id, a.step, a.attempt, kind): a.attempts_concurrent
        for kind in _vector_kinds(vector)
        for step in select_attempts(records, kind=kind).values()
        for a in step
    }
    want = {
        (g["run_id"], g["step"], g["attempt"], _kind(g)): g["attempts_concurrent"] for g in vector["expected"]["groups"]
    }
    assert got == want


@pytest.mark.parametrize("path", VECTORS, ids=lambda p: p.stem)
def test_vector_unhooked_sources_from_the_raw_records(path: Path) -> None:
    """Embedded-sink rule over what arrived by the close: the sources the collector lists as unhooked."""
    vector = _load(path)
    for group in vector["expected"]["groups"]:
        arrived = [_vector_request(record) for record in _group_arrivals(vector, group)]
        attempts = select_attempts(_records(arrived), count=vector["config"]["count"], kind=_kind(group))
        (selection,) = [a for a in attempts[(group["run_id"], group["step"])] if a.attempt == group["attempt"]]
        assert selection.sources_unhooked == group["sources_unhooked"]


# -- the rule --------------------------------------------------------------------------------


def test_choose_attempt_prefers_complete_then_latest_then_larger_attempt() -> None:
    """Latest start among complete attempts; else latest start; ties by the larger attempt string."""

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


def _show_json(*arguments: Path | str) -> list[dict[str, Any]]:
    result = CliRunner().invoke(main, ["show", *map(str, arguments), "--format", "json"])
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


def test_show_cuts_two_groups_of_one_attempt_to_k(tmp_path: Path) -> None:
    """Two summaries of one attempt (a collector that forgot the first group): at most k, the bottom-k of both."""
    path = _write(
        tmp_path / "valgen.jsonl",
        [
            *(_gen("run.1", f"a/{i}", key, 100, **{contract.RANK: i + 1}) for i, key in enumerate((10, 40, 70))),
            _summary("run.1", 0, "complete", 9, 3),
            *(_gen("run.1", f"b/{i}", key, 9100, **{contract.RANK: i + 1}) for i, key in enumerate((20, 30, 90))),
            _summary("run.1", 9000, "complete", 9, 3),
        ],
    )
    (step,) = _show_json(path)
    assert [g["sample_id"] for g in step["generations"]] == ["a/0", "b/0", "b/1"]
    assert [g["sample_id"] for g in _show_json(path, "--count", "2")[0]["generations"]] == ["a/0", "b/0"]


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


# -- the balance and split launches in show ---------------------------------------------------


def _part(attempt: str, source: str, t_ms: int, ids: list[str]) -> list[dict[str, Any]]:
    """One process's embedded-sink records of step 7: start at t_ms, its generations, end 200 ms later."""
    common = {contract.RUN_ID: "run", contract.STEP: 7, contract.ATTEMPT: attempt, contract.SOURCE: source}
    instance = f"i-{source}"
    end = {**common, contract.SEEN: len(ids) + 3, contract.EMITTED: len(ids), contract.DROPPED: 1}
    return [
        _request(contract.EVENT_VALIDATION_START, common, instance, t_ms),
        *[
            _request(
                contract.EVENT_GENERATION,
                {**common, contract.SAMPLE_ID: i, contract.SAMPLE_KEY: 10 + n},
                instance,
                t_ms + 100,
                {"input": i, "output": "o"},
            )
            for n, i in enumerate(ids)
        ],
        _request(contract.EVENT_VALIDATION_END, end, instance, t_ms + 200),
    ]


def _show(*paths: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """``show --format json``: the steps, and the lines on stderr."""
    result = CliRunner().invoke(main, ["show", *map(str, paths), "--format", "json"])
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines()], result.stderr.splitlines()


def test_show_warns_when_one_launch_was_split_into_attempts(tmp_path: Path) -> None:
    """Two processes of one launch, each its own attempt at the same time: one warning naming the fix."""
    path = _write(
        tmp_path / "valgen.jsonl", _part("pA.1", "rank0", 0, ["a/0", "a/1"]) + _part("pB.1", "rank1", 50, ["b/0"])
    )
    (step,), stderr = _show(path)
    assert (step["attempt"], step["attempts"], step["split_attempts"]) == ("pB.1", 2, 2)
    (warning,) = stderr
    assert warning.startswith("warning: run run step 7: 2 attempts ran at the same time with no common source")
    assert "set OTEL_VALGEN_LAUNCH_ID to one new value per launch for all processes" in warning
    assert "torchrun/Slurm/MPI/Ray" in warning


def test_show_does_not_warn_for_a_resumed_launch(tmp_path: Path) -> None:
    """The resumed launch's attempt starts after the first stopped (or the two share a source): no warning."""
    resumed = _part("L1.1", "rank0", 0, ["a/0"]) + _part("L2.1", "rank1", 5000, ["a/0"])
    (step,), stderr = _show(_write(tmp_path / "resumed.jsonl", resumed))
    assert (step["attempt"], step["split_attempts"], stderr) == ("L2.1", 0, [])
    shared = _part("L.1", "rank0", 0, ["a/0"]) + _part("L.2", "rank0", 50, ["a/1"])
    (step,), stderr = _show(_write(tmp_path / "shared.jsonl", shared))
    assert (step["split_attempts"], stderr) == (0, [])


def test_show_reports_the_balance_of_embedded_files(tmp_path: Path) -> None:
    """Embedded files: seen = kept + dropped by reason, from the end records and the generations read."""
    (step,), _ = _show(_write(tmp_path / "valgen.jsonl", _part("L1.1", "rank0", 0, ["a/0", "a/1", "a/2"])))
    # seen 6: 1 dropped by the source, 2 left out by its presampler, 3 emitted and read; k = 64 keeps them.
    assert (step["seen"], step["kept"]) == (6, 3)
    assert step["dropped"] == {"sampled": 2, "source": 1, "invalid": 0, "undelivered": 0, "not_ended": 0}


def test_show_passes_the_samplers_balance_and_split_mark_through(tmp_path: Path) -> None:
    """Collector output: the summary's dropped by reason and valgen.attempts_concurrent; older summaries: null, 0."""
    summary = _summary("L1.1", 0, "complete", 9, 1)
    attributes = summary["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0]["attributes"]
    balance = {contract.DROPPED: 8, contract.DROPPED_PREFIX + "sampled": 6, contract.DROPPED_PREFIX + "undelivered": 2}
    attributes += [{"key": k, "value": _value(v)} for k, v in {**balance, contract.ATTEMPTS_CONCURRENT: 1}.items()]
    (step,), stderr = _show(
        _write(tmp_path / "new.jsonl", [_gen("L1.1", "x/0", 40, 100, **{contract.RANK: 1}), summary])
    )
    assert (step["dropped"], step["split_attempts"]) == ({"sampled": 6, "undelivered": 2}, 2)
    (warning,) = stderr
    assert warning.startswith("warning: run run step 7: 2 attempts ran at the same time")
    assert "OTEL_VALGEN_LAUNCH_ID" in warning
    old = [_gen("", "x/0", 40, 100, **{contract.RANK: 1}), _summary("", 0, "complete", 9, 1)]
    (step,), stderr = _show(_write(tmp_path / "old.jsonl", old))
    assert (step["dropped"], step["split_attempts"], stderr) == (None, 0, [])


def test_show_warns_about_a_source_that_ran_verls_own_table(tmp_path: Path) -> None:
    """Embedded files: a part marked valgen.integration=unhooked (no generation): named in a warning and in the JSON."""
    common = {contract.RUN_ID: "run", contract.STEP: 7, contract.ATTEMPT: "L1.1", contract.SOURCE: "trainer"}
    marks = {contract.INTEGRATION: contract.INTEGRATION_UNHOOKED, contract.UNHOOKED_REASON: "override"}
    unhooked = [
        _request(contract.EVENT_VALIDATION_START, {**common, **marks}, "i-trainer", 10),
        _request(
            contract.EVENT_VALIDATION_END, {**common, **marks, contract.SEEN: 0, contract.EMITTED: 0}, "i-trainer", 20
        ),
    ]
    (step,), stderr = _show(_write(tmp_path / "valgen.jsonl", _part("L1.1", "rank0", 0, ["a/0"]) + unhooked))
    assert (step["sources_unhooked"], step["seen"], step["kept"]) == (["trainer@i-trainer"], 4, 1)
    (warning,) = stderr
    assert warning.startswith("warning: run run step 7: verl's own validation table ran in trainer@i-trainer")
    assert "put ValGenerationsMixin first" in warning
    (step,), stderr = _show(_write(tmp_path / "hooked.jsonl", _part("L1.1", "rank0", 0, ["a/0"])))
    assert (step["sources_unhooked"], stderr) == ([], [])


def test_show_passes_the_samplers_unhooked_sources_through(tmp_path: Path) -> None:
    """Collector output: the summary's valgen.sources_unhooked, with the warning; older summaries: none."""
    summary = _summary("L1.1", 0, "complete", 1, 1)
    attributes = summary["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0]["attributes"]
    attributes.append({"key": contract.SOURCES_UNHOOKED, "value": _value(["rollouter@i-r"])})
    ranked = _gen("L1.1", "x/0", 40, 100, **{contract.RANK: 1})
    (step,), stderr = _show(_write(tmp_path / "new.jsonl", [ranked, summary]))
    assert step["sources_unhooked"] == ["rollouter@i-r"]
    (warning,) = stderr
    assert warning.startswith("warning: run run step 7: verl's own validation table ran in rollouter@i-r")
    (step,), stderr = _show(_write(tmp_path / "old.jsonl", [ranked, _summary("L1.1", 0, "complete", 1, 1)]))
    assert (step["sources_unhooked"], stderr) == ([], [])


# -- rules of show that no vector pins ------------------------------------------------------------


def test_late_generations_are_never_a_steps_sample_even_without_its_summary(tmp_path: Path) -> None:
    """Forwarded late generations (smallest keys) stay out of the sample when the files lack the step's summary."""
    ranked = [_gen("L1.1", f"x/{i}", 40 + i, 100, **{contract.RANK: i + 1}) for i in range(3)]
    late = [_gen("L1.1", f"late/{i}", i, 5000, **{contract.LATE: True}) for i in range(3)]
    path = _write(tmp_path / "valgen.jsonl", [*ranked, *late])  # the summary went to a file not read here
    (step,) = _show_json(path)
    assert [g["sample_id"] for g in step["generations"]] == ["x/0", "x/1", "x/2"]
    (tmp_path / "late").mkdir()
    for shown in _show_json(_write(tmp_path / "late" / "valgen.jsonl", late)):  # only late ones: nothing to show
        assert (shown["kept"], shown["generations"]) == (0, [])


def test_an_attempt_without_a_summary_is_never_chosen_nor_counted(tmp_path: Path) -> None:
    """Collector output: an attempt whose summary is not in the files loses to one with a summary, and is no attempt."""
    path = _write(
        tmp_path / "valgen.jsonl",
        [
            _gen("L1.1", "x/0", 40, 100, **{contract.RANK: 1}),
            _summary("L1.1", 0, "wait", 5, 1),
            # a later attempt's ranked records, its summary in a file not read (or not written yet)
            _gen("L2.1", "y/0", 20, 9100, **{contract.RANK: 1}),
            _gen("L2.1", "y/1", 30, 9100, **{contract.RANK: 2}),
        ],
    )
    (step,) = _show_json(path)
    assert (step["attempt"], step["attempts"]) == ("L1.1", 1)
    assert [g["sample_id"] for g in step["generations"]] == ["x/0"]


@pytest.mark.parametrize(
    ("count", "expected"), [(0, []), (1, ["x/0"]), (2, ["x/0", "x/1"]), (9, ["x/0", "x/1", "x/2"])]
)
def test_show_count_on_collector_output_shows_at_most_k(tmp_path: Path, count: int, expected: list[str]) -> None:
    """--count k over one closed group keeps its k best-ranked records, none when k is 0, all when k is larger."""
    requests = [_gen("L1.1", f"x/{i}", 10 * (i + 1), 100, **{contract.RANK: i + 1}) for i in range(3)]
    path = _write(tmp_path / "valgen.jsonl", [*requests, _summary("L1.1", 0, "complete", 9, 3)])
    (step,) = _show_json(path, "--count", str(count))
    assert [g["sample_id"] for g in step["generations"]] == expected
    assert step["kept"] == len(expected)


def test_show_csv_ranks_start_at_one_like_valgen_rank(tmp_path: Path) -> None:
    """The CSV's rank column is 1, 2, 3 for the records the sampler ranked 1, 2, 3."""
    import csv
    import io

    requests = [_gen("L1.1", f"x/{i}", 10 * (i + 1), 100, **{contract.RANK: i + 1}) for i in range(3)]
    path = _write(tmp_path / "valgen.jsonl", [*requests, _summary("L1.1", 0, "complete", 9, 3)])
    result = CliRunner().invoke(main, ["show", str(path), "--format", "csv"])
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert [(row["rank"], row["sample_id"]) for row in rows] == [("1", "x/0"), ("2", "x/1"), ("3", "x/2")]
