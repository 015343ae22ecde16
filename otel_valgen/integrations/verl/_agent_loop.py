"""The conversation of each agent-loop trajectory, captured where verl's agent loop holds it.

verl's ``ToolAgentLoop`` keeps the trajectory as chat messages (``AgentData.messages``: the
prompt's ``raw_prompt`` messages, each assistant turn as its tool parser read it, with
``tool_calls``, and each ``tool`` message) but returns only tokens; the batch row gets the
prompt's messages (``raw_prompt``) and the tokens with ``response_mask``. So the worker hooks
(``_layout.AGENT_LOOP_WORKER_METHODS``, ``_layout.TOOL_AGENT_STATE``), in every agent-loop worker:

- ``AgentLoopWorker._run_agent_loop`` (one asyncio task per trajectory) marks the task as capturing
  when the trajectory is a validation one, or a training one with rollouts asked for
  (``OTEL_VALGEN_ROLLOUT_COUNT`` > 0);
- ``AgentData.__init__`` remembers the trajectory's state in the task;
- ``AgentLoopWorker._compute_score``, after verl's own (so reward functions never see it), puts
  the messages the loop appended after the prompt into the output's ``extra_fields`` under
  ``_layout.MESSAGES_COLUMN``: every output of a capturing task gets the key (None when the loop
  kept no ``AgentData``, a single-turn loop), so batches from several workers keep one set of
  columns. A generation verl stopped after without parsing it (the response length or a turn
  limit reached) is added as an assistant message with its text decoded as verl's parsers decode.

Images in tool messages travel as ``{"type": "image"}``, never their pixels. A failure is
counted and warned about once; the trajectory goes on as verl made it.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from otel_valgen import _process, _stats
from otel_valgen._env import OTEL_VALGEN_ROLLOUT_COUNT
from otel_valgen.integrations.verl._layout import (
    AGENT_LOOP_WORKER,
    AGENT_LOOP_WORKER_METHODS,
    MESSAGES_COLUMN,
    RAW_PROMPT_COLUMN,
    TOOL_AGENT_STATE,
    TOOL_AGENT_STATE_FIELDS,
    parameter_names,
    untested_note,
    verl_version,
)

_logger = logging.getLogger("otel_valgen")

# hooked class -> {method name: verl's own function}, for repairing Ray actor classes
originals: dict[type, dict[str, Callable[..., Any]]] = {}

_capturing: contextvars.ContextVar[bool] = contextvars.ContextVar("otel_valgen_verl_capturing", default=False)
_state: contextvars.ContextVar[Any] = contextvars.ContextVar("otel_valgen_verl_agent_data", default=None)
_warned: set[str] = set()


def on_worker_import(module: Any) -> None:
    """The post-import hook of ``_layout.AGENT_LOOP_MODULE``."""
    try:
        cls = getattr(module, AGENT_LOOP_WORKER, None)
        if not isinstance(cls, type):
            _not_hooked(f"{module.__name__}.{AGENT_LOOP_WORKER}", "is gone")
            return
        patch_worker(cls)
    except Exception:  # an import hook that raises would fail verl's import
        _logger.exception("otel_valgen: could not hook verl's agent-loop worker")


def on_tool_agent_import(module: Any) -> None:
    """The post-import hook of ``_layout.TOOL_AGENT_MODULE``."""
    try:
        cls = getattr(module, TOOL_AGENT_STATE, None)
        init = cls.__dict__.get("__init__") if isinstance(cls, type) else None
        if cls is None or not callable(init) or cls in originals:
            if cls is None or not callable(init):
                _not_hooked(f"{module.__name__}.{TOOL_AGENT_STATE}", "is gone")
            return

        @functools.wraps(init)
        def hooked_init(self: Any, *args: Any, **kwargs: Any) -> None:
            init(self, *args, **kwargs)
            remember(self)

        cls.__init__ = hooked_init  # type: ignore[misc]
        originals[cls] = {"__init__": init}
    except Exception:
        _logger.exception("otel_valgen: could not hook verl's tool agent loop")


def patch_worker(cls: type) -> None:
    """Give ``AgentLoopWorker`` the capture hooks, once; another layout: left as verl made it, loudly."""
    if cls in originals:
        return
    found: dict[str, Callable[..., Any]] = {}
    for method, parameters in AGENT_LOOP_WORKER_METHODS.items():
        original = cls.__dict__.get(method)
        if not callable(original):
            _not_hooked(f"{cls.__module__}.{cls.__qualname__}.{method}", "is missing")
            return
        if parameter_names(original) != parameters:
            _not_hooked(f"{cls.__module__}.{cls.__qualname__}.{method}", f"takes {parameter_names(original)}")
            return
        found[method] = original
    run, score = found["_run_agent_loop"], found["_compute_score"]

    @functools.wraps(run)
    async def _run_agent_loop(self: Any, sampling_params: Any, trajectory: Any, *args: Any, **kwargs: Any) -> Any:
        capturing = _capturing.set(wanted(trajectory))
        state = _state.set(None)
        try:
            return await run(self, sampling_params, trajectory, *args, **kwargs)
        finally:
            _state.reset(state)
            _capturing.reset(capturing)

    @functools.wraps(score)
    async def _compute_score(self: Any, outputs: Any, kwargs: Any) -> Any:
        result = await score(self, outputs, kwargs)
        attach(self, outputs, kwargs)
        return result

    cls._run_agent_loop = _run_agent_loop  # type: ignore[attr-defined]
    cls._compute_score = _compute_score  # type: ignore[attr-defined]
    originals[cls] = found
    _logger.info("otel_valgen: verl's %s.%s records each trajectory's conversation", cls.__module__, cls.__qualname__)


def wanted(trajectory: Any) -> bool:
    """Whether a trajectory's conversation is captured: a validation one, or training with rollouts asked for."""
    try:
        if isinstance(trajectory, Mapping) and trajectory.get("validate"):
            return True
        return int(os.environ.get(OTEL_VALGEN_ROLLOUT_COUNT, "0") or 0) > 0
    except (TypeError, ValueError):
        return False


