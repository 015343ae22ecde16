"""The sampling rule: key function, shared vectors, bottom-k and its mergeability."""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import random
import shutil
import subprocess
from collections.abc import Callable
from typing import Any

import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_valgen._keys import BatchKeyer
from otel_valgen._records import Batch, ResponseLanes, candidates
from otel_valgen.sampling import (
    KEY_VERSION,
    KEY_VERSIONS,
    LEGACY_KEY_VERSION,
    MIX1,
    MIX2,
    BottomK,
    SortKey,
    bottom_k,
    id_hash,
    mix64,
    sample_key,
    seed_lane,
    split_sample_id,
)
from tests.conftest import REPO
from tests.support.require import require_or_skip

VECTORS = REPO / "testdata" / "sampling"


def _keyed(ids: list[str], seed: int) -> list[tuple[SortKey, str]]:
    return [(SortKey.of(sample_key(seed, sid), sid), sid) for sid in ids]


def test_key_vectors_match_the_shared_file() -> None:
    """Every vector in testdata/sampling/key_vectors.json is reproduced exactly, for both versions."""
    data = json.loads((VECTORS / "key_vectors.json").read_text(encoding="utf-8"))
    assert {vector["version"] for vector in data["vectors"]} == set(KEY_VERSIONS)
    assert len(data["vectors"]) >= 100
    for vector in data["vectors"]:
        got = sample_key(int(vector["seed"]), vector["sample_id"], vector["version"])
        assert got == int(vector["sample_key"]), vector
    for vector in data["mix64"]:
        assert mix64(int(vector["in"])) == int(vector["out"]), vector
    for vector in data["seed_lane"]:
        assert seed_lane(int(vector["seed"]), vector["n"]) == int(vector["lane"]), vector
    assert len(data["id_hash"]) >= 10
    for vector in data["id_hash"]:
        assert id_hash(vector["base"]) == int(vector["hash"]), vector


def test_id_hash_is_xxh64_as_published() -> None:
    """Bases that are not 16 hex digits hash to XXH64 with seed 0, as the xxHash spec publishes it."""
    assert id_hash("") == 0xEF46DB3751D8E999  # XXH64 of no bytes, seed 0 (xxHash's reference value)


def test_v1_key_matches_an_independent_hmac_implementation() -> None:
    """Version 1 equals OpenSSL's HMAC-SHA256 (first 8 bytes, big-endian, >> 1) for the same input."""
    require_or_skip(shutil.which("openssl") is not None, "openssl is not installed (the only independent key check)")
    for seed, sample_id in ((42, "abc/0"), (2**64 - 1, "数学题/0"), (0, "")):
        out = subprocess.run(
            ["openssl", "dgst", "-sha256", "-mac", "HMAC", "-macopt", f"hexkey:{seed:016x}"],
            input=sample_id.encode(),
            capture_output=True,
            check=True,
        ).stdout.decode()
        digest_hex = out.strip().split("= ")[-1]
        assert sample_key(seed, sample_id, LEGACY_KEY_VERSION) == int(digest_hex[:16], 16) >> 1


def test_seed_lanes_are_the_splitmix64_sequence() -> None:
    """Lane n of a seed is SplitMix64's n-th output: the published values for seed 1234567."""
    published = [
        6457827717110365317,
        3203168211198807973,
        9817491932198370423,
        4593380528125082431,
        16408922859458223821,
    ]
    assert [seed_lane(1234567, n) for n in range(1, 6)] == published


def test_bottom_k_cases_match_the_shared_file() -> None:
    """Every case in testdata/sampling/bottom_k.json selects the expected ids, in order."""
    data = json.loads((VECTORS / "bottom_k.json").read_text(encoding="utf-8"))
    assert {case.get("key_version") for case in data["cases"]} >= set(KEY_VERSIONS)
    for case in data["cases"]:
        seed, version = int(case.get("seed", "42")), case.get("key_version", KEY_VERSION)
        items = []
        for record in case["records"]:
            sid = record["sample_id"]
            key = int(record["sample_key"]) if "sample_key" in record else sample_key(seed, sid, version)
            items.append((SortKey.of(key, sid), sid))
        assert [sid for _, sid in bottom_k(items, case["k"])] == case["expected"], case["name"]


