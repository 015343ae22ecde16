"""Training rollouts: the group view, log_rollouts, and kinds kept apart everywhere."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

import otel_valgen as vg
from otel_valgen import _process, contract
from otel_valgen.cli.main import main
from otel_valgen.exporter.steps import assemble
from otel_valgen.reader import Generation, ReadError, Summary, read_paths
from otel_valgen.sampling import GroupView, SortKey, group_view, sample_key, untagged
from otel_valgen.selection import select_steps
from otel_valgen.testing import capture_records
from tests.conftest import REPO

VECTORS = REPO / "testdata" / "sampling"
SEED = 42


def _orders(record: dict[str, str], seed: int) -> tuple[SortKey, SortKey]:
    prompt, sid = record["prompt_id"], record["sample_id"]
    prompt_key = int(record["prompt_key"]) if "prompt_key" in record else sample_key(seed, prompt)
    key = int(record["sample_key"]) if "sample_key" in record else sample_key(seed, sid)
    return SortKey.of(prompt_key, prompt), SortKey.of(key, sid)


def test_group_view_matches_the_shared_vectors() -> None:
    """Every case of testdata/sampling/group_view.json keeps the expected responses, ranked, and prompts."""
    data = json.loads((VECTORS / "group_view.json").read_text(encoding="utf-8"))
    assert data["cases"]
    for case in data["cases"]:
        seed = int(case["seed"])
        items = [(*_orders(record, seed), record["sample_id"]) for record in case["records"]]
        assert [sid for _, _, sid in group_view(items, case["k"])] == case["expected"], case["name"]
        view: GroupView[str] = GroupView(case["k"])
        for prompt, order, sid in items:
            view.offer(prompt, order, sid)
        assert view.prompts() == len(case["expected_prompts"]), case["name"]
        assert list(dict.fromkeys(p.sample_id.decode() for p, _, _ in view.items())) == case["expected_prompts"]


@settings(max_examples=60, deadline=None)
@given(
    responses=st.lists(st.tuples(st.integers(0, 15), st.integers(0, 5)), min_size=1, max_size=60, unique=True),
    k=st.integers(0, 6),
    parts=st.integers(1, 4),
    data=st.data(),
)
def test_group_view_is_mergeable(responses: list[tuple[int, int]], k: int, parts: int, data: st.DataObject) -> None:
    """The group view of a union is the group view of its parts' group views, however the responses are split."""
    items = [
        (SortKey.of(sample_key(SEED, f"p{p}"), f"p{p}"), SortKey.of(sample_key(SEED, f"p{p}/{i}"), f"p{p}/{i}"), (p, i))
        for p, i in responses
    ]
    owners = [data.draw(st.integers(0, parts - 1)) for _ in items]
    merged = [
        entry
        for part in range(parts)
        for entry in group_view([item for item, owner in zip(items, owners, strict=True) if owner == part], k)
    ]
    assert group_view(merged, k) == group_view(items, k)
    kept_prompts = {item[0] for item in group_view(items, k)}
    assert len(kept_prompts) == min(k, len({p for p, _ in responses}))
    assert len(group_view(items, k)) == sum(1 for i in items if i[0] in kept_prompts)


def _batch(prompts: int, n: int, prefix: str = "q") -> dict[str, list[Any]]:
    """A GRPO batch: each of ``prompts`` prompts with its n responses together, and every rollout column."""
    rows = [(p, i) for p in range(prompts) for i in range(n)]
    return {
        "prompts": [f"{prefix} prompt {p}" for p, _ in rows],
        "responses": [f"answer {p}.{i}" for p, i in rows],
        "rewards": [float(i % 2) for _, i in rows],
        "prompt_ids": [f"{prefix}{p}" for p, _ in rows],
        "advantages": [i - (n - 1) / 2 for _, i in rows],
        "response_lengths": [10 + i for _, i in rows],
        "truncated": [i == n - 1 for _, i in rows],
    }


def _generations(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r["attributes"] for r in records if r["event_name"] == contract.EVENT_GENERATION]


def _smallest_prompts(ids: list[str], k: int, seed: int = SEED) -> set[str]:
    return {pid for _, pid in sorted((sample_key(seed, pid), pid) for pid in set(ids))[:k]}


