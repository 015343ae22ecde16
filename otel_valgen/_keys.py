"""Version-2 sampling keys of a whole batch at once, cut to the candidates of a bottom-k.

The per-generation hot path of the emitter. ``sampling.sample_key`` defines the key; this
computes the same value for every generation of a batch in numpy's unsigned 64-bit arithmetic
(which wraps modulo 2**64, as the key's mixing needs), and only the generations that pass the
cut become Python ints.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from otel_valgen.sampling import MIX1, MIX2, seed_lane

_U64 = np.dtype(">u8")


class BatchKeyer:
    """Version-2 keys under one seed, for batches of id hashes (8 bytes big-endian each, concatenated)."""

    def __init__(self, seed: int) -> None:
        self.seed = seed % (1 << 64)
        self._lanes = np.zeros(1, dtype=np.uint64)  # n -> seed_lane(seed, n); 0 unused

    def _lane_words(self, top: int) -> np.ndarray:
        """``seed_lane(seed, n)`` for n = 0 .. top (grown on demand)."""
        if len(self._lanes) <= top:
            grown = [seed_lane(self.seed, n) for n in range(len(self._lanes), top + 1)]
            self._lanes = np.concatenate([self._lanes, np.array(grown, dtype=np.uint64)])
        return self._lanes

    def keys(self, hashes: bytes, lanes: Sequence[int] | None) -> np.ndarray:
        """Every generation's key (uint64 below 2**63), in index order."""
        z = np.frombuffer(hashes, dtype=_U64).astype(np.uint64)
        if lanes is None:
            z ^= self._lane_words(1)[1]
        else:
            z ^= self._lane_words(max(lanes))[np.asarray(lanes, dtype=np.intp)]
        z ^= z >> np.uint64(30)
        z *= np.uint64(MIX1)
        z ^= z >> np.uint64(27)
        z *= np.uint64(MIX2)
        z ^= z >> np.uint64(31)
        z >>= np.uint64(1)
        return z

    def candidates(
        self, hashes: bytes, lanes: Sequence[int] | None, limit: int, k: int | None
    ) -> list[tuple[int, int]]:
        """``(index, key)`` of the generations that may enter a bottom-k, in index order.

        Args:
            hashes: each generation's ``id_hash`` as 8 bytes, big-endian, one after the other.
            lanes: each generation's ``n`` (1 + its response index); None when all are 1.
            limit: keys above it are left out (a kept key equal to it is for the caller's tie-break).
            k: the bottom-k's size: only the batch's k smallest keys (and those tied with the
                k-th) can be in a bottom-k after it; None keeps every key up to ``limit``.

        """
        if not hashes:
            return []
        keys = self.keys(hashes, lanes)
        if k is not None and 0 < k < len(keys):
            kth = np.partition(keys, k - 1)[k - 1]
            limit = min(limit, int(kth))
        found = np.flatnonzero(keys <= np.uint64(limit))
        return list(zip(found.tolist(), keys[found].tolist(), strict=True))
