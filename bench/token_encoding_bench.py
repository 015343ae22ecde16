"""Benchmark: per-token data of rollout responses, on the wire and in the emitting process.

Prints, for responses of 4,096 and 32,768 tokens with every column (ids, pieces, four float32
log-probability columns, two masks), the packed bytes of ``valgen.tokens`` (and in OTLP/JSON's
base64), and the time to read and pack one; then the time to compute the figures of every
response of a step of 256 prompts x 8 responses of 4,096 tokens at once (2-D float32 arrays, as
a trainer holds them). Log-probabilities are drawn uniformly: the worst case for compression.

Run: ``python bench/token_encoding_bench.py`` (about 30 s on 2 cores).
"""

from __future__ import annotations

import argparse
import base64
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's otel_valgen

from otel_valgen import tokens


def columns(n: int, rows: int = 1, seed: int = 0) -> dict[str, Any]:
    """``rows`` responses of ``n`` tokens with every column, floats as 2-D float32 arrays."""
    rng = np.random.default_rng(seed)
    trainer = np.log(rng.uniform(0.01, 1, (rows, n))).astype(np.float32)
    rollout = (trainer + rng.normal(0, 0.02, (rows, n))).astype(np.float32)
    model = np.ones((rows, n), dtype=bool)
    model[:, n // 3 : n // 3 + 64] = False
    return {
        "ids": rng.integers(0, 151_000, (rows, n)),
        "pieces": [[f" tok{i % 5000}" for i in range(n)] for _ in range(rows)],
        "rollout": rollout,
        "trainer": trainer,
        "reference": (trainer + rng.normal(0, 0.1, (rows, n))).astype(np.float32),
        "weight": np.exp(trainer - rollout).astype(np.float32),
        "masked": rng.uniform(size=(rows, n)) < 0.02,
        "model": model,
    }


def best_ms(call: Any, repeats: int) -> float:
    """Best wall time of ``call`` over ``repeats`` runs, ms."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return min(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print("one kept response, every column:")
    for n in (4096, 32_768):
        data = columns(n)
        read = tokens.read_response(data, 0)
        assert read is not None
        packed, cut = tokens.encode(read, 1 << 30)
        size = sum(len(value) for value in packed.values() if isinstance(value, bytes))
        as_json = sum(len(base64.b64encode(value)) for value in packed.values() if isinstance(value, bytes))
        read_ms = best_ms(lambda data=data: tokens.read_response(data, 0), args.repeats)
        pack_ms = best_ms(lambda read=read: tokens.encode(read, 1 << 30), args.repeats)
        print(
            f"  {n:>6} tokens: {size / 1024:7.1f} KiB packed ({size / n:.1f} B a token), "
            f"{as_json / 1024:7.1f} KiB in OTLP/JSON; read {read_ms:.1f} ms, pack {pack_ms:.1f} ms; cut {cut}"
        )
    step = columns(4096, rows=256 * 8, seed=1)
    del step["pieces"], step["ids"]
    lengths = [4096] * (256 * 8)
    figures_ms = [best_ms(lambda: tokens.batch_figures(step, lengths), 1) for _ in range(args.repeats)]
    print(
        f"figures of every response of a step (256 x 8 responses of 4096 tokens, 2-D float32): "
        f"{statistics.median(figures_ms):.0f} ms (median of {args.repeats})"
    )


if __name__ == "__main__":
    main()
