"""Extra columns per generation (``log_generations(..., extra=...)``): sent as ``valgen.extra.<name>``.

Bad input is repaired or dropped and counted, never raised; the values come back through the
reader and ``otel-valgen show``.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import otel_valgen as vg
from otel_valgen import contract
from otel_valgen._sanitize import TRUNCATION_PATTERN, clean_extra
from otel_valgen.cli.main import main
from otel_valgen.integrations.verl import log_val_generations
from otel_valgen.reader import Generation, ReadError, read_paths
from otel_valgen.testing import capture_records
from tests.support.require import require_module

PREFIX = contract.EXTRA_PREFIX


def _generations(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each generation record's attributes, by input."""
    return {r["body"]["input"]: r["attributes"] for r in records if r["event_name"] == contract.EVENT_GENERATION}


def _extra(attributes: dict[str, Any]) -> dict[str, Any]:
    return {key[len(PREFIX) :]: value for key, value in attributes.items() if key.startswith(PREFIX)}


@pytest.mark.parametrize("presample", [True, False])
@pytest.mark.parametrize("blockless", [True, False])
def test_each_column_travels_as_one_attribute_per_generation(presample: bool, blockless: bool) -> None:
    """Bools, ints, floats and texts of every column reach their own generation's record, in a block or not."""
    extra = {
        "acc": [1.0, 0.0, 0.5],
        "format_reward": [1, 0, -3],
        "correct": [True, False, True],
        "judge": ["a", "b", ""],
    }
    with capture_records(run_id="r", count=8, presample=presample) as records:
        if blockless:
            assert vg.log_generations(["q0", "q1", "q2"], ["o"] * 3, [0.1, 0.2, 0.3], step=1, extra=extra) == 3
        else:
            with vg.validation(step=1):
                assert vg.log_generations(["q0", "q1", "q2"], ["o"] * 3, [0.1, 0.2, 0.3], extra=extra) == 3
    generations = _generations(records)
    assert set(generations) == {"q0", "q1", "q2"}
    for i in range(3):
        got = _extra(generations[f"q{i}"])
        assert got == {name: values[i] for name, values in extra.items()}
        assert [type(got[name]) for name in ("acc", "format_reward", "correct", "judge")] == [float, int, bool, str]
    assert vg.stats().get("extra_values_invalid", 0) == 0
    assert vg.stats().get("extra_columns_dropped", 0) == 0


def test_numpy_and_torch_scalars_become_plain_values() -> None:
    """numpy/torch scalars, 0-d arrays and tensors, and array columns are converted like scores."""
    torch = require_module("torch", "torch (pyproject dev extra) is not installed")
    extra = {
        "np_float": [np.float32(0.25), np.float64(1.5)],
        "np_int": [np.int64(3), np.int8(-2)],
        "np_bool": [np.bool_(True), np.bool_(False)],
        "zero_d": [np.array(0.75), np.array(7)],
        "torch": [torch.tensor(2.0), torch.tensor(5)],
        "array_column": np.array([0.5, 1.0]),
        "tensor_column": torch.tensor([True, False]),
    }
    with capture_records(run_id="r", count=8) as records, vg.validation(step=1):
        vg.log_generations(["a", "b"], ["x", "y"], None, extra=extra)
    generations = _generations(records)
    assert _extra(generations["a"]) == {
        "np_float": 0.25,
        "np_int": 3,
        "np_bool": True,
        "zero_d": 0.75,
        "torch": 2.0,
        "array_column": 0.5,
        "tensor_column": True,
    }
    b = _extra(generations["b"])
    assert (b["np_int"], b["zero_d"], b["torch"], b["tensor_column"]) == (-2, 7, 5, False)
    for attributes in generations.values():
        for value in _extra(attributes).values():
            assert type(value) in (bool, int, float, str), value
    assert vg.stats()["coerced_values"] >= 10


