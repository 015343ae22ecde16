"""The TensorBoard backend: verl's per-step text and the step's scalars, read back with TensorBoard's reader."""

from __future__ import annotations

from pathlib import Path

from otel_valgen import contract
from otel_valgen.exporter.backends.tensorboard import TensorBoardBackend, TensorBoardConfig, target_dir
from otel_valgen.exporter.ledger import Ledger
from otel_valgen.exporter.service import ExporterService

from .conftest import ROLLOUT_KEY, both_kinds, generation, request, serve_requests, summary
from .tensorboard_files import read_scalars, read_texts

KEY = "val/generations"


def step_for(run: str, step: int, k: int, log_dir: str | None, **kwargs: object) -> object:
    """A closed step whose resource names the job's TensorBoard folder."""
    resource = {"service.name": "trainer"} | ({"tensorboard.log_dir": log_dir} if log_dir else {})
    logs = [generation(run, step, i, **kwargs) for i in range(k)]
    return request(*logs, summary(run, step, k, seen=20), resource=resource)


def run(root: Path, *requests: object, state: Path | None = None) -> ExporterService:
    """Feed ``requests`` to a service with the TensorBoard backend only; stop it when written."""
    return serve_requests([TensorBoardBackend(TensorBoardConfig(root=str(root)), Ledger(state))], *requests)


def test_verl_text_per_step_and_scalars_in_the_jobs_folder(tmp_path: Path) -> None:
    """The trainer's TENSORBOARD_DIR (relative to the root) gets verl's markdown per step and the scalars."""
    run(tmp_path, step_for("tb", 1, 3, "tensorboard_log/proj/exp"), step_for("tb", 2, 2, "tensorboard_log/proj/exp"))
    folder = tmp_path / "tensorboard_log" / "proj" / "exp"
    texts = read_texts(folder, KEY)
    assert sorted(texts) == [1, 2]
    assert texts[1].startswith("**Generation Results - Step 1**\n\n### Sample 1\n**Input:** q0\n\n")
    assert texts[1].count("### Sample") == 3
    assert texts[2].count("### Sample") == 2
    assert "**Output:** a2@1\n\n**Score:** 0.5\n\n**ground_truth:** t2\n\n**data_source:** gsm8k\n\n---\n\n" in texts[1]
    assert read_scalars(folder, f"{KEY}/seen") == {1: 20.0, 2: 20.0}
    assert read_scalars(folder, f"{KEY}/kept") == {1: 3.0, 2: 2.0}
    assert [p.name.endswith(".otel-valgen") for p in folder.iterdir()] == [True]


def test_a_step_sent_again_is_not_written_twice(tmp_path: Path) -> None:
    """The ledger (kept in the state folder across a restart) makes a resent step add no event."""
    item = step_for("again", 3, 2, "logs")
    first = run(tmp_path / "root", item, state=tmp_path / "state")
    second = run(tmp_path / "root", item, item, state=tmp_path / "state")
    assert first.stats()["backends"]["tensorboard"]["written_steps"] == 1
    assert second.stats()["backends"]["tensorboard"]["unchanged_steps"] == 2
    from tensorboard.backend.event_processing.event_accumulator import TENSORS, EventAccumulator

    accumulator = EventAccumulator(str(tmp_path / "root" / "logs"), size_guidance={TENSORS: 0})
    accumulator.Reload()
    assert len(accumulator.Tensors(KEY)) == 1


def test_folders_outside_the_root_are_never_written(tmp_path: Path) -> None:
    """An absolute folder outside the root, or one climbing out with '..', goes under <root>/otel-valgen/<run>."""
    root = tmp_path / "root"
    assert target_dir(root, {"tensorboard.log_dir": str(tmp_path / "elsewhere")}, "r1") == (
        root.resolve() / "otel-valgen" / "r1",
        False,
    )
    assert target_dir(root, {"tensorboard.log_dir": "../../etc"}, "../r2")[0] == root.resolve() / "otel-valgen" / "_r2"
    assert target_dir(root, {"tensorboard.log_dir": str(root / "in")}, "r3") == (root.resolve() / "in", True)
    run(root, step_for("r1", 1, 1, str(tmp_path / "elsewhere")))
    assert not (tmp_path / "elsewhere").exists()
    assert sorted(read_texts(root / "otel-valgen" / "r1", KEY)) == [1]