def test_rollouts_are_off_by_default() -> None:
    """Without rollout_count (OTEL_VALGEN_ROLLOUT_COUNT) a call sends nothing and counts nothing."""
    with capture_records(run_id="r", progress_interval_s=0) as records:
        assert vg.log_rollouts(**_batch(3, 2), step=1) == 0
    assert list(records) == []
    assert vg.stats()["generations_seen"] == 0


def test_the_environment_turns_rollouts_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """OTEL_VALGEN_ROLLOUT_COUNT=2 alone keeps 2 prompts per step."""
    monkeypatch.setenv("OTEL_VALGEN_ROLLOUT_COUNT", "2")
    with capture_records(run_id="r", progress_interval_s=0) as records:
        assert vg.log_rollouts(**_batch(5, 3), step=1) == 15
    assert len({g[contract.PROMPT_ID] for g in _generations(list(records))}) == 2


@pytest.mark.parametrize("presample", [True, False])
def test_log_rollouts_sends_k_whole_prompts_with_their_columns(presample: bool) -> None:
    """Exactly k prompts, each with all its responses and columns (presampled: only those sent); ends count prompts."""
    batch = _batch(6, 4)
    with capture_records(run_id="r", rollout_count=2, presample=presample, progress_interval_s=0) as records:
        assert vg.log_rollouts(**batch, step=3, extra={"acc": [1.0] * 24}) == 24
    sent = _generations(list(records))
    if presample:
        assert {g[contract.PROMPT_ID] for g in sent} == _smallest_prompts(batch["prompt_ids"], 2)
        assert len(sent) == 8
    else:
        assert len(sent) == 24
    for g in sent:
        assert g[contract.KIND] == contract.KIND_ROLLOUT
        assert g[contract.PROMPT_KEY] == sample_key(SEED, g[contract.PROMPT_ID])
        assert g[contract.SAMPLE_ID].startswith(g[contract.PROMPT_ID] + "/")
        assert isinstance(g[contract.ADVANTAGE], float)
        assert isinstance(g[contract.RESPONSE_LENGTH], int)
        assert isinstance(g[contract.TRUNCATED], bool)
        assert g[contract.EXTRA_PREFIX + "acc"] == 1.0
        assert g[contract.SAMPLE_COUNT] == 2
    (end,) = [r["attributes"] for r in records if r["event_name"] == contract.EVENT_VALIDATION_END]
    assert (end[contract.KIND], end[contract.PROMPTS_SEEN], end[contract.SEEN]) == (contract.KIND_ROLLOUT, 6, 24)
    assert end[contract.EMITTED] == len(sent)
    starts = [r for r in records if r["event_name"] == contract.EVENT_VALIDATION_START]
    assert [s["attributes"][contract.KIND] for s in starts] == [contract.KIND_ROLLOUT]


def test_a_prompt_keeps_its_key_in_a_later_epoch() -> None:
    """The same prompts at another step get the same prompt keys, so the same prompts are chosen again."""
    batch = _batch(8, 2)
    with capture_records(run_id="r", rollout_count=3, progress_interval_s=0) as records:
        vg.log_rollouts(**batch, step=1)
        vg.log_rollouts(**batch, step=50)
    by_step: dict[int, set[tuple[str, int]]] = {}
    for g in _generations(list(records)):
        by_step.setdefault(g[contract.STEP], set()).add((g[contract.PROMPT_ID], g[contract.PROMPT_KEY]))
    assert by_step[1] == by_step[50]
    assert len(by_step[1]) == 3


def test_prompt_ids_default_to_a_hash_of_the_prompt_text() -> None:
    """Without prompt_ids, a prompt's id is derived from its text: equal prompts share it, at every step."""
    batch = _batch(4, 3)
    del batch["prompt_ids"]
    with capture_records(run_id="r", rollout_count=1, progress_interval_s=0) as records:
        vg.log_rollouts(**batch, step=1)
        vg.log_rollouts(**batch, step=2)
    sent = _generations(list(records))
    assert len(sent) == 6
    assert len({g[contract.PROMPT_ID] for g in sent}) == 1


def test_a_sent_part_keeps_its_sample_but_not_its_texts() -> None:
    """A sent part still holds the step's kept prompts (the next part compares with them), not their records."""
    with capture_records(run_id="r", rollout_count=2, progress_interval_s=0):
        vg.log_rollouts(**_batch(4, 3), step=1)
        emitter = _process.current_emitter()
        assert emitter is not None
        (state,) = emitter._parts.values()
        assert state.kept is not None
        assert len(state.kept._kept) == 6
        assert [item.record for item in state.kept._kept.kept()] == [None] * 6


