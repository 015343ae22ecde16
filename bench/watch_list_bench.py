"""Benchmark: how well each rollout rule follows prompts through training.

The simulation: a dataset of 1,024 prompts (ids ``p0000`` .. ``p1023``), shuffled at every epoch
and cut into training steps of 256 prompts (4 steps per epoch), for several epochs; each
prompt has ``--responses`` responses. Every step goes through the real library path:
``vg.log_rollouts`` into an in-memory exporter (``otel_valgen.testing.capture_records``), with
presampling on, so the kept prompts are those the emitter's presampler (``_presample.LocalSample``,
a ``sampling.GroupView``) sends. Two rules, each run for every seed (the sampling seed and the
shuffle seed):

- bottom-k: ``rollout_count = 4``, no rate (the default): exactly 4 prompts per step, the 4
  smallest prompt keys of the step's batch;
- watch-list: ``rollout_rate = 4/256`` (4 prompts per step on average) capped at
  ``rollout_count = 16``: every prompt whose key is below ``floor(rate * 2**63)``.

Printed per rule, over all seeds:

- *followed*: of the prompts chosen in an epoch, the share chosen again in the next epoch
  (every prompt comes back once per epoch);
- the count of prompts kept per step: mean, standard deviation, min, max;
- *cap overflow*: the share of steps whose prompts under the rate (the end record's
  ``valgen.prompts_under_rate``) exceeded the cap, and the prompts left out in all;
- *distinct*: how many distinct prompts a run showed in all, on average.

Run: ``python bench/watch_list_bench.py [--epochs 5] [--seeds 20] [--responses 1] [--cap 16]``;
nothing is asserted.
"""

from __future__ import annotations

import argparse
import itertools
import logging
import random
import statistics
import time
from dataclasses import dataclass, field

import otel_valgen as vg
from otel_valgen import contract
from otel_valgen.testing import capture_records

PROMPTS = 1024
BATCH = 256
K = 4
RATE = 4 / 256
CAP = 16


@dataclass
class Figures:
    """What one rule did over every seed."""

    counts: list[int] = field(default_factory=list)  # prompts kept per step
    followed: int = 0  # chosen in an epoch and again in the next
    followable: int = 0  # chosen in an epoch that has a next one
    overflow_steps: int = 0
    over_cap: int = 0
    distinct: list[int] = field(default_factory=list)  # per run


def run(seed: int, epochs: int, responses: int, rate: float | None, k: int, figures: Figures) -> None:
    """One training run of ``epochs`` shuffled epochs through ``vg.log_rollouts``; adds its figures."""
    rng = random.Random(seed)
    prompts = [f"p{i:04d}" for i in range(PROMPTS)]
    chosen_by_epoch: list[set[str]] = []
    with capture_records(
        run_id=f"bench-{seed}", seed=seed, rollout_count=k, rollout_rate=rate, progress_interval_s=0
    ) as records:
        step = 0
        for _ in range(epochs):
            rng.shuffle(prompts)
            for start in range(0, PROMPTS, BATCH):
                step += 1
                ids = [pid for pid in prompts[start : start + BATCH] for _ in range(responses)]
                vg.log_rollouts([f"prompt {pid}" for pid in ids], ["answer"] * len(ids), prompt_ids=ids, step=step)
        kept: dict[int, set[str]] = {s: set() for s in range(1, step + 1)}
        for record in records:
            attributes = record["attributes"]
            if record["event_name"] == contract.EVENT_GENERATION:
                kept[attributes[contract.STEP]].add(attributes[contract.PROMPT_ID])
            elif record["event_name"] == contract.EVENT_VALIDATION_END and rate is not None:
                under = attributes[contract.PROMPTS_UNDER_RATE]
                figures.overflow_steps += under > k
                figures.over_cap += max(under - k, 0)
    steps_per_epoch = PROMPTS // BATCH
    for epoch in range(epochs):
        chosen_by_epoch.append(set().union(*(kept[epoch * steps_per_epoch + i + 1] for i in range(steps_per_epoch))))
    for this, following in itertools.pairwise(chosen_by_epoch):
        figures.followable += len(this)
        figures.followed += len(this & following)
    figures.counts += [len(kept[s]) for s in sorted(kept)]
    figures.distinct.append(len(set().union(*kept.values())))


def report(name: str, figures: Figures, cap: int | None) -> None:
    counts = figures.counts
    share = figures.followed / figures.followable if figures.followable else float("nan")
    print(
        f"{name}: followed {share:.1%} ({figures.followed}/{figures.followable}); per step mean "
        f"{statistics.fmean(counts):.2f} sd {statistics.pstdev(counts):.2f} min {min(counts)} max {max(counts)}"
        f" over {len(counts)} steps ({counts.count(0) / len(counts):.1%} with none); distinct prompts per run "
        f"{statistics.fmean(figures.distinct):.1f}"
    )
    if cap is not None:
        print(
            f"  cap {cap} overflowed in {figures.overflow_steps}/{len(counts)} steps "
            f"({figures.overflow_steps / len(counts):.2%}), {figures.over_cap} prompts left out"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--responses", type=int, default=1, help="responses per prompt")
    parser.add_argument("--cap", type=int, default=CAP, help="the watch-list's rollout_count")
    args = parser.parse_args()
    logging.getLogger("otel_valgen").setLevel(logging.ERROR)  # the over-cap warnings are counted below
    print(
        f"{PROMPTS} prompts, batches of {BATCH}, {args.epochs} shuffled epochs, {args.seeds} seeds, "
        f"{args.responses} response(s) per prompt"
    )
    started = time.perf_counter()
    bottom, watch = Figures(), Figures()
    for seed in range(args.seeds):
        run(seed, args.epochs, args.responses, None, K, bottom)
        run(seed, args.epochs, args.responses, RATE, args.cap, watch)
    report(f"bottom-k k={K}", bottom, None)
    report(f"watch-list rate={RATE} (4/256) cap={args.cap}", watch, args.cap)
    print(f"({time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    main()