@pytest.mark.parametrize(
    ("value", "invalid"),
    [
        (float("nan"), "nan"),
        (math.inf, "inf"),
        (-math.inf, "-inf"),
        (np.float64("nan"), "nan"),
        (None, "none"),
        (2**63, "int_out_of_range"),
        (object(), "unsupported_type"),
        (1 + 2j, "unsupported_type"),
    ],
)
def test_values_that_cannot_be_sent_are_left_out(value: Any, invalid: str) -> None:
    """NaN, inf, None, out-of-range ints and unconvertible objects: omitted from the record, with a reason."""
    assert clean_extra(value, 100).value is None
    assert clean_extra(value, 100).invalid == invalid
    with capture_records(run_id="r", count=4) as records, vg.validation(step=1):
        vg.log_generations(["q", "p"], ["a", "b"], None, extra={"bad": [value, 1.0], "good": [2, 3]})
    generations = _generations(records)
    assert _extra(generations["q"]) == {"good": 2}
    assert _extra(generations["p"]) == {"bad": 1.0, "good": 3}
    assert vg.stats()["extra_values_invalid"] == 1


def test_invalid_values_are_counted_and_warned_once_per_call(caplog: pytest.LogCaptureFixture) -> None:
    """Many invalid values in one call: each counted, one warning for the call naming the reasons."""
    n = 50
    with (
        caplog.at_level(logging.WARNING, "otel_valgen"),
        capture_records(run_id="r", count=n) as records,
        vg.validation(step=1),
    ):
        vg.log_generations([f"q{i}" for i in range(n)], ["a"] * n, None, extra={"x": [math.nan] * n, "y": [None] * n})
        vg.log_generations(["r"], ["a"], None, extra={"x": [math.inf]})
    assert all(_extra(a) == {} for a in _generations(records).values())
    assert vg.stats()["extra_values_invalid"] == 2 * n + 1
    warnings = [r.getMessage() for r in caplog.records if "invalid_extra_value #" in r.getMessage()]
    assert len(warnings) == 2, warnings  # one per call
    assert "(nan: 50, none: 50)" in warnings[0]


@pytest.mark.parametrize(
    "name",
    ["", "has space", "x" * 65, "ünï", "tab\t", "a\n", 3, None, ("a",)],
)
def test_a_column_with_an_invalid_name_is_dropped_whole(name: Any, caplog: pytest.LogCaptureFixture) -> None:
    """Names are 1..64 of [A-Za-z0-9_./-]; another name drops its column (counted, warned), not the call."""
    with capture_records(run_id="r", count=4) as records, vg.validation(step=1):
        accepted = vg.log_generations(["q"], ["a"], [1.0], extra={name: [1.0], "ok.name/x-1_": [2.0]})
    assert accepted == 1
    assert _extra(_generations(records)["q"]) == {"ok.name/x-1_": 2.0}
    assert vg.stats()["extra_columns_dropped"] == 1
    assert "extra column(s) dropped" in caplog.text


def test_a_name_of_64_characters_is_valid() -> None:
    """The name limit is inclusive."""
    name = "n" * 64
    with capture_records(run_id="r", count=4) as records, vg.validation(step=1):
        vg.log_generations(["q"], ["a"], None, extra={name: ["v"]})
    assert _extra(_generations(records)["q"]) == {name: "v"}


def test_at_most_32_columns_per_call() -> None:
    """Columns past the 32nd (in the mapping's order) are dropped and counted; the first 32 are sent."""
    extra = {f"c{i:02d}": [i] for i in range(40)}
    with capture_records(run_id="r", count=4) as records, vg.validation(step=1):
        vg.log_generations(["q"], ["a"], None, extra=extra)
    assert _extra(_generations(records)["q"]) == {f"c{i:02d}": i for i in range(32)}
    assert vg.stats()["extra_columns_dropped"] == 8


def test_invalid_names_do_not_use_up_the_32_columns() -> None:
    """The limit counts the columns that can be sent."""
    extra: dict[Any, list[int]] = {f"bad name {i}": [i] for i in range(5)}
    extra.update({f"c{i:02d}": [i] for i in range(32)})
    with capture_records(run_id="r", count=4) as records, vg.validation(step=1):
        vg.log_generations(["q"], ["a"], None, extra=extra)
    assert len(_extra(_generations(records)["q"])) == 32
    assert vg.stats()["extra_columns_dropped"] == 5


def _drops(blockless: bool, **columns: Any) -> tuple[int, dict[str, int], int]:
    """(accepted, the drop counters, generation records) of one two-generation call with these columns."""
    with capture_records(run_id="r", count=4) as records:
        if blockless:
            accepted = vg.log_generations(["a", "b"], ["x", "y"], step=1, **columns)
        else:
            with vg.validation(step=1):
                accepted = vg.log_generations(["a", "b"], ["x", "y"], **columns)
    drops = {name: n for name, n in vg.stats().items() if name.startswith("dropped.") or name == "generations_dropped"}
    return accepted, drops, len(_generations(records))