def test_end_records_count_the_prompts_of_every_part() -> None:
    """Two calls of one step are two parts of one attempt: the second end record counts both calls' prompts."""
    with capture_records(run_id="r", rollout_count=2, progress_interval_s=0) as records:
        vg.log_rollouts(**_batch(3, 2, prefix="a"), step=1)
        vg.log_rollouts(**_batch(4, 2, prefix="b"), step=1)
    ends = [r["attributes"] for r in records if r["event_name"] == contract.EVENT_VALIDATION_END]
    assert [(end[contract.PROMPTS_SEEN], end[contract.SEEN]) for end in ends] == [(3, 6), (7, 14)]
    assert len({end[contract.ATTEMPT] for end in ends}) == 1


@pytest.mark.parametrize("presample", [True, False])
def test_a_prompt_in_two_calls_of_a_step_adds_responses(presample: bool) -> None:
    """The same prompts in a later call of the step (a fully-async sync cycle): new sample ids, not redeliveries."""
    batch = _batch(5, 2)
    with capture_records(run_id="r", rollout_count=2, presample=presample, progress_interval_s=0) as records:
        vg.log_rollouts(**batch, step=1)
        vg.log_rollouts(**batch, step=1)
    sent = _generations(list(records))
    kept = _smallest_prompts(batch["prompt_ids"], 2) if presample else set(batch["prompt_ids"])
    assert sorted(untagged(g[contract.SAMPLE_ID]) for g in sent) == sorted(f"{p}/{i}" for p in kept for i in range(4))
    chosen = group_view(
        [(*_orders({"prompt_id": g[contract.PROMPT_ID], "sample_id": g[contract.SAMPLE_ID]}, SEED), g) for g in sent],
        2,
    )
    assert {g[contract.PROMPT_ID] for _, _, g in chosen} == _smallest_prompts(batch["prompt_ids"], 2)
    assert len(chosen) == 8  # both calls' responses of each kept prompt


@settings(max_examples=25, deadline=None)
@given(prompts=st.integers(1, 12), n=st.integers(1, 4), k=st.integers(1, 5), processes=st.integers(1, 3))
def test_presampled_processes_merge_to_the_single_choice(prompts: int, n: int, k: int, processes: int) -> None:
    """Prompts spread over processes, each presampling its own bottom-k prompts: the merged view is exact."""
    sent: list[dict[str, Any]] = []
    for process in range(processes):
        mine = {key: values[process::processes] for key, values in _batch(prompts, 1).items()}
        batch = {key: [value for value in values for _ in range(n)] for key, values in mine.items()}
        if not batch["prompts"]:
            continue
        with capture_records(run_id="r", rollout_count=k, progress_interval_s=0, source=f"p{process}") as records:
            vg.log_rollouts(**batch, step=1)
        sent.extend(_generations(list(records)))
        _process.reset_for_testing()
    items = [
        (
            SortKey.of(g[contract.PROMPT_KEY], g[contract.PROMPT_ID]),
            SortKey.of(g[contract.SAMPLE_KEY], g[contract.SAMPLE_ID]),
            g,
        )
        for g in sent
    ]
    kept = {g[contract.PROMPT_ID] for _, _, g in group_view(items, k)}
    assert kept == _smallest_prompts([f"q{p}" for p in range(prompts)], k)
    assert len(group_view(items, k)) == n * min(k, prompts)


def _read(directory: Path) -> list[Any]:
    errors: list[ReadError] = []
    records = list(read_paths([directory], errors.append))
    assert errors == []
    return records


