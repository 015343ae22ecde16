"""Fixtures: an offline wandb folder per test, and OTLP requests built from plain values.

Rollout steps (``valgen.kind = rollout``): ``rollout_request`` builds one closed rollout step of
2 prompts with 2 responses each, ``both_kinds`` a step's validation and rollouts as the sampler
sends them, and ``rollout_rows`` the rows every backend is expected to write for it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

from otel_valgen import contract
from tests.support.otlp_values import any_value


@pytest.fixture
def wandb_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty WANDB_DIR in offline mode; no network, no API key."""
    folder = tmp_path / "wandb-dir"
    folder.mkdir()
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(folder))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DISABLE_GIT", "true")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    yield folder
    import wandb

    wandb.teardown()  # the SDK caches settings (WANDB_DIR) process-wide
    assert os.environ["WANDB_MODE"] == "offline"


def _attrs(values: dict[str, Any]) -> list[KeyValue]:
    return [KeyValue(key=k, value=any_value(v)) for k, v in values.items() if v is not None]


def generation(
    run: str,
    step: int,
    i: int,
    *,
    text: str = "",
    rank: int | None = None,
    score: float = 0.5,
    attempt: str | None = None,
    late: bool | None = None,
) -> LogRecord:
    """A ``valgen.generation`` log record for sample ``s{i}``."""
    return LogRecord(
        event_name=contract.EVENT_GENERATION,
        severity_number=9,
        body=any_value({"input": f"q{i}{text}", "output": f"a{i}@{step}{text}", "ground_truth": f"t{i}"}),
        attributes=_attrs(
            {
                contract.RUN_ID: run,
                contract.STEP: step,
                contract.SAMPLE_ID: f"s{i:03d}",
                contract.SAMPLE_KEY: 1000 + i,
                contract.SCORE: score,
                contract.SOURCE: "trainer",
                contract.DATA_SOURCE: "gsm8k",
                contract.SAMPLE_COUNT: 4,
                contract.RANK: rank if rank is not None else (None if late else i + 1),
                contract.ATTEMPT: attempt,
                contract.LATE: late,
            }
        ),
    )


def summary(
    run: str,
    step: int,
    kept: int,
    *,
    seen: int = 10,
    attempt: str | None = None,
    attempt_start: int | None = None,
    closed_reason: str = "complete",
    prompts: int | None = None,
) -> LogRecord:
    """A ``valgen.step.summary`` log record; with ``prompts`` (kept), a rollout group's."""
    values = {contract.RUN_ID: run, contract.STEP: step, contract.SEEN: seen, contract.KEPT: kept}
    values |= {contract.LATE: 0, contract.MISSING: 0, contract.CLOSED_REASON: closed_reason}
    values |= {contract.ATTEMPT: attempt, contract.ATTEMPT_START: attempt_start}
    if prompts is not None:
        values |= {contract.KIND: contract.KIND_ROLLOUT, contract.PROMPTS_KEPT: prompts}
        values[contract.PROMPTS_SEEN] = prompts + 1
    return LogRecord(event_name=contract.EVENT_STEP_SUMMARY, severity_number=9, attributes=_attrs(values))


ROLLOUT_KEY = "train/generations"  # where every backend writes rollouts by default
PROMPTS, RESPONSES = 2, 2  # of a rollout step
PARAM_VERSION = "valgen.param_version"


