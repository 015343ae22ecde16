"""Parts of one step closed by two samplers: the service merges them, across a restart of its own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from otel_valgen import contract
from otel_valgen.exporter.backends import create_backends
from otel_valgen.exporter.backends.tensorboard import TensorBoardConfig
from otel_valgen.exporter.parts import StepParts
from otel_valgen.exporter.service import ExporterService, ServiceConfig
from otel_valgen.exporter.steps import ClosedStep, assemble
from otel_valgen.otlp_json import to_otlp_json
from otel_valgen.reader import split_request
from tests.support.otlp_values import any_value

from .conftest import _attrs, generation, request, summary, wait_for, wandb_backend, written
from .tensorboard_files import read_scalars, read_texts
from .wandb_files import read_run

KEY = "val/generations"
K = 4  # the conftest's generations ask for 4; s{i} has sample key 1000 + i


def part(sampler: str, ids: list[int], *, ended: bool, step: int = 3, closed_reason: str = "wait") -> Any:
    """One sampler's part of run ``parts`` step ``step``: generations ``ids`` (ranked) and its summary.

    The one source (trainer) saw 6 generations and emitted them all; its end record reached the
    sampler when ``ended``.
    """
    kept = sorted(ids)[:K]
    logs = [generation("parts", step, i, rank=rank) for rank, i in enumerate(kept, start=1)]
    closing = summary("parts", step, len(kept), seen=6 if ended else len(ids), closed_reason=closed_reason)
    figure = {"source": "trainer@", "announced": True, "ended": ended, "received": len(ids), "kept": len(kept)}
    if ended:
        figure |= {"seen": 6, "emitted": 6, "score.count": 6, "score.sum": 3.0}
    closing.attributes.extend(_attrs({contract.SAMPLER: sampler, contract.SAMPLE_COUNT: K}))
    closing.attributes.add(key=contract.SOURCE_FIGURES, value=any_value([figure]))
    return request(*logs, closing)


def service(state: Path, boards: Path) -> ExporterService:
    """A started service writing to TensorBoard under ``boards``, its state in ``state``."""
    backends = create_backends(["tensorboard"], str(state), {"tensorboard": TensorBoardConfig(root=str(boards))})
    running = ExporterService(ServiceConfig(state_dir=str(state), retry_after_s=0.5), backends)
    running.start()
    return running


def test_a_later_part_merges_into_a_marked_correction_across_a_restart(tmp_path: Path) -> None:
    """Part a is written as it is; part b, after a restart, merges with it into the exact step, marked corrected."""
    state, boards = tmp_path / "state", tmp_path / "boards"
    first = service(state, boards)
    first.accept(to_otlp_json(part("a", [0, 2, 4], ended=False)))
    wait_for(lambda: written(first, "tensorboard") == 1)
    first.stop()

    second = service(state, boards)  # the parts are kept in the state folder
    second.accept(to_otlp_json(part("b", [1, 3, 5], ended=True)))
    wait_for(lambda: written(second, "tensorboard") == 1)
    second.stop()
    assert second.stats()["merged_steps"] == 1

    folder = boards / "otel-valgen" / "parts"
    assert read_texts(folder, KEY)[3].count("### Sample") == 3, "part a as it came"
    corrected = read_texts(folder, f"{KEY}/corrected")[3]
    assert [f"**Input:** q{i}\n" in corrected for i in range(6)] == [True] * K + [False] * 2
    assert read_scalars(folder, f"{KEY}/corrected/seen") == {3: 6.0}
    assert read_scalars(folder, f"{KEY}/corrected/missing") == {3: 0.0}
    assert read_scalars(folder, f"{KEY}/corrected/score_mean") == {3: 0.5}


def test_a_part_sent_again_by_its_sampler_is_not_written_twice(tmp_path: Path) -> None:
    """The collector retries a request: the same sampler's part replaces itself and nothing is written again."""
    running = service(tmp_path / "state", tmp_path / "boards")
    for _ in range(2):
        running.accept(to_otlp_json(part("a", [0, 1, 2, 3, 4], ended=True)))
    wait_for(running.idle)
    running.stop()
    counts = running.stats()
    assert (counts["merged_steps"], counts["backends"]["tensorboard"]["written_steps"]) == (0, 1)
    assert counts["backends"]["tensorboard"]["unchanged_steps"] == 1