def test_key_range_and_seed_modulo() -> None:
    """Keys lie in [0, 2**63) and the seed enters modulo 2**64, in both versions."""
    for version in KEY_VERSIONS:
        for i in range(2000):
            assert 0 <= sample_key(i, f"id-{i}/{i % 3}", version) < 2**63
        assert sample_key(-1, "x/0", version) == sample_key(2**64 - 1, "x/0", version)
        assert sample_key(1, "x/0", version) != sample_key(2, "x/0", version)


def test_v1_key_is_the_documented_hmac() -> None:
    """Version 1 is HMAC-SHA256 keyed by the 8-byte big-endian seed over the UTF-8 id."""
    digest = hmac.new((42).to_bytes(8, "big"), b"uid/1", hashlib.sha256).digest()
    assert sample_key(42, "uid/1", 1) == int.from_bytes(digest[:8], "big") >> 1


def _splitmix_finaliser(z: int) -> int:
    """The finaliser written out again, step by step, for the documentation test."""
    mask = 2**64 - 1
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9 & mask
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB & mask
    return z ^ (z >> 31)


def test_v2_key_is_the_documented_mix() -> None:
    """Version 2 of a uid and of a derived id, computed from the docstring's definition."""
    lane = _splitmix_finaliser((42 + 2 * 0x9E3779B97F4A7C15) % 2**64)  # response index 1: n = 2
    uid_hash = xxhash.xxh64_intdigest(b"uid")
    assert sample_key(42, "uid/1") == _splitmix_finaliser(uid_hash ^ lane) >> 1
    digest = xxhash.xxh64_hexdigest(b"What is 2 + 2?")
    assert sample_key(42, f"{digest}/1") == _splitmix_finaliser(int(digest, 16) ^ lane) >> 1
    assert sample_key(42, f"{digest}/1") != sample_key(42, f"{digest}/0")
    no_index = _splitmix_finaliser(xxhash.xxh64_intdigest(b"uid") ^ seed_lane(42, 0))
    assert sample_key(42, "uid") == no_index >> 1


def test_response_index_suffix_from_the_shared_vectors() -> None:
    """Only a final '/' and 1-19 ASCII digits without a leading zero, then an optional '@<tag>', is a response index."""
    cases = json.loads((VECTORS / "key_vectors.json").read_text(encoding="utf-8"))["split"]
    assert any("@" in case["sample_id"] for case in cases)
    for case in cases:
        assert split_sample_id(case["sample_id"]) == (case["base"], int(case["n"])), case


def test_a_tag_after_the_index_leaves_the_key_unchanged() -> None:
    """Two parts answering one prompt (two tags) get one key; a malformed index is still hashed whole."""
    assert sample_key(42, "abc/1@5f2e9c1a7b3d") == sample_key(42, "abc/1") == sample_key(42, "abc/1@")
    assert sample_key(42, "abc/01@t") != sample_key(42, "abc/01")


def test_only_16_lowercase_hex_digits_are_read_as_a_number() -> None:
    """A base of 16 lowercase hex digits is its own hash; anything else is hashed with XXH64."""
    assert id_hash("000000000000002a") == 42
    for base in ("000000000000002A", "000000000000002", "000000000000002a0", "g00000000000002a"):
        assert id_hash(base) == xxhash.xxh64_intdigest(base.encode())


def test_unknown_key_version_is_refused() -> None:
    """A version this library does not know raises instead of guessing."""
    with pytest.raises(ValueError, match="version"):
        sample_key(1, "a/0", 3)


@settings(max_examples=200, deadline=None)
@given(
    seed=st.integers(0, 2**64 - 1),
    words=st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=60),
    data=st.data(),
)
def test_batch_keyer_equals_the_reference(seed: int, words: list[int], data: st.DataObject) -> None:
    """BatchKeyer's keys are sample_key's, and its cut keeps every key that can enter the bottom-k."""
    hashes = b"".join(word.to_bytes(8, "big") for word in words)
    lanes = data.draw(st.none() | st.lists(st.integers(1, 5), min_size=len(words), max_size=len(words)))
    limit = data.draw(st.integers(0, 2**63 - 1) | st.just(2**63 - 1))
    k = data.draw(st.none() | st.integers(1, 10))
    expected = [
        (index, mix64(word ^ seed_lane(seed, lanes[index] if lanes else 1)) >> 1) for index, word in enumerate(words)
    ]
    assert BatchKeyer(seed).candidates(hashes, lanes, 2**63 - 1, None) == expected
    got = BatchKeyer(seed).candidates(hashes, lanes, limit, k)
    assert got == sorted(got)
    assert set(got) <= set(expected)
    below = sorted((key, index) for index, key in expected if key <= limit)
    wanted = below if k is None else below[:k]
    assert {(index, key) for key, index in wanted} <= set(got)