def rollout(
    run: str, step: int, prompt: int, i: int, *, rank: int | None = None, attempt: str | None = None, **attributes: Any
) -> LogRecord:
    """A rollout ``valgen.generation`` record: response ``i`` of prompt ``p{prompt}``.

    Prompt keys descend with ``prompt`` and sample keys interleave the prompts, so only an
    order by prompt keeps a prompt's responses together. ``attributes`` are added as they are.
    """
    values = {contract.RUN_ID: run, contract.STEP: step, contract.SAMPLE_ID: f"p{prompt}/{i}"}
    values |= {contract.SAMPLE_KEY: 3000 + 10 * i + prompt, contract.SCORE: float(i), contract.SOURCE: "trainer"}
    values |= {contract.DATA_SOURCE: "gsm8k", contract.SAMPLE_COUNT: PROMPTS, contract.RANK: rank}
    values |= {contract.ATTEMPT: attempt, contract.KIND: contract.KIND_ROLLOUT, contract.PROMPT_ID: f"p{prompt}"}
    values |= {contract.PROMPT_KEY: 2000 - prompt, contract.ADVANTAGE: i - 0.5, contract.RESPONSE_LENGTH: 10 + i}
    values |= {contract.TRUNCATED: i == RESPONSES - 1, **attributes}
    body = {"input": f"prompt{prompt}", "output": f"r{prompt}.{i}@{step}", "ground_truth": f"t{prompt}"}
    return LogRecord(
        event_name=contract.EVENT_GENERATION, severity_number=9, body=any_value(body), attributes=_attrs(values)
    )


def group_order() -> list[tuple[int, int]]:
    """(prompt, response) of a rollout step in the group view's order: by prompt key, then by sample key."""
    return [(prompt, i) for prompt in reversed(range(PROMPTS)) for i in range(RESPONSES)]


def rollout_request(
    run: str,
    step: int,
    *,
    resource: dict[str, Any] | None = None,
    attempt: str | None = None,
    attempt_start: int | None = None,
    **attributes: Any,
) -> ExportLogsServiceRequest:
    """A closed rollout step as the sampler sends it: its responses ranked by prompt, then its summary."""
    logs = [
        rollout(run, step, p, i, rank=r, attempt=attempt, **attributes) for r, (p, i) in enumerate(group_order(), 1)
    ]
    kept = PROMPTS * RESPONSES
    closing = summary(run, step, kept, seen=12, attempt=attempt, attempt_start=attempt_start, prompts=PROMPTS)
    return request(*logs, closing, resource=resource or {"service.name": "t", contract.WANDB_PROJECT: "proj"})


def both_kinds(run: str, step: int, resource: dict[str, Any] | None = None, *, k: int = 2) -> list[Any]:
    """A step's validation (``k`` generations) and its rollouts, each closed in a request of its own."""
    resource = resource or {"service.name": "t", contract.WANDB_PROJECT: "proj"}
    validation = request(*[generation(run, step, i) for i in range(k)], summary(run, step, k), resource=resource)
    return [validation, rollout_request(run, step, resource=resource)]


def rollout_rows(step: int, *, attempt: str = "", extra: tuple[Any, ...] = ()) -> list[list[Any]]:
    """The rows of ``rollout_request``'s step as every backend writes them (``extra``: values after data_source)."""
    rows = []
    for p, i in group_order():
        rollout_values = [float(i), i - 0.5, 10 + i, i == RESPONSES - 1]  # score, advantage, length, truncated
        rows.append([step, f"p{p}", f"p{p}/{i}", f"prompt{p}", f"r{p}.{i}@{step}", *rollout_values, f"t{p}", "gsm8k"])
        rows[-1] += [*extra, attempt]
    return rows


def request(*logs: LogRecord, resource: dict[str, Any] | None = None) -> ExportLogsServiceRequest:
    """One request with one resource holding ``logs``."""
    message = ExportLogsServiceRequest()
    resource_logs = message.resource_logs.add()
    resource_logs.resource.attributes.extend(_attrs(resource or {"service.name": "test"}))
    resource_logs.scope_logs.add().log_records.extend(logs)
    return message


def step_request(
    run: str,
    step: int,
    k: int,
    *,
    attempt: str | None = None,
    attempt_start: int | None = None,
    closed_reason: str = "complete",
    **kwargs: Any,
) -> ExportLogsServiceRequest:
    """A step's k generations (ranked) followed by its summary (of one attempt when given)."""
    logs = [generation(run, step, i, attempt=attempt, **kwargs) for i in range(k)]
    closing = summary(run, step, k, attempt=attempt, attempt_start=attempt_start, closed_reason=closed_reason)
    return request(*logs, closing, resource={"service.name": "t", contract.WANDB_PROJECT: "proj"})


