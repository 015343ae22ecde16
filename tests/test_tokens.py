"""Per-token data of a response: its wire encoding, its figures, and the step's distribution of them."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_valgen import contract, tokens
from otel_valgen.partials import merge_summaries
from otel_valgen.reader import EndRecord
from otel_valgen.selection import select_steps
from otel_valgen.trajectories import merge
from tests.support.partial_summaries import one_sampler_per_source


def _response(n: int, seed: int = 0, model_gap: tuple[int, int] | None = None) -> dict[str, list[Any]]:
    """One response's columns as verl holds them (float32 log-probabilities), as a one-row call."""
    rng = np.random.default_rng(seed)
    trainer = np.log(rng.uniform(0.01, 1, n)).astype(np.float32)
    rollout = (trainer + rng.normal(0, 0.02, n)).astype(np.float32)
    model = np.ones(n, dtype=bool)
    if model_gap is not None:
        model[model_gap[0] : model_gap[1]] = False
    return {
        "ids": [rng.integers(0, 150_000, n)],
        "pieces": [[f" t{i}" for i in range(n)]],
        "rollout": [rollout],
        "trainer": [trainer],
        "reference": [(trainer + rng.normal(0, 0.1, n)).astype(np.float32)],
        "weight": [np.exp(trainer - rollout).astype(np.float32)],
        "masked": [rng.uniform(size=n) < 0.05],
        "model": [model],
    }


def test_a_response_travels_exactly_column_by_column() -> None:
    """Encoded and decoded, every column equals the batch's values (float32 exactly, ids, texts, masks)."""
    columns = _response(4096, model_gap=(100, 300))
    read = tokens.read_response(columns, 0)
    assert read is not None
    assert read.count == 4096
    attribute, cut = tokens.encode(read, 1 << 30)
    assert cut == 0
    assert tokens.CUT_COUNT not in attribute
    back = tokens.decode(attribute)
    assert back.count == 4096
    assert np.array_equal(back.ids, columns["ids"][0])
    assert back.pieces == columns["pieces"][0]
    for name in tokens.FLOAT_COLUMNS:
        assert np.array_equal(back.floats[name], columns[name][0].astype(np.float64)), name
    for name in tokens.MASK_COLUMNS:
        assert np.array_equal(back.masks[name], columns[name][0]), name


