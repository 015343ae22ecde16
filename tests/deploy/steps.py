"""A small training job for the deployment tests: validation steps sent through a collector."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

import otel_valgen as vg
from otel_valgen import _process
from otel_valgen.sampling import SortKey, bottom_k, sample_key

SERVICE = "deploy-test"
RUN_ID = "deploy-run"
K = 5
SEED = 11
STEPS = (100, 200)
PROMPTS = 20
DATA_SOURCE = "synthetic-math"


@dataclass(frozen=True)
class Job:
    """What the job sent: the run, its steps, k, and generations per step."""

    service: str = SERVICE
    run_id: str = RUN_ID
    steps: tuple[int, ...] = STEPS
    k: int = K
    generations_per_step: int = PROMPTS


@contextmanager
def _job_process(
    http_endpoint: str, *, presample: bool, launch_id: str | None = None, run_id: str = RUN_ID
) -> Iterator[None]:
    """Run the block as one of the job's processes, sending to the collector at `http_endpoint` (host:port).

    The process-wide emitter is reset before and after, as the test suite expects.
    """
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OTEL_SERVICE_NAME", SERVICE)
        patch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
        _process.reset_for_testing()
        try:
            vg.configure(
                run_id=run_id,
                count=K,
                seed=SEED,
                endpoint=f"http://{http_endpoint}",
                presample=presample,
                launch_id=launch_id,
                # The stack's containers run under the engine's nice 10 beside the suite: a first answer
                # later than the 2 s default would send the job's records to its spool, which only the
                # run's next process sends (docs/reliability.md), and these jobs end right away.
                flush_timeout_s=10,
            )
            yield
        finally:
            _process.reset_for_testing()


def score(i: int, step: int) -> float:
    """The score of prompt `i` at `step`."""
    return ((i * 7 + step) % 10) / 10


def extra_columns(step: int) -> dict[str, list[object]]:
    """The extra columns of a step when the job sends them: a float, a bool and a text (its name has a "/")."""
    return {
        "acc": [float(i % 2) for i in range(PROMPTS)],
        "format_ok": [(i + step) % 3 == 0 for i in range(PROMPTS)],
        "judge/verdict": [f"verdict {i} at {step}" for i in range(PROMPTS)],
    }


def run_job(http_endpoint: str, extra: bool = False) -> Job:
    """Send every step of the job to the collector at `http_endpoint` (host:port) and flush.

    The same prompts are validated at every step; each has a ground truth, a score and a data
    source, and with `extra` the columns of `extra_columns`.
    """
    prompts = [f"prompt-{i:03d}" for i in range(PROMPTS)]
    with _job_process(http_endpoint, presample=True):
        for step in STEPS:
            with vg.validation(step=step, source="trainer", sources_expected=1):
                vg.log_generations(
                    [f"What is {i} + {i}? ({p})" for i, p in enumerate(prompts)],
                    [f"At step {step} the answer is {2 * i + step % 3}" for i in range(PROMPTS)],
                    [score(i, step) for i in range(PROMPTS)],
                    ground_truths=[str(2 * i) for i in range(PROMPTS)],
                    sample_ids=prompts,
                    data_sources=[DATA_SOURCE] * PROMPTS,
                    extra=extra_columns(step) if extra else None,
                )
        assert vg.flush(10.0), "the collector did not confirm the job's records"
    return Job()


ROLLOUT_STEP = 300
ROLLOUT_PROMPTS = 6
ROLLOUT_RESPONSES = 2
ROLLOUT_K = 2


def token_rows(prompt: int, response: int) -> dict[str, list[float]]:
    """A response's per-token log-probabilities (the engine drifts from the trainer by (1 + prompt) * 0.01) and mask."""
    trainer = [-0.5 - 0.1 * t for t in range(8)]
    drift = (1 + prompt) * 0.01 * (1 + response)
    rollout = [value - drift * (t % 3) for t, value in enumerate(trainer)]
    return {"trainer": trainer, "rollout": rollout, "masked": [t == prompt % 8 for t in range(8)]}


def send_token_rollouts(http_endpoint: str) -> None:
    """Send one rollout step of the job's run whose responses carry per-token log-probabilities."""
    rows = [(p, r) for p in range(ROLLOUT_PROMPTS) for r in range(ROLLOUT_RESPONSES)]
    columns = [token_rows(p, r) for p, r in rows]
    with _job_process(http_endpoint, presample=True):
        vg.log_rollouts(
            [f"rollout prompt {p}" for p, _ in rows],
            [f"response {r} to {p}" for p, r in rows],
            [float(r) for _, r in rows],
            step=ROLLOUT_STEP,
            source="trainer",
            count=ROLLOUT_K,
            ground_truths=[str(p) for p, _ in rows],
            data_sources=[DATA_SOURCE] * len(rows),
            tokens={name: [c[name] for c in columns] for name in ("trainer", "rollout", "masked")},
        )
        assert vg.flush(10.0), "the collector did not confirm the rollouts"


def send_late_generation(http_endpoint: str, step: int, sample_id: str) -> None:
    """Send one more generation for an already closed `step` of the job's run, from a straggler."""
    with _job_process(http_endpoint, presample=False):
        vg.log_generations(["a late question"], ["a late answer"], [0.5], step=step, sample_ids=[sample_id])
        assert vg.flush(10.0), "the collector did not confirm the late record"


def expected_ids(prompts: Iterable[int] = range(PROMPTS), k: int = K) -> list[str]:
    """The sample ids the sampler keeps of the given prompts: their bottom-k under the job's seed."""
    ids = [f"prompt-{i:03d}/0" for i in prompts]
    chosen = bottom_k(((SortKey.of(sample_key(SEED, i), i), i) for i in ids), k)
    return [sample_id for _, sample_id in chosen]


def send_part(http_endpoint: str, step: int, source: str, prompts: Iterable[int], sources_expected: int) -> None:
    """Send one source's part of `step` (prompts by index, as in `run_job`) and its end record."""
    chosen = list(prompts)
    with _job_process(http_endpoint, presample=True, launch_id="deploy-launch"):
        with vg.validation(step=step, source=source, sources_expected=sources_expected):
            vg.log_generations(
                [f"What is {i} + {i}? (prompt-{i:03d})" for i in chosen],
                [f"At step {step} the answer is {2 * i}" for i in chosen],
                [0.5 for _ in chosen],
                sample_ids=[f"prompt-{i:03d}" for i in chosen],
            )
        assert vg.flush(10.0), "the collector did not confirm the part's records"


CONVERSATION_RUN = "deploy-agentic"
# An agent's trajectory in the OpenAI chat format agent loops keep (README, *Conversations*).
CONVERSATION_PROMPT = [{"role": "system", "content": "Use the calc tool."}, {"role": "user", "content": "2+2?"}]
CONVERSATION_TURNS = [
    {
        "role": "assistant",
        "content": "Let me compute.",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "calc", "arguments": '{"expr": "2+2"}'}}],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "4"},
    {"role": "assistant", "content": "4"},
]


def send_conversation(http_endpoint: str, step: int = 7) -> None:
    """Send one validation step of run CONVERSATION_RUN whose one generation is CONVERSATION_TURNS."""
    with _job_process(http_endpoint, presample=True, run_id=CONVERSATION_RUN):
        with vg.validation(step=step, source="agent", sources_expected=1):
            vg.log_generations([CONVERSATION_PROMPT], [CONVERSATION_TURNS], [1.0], sample_ids=["calc-task"])
        assert vg.flush(10.0), "the collector did not confirm the conversation"
