"""Benchmark: cost of logging validation generations in the emitting process.

Measures, for M generations of about 2.5 KB (k = 64):
  1. time spent in ``log_generations`` + end of step, presampling on and off (embedded sink),
     against a verl-style baseline on the same data (sort by input, RandomState(42) shuffle,
     first k, build verl's wide wandb.Table);
  2. peak RSS of the emitting process for M = 10k, 30k and 100k with data generated batch by
     batch, so that only otel_valgen's own memory can grow with M;
  3. the cost of verl's full row (ground truth, data source, two reward columns, response length
     and truncation with every generation, as the verl integration sends them) in one call, as
     verl calls its hook once per validation with every generation, the same in 10 calls, the same with
     k per data source (``sample_by = data_source``, four data sources), of keeping the 4
     lowest- and 4 highest-scored beside the k keyed picks (``extremes = 4``), and of cutting a
     200 KB output to ``max_field_bytes`` (head and tail kept).

Run: ``python bench/core_emit_bench.py`` (about a minute on 2 cores). Prints the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's otel_valgen

K = 64
BATCH = 1000
VARIANTS = (
    "baseline",
    "presample_on",
    "presample_on_uids",
    "presample_on_full_row",
    "full_row_in_10_calls",
    "full_row_k_per_source",
    "presample_on_extremes",
    "presample_off",
)
DATA_SOURCES = ("openai/gsm8k", "math", "aime", "gpqa")  # the k-per-data-source variant's, in turn


def make_batch(start: int, size: int) -> tuple[list[str], list[str], list[float]]:
    """Deterministic generations of ~2.5 KB: a 500-byte prompt and a 2 KB answer."""
    inputs = [f"Problem {i}: " + ("lorem ipsum dolor sit amet " * 18)[:490] for i in range(start, start + size)]
    outputs = [f"Answer {i}: " + ("the quick brown fox jumps over " * 68)[:2030] for i in range(start, start + size)]
    scores = [float(i % 7) / 7 for i in range(start, start + size)]
    return inputs, outputs, scores


def batches(total: int) -> Iterator[tuple[list[str], list[str], list[float]]]:
    """The data set as batches, generated on the fly."""
    for start in range(0, total, BATCH):
        yield make_batch(start, min(BATCH, total - start))


def verl_baseline(data: list[tuple[list[str], list[str], list[float]]]) -> float:
    """The baseline: verl's _maybe_log_val_generations and its wandb table build, as verl does them."""
    import numpy as np
    import wandb

    started = time.perf_counter()
    inputs = [x for batch in data for x in batch[0]]
    outputs = [x for batch in data for x in batch[1]]
    scores = [x for batch in data for x in batch[2]]
    samples = list(zip(inputs, outputs, scores, strict=True))
    samples.sort(key=lambda x: x[0])
    rng = np.random.RandomState(42)
    rng.shuffle(samples)
    samples = samples[:K]
    columns = ["step"] + sum(  # noqa: RUF005, RUF017 (verl's own code, kept as the baseline)
        [[f"input_{i + 1}", f"output_{i + 1}", f"score_{i + 1}"] for i in range(len(samples))], []
    )
    validation_table = wandb.Table(columns=columns)
    new_table = wandb.Table(columns=columns, data=validation_table.data)
    row = [1]
    for sample in samples:
        row.extend(sample)
    new_table.add_data(*row)
    return time.perf_counter() - started


def full_row(inputs: list[str], scores: list[float], mixed: bool = False) -> dict[str, object]:
    """The columns the verl integration adds to each call (docs/verl.md, *Each row is verl's full row*).

    ``mixed``: the generations come from the four ``DATA_SOURCES`` in turn, else all from one.
    """
    sources = [DATA_SOURCES[i % len(DATA_SOURCES)] if mixed else DATA_SOURCES[0] for i in range(len(inputs))]
    return {
        "ground_truths": [str(i) for i in range(len(inputs))],
        "data_sources": sources,
        "extra": {"acc": scores, "pred": [str(score) for score in scores]},
        "response_lengths": [512] * len(inputs),
        "truncated": [False] * len(inputs),
    }


def one_call(data: list[tuple[list[str], list[str], list[float]]]) -> list[tuple[list[str], list[str], list[float]]]:
    """The batches as one: verl passes the whole validation set to its hook in one call."""
    return [tuple([item for batch in data for item in batch[column]] for column in range(3))]  # type: ignore[list-item]


def otel_valgen_run(
    data: list[tuple[list[str], list[str], list[float]]],
    presample: bool,
    directory: str,
    uids: bool = False,
    row: bool = False,
    by_source: bool = False,
    extremes: int = 0,
) -> tuple[float, float]:
    """log_generations per batch, then the end of the step (which flushes to the sink).

    With ``uids`` the calls pass dataset uids as sample ids (a job that has them; verl 0.9.1
    does not pass them to its hook), so no input is hashed. With ``row`` they pass verl's full
    row's columns (``full_row``); with ``by_source`` too, from four data sources, keeping k of
    each; with ``extremes`` the n lowest- and highest-scored too. Returns the seconds spent in
    the log_generations calls and in the end of the step.
    """
    import otel_valgen as vg

    sample_by = "data_source" if by_source else "step"
    vg.configure(
        run_id="bench", count=K, presample=presample, directory=directory, sample_by=sample_by, extremes=extremes
    )
    # A job's first validation step starts the process's progress thread, once; this one does.
    with vg.validation(step=0):
        vg.log_generations(["warm"], ["up"], [0.0])
    # The dataset's uids exist before validation starts (verl keeps them in its batch).
    ids = [[text[: text.index(":")] for text in inputs] if uids else None for inputs, _, _ in data]
    columns = [full_row(inputs, scores, by_source) if row else {} for inputs, _, scores in data]
    started = time.perf_counter()
    block = vg.validation(step=1)
    with block:
        for (inputs, outputs, scores), batch_ids, batch_columns in zip(data, ids, columns, strict=True):
            vg.log_generations(inputs, outputs, scores, sample_ids=batch_ids, **batch_columns)
        logged = time.perf_counter()
    ended = time.perf_counter()
    vg.shutdown()
    from otel_valgen import _process

    _process.reset_for_testing()
    return logged - started, ended - logged