def test_a_response_over_the_budget_keeps_its_head_and_tail_and_says_what_was_cut() -> None:
    """Past the byte budget the middle tokens are left out; the attribute says where and how many."""
    columns = _response(8000)
    read = tokens.read_response(columns, 0)
    assert read is not None
    whole, _ = tokens.encode(read, 1 << 30)
    size = sum(len(value) for value in whole.values() if isinstance(value, bytes))
    attribute, cut = tokens.encode(read, size // 3)
    assert 0 < cut < 8000
    assert sum(len(value) for value in attribute.values() if isinstance(value, bytes)) <= size // 3
    back = tokens.decode(attribute)
    head = attribute[tokens.CUT_FROM]
    assert attribute[tokens.CUT_COUNT] == cut
    assert back.count == 8000 - cut
    assert back.cut_from == head
    kept = np.r_[0:head, head + cut : 8000]
    assert np.array_equal(back.floats["trainer"], columns["trainer"][0][kept].astype(np.float64))
    assert back.pieces == [columns["pieces"][0][i] for i in kept]


def test_the_figures_of_a_response_are_over_its_model_tokens() -> None:
    """|d|, max |d|, the k3 KL estimate and the masked share, over the model's tokens only."""
    columns = _response(500, seed=3, model_gap=(50, 120))
    read = tokens.read_response(columns, 0)
    assert read is not None
    figures = tokens.response_figures(read)
    assert figures is not None
    model = columns["model"][0]
    d = columns["trainer"][0][model].astype(np.float64) - columns["rollout"][0][model].astype(np.float64)
    assert figures[tokens.TOKENS] == int(model.sum())
    assert figures[tokens.MEAN_ABS] == pytest.approx(np.abs(d).mean(), rel=1e-12)
    assert figures[tokens.MAX_ABS] == pytest.approx(np.abs(d).max(), rel=1e-12)
    assert figures[tokens.KL] == pytest.approx(np.mean(np.exp(d) - 1 - d), rel=1e-9)
    masked = columns["masked"][0]
    assert figures[tokens.MASKED_SHARE] == pytest.approx((masked & model).sum() / model.sum())


def test_rows_padded_to_the_batch_width_are_cut_to_the_response_length() -> None:
    """A row as wide as the batch (verl pads to the response length limit) is read up to the response length."""
    columns = {"rollout": [np.zeros(64)], "trainer": [np.full(64, -1.0)], "model": [np.ones(64, dtype=bool)]}
    read = tokens.read_response(columns, 0, length=10)
    assert read is not None
    assert read.count == 10
    assert tokens.response_figures(read) == {
        "tokens": 10,
        "mean_abs": 1.0,
        "max_abs": 1.0,
        "kl": pytest.approx(math.exp(-1)),
    }


def test_bad_values_become_missing_and_are_counted() -> None:
    """A value that is no number is NaN (left out of the figures), a bad piece repaired; both counted."""
    columns: dict[str, list[Any]] = {
        "rollout": [[-1.0, "x", None, -0.5]],
        "trainer": [[-1.5, -1.0, -2.0, float("nan")]],
        "pieces": [["a", "\ud800", b"\xff", "d"]],
    }
    read = tokens.read_response(columns, 0)
    assert read is not None
    assert read.repaired == 4  # two values, two pieces
    figures = tokens.response_figures(read)
    assert figures is not None
    assert figures[tokens.TOKENS] == 1
    assert figures[tokens.MEAN_ABS] == 0.5
    assert tokens.decode(tokens.encode(read, 1 << 20)[0]).pieces == ["a", "\ufffd", "\ufffd", "d"]


def test_no_log_probabilities_no_figures() -> None:
    """Token ids alone carry no figures; a response without any column carries no tokens."""
    read = tokens.read_response({"ids": [[1, 2, 3]]}, 0)
    assert read is not None
    assert tokens.response_figures(read) is None
    assert tokens.read_response({"ids": [None]}, 0) is None


def test_torch_tensors_are_read_as_the_trainer_holds_them() -> None:
    """float32 tensors and integer masks are read as they are, without a copy to lists first."""
    torch = pytest.importorskip("torch")
    trainer = torch.tensor([-0.25, -1.0, -3.0], dtype=torch.float32)
    rollout = torch.tensor([-0.5, -1.0, -2.0], dtype=torch.float32)
    read = tokens.read_response({"trainer": [trainer], "rollout": [rollout], "model": [torch.tensor([1, 1, 0])]}, 0)
    assert read is not None
    assert tokens.response_figures(read) == {
        "tokens": 2,
        "mean_abs": 0.125,
        "max_abs": 0.25,
        "kl": pytest.approx((math.exp(0.25) - 1.25) / 2),
    }


@settings(max_examples=200, deadline=None)
@given(st.floats(min_value=0, max_value=1e6, allow_nan=False))
def test_a_bucket_stands_for_its_values_within_the_relative_accuracy(value: float) -> None:
    """Every value is within 1% of what its bucket stands for (below MIN_VALUE: zero)."""
    represented = tokens.bucket_value(tokens.bucket(value))
    if value < tokens.MIN_VALUE:
        assert represented == 0.0
    else:
        assert abs(represented - value) <= tokens.RELATIVE_ACCURACY * value * (1 + 1e-9)


def _step(values: list[float], source: str | None = None) -> tokens.MismatchFigures:
    figures = tokens.MismatchFigures()
    for value in values:
        figures.add(
            {tokens.TOKENS: 10, tokens.MEAN_ABS: value, tokens.MAX_ABS: 2 * value, tokens.KL: value / 10}, source
        )
    return figures


def test_merged_parts_give_the_whole_steps_figures_in_any_order() -> None:
    """Counts, sums and buckets add, maxima take the largest: merged parts are the whole step, exactly."""
    rng = random.Random(5)
    values = [rng.lognormvariate(-4, 1.5) for _ in range(3000)] + [0.0] * 40
    whole = _step(values, "gsm8k").attribute()
    parts = [values[:700], values[700:2500], values[2500:]]
    for order in ([0, 1, 2], [2, 0, 1]):
        merged = merge(_step(parts[i], "gsm8k").attribute() for i in order)
        assert merged is not None
        assert whole is not None
        _same_figures(merged, whole)


def _same_figures(got: Any, want: Any, key: str = "") -> None:
    """Equal figures: sums of floats to rounding (their order differs), everything else exactly."""
    if isinstance(want, dict):
        assert isinstance(got, dict), key
        assert got.keys() == want.keys(), key
        for name, value in want.items():
            _same_figures(got[name], value, name)
    elif key.endswith(".sum"):
        assert got == pytest.approx(want, rel=1e-12), key
    else:
        assert got == want, key


def test_the_summary_quantiles_are_within_the_relative_accuracy_of_the_exact_ones() -> None:
    """p50, p90 and p99 from the buckets are within 1% of the exact nearest-rank quantiles; mean and max exact."""
    rng = random.Random(8)
    values = sorted(rng.lognormvariate(-3, 2) for _ in range(5001))
    summary = tokens.summary(_step(values).attribute())
    assert summary is not None
    assert summary["mean_abs.mean"] == pytest.approx(sum(values) / len(values))
    assert summary["mean_abs.max"] == max(values)
    for suffix, q in tokens.QUANTILES:
        exact = values[math.ceil(q * len(values)) - 1]  # nearest rank
        assert abs(summary["mean_abs" + suffix] - exact) <= tokens.RELATIVE_ACCURACY * exact * (1 + 1e-9), suffix


def test_the_quantiles_are_the_nearest_rank() -> None:
    """Of 0.01, 1 and 100: p50 is the 2nd (rank ceil(1.5)), p90 and p99 the 3rd; each within 1%."""
    summary = tokens.summary(_step([0.01, 1.0, 100.0]).attribute())
    assert summary is not None
    assert summary["mean_abs.p50"] == pytest.approx(1.0, rel=tokens.RELATIVE_ACCURACY)
    assert summary["mean_abs.p90"] == summary["mean_abs.p99"] == 100.0  # at most the max
    assert summary["mean_abs.max"] == 100.0


def test_scalars_and_caption_name_the_distribution() -> None:
    """The trackers get each figure's mean, quantiles and max, per data source too; show gets one line."""
    summary = tokens.summary(_step([0.01, 0.02, 0.5], "math").attribute())
    assert summary is not None
    scalars = tokens.scalars(summary)
    assert scalars["mismatch/responses"] == 3.0
    assert scalars["mismatch/mean_abs_max"] == 0.5
    assert {"mismatch/mean_abs_p50", "mismatch/kl_p99", "mismatch/by_data_source/math/max_abs_p90"} <= scalars.keys()
    caption = tokens.caption(summary)
    assert caption is not None
    assert caption.startswith("3 responses compared (30 tokens)")


def test_a_whole_batch_gets_the_figures_each_response_gets_alone() -> None:
    """2-D arrays padded past each response's length give every row the figures of the row read alone."""
    rng = np.random.default_rng(11)
    rows, width = 12, 40
    trainer = np.log(rng.uniform(0.01, 1, (rows, width))).astype(np.float32)
    rollout = (trainer + rng.normal(0, 0.3, (rows, width))).astype(np.float32)
    model = rng.uniform(size=(rows, width)) < 0.8
    masked = rng.uniform(size=(rows, width)) < 0.2
    lengths = [int(n) for n in rng.integers(1, width + 1, rows)]
    lengths[3] = 0  # an empty response: no figures
    matrices = {"rollout": rollout, "trainer": trainer, "model": model, "masked": masked}
    mixed = {"rollout": rollout, "trainer": trainer}  # masks as rows of each response's own length
    mixed |= {
        name: [values[i, : lengths[i]] for i in range(rows)] for name, values in (("model", model), ("masked", masked))
    }
    columns = matrices
    together = tokens.batch_figures(columns, lengths)
    assert tokens.batch_figures(mixed, lengths) == together
    alone = []
    for index in range(rows):
        read = tokens.read_response({name: list(values) for name, values in columns.items()}, index, lengths[index])
        alone.append(tokens.response_figures(read) if read is not None else None)
    assert [f is None for f in together] == [f is None for f in alone]
    for got, want in zip(together, alone, strict=True):
        assert got == (pytest.approx(want, rel=1e-12) if want is not None else None)  # sums in another order
    assert any(figures is None for figures in together)  # a response of length 0, or no model token


_MISMATCH_CASES = json.loads(
    (Path(__file__).resolve().parent.parent / "testdata" / "sampling" / "mismatch.json").read_text("utf-8")
)["cases"]


@pytest.mark.parametrize("case", _MISMATCH_CASES, ids=lambda case: case["name"])
def test_show_merges_the_end_records_mismatch_as_the_shared_cases_say(case: dict[str, Any]) -> None:
    """The shared cases (the collector replays them too): in either order, the summary's valgen.mismatch."""
    ends = [
        EndRecord("r", 1, e["source"], e["instance"], e["seen"], e["emitted"], mismatch=e.get("mismatch"))
        for e in case["end_records"]
    ]
    for order in (ends, ends[::-1]):
        (step,) = select_steps(order)
        if case["expected"] is None:
            assert step.mismatch is None
        else:
            _same_figures(step.mismatch, case["expected"])


@pytest.mark.parametrize(
    "case",
    [c for c in _MISMATCH_CASES if c["expected"] is not None and len(c["end_records"]) > 1],  # a merge
    ids=lambda case: case["name"],
)
def test_merged_parts_give_the_mismatch_one_sampler_would_have(case: dict[str, Any]) -> None:
    """Samplers' summaries, one source each, merge (otel_valgen.partials) to the whole step's distribution."""
    parts = one_sampler_per_source(case["end_records"], contract.FIELD_MISMATCH, "mismatch")
    _same_figures(merge_summaries(parts, [])[contract.MISMATCH], case["expected"])


def test_rows_are_read_up_to_the_mappings_length_when_given() -> None:
    """``length`` (tokens.LENGTH): rows that hold more than the response length counts (a tool's tokens) are read whole.

    The figures of the call and of a kept response both leave out what lies past each row's
    ``length``, not past its response length, and so do its packed tokens.
    """
    rollout = np.array([[-1.0, 0.0, 0.0, -1.0, 9.0], [0.0, -1.0, 9.0, 9.0, 9.0]], dtype=np.float32)
    trainer = np.zeros_like(rollout)
    model = np.array([[True, False, False, True, True], [True, True, True, True, True]])
    columns = {tokens.ROLLOUT: rollout, tokens.TRAINER: trainer, tokens.MODEL: model, tokens.LENGTH: [4, 2]}
    response_lengths = [2, 2]  # the model's tokens: the first row's tool tokens (1, 2) are not counted
    first, second = tokens.batch_figures(columns, response_lengths)
    assert first == {tokens.TOKENS: 2, tokens.MEAN_ABS: 1.0, tokens.MAX_ABS: 1.0, tokens.KL: pytest.approx(math.e - 2)}
    assert second is not None
    assert second[tokens.TOKENS] == 2
    read = tokens.read_response(columns, 0, response_lengths[0])
    assert read is not None
    assert read.count == 4
    assert tokens.response_figures(read) == first
    assert tokens.check_columns(columns, 2) == (columns, [])
