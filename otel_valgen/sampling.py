"""The sampling rule shared by every component: the sampling key and the bottom-k choice.

For each group (run, step, attempt, kind) the sampler keeps the ``k`` records with the smallest
``(sample_key, sample_id)`` (sample ids compared as UTF-8 bytes, which for valid Unicode is the
same order as code points). The choice is uniform over ids, the same for a seed at every step,
and mergeable: the bottom-k of a union equals the bottom-k of the per-part bottom-k's, so any
split of the data over batches, processes or collectors selects the same set.

The sampling key is a function of ``(seed, sample_id)`` only, in ``[0, 2**63)``, so that the
collector can compute it for records that do not carry one. Records say which function made
their key in ``valgen.key_version``; a record without it is version 1.

Version 2 (current)::

    base, n  = sample_id[:j], int(digits) + 1
                   if the text after the last "/" (index j) is digits, or digits + "@" + a
                   tag, where digits are 1 to 19 ASCII digits (no leading zero unless
                   exactly "0")
               else sample_id, 0
    id_hash  = int(base, 16)                 if base is 16 chars of 0-9a-f
               XXH64(base UTF-8, seed 0)      otherwise (the 64-bit xxHash, as a number)
    mix(z)   = z ^= z >> 30; z *= 0xBF58476D1CE4E5B9; z ^= z >> 27; z *= 0x94D049BB133111EB;
               z ^= z >> 31                      (the SplitMix64 finaliser, all mod 2**64)
    lane     = mix((seed + n * 0x9E3779B97F4A7C15) mod 2**64)   # SplitMix64's n-th output
    sample_key = mix(id_hash ^ lane) >> 1

Version 1 (records without ``valgen.key_version``)::

    sample_key = int.from_bytes(HMAC-SHA256(key=seed as 8 bytes big-endian,
                                            msg=sample_id UTF-8)[:8], "big") >> 1

Why version 2 looks like this: the emitting process pays one fast hash per generation, and
never two. A derived sample id is ``<16 hex digits of XXH64(input)>/<i>@<tag>``; the key reads
the 64 bits back from those digits instead of hashing the id again, and the response index
``i`` selects the seed's lane, so ``/0`` and ``/1`` of one prompt get unrelated keys. The
tag names the emitting part (12 random hex digits per part) and is not part of the key: two
parts answering the same prompt get one key and two ids, so both are kept, while a record
delivered twice is still one. A caller's uid is hashed once per call (all its responses
share the hash). The collector, which
sees only the sample id string, computes the same value: any base that is 16 lowercase hex
digits is read the same way, derived or not, so the key stays a function of the id alone.
XXH64 makes ``id_hash`` uniform and the same for a prompt at every step, at a tenth of
SHA-256's cost per call; it need not resist collisions crafted on purpose, since the prompts
are the job's own validation set (a collision only merges two prompts' ids). The keyed
finaliser, a bijection of 64-bit words with full avalanche, spreads each seed's lane over all
bits so that different seeds give unrelated orders (``tests/test_sampling.py`` checks the
uniformity with chi-square tests over seeds). The key is not a MAC: it makes the choice
uniform, not unpredictable to someone who knows the seed.

The records of one step normally share one key version. When they do not (processes of one
attempt running different library versions), the step takes the version of its first
generation and recomputes the key of every later generation of another version from its seed
and sample id (``docs/architecture.md``, "The sampling key", says what that costs).
The Go processor implements the same rule; ``testdata/sampling/*.json`` holds the vectors
that both test suites read.

Rollouts (``valgen.kind = rollout``) are sampled by prompt, not by response: the *group view*
(``GroupView``) keeps the k prompts with the smallest ``(prompt_key, prompt_id)``, where
``prompt_key = sample_key(seed, prompt_id)``, and every response of each kept prompt, so a
GRPO group is shown whole. It is mergeable like the bottom-k: a prompt of the bottom-k of a
union is in the bottom-k of every part that saw it, with the responses that part saw.

A *rate* (``rollout_rate``, ``valgen.sample_rate``) turns the group view into a watch-list: a
prompt is eligible when its prompt key is below ``rate_threshold(rate) = floor(rate * 2**63)``,
a rule on its own key alone, so an eligible prompt is eligible at every step it comes back in.
The view keeps the eligible prompts, at most ``k`` of them (the ``k`` smallest when more are
eligible). Keys below a threshold are a prefix of the sort order, so this is the bottom-k cut
to the prefix: mergeable like the bottom-k, and lowering the rate (the smallest rate of a
group's records wins, ``step_rate``) is exact, as shrinking k is.

*k per data source* (``sample_by = data_source``, ``valgen.sample_by``): a group keeps the
group view of each data source (``valgen.data_source``, absent is ``""``) on its own, so each
(step, data source) keeps k (``DataSourceViews``). A group is split while every generation of
it asks for it; the first that does not (a process with the default, a library before the
option) turns it back into one group view, which is exact: a prompt of the bottom-k of the
whole group is in the bottom-k of its data source, so the bottom-k of the union of the data
sources' views is the group's. The other way, splitting a view kept per step, would not be.

*The best and the worst* (``extremes = n``, ``valgen.extremes``): beside the k keyed picks a
validation group keeps the n lowest- and the n highest-scored generations (of each data source
when split): two more bottom-n's (``FigureRanks``), ordered by ``(score, sample key, sample id)``
and ``(-score, sample key, sample id)``, over the generations with a finite score (-0.0 is 0.0).
They are mergeable like the bottom-k, and the smallest n asked for wins, as for k (a record
without ``valgen.extremes`` asks for 0). *The most mismatched* (``mismatched = n``,
``valgen.mismatched``) is the same rule for rollouts: beside the k keyed prompts a rollout group
keeps the n responses of the largest ``valgen.mismatch.kl``, ordered by ``(-kl, sample key,
sample id)``, each response alone (not its prompt's group). A kept record's slots
(``valgen.slots``) say which of ``keyed``, ``lowest``, ``highest`` and ``mismatched`` it fills;
ranked, the keyed picks come first, as without them, so the same prompts keep their ranks at
every step, then each data source's lowest ascending, highest descending and most mismatched
that are not already listed (``DataSourceViews.ranked``).
"""

