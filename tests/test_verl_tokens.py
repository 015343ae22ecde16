"""verl's rollouts with their per-token data (``integrations.verl._tokens``, ``_correction``), in one process.

Batches are built as verl's trainer holds them (``tests/test_verl_rollouts.make_batch``: a multi-turn
row's ``response_mask`` leaves out a tool's tokens), given the log-probabilities a trainer with
``calculate_log_probs=True`` holds, then corrected by verl 0.9.1's real
``compute_rollout_correction_and_add_to_batch`` (as ``install()`` leaves it, watched) with a rejection that
masks tokens. The hook's settings come from a trainer config as verl's. verl's trainers running end to
end: ``tests/verl/test_tool_agent_entry_point.py``.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from verl import DataProto
from verl.trainer.ppo import rollout_corr_helper

import otel_valgen as vg
from otel_valgen import contract, tokens
from otel_valgen.integrations import verl as vg_verl
from otel_valgen.integrations.verl import _correction, _rollout_hooks, _tokens
from otel_valgen.integrations.verl._tokens import token_pieces, trainer_batch
from otel_valgen.integrations.verl_rollouts import send_rollout_batch
from otel_valgen.testing import capture_records
from tests.test_verl_rollouts import Row, answer, make_batch
from tests.verl import harness

assert vg_verl.install()

WIDTH = 32  # the responses' width
REJECTING = {"rollout_is": "token", "rollout_rs": "token_k3", "rollout_rs_threshold": 0.5, "bypass_mode": False}
ROWS = [
    Row("What is 2+2?", (("Let me add 2+2 ", True), ("-> 4 ", False), ("so 4.", True)), advantage=1.0),
    Row("What is 2+2?", answer("It is 4, or 5?"), advantage=-1.0),
    Row("Name a prime.", answer("7 is prime"), advantage=0.5),
    Row("Name a prime.", (("call ", True), ("[tool: 11] ", False), ("11", True)), advantage=-0.5),
]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The tests' byte-level tokenizer (one token per byte)."""
    return harness.make_tokenizer(tmp_path_factory.mktemp("tokenizer"))


@pytest.fixture(autouse=True)
def _fresh() -> None:
    _correction.forget()
    _tokens._warned.clear()


def _trainer(**correction: Any) -> Any:
    """What the hooks read of a trainer: its config's ``algorithm.rollout_correction``."""
    algorithm = {"rollout_correction": correction} if correction else {}
    return SimpleNamespace(config=OmegaConf.create({"algorithm": algorithm}))


def _with_log_probs(tokenizer: Any, rows: list[Row], reference: bool = True) -> DataProto:
    """A batch whose rollout engine gives digit tokens -1 (every other token 0), the trainer 0 everywhere."""
    batch = make_batch(tokenizer, rows, response_width=WIDTH)
    responses = batch.batch["responses"]
    digits = torch.tensor([[tokenizer.decode([int(t)]).isdigit() for t in row] for row in responses])
    batch.batch["rollout_log_probs"] = (
        torch.where(digits, -1.0, 0.0) * batch.batch["attention_mask"][:, -responses.shape[1] :]
    )
    batch.batch["old_log_probs"] = torch.zeros(responses.shape)
    if reference:
        batch.batch["ref_log_prob"] = torch.full(responses.shape, -0.25)
    return batch


def _kept(records: Any) -> list[dict[str, Any]]:
    return [r["attributes"] for r in records if r["event_name"] == contract.EVENT_GENERATION]


def _end(records: Any) -> dict[str, Any]:
    (end,) = [r["attributes"] for r in records if contract.MISMATCH in r["attributes"]]
    return end


