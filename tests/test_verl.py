"""verl integration against verl 0.9.1's own classes, in one process (no Ray, no stand-in classes).

The Ray paths (the real fully-async actors, the sync trainer's real ``_validate``) are in
``tests/verl/``.
"""

from __future__ import annotations

import dataclasses
import inspect
from types import SimpleNamespace
from typing import Any

import pytest
from verl.trainer.ppo.ray_trainer import RayPPOTrainer  # verl==0.9.1, from the dev extra (verl-test)
from verl.trainer.ppo.v1 import PPOTrainer, PPOTrainerSync
from verl.utils import tracking

import otel_valgen as vg
from otel_valgen import contract
from otel_valgen.integrations import _trainer_step
from otel_valgen.integrations import verl as vg_verl
from otel_valgen.sampling import untagged
from otel_valgen.testing import capture_records

assert vg_verl.install()  # what otel-valgen's Ray setup hook does in every worker


def _by_event(records: list[dict[str, Any]], event: str) -> list[dict[str, Any]]:
    return [r for r in records if r["event_name"] == event]


def _config(count: int) -> Any:
    return SimpleNamespace(trainer=SimpleNamespace(log_val_generations=count, logger=["console", "wandb"]))


class _TrainerSkippingInit(RayPPOTrainer):
    """A user's subclass of verl's real trainer that skips ``super().__init__()`` (verl #6438)."""

    def __init__(self, count: int, global_steps: int) -> None:
        self.config = _config(count)
        self.global_steps = global_steps


def _call_like_verls_validate(trainer: Any, n: int) -> None:
    """Call the hook exactly as verl 0.9.1's ``_validate`` does: keywords, lists, float scores."""
    inputs = [f"prompt {i // 2}" for i in range(n)]  # val_kwargs.n = 2: each prompt twice, interleaved
    trainer._maybe_log_val_generations(inputs=inputs, outputs=[f"out {i}" for i in range(n)], scores=[0.5] * n)


def test_install_hooks_verls_own_base_classes() -> None:
    """install() patches verl's RayPPOTrainer and v1 PPOTrainer, so their subclasses inherit it."""
    assert RayPPOTrainer.__dict__["_otel_valgen_patched"] is True
    assert PPOTrainer.__dict__["_otel_valgen_patched"] is True
    assert PPOTrainerSync._maybe_log_val_generations is PPOTrainer._maybe_log_val_generations
    assert isinstance(RayPPOTrainer.__dict__["current_param_version"], property)
    assert vg_verl.install() is True  # idempotent


def test_what_the_row_tally_puts_in_verls_modules_pickles_for_ray() -> None:
    """The batch-tallying stand-ins in verl's trainer modules survive Ray's cloudpickle (by value, as actors go).

    Ray pickles a verl actor class's methods, and the module globals they name, by value; a closure over
    the tally's ContextVar failed there (fully-async's rollouter could not start).
    """
    import sys

    from ray import cloudpickle

    from otel_valgen.integrations.verl import _layout, _rows

    wrapped = []
    for module_name in _layout.VALIDATE_LOCALS:
        module = sys.modules.get(module_name)
        for name in (_layout.REWARD_FUNCTION, _layout.V1_STORE):
            value = getattr(module, name, None)
            if value is not None:
                assert isinstance(value, _rows._TallyingReward | _rows._TallyingStore), (module_name, name, value)
                wrapped.append(value)
                again = cloudpickle.loads(cloudpickle.dumps(value))
                assert type(again) is type(value)
    assert {type(value) for value in wrapped} == {_rows._TallyingReward, _rows._TallyingStore}


def test_verls_hook_sends_every_generation_at_global_steps_with_k() -> None:
    """The sync hook sends all M generations (presampled to k) at global_steps, k = log_val_generations."""
    with capture_records(run_id="verl", count=64) as records:
        _call_like_verls_validate(_TrainerSkippingInit(count=4, global_steps=12), n=50)
    generations = _by_event(records, contract.EVENT_GENERATION)
    assert len(generations) == 4
    assert {r["attributes"][contract.STEP] for r in generations} == {12}
    assert {r["attributes"][contract.SAMPLE_COUNT] for r in generations} == {4}
    assert {r["attributes"][contract.SOURCE] for r in generations} == {"trainer"}
    (end,) = _by_event(records, contract.EVENT_VALIDATION_END)
    assert end["attributes"][contract.SEEN] == 50


def test_responses_to_one_prompt_get_distinct_stable_ids() -> None:
    """Two responses to one prompt get ids <hash>/0 and <hash>/1 (then the part's tag), the same at every step."""
    ids_by_step = {}
    for step in (1, 2):
        with capture_records(run_id="verl", count=64) as records:
            _call_like_verls_validate(_TrainerSkippingInit(count=64, global_steps=step), n=6)
        generations = _by_event(records, contract.EVENT_GENERATION)
        ids_by_step[step] = sorted(untagged(r["attributes"][contract.SAMPLE_ID]) for r in generations)
    assert ids_by_step[1] == ids_by_step[2]
    assert len(set(ids_by_step[1])) == 6
    assert {i.rsplit("/", 1)[1] for i in ids_by_step[1]} == {"0", "1"}


