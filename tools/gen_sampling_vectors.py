"""Write testdata/sampling/*.json: the vectors that the Python and Go test suites share.

Run ``python tools/gen_sampling_vectors.py`` after a deliberate change to the sampling rule;
both suites then fail until each implementation agrees with the new vectors.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from otel_valgen.sampling import SortKey, bottom_k, sample_key

OUT = Path(__file__).resolve().parent.parent / "testdata" / "sampling"

SEEDS = [0, 1, 42, 2**31 - 1, 2**63 - 1, 2**63, 2**64 - 1]
IDS = [
    "",
    "0",
    "abc/0",
    "abc/1",
    "uid-7f3a/3",
    "9b74c9897bac770ffc029102a200c5de/0",
    "prompt with spaces/0",
    "ünïcödé/2",
    "数学题/0",
    "emoji 🎲/1",
    "tab\tand\nnewline/0",
    "x" * 300 + "/0",
]


def key_vectors() -> dict[str, object]:
    vectors = [
        {"seed": str(seed), "sample_id": sid, "sample_key": str(sample_key(seed, sid))} for seed in SEEDS for sid in IDS
    ]
    return {
        "description": (
            "sample_key = uint64 big-endian of the first 8 bytes of "
            "HMAC-SHA256(key = seed as 8 bytes big-endian, msg = UTF-8 sample_id), shifted "
            "right by 1. seed and sample_key are decimal strings (uint64)."
        ),
        "vectors": vectors,
    }


def bottom_k_cases() -> dict[str, object]:
    rng = random.Random(20261130)
    cases: list[dict[str, object]] = []

    # Synthetic keys with ties, to pin down the tie-break on sample_id bytes.
    tied = [("b/0", 5), ("a/0", 5), ("c/0", 1), ("a/1", 5), ("é/0", 5), ("z/0", 9)]
    for k in (0, 1, 3, 5, 10):
        chosen = bottom_k(((SortKey.of(key, sid), sid) for sid, key in tied), k)
        cases.append(
            {
                "name": f"ties_k{k}",
                "k": k,
                "records": [{"sample_id": sid, "sample_key": str(key)} for sid, key in tied],
                "expected": [sid for _, sid in chosen],
            }
        )

    # Keys computed from the seed, as the processor does for records that lack one.
    for seed, n, k in ((42, 50, 8), (7, 200, 64), (2**64 - 1, 30, 30), (0, 10, 64)):
        ids = [f"uid-{rng.randrange(10**9):09d}/{rng.randrange(4)}" for _ in range(n)]
        ids = list(dict.fromkeys(ids))
        chosen = bottom_k(((SortKey.of(sample_key(seed, s), s), s) for s in ids), k)
        cases.append(
            {
                "name": f"seed{seed}_n{len(ids)}_k{k}",
                "k": k,
                "seed": str(seed),
                "records": [{"sample_id": s} for s in ids],
                "expected": [sid for _, sid in chosen],
            }
        )
    return {
        "description": (
            "For each case keep the k records with the smallest (sample_key, UTF-8 bytes of "
            "sample_id); expected lists their ids in that ascending order. Records without "
            "sample_key get sample_key(seed, sample_id)."
        ),
        "cases": cases,
    }


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, payload in (("key_vectors.json", key_vectors()), ("bottom_k.json", bottom_k_cases())):
        path = OUT / name
        path.write_text(json.dumps(payload, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
