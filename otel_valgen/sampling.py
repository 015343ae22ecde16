"""The sampling rule shared by every component: the sampling key and the bottom-k choice.

The sampling key of a generation is a keyed hash of ``(seed, sample_id)``::

    key_bytes   = seed.to_bytes(8, "big")            # seed taken modulo 2**64
    digest      = HMAC-SHA256(key=key_bytes, msg=sample_id.encode("utf-8"))
    sample_key  = int.from_bytes(digest[:8], "big") >> 1   # in [0, 2**63)

For each group (run, step) the sampler keeps the ``k`` records with the smallest
``(sample_key, sample_id)`` (sample ids compared as UTF-8 bytes, which for valid
Unicode is the same order as code points). The choice is uniform over ids, the same for a
seed at every step, and mergeable: the bottom-k of a union equals the bottom-k of the
per-part bottom-k's, so any split of the data over batches, processes or collectors
selects the same set.

The Go processor implements the same rule; ``testdata/sampling/*.json`` holds the vectors
that both test suites read.
"""

from __future__ import annotations

import hashlib
import heapq
import hmac
from collections.abc import Iterable
from typing import Generic, NamedTuple, TypeVar

__all__ = ["BottomK", "SampleKeyer", "SortKey", "bottom_k", "sample_key"]

_SEED_MODULUS = 1 << 64
T = TypeVar("T")


def sample_key(seed: int, sample_id: str) -> int:
    """Return the sampling key of ``sample_id`` under ``seed``, an int in ``[0, 2**63)``.

    Args:
        seed: any integer; it enters as its value modulo 2**64, 8 bytes big-endian.
        sample_id: the stable id of the generation; lone surrogates are encoded as U+FFFD.

    """
    key = (seed % _SEED_MODULUS).to_bytes(8, "big")
    message = sample_id.encode("utf-8", "replace")
    digest = hmac.new(key, message, hashlib.sha256).digest()
    return int.from_bytes(digest[:8], "big") >> 1


class SampleKeyer:
    """``sample_key`` for one seed, fast: the HMAC's padded key blocks are hashed once.

    HMAC(K, m) = H((K ^ opad) || H((K ^ ipad) || m)); copying the two hash states that
    already absorbed the padded key saves the key schedule on every call (about 2.5x).
    """

    _BLOCK = 64  # SHA-256 block size in bytes

    def __init__(self, seed: int) -> None:
        key = (seed % _SEED_MODULUS).to_bytes(8, "big").ljust(self._BLOCK, b"\0")
        self.inner = hashlib.sha256(bytes(byte ^ 0x36 for byte in key))
        self.outer = hashlib.sha256(bytes(byte ^ 0x5C for byte in key))

    def __call__(self, sample_id_utf8: bytes) -> int:
        """The sampling key of a UTF-8 encoded sample id."""
        inner = self.inner.copy()
        inner.update(sample_id_utf8)
        outer = self.outer.copy()
        outer.update(inner.digest())
        return int.from_bytes(outer.digest()[:8], "big") >> 1


class SortKey(NamedTuple):
    """The order in which records are kept: by key, ties broken by the id's UTF-8 bytes."""

    sample_key: int
    sample_id: bytes

    @classmethod
    def of(cls, key: int, sample_id: str) -> SortKey:
        """Build the sort key of a record."""
        return cls(key, sample_id.encode("utf-8", "replace"))


Order = tuple[int, bytes]
"""A sort key as a plain tuple; ``SortKey`` is the named form of the same thing."""


class _Entry(Generic[T]):
    """A heap entry ordered so that the heap's top is the largest sort key kept."""

    __slots__ = ("item", "order")

    def __init__(self, order: Order, item: T) -> None:
        self.order = order
        self.item = item

    def __lt__(self, other: _Entry[T]) -> bool:
        return self.order > other.order


class BottomK(Generic[T]):
    """Keep the ``k`` items with the smallest sort keys seen so far, in O(k) memory.

    Offering an item whose sort key is already kept is a no-op, so a record delivered
    twice is kept once.
    """

    def __init__(self, k: int) -> None:
        if k < 0:
            raise ValueError("k must be >= 0")
        self.k = k
        self._heap: list[_Entry[T]] = []
        self._kept: set[Order] = set()

    def offer(self, order: Order, item: T) -> bool:
        """Consider one item; return whether it is (for now) among the kept ones."""
        if self.k == 0 or order in self._kept:
            return False
        if len(self._heap) < self.k:
            heapq.heappush(self._heap, _Entry(order, item))
            self._kept.add(order)
            return True
        if order >= self._heap[0].order:
            return False
        evicted = heapq.heapreplace(self._heap, _Entry(order, item))
        self._kept.discard(evicted.order)
        self._kept.add(order)
        return True

    def would_keep(self, order: Order) -> bool:
        """Whether an item with this sort key would be kept if offered now."""
        if self.k == 0 or order in self._kept:
            return False
        return len(self._heap) < self.k or order < self._heap[0].order

    def __len__(self) -> int:
        return len(self._heap)

    def threshold(self) -> Order | None:
        """The largest kept sort key once ``k`` items are kept (smaller ones get in), else None."""
        return self._heap[0].order if self.k and len(self._heap) >= self.k else None

    def items(self) -> list[tuple[SortKey, T]]:
        """The kept items in ascending sort-key order."""
        return [(SortKey(*entry.order), entry.item) for entry in sorted(self._heap, key=lambda e: e.order)]


def bottom_k(items: Iterable[tuple[SortKey, T]], k: int) -> list[tuple[SortKey, T]]:
    """Return the ``k`` items with the smallest sort keys, ascending (the reference choice)."""
    selector: BottomK[T] = BottomK(k)
    for order, item in items:
        selector.offer(order, item)
    return selector.items()