def test_kept_rows_carry_the_batchs_tensors_and_the_mask_before_the_correction(tokenizer: Any) -> None:
    """ids, pieces, log-probs, weights as the batch holds them; ``model`` the mask before verl's correction."""
    batch = _with_log_probs(tokenizer, ROWS)
    before = batch.batch["response_mask"].bool().clone()
    with capture_records(run_id="r", rollout_count=8, progress_interval_s=0) as records:
        corrected, _ = rollout_corr_helper.compute_rollout_correction_and_add_to_batch(
            batch, OmegaConf.create(REJECTING)
        )
        after = corrected.batch["response_mask"].bool()
        assert (before & ~after).any(), "verl's correction masked no token"
        with trainer_batch(_trainer(**REJECTING)):
            assert send_rollout_batch(corrected, tokenizer, step=3) == len(ROWS)
    spans = corrected.batch["attention_mask"][:, -before.shape[1] :].sum(-1)
    sent = _kept(records)
    assert len(sent) == len(ROWS)
    for attributes in sent:
        got = tokens.decode(attributes[contract.TOKENS])
        assert got.ids is not None
        assert got.pieces is not None
        (row,) = [
            i for i in range(len(ROWS)) if corrected.batch["responses"][i, : got.count].tolist() == got.ids.tolist()
        ]
        span = int(spans[row])
        assert got.count == span  # the tool's tokens too: the rows are read up to the attention mask
        assert "".join(got.pieces) == ROWS[row].text
        for name, field in _tokens.FLOAT_FIELDS.items():
            want = corrected.batch[field][row, :span].double().numpy()
            assert np.array_equal(got.floats[name], want), name
        assert np.array_equal(got.masks[tokens.MODEL], before[row, :span].numpy())
        assert np.array_equal(got.masks[tokens.MASKED], (before & ~after)[row, :span].numpy())
        assert attributes[contract.RESPONSE_LENGTH] == int(before[row].sum())  # the masked tokens count
        assert attributes[contract.MISMATCH_PREFIX + tokens.MASKED] > 0  # every row has digits
    # every response's figures, computed at once from the whole batch
    whole = tokens.MismatchFigures()
    columns = {
        tokens.ROLLOUT: corrected.batch["rollout_log_probs"],
        tokens.TRAINER: corrected.batch["old_log_probs"],
        tokens.MODEL: before,
        tokens.MASKED: before & ~after,
    }
    for figures in tokens.batch_figures(columns):
        assert figures is not None
        whole.add(figures)
    assert _end(records)[contract.MISMATCH] == whole.attribute()
    assert vg.stats().get("verl_token_columns_missing", 0) == 0
    assert vg.stats()["internal_errors"] == 0


def test_bypass_mode_sends_no_trainer_column_and_says_so(tokenizer: Any, caplog: pytest.LogCaptureFixture) -> None:
    """In bypass mode old_log_probs are the rollout's: left out (no figures), with one warning per reason."""
    config = {"bypass_mode": True, "rollout_rs": "token_k3", "rollout_rs_threshold": 0.5}
    with (
        caplog.at_level(logging.WARNING, logger="otel_valgen"),
        capture_records(run_id="r", rollout_count=8, progress_interval_s=0) as records,
    ):
        for step in (1, 2):
            batch = _with_log_probs(tokenizer, ROWS, reference=False)
            rollout_corr_helper.apply_bypass_mode(batch, OmegaConf.create(config), OmegaConf.create({}))
            with trainer_batch(_trainer(**config)):
                assert send_rollout_batch(batch, tokenizer, step=step) == len(ROWS)
    for attributes in _kept(records):
        got = tokens.decode(attributes[contract.TOKENS])
        assert set(got.floats) == {tokens.ROLLOUT}
        assert set(got.masks) == {tokens.MODEL}  # the rejection is in the actor's loss, not in the batch
        assert contract.MISMATCH_PREFIX + tokens.KL not in attributes
    said = [r.getMessage() for r in caplog.records if "sent without their" in r.getMessage()]
    assert len(said) == 4, said  # trainer, reference, weight, masked: once each over the two steps
    assert any("'trainer'" in line and "bypass mode" in line for line in said)
    assert any("'masked'" in line and "actor's loss" in line for line in said)
    assert vg.stats()["verl_token_columns_missing"] == 8  # counted at every step


def test_a_batch_without_log_probs_sends_ids_pieces_and_the_model_mask(tokenizer: Any) -> None:
    """``calculate_log_probs`` off: the tokens and the response mask go, no figures; the settings are named."""
    batch = make_batch(tokenizer, ROWS, response_width=WIDTH)
    with (
        capture_records(run_id="r", rollout_count=8, progress_interval_s=0) as records,
        trainer_batch(_trainer(rollout_is=None, rollout_rs=None)),
    ):
        assert send_rollout_batch(batch, tokenizer, step=1) == len(ROWS)
    texts = [row.text for row in ROWS]
    for attributes in _kept(records):
        got = tokens.decode(attributes[contract.TOKENS])
        assert got.floats == {}
        assert set(got.masks) == {tokens.MODEL}
        assert got.pieces is not None
        row = texts.index("".join(got.pieces))
        assert np.array_equal(got.masks[tokens.MODEL], batch.batch["response_mask"][row, : got.count].bool().numpy())
        assert contract.MISMATCH_PREFIX + tokens.KL not in attributes
    assert vg.stats()["verl_token_columns_missing"] == 5  # rollout, trainer, reference, weight, masked


def test_a_correction_that_was_not_watched_leaves_out_model_and_masked(tokenizer: Any) -> None:
    """A batch verl corrected out of sight: its response mask is not the model's, so neither mask is sent."""
    batch = _with_log_probs(tokenizer, ROWS)
    original = rollout_corr_helper.compute_rollout_correction_and_add_to_batch.__wrapped__
    corrected, _ = original(batch, OmegaConf.create(REJECTING))
    with (
        capture_records(run_id="r", rollout_count=8, progress_interval_s=0) as records,
        trainer_batch(_trainer(**REJECTING)),
    ):
        send_rollout_batch(corrected, tokenizer, step=1)
    for attributes in _kept(records):
        got = tokens.decode(attributes[contract.TOKENS])
        assert got.masks == {}
        assert set(got.floats) == set(tokens.FLOAT_COLUMNS)
    assert vg.stats()["verl_token_columns_missing"] == 2  # model and masked


