"""One step's local bottom-k (presampling), and the fate of every generation that entered it.

The sample is a group view (``otel_valgen.sampling.GroupView``): the bottom-k prompts with
every response of each. A validation generation is its own prompt, so for validation this is
the bottom-k of generations; a rollout's responses enter and leave with their prompt. With a
rollout rate (the watch-list) a prompt whose key is not below ``rate_threshold(rate)`` never
enters: its responses are sampled out like those of any prompt the bottom-k left out. With k
per data source (``sample_by = data_source``) each data source has its own group view
(``otel_valgen.sampling.DataSourceViews``). With extremes (validation) or the most mismatched
(rollouts) a generation outside the bottom-k may still be kept in one of those slots.

A generation that enters is *held* until its fate is counted: sent at the end of the step (or
part), dropped (its record failed to build, or the step ended before it was built), or sampled
out (a smaller key evicted it, or a smaller k cut it). ``settled`` marks that its fate is
counted, so that no generation is counted twice, whatever happens to it later.
The emitter's lock guards every method.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence

from otel_valgen._records import PendingRecord
from otel_valgen.sampling import DataSourceViews, Order, rate_threshold

Candidate = tuple[int, Order, Order]
"""A generation of a batch that may enter: (index in the batch, its prompt's sort key, its sort key)."""
Entered = tuple[int, Order, Order, "Kept"]


class Kept:
    """A generation in the bottom-k: its record once built, and whether its fate is counted."""

    __slots__ = ("record", "settled")

    def __init__(self) -> None:
        self.record: PendingRecord | None = None
        self.settled = False


def _settle(items: Iterable[Kept]) -> int:
    """Settle ``items``; return how many were not settled yet."""
    newly = 0
    for item in items:
        if not item.settled:
            item.settled = True
            newly += 1
    return newly


def prompts_under_rate(prompt_keys: Iterable[int], rate: float | None) -> int:
    """How many of a call's distinct prompt keys are below ``rate``'s threshold (0 without a rate)."""
    if rate is None:
        return 0
    limit = rate_threshold(rate)
    return sum(1 for key in prompt_keys if key < limit)


def _first(members: list[Candidate], figures: Sequence[float | None] | None, n: int, sign: float) -> set[int]:
    """Batch indices of the ``n`` members first by ``(sign * figure, sort key)`` (``figures`` by batch index)."""
    if not n or figures is None:
        return set()
    ranked = [(sign * figure + 0.0, c[2], c[0]) for c in members if (figure := figures[c[0]]) is not None]
    return {index for _, _, index in heapq.nsmallest(n, ranked)}


def _batch_cut(
    found: list[Candidate],
    data_sources: Sequence[str] | None,
    k: int,
    scores: Sequence[float | None] | None = None,
    n: int = 0,
    kls: Sequence[float | None] | None = None,
    m: int = 0,
) -> list[Candidate]:
    """The candidates that can still be kept after the batch, of each data source (all one without them).

    Those whose prompt is among the batch's ``k`` smallest prompts of its data source, with ``n``
    extremes those among its ``n`` lowest- and ``n`` highest-scored (``scores`` by batch index),
    and with ``m`` most mismatched those among its ``m`` of the largest KL (``kls``): no other can
    be in its data source's sample after the batch, so the cut saves offering them one by one
    (what ``prefilter`` does for a step kept whole).
    """
    by_source: dict[str, list[Candidate]] = {}
    for candidate in found:
        by_source.setdefault(data_sources[candidate[0]] if data_sources is not None else "", []).append(candidate)
    out: list[Candidate] = []
    for members in by_source.values():
        prompts = {prompt for _, prompt, _ in members}
        bound = heapq.nsmallest(k, prompts)[-1] if 0 < k < len(prompts) else None
        extreme = _first(members, scores, n, 1.0) | _first(members, scores, n, -1.0) | _first(members, kls, m, -1.0)
        for candidate in members:
            keyed = len(prompts) <= k or (bound is not None and candidate[1] <= bound)
            if keyed or candidate[0] in extreme:
                out.append(candidate)
    return out


class LocalSample:
    """The bottom-k of what this process saw of one step, held until the step (or part) ends.

    With ``rate`` only prompts whose key is below ``rate_threshold(rate)`` enter (the watch-list);
    ``by_data_source`` keeps k per data source; ``extremes`` also the n lowest- and highest-scored,
    ``mismatched`` the n responses of the largest KL.
    """

    def __init__(
        self, k: int, rate: float | None = None, by_data_source: bool = False, extremes: int = 0, mismatched: int = 0
    ) -> None:
        self._kept: DataSourceViews[Kept] = DataSourceViews(k, rate, extremes, mismatched)
        self._kept.ask(by_data_source)

    @property
    def extremes(self) -> int:
        """The n lowest- and highest-scored kept beside the k keyed picks (0: none)."""
        return self._kept.extremes

    @property
    def mismatched(self) -> int:
        """The n responses of the largest KL kept beside the k keyed prompts (0: none)."""
        return self._kept.mismatched

    @property
    def k(self) -> int:
        """The step's k."""
        return self._kept.k

    def threshold(self) -> Order | None:
        """The largest kept prompt sort key once k are kept: only smaller ones (or its own responses) can enter."""
        return self._kept.threshold()

    def prefilter(self, data_sources: Sequence[str] | None = None) -> tuple[Order | None, int | None]:
        """``(threshold, k)`` that a batch's candidates can be cut to before they are offered.

        With k per data source (the batch's ``data_sources``) the batch's k smallest may leave out
        what another data source keeps: no k, and the largest threshold of the batch's data
        sources (None while one of them keeps fewer than k), below which each one's picks are.
        With extremes or the most mismatched none: a generation above every threshold may be among them.
        """
        if self._kept.extremes or self._kept.mismatched:
            return None, None
        if not self._kept.split:
            return self._kept.threshold(), self._kept.k
        thresholds = [self._kept.threshold(source) for source in set(data_sources or ())]
        if not thresholds or any(threshold is None for threshold in thresholds):
            return None, None
        return max(threshold for threshold in thresholds if threshold is not None), None

    def held(self) -> int:
        """Generations kept and not settled yet."""
        return sum(not item.settled for item in self._kept.kept())

    def offer(
        self,
        found: list[Candidate],
        data_sources: Sequence[str] | None = None,
        scores: Sequence[float | None] | None = None,
        kls: Sequence[float | None] | None = None,
    ) -> tuple[list[Entered], int]:
        """Offer a batch's candidates ``(index, prompt sort key, sort key)``, of ``data_sources[index]`` when split.

        With extremes, ``scores[index]`` is each one's valid score (None: none); with the most
        mismatched, ``kls[index]`` its finite KL (None: none). Returns those still kept after the
        whole batch (to build), and how many held generations of earlier calls they evicted (now
        sampled out).
        """
        if not found:
            return [], 0
        n, m = self._kept.extremes, self._kept.mismatched
        if (self._kept.split and data_sources is not None) or n or m:
            found = _batch_cut(found, data_sources if self._kept.split else None, self._kept.k, scores, n, kls, m)
        before = self._kept.kept()
        offered = []
        for index, prompt, order in found:
            item = Kept()
            source = data_sources[index] if data_sources is not None else ""
            score = scores[index] if scores is not None else None
            kl = kls[index] if kls is not None else None
            if self._kept.offer(source, prompt, order, item, score, kl):
                offered.append((index, prompt, order, item))
        if not offered:
            return [], 0
        alive = {id(item) for item in self._kept.kept()}
        evicted = _settle(item for item in before if id(item) not in alive)
        return [entry for entry in offered if id(entry[3]) in alive], evicted

    def shrink(self, k: int) -> int:
        """Keep only the ``k`` smallest; return how many held generations that sampled out."""
        return _settle(self._kept.shrink(k))

    @staticmethod
    def drop(item: Kept) -> int:
        """Settle ``item`` whose record failed to build: 1, or 0 when it was settled meanwhile."""
        return _settle([item])

    def take(self, final: bool) -> tuple[list[PendingRecord], int]:
        """Settle the built records not sent yet and return them in key order, to be sent (and let go of them).

        ``final`` (the step ends here) also settles what a call in another thread is still
        building: it can no longer be sent, and is counted as dropped (the second value).
        """
        records: list[PendingRecord] = []
        unbuilt = 0
        for item, _ in self._kept.ranked():
            if item.settled or (item.record is None and not final):
                continue
            item.settled = True
            if item.record is None:
                unbuilt += 1
            else:
                records.append(item.record)
                # Sent: the item keeps its place in the sample (later parts of the step compare
                # with it), not its texts. A rollout part holds k·n of them for up to
                # MAX_OPEN_STEPS later parts.
                item.record = None
        return records, unbuilt