from __future__ import annotations

import hashlib
import heapq
import hmac
import math
import struct
from collections.abc import Iterable
from typing import Final, Generic, NamedTuple, TypeVar

import xxhash

from otel_valgen import contract

__all__ = [
    "HEX_DIGITS",
    "KEY_VERSION",
    "KEY_VERSIONS",
    "LEGACY_KEY_VERSION",
    "NO_RATE_THRESHOLD",
    "RANKED_SLOTS",
    "SAMPLE_BY_DATA_SOURCE",
    "SAMPLE_BY_STEP",
    "SLOT_HIGHEST",
    "SLOT_KEYED",
    "SLOT_LOWEST",
    "SLOT_MISMATCHED",
    "BottomK",
    "DataSourceViews",
    "FigureRanks",
    "GroupView",
    "SortKey",
    "bottom_k",
    "group_view",
    "id_hash",
    "mix64",
    "rate_threshold",
    "sample_key",
    "score_rank",
    "seed_lane",
    "split_sample_id",
    "step_k",
    "step_rate",
    "untagged",
]

KEY_VERSION: Final = 2
"""The key function this library computes and sends in ``valgen.key_version``."""
LEGACY_KEY_VERSION: Final = 1
"""The version of records without ``valgen.key_version`` (HMAC-SHA256)."""
KEY_VERSIONS: Final = (1, 2)

MASK64: Final = (1 << 64) - 1
GOLDEN_GAMMA: Final = 0x9E3779B97F4A7C15
MIX1: Final = 0xBF58476D1CE4E5B9
MIX2: Final = 0x94D049BB133111EB
_MAX_INDEX_DIGITS: Final = 19  # 10**19 - 1 + 1 still fits in 64 bits
HEX_DIGITS: Final = frozenset("0123456789abcdef")
"""The characters of a base id that ``id_hash`` reads as a number (16 of them)."""
T = TypeVar("T")


def mix64(z: int) -> int:
    """The SplitMix64 finaliser of a 64-bit word (a bijection)."""
    z = ((z ^ (z >> 30)) * MIX1) & MASK64
    z = ((z ^ (z >> 27)) * MIX2) & MASK64
    return z ^ (z >> 31)


def seed_lane(seed: int, n: int) -> int:
    """The word that response lane ``n`` is keyed with under ``seed`` (taken modulo 2**64)."""
    return mix64((seed + n * GOLDEN_GAMMA) & MASK64)


