"""Presampling through the real emitter: any split over processes and batches, merged, is exact."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import otel_valgen as vg
from otel_valgen import _process, contract
from otel_valgen.sampling import SortKey, bottom_k, sample_key, untagged
from otel_valgen.testing import capture_records


def _emit_as_processes(
    ids: list[str], owners: list[int], processes: int, batch_sizes: list[int], k: int, seed: int, presample: bool
) -> list[dict[str, Any]]:
    """Each 'process' is its own emitter (own instance id), logging its share in batches."""
    records: list[dict[str, Any]] = []
    for process in range(processes):
        mine = [sample_id for sample_id, owner in zip(ids, owners, strict=True) if owner == process]
        with (
            capture_records(run_id="prop", count=k, seed=seed, presample=presample, source=f"p{process}") as got,
            vg.validation(step=1),
        ):
            cut, turn = 0, 0
            while cut < len(mine):
                size = batch_sizes[turn % len(batch_sizes)]
                part = mine[cut : cut + size]
                vg.log_generations(part, ["out"] * len(part), [0.5] * len(part), sample_ids=part)
                cut, turn = cut + size, turn + 1
        records.extend(got)
        _process.reset_for_testing()
    return records


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ids=st.lists(st.text(alphabet="abcdefghij", min_size=1, max_size=6), min_size=1, max_size=80, unique=True),
    k=st.integers(min_value=1, max_value=12),
    seed=st.integers(min_value=0, max_value=2**64 - 1),
    presample=st.booleans(),
    data=st.data(),
)
def test_merged_selection_equals_the_single_process_choice(
    ids: list[str], k: int, seed: int, presample: bool, data: st.DataObject
) -> None:
    """Random processes and batch sizes: the bottom-k of everything sent is the oracle's choice.

    Each process sent at most k (presampling on) or all it saw (off); end records add up.
    """
    processes = data.draw(st.integers(min_value=1, max_value=4))
    owners = [data.draw(st.integers(0, processes - 1)) for _ in ids]
    batch_sizes = data.draw(st.lists(st.integers(1, 20), min_size=1, max_size=5))
    records = _emit_as_processes(ids, owners, processes, batch_sizes, k, seed, presample)

    generations = [r for r in records if r["event_name"] == contract.EVENT_GENERATION]
    sent = (
        (SortKey.of(r["attributes"][contract.SAMPLE_KEY], r["attributes"][contract.SAMPLE_ID]), r) for r in generations
    )
    chosen = [untagged(r["attributes"][contract.SAMPLE_ID]) for _, r in bottom_k(sent, k)]
    oracle = [s for _, s in bottom_k(((SortKey.of(sample_key(seed, f"{i}/0"), f"{i}/0"), f"{i}/0") for i in ids), k)]
    assert chosen == oracle
    assert len(chosen) == min(k, len(ids))

    ends = [r["attributes"] for r in records if r["event_name"] == contract.EVENT_VALIDATION_END]
    assert sum(end[contract.SEEN] for end in ends) == len(ids)
    assert sum(end[contract.EMITTED] for end in ends) == len(generations)
    for end in ends:
        assert end[contract.EMITTED] == (min(k, end[contract.SEEN]) if presample else end[contract.SEEN])
    assert len({r["resource"]["service.instance.id"] for r in records}) == len(ends)