def wait_for(predicate: Any, timeout_s: float = 20.0) -> None:
    """Poll ``predicate`` until true; fail after ``timeout_s``."""
    import time

    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)


def wandb_backend(layout: str = "rows", state_dir: Path | None = None, backend_class: Any = None) -> Any:
    """An offline wandb backend with its ledger in ``state_dir`` (memory when None)."""
    from otel_valgen.exporter.backends.wandb import WandbBackend, WriterConfig
    from otel_valgen.exporter.ledger import Ledger, ledger_dir

    cls = backend_class or WandbBackend
    return cls(WriterConfig(layout=layout, mode="offline"), Ledger(ledger_dir(state_dir, "wandb")))


def written(service: Any, backend: str = "wandb") -> int:
    """Steps ``backend`` has written so far."""
    return int(service.stats()["backends"][backend]["written_steps"])


def serve_requests(backends: list[Any], *requests: Any, state_dir: Path | None = None) -> Any:
    """Feed ``requests`` to a service writing to ``backends``, wait until written, stop it; the service."""
    from otel_valgen.exporter.service import ExporterService, ServiceConfig
    from otel_valgen.otlp_json import to_otlp_json

    service = ExporterService(ServiceConfig(state_dir=str(state_dir) if state_dir else None), backends)
    service.start()
    for item in requests:
        service.accept(to_otlp_json(item))
    wait_for(service.idle)
    service.stop()
    return service


def post_protobuf(port: int, body: bytes) -> bool:
    """POST one OTLP/protobuf request to the service on loopback ``port``; whether it was accepted (200)."""
    import urllib.request

    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/logs", data=body, headers={"Content-Type": "application/x-protobuf"}
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as response:
            return bool(response.status == 200)
    except OSError:
        return False


# A tool-calling trajectory as a kept record carries it (GenAI messages), for the conversation column:
# a system and user prompt, reasoning and a tool call, a tool result cut to fit that holds markup, an answer.
PROMPT_MESSAGES = [
    {"role": "system", "parts": [{"type": "text", "content": "Use the calc tool."}]},
    {"role": "user", "parts": [{"type": "text", "content": "2+2? Answer in **bold**."}]},
]
TURNS = [
    {
        "role": "assistant",
        "parts": [
            {"type": "reasoning", "content": "I should call calc."},
            {"type": "text", "content": "Let me compute."},
            {"type": "tool_call", "id": "c1", "name": "calc", "arguments": {"expr": "2+2"}},
        ],
    },
    {
        "role": "tool",
        "parts": [
            {
                "type": "tool_call_response",
                "id": "c1",
                "response": "<script>alert(1)</script> 4\n…[299000 characters omitted]…\n```end",
                "original_length": 300000,
            }
        ],
    },
    {"role": "assistant", "parts": [{"type": "text", "content": "**4** <b>done</b>"}]},
]


def with_conversation(log: LogRecord) -> LogRecord:
    """``log`` carrying ``PROMPT_MESSAGES`` and ``TURNS``, its body's texts their rendering (as the SDK sends)."""
    from otel_valgen.conversations import render

    body = {"input": render(PROMPT_MESSAGES), "output": render(TURNS), "ground_truth": "4"}
    log.body.CopyFrom(any_value(body))
    log.attributes.extend(_attrs({contract.GEN_AI_INPUT_MESSAGES: PROMPT_MESSAGES}))
    log.attributes.extend(_attrs({contract.GEN_AI_OUTPUT_MESSAGES: TURNS}))
    return log


def conversation_step(run: str, step: int, k: int = 2, resource: dict[str, Any] | None = None) -> Any:
    """A closed step of ``k`` generations whose first has a conversation (the others are texts)."""
    logs = [generation(run, step, i) for i in range(k)]
    with_conversation(logs[0])
    return request(*logs, summary(run, step, k), resource=resource or {"service.name": "t"})