@pytest.mark.parametrize("block", [True, False])
def test_validation_and_rollouts_of_one_step_never_share_a_group(tmp_path: Path, block: bool) -> None:
    """One step's validation (a block, or a block-less part) and rollouts: separate parts, selected apart."""
    vg.configure(run_id="r", count=2, rollout_count=1, directory=str(tmp_path), progress_interval_s=0)
    if block:
        with vg.validation(step=5):
            vg.log_generations([f"v{i}" for i in range(4)], ["out"] * 4, [1.0] * 4)
    else:
        vg.log_generations([f"v{i}" for i in range(4)], ["out"] * 4, [1.0] * 4, step=5)
    vg.log_rollouts(**_batch(3, 2), step=5)
    vg.shutdown()
    records = _read(tmp_path)
    (validation,) = select_steps(records)
    (rollout,) = select_steps(records, kind=contract.KIND_ROLLOUT)
    assert validation.attempt == rollout.attempt  # one launch, first part of the step in each kind
    assert {g.kind for g in validation.generations} == {contract.KIND_VALIDATION}
    assert (validation.kept, validation.seen, validation.kind) == (2, 4, contract.KIND_VALIDATION)
    assert {g.kind for g in rollout.generations} == {contract.KIND_ROLLOUT}
    assert (rollout.kept, rollout.seen, rollout.prompts_kept, rollout.prompts_seen) == (2, 6, 1, 3)
    assert validation.complete
    assert rollout.complete


def test_show_kind_rollout_prints_whole_prompts_and_their_columns(tmp_path: Path) -> None:
    """``show --kind rollout``: the step's kept prompts with every response; the default shows validation."""
    vg.configure(run_id="r", count=2, rollout_count=2, directory=str(tmp_path), progress_interval_s=0)
    vg.log_generations(["v0", "v1", "v2"], ["out"] * 3, step=1)
    vg.log_rollouts(**_batch(5, 3), step=1)
    vg.shutdown()
    result = CliRunner().invoke(main, ["show", str(tmp_path), "--format", "json", "--kind", "rollout"])
    assert result.exit_code == 0, result.output
    (step,) = [json.loads(line) for line in result.stdout.splitlines()]
    assert (step["kind"], step["kept"], step["prompts_kept"], step["prompts_seen"], step["seen"]) == (
        contract.KIND_ROLLOUT,
        6,
        2,
        5,
        15,
    )
    first = step["generations"][0]
    assert first["prompt_id"] == first["sample_id"].split("/")[0]
    assert {"advantage", "response_length", "truncated"} <= set(first)
    validation = CliRunner().invoke(main, ["show", str(tmp_path), "--format", "json"])
    (only,) = [json.loads(line) for line in validation.stdout.splitlines()]
    assert (only["kind"], only["kept"]) == (contract.KIND_VALIDATION, 2)
    table = CliRunner().invoke(main, ["show", str(tmp_path), "--kind", "rollout"])
    assert table.exit_code == 0, table.output


def _summary(kept: int, prompts: int) -> Summary:
    return Summary(
        "r",
        1,
        {
            contract.ATTEMPT: "L.1",
            contract.KIND: contract.KIND_ROLLOUT,
            contract.CLOSED_REASON: "complete",
            contract.KEPT: kept,
            contract.SEEN: 12,
            contract.PROMPTS_KEPT: prompts,
            contract.PROMPTS_SEEN: 6,
        },
    )


def _ranked(prompt: str, i: int, rank: int) -> Generation:
    sid = f"{prompt}/{i}"
    return Generation(
        "r",
        1,
        sid,
        sample_key(SEED, sid),
        "in",
        "out",
        seed=SEED,
        key_version=2,
        rank=rank,
        attempt="L.1",
        kind=contract.KIND_ROLLOUT,
        prompt_id=prompt,
        prompt_key=sample_key(SEED, prompt),
    )


def test_show_cuts_collector_rollouts_to_k_whole_prompts() -> None:
    """Collector output of a rollout step, shown with --count 1: the smallest prompt, with all its responses."""
    records: list[Any] = [
        _ranked(p, i, rank) for rank, (p, i) in enumerate(((p, i) for p in "ab" for i in range(3)), 1)
    ]
    records.append(_summary(6, 2))
    (shown,) = select_steps(records, kind=contract.KIND_ROLLOUT)
    assert (shown.kept, shown.prompts_kept, shown.prompts_seen, shown.complete) == (6, 2, 6, True)
    (cut,) = select_steps(records, kind=contract.KIND_ROLLOUT, count=1)
    smallest = min("ab", key=lambda p: (sample_key(SEED, p), p))
    assert {g.prompt_id for g in cut.generations} == {smallest}
    assert cut.kept == 3
    assert select_steps(records) == []  # no validation in these files


