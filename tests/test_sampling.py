"""The sampling rule: key function, shared vectors, bottom-k and its mergeability."""

from __future__ import annotations

import hashlib
import hmac
import json
import random
import shutil
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_valgen.sampling import BottomK, SampleKeyer, SortKey, bottom_k, sample_key
from tests.conftest import REPO

VECTORS = REPO / "testdata" / "sampling"


def _keyed(ids: list[str], seed: int) -> list[tuple[SortKey, str]]:
    return [(SortKey.of(sample_key(seed, sid), sid), sid) for sid in ids]


def test_key_vectors_match_the_shared_file() -> None:
    """Every vector in testdata/sampling/key_vectors.json is reproduced exactly."""
    data = json.loads((VECTORS / "key_vectors.json").read_text(encoding="utf-8"))
    assert len(data["vectors"]) >= 50
    for vector in data["vectors"]:
        assert sample_key(int(vector["seed"]), vector["sample_id"]) == int(vector["sample_key"]), vector


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed")
def test_key_matches_an_independent_hmac_implementation() -> None:
    """The key equals OpenSSL's HMAC-SHA256 (first 8 bytes, big-endian, >> 1) for the same input."""
    for seed, sample_id in ((42, "abc/0"), (2**64 - 1, "数学题/0"), (0, "")):
        out = subprocess.run(
            ["openssl", "dgst", "-sha256", "-mac", "HMAC", "-macopt", f"hexkey:{seed:016x}"],
            input=sample_id.encode(),
            capture_output=True,
            check=True,
        ).stdout.decode()
        digest_hex = out.strip().split("= ")[-1]
        assert sample_key(seed, sample_id) == int(digest_hex[:16], 16) >> 1


def test_bottom_k_cases_match_the_shared_file() -> None:
    """Every case in testdata/sampling/bottom_k.json selects the expected ids, in order."""
    data = json.loads((VECTORS / "bottom_k.json").read_text(encoding="utf-8"))
    for case in data["cases"]:
        seed = int(case.get("seed", "42"))
        items = []
        for record in case["records"]:
            key = int(record["sample_key"]) if "sample_key" in record else sample_key(seed, record["sample_id"])
            items.append((SortKey.of(key, record["sample_id"]), record["sample_id"]))
        assert [sid for _, sid in bottom_k(items, case["k"])] == case["expected"], case["name"]


def test_key_range_and_seed_modulo() -> None:
    """Keys lie in [0, 2**63) and the seed enters modulo 2**64."""
    for i in range(2000):
        assert 0 <= sample_key(i, f"id-{i}") < 2**63
    assert sample_key(-1, "x") == sample_key(2**64 - 1, "x")
    assert sample_key(1, "x") != sample_key(2, "x")


def test_key_is_the_documented_hmac() -> None:
    """The key is HMAC-SHA256 keyed by the 8-byte big-endian seed over the UTF-8 id."""
    digest = hmac.new((42).to_bytes(8, "big"), b"uid/1", hashlib.sha256).digest()
    assert sample_key(42, "uid/1") == int.from_bytes(digest[:8], "big") >> 1


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(-(2**64), 2**65), sample_id=st.text())
def test_fast_keyer_equals_the_reference(seed: int, sample_id: str) -> None:
    """SampleKeyer (precomputed HMAC pads) computes exactly sample_key."""
    encoded = sample_id.encode("utf-8", "replace")
    assert SampleKeyer(seed)(encoded) == sample_key(seed, sample_id)


def test_duplicates_are_kept_once() -> None:
    """Offering the same record twice (a retried batch) keeps it once."""
    selector: BottomK[str] = BottomK(3)
    for _ in range(3):
        for order, sid in _keyed(["a/0", "b/0"], 1):
            selector.offer(order, sid)
    assert sorted(item for _, item in selector.items()) == ["a/0", "b/0"]


ids_strategy = st.lists(st.text(min_size=0, max_size=12), min_size=0, max_size=120, unique=True)


@settings(max_examples=150, deadline=None)
@given(ids=ids_strategy, k=st.integers(min_value=0, max_value=40), seed=st.integers(0, 2**64 - 1), data=st.data())
def test_merge_of_partitions_equals_the_single_choice(ids: list[str], k: int, seed: int, data: st.DataObject) -> None:
    """Any split of the records over processes and batches, merged, selects the same set."""
    keyed = _keyed(ids, seed)
    reference = bottom_k(keyed, k)
    processes = data.draw(st.integers(min_value=1, max_value=6))
    assignment = [data.draw(st.integers(0, processes - 1)) for _ in keyed]
    shuffle_seed = data.draw(st.integers(0, 2**32))
    partials: list[tuple[SortKey, str]] = []
    for process in range(processes):
        mine = [item for item, owner in zip(keyed, assignment, strict=True) if owner == process]
        random.Random(shuffle_seed + process).shuffle(mine)
        selector: BottomK[str] = BottomK(k)
        cut = 0
        while cut < len(mine):  # arbitrary batch sizes
            size = data.draw(st.integers(1, 25))
            for order, sid in mine[cut : cut + size]:
                selector.offer(order, sid)
            cut += size
        partials.extend(selector.items())
    random.Random(shuffle_seed).shuffle(partials)
    assert bottom_k(partials, k) == reference
    assert len(reference) == min(k, len(ids))


@settings(max_examples=50, deadline=None)
@given(prompts=st.lists(st.text(max_size=8), min_size=1, max_size=60, unique=True), k=st.integers(1, 20))
def test_same_prompts_are_chosen_at_every_step(prompts: list[str], k: int) -> None:
    """The choice depends only on (seed, sample_id): every step keeps the same prompts."""
    chosen = [[sid for _, sid in bottom_k(_keyed([f"{p}/0" for p in prompts], 42), k)] for _step in range(3)]
    assert chosen[0] == chosen[1] == chosen[2]


def test_choice_is_roughly_uniform() -> None:
    """Each id is kept with probability about k/M over many seeds."""
    ids = [f"p{i}/0" for i in range(20)]
    hits = dict.fromkeys(ids, 0)
    for seed in range(3000):
        for _, sid in bottom_k(_keyed(ids, seed), 5):
            hits[sid] += 1
    expected = 3000 * 5 / 20
    assert all(abs(count - expected) < 0.15 * expected for count in hits.values()), hits