def test_nothing_is_kept_while_rollouts_are_off(tokenizer: Any) -> None:
    """The watched correction keeps no mask unless rollouts are on (it only checks the setting)."""
    with capture_records(run_id="r", progress_interval_s=0):
        rollout_corr_helper.compute_rollout_correction_and_add_to_batch(
            _with_log_probs(tokenizer, ROWS), OmegaConf.create(REJECTING)
        )
    assert _correction._kept == []


def test_v1_rows_find_their_correction_by_key() -> None:
    """v1: two local steps' corrections, the hook's rows in another order and width, padding rows left out."""
    first = _correction.Correction(
        torch.tensor([[1, 1, 0], [1, 1, 1]]).bool(), torch.tensor([[1, 0, 0], [1, 1, 1]]), ["a_0_0", "b_0_0"]
    )
    second = _correction.Correction(torch.tensor([[1, 1, 1, 1]]).bool(), torch.tensor([[0, 1, 1, 1]]), ["c_0_0"])
    _correction._kept.extend([first, second])
    mask = torch.tensor([[0, 1, 1, 1], [1, 0, 0, 0]])  # rows c, a
    before = _correction.mask_before(mask, ["c_0_0", "a_0_0"])
    assert before is not None
    assert before.tolist() == [[True, True, True, True], [True, True, False, False]]
    assert _correction._kept == []  # both used: forgotten
    _correction._kept.append(first)
    assert _correction.mask_before(torch.tensor([[1, 1, 0]]), ["a_0_0"]) is None  # not the mask it left
    assert _correction.mask_before(torch.tensor([[1, 0, 0]]), ["x_0_0"]) is None  # no correction of that row


def test_each_tokens_text_joins_into_the_response(tokenizer: Any) -> None:
    """A character split over byte tokens is its last token's piece; special tokens are kept."""
    ids = tokenizer.encode("été <|end|>", add_special_tokens=False)
    pieces = token_pieces(tokenizer, ids)
    assert len(pieces) == len(ids)
    assert pieces == ["", "é", "t", "", "é", " ", "<|end|>"]
    slow = SimpleNamespace(decode=tokenizer.decode)  # a tokenizer without a Rust backend
    assert token_pieces(slow, ids) == pieces


def test_pieces_are_decoded_for_the_kept_rows_only(tokenizer: Any) -> None:
    """Of 8 prompts x 2 responses with k = 2, only the 4 kept rows' tokens are decoded, each distinct id once."""
    decoded: list[list[int]] = []

    class Backend:
        def __init__(self, backend: Any) -> None:
            self.backend = backend

        def decode_batch(self, rows: list[list[int]], **kwargs: Any) -> list[str]:
            if not kwargs.get("skip_special_tokens", True):  # the pieces (the texts skip special tokens)
                decoded.extend(rows)
            return list(self.backend.decode_batch(rows, **kwargs))

        def __getattr__(self, name: str) -> Any:
            return getattr(self.backend, name)

    class Counting:
        backend_tokenizer = Backend(tokenizer.backend_tokenizer)

        def __getattr__(self, name: str) -> Any:
            return getattr(tokenizer, name)

    rows = [Row(f"prompt {p}", answer(f"answer {p}.{i}")) for p in range(8) for i in range(2)]
    with capture_records(run_id="r", rollout_count=2, progress_interval_s=0) as records:
        send_rollout_batch(_with_log_probs(tokenizer, rows), Counting(), step=1)
    kept = _kept(records)
    assert len(kept) == 4
    kept_ids = {token for attributes in kept for token in tokens.decode(attributes[contract.TOKENS]).ids}
    assert all(len(row) == 1 for row in decoded)  # each id alone: no character is split here
    assert sorted(row[0] for row in decoded) == sorted(kept_ids)


def test_a_changed_correction_is_left_as_verl_made_it_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    """A verl whose correction takes other parameters: not wrapped, counted, a WARNING when rollouts are on."""

    def compute_rollout_correction_and_add_to_batch(batch: Any, config: Any, extra: Any) -> Any:
        return batch, {}

    module = SimpleNamespace(
        __name__=_correction.CORRECTION_MODULE,
        compute_rollout_correction_and_add_to_batch=compute_rollout_correction_and_add_to_batch,
    )
    with (
        caplog.at_level(logging.INFO, logger="otel_valgen"),
        capture_records(run_id="r", rollout_count=2, progress_interval_s=0),
    ):
        _rollout_hooks.on_correction_import(module)
        assert vg.stats()["verl_rollout_hooks_missing"] == 1
    assert module.compute_rollout_correction_and_add_to_batch is compute_rollout_correction_and_add_to_batch
    (said,) = [r for r in caplog.records if "not watched" in r.getMessage()]
    assert said.levelno == logging.WARNING
    assert "which the correction masked" in said.getMessage()
