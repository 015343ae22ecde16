"""Distinct prompts of a rollout step, counted across calls, processes and samplers.

Each part of a step keeps a sketch of the prompts it saw: the ``m`` smallest distinct prompt
keys (``valgen.prompt_keys``, a "k minimum values" sketch; the keys are uniform in
``[0, 2**63)``). Sketches merge exactly, since the m smallest keys of a union are the m smallest
of the parts' m smallest, so a prompt whose responses were logged by several calls, processes
or samplers is counted once. Below ``m`` keys the count is exact; from ``m`` on it is the
estimate ``floor((m - 1) * 2**63 / (u + 1))`` for ``u`` the m-th smallest key, whose relative
standard error is ``1 / sqrt(m - 2)`` (about 3% for m = 1024). Memory is O(m) per open part or
group. The collector (``distinct.go``) computes the same, and
``testdata/sampling/distinct_prompts.json`` holds the cases both suites check.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Iterable
from typing import Final, NamedTuple

__all__ = [
    "PROMPTS_SEEN_ERROR",
    "SKETCH_SIZE",
    "DistinctCount",
    "DistinctKeys",
    "distinct_count",
    "merge_keys",
    "parse_keys",
]

SKETCH_SIZE: Final = 1024
"""m: prompt counts below it are exact."""
PROMPTS_SEEN_ERROR: Final = 1 / math.sqrt(SKETCH_SIZE - 2)
"""The estimate's relative standard error (``valgen.prompts_seen_error``)."""


class DistinctCount(NamedTuple):
    """A distinct count, and whether it is an estimate (error ``PROMPTS_SEEN_ERROR``)."""

    value: int
    estimated: bool


def distinct_count(keys: Iterable[int], m: int = SKETCH_SIZE) -> DistinctCount:
    """The count a sketch gives: exact below ``m`` distinct keys, else the estimate from the m-th smallest."""
    smallest = heapq.nsmallest(m, set(keys))
    if len(smallest) < m:
        return DistinctCount(len(smallest), False)
    return DistinctCount(((m - 1) << 63) // (smallest[-1] + 1), True)


def merge_keys(*sketches: Iterable[int], m: int = SKETCH_SIZE) -> list[int]:
    """The ``m`` smallest distinct keys of the sketches' union, ascending."""
    return heapq.nsmallest(m, {key for sketch in sketches for key in sketch})


class DistinctKeys:
    """One part's sketch: the ``m`` smallest distinct keys added so far (O(m) memory)."""

    def __init__(self, m: int = SKETCH_SIZE) -> None:
        self._m = m
        self._keys: set[int] = set()
        self._largest: list[int] = []  # the kept keys negated: a max-heap

    def add(self, keys: Iterable[int]) -> None:
        """Add keys (repeats and keys above a full sketch's largest change nothing)."""
        for key in keys:
            if key in self._keys:
                continue
            if len(self._keys) < self._m:
                heapq.heappush(self._largest, -key)
            elif key < -self._largest[0]:
                self._keys.discard(-heapq.heapreplace(self._largest, -key))
            else:
                continue
            self._keys.add(key)

    def keys(self) -> list[int]:
        """The sketch, ascending (``valgen.prompt_keys``)."""
        return sorted(self._keys)

    def count(self) -> DistinctCount:
        """The distinct keys added: exact below ``m``, else the estimate."""
        return distinct_count(self._keys, self._m)


def parse_keys(value: object, m: int = SKETCH_SIZE) -> tuple[int, ...] | None:
    """A ``valgen.prompt_keys`` value: at most ``m`` ascending distinct keys in ``[0, 2**63)``; else None."""
    if not isinstance(value, list | tuple) or len(value) > m:
        return None
    keys = tuple(value)
    if not all(type(key) is int and 0 <= key < 1 << 63 for key in keys):
        return None
    return keys if all(a < b for a, b in itertools.pairwise(keys)) else None
