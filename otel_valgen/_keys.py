"""Version-2 sampling keys of a whole batch at once, cut to the candidates of a bottom-k.

The per-generation hot path of the emitter. ``sampling.sample_key`` defines the key; this
computes the same value for every generation of a batch with a constant number of Python
integer operations, whatever the batch size: each generation's 64-bit word sits in its own
128-bit lane of one big int (word in the low half, zeros above), so a shift, an XOR or a
multiplication by a 64-bit constant acts on all lanes at once and never carries into the
next lane once the high halves are masked off. Comparing every lane with a threshold is one
addition (a lane above the threshold carries into its high half). Only the generations that
pass the cut become Python ints.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from otel_valgen.sampling import MASK64, MIX1, MIX2, seed_lane

_Z8 = bytes(8)
_LANE_BYTES = 16
_SLACK = 16  # the local cut aims at 2k + _SLACK candidates; fewer than k is a miss (then all)


class BatchKeyer:
    """Version-2 keys under one seed, for batches of id hashes (8 bytes big-endian each, concatenated)."""

    def __init__(self, seed: int) -> None:
        self.seed = seed % (1 << 64)
        self._lanes: list[bytes] = []  # n -> 8 zero bytes + seed_lane(seed, n), big-endian
        self._size = -1
        self._low = self._one = self._first = 0  # masks and lane-1 seeds of the last batch size

    def lane_bytes(self, n: int) -> bytes:
        """The 16-byte lane of response lane ``n`` (``n`` = response index + 1)."""
        while len(self._lanes) <= n:
            self._lanes.append(_Z8 + seed_lane(self.seed, len(self._lanes)).to_bytes(8, "big"))
        return self._lanes[n]

    def _constants(self, size: int) -> tuple[int, int, int]:
        """Low 64 bits of every lane, 1 in every lane, lane 1's seed word in every lane (last size cached)."""
        if size != self._size:
            self._low = int.from_bytes((_Z8 + b"\xff" * 8) * size, "big")
            self._one = int.from_bytes((_Z8 + b"\0" * 7 + b"\1") * size, "big")
            self._first = int.from_bytes(self.lane_bytes(1) * size, "big")
            self._size = size
        return self._low, self._one, self._first

    def candidates(
        self, hashes: bytes, lanes: Sequence[int] | None, limit: int, k: int | None
    ) -> list[tuple[int, int]]:
        """``(index, key)`` of the generations that may enter a bottom-k, in index order.

        Args:
            hashes: each generation's ``id_hash`` as 8 bytes, big-endian, one after the other.
            lanes: each generation's ``n`` (1 + its response index); None when all are 1.
            limit: keys above it are left out (a kept key equal to it is for the caller's tie-break).
            k: the bottom-k's size, to also leave out what is above the batch's own k-th key
                (a guess that is checked: used only if at least k keys lie below it, then made exact);
                None keeps every key up to ``limit``.

        """
        size = len(hashes) // 8
        if size == 0:
            return []
        low, one, seeds = self._constants(size)
        if lanes is not None:
            self.lane_bytes(max(lanes))
            seeds = int.from_bytes(b"".join(map(self._lanes.__getitem__, lanes)), "big")
        words = bytearray(size * _LANE_BYTES)
        memoryview(words).cast("Q")[1::2] = memoryview(hashes).cast("Q")  # each hash in its lane's low half
        z = int.from_bytes(words, "big") ^ seeds
        z = (((z ^ (z >> 30)) & low) * MIX1) & low
        z = (((z ^ (z >> 27)) & low) * MIX2) & low
        z = (z ^ (z >> 31)) & low  # mix64 of every lane: the key is the lane >> 1

        def at_most(bound: int) -> int:
            """1 in the lanes whose word is <= bound: the others carry into their high half."""
            return (((z + (MASK64 - bound) * one) >> 64) & one) ^ one

        bound = 2 * limit + 1  # key <= limit  <=>  word <= 2 * limit + 1
        flags = 0
        if k is not None and k < size:
            guess = ((2 * k + _SLACK) << 64) // size  # words are uniform on [0, 2**64)
            if guess < bound:
                flags = at_most(guess)
                if flags.bit_count() < k:
                    flags = 0
        guessed = flags != 0
        if not flags:
            flags = at_most(bound)
        marks = flags.to_bytes(size * _LANE_BYTES, "big")
        mixed = z.to_bytes(size * _LANE_BYTES, "big")
        found: list[tuple[int, int]] = []
        position = marks.find(1)
        while position >= 0:
            start = position - 7  # the lane's low half: bytes position-7 .. position
            found.append((position >> 4, int.from_bytes(mixed[start : position + 1], "big") >> 1))
            position = marks.find(1, position + 1)
        if guessed and k is not None and len(found) > k:
            # The guess lets through about 2k: only the batch's k smallest keys (and those tied with
            # the k-th) can be in a bottom-k after it, so the others get no sample id and no offer.
            kth = heapq.nsmallest(k, [key for _, key in found])[-1]
            found = [candidate for candidate in found if candidate[1] <= kth]
        return found