def time_comparison(total: int, repeats: int) -> dict[str, float]:
    """Median seconds of each variant over ``repeats`` runs on the same data."""
    import wandb  # noqa: F401  (import cost is not part of either measurement)

    data = list(batches(total))
    whole = one_call(data)
    results: dict[str, list[float]] = {name: [] for name in VARIANTS}
    parts: dict[str, list[float]] = {"log_on": [], "end_on": []}
    with tempfile.TemporaryDirectory() as tmp:
        for attempt in range(repeats):
            results["baseline"].append(verl_baseline(data))
            log_s, end_s = otel_valgen_run(data, True, os.path.join(tmp, f"on{attempt}"))
            results["presample_on"].append(log_s + end_s)
            parts["log_on"].append(log_s)
            parts["end_on"].append(end_s)
            results["presample_off"].append(sum(otel_valgen_run(data, False, os.path.join(tmp, f"off{attempt}"))))
            uid_run = otel_valgen_run(data, True, os.path.join(tmp, f"uid{attempt}"), uids=True)
            results["presample_on_uids"].append(sum(uid_run))
            row_run = otel_valgen_run(whole, True, os.path.join(tmp, f"row{attempt}"), row=True)
            results["presample_on_full_row"].append(sum(row_run))
            row_calls = otel_valgen_run(data, True, os.path.join(tmp, f"calls{attempt}"), row=True)
            results["full_row_in_10_calls"].append(sum(row_calls))
            by_source = otel_valgen_run(data, True, os.path.join(tmp, f"src{attempt}"), row=True, by_source=True)
            results["full_row_k_per_source"].append(sum(by_source))
            extreme = otel_valgen_run(data, True, os.path.join(tmp, f"ext{attempt}"), extremes=4)
            results["presample_on_extremes"].append(sum(extreme))
    return {name: statistics.median(values) for name, values in {**results, **parts}.items()}


def cut_cost(repeats: int) -> tuple[float, float]:
    """Best seconds of ``clean_text`` on a 200 KB output at the default limit, and on a 2 KB one (no cut)."""
    import timeit

    from otel_valgen._sanitize import clean_text

    long = "step by step, " * 14_000 + "#### 42"  # ~200 KB
    short = long[:2000]
    limit = 65_536
    cut = min(timeit.repeat(lambda: clean_text(long, limit), number=100, repeat=repeats)) / 100
    whole = min(timeit.repeat(lambda: clean_text(short, limit), number=100, repeat=repeats)) / 100
    return cut, whole


def peak_rss_child(total: int) -> None:
    """In a fresh process: stream ``total`` generations through one step, print peak RSS (KiB)."""
    import otel_valgen as vg

    with tempfile.TemporaryDirectory() as tmp:
        vg.configure(run_id="rss", count=K, directory=tmp)
        with vg.validation(step=1):
            for inputs, outputs, scores in batches(total):
                vg.log_generations(inputs, outputs, scores)
        vg.shutdown()
    print(json.dumps({"total": total, "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--m", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rss-child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rss_child:
        peak_rss_child(args.rss_child)
        return
    print(f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}; M={args.m}, k={K}, ~2.5 KB each")
    medians = time_comparison(args.m, args.repeats)
    base = medians["baseline"]
    for name in VARIANTS:
        print(f"  {name:<21} {medians[name] * 1000:8.1f} ms   ratio to baseline {medians[name] / base:5.2f}x")
    print(
        f"  presample_on = {medians['log_on'] * 1000:.1f} ms in log_generations "
        f"({medians['log_on'] / args.m * 1e6:.2f} us per generation) "
        f"+ {medians['end_on'] * 1000:.1f} ms ending the step"
    )
    cut, whole = cut_cost(args.repeats)
    print(
        f"  a 200 KB output cut to 64 KiB (head and tail): {cut * 1e6:.0f} us; "
        f"a 2 KB output (not cut): {whole * 1e6:.1f} us; at most k = {K} outputs are cut per step"
    )
    print("peak RSS of the emitting process, data streamed in batches of 1000:")
    rss = {}
    for total in (10_000, 30_000, 100_000):
        out = subprocess.run(
            [sys.executable, __file__, "--rss-child", str(total)], capture_output=True, text=True, check=True
        ).stdout
        rss[total] = json.loads(out.strip().splitlines()[-1])["peak_rss_kib"]
        print(f"  M={total:>7}: {rss[total] / 1024:7.1f} MiB")
    print(f"  growth 10k -> 100k: {(rss[100_000] / rss[10_000] - 1) * 100:+.1f}%")


if __name__ == "__main__":
    main()