def test_reference_key_of_hex_ids_matches_go_style_recomputation() -> None:
    """The emitter's keys (one hash per generation) equal sample_key of the id it sends."""
    inputs = [f"prompt {i % 37}" for i in range(300)]
    batch = Batch(inputs, inputs, None, None, None, None)
    found = candidates(batch, BatchKeyer(9), None, None, ResponseLanes(), "5f2e9c1a7b3d")
    assert len(found) == 300
    for index, (key, sample_id) in found:
        base = xxhash.xxh64_hexdigest(inputs[index].encode())
        assert sample_id.decode().startswith(f"{base}/")
        assert sample_id.decode().endswith("@5f2e9c1a7b3d")
        assert key == sample_key(9, sample_id.decode())


@pytest.mark.parametrize("given", [None, "uids"])
def test_a_part_numbers_responses_the_same_however_its_calls_split(given: str | None) -> None:
    """Two sampling passes over 20 prompts: 40 ids, the same in one call as in two calls of a part."""
    prompts = [f"prompt {i}" for i in range(20)]
    uids = [f"uid-{i}" for i in range(20)] if given else None

    def ids(calls: list[list[int]]) -> list[str]:
        lanes, found = ResponseLanes(), []
        for call in calls:
            inputs = [prompts[i] for i in call]
            batch = Batch(inputs, inputs, None, None, [uids[i] for i in call] if uids else None, None)
            found += [order[1].decode() for _, order in candidates(batch, BatchKeyer(1), None, None, lanes, "t")]
        return found

    one_call = ids([list(range(20)) * 2])
    two_calls = ids([list(range(20)), list(range(20))])
    assert len(set(one_call)) == 40
    assert sorted(one_call) == sorted(two_calls)
    assert {sid.rsplit("@", 1)[0].rsplit("/", 1)[1] for sid in two_calls} == {"0", "1"}


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


Keyer = Callable[[int, str], int]

# Id sets on which the key must choose uniformly: uids, ids derived from inputs (random hex),
# hex ids with structure (a dataset's zero-padded numbers read as hex), several responses.
_RANDOM = random.Random(12)
ID_SETS = {
    "uids": [f"gsm8k-train-{i:05d}/0" for i in range(40)],
    "derived": [f"{_RANDOM.getrandbits(64):016x}/0" for _ in range(40)],
    "sequential_hex": [f"{i:016x}/0" for i in range(40)],
    "responses": [f"p{i}/{j}" for i in range(10) for j in range(4)],
}


def _wilson_hilferty(df: int, z: float = 3.0902) -> float:
    """The chi-square quantile with ``df`` degrees of freedom at normal quantile z (0.999 by default)."""
    return float(df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3)


def _inclusion_chi_square(ids: list[str], k: int, seeds: range, keyer: Keyer) -> float:
    """Chi-square of how often each id is chosen over ``seeds`` (df = len(ids) - 1).

    One seed picks k of M ids without replacement, so each count has variance S p (1 - p) and
    the counts are negatively correlated; the factor (M - 1) / M makes the sum chi-square.
    """
    hits = dict.fromkeys(ids, 0)
    for seed in seeds:
        for _, sid in bottom_k(((SortKey.of(keyer(seed, sid), sid), sid) for sid in ids), k):
            hits[sid] += 1
    total, m, p = len(seeds), len(ids), k / len(ids)
    spread = total * p * (1 - p)
    return sum((count - total * p) ** 2 for count in hits.values()) / spread * (m - 1) / m


def _adjacent_pairs_chi_square(ids: list[str], k: int, seeds: range, keyer: Keyer) -> float:
    """Chi-square of how often neighbours in ``ids`` are chosen together (df = len(ids) - 1)."""
    together = [0] * (len(ids) - 1)
    for seed in seeds:
        chosen = {sid for _, sid in bottom_k(((SortKey.of(keyer(seed, sid), sid), sid) for sid in ids), k)}
        for index in range(len(ids) - 1):
            together[index] += ids[index] in chosen and ids[index + 1] in chosen
    m = len(ids)
    q = k * (k - 1) / (m * (m - 1))
    expected = len(seeds) * q
    return sum((count - expected) ** 2 for count in together) / (expected * (1 - q))