@pytest.mark.parametrize("blockless", [True, False])
@pytest.mark.parametrize("length", [0, 1, 3])
def test_a_column_of_another_length_drops_the_call_like_scores(blockless: bool, length: int) -> None:
    """As with a `scores` list of the wrong length: the call is dropped and counted as length_mismatch."""
    values = [1.0] * length
    accepted, drops, sent = _drops(blockless, extra={"acc": values})
    assert (accepted, sent) == (0, 0)
    assert drops["dropped.length_mismatch"] == max(2, length)
    assert (accepted, drops, sent) == _drops(blockless, scores=values)


def test_a_bare_string_column_drops_the_call_like_scores() -> None:
    """A string where a column is expected is `bad_columns`, as for every other column."""
    with capture_records(run_id="r", count=4) as records, vg.validation(step=1):
        assert vg.log_generations(["a", "b"], ["x", "y"], None, extra={"judge": "ab"}) == 0
    assert _generations(records) == {}
    assert vg.stats()["dropped.bad_columns"] == 2


@pytest.mark.parametrize("extra", [[("acc", [1.0])], "acc", 3])
def test_extra_that_is_not_a_mapping_sends_no_column(extra: Any) -> None:
    """The generations are still sent; the extra argument is counted as one dropped column."""
    with capture_records(run_id="r", count=4) as records, vg.validation(step=1):
        assert vg.log_generations(["q"], ["a"], None, extra=extra) == 1
    assert _extra(_generations(records)["q"]) == {}
    assert vg.stats()["extra_columns_dropped"] == 1


def test_a_column_given_as_none_is_no_column() -> None:
    """Like scores=None: nothing is sent for it, nothing is counted."""
    with capture_records(run_id="r", count=4) as records, vg.validation(step=1):
        assert vg.log_generations(["q"], ["a"], None, extra={"acc": None, "ok": [1]}) == 1
    assert _extra(_generations(records)["q"]) == {"ok": 1}
    assert vg.stats().get("extra_columns_dropped", 0) == 0


def test_texts_are_repaired_and_truncated_like_the_other_fields() -> None:
    """Undecodable bytes and lone surrogates become U+FFFD (counted on the record); long texts are cut."""
    long = "é" * 600  # 1,200 UTF-8 bytes
    with capture_records(run_id="r", count=4, max_field_bytes=1000) as records, vg.validation(step=1):
        vg.log_generations(["q"], ["a"], None, extra={"raw": [b"caf\xe9"], "sur": ["x\udcff"], "long": [long]})
    attributes = _generations(records)["q"]
    got = _extra(attributes)
    assert got["raw"] == "caf\ufffd"
    assert got["sur"] == "x\ufffd"
    cut = TRUNCATION_PATTERN.search(got["long"])
    assert cut is not None
    head, tail = got["long"][: cut.start()], got["long"][cut.end() :]
    assert len(got["long"].encode()) <= 1000
    assert head
    assert tail
    assert long.startswith(head)
    assert long.endswith(tail)
    assert len(head) + int(cut[1]) + len(tail) == len(long)
    assert attributes[contract.REPLACED_CHARS] == 2
    stats = vg.stats()
    assert (stats["replaced_chars"], stats["truncated_fields"]) == (2, 1)


def test_only_the_kept_generations_carry_their_values() -> None:
    """With presampling the values of the k kept generations are sent, each with its own generation."""
    n = 200
    with capture_records(run_id="r", count=5, seed=3) as records, vg.validation(step=1):
        vg.log_generations([f"q{i}" for i in range(n)], ["a"] * n, None, extra={"index": list(range(n))})
    generations = _generations(records)
    assert len(generations) == 5
    for text, attributes in generations.items():
        assert attributes[PREFIX + "index"] == int(text[1:])


