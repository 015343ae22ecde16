"""The public API: what each call puts on the wire, presampling, end records, never raising."""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xxhash

import otel_valgen as vg
from otel_valgen import contract
from otel_valgen._records import has_repeats
from otel_valgen.reader import EndRecord, read_paths
from otel_valgen.sampling import SortKey, bottom_k, sample_key, untagged
from otel_valgen.testing import capture_records
from tests.conftest import OtlpHttpReceiver
from tests.e2e.harness import free_port


def _generations(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r["event_name"] == contract.EVENT_GENERATION]


def _ends(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r["event_name"] == contract.EVENT_VALIDATION_END]


def test_generation_record_follows_the_wire_contract() -> None:
    """A generation is an INFO record with event name, map body and the contract attributes."""
    with capture_records(run_id="r1", count=5, seed=7) as records, vg.validation(step=3, source="trainer"):
        vg.log_generations(["q"], ["a"], [0.5], ground_truths=["g"], sample_ids=["uid-1"], data_sources=["gsm8k"])
    (record,) = _generations(records)
    assert record["severity_text"] == "INFO"
    assert record["body"] == {"input": "q", "output": "a", "ground_truth": "g"}
    attributes = record["attributes"]
    assert attributes[contract.RUN_ID] == "r1"
    assert attributes[contract.STEP] == 3
    assert re.fullmatch(r"uid-1/0@[0-9a-f]{12}", attributes[contract.SAMPLE_ID])  # <uid>/<index>@<part's tag>
    assert attributes[contract.SAMPLE_KEY] == sample_key(7, "uid-1/0") == sample_key(7, attributes[contract.SAMPLE_ID])
    assert attributes[contract.SCORE] == 0.5
    assert attributes[contract.DATA_SOURCE] == "gsm8k"
    assert attributes[contract.SOURCE] == "trainer"
    assert attributes[contract.SAMPLE_COUNT] == 5
    assert record["resource"]["service.instance.id"]


def test_sample_id_defaults_to_input_hash_plus_response_index() -> None:
    """Without uids the id is the 16 hex digits of XXH64(input) plus /i for the i-th response to that input."""
    with capture_records(run_id="r", count=10) as records:
        vg.log_generations(["same", "same", "other"], ["x", "y", "z"], [1, 2, 3], step=1)
        vg.end_step(1)
    ids = sorted(untagged(r["attributes"][contract.SAMPLE_ID]) for r in _generations(records))
    same = xxhash.xxh64_hexdigest(b"same")
    other = xxhash.xxh64_hexdigest(b"other")
    assert ids == sorted([f"{same}/0", f"{same}/1", f"{other}/0"])