@pytest.mark.parametrize("name", sorted(ID_SETS))
def test_choice_is_uniform_over_seeds_chi_square(name: str) -> None:
    """Each id is chosen with probability k/M over 3000 seeds (chi-square, p = 0.001), in both versions."""
    ids = ID_SETS[name]
    for version in KEY_VERSIONS:

        def keyer(seed: int, sid: str, version: int = version) -> int:
            return sample_key(seed, sid, version)

        statistic = _inclusion_chi_square(ids, 8, range(3000), keyer)
        assert statistic < _wilson_hilferty(len(ids) - 1), (name, version, statistic)


@pytest.mark.parametrize("name", ["sequential_hex", "responses"])
def test_neighbours_are_chosen_independently_chi_square(name: str) -> None:
    """Ids next to each other (one bit apart, or two responses of a prompt) are not chosen together more often."""
    ids = ID_SETS[name]
    statistic = _adjacent_pairs_chi_square(ids, 8, range(3000), sample_key)
    assert statistic < _wilson_hilferty(len(ids) - 1), (name, statistic)


def test_the_chi_square_tests_catch_a_weak_mix() -> None:
    """Without the final mix (id hash XOR lane only) structured ids are chosen far from uniformly."""

    def weak(seed: int, sid: str) -> int:
        base, n = split_sample_id(sid)
        return (id_hash(base) ^ seed_lane(seed, n)) >> 1

    ids = ID_SETS["sequential_hex"]
    assert _inclusion_chi_square(ids, 8, range(3000), weak) > 10 * _wilson_hilferty(len(ids) - 1)
    assert _adjacent_pairs_chi_square(ids, 8, range(3000), weak) > 10 * _wilson_hilferty(len(ids) - 1)


@settings(max_examples=100, deadline=None)
@given(
    batches=st.lists(
        st.lists(st.sampled_from(["q1", "q2", "q3"]) | st.text(max_size=6), min_size=0, max_size=300),
        min_size=1,
        max_size=4,
    ),
    k=st.integers(1, 12),
    seed=st.integers(0, 2**64 - 1),
    ids=st.sampled_from(["derived", "uids", "hex uids", "mixed", "bad input"]),
)
def test_emitter_candidates_keep_the_exact_bottom_k(batches: list[list[str]], k: int, seed: int, ids: str) -> None:
    """Batch by batch, with the running threshold and each batch's own k-cut, nothing of the bottom-k is lost."""
    keyer = BatchKeyer(seed)
    selector: BottomK[int] = BottomK(k)
    everything: list[tuple[SortKey, int]] = []
    all_lanes, kept_lanes = ResponseLanes(), ResponseLanes()  # one part's calls, numbered twice
    for batch_inputs in batches:
        inputs: list[Any] = list(batch_inputs)
        given: list[Any] | None = None
        if ids == "uids":
            given = [f"uid-{text}" for text in inputs]
        elif ids == "hex uids":  # read as numbers, not hashed; upper case is hashed
            given = [hashlib.md5(text.encode()).hexdigest()[:16] for text in inputs]
            given = [uid.upper() if i % 4 == 0 else uid for i, uid in enumerate(given)]
        elif ids == "mixed":
            given = [None if i % 3 else f"uid-{text}" for i, text in enumerate(inputs)]
        elif ids == "bad input":
            inputs = [text.encode() if i % 2 else text + "\ud800" for i, text in enumerate(inputs)]
        batch = Batch(inputs, inputs, None, None, given, None)
        for index, (key, sample_id) in candidates(batch, keyer, None, None, all_lanes, "t"):
            assert key == sample_key(seed, sample_id.decode())
            everything.append((SortKey(key, sample_id), index))
        for index, order in candidates(batch, keyer, selector.threshold(), k, kept_lanes, "t"):
            selector.offer(order, index)
    want = {order for order, _ in bottom_k(everything, k)}
    assert {order for order, _ in selector.items()} == want