@pytest.mark.parametrize("blockless", [True, False])
def test_a_list_and_a_dict_arrive_as_their_json_text(blockless: bool) -> None:
    """Lists and dicts (verl's reward_extra_info holds them): each is sent as its JSON text, keys sorted."""
    extra = {
        "scores": [[1.0, 0.5], [0.0]],
        "judge": [{"verdict": "ok", "confidence": 0.9}, {"b": [1, None], "a": True}],
    }
    with capture_records(run_id="r", count=8) as records:
        if blockless:
            vg.log_generations(["q0", "q1"], ["o", "o"], None, step=1, extra=extra)
        else:
            with vg.validation(step=1):
                vg.log_generations(["q0", "q1"], ["o", "o"], None, extra=extra)
    generations = _generations(records)
    assert _extra(generations["q0"]) == {"scores": "[1.0,0.5]", "judge": '{"confidence":0.9,"verdict":"ok"}'}
    assert _extra(generations["q1"]) == {"scores": "[0.0]", "judge": '{"a":true,"b":[1,null]}'}
    assert json.loads(_extra(generations["q1"])["judge"]) == {"a": True, "b": [1, None]}
    assert vg.stats().get("extra_values_invalid", 0) == 0


def test_arrays_tensors_and_non_json_values_become_safe_json() -> None:
    """Arrays and tensors are listed, NaN/inf become strings, bytes are decoded, other objects their str()."""
    torch = require_module("torch", "torch (pyproject dev extra) is not installed")
    value = {
        "array": np.array([[1, 2], [3, 4]], dtype=np.int64),
        "tensor": torch.tensor([0.5, 1.5]),
        "floats": (math.nan, math.inf, -math.inf, np.float32(0.25)),
        "bytes": b"ok\xff",
        "set": {3, 1, 2},
        "object": Path("/a"),
        7: "int key",
        None: "none key",
    }
    text = clean_extra(value, 1000).value
    assert isinstance(text, str)
    assert json.loads(text) == {
        "7": "int key",
        "array": [[1, 2], [3, 4]],
        "bytes": "ok\ufffd",
        "floats": ["nan", "inf", "-inf", 0.25],
        "null": "none key",
        "object": "/a",
        "set": [1, 2, 3],
        "tensor": [0.5, 1.5],
    }
    assert clean_extra([math.nan], 100).value == '["nan"]'  # valid JSON: json.loads accepts no NaN
    cycle: list[Any] = []
    cycle.append(cycle)
    assert isinstance(clean_extra(cycle, 10_000).value, str)  # nesting past 64 levels ends in str(): no recursion error


def test_a_huge_list_is_cut_like_an_output_and_counted() -> None:
    """A JSON text over max_field_bytes keeps its head and tail around the marker, counted in truncated_fields."""
    huge = list(range(100_000))
    with capture_records(run_id="r", count=4, max_field_bytes=1024) as records, vg.validation(step=1):
        vg.log_generations(["q"], ["o"], None, extra={"tokens": [huge]})
    value = _extra(_generations(records)["q"])["tokens"]
    assert TRUNCATION_PATTERN.search(value) is not None
    assert len(value.encode()) <= 1024
    assert value.startswith("[0,1,2,3,")
    assert value.endswith(",99998,99999]")  # the last items (the last tokens) survive the cut
    assert vg.stats()["truncated_fields"] == 1
    assert vg.stats().get("extra_values_invalid", 0) == 0


extra_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.binary(max_size=20),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.one_of(st.text(max_size=5), st.integers()), st.floats(), max_size=3),
)
names = st.one_of(st.text(max_size=70), st.integers(), st.none())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.integers(0, 6),
    columns=st.dictionaries(names, st.lists(extra_values, min_size=0, max_size=7), max_size=40),
)
def test_arbitrary_extra_never_raises_and_every_value_sent_is_valid(rows: int, columns: dict[Any, list[Any]]) -> None:
    """Whatever the names and values: the call returns, and every sent value is of an allowed type."""
    with capture_records(run_id="r", count=100, presample=False) as records, vg.validation(step=1):
        accepted = vg.log_generations([f"q{i}" for i in range(rows)], ["a"] * rows, None, extra=columns)
    assert accepted in (0, rows)
    assert vg.stats().get("internal_errors", 0) == 0
    for attributes in _generations(records).values():
        values = _extra(attributes)
        assert len(values) <= contract.MAX_EXTRA_COLUMNS
        for value in values.values():
            assert type(value) in (bool, int, float, str)
            if isinstance(value, float):
                assert math.isfinite(value)
            if isinstance(value, str):
                value.encode("utf-8")


def _log_two_steps(directory: Path) -> None:
    vg.configure(run_id="run-x", count=3, directory=str(directory), seed=1)
    with vg.validation(step=1):
        vg.log_generations(["a", "b"], ["x", "y"], [1.0, 0.0], extra={"acc": [1.0, 0.0], "judge": ["good", "bad"]})
    with vg.validation(step=2):
        vg.log_generations(["a", "b"], ["x", "y"], [1.0, 0.0], extra={"acc": [0.5, 0.25], "format": [True, False]})
    vg.shutdown()


