"""``otel-valgen demo``: verl's fully-async validation layout on a local Ray cluster.

A rollouter actor spreads the validation set in batches over generation actors; a trainer
actor validates a part itself. Every part emits through otel_valgen under the trainer's
step and the driver's trace context; nobody holds a wandb run or a logger object. The
records go to the embedded sink (or to ``OTEL_EXPORTER_OTLP_ENDPOINT``), and the demo
then reads the sink back and prints the sampled table of each step.
"""

from __future__ import annotations

import os
import random
import shutil
import sys
import time
from typing import Any

from rich.console import Console

import otel_valgen as vg
from otel_valgen import ray as vg_ray
from otel_valgen.cli.render import render_tables
from otel_valgen.reader import read_paths
from otel_valgen.selection import select_steps

_BATCH = 64


def make_prompts(count: int) -> list[tuple[str, str, str]]:
    """Synthetic arithmetic prompts: (uid, question, answer)."""
    rng = random.Random(7)
    prompts = []
    for index in range(count):
        a, b = rng.randrange(100), rng.randrange(100)
        prompts.append((f"val-{index:05d}", f"What is {a} + {b}?", str(a + b)))
    return prompts


def generate(step: int, prompts: list[tuple[str, str, str]], responses: int, seed: int) -> dict[str, list[Any]]:
    """A toy policy that answers correctly more often at later steps."""
    rng = random.Random(seed * 1000 + step)
    columns: dict[str, list[Any]] = {"inputs": [], "outputs": [], "scores": [], "ground_truths": [], "sample_ids": []}
    for uid, question, answer in prompts:
        for _ in range(responses):
            correct = rng.random() < min(0.95, 0.3 + 0.2 * step)
            said = answer if correct else str(int(answer) + rng.choice((-2, -1, 1, 10)))
            columns["inputs"].append(question)
            columns["outputs"].append(f"{question.removeprefix('What is ').rstrip('?')} = {said}")
            columns["scores"].append(1.0 if correct else 0.0)
            columns["ground_truths"].append(answer)
            columns["sample_ids"].append(uid)
    return columns


def _log(columns: dict[str, list[Any]]) -> None:
    vg.log_generations(
        columns["inputs"],
        columns["outputs"],
        columns["scores"],
        ground_truths=columns["ground_truths"],
        sample_ids=columns["sample_ids"],
    )


def _define_actors() -> tuple[Any, Any, Any]:
    import ray

    @ray.remote(num_cpus=0)
    class GenerationWorker:
        """Generates responses for the batches the rollouter hands it."""

        def __init__(self, index: int) -> None:
            self.index = index

        def validate(self, step: int, carrier: dict[str, str], batches: list[Any], responses: int) -> int:
            with vg.validation(step=step, source=f"generation-{self.index}", carrier=carrier):
                for batch in batches:
                    _log(generate(step, batch, responses, seed=self.index))
            return sum(len(batch) for batch in batches) * responses

    @ray.remote(num_cpus=0)
    class Rollouter:
        """verl's rollouter: validates at the trainer's step, spread over generation workers."""

        def __init__(self, workers: int) -> None:
            self.workers = [GenerationWorker.remote(i) for i in range(workers)]  # type: ignore[attr-defined]

        def validate(self, step: int, carrier: dict[str, str], prompts: list[Any], responses: int) -> int:
            batches = [prompts[i : i + _BATCH] for i in range(0, len(prompts), _BATCH)]
            shares: list[list[Any]] = [[] for _ in self.workers]
            for index, batch in enumerate(batches):
                shares[index % len(self.workers)].append(batch)
            return sum(
                ray.get(
                    [
                        worker.validate.remote(step, carrier, share, responses)
                        for worker, share in zip(self.workers, shares, strict=True)
                    ]
                )
            )

    @ray.remote(num_cpus=0)
    class Trainer:
        """verl's trainer, validating its own part of the set."""

        def validate(self, step: int, carrier: dict[str, str], prompts: list[Any], responses: int) -> int:
            with vg.validation(step=step, source="trainer", carrier=carrier):
                _log(generate(step, prompts, responses, seed=99))
            return len(prompts) * responses

    return GenerationWorker, Rollouter, Trainer


def run_demo(steps: int, count: int, prompts: int, responses: int, workers: int, directory: str | None) -> int:
    """Run the demo; return the process exit code."""
    import ray

    console = Console(stderr=True)
    run_id = f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
    settings = vg.configure(run_id=run_id, count=count, directory=directory, source="driver")
    if settings is None:
        console.print("[red]could not configure otel_valgen[/]")
        return 1
    target = f"OTLP {settings.endpoint}" if settings.endpoint else f"files in {os.path.abspath(settings.directory)}"
    console.print(f"run [bold]{run_id}[/]: k={count}, sending to {target}")
    ray.init(runtime_env=vg_ray.runtime_env(), include_dashboard=False, log_to_driver=False, num_cpus=2)
    try:
        _, rollouter_cls, trainer_cls = _define_actors()
        rollouter, trainer = rollouter_cls.remote(workers), trainer_cls.remote()
        dataset = make_prompts(prompts)
        split = len(dataset) * 3 // 4
        for step in range(1, steps + 1):
            started = time.monotonic()
            # Sources: the driver, every generation worker, the trainer.
            with vg.validation(step=step, source="driver", sources_expected=workers + 2) as block:
                carrier = block.carrier()
                done = ray.get(
                    [
                        rollouter.validate.remote(step, carrier, dataset[:split], responses),
                        trainer.validate.remote(step, carrier, dataset[split:], responses),
                    ]
                )
            console.print(
                f"step {step}: {sum(done)} generations from {workers} generation actors and the trainer, "
                f"trace {block.trace_id()}, {time.monotonic() - started:.2f}s"
            )
    finally:
        ray.shutdown()
    vg.flush()
    if settings.endpoint:
        console.print(f"records sent to {settings.endpoint}: look in wandb or Grafana for run {run_id}")
        return 0
    errors: list[Any] = []
    selections = select_steps(r for r in read_paths([settings.directory], errors.append) if r.run_id == run_id)
    render_tables(selections, Console(), width=24)
    console.print(
        f"files: {os.path.abspath(settings.directory)}  ·  again: {_command()} show {settings.directory} --run {run_id}"
    )
    return 0 if selections and not errors else 1


def _command() -> str:
    """How to run ``otel-valgen`` from here: its name when PATH finds this interpreter's, else that script's path.

    ``make demo`` installs into ``.venv``, which a shell that did not activate it does not search.
    """
    script = os.path.join(os.path.dirname(sys.executable), "otel-valgen")
    found = shutil.which("otel-valgen")
    if not os.path.isfile(script) or (found is not None and os.path.samefile(found, script)):
        return "otel-valgen"
    return os.path.relpath(script)
