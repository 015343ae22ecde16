"""User story: rollouts with per-token data from two processes reach the collector's outputs token for token.

Two training processes, started together by one shell script with only the variables the README
names, log the rollouts of one step with per-token columns as a trainer holds them (float32
log-probabilities of the rollout engine and the trainer padded to the batch's width, the
reference's, importance weights, the correction's mask, the response mask; one response of 32k
tokens). Through the built collector, the step keeps the k prompts the rule picks with all their
responses; each kept response carries its tokens, equal to what was logged (the 32k-token one
whole, within the default budget), and its figures; the summary's distribution of the figures
is the one computed over every response of both processes; Loki gets the figures but not the
packed tokens; ``otel-valgen show --tokens`` gives the per-token table back.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xxhash

from otel_valgen import contract, tokens
from otel_valgen.sampling import SortKey, bottom_k, sample_key
from otel_valgen.trajectories import merge
from tests.e2e.conftest import StartCollector
from tests.e2e.harness import REPO, Record, StandIn, records_of_file, wait_for
from tests.e2e.token_job import LONG, LONG_TOKENS, N, response
from tests.support.process import run_cli, run_in_a_terminal

RUN_ID = "tokens"
STEP = 2
K = 3
SEED = 42
PROMPTS = 6  # per process
JOB = f"{shlex.quote(sys.executable)} {shlex.quote(str(Path(__file__).with_name('token_job.py')))}"


def _prompt_id(prompt: int) -> str:
    return xxhash.xxh64_hexdigest(f"prompt {prompt}".encode())


def _kept(records: list[Record]) -> list[Record]:
    return [r for r in records if r.event == contract.EVENT_GENERATION and contract.RANK in r.attributes]


def _same(got: Any, want: Any, key: str = "") -> None:
    """Equal figures: floats to rounding, counts and keys exactly."""
    if isinstance(want, dict):
        assert isinstance(got, dict), key
        assert got.keys() == want.keys(), key
        for name, value in want.items():
            _same(got[name], value, name)
    elif isinstance(want, float):  # sums in another order; the collector's powers may differ by an ulp
        assert got == pytest.approx(want, rel=1e-9), key
    else:
        assert got == want, key


@pytest.mark.timeout(240)
def test_two_processes_keep_k_prompts_with_their_tokens_and_the_steps_mismatch(
    start_collector: StartCollector, wandb_stand_in: StandIn, loki_stand_in: StandIn, tmp_path: Path
) -> None:
    """Kept responses carry their tokens exactly; the summary's distribution is every response's."""
    every = range(2 * PROMPTS)
    ranked = bottom_k(((SortKey.of(sample_key(SEED, _prompt_id(p)), _prompt_id(p)), p) for p in every), K)
    expected = {p for _, p in ranked}
    assert LONG in {p for _, p in ranked}, "the seed keeps the prompt with the long response"
    collector = start_collector(
        "collector",
        ["collector.yaml"],
        {
            "VALGEN_TRACKER_EXPORTER_ENDPOINT": wandb_stand_in.endpoint,
            "VALGEN_LOKI_OTLP_ENDPOINT": loki_stand_in.endpoint,
            "VALGEN_DECISION_WAIT": "3s",
        },
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(REPO),
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://{collector.http_endpoint}",
        "OTEL_VALGEN_RUN_ID": RUN_ID,
        "OTEL_VALGEN_ROLLOUT_COUNT": str(K),
    }
    common = f"{JOB} --step {STEP} --prompts {PROMPTS}"
    run_in_a_terminal(f"{common} --source a --first 0 & {common} --source b --first {PROMPTS} & wait", env)

    def summarized() -> bool:
        return any(r.event == contract.EVENT_STEP_SUMMARY for r in records_of_file(collector.file_path))

    wait_for(summarized, 60, "the step summary in the collector's file")
    records = records_of_file(collector.file_path)
    kept = _kept(records)
    by_prompt = {_prompt_id(p): p for p in every}
    assert {by_prompt[r.attributes[contract.PROMPT_ID]] for r in kept} == expected
    assert len(kept) == K * N
    for record in kept:
        prompt = by_prompt[record.attributes[contract.PROMPT_ID]]
        index = int(record.attributes[contract.SAMPLE_ID].split("/")[1].split("@")[0])
        want = response(prompt, index)
        got = tokens.decode(record.attributes[contract.TOKENS])
        assert got.count == want["length"]
        assert got.cut_count == 0
        assert np.array_equal(got.ids, want["ids"])
        assert got.pieces == want["pieces"]
        for name in tokens.FLOAT_COLUMNS:
            assert np.array_equal(got.floats[name], want[name].astype(np.float64)), name
        for name in tokens.MASK_COLUMNS:
            assert np.array_equal(got.masks[name], want[name]), name
        figures = tokens.response_figures(got)
        assert figures is not None
        for name, value in figures.items():
            assert record.attributes[contract.MISMATCH_PREFIX + name] == pytest.approx(value, rel=1e-12)
    assert any(tokens.decode(r.attributes[contract.TOKENS]).count == LONG_TOKENS for r in kept)

    # The summary's distribution is that of every response of both processes, not of the kept.
    whole = tokens.MismatchFigures()
    for prompt in every:
        for index in range(N):
            columns = {name: [value] for name, value in response(prompt, index).items() if name != "length"}
            read = tokens.read_response(columns, 0)
            assert read is not None
            figures = tokens.response_figures(read)
            assert figures is not None
            whole.add(figures)
    (summary,) = [r.attributes for r in records if r.event == contract.EVENT_STEP_SUMMARY]
    _same(summary[contract.MISMATCH], tokens.summary(merge([whole.attribute()])))

    # Loki gets each kept response's figures, not its packed tokens.
    wait_for(lambda: len(_kept(loki_stand_in.records())) == K * N, 30, "the kept records at Loki")
    for at_loki in _kept(loki_stand_in.records()):
        assert contract.TOKENS not in at_loki.attributes
        assert contract.MISMATCH_PREFIX + tokens.KL in at_loki.attributes

    # show gives the per-token table back.
    long_record = next(r for r in kept if tokens.decode(r.attributes[contract.TOKENS]).count == LONG_TOKENS)
    shown = json.loads(
        run_cli(
            [
                "show",
                str(collector.file_path),
                "--tokens",
                long_record.attributes[contract.SAMPLE_ID],
                "--format",
                "json",
            ]
        )
    )
    assert len(shown["tokens"]) == LONG_TOKENS
    assert shown["tokens"][7]["trainer"] == float(response(LONG, 0)["trainer"][7])