def _unexpected(error: ReadError) -> None:
    raise AssertionError(error)


def test_the_reader_gives_each_generation_its_extra_columns(tmp_path: Path) -> None:
    """Generation.extra holds the valgen.extra.* attributes by name, with their types."""
    _log_two_steps(tmp_path)
    generations = [r for r in read_paths([tmp_path], _unexpected) if isinstance(r, Generation)]
    by_step_input = {(g.step, g.input): g.extra for g in generations}
    assert by_step_input == {
        (1, "a"): {"acc": 1.0, "judge": "good"},
        (1, "b"): {"acc": 0.0, "judge": "bad"},
        (2, "a"): {"acc": 0.5, "format": True},
        (2, "b"): {"acc": 0.25, "format": False},
    }


def test_a_generation_without_extra_columns_has_an_empty_mapping() -> None:
    """The field defaults to empty, after every earlier field (old positional construction still works).

    Only the rollout fields and the slots come after it.
    """
    generation = Generation("r", 1, "s/0", 5, "in", "out")
    assert generation.extra == {}
    assert list(Generation.__dataclass_fields__)[-5:] == ["extra", "kind", "prompt_id", "prompt_key", "slots"]


def test_show_json_lists_the_union_of_extra_columns(tmp_path: Path) -> None:
    """JSON: every generation has every extra name of the shown steps, sorted, null where it has none."""
    _log_two_steps(tmp_path)
    result = CliRunner().invoke(main, ["show", str(tmp_path), "--format", "json"])
    assert result.exit_code == 0, result.output
    steps = {obj["step"]: obj for obj in map(json.loads, result.stdout.splitlines())}
    for obj in steps.values():
        for generation in obj["generations"]:
            assert list(generation["extra"]) == ["acc", "format", "judge"]
    step1 = {g["input"]: g["extra"] for g in steps[1]["generations"]}
    assert step1["a"] == {"acc": 1.0, "format": None, "judge": "good"}
    step2 = {g["input"]: g["extra"] for g in steps[2]["generations"]}
    assert step2["b"] == {"acc": 0.25, "format": False, "judge": None}


def test_show_csv_has_one_column_per_extra_name(tmp_path: Path) -> None:
    """CSV: extra.<name> columns after the fixed ones, sorted; a missing value is an empty cell."""
    _log_two_steps(tmp_path)
    result = CliRunner().invoke(main, ["show", str(tmp_path), "--format", "csv"])
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert list(rows[0])[-3:] == ["extra.acc", "extra.format", "extra.judge"]
    cells = {(row["step"], row["input"]): (row["extra.acc"], row["extra.format"], row["extra.judge"]) for row in rows}
    assert cells[("1", "b")] == ("0.0", "", "bad")
    assert cells[("2", "a")] == ("0.5", "True", "")


def test_show_table_has_one_column_per_extra_name(tmp_path: Path) -> None:
    """The table of every step has the union of the names as columns, values formatted, missing empty."""
    _log_two_steps(tmp_path)
    result = CliRunner().invoke(main, ["show", str(tmp_path)], terminal_width=250)
    assert result.exit_code == 0, result.output
    headers = [line for line in result.stdout.splitlines() if "input" in line and "score" in line]
    assert len(headers) == 2
    for header in headers:
        assert header.index("score") < header.index("acc") < header.index("format") < header.index("judge")
    for cell in ("good", "false", "0.25"):
        assert cell in result.stdout


def test_verl_log_val_generations_takes_reward_extra_info() -> None:
    """The reward_extra_info of verl goes in as it is; its empty columns (verl allows them) are left out."""
    reward_extra_info = {"acc": np.array([1.0, 0.0]), "pred": ["4", "5"], "unused": []}
    with capture_records(run_id="r", count=4) as records:
        assert log_val_generations(["q0", "q1"], ["a", "b"], [1.0, 0.0], step=3, extra=reward_extra_info)
    generations = _generations(records)
    assert _extra(generations["q0"]) == {"acc": 1.0, "pred": "4"}
    assert _extra(generations["q1"]) == {"acc": 0.0, "pred": "5"}
    assert vg.stats().get("dropped.length_mismatch", 0) == 0