def test_the_batch_cut_keeps_exactly_the_k_smallest_keys_wherever_they_lie() -> None:
    """The batch's own cut is exact: its k smallest keys (and ties with the k-th), even when all lie high."""
    rng = random.Random(3)
    words: list[int] = []
    while len(words) < 100:  # ids whose keys all lie in the upper half
        word = rng.getrandbits(64)
        if mix64(word ^ seed_lane(5, 1)) >> 1 >= 2**62:
            words.append(word)
    for hashes in (b"".join(word.to_bytes(8, "big") for word in words), rng.getrandbits(6400).to_bytes(800, "big")):
        keys = [mix64(int.from_bytes(hashes[i : i + 8], "big") ^ seed_lane(5, 1)) >> 1 for i in range(0, 800, 8)]
        found = BatchKeyer(5).candidates(hashes, None, 2**63 - 1, 10)
        assert [key for _, key in found] == [key for key in keys if key <= sorted(keys)[9]]
        assert [index for index, _ in found] == sorted(index for index, _ in found)


def test_str_subclasses_and_other_values_get_the_ids_of_their_text() -> None:
    """Inputs that are str subclasses, ints or bytes get the id of the text that is sent."""

    class Text(str):
        """A str subclass, as numpy's str_ is."""

    plain = ["a", "b", "a", "7", "x"]
    odd: list[Any] = [Text("a"), Text("b"), "a", 7, b"x"]
    keyer = BatchKeyer(3)
    want = candidates(Batch(plain, plain, None, None, None, None), keyer, None, None, ResponseLanes(), "t")
    assert candidates(Batch(odd, odd, None, None, None, None), keyer, None, None, ResponseLanes(), "t") == want
    texts = [Text(value) for value in plain]
    assert candidates(Batch(texts, texts, None, None, None, None), keyer, None, None, ResponseLanes(), "t") == want


