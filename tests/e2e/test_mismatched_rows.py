"""User story: the most mismatched rollout responses of a step, from two processes, kept exactly by the collector.

Two training processes log the rollouts of one step with per-token data (``token_job.py``) and
``OTEL_VALGEN_MISMATCHED=3``. Through the built collector the step keeps its k prompts with all
their responses and, beside them, the 3 responses of the largest KL over both processes, each
alone, marked in ``valgen.slots``; the summary says ``valgen.mismatched``.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest
import xxhash

from otel_valgen import contract, tokens
from otel_valgen.sampling import SortKey, bottom_k, sample_key
from tests.e2e.conftest import StartCollector
from tests.e2e.harness import REPO, Record, StandIn, records_of_file, wait_for
from tests.e2e.token_job import N, response
from tests.support.process import run_in_a_terminal

RUN_ID = "mismatched"
STEP = 3
K = 2
MOST = 3
SEED = 42
PROMPTS = 6  # per process
JOB = f"{shlex.quote(sys.executable)} {shlex.quote(str(Path(__file__).with_name('token_job.py')))}"


def _prompt_id(prompt: int) -> str:
    return xxhash.xxh64_hexdigest(f"prompt {prompt}".encode())


def _response_of(record: Record) -> tuple[str, int]:
    """(prompt id, response index) of a record's ``<prompt id>/<index>@<tag>``."""
    base, _, rest = str(record.attributes[contract.SAMPLE_ID]).rpartition("/")
    return base, int(rest.partition("@")[0])


@pytest.mark.timeout(240)
def test_two_processes_keep_the_most_mismatched_responses_beside_k_prompts(
    start_collector: StartCollector, wandb_stand_in: StandIn, loki_stand_in: StandIn
) -> None:
    """The keyed prompts whole, then the 3 largest KL of every response of the step, each alone."""
    every = range(2 * PROMPTS)
    keyed = {
        _prompt_id(p)
        for _, p in bottom_k(((SortKey.of(sample_key(SEED, _prompt_id(p)), _prompt_id(p)), p) for p in every), K)
    }
    kl = {}
    for prompt in every:
        for index in range(N):
            columns = {name: [value] for name, value in response(prompt, index).items() if name != "length"}
            read = tokens.read_response(columns, 0)
            assert read is not None
            kl[(_prompt_id(prompt), index)] = tokens.kl_of(tokens.response_figures(read))
    most = sorted(kl, key=lambda r: -(kl[r] or 0.0))[:MOST]
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
        "OTEL_VALGEN_MISMATCHED": str(MOST),
    }
    common = f"{JOB} --step {STEP} --prompts {PROMPTS}"
    run_in_a_terminal(f"{common} --source a --first 0 & {common} --source b --first {PROMPTS} & wait", env)

    def summarized() -> bool:
        return any(r.event == contract.EVENT_STEP_SUMMARY for r in records_of_file(collector.file_path))

    wait_for(summarized, 60, "the step summary in the collector's file")
    records = records_of_file(collector.file_path)
    kept = sorted(
        (r for r in records if r.event == contract.EVENT_GENERATION and contract.RANK in r.attributes),
        key=lambda r: int(r.attributes[contract.RANK]),
    )
    slots = {_response_of(r): tuple(r.attributes[contract.SLOTS]) for r in kept}
    assert {r for r, s in slots.items() if contract.SLOT_KEYED in s} == {(p, i) for p in keyed for i in range(N)}
    assert {r for r, s in slots.items() if contract.SLOT_MISMATCHED in s} == set(most)
    alone = [_response_of(r) for r in kept if contract.SLOT_KEYED not in slots[_response_of(r)]]
    assert alone, "responses of prompts that are not kept"
    assert alone == [r for r in most if r[0] not in keyed], "after the keyed prompts, the largest KL first"
    (summary,) = [r.attributes for r in records if r.event == contract.EVENT_STEP_SUMMARY]
    assert summary[contract.MISMATCHED] == MOST
    assert summary[contract.PROMPTS_KEPT] == K
    assert summary[contract.KEPT] == len(kept) == K * N + len(alone)