def test_v1_trainer_subclass_skipping_init_logs() -> None:
    """A subclass of verl's v1 PPOTrainerSync that skips __init__ logs through the patched hook."""

    class V1Trainer(PPOTrainerSync):
        def __init__(self) -> None:
            self.config = _config(3)
            self.global_steps = 8

    with capture_records(run_id="verl", count=64) as records:
        _call_like_verls_validate(V1Trainer(), n=10)
    assert {r["attributes"][contract.STEP] for r in _by_event(records, contract.EVENT_GENERATION)} == {8}
    assert len(_by_event(records, contract.EVENT_GENERATION)) == 3


def test_zero_log_val_generations_sends_nothing() -> None:
    """trainer.log_val_generations == 0 disables the table, as in verl."""
    with capture_records(run_id="verl", count=64) as records:
        _call_like_verls_validate(_TrainerSkippingInit(count=0, global_steps=1), n=4)
    assert records == []


def test_missing_step_is_a_counted_drop_not_an_attribute_error() -> None:
    """A trainer object without global_steps costs a counted drop, never an exception."""
    trainer = _TrainerSkippingInit(count=4, global_steps=1)
    del trainer.global_steps
    with capture_records(run_id="verl", count=64) as records:
        _call_like_verls_validate(trainer, n=4)
    assert _by_event(records, contract.EVENT_GENERATION) == []
    assert vg.stats()["dropped.missing_step"] == 4


def test_mixin_over_a_patched_base_opens_one_block() -> None:
    """The explicit mixin's _validate over the hooked base's _validate gives one block, not two."""

    class MixinTrainer(vg_verl.ValGenerationsMixin, _TrainerSkippingInit):
        valgen_source = "my-trainer"

    trainer = MixinTrainer(count=5, global_steps=3)

    def verls_validate() -> None:  # the part of verl's _validate that matters here: the hook call
        _call_like_verls_validate(trainer, n=20)

    def hooked_base_validate() -> None:
        vg_verl._validation.validate_in_block(verls_validate, trainer, (), {})

    with capture_records(run_id="verl", count=64) as records:
        vg_verl._validation.validate_in_block(hooked_base_validate, trainer, (), {})  # what the mixin's _validate does
    (end,) = _by_event(records, contract.EVENT_VALIDATION_END)
    assert end["attributes"][contract.SOURCE] == "my-trainer"
    assert end["attributes"][contract.SEEN] == 20
    assert len(_by_event(records, contract.EVENT_GENERATION)) == 5


def test_fully_async_trainer_step_survives_outside_ray() -> None:
    """Setting current_param_version on a verl trainer works as before when no Ray job runs."""
    trainer = _TrainerSkippingInit(count=4, global_steps=1)
    trainer.current_param_version = 7  # type: ignore[attr-defined]
    assert trainer.current_param_version == 7  # type: ignore[attr-defined]
    assert vars(trainer)["current_param_version"] == 7
    assert _trainer_step.read() is None
    with pytest.raises(AttributeError):
        _ = _TrainerSkippingInit(count=4, global_steps=1).current_param_version  # type: ignore[attr-defined]


def test_logger_keeps_verls_call_shape() -> None:
    """ValidationGenerationsLogger has the fields and log() signature of verl's own class."""
    ours, theirs = vg_verl.ValidationGenerationsLogger, tracking.ValidationGenerationsLogger
    assert [f.name for f in dataclasses.fields(ours)] == [f.name for f in dataclasses.fields(theirs)]
    assert list(inspect.signature(ours.log).parameters) == list(inspect.signature(theirs.log).parameters)
    samples = [("q1", "a1", 0.5), ("q2", "a2", 1.0), ("q3", "a3", 0)]
    with capture_records(run_id="verl", count=8) as records:
        ours(project_name="p", experiment_name="e").log(["console", "wandb"], samples, 40)
    generations = _by_event(records, contract.EVENT_GENERATION)
    assert sorted(r["body"]["input"] for r in generations) == ["q1", "q2", "q3"]
    assert {r["attributes"][contract.STEP] for r in generations} == {40}


def test_function_form_reports_delivery() -> None:
    """log_val_generations returns True once the step's records were exported."""
    with capture_records(run_id="verl", count=2) as records:
        assert vg_verl.log_val_generations(["a", "b", "c"], ["x", "y", "z"], [1, 2, 3], step=5, sources_expected=2)
    (end,) = _by_event(records, contract.EVENT_VALIDATION_END)
    assert end["attributes"][contract.SOURCES_EXPECTED] == 2