def _unmix64(z: int) -> int:
    """The inverse of ``mix64`` (xor-shifts undone by iteration, multipliers by their inverses mod 2**64)."""

    def unshift(y: int, s: int) -> int:
        x = y
        for _ in range(64 // s + 1):
            x = y ^ (x >> s)
        return x

    mask = (1 << 64) - 1
    z = unshift(z, 31)
    z = unshift((z * pow(MIX2, -1, 1 << 64)) & mask, 27)
    return unshift((z * pow(MIX1, -1, 1 << 64)) & mask, 30)


def test_the_batch_cut_finds_a_few_tiny_keys_among_many_large_ones() -> None:
    """The batch cut finds the k smallest keys when a few tiny keys sit among many above any guessed cut."""
    keyer = BatchKeyer(seed=5)
    size, k = 100, 10
    lane = seed_lane(5, 1)
    # Mixed words chosen on purpose: 5 tiny ones, 95 in the upper half.
    words = [i + 1 for i in range(5)] + [(1 << 63) + i for i in range(size - 5)]
    hashes = b"".join((_unmix64(w) ^ lane).to_bytes(8, "big") for w in words)
    assert [mix64(int.from_bytes(hashes[8 * i : 8 * i + 8], "big") ^ lane) for i in range(size)] == words
    found = keyer.candidates(hashes, None, (1 << 63) - 1, k)
    smallest = sorted(found, key=lambda item: item[1])[:k]
    assert [index for index, _ in smallest] == list(range(k))
    assert [key for _, key in smallest] == [w >> 1 for w in words[:k]]


# -- the watch-list (rollout_rate, valgen.sample_rate): testdata/sampling/rate.json -------------


def _rate_case_items(case: dict[str, Any]) -> list[tuple[float | None, Any, Any, str]]:
    """(rate, prompt sort key, response sort key, sample id) of a rate.json case's records, in order."""
    from otel_valgen.sampling import SortKey as Key

    seed = int(case["seed"])
    items = []
    for r in case["records"]:
        prompt_key = int(r["prompt_key"]) if "prompt_key" in r else sample_key(seed, r["prompt_id"])
        key = int(r["sample_key"]) if "sample_key" in r else sample_key(seed, r["sample_id"])
        items.append(
            (r.get("sample_rate"), Key.of(prompt_key, r["prompt_id"]), Key.of(key, r["sample_id"]), r["sample_id"])
        )
    return items


def test_rate_thresholds_match_the_shared_file() -> None:
    """floor(rate * 2**63) of every rate in testdata/sampling/rate.json, and exact fractions agree."""
    from fractions import Fraction

    from otel_valgen.sampling import NO_RATE_THRESHOLD, rate_threshold

    data = json.loads((VECTORS / "rate.json").read_text(encoding="utf-8"))
    assert data["thresholds"]
    for vector in data["thresholds"]:
        assert rate_threshold(vector["rate"]) == int(vector["threshold"]) == int(Fraction(vector["rate"]) * 2**63)
    assert rate_threshold(None) == rate_threshold(1.0) == NO_RATE_THRESHOLD == 2**63
    for bad in (0, -0.1, 1.5, math.nan, math.inf, True, "0.5"):
        with pytest.raises(ValueError, match="sample rate"):
            rate_threshold(bad)  # type: ignore[arg-type]


def test_rate_cases_match_the_shared_file() -> None:
    """Every rate.json case: the group view with the records' smallest rate keeps the expected responses."""
    from otel_valgen.sampling import GroupView

    data = json.loads((VECTORS / "rate.json").read_text(encoding="utf-8"))
    assert data["cases"]
    for case in data["cases"]:
        view: GroupView[str] = GroupView(case["k"])
        for rate, prompt, order, sid in _rate_case_items(case):
            view.lower_rate(rate)
            view.offer(prompt, order, sid)
        assert [sid for _, _, sid in view.items()] == case["expected"], case["name"]
        assert view.prompts() == len(case["expected_prompts"]), case["name"]


def test_rate_cases_through_show_whole_and_by_source() -> None:
    """``select_steps`` (show) over the cases' records as rollout generations, whole and split per source (cut_kept)."""
    from otel_valgen import contract
    from otel_valgen.reader import Generation
    from otel_valgen.selection import cut_kept, select_steps

    data = json.loads((VECTORS / "rate.json").read_text(encoding="utf-8"))
    for case in data["cases"]:
        seed = int(case["seed"])
        records = [
            Generation(
                "r",
                1,
                r["sample_id"],
                int(r["sample_key"]) if "sample_key" in r else None,
                "in",
                "out",
                source=r["source"],
                sample_count=case["k"],
                seed=seed,
                key_version=2,
                kind=contract.KIND_ROLLOUT,
                prompt_id=r["prompt_id"],
                prompt_key=int(r["prompt_key"]) if "prompt_key" in r else None,
                attributes={contract.SAMPLE_RATE: r["sample_rate"]} if "sample_rate" in r else {},
            )
            for r in case["records"]
        ]
        (step,) = select_steps(records, kind=contract.KIND_ROLLOUT, seed=seed)
        assert [g.sample_id for g in step.generations] == case["expected"], case["name"]
        rates = [r["sample_rate"] for r in case["records"] if "sample_rate" in r]
        assert step.sample_rate == (min(rates) if rates else None), case["name"]
        # Each source's own view, then the union cut again: the view of the whole (mergeable).
        parts = []
        for source in sorted({g.source for g in records}):
            (part,) = select_steps([g for g in records if g.source == source], kind=contract.KIND_ROLLOUT, seed=seed)
            parts += part.generations
        merged = cut_kept(parts, case["k"], contract.KIND_ROLLOUT, seed, 2)
        assert [g.sample_id for g in merged] == case["expected"], case["name"]


@settings(max_examples=60, deadline=None)
@given(
    keys=st.lists(st.integers(0, 2**63 - 1), min_size=1, max_size=40, unique=True),
    rates=st.lists(st.sampled_from([None, 1.0, 0.75, 0.5, 0.25, 0.1, 0.01]), min_size=1, max_size=4),
    k=st.integers(0, 12),
    data=st.data(),
)
def test_the_watch_list_is_the_eligible_bottom_k_in_any_order(
    keys: list[int], rates: list[float | None], k: int, data: st.DataObject
) -> None:
    """Any arrival order and any split of the rates over the records: the k smallest prompts under the smallest rate."""
    from otel_valgen.sampling import GroupView, SortKey, rate_threshold

    assigned = [data.draw(st.sampled_from(rates)) for _ in keys]
    order = data.draw(st.permutations(range(len(keys))))
    view: GroupView[int] = GroupView(k)
    for i in order:
        view.lower_rate(assigned[i])
        view.offer(SortKey.of(keys[i], f"p{i}"), SortKey.of(0, f"p{i}/0"), i)
    given_rates = [r for r in assigned if r is not None]
    limit = rate_threshold(min(given_rates)) if given_rates else 2**63
    expected = sorted((keys[i], f"p{i}".encode(), i) for i in range(len(keys)) if keys[i] < limit)[:k]
    assert [item for _, _, item in view.items()] == [i for _, _, i in expected]