def test_the_exporter_assembles_each_kind_apart() -> None:
    """Step assembly groups by kind too: the validation step and the rollout step are steps of their own."""
    validation = Generation("r", 1, "v/0", 1, "in", "out", rank=1, attempt="L.1")
    rollouts = [_ranked("a", i, i + 1) for i in range(2)]
    summaries = [
        Summary("r", 1, {contract.ATTEMPT: "L.1", contract.KEPT: 1, contract.CLOSED_REASON: "complete"}),
        _summary(2, 1),
    ]
    out = assemble((record, {}) for record in [validation, *rollouts, *summaries])
    assert [(step.step, step.kind, [g.sample_id for g in step.generations]) for step in out.steps] == [
        (1, contract.KIND_VALIDATION, ["v/0"]),
        (1, contract.KIND_ROLLOUT, ["a/0", "a/1"]),
    ]
    assert (out.validation_steps, out.rollout_steps) == (1, 1)
    assert out.steps[0].key[:3] == out.steps[1].key[:3]  # same run, step and attempt: told apart by kind


def test_the_reader_skips_unknown_kinds_and_rollouts_without_a_prompt(tmp_path: Path) -> None:
    """A record of an unknown kind, or a rollout generation without valgen.prompt_id, is reported, not read."""

    def generation(attributes: dict[str, Any]) -> dict[str, Any]:
        base = {contract.RUN_ID: "r", contract.STEP: 1, contract.SAMPLE_ID: "x/0", **attributes}
        return {
            "eventName": contract.EVENT_GENERATION,
            "body": {"kvlistValue": {"values": []}},
            "attributes": [
                {"key": key, "value": {"intValue": str(v)} if isinstance(v, int) else {"stringValue": v}}
                for key, v in base.items()
            ],
        }

    logs = [
        generation({contract.KIND: "training"}),
        generation({contract.KIND: contract.KIND_ROLLOUT}),
        generation({contract.KIND: contract.KIND_ROLLOUT, contract.PROMPT_ID: "x"}),
    ]
    path = tmp_path / "f.jsonl"
    path.write_text(
        "\n".join(json.dumps({"resourceLogs": [{"scopeLogs": [{"logRecords": [log]}]}]}) for log in logs) + "\n"
    )
    errors: list[ReadError] = []
    records = list(read_paths([path], errors.append))
    assert [(r.kind, r.prompt_id) for r in records if isinstance(r, Generation)] == [(contract.KIND_ROLLOUT, "x")]
    assert len(errors) == 2


def _by_response(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["body"][contract.BODY_OUTPUT]: r for r in records if r["event_name"] == contract.EVENT_GENERATION}


def test_every_column_reaches_its_own_response() -> None:
    """Each response's reward, advantage, length, truncation, param version, ground truth, data source: its own."""
    rows = [(p, i) for p in range(3) for i in range(2)]
    batch: dict[str, list[Any]] = {
        "prompts": [f"prompt {p}" for p, _ in rows],
        "responses": [f"answer {p}.{i}" for p, i in rows],
        "rewards": [p + i / 10 for p, i in rows],
        "prompt_ids": [f"q{p}" for p, _ in rows],
        "advantages": [-(p + 1) - i / 100 for p, i in rows],
        "response_lengths": [100 * p + i for p, i in rows],
        "truncated": [(p + i) % 2 == 1 for p, i in rows],
        "param_versions": [7 - p - i for p, i in rows],
        "ground_truths": [f"gt {p}" for p, _ in rows],
        "data_sources": [f"source {p}.{i}" for p, i in rows],
    }
    with capture_records(run_id="r", rollout_count=3, presample=False, progress_interval_s=0) as records:
        assert vg.log_rollouts(**batch, step=4) == len(rows)
    sent = _by_response(list(records))
    assert sorted(sent) == sorted(batch["responses"])
    for row, (p, i) in enumerate(rows):
        record = sent[f"answer {p}.{i}"]
        attributes, body = record["attributes"], record["body"]
        assert body[contract.BODY_INPUT] == f"prompt {p}"
        assert body[contract.BODY_GROUND_TRUTH] == f"gt {p}"
        assert attributes[contract.PROMPT_ID] == f"q{p}"
        assert attributes[contract.SCORE] == batch["rewards"][row]
        assert attributes[contract.ADVANTAGE] == batch["advantages"][row]
        assert attributes[contract.RESPONSE_LENGTH] == batch["response_lengths"][row]
        assert attributes[contract.TRUNCATED] is batch["truncated"][row]
        assert attributes[contract.PARAM_VERSION] == batch["param_versions"][row]
        assert attributes[contract.DATA_SOURCE] == batch["data_sources"][row]