def remember(state: Any) -> None:
    """Keep a trajectory's ``AgentData`` for its task, when the task captures."""
    if _capturing.get():
        _state.set(state)


@_process.never_raise(None)
def attach(worker: Any, outputs: Any, kwargs: Any) -> None:
    """Put the trajectory's generated messages into its outputs' ``extra_fields`` (None on each but the last)."""
    if not _capturing.get():
        return
    listed = outputs if isinstance(outputs, list) else [outputs]
    try:
        messages = generated_messages(_state.get(), kwargs, getattr(worker, "tokenizer", None))
    except Exception as error:
        _failed(error)
        messages = None
    for index, output in enumerate(listed):
        extra = getattr(output, "extra_fields", None)
        if isinstance(extra, dict):
            extra[MESSAGES_COLUMN] = messages if index == len(listed) - 1 else None


def generated_messages(state: Any, kwargs: Any, tokenizer: Any) -> list[dict[str, Any]] | None:
    """The messages the loop appended after the prompt, and the last generation when verl left it unparsed."""
    if state is None:
        return None
    missing = [name for name in TOOL_AGENT_STATE_FIELDS if not hasattr(state, name)]
    if missing:
        raise AttributeError(f"{TOOL_AGENT_STATE} has no {', '.join(missing)}")
    prompt = kwargs.get(RAW_PROMPT_COLUMN) if isinstance(kwargs, Mapping) else None
    start = len(prompt) if prompt is not None else 0
    appended = [_plain(message) for message in list(state.messages)[start:]]
    parsed = sum(1 for message in appended if message.get("role") == "assistant")
    if int(state.assistant_turns) > parsed and len(state.response_ids) and tokenizer is not None:
        appended.append({"role": "assistant", "content": str(tokenizer.decode(list(state.response_ids)))})
    return appended


def _plain(message: Any) -> dict[str, Any]:
    """A message as sent across processes: media items keep their type only."""
    if not isinstance(message, Mapping):
        return {"role": "unknown", "content": str(message)}
    plain = dict(message)
    content = plain.get("content")
    if isinstance(content, Sequence) and not isinstance(content, str | bytes):
        plain["content"] = [_media_free(item) for item in content]
    return plain


def _media_free(item: Any) -> Any:
    """A content item without its media payload (an image's pixels): its type and text only."""
    return {key: value for key, value in item.items() if key in ("type", "text")} if isinstance(item, Mapping) else item


def _failed(error: Exception) -> None:
    _process.counters.add(_stats.VERL_ROW_COLUMNS_MISSING)
    if "capture" not in _warned:
        _warned.add("capture")
        _logger.warning(
            "otel_valgen: could not read verl's agent-loop conversation (%s: %s); its rows are sent as text%s",
            type(error).__name__,
            error,
            untested_note(),
        )


def _not_hooked(name: str, problem: str) -> None:
    _process.counters.add(_stats.VERL_ROW_COLUMNS_MISSING)
    _logger.warning(
        "otel_valgen: verl %s: %s %s; not hooked: agent-loop rows are sent as text, multi-turn ones without "
        "their turns%s (see _layout.AGENT_LOOP_WORKER_METHODS)",
        verl_version(),
        name,
        problem,
        untested_note(),
    )