def split_sample_id(sample_id: str) -> tuple[str, int]:
    """``(base, n)``: ``n`` is 1 + the response index of ``<base>/<index>[@<tag>]``, or 0 without one."""
    base, slash, index = sample_id.rpartition("/")
    digits = index.partition("@")[0]
    if (
        slash
        and 0 < len(digits) <= _MAX_INDEX_DIGITS
        and digits.isascii()
        and digits.isdigit()
        and (digits[0] != "0" or digits == "0")
    ):
        return base, int(digits) + 1
    return sample_id, 0


def untagged(sample_id: str) -> str:
    """The id without its part's tag: ``<base>/<index>`` of ``<base>/<index>@<tag>``, any other id as it is."""
    base, n = split_sample_id(sample_id)
    return f"{base}/{n - 1}" if n else sample_id


def id_hash(base: str) -> int:
    """The 64-bit hash of a prompt's id: its value when it is 16 lowercase hex digits, else XXH64's."""
    if len(base) == 16 and HEX_DIGITS.issuperset(base):
        return int(base, 16)
    return xxhash.xxh64_intdigest(base.encode("utf-8", "replace"))


def sample_key(seed: int, sample_id: str, version: int = KEY_VERSION) -> int:
    """Return the sampling key of ``sample_id`` under ``seed``, an int in ``[0, 2**63)``.

    Args:
        seed: any integer; it enters as its value modulo 2**64.
        sample_id: the stable id of the generation; lone surrogates are encoded as ``?``.
        version: the key function (``KEY_VERSIONS``); the default is the one this library sends.

    Raises:
        ValueError: for an unknown version.

    """
    seed %= 1 << 64
    if version == KEY_VERSION:
        base, n = split_sample_id(sample_id)
        return mix64(id_hash(base) ^ seed_lane(seed, n)) >> 1
    if version == LEGACY_KEY_VERSION:
        digest = hmac.new(seed.to_bytes(8, "big"), sample_id.encode("utf-8", "replace"), hashlib.sha256).digest()
        return int.from_bytes(digest[:8], "big") >> 1
    raise ValueError(f"unknown sampling key version {version!r}")


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
        self._kept: dict[Order, T] = {}

    def offer(self, order: Order, item: T) -> bool:
        """Consider one item; return whether it is (for now) among the kept ones."""
        if self.k == 0 or order in self._kept:
            return False
        if len(self._heap) < self.k:
            heapq.heappush(self._heap, _Entry(order, item))
            self._kept[order] = item
            return True
        if order >= self._heap[0].order:
            return False
        evicted = heapq.heapreplace(self._heap, _Entry(order, item))
        del self._kept[evicted.order]
        self._kept[order] = item
        return True

    def shrink(self, k: int) -> list[T]:
        """Keep only the ``k`` smallest of the kept items (exact: they are the bottom-k so far).

        Returns the items no longer kept.
        """
        if not 0 <= k <= self.k:
            raise ValueError("shrink needs 0 <= k <= the current k")
        self.k = k
        removed = []
        while len(self._heap) > k:
            entry = heapq.heappop(self._heap)
            del self._kept[entry.order]
            removed.append(entry.item)
        return removed

    def cut(self, bound: Order) -> list[T]:
        """Keep only the kept items whose sort key is below ``bound``; return the others.

        Exact like ``shrink``: the items below a bound are a prefix of the order, so the
        bottom-k of those seen below it are the kept ones below it.
        """
        removed = []
        while self._heap and self._heap[0].order >= bound:
            entry = heapq.heappop(self._heap)
            del self._kept[entry.order]
            removed.append(entry.item)
        return removed

    def would_keep(self, order: Order) -> bool:
        """Whether an item with this sort key would be kept if offered now."""
        if self.k == 0 or order in self._kept:
            return False
        return len(self._heap) < self.k or order < self._heap[0].order

    def get(self, order: Order) -> T | None:
        """The kept item with this sort key, if any."""
        return self._kept.get(order)

    def __len__(self) -> int:
        return len(self._heap)

    def threshold(self) -> Order | None:
        """The largest kept sort key once ``k`` items are kept (smaller ones get in), else None."""
        return self._heap[0].order if self.k and len(self._heap) >= self.k else None

    def kept(self) -> list[T]:
        """The kept items, in no particular order."""
        return [entry.item for entry in self._heap]

    def items(self) -> list[tuple[SortKey, T]]:
        """The kept items in ascending sort-key order."""
        return [(SortKey(*entry.order), entry.item) for entry in sorted(self._heap, key=lambda e: e.order)]