def test_wandb_writes_the_merged_step_as_a_corrected_table(wandb_dir: Path, tmp_path: Path) -> None:
    """Wandb cannot change a past step: part a's rows stay, the merged step is logged whole under <key>/corrected."""
    running = ExporterService(ServiceConfig(state_dir=str(tmp_path), retry_after_s=0.5), [wandb_backend()])
    running.start()
    running.accept(to_otlp_json(part("a", [0, 2, 4], ended=False)))
    wait_for(lambda: written(running) == 1)
    running.accept(to_otlp_json(part("b", [1, 3, 5], ended=True)))
    wait_for(lambda: written(running) == 2)
    running.stop()
    files = read_run(wandb_dir, "parts")
    ((_, first),) = files.tables(KEY)
    ((step, corrected),) = files.tables(f"{KEY}/corrected")
    assert [row[1] for row in first["data"]] == ["s000", "s002", "s004"]
    assert step == 3
    assert [row[1] for row in corrected["data"]] == ["s000", "s001", "s002", "s003"]


def test_the_parts_file_keeps_about_what_is_kept(tmp_path: Path) -> None:
    """Only the last ``max_steps`` steps' parts are kept: the file is compacted, and a restart reads them back."""
    parts = StepParts(tmp_path, max_steps=2)
    for step in range(10):
        message = part("a", [0, 1], ended=True)
        for record in message.resource_logs[0].scope_logs[0].log_records:
            for attribute in record.attributes:
                if attribute.key == contract.STEP:
                    attribute.value.int_value = step
        (closed,) = assemble(split_request(to_otlp_json(message)).records).steps
        parts.add(closed)
    lines = (tmp_path / "parts.jsonl").read_text().splitlines()
    assert len(lines) <= 2 * 2 + 1
    again = StepParts(tmp_path, max_steps=2)
    assert [key[1] for key in again._parts] == [8, 9]


def closed(sampler: str, ids: list[int], *, ended: bool, step: int = 3, closed_reason: str = "wait") -> ClosedStep:
    """``part``'s request assembled into the closed step the service hands to ``StepParts``."""
    request = to_otlp_json(part(sampler, ids, ended=ended, step=step, closed_reason=closed_reason))
    (step_part,) = assemble(split_request(request).records).steps
    return step_part


def test_a_part_sent_again_after_the_merge_is_not_merged_twice() -> None:
    """Sampler b's part again (a retried request): the step is still the merge of a and b, merged once."""
    parts = StepParts()
    assert parts.add(closed("a", [0, 2, 4], ended=False)).reason == "summary"
    merged = parts.add(closed("b", [1, 3, 5], ended=True))
    again = parts.add(closed("b", [1, 3, 5], ended=True))
    assert (parts.merged, parts.unmerged) == (1, 0)
    for step in (merged, again):
        assert step.reason == "merged"
        assert [g.sample_id for g in step.generations] == ["s000", "s001", "s002", "s003"]
        assert step.summary is not None
        assert step.summary[contract.SAMPLERS] == ["a", "b"]
        assert step.summary[contract.SEEN] == 6


def test_the_oldest_steps_parts_are_forgotten_first_and_a_late_part_is_counted() -> None:
    """With 2 steps kept, a third step's later part still merges; a part of the forgotten first step comes alone."""
    parts = StepParts(max_steps=2)
    for step in (1, 2, 3):
        parts.add(closed("a", [0, 2, 4], ended=False, step=step))
    assert parts.add(closed("b", [1, 3, 5], ended=True, step=3)).reason == "merged"
    alone = parts.add(closed("b", [1, 3, 5], ended=True, step=1))
    assert alone.reason == "summary"
    assert [g.sample_id for g in alone.generations] == ["s001", "s003", "s005"]
    assert (parts.merged, parts.unmerged) == (1, 1)


def test_the_merge_does_not_depend_on_the_order_the_parts_arrive() -> None:
    """Parts a then b, or b then a: the same merged step (its summary, its records)."""
    merged = []
    for order in (("a", "b"), ("b", "a")):
        parts = StepParts()
        given = {
            "a": closed("a", [0, 2], ended=False, closed_reason="max_groups"),
            "b": closed("b", [1, 3, 5], ended=True),
        }
        steps = [parts.add(given[name]) for name in order]
        merged.append(steps[-1])
    first, second = merged
    assert first.summary is not None
    assert first.summary[contract.CLOSED_REASON] == "max_groups"  # one was missing: not complete
    assert first.summary == second.summary
    assert first.generations == second.generations


def test_the_parts_kept_in_the_state_folder_merge_after_a_restart(tmp_path: Path) -> None:
    """Part a before a restart, part b after it: merged from the state folder's parts."""
    StepParts(tmp_path).add(closed("a", [0, 2, 4], ended=False))
    restarted = StepParts(tmp_path)
    merged = restarted.add(closed("b", [1, 3, 5], ended=True))
    assert (merged.reason, restarted.merged) == ("merged", 1)
    assert [g.sample_id for g in merged.generations] == ["s000", "s001", "s002", "s003"]