@pytest.mark.parametrize("size", [2, 1_000, 20_000])
def test_one_repeated_prompt_hash_is_found_among_many(size: int) -> None:
    """A call's responses share a prompt when two id hashes are equal, and only then (its /0, /1 ids)."""
    words = np.unique(np.random.default_rng(size).integers(0, 2**64, size, dtype=np.uint64))
    assert not has_repeats(words)
    twin = words[len(words) // 2]
    assert not has_repeats(np.append(words, twin ^ np.uint64(1 << 40)))  # equal low bits, another hash
    assert has_repeats(np.append(words, twin))
    assert has_repeats(np.insert(words, 0, twin))


@pytest.mark.parametrize("presample", [True, False])
def test_step_keeps_the_bottom_k_and_reports_counts(presample: bool) -> None:
    """With or without presampling the bottom-k is sent; presampling sends only those."""
    inputs = [f"prompt {i}" for i in range(100)]
    with (
        capture_records(run_id="r", count=8, seed=3, presample=presample) as records,
        vg.validation(step=2, source="s", sources_expected=2),
    ):
        for start in range(0, 100, 13):
            vg.log_generations(inputs[start : start + 13], ["o"] * len(inputs[start : start + 13]), None)
    sent = _generations(records)
    expected_ids = [
        sid
        for _, sid in bottom_k(
            ((SortKey.of(sample_key(3, i), i), i) for i in (f"{xxhash.xxh64_hexdigest(p.encode())}/0" for p in inputs)),
            8,
        )
    ]
    chosen = bottom_k(
        ((SortKey.of(r["attributes"][contract.SAMPLE_KEY], r["attributes"][contract.SAMPLE_ID]), r) for r in sent), 8
    )
    assert [untagged(r["attributes"][contract.SAMPLE_ID]) for _, r in chosen] == expected_ids
    assert len(sent) == (8 if presample else 100)
    (end,) = _ends(records)
    assert end["attributes"][contract.SEEN] == 100
    assert end["attributes"][contract.EMITTED] == len(sent)
    assert end["attributes"][contract.SOURCES_EXPECTED] == 2
    assert end["attributes"][contract.SOURCE] == "s"


def test_records_of_a_step_share_the_block_trace_id() -> None:
    """Generations and the end record of one block carry the block's trace id."""
    with capture_records(run_id="r", count=4) as records, vg.validation(step=9) as block:
        vg.log_generations(["a", "b"], ["1", "2"], [0, 1])
    trace_ids = {r["trace_id"] for r in records}
    assert trace_ids == {block.trace_id()}


def test_carrier_makes_another_block_join_the_trace() -> None:
    """A block opened with another block's carrier emits under that trace id."""
    with capture_records(run_id="r", count=4) as records:
        with vg.validation(step=1, source="driver") as driver:
            carrier = driver.carrier()
        with vg.validation(step=1, source="actor", carrier=carrier):
            vg.log_generations(["a"], ["b"], [1.0])
    assert {r["trace_id"] for r in records} == {driver.trace_id()}


def test_without_carrier_the_trace_id_is_derived_from_run_and_step() -> None:
    """Two processes with no carrier agree on the trace id of (run, step)."""
    with capture_records(run_id="r", count=4) as first, vg.validation(step=4):
        vg.log_generations(["a"], ["b"], [1.0])
    with capture_records(run_id="r", count=4) as second:
        vg.log_generations(["c"], ["d"], [1.0], step=4)
        vg.end_step(4)
    with capture_records(run_id="r", count=4) as other_step:
        vg.log_generations(["c"], ["d"], [1.0], step=5)
        vg.end_step(5)
    assert {r["trace_id"] for r in first} == {r["trace_id"] for r in second}
    assert {r["trace_id"] for r in first} != {r["trace_id"] for r in other_step}


def test_end_step_without_generations_still_sends_an_end_record() -> None:
    """A source that saw nothing still tells the collector it is done."""
    with capture_records(run_id="r", count=4) as records:
        assert vg.end_step(6, source="idle") is True
    (end,) = _ends(records)
    assert end["attributes"][contract.SEEN] == 0
    assert end["attributes"][contract.SOURCE] == "idle"


def test_missing_step_is_counted_and_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    """log_generations without a step drops the batch with a clear message."""
    with capture_records(run_id="r", count=4) as records, caplog.at_level(logging.WARNING, "otel_valgen"):
        assert vg.log_generations(["a", "b"], ["c", "d"], [1, 2]) == 0
    assert not _generations(records)
    assert vg.stats()["dropped.missing_step"] == 2
    assert "needs step=" in caplog.text


def test_unequal_lengths_drop_the_batch_and_count_it(caplog: pytest.LogCaptureFixture) -> None:
    """Columns of unequal length drop that batch (counted, warned); later batches still go."""
    with capture_records(run_id="r", count=4) as records, vg.validation(step=1):
        assert vg.log_generations(["a", "b", "c"], ["x", "y"], [1, 2, 3]) == 0
        assert vg.log_generations(["a"], ["x"], [1]) == 1
    assert len(_generations(records)) == 1
    assert vg.stats()["dropped.length_mismatch"] == 3
    assert _ends(records)[0]["attributes"][contract.DROPPED] == 3
    assert "unequal lengths" in caplog.text


def test_calls_after_shutdown_are_counted_never_raised() -> None:
    """After shutdown every call returns quietly and counts what it dropped."""
    vg.configure(run_id="r", count=2)
    vg.shutdown()
    assert vg.log_generations(["a"], ["b"], [1], step=1) == 0
    assert vg.end_step(1) is False
    with vg.validation(step=1) as block:
        vg.log_generations(["a"], ["b"], [1])
    assert block.carrier() == {}
    assert vg.flush() is True
    assert vg.stats()["dropped.after_shutdown"] == 2


def test_nothing_configured_uses_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """With no configure() call the first record configures from the environment."""
    monkeypatch.setenv("OTEL_VALGEN_RUN_ID", "from-env")
    monkeypatch.setenv("OTEL_VALGEN_COUNT", "3")
    assert vg.log_generations(["a"], ["b"], [1.0], step=1) == 1
    settings = vg.current_settings()
    assert settings is not None
    assert (settings.run_id, settings.count, settings.embedded) == ("from-env", 3, True)


def test_an_internal_error_never_reaches_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    """If the emitter itself breaks, the call returns a default and counts the error."""
    vg.configure(run_id="r")
    emitter = vg._process._emitter
    assert emitter is not None

    def broken(*args: Any, **kwargs: Any) -> int:
        raise RuntimeError("boom")

    monkeypatch.setattr(emitter, "log", broken)
    assert vg.log_generations(["a"], ["b"], [1], step=1) == 0
    assert vg.stats()["internal_errors"] == 1


def test_a_single_string_instead_of_a_list_is_dropped_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    """Passing a bare string where a column is expected drops that call, counted and warned."""
    vg.configure(run_id="r")
    assert vg.log_generations("abc", ["x", "y"], step=1) == 0
    assert vg.stats()["dropped.bad_columns"] == 2
    assert vg.stats().get("internal_errors", 0) == 0
    assert "must be a sequence" in caplog.text


def test_public_api_is_stable() -> None:
    """The names exported by the package stay what the README documents."""
    assert vg.__all__ == [
        "Settings",
        "Validation",
        "configure",
        "current_settings",
        "end_step",
        "flush",
        "log_generations",
        "log_rollouts",
        "sample_key",
        "shutdown",
        "stats",
        "validation",
    ]


# -- shutdown() says whether everything was delivered ----------------------------------------


@pytest.mark.parametrize("sink", ["embedded", "otlp_http"])
def test_shutdown_returns_true_after_a_clean_export(sink: str, otlp_http: OtlpHttpReceiver, tmp_path: Path) -> None:
    """A step delivered, then shutdown(): True, with every record exported and none failed."""
    endpoint = otlp_http.endpoint if sink == "otlp_http" else None
    vg.configure(run_id="clean", count=1, endpoint=endpoint, directory=str(tmp_path), progress_interval_s=0)
    with vg.validation(step=1) as block:
        vg.log_generations(["a", "b"], ["x", "y"], [1.0, 0.0])
    assert block.flushed is True
    assert vg.shutdown() is True
    stats = vg.stats()
    assert (stats["records_exported"], stats["records_export_failed"], stats["records_spooled"]) == (3, 0, 0)


def test_shutdown_inside_an_open_block_delivers_it_and_returns_true(tmp_path: Path) -> None:
    """shutdown() ends an open block itself; its records reach the embedded sink and it returns True."""
    vg.configure(run_id="open", count=2, directory=str(tmp_path), progress_interval_s=0)
    block = vg.validation(step=3).__enter__()
    try:
        vg.log_generations(["a", "b", "c"], ["x", "y", "z"], None)
        assert vg.shutdown() is True
    finally:
        block.__exit__(None, None, None)
    ends = [r for r in read_paths([tmp_path], pytest.fail) if isinstance(r, EndRecord)]
    assert [(e.step, e.seen, e.emitted) for e in ends] == [(3, 3, 2)]


@pytest.mark.parametrize(
    ("timeout_s", "sdk_timeout", "counter"),
    [(0.3, "5", "flush_timeouts"), (8.0, "1", "records_export_failed")],
    ids=["shutdown-timed-out", "export-failed"],
)
def test_shutdown_returns_false_when_the_collector_is_unreachable(
    timeout_s: float, sdk_timeout: str, counter: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Nothing listens at the endpoint: shutdown() is False, whether it gave up waiting or the export failed."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", sdk_timeout)  # the SDK's deadline for one export, retries included
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens here
    vg.configure(run_id="down", count=2, endpoint=endpoint, spool=False, directory=str(tmp_path), progress_interval_s=0)
    block = vg.validation(step=1).__enter__()
    try:
        vg.log_generations(["a", "b", "c"], ["x", "y", "z"], None)
        started = time.monotonic()
        assert vg.shutdown(timeout_s) is False
        assert time.monotonic() - started < timeout_s + 2.0
    finally:
        block.__exit__(None, None, None)
    assert vg.stats()[counter] > 0
    assert vg.stats()["records_exported"] == 0


def test_an_enclosing_block_lends_its_source_trace_and_count_only_to_its_own_step() -> None:
    """log_generations(step=2) inside a block of step 1 takes the configured source and k, and step 2's trace."""
    with (
        capture_records(run_id="r", count=4, source="main", progress_interval_s=0) as records,
        vg.validation(step=1, source="rollouter", count=2),
    ):
        vg.log_generations(["a"], ["x"], None)
        vg.log_generations(["b", "c", "d"], ["y", "z", "w"], None, step=2)
    step_1 = [r for r in records if r["attributes"][contract.STEP] == 1]
    step_2 = [r for r in records if r["attributes"][contract.STEP] == 2]
    assert {r["attributes"][contract.SOURCE] for r in step_1} == {"rollouter"}
    assert {r["attributes"][contract.SOURCE] for r in step_2} == {"main"}
    assert len(_generations(step_2)) == 3  # k = 4, not the block's 2
    assert {r["attributes"][contract.SAMPLE_COUNT] for r in _generations(step_2)} == {4}
    assert {r["trace_id"] for r in step_1}.isdisjoint(r["trace_id"] for r in step_2)


def test_an_empty_uid_falls_back_to_the_input_hash() -> None:
    """An empty sample id, alone or among others, is replaced by the hash of the generation's input."""
    with capture_records(run_id="r", count=10) as records:
        vg.log_generations(["q1", "q2"], ["x", "y"], None, sample_ids=["", "uid-2"], step=1)
        vg.log_generations(["q3"], ["z"], None, sample_ids=[""], step=1)
        vg.log_generations(["q4"], ["w"], None, sample_ids=[b""], step=1)
    ids = sorted(untagged(r["attributes"][contract.SAMPLE_ID]) for r in _generations(records))
    assert ids == sorted([*(f"{xxhash.xxh64_hexdigest(q)}/0" for q in (b"q1", b"q3", b"q4")), "uid-2/0"])


def test_a_non_str_input_has_the_id_and_key_of_its_text() -> None:
    """Bytes (and other) inputs are identified by the 16 hex digits of their text's XXH64, as str inputs are."""
    with capture_records(run_id="r", count=10, seed=3) as records:
        vg.log_generations([b"prompt", 12345], ["x", "y"], None, step=1)
        vg.log_generations(["prompt", "12345"], ["x", "y"], None, step=2)
    by_step: dict[int, list[tuple[str, int]]] = {1: [], 2: []}
    for r in _generations(records):
        attributes = r["attributes"]
        by_step[attributes[contract.STEP]].append(
            (untagged(attributes[contract.SAMPLE_ID]), attributes[contract.SAMPLE_KEY])
        )
    expected = [f"{xxhash.xxh64_hexdigest(b'prompt')}/0", f"{xxhash.xxh64_hexdigest(b'12345')}/0"]
    assert sorted(sample_id for sample_id, _ in by_step[1]) == sorted(expected)
    assert sorted(by_step[1]) == sorted(by_step[2])
    assert all(key == sample_key(3, sample_id) for sample_id, key in by_step[1])


def test_an_explicit_source_inside_a_block_of_the_same_step_wins_over_the_blocks_source() -> None:
    """log_generations(source="judge") in a block of its step sends as "judge", in the block's trace and with its k."""
    with capture_records(run_id="r", count=4, source="main", progress_interval_s=0) as records:
        with vg.validation(step=1, source="rollouter", count=2) as block:
            vg.log_generations(["a"], ["x"], None)
            vg.log_generations(["b", "c", "d"], ["y", "z", "w"], None, source="judge")
        trace_id = block.trace_id()
    sources = {
        untagged(r["attributes"][contract.SAMPLE_ID]): r["attributes"][contract.SOURCE] for r in _generations(records)
    }
    assert sorted(sources.values()) == ["judge", "judge", "rollouter"]  # judge kept 2 of 3: the block's k
    assert sources[f"{xxhash.xxh64_hexdigest(b'a')}/0"] == "rollouter"
    judge_ends = [r for r in _ends(records) if r["attributes"][contract.SOURCE] == "judge"]
    assert [(e["attributes"][contract.SEEN], e["attributes"][contract.EMITTED]) for e in judge_ends] == [(3, 2)]
    assert {r["trace_id"] for r in records} == {trace_id}


@pytest.mark.parametrize("presample", [True, False])
def test_responses_sharing_one_uid_get_distinct_ids_and_are_sampled_separately(presample: bool) -> None:
    """Responses sharing one uid in a call (verl, GRPO) are uid/0, uid/1, ...: each its own key, bottom-k over all."""
    uids = ["p"] * 6 + ["q"] * 6
    with (
        capture_records(run_id="r", count=4, seed=11, presample=presample, progress_interval_s=0) as records,
        vg.validation(step=1, source="rollouter"),
    ):
        vg.log_generations([f"prompt {u}" for u in uids], [f"answer {i}" for i in range(12)], None, sample_ids=uids)
    generations = _generations(records)
    ids = [f"{uid}/{i}" for uid in "pq" for i in range(6)]
    for record in generations:
        attributes = record["attributes"]
        assert attributes[contract.SAMPLE_KEY] == sample_key(11, attributes[contract.SAMPLE_ID])
    sent = [untagged(r["attributes"][contract.SAMPLE_ID]) for r in generations]
    assert len(sent) == len(set(sent))
    if presample:
        expected = [item for _, item in bottom_k(((SortKey.of(sample_key(11, i), i), i) for i in ids), 4)]
        assert sorted(sent) == sorted(expected)
    else:
        assert sorted(sent) == sorted(ids)
        by_id = {untagged(r["attributes"][contract.SAMPLE_ID]): r["body"]["output"] for r in generations}
        assert [by_id[f"p/{i}"] for i in range(6)] == [f"answer {i}" for i in range(6)]