def step_k(current: int | None, asked: int) -> int:
    """The k of a step once a record or call asks for ``asked``: the smallest k asked for wins.

    Shrinking a bottom-k is exact and growing one is not (what it dropped is gone), so with
    this rule every component keeps the same set whatever order the requests arrive in.
    ``testdata/sampling/k_rule.json`` holds the cases that the Python and Go suites share.
    """
    return asked if current is None else min(current, asked)


NO_RATE_THRESHOLD: Final = 1 << 63
"""The threshold of rate 1 (or no rate): every key, in ``[0, 2**63)``, is below it."""


def rate_threshold(rate: float | None) -> int:
    """``floor(rate * 2**63)``: a prompt whose key is below it is eligible under ``rate``; None is rate 1.

    ``rate * 2**63`` is exact in binary64 (a power-of-two scaling), so the floor is the same
    integer in every language; rate 1 gives ``2**63`` (every key), a rate below ``2**-63`` gives 0.

    Raises:
        ValueError: for a rate that is not a number in (0, 1].

    """
    if rate is None:
        return NO_RATE_THRESHOLD
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 < rate <= 1:
        raise ValueError(f"a sample rate is a number in (0, 1], not {rate!r}")
    return math.floor(math.ldexp(float(rate), 63))


def rate_of(value: object) -> float | None:
    """A record's ``valgen.sample_rate`` if usable (a number in (0, 1], not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if 0 < value <= 1 else None


def step_rate(current: float | None, asked: float | None) -> float | None:
    """The rate of a step once a record asks for ``asked`` (None: no rate): the smallest rate wins.

    Lowering a rate is exact (the prompts below the lower threshold are a prefix of those below
    the higher one) and raising it is not, as for k (``step_k``); no rate is rate 1.
    """
    if current is None:
        return asked
    return current if asked is None else min(current, asked)


def bottom_k(items: Iterable[tuple[SortKey, T]], k: int) -> list[tuple[SortKey, T]]:
    """Return the ``k`` items with the smallest sort keys, ascending (the reference choice)."""
    selector: BottomK[T] = BottomK(k)
    for order, item in items:
        selector.offer(order, item)
    return selector.items()


class GroupView(Generic[T]):
    """The group view: the ``k`` prompts with the smallest prompt sort keys, each with every response offered.

    Responses of one prompt share its sort key, so they are kept or dropped together; offering
    a response whose sort key its prompt already holds is a no-op. Memory is O(k·n) for n
    responses per prompt. A validation generation is the case of a prompt with one response.

    With a ``rate`` only prompts whose key is below ``rate_threshold(rate)`` are eligible (the
    watch-list, module docstring): the view keeps the eligible prompts, the ``k`` smallest when
    more are eligible.
    """

    def __init__(self, k: int, rate: float | None = None) -> None:
        self._prompts: BottomK[dict[Order, T]] = BottomK(k)
        self.rate = rate
        self.limit = rate_threshold(rate)

    @property
    def k(self) -> int:
        """How many prompts are kept at most."""
        return self._prompts.k

    def eligible(self, prompt: Order) -> bool:
        """Whether ``prompt``'s key is below the rate's threshold (always, without a rate)."""
        return prompt[0] < self.limit

    def lower_rate(self, rate: float | None) -> list[T]:
        """Apply a record's rate by ``step_rate``; return the responses of prompts no longer eligible."""
        lowered = step_rate(self.rate, rate)
        if lowered == self.rate:
            return []
        self.rate, self.limit = lowered, rate_threshold(lowered)
        return [item for responses in self._prompts.cut((self.limit, b"")) for item in responses.values()]

    def offer(self, prompt: Order, order: Order, item: T) -> bool:
        """Consider one response of ``prompt``; return whether it is (for now) kept."""
        if prompt[0] >= self.limit:
            return False
        responses = self._prompts.get(prompt)
        if responses is not None:
            if order in responses:
                return False
            responses[order] = item
            return True
        return self._prompts.offer(prompt, {order: item})

    def would_keep(self, prompt: Order) -> bool:
        """Whether a response of ``prompt`` would be kept if offered now (its prompt is or would be kept)."""
        if prompt[0] >= self.limit:
            return False
        return self._prompts.get(prompt) is not None or self._prompts.would_keep(prompt)

    def threshold(self) -> Order | None:
        """The largest kept prompt sort key once ``k`` prompts are kept, else None."""
        return self._prompts.threshold()

    def shrink(self, k: int) -> list[T]:
        """Keep only the ``k`` smallest prompts; return the responses no longer kept."""
        return [item for responses in self._prompts.shrink(k) for item in responses.values()]

    def prompts(self) -> int:
        """How many prompts are kept."""
        return len(self._prompts)

    def __len__(self) -> int:
        return sum(len(responses) for responses in self._prompts.kept())

    def kept(self) -> list[T]:
        """The kept responses, in no particular order."""
        return [item for responses in self._prompts.kept() for item in responses.values()]

    def items(self) -> list[tuple[SortKey, SortKey, T]]:
        """``(prompt, response, item)`` ranked: prompts ascending, each prompt's responses ascending."""
        return [
            (prompt, SortKey(*order), responses[order])
            for prompt, responses in self._prompts.items()
            for order in sorted(responses)
        ]


