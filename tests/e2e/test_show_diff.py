"""User story: a user follows one prompt through training, and compares two steps, in the collector's file.

One process validates two steps (the second on a partly new set of prompts, some answers revised)
and rolls out both, through the real SDK and OTLP into the built collector; ``otel-valgen show
--prompt`` and ``otel-valgen diff`` then read the collector's file exporter output.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

import otel_valgen as vg
from otel_valgen import contract
from otel_valgen.cli.main import main as cli_main
from otel_valgen.sampling import SortKey, sample_key, untagged
from tests.e2e.conftest import StartCollector
from tests.e2e.harness import StandIn, records_of_file, wait_for

RUN_ID, SEED, K, ROLLOUT_K = "show-diff", 3, 5, 2
IDS = {1: [f"uid-{i}" for i in range(10)], 2: [f"uid-{i}" for i in range(3, 14)]}
REVISED = {"uid-7", "uid-9", "uid-11"}  # answered anew at step 2, scored 0.5 higher
PROMPTS = [f"p{p}" for p in range(4)]


def _output(sample_id: str, step: int) -> str:
    return f"answer {sample_id}, revised" if step == 2 and sample_id in REVISED else f"answer {sample_id}"


def _score(sample_id: str, step: int) -> float:
    return int(sample_id[4:]) / 10 + (0.5 if step == 2 and sample_id in REVISED else 0.0)


def _response(prompt: str, response: int, step: int) -> str:
    return f"response {response} to {prompt}" + (f" at step {step}" if response == 1 else "")


def _emit(endpoint: str) -> None:
    """Validate steps 1 and 2 (one block each, sources_expected=1) and roll out both (4 prompts x 2 responses)."""
    vg.configure(run_id=RUN_ID, count=K, rollout_count=ROLLOUT_K, seed=SEED, endpoint=endpoint)
    for step, ids in IDS.items():
        with vg.validation(step=step, source="trainer", sources_expected=1):
            accepted = vg.log_generations(
                [f"prompt {i}" for i in ids],
                [_output(i, step) for i in ids],
                [_score(i, step) for i in ids],
                sample_ids=ids,
            )
            assert accepted == len(ids)
        rows = [(p, r) for p in PROMPTS for r in range(2)]
        accepted = vg.log_rollouts(
            [f"prompt {p}" for p, _ in rows],
            [_response(p, r, step) for p, r in rows],
            [float(r == 0) for _, r in rows],
            step=step,
            prompt_ids=[p for p, _ in rows],
            response_lengths=[20 + r + step for _, r in rows],
        )
        assert accepted == len(rows)
    assert vg.shutdown()


def _kept(step: int) -> list[str]:
    """The oracle: the K validated ids of ``step`` with the smallest (key, id)."""
    return sorted(IDS[step], key=lambda i: SortKey.of(sample_key(SEED, f"{i}/0"), f"{i}/0"))[:K]


def _cli(*args: str) -> list[dict[str, Any]]:
    result = CliRunner().invoke(cli_main, [*args, "--format", "json"])
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines()]


@pytest.mark.timeout(120)
def test_a_prompt_followed_through_steps_and_two_steps_compared(
    start_collector: StartCollector, wandb_stand_in: StandIn, loki_stand_in: StandIn
) -> None:
    """`show --prompt` lists the prompt's kept rows per step; `diff --steps 1 2` matches them as the oracle says."""
    collector = start_collector(
        "collector",
        ["collector.yaml"],
        {
            "VALGEN_TRACKER_EXPORTER_ENDPOINT": wandb_stand_in.endpoint,
            "VALGEN_LOKI_OTLP_ENDPOINT": loki_stand_in.endpoint,
            "VALGEN_DECISION_WAIT": "2s",  # the rollouts' block-less parts announce no sources_expected
        },
    )
    _emit(f"http://{collector.http_endpoint}")

    def summaries() -> int:
        return sum(1 for r in records_of_file(collector.file_path) if r.event == contract.EVENT_STEP_SUMMARY)

    wait_for(lambda: summaries() == 4, 30, "two validation and two rollout summaries")
    path = str(collector.file_path)
    first, second = _kept(1), _kept(2)
    both = [i for i in first if i in second]
    assert set(both) & REVISED, "the oracle's sets overlap, some of both revised"
    assert set(both) - REVISED, "and some not"

    # show --prompt: a prompt kept at both steps, then one kept only at step 2.
    followed = sorted(set(both) & REVISED)[0]
    shown = _cli("show", path, "--prompt", followed)
    assert [(s["step"], s["kind"]) for s in shown] == [(1, "validation"), (2, "validation")]
    for obj in shown:
        (row,) = obj["generations"]
        assert untagged(row["sample_id"]) == f"{followed}/0"
        assert (row["output"], row["score"]) == (_output(followed, obj["step"]), _score(followed, obj["step"]))
        assert (row["length"], row["length_unit"]) == (len(_output(followed, obj["step"])), "chars")
        assert row["rank"] == [first, second][obj["step"] - 1].index(followed) + 1
    late_comer = sorted(set(second) - set(first))[0]
    assert [s["step"] for s in _cli("show", path, "--prompt", late_comer)] == [2]

    # ... a rolled-out prompt: both responses at each step, lengths in tokens.
    prompt = sorted(PROMPTS, key=lambda p: SortKey.of(sample_key(SEED, p), p))[0]
    rolled = _cli("show", path, "--prompt", prompt, "--kind", "rollout")
    assert [s["step"] for s in rolled] == [1, 2]
    for obj in rolled:
        got = sorted((g["output"], g["length"], g["length_unit"]) for g in obj["generations"])
        assert got == sorted((_response(prompt, r, obj["step"]), 20 + r + obj["step"], "tokens") for r in range(2))

    # diff --steps 1 2: both, only-A, only-B, changed and same, the mean score delta, as the oracle.
    (diff,) = _cli("diff", path, "--steps", "1", "2")
    revised = [i for i in both if i in REVISED]
    assert diff["summary"] == {
        "both": len(both),
        "only_a": K - len(both),
        "only_b": K - len(both),
        "changed": len(revised),
        "same": len(both) - len(revised),
        "mean_score_delta": pytest.approx(0.5 * len(revised) / len(both)),
        "score_deltas": len(both),
    }
    assert [row["id"] for row in diff["both"]] == [f"{i}/0" for i in both]
    for row in diff["both"]:
        sample_id = row["id"][:-2]
        assert (row["a"]["output"], row["b"]["output"]) == (_output(sample_id, 1), _output(sample_id, 2))
        assert row["changed"] is (sample_id in REVISED)
        assert row["length_delta"] == len(_output(sample_id, 2)) - len(_output(sample_id, 1))
    assert [row["id"] for row in diff["only_a"]] == [f"{i}/0" for i in first if i not in second]
    assert [row["id"] for row in diff["only_b"]] == [f"{i}/0" for i in second if i not in first]

    # diff --kind rollout: each kept prompt's response i faces its response i; only response 1 changed.
    (rollout_diff,) = _cli("diff", path, "--steps", "1", "2", "--kind", "rollout")
    assert rollout_diff["summary"]["both"] == ROLLOUT_K * 2
    assert {row["id"]: row["changed"] for row in rollout_diff["both"]} == {
        f"{p}/{r}": r == 1 for p in {row["prompt_id"] for row in rollout_diff["both"]} for r in range(2)
    }
    assert {row["length_delta"] for row in rollout_diff["both"]} == {1}
