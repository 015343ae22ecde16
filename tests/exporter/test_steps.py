"""``assemble``: the records of one request become closed steps, with what was set aside counted."""

from __future__ import annotations

from otel_valgen import contract
from otel_valgen.exporter.steps import assemble, summary_scalars
from otel_valgen.otlp_json import to_otlp_json
from otel_valgen.reader import split_request

from .conftest import generation, group_order, request, rollout, rollout_request, summary


def steps_of(*logs: object, resource: dict[str, object] | None = None) -> object:
    """``assemble`` over one request holding ``logs``, decoded as the service decodes it."""
    return assemble(split_request(to_otlp_json(request(*logs, resource=resource))).records, now=0.0)


def test_a_closed_step_in_rank_order_with_its_summary() -> None:
    """The sampler's request (ranked records, then the summary) is one complete step, ordered by rank."""
    logs = [generation("r", 1, i, rank=3 - i) for i in range(3)]
    out = steps_of(*logs, summary("r", 1, 3), resource={contract.WANDB_RUN_ID: "w"})
    (step,) = out.steps
    assert [g.sample_id for g in step.generations] == ["s002", "s001", "s000"]
    assert (step.complete, step.reason, step.summary[contract.KEPT]) == (True, "summary", 3)
    assert step.resource[contract.WANDB_RUN_ID] == "w"
    assert (out.generations, out.summaries, out.without_summary) == (3, 1, 0)


def test_late_records_are_dropped_and_counted() -> None:
    """Generations forwarded as late (valgen.late = true) are counted, never part of a step."""
    out = steps_of(generation("r", 2, 0, late=True), generation("r", 2, 1, late=True))
    assert out.steps == []
    assert out.late_dropped == 2


def test_records_without_their_summary_make_an_incomplete_step() -> None:
    """A step split over requests (a batch processor after the sampler) is written incomplete and counted."""
    out = steps_of(*[generation("r", 3, i) for i in range(2)])
    (step,) = out.steps
    assert (step.complete, step.reason, len(step.generations)) == (False, "no_summary", 2)
    assert out.without_summary == 1


def test_a_summary_without_its_records_is_a_step_without_rows() -> None:
    """A summary whose records did not come is still a step (its scalars are written), and counted."""
    out = steps_of(summary("r", 4, 3))
    (step,) = out.steps
    assert (step.generations, step.complete) == ([], False)
    assert out.summary_without_records == 1


def test_steps_and_attempts_are_kept_apart_and_duplicates_counted() -> None:
    """Two steps (and two attempts) in one request stay apart; a repeated sample id counts once."""
    logs = [generation("r", 5, 0), generation("r", 5, 0), generation("r", 6, 0), generation("r", 6, 0, attempt="b")]
    out = steps_of(*logs)
    assert [(s.step, s.attempt, len(s.generations)) for s in out.steps] == [(5, "", 1), (6, "", 1), (6, "b", 1)]
    assert out.duplicates == 1


def test_the_step_takes_the_resource_that_names_a_run_in_any_tracker() -> None:
    """A worker's resource comes first, the trainer's names only its ClearML task: the step takes the trainer's."""
    worker = request(generation("r", 7, 0), resource={"service.name": "worker"})
    trainer = request(generation("r", 7, 1), summary("r", 7, 2), resource={"clearml.task_id": "t-1"})
    worker.resource_logs.extend(trainer.resource_logs)
    (step,) = assemble(split_request(to_otlp_json(worker)).records, now=0.0).steps
    assert step.resource == {"clearml.task_id": "t-1"}


def test_a_rollout_step_is_a_step_of_its_own_with_each_prompts_responses_together() -> None:
    """Rollouts of a step are a step of their kind; unranked (no sampler), they are still ordered by prompt."""
    logs = [rollout("r", 8, p, i) for p, i in sorted(group_order(), key=lambda item: item[1])]  # interleaved
    out = steps_of(generation("r", 8, 0), *logs)
    validation, rollouts = out.steps
    assert (validation.kind, rollouts.kind, rollouts.rollout) == (contract.KIND_VALIDATION, contract.KIND_ROLLOUT, True)
    assert [g.sample_id for g in rollouts.generations] == [f"p{p}/{i}" for p, i in group_order()]
    assert (out.validation_steps, out.rollout_steps) == (1, 1)


def test_summary_scalars_of_a_rollout_step_count_prompts() -> None:
    """A rollout summary's prompts seen and kept are scalars next to seen and kept."""
    (step,) = steps_of(*rollout_request("r", 9).resource_logs[0].scope_logs[0].log_records).steps
    scalars = summary_scalars(step.summary)
    assert (scalars["kept"], scalars["prompts_kept"], scalars["prompts_seen"]) == (4, 2, 3)


def test_summary_scalars_give_each_data_source_under_a_name_every_tracker_takes() -> None:
    """A summary's valgen.data_sources become data_source/<name>/{seen,kept,score_mean}; odd names are made safe."""
    figures = [
        {"data_source": "openai/gsm8k", "seen": 40, "kept": 4, "score.count": 40, "score.sum": 30.0},
        {"data_source": "", "seen": 2, "kept": 2},
        {"data_source": "数学 (hard)", "seen": 1, "kept": 1, "score.count": 0, "score.sum": 0.0},
    ]
    scalars = summary_scalars({contract.SEEN: 43, contract.DATA_SOURCES: figures})
    assert scalars["data_source/openai_gsm8k/seen"] == 40
    assert scalars["data_source/openai_gsm8k/kept"] == 4
    assert scalars["data_source/openai_gsm8k/score_mean"] == 0.75
    assert scalars["data_source/none/kept"] == 2
    assert "data_source/none/score_mean" not in scalars, "no score counted: no mean"
    assert scalars["data_source/__ _hard_/seen"] == 1
    assert "data_source/__ _hard_/score_mean" not in scalars