def group_view(
    items: Iterable[tuple[SortKey, SortKey, T]], k: int, rate: float | None = None
) -> list[tuple[SortKey, SortKey, T]]:
    """The responses of the ``k`` prompts with the smallest sort keys, ranked (the reference group view).

    ``items`` are ``(prompt sort key, response sort key, item)``; with ``rate``, only prompts
    whose key is below ``rate_threshold(rate)`` are eligible.
    """
    view: GroupView[T] = GroupView(k, rate)
    for prompt, order, item in items:
        view.offer(prompt, order, item)
    return view.items()


SAMPLE_BY_STEP: Final = contract.SAMPLE_BY_STEP
"""k per step: the default, and what a record without ``valgen.sample_by`` asks for."""
SAMPLE_BY_DATA_SOURCE: Final = contract.SAMPLE_BY_DATA_SOURCE
"""k per (step, data source)."""


def data_source_order(data_source: str) -> bytes:
    """The order in which a split group's data sources are ranked: their UTF-8 bytes."""
    return data_source.encode("utf-8", "replace")


SLOT_KEYED: Final = contract.SLOT_KEYED
SLOT_LOWEST: Final = contract.SLOT_LOWEST
SLOT_HIGHEST: Final = contract.SLOT_HIGHEST
SLOT_MISMATCHED: Final = contract.SLOT_MISMATCHED
RANKED_SLOTS: Final = ((SLOT_LOWEST, False), (SLOT_HIGHEST, True), (SLOT_MISMATCHED, True))
"""The slots kept as a bottom-n of a figure beside the keyed picks, in the order they are listed, each
with whether it ranks its figure descending: the lowest and highest score, the largest KL."""


def score_rank(score: float) -> int:
    """A finite score as a 64-bit int in the same order (its IEEE 754 bits made monotonic; -0.0 is 0.0)."""
    bits: int = struct.unpack(">Q", struct.pack(">d", score + 0.0))[0]
    return bits ^ MASK64 if bits >> 63 else bits | (1 << 63)


class FigureRanks(Generic[T]):
    """The ``n`` items with the smallest figure (``descending``: the largest), ties broken by sort key: a bottom-n.

    An item's order is ``(figure, sample key, sample id)``, descending ``(-figure, sample key,
    sample id)``, folded into a ``BottomK`` order as ``(rank << 63 | sample key, sample id)`` with
    ``rank = score_rank(figure)`` (descending: ``MASK64 - rank``): sample keys are below ``2**63``,
    so the int compares as the pair does. Only finite figures take part (-0.0 is 0.0).
    """

    def __init__(self, n: int, descending: bool = False) -> None:
        self._kept: BottomK[T] = BottomK(n)
        self.descending = descending

    @property
    def n(self) -> int:
        """How many are kept at most."""
        return self._kept.k

    def offer(self, figure: float | None, order: Order, item: T) -> bool:
        """Consider an item of ``figure`` (None or not finite: not considered); return whether it is kept."""
        if figure is None or not math.isfinite(figure):
            return False
        rank = score_rank(figure)
        if self.descending:
            rank = MASK64 - rank
        return self._kept.offer(((rank << 63) | order[0], order[1]), item)

    def absorb(self, other: FigureRanks[T]) -> None:
        """Offer what ``other`` keeps, with its orders: the n of the union (mergeable, as the bottom-k)."""
        for order, item in other._kept.items():
            self._kept.offer(order, item)

    def shrink(self, n: int) -> None:
        """Keep only the first ``n`` (exact, as ``BottomK.shrink``)."""
        self._kept.shrink(n)

    def items(self) -> list[T]:
        """The kept items ranked: by figure, ascending (descending: the largest first), ties by sort key."""
        return [item for _, item in self._kept.items()]

    def kept(self) -> list[T]:
        """The kept items, in no particular order."""
        return self._kept.kept()