def test_count_and_source_arguments_win_over_the_settings() -> None:
    """``count=`` is k for the call, over rollout_count (also when rollouts are off); ``source=`` names the part."""
    batch = _batch(6, 2)
    with capture_records(run_id="r", rollout_count=4, progress_interval_s=0, source="main") as records:
        assert vg.log_rollouts(**batch, step=1, count=1, source="trainer") == 12
    sent = _generations(list(records))
    assert {g[contract.PROMPT_ID] for g in sent} == _smallest_prompts(batch["prompt_ids"], 1)
    assert {g[contract.SAMPLE_COUNT] for g in sent} == {1}
    assert {r["attributes"][contract.SOURCE] for r in records} == {"trainer"}
    with capture_records(run_id="r", progress_interval_s=0) as records:  # rollout_count 0: off unless count= asks
        assert vg.log_rollouts(**batch, step=1, count=2) == 12
    assert {g[contract.PROMPT_ID] for g in _generations(list(records))} == _smallest_prompts(batch["prompt_ids"], 2)


def test_columns_of_unequal_lengths_drop_the_call() -> None:
    """A column shorter than the others drops the whole call, counted as dropped.length_mismatch; nothing is sent."""
    batch = _batch(3, 2)
    batch["advantages"] = batch["advantages"][:-1]
    with capture_records(run_id="r", rollout_count=3, progress_interval_s=0) as records:
        assert vg.log_rollouts(**batch, step=1) == 0
    assert list(records) == []
    stats = vg.stats()
    assert (stats["dropped.length_mismatch"], stats["generations_seen"], stats["internal_errors"]) == (6, 6, 0)


def test_a_call_without_a_step_is_a_counted_drop() -> None:
    """``step=None`` drops the call, counted as dropped.missing_step, never raised."""
    with capture_records(run_id="r", rollout_count=3, progress_interval_s=0) as records:
        assert vg.log_rollouts(**_batch(2, 2), step=None) == 0  # type: ignore[arg-type]
    assert list(records) == []
    assert (vg.stats()["dropped.missing_step"], vg.stats()["internal_errors"]) == (4, 0)


# -- the watch-list (rollout_rate): a prompt chosen once is chosen every time it comes back ----


def _watch_list_run(
    tmp_path: Path, rate: float | None, presample: bool = True, k: int = 16
) -> tuple[dict[int, set[str]], dict[int, set[str]]]:
    """64 prompts (2 responses each) in 3 shuffled epochs of 4 steps of 16 prompts, through the embedded sink.

    Returns each step's kept prompts as ``show`` selects them from the files, and each step's prompts.
    """
    import random

    vg.configure(
        run_id="r",
        rollout_count=k,
        rollout_rate=rate,
        presample=presample,
        directory=str(tmp_path),
        progress_interval_s=0,
    )
    rng = random.Random(33)
    prompts = [f"p{i:04d}" for i in range(64)]
    step = 0
    batches: dict[int, set[str]] = {}
    for _ in range(3):
        rng.shuffle(prompts)
        for start in range(0, 64, 16):
            step += 1
            rows = [(pid, i) for pid in prompts[start : start + 16] for i in range(2)]
            vg.log_rollouts(
                [f"prompt {pid}" for pid, _ in rows],
                [f"answer {pid}.{i}" for pid, i in rows],
                prompt_ids=[pid for pid, _ in rows],
                step=step,
            )
            batches[step] = {pid for pid, _ in rows}
    vg.shutdown()
    steps = select_steps(_read(tmp_path), kind=contract.KIND_ROLLOUT)
    return {s.step: {g.prompt_id or "" for g in s.generations} for s in steps}, batches