def test_extra_columns_appear_in_the_text(tmp_path: Path) -> None:
    """Extra columns (valgen.extra.*) are written as lines of each sample."""
    logs = [generation("ex", 1, i) for i in range(2)]
    for i, log in enumerate(logs):
        log.attributes.add(key=f"{contract.EVENT_PREFIX}extra.acc").value.double_value = float(i)
    run(tmp_path, request(*logs, summary("ex", 1, 2), resource={"tensorboard.log_dir": "x"}))
    text = read_texts(tmp_path / "x", KEY)[1]
    assert "**acc:** 0.0" in text
    assert "**acc:** 1.0" in text


def test_a_retried_request_of_an_attempt_already_written_writes_nothing(tmp_path: Path) -> None:
    """A step of attempt L1.1 sent again (retry, and after a restart) is recorded under L1.1: one event only."""
    logs = [generation("att", 4, i, attempt="L1.1") for i in range(2)]
    closing = summary("att", 4, 2, attempt="L1.1", attempt_start=5_000)
    item = request(*logs, closing, resource={"service.name": "trainer", "tensorboard.log_dir": "logs"})
    first = run(tmp_path / "root", item, item, state=tmp_path / "state")
    second = run(tmp_path / "root", item, state=tmp_path / "state")
    stats = first.stats()["backends"]["tensorboard"]
    assert (stats["written_steps"], stats["unchanged_steps"]) == (1, 1)
    assert second.stats()["backends"]["tensorboard"]["unchanged_steps"] == 1
    assert sorted(read_texts(tmp_path / "root" / "logs", KEY)) == [4]
    from tensorboard.backend.event_processing.event_accumulator import TENSORS, EventAccumulator

    accumulator = EventAccumulator(str(tmp_path / "root" / "logs"), size_guidance={TENSORS: 0})
    accumulator.Reload()
    assert len(accumulator.Tensors(KEY)) == 1


def test_rollouts_are_written_under_their_own_tag_by_prompt(tmp_path: Path) -> None:
    """A step's rollouts: a text under train/generations, a section per prompt; the validation text as before."""
    service = run(tmp_path, *both_kinds("tbk", 5, {"tensorboard.log_dir": "logs"}))
    folder = tmp_path / "logs"
    (validation,) = read_texts(folder, KEY).values()
    assert validation.startswith("**Generation Results - Step 5**\n\n### Sample 1\n**Input:** q0\n\n")
    assert "prompt0" not in validation
    text = read_texts(folder, ROLLOUT_KEY)[5]
    assert text.startswith("**Rollouts - Step 5**\n\n## Prompt 1: p1\n**Input:** prompt1\n\n### Response p1/0\n")
    assert text.index("p1/1") < text.index("## Prompt 2: p0") < text.index("p0/0") < text.index("p0/1")
    assert "**output:** r0.1@5\n\n**score:** 1.0\n\n**advantage:** 0.5\n\n**response_length:** 11\n\n" in text
    assert "**truncated:** True\n\n**ground_truth:** t0\n\n**data_source:** gsm8k\n\n" in text
    assert read_scalars(folder, f"{ROLLOUT_KEY}/kept") == {5: 4.0}
    assert read_scalars(folder, f"{ROLLOUT_KEY}/prompts_kept") == {5: 2.0}
    assert read_scalars(folder, f"{KEY}/kept") == {5: 2.0}
    stats = service.stats()
    assert (stats["validation_steps"], stats["rollout_steps"], stats["steps"]) == (1, 1, 2)