class DataSourceViews(Generic[T]):
    """A group's sample with k per data source: one ``GroupView`` per data source while split.

    The group splits when its first generation asks for k per data source, and turns back into
    one view, for good, at the first generation that does not (module docstring): a group is
    split when every generation of it asked. Ranked, a split group lists its data sources in
    ``data_source_order``, each one's view ranked. With ``extremes`` (validation) each view also
    keeps that many lowest- and highest-scored, with ``mismatched`` (rollouts) that many responses
    of the largest KL (``FigureRanks``, one per slot of ``RANKED_SLOTS``); ``ranked`` lists them
    after the keyed picks.
    """

    def __init__(self, k: int, rate: float | None = None, extremes: int = 0, mismatched: int = 0) -> None:
        self._k = k
        self.rate = rate
        self.split: bool | None = None  # None until the first generation
        self._views: dict[str, GroupView[T]] = {}
        self._n = {SLOT_LOWEST: extremes, SLOT_HIGHEST: extremes, SLOT_MISMATCHED: mismatched}
        self._ranks: dict[str, dict[str, FigureRanks[T]]] = {}  # by view, then by slot (those of n > 0)

    @property
    def k(self) -> int:
        """How many prompts each view keeps at most."""
        return self._k

    def _view(self, data_source: str) -> GroupView[T]:
        key = data_source if self.split else ""
        view = self._views.get(key)
        if view is None:
            view = self._views[key] = GroupView(self._k, self.rate)
        return view

    def _ranks_of(self, key: str) -> dict[str, FigureRanks[T]]:
        """The ranked slots of view ``key``, made on its first offer."""
        ranks = self._ranks.get(key)
        if ranks is None:
            ranks = {slot: FigureRanks(self._n[slot], down) for slot, down in RANKED_SLOTS if self._n[slot]}
            self._ranks[key] = ranks
        return ranks

    def _join(self) -> None:
        """Turn the split views into one: the bottom-k of their union (exact, module docstring), and their ranks'."""
        joined: GroupView[T] = GroupView(self._k, self.rate)
        for view in self._views.values():
            for prompt, order, item in view.items():
                joined.offer(prompt, order, item)
        ranks: dict[str, FigureRanks[T]] = {}
        for part in self._ranks.values():
            for slot, ranked in part.items():
                ranks.setdefault(slot, FigureRanks(self._n[slot], ranked.descending)).absorb(ranked)
        self._views = {"": joined}
        self._ranks = {"": ranks} if ranks else {}
        self.split = False

    def _gone(self, before: list[T]) -> list[T]:
        """The items of ``before`` that nothing keeps now."""
        alive = {id(item) for item in self.kept()}
        return [item for item in before if id(item) not in alive]

    @property
    def extremes(self) -> int:
        """How many lowest- and highest-scored generations each view keeps beside its k (0: none)."""
        return self._n[SLOT_LOWEST]

    @property
    def mismatched(self) -> int:
        """How many responses of the largest KL each view keeps beside its k prompts (0: none)."""
        return self._n[SLOT_MISMATCHED]

    def ask(self, by_data_source: bool, extremes: int | None = None, mismatched: int | None = None) -> list[T]:
        """Apply a generation's ``valgen.sample_by``, ``valgen.extremes`` and ``valgen.mismatched`` (smallest n wins).

        Returns the items that the join or a smaller n sampled out. Called for every generation, so
        the kept items are listed only when one of those happens.
        """
        if self.split is None:
            self.split = by_data_source
        joins = self.split and not by_data_source
        asked = ((SLOT_LOWEST, extremes), (SLOT_HIGHEST, extremes), (SLOT_MISMATCHED, mismatched))
        shrinks = [(slot, n) for slot, n in asked if n is not None and n < self._n[slot]]
        if not (joins or shrinks):
            return []
        before = self.kept()
        if joins:
            self._join()
        for slot, n in shrinks:
            self._n[slot] = n
            for ranks in self._ranks.values():
                if n and slot in ranks:
                    ranks[slot].shrink(n)
                elif not n:
                    ranks.pop(slot, None)
        return self._gone(before) if before else []

    def offer(
        self,
        data_source: str,
        prompt: Order,
        order: Order,
        item: T,
        score: float | None = None,
        kl: float | None = None,
    ) -> bool:
        """Consider one response of ``prompt`` of ``data_source`` (after ``ask``); return whether it is kept.

        ``score`` (None: no valid score) also offers it to its data source's lowest and highest,
        ``kl`` (None: none) to its most mismatched, when those are kept.
        """
        kept = self._view(data_source).offer(prompt, order, item)
        if not (score is not None and self._n[SLOT_LOWEST]) and not (kl is not None and self._n[SLOT_MISMATCHED]):
            return kept
        for slot, ranks in self._ranks_of(data_source if self.split else "").items():
            kept = ranks.offer(kl if slot == SLOT_MISMATCHED else score, order, item) or kept
        return kept

    def would_keep(self, data_source: str, prompt: Order) -> bool:
        """Whether a response of ``prompt`` of ``data_source`` would be kept if offered now."""
        view = self._views.get(data_source if self.split else "")
        return view.would_keep(prompt) if view is not None else self._k > 0 and prompt[0] < rate_threshold(self.rate)

    def threshold(self, data_source: str = "") -> Order | None:
        """The largest kept prompt sort key of ``data_source``'s view once it keeps k, else None."""
        view = self._views.get(data_source if self.split else "")
        return view.threshold() if view is not None else None

    def shrink(self, k: int) -> list[T]:
        """Keep only the ``k`` smallest prompts of each view; return the responses nothing keeps now."""
        self._k = k
        removed = [item for view in self._views.values() for item in view.shrink(k)]
        return self._gone(removed) if removed and self._ranks else removed

    def lower_rate(self, rate: float | None) -> list[T]:
        """Apply a record's rate (``step_rate``) to every view; return the responses nothing keeps now."""
        self.rate = step_rate(self.rate, rate)
        removed = [item for view in self._views.values() for item in view.lower_rate(rate)]
        return self._gone(removed) if removed and self._ranks else removed

    def prompts(self) -> int:
        """How many prompts are kept, over the data sources."""
        return sum(view.prompts() for view in self._views.values())

    def __len__(self) -> int:
        return sum(len(view) for view in self._views.values())

    def kept(self) -> list[T]:
        """The kept responses (keyed or in a ranked slot, each once), in no particular order."""
        keyed = [item for view in self._views.values() for item in view.kept()]
        if not self._ranks:
            return keyed
        ranked = [item for part in self._ranks.values() for ranks in part.values() for item in ranks.kept()]
        return list({id(item): item for item in (*keyed, *ranked)}.values())

    def ranked(self) -> list[tuple[T, tuple[str, ...]]]:
        """Every kept item once, ranked, with its slots (of ``contract.SLOTS_ORDER``).

        The keyed picks first, as ``items`` ranks them; then, data source by data source, its
        lowest ascending, its highest descending and its most mismatched (largest KL first) that
        are not listed yet.
        """
        keyed = [item for _, _, item in self.items()]
        lists = [
            (slot, part[slot].items())
            for source in sorted(self._ranks, key=data_source_order)
            for slot, _ in RANKED_SLOTS
            if slot in (part := self._ranks[source])
        ]
        members = {SLOT_KEYED: {id(item) for item in keyed}}
        for slot, items in lists:
            members.setdefault(slot, set()).update(id(item) for item in items)

        def slots(item: T) -> tuple[str, ...]:
            return tuple(slot for slot in contract.SLOTS_ORDER if id(item) in members.get(slot, ()))

        out = [(item, slots(item)) for item in keyed]
        listed = set(members[SLOT_KEYED])
        for _, items in lists:
            for item in items:
                if id(item) not in listed:
                    listed.add(id(item))
                    out.append((item, slots(item)))
        return out

    def items(self) -> list[tuple[SortKey, SortKey, T]]:
        """``(prompt, response, item)`` of the keyed picks, ranked: data sources in order, each one's view ranked."""
        return [entry for source in sorted(self._views, key=data_source_order) for entry in self._views[source].items()]

    def by_data_source(self) -> dict[str, list[T]]:
        """The kept responses of each data source's view, ranked (one ``""`` entry when not split)."""
        return {source: [item for _, _, item in self._views[source].items()] for source in self._views}