@pytest.mark.parametrize("presample", [True, False])
def test_a_watched_prompt_is_chosen_every_time_it_comes_back(tmp_path: Path, presample: bool) -> None:
    """With rollout_rate, each step keeps exactly its prompts whose key is below floor(rate * 2**63): every epoch."""
    from fractions import Fraction

    rate = 0.125
    kept, batches = _watch_list_run(tmp_path, rate, presample)
    limit = int(Fraction(rate) * 2**63)  # the threshold by exact fractions, not by the library
    watched = {pid for batch in batches.values() for pid in batch if sample_key(SEED, pid) < limit}
    assert 2 <= len(watched) <= 16  # the seed gives some, and the cap (16) is never reached
    for step, batch in batches.items():
        assert kept.get(step, set()) == batch & watched, step
    # Each watched prompt came back once per epoch and was chosen every time.
    assert all(sum(pid in s for s in kept.values()) == 3 for pid in watched)
    generations = [r for r in _read(tmp_path) if isinstance(r, Generation)]
    assert generations
    assert {g.attributes[contract.SAMPLE_RATE] for g in generations} == {rate}
    assert {s.sample_rate for s in select_steps(_read(tmp_path), kind=contract.KIND_ROLLOUT) if s.generations} == {rate}


def test_without_a_rate_each_step_keeps_exactly_k(tmp_path: Path) -> None:
    """The default (no rollout_rate) is unchanged: the k smallest prompts of each batch, no rate on the wire."""
    kept, batches = _watch_list_run(tmp_path, None, k=4)
    for step, batch in batches.items():
        assert kept[step] == _smallest_prompts(sorted(batch), 4), step
    for record in _read(tmp_path):
        attributes = getattr(record, "attributes", {})
        assert contract.SAMPLE_RATE not in attributes
        assert contract.PROMPTS_UNDER_RATE not in attributes


def test_more_prompts_under_the_rate_than_k_keep_the_k_smallest(caplog: pytest.LogCaptureFixture) -> None:
    """Rate 1 with k = 2: the 2 smallest prompts, the rest under the rate counted on the end record and warned."""
    batch = _batch(6, 2)
    with capture_records(run_id="r", rollout_count=2, rollout_rate=1.0, progress_interval_s=0) as records:
        assert vg.log_rollouts(**batch, step=1) == 12
    sent = _generations(list(records))
    assert {g[contract.PROMPT_ID] for g in sent} == _smallest_prompts(batch["prompt_ids"], 2)
    assert {g[contract.SAMPLE_RATE] for g in sent} == {1.0}
    (end,) = [r["attributes"] for r in records if r["event_name"] == contract.EVENT_VALIDATION_END]
    assert (end[contract.SAMPLE_RATE], end[contract.PROMPTS_UNDER_RATE]) == (1.0, 6)
    assert "rollout_rate_over_cap" in caplog.text


def test_the_rate_setting_is_read_and_checked(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """OTEL_VALGEN_ROLLOUT_RATE: a float in (0, 1]; unset or invalid (warned) is off."""
    from otel_valgen._settings import resolve_settings

    assert resolve_settings(run_id="r").rollout_rate is None
    monkeypatch.setenv("OTEL_VALGEN_ROLLOUT_RATE", "0.015625")
    assert resolve_settings(run_id="r").rollout_rate == 0.015625
    assert resolve_settings(run_id="r", rollout_rate=0.5).rollout_rate == 0.5
    for bad in ("0", "1.5", "nan", "x"):
        monkeypatch.setenv("OTEL_VALGEN_ROLLOUT_RATE", bad)
        assert resolve_settings(run_id="r").rollout_rate is None
    assert "OTEL_VALGEN_ROLLOUT_RATE" in caplog.text


def test_prompts_over_the_rate_are_never_held_and_count_as_sampled_out() -> None:
    """The presampler keys no prompt at or above the threshold into its sample; its responses are sampled out."""
    from otel_valgen.sampling import rate_threshold

    batch = _batch(40, 3)
    with capture_records(run_id="r", rollout_count=64, rollout_rate=0.25, progress_interval_s=0) as records:
        assert vg.log_rollouts(**batch, step=1) == 120
        emitter = _process.current_emitter()
        assert emitter is not None
        (state,) = emitter._parts.values()
        assert state.kept is not None
        held = {prompt for prompt, _, _ in state.kept._kept.items()}
    limit = rate_threshold(0.25)
    watched = {pid for pid in batch["prompt_ids"] if sample_key(SEED, pid) < limit}
    assert {prompt.sample_key < limit for prompt in held} == {True}
    assert {prompt.sample_id.decode() for prompt in held} == watched
    assert {g[contract.PROMPT_ID] for g in _generations(list(records))} == watched
    stats = vg.stats()
    assert stats["generations_emitted"] == 3 * len(watched)
    assert stats["generations_sampled_out"] == 120 - 3 * len(watched)
