"""Benchmark: one agentic training step's rollout dump, verl 0.9.1's own against otel-valgen's, on the same batch.

The batch is a real verl ``DataProto`` of 512 prompts x 8 responses (4,096 rows) as verl's
``tool_agent`` loop leaves it, with 4 tool turns per trajectory and about 8k tokens per trajectory:

- tensors: prompts left-padded to 1,024 tokens (512..1,024 real), responses right-padded to 7,168,
  each five assistant segments (900..1,500 tokens) with a tool result (64..256 tokens) between two
  of them; ``response_mask`` is 0 on the tool results, ``attention_mask`` 1 over the whole
  response; a response that would pass 7,168 tokens is cut there (no final answer).
  ``token_level_scores``/``token_level_rewards``, GRPO ``advantages``, ``input_ids``.
- the conversation columns a real agent-loop batch carries: ``raw_prompt`` (a numpy object array
  of message lists, system + user, the same list for a prompt's 8 rows), ``otel_valgen_messages``
  (``_layout.MESSAGES_COLUMN``: per row the assistant turns with one OpenAI-form ``tool_calls``
  each, the ``tool`` messages, the final answer; texts are the decoded tokens of their segments),
  ``__num_turns__``; and ``uid``, ``data_source``, ``reward_model``, ``acc``.

The tokens are the byte-level BPE of ``rollout_dump_bench`` (trained once, cached). Timed, per step:
verl's real, unbound ``RayPPOTrainer._log_rollout_data`` (``rollout_dump_bench.verl_dumper``; it
decodes every row's prompt and response, then hands the JSONL write to a thread), as the training
loop waits and until the write completes; otel-valgen's ``verl_rollouts.send_rollout_batch``
(k = 4 prompts, one prompt decoded per uid, the figures over every trajectory from the captured
messages, the k·n kept rows converted), sending OTLP/HTTP to the built collector and returning once
the step's records are flushed. Peak RSS: in a child process per size (128, 256 and 512 prompts
x 8), the batch built, the hook run once, then its peak (``VmHWM`` reset through
``/proc/self/clear_refs``) during a second call, above the process's RSS before it (the heap
trimmed first), and the ``tracemalloc`` peak (Python and numpy allocations) of a third call.

Run: ``python bench/agentic_rollout_bench.py [--repeats 3]`` (needs ``make collector``). Prints
medians per step and the hook's ratio to verl's dump (goal: at most 0.1x), then the peak RSS per size.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's otel_valgen and tests
sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared helpers of rollout_dump_bench

import numpy as np
import rollout_dump_bench as shared
import torch

PROMPTS, N, PROMPT_LEN, RESPONSE_LEN = 512, 8, 1024, 7168
K = shared.K
TOOL_TURNS = 4
ASSISTANT_TOKENS, TOOL_TOKENS = (900, 1500), (64, 256)
SEGMENTS = 1024  # distinct assistant and tool segments, each decoded once for the messages' texts
TOOLS = ("calc", "search")
RSS_SIZES = (128, 256, 512)


def _segments(pool: np.ndarray, tokenizer: Any, rng: np.random.Generator, span: tuple[int, int]) -> list[Any]:
    """``SEGMENTS`` slices of the corpus of lengths in ``span``: (token ids, decoded text)."""
    ids = []
    for _ in range(SEGMENTS):
        length = int(rng.integers(span[0], span[1] + 1))
        start = int(rng.integers(0, len(pool) - length))
        ids.append(pool[start : start + length])
    texts = tokenizer.batch_decode([s.tolist() for s in ids], skip_special_tokens=True)
    return list(zip(ids, texts, strict=True))


def _call(turn: int, row: int) -> dict[str, Any]:
    name = TOOLS[turn % len(TOOLS)]
    arguments = json.dumps({"expression": f"{row} * {turn + 7}"} if name == "calc" else {"query": f"row {row}"})
    return {"id": f"call_{row}_{turn}", "type": "function", "function": {"name": name, "arguments": arguments}}


def _trajectory(
    row: int, assistant: list[Any], tool: list[Any], rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, list[dict[str, Any]]]:
    """One response's tokens, its response mask and its turns (cut at ``RESPONSE_LEN``, like verl)."""
    tokens, mask, messages = [], [], []
    used = 0
    for turn in range(TOOL_TURNS + 1):
        ids, text = assistant[int(rng.integers(len(assistant)))]
        if used >= RESPONSE_LEN:
            break
        tokens.append(ids)
        mask.append(np.ones(len(ids), dtype=np.int64))
        used += len(ids)
        if turn == TOOL_TURNS:
            messages.append({"role": "assistant", "content": text})  # the final answer
            break
        call = _call(turn, row)
        messages.append({"role": "assistant", "content": text, "tool_calls": [call]})
        if used >= RESPONSE_LEN:
            break
        ids, text = tool[int(rng.integers(len(tool)))]
        tokens.append(ids)
        mask.append(np.zeros(len(ids), dtype=np.int64))
        messages.append({"role": "tool", "content": text, "tool_call_id": call["id"]})
        used += len(ids)
    return np.concatenate(tokens)[:RESPONSE_LEN], np.concatenate(mask)[:RESPONSE_LEN], messages


def _objects(values: list[Any]) -> np.ndarray:
    array = np.empty(len(values), dtype=object)
    array[:] = values
    return array


def make_agentic_batch(pool: np.ndarray, tokenizer: Any, prompts_count: int = PROMPTS, seed: int = 1) -> Any:
    """A verl DataProto of an agentic step as the trainer has it when it dumps rollouts."""
    from verl import DataProto

    rng = np.random.default_rng(seed)
    assistant = _segments(pool, tokenizer, rng, ASSISTANT_TOKENS)
    tool = _segments(pool, tokenizer, rng, TOOL_TOKENS)
    rows = prompts_count * N
    prompts = torch.full((rows, PROMPT_LEN), shared.PAD, dtype=torch.long)
    responses = torch.full((rows, RESPONSE_LEN), shared.PAD, dtype=torch.long)
    response_mask = torch.zeros((rows, RESPONSE_LEN), dtype=torch.long)
    prompt_mask = torch.zeros((rows, PROMPT_LEN), dtype=torch.long)
    raw_prompts, turns, lengths = [], [], np.zeros(rows, dtype=np.int64)
    for p in range(prompts_count):
        length = int(rng.integers(512, PROMPT_LEN + 1))
        start = int(rng.integers(0, len(pool) - length))
        ids = pool[start : start + length]
        prompts[p * N : (p + 1) * N, PROMPT_LEN - length :] = torch.from_numpy(ids)
        prompt_mask[p * N : (p + 1) * N, PROMPT_LEN - length :] = 1
        text = tokenizer.decode(ids.tolist(), skip_special_tokens=True)
        messages = [{"role": "system", "content": "You may call calc and search."}, {"role": "user", "content": text}]
        raw_prompts += [messages] * N  # verl repeats the row's object: one list per prompt
        for row in range(p * N, (p + 1) * N):
            tokens, mask, generated = _trajectory(row, assistant, tool, rng)
            responses[row, : len(tokens)] = torch.from_numpy(tokens)
            response_mask[row, : len(mask)] = torch.from_numpy(mask)
            lengths[row] = len(tokens)
            turns.append(generated)
    attention = (torch.arange(RESPONSE_LEN)[None, :] < torch.from_numpy(lengths)[:, None]).long()
    last = torch.from_numpy(np.maximum(lengths, 1) - 1)
    cut = torch.from_numpy(lengths >= RESPONSE_LEN)
    responses[torch.arange(rows)[~cut], last[~cut]] = shared.EOS  # it ended by itself
    correct = torch.from_numpy(rng.random(rows) < 0.4).float()
    scores = torch.zeros(rows, RESPONSE_LEN)
    scores[torch.arange(rows), last] = correct
    grouped = correct.view(prompts_count, N)
    advantage = ((grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-6)).view(rows)
    num_turns = np.array([1 + len(generated) for generated in turns], dtype=np.int32)  # the user's turn, then each
    return DataProto.from_single_dict(
        {
            "prompts": prompts,
            "responses": responses,
            "input_ids": torch.cat([prompts, responses], dim=1),
            "attention_mask": torch.cat([prompt_mask, attention], dim=1),
            "response_mask": response_mask,
            "token_level_scores": scores,
            "token_level_rewards": scores.clone(),
            "advantages": advantage[:, None] * response_mask,
            "uid": np.repeat(np.array([f"uid-{p:05d}" for p in range(prompts_count)], dtype=object), N),
            "data_source": np.array(["synthetic/tools"] * rows, dtype=object),
            "reward_model": _objects([{"ground_truth": str(row // N * 7), "style": "rule"} for row in range(rows)]),
            "acc": correct.numpy().astype(object),
            "raw_prompt": _objects(raw_prompts),
            "otel_valgen_messages": _objects(turns),
            "__num_turns__": num_turns,
        },
        meta_info={"reward_extra_keys": ["acc"]},
    )


def hook_run(batch: Any, tokenizer: Any, step: int) -> float:
    """Seconds in ``send_rollout_batch`` for the whole batch (its reward extra columns from the batch)."""
    from otel_valgen.integrations.verl_rollouts import send_rollout_batch

    started = time.perf_counter()
    send_rollout_batch(batch, tokenizer, step=step, max_response_length=RESPONSE_LEN, source="trainer")
    return time.perf_counter() - started


def measure(batch: Any, tokenizer: Any, repeats: int) -> tuple[dict[str, list[float]], list[dict[str, Any]]]:
    """Seconds per step of verl's dump and of the hook (a first, untimed round warms up), and the summaries."""
    import otel_valgen as vg
    from tests.e2e import harness

    extra = {"acc": batch.non_tensor_batch["acc"].tolist()}
    times: dict[str, list[float]] = {"verl": [], "verl_written": [], "hook": []}
    with tempfile.TemporaryDirectory() as tmp, harness.bench_collector(Path(tmp), "2s") as (collector, wandb, _):
        vg.configure(
            run_id="bench-agentic-rollouts",
            rollout_count=K,
            endpoint=f"http://{collector.http_endpoint}",
            source="trainer",
            directory=os.path.join(tmp, "emitter"),
        )
        verl = shared.verl_dumper(tokenizer)
        for step in range(1, repeats + 2):  # step 1 warms up (verl's thread, the OTLP connection)
            measured = (
                *shared.verl_dump(verl, batch, extra, os.path.join(tmp, "rollout_data_dir"), step),
                hook_run(batch, tokenizer, step + 10_000),
            )
            for name, value in zip(times, measured, strict=True):
                times[name] += [value] if step > 1 else []
        verl._shutdown_dump_executor()
        vg.shutdown()
        harness.wait_for(lambda: len(shared.rollout_summaries(wandb)) >= repeats + 1, 60, "every rollout summary")
        return times, shared.rollout_summaries(wandb)


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def peak_rss_child(prompts_count: int, cache: Path) -> None:
    """In a fresh process: build a batch of ``prompts_count`` x N, run the hook twice, print RSS figures (KiB)."""
    import otel_valgen as vg

    tokenizer, pool = shared.tokenizer_and_pool(cache)
    batch = make_agentic_batch(pool, tokenizer, prompts_count)
    with tempfile.TemporaryDirectory() as tmp:
        vg.configure(run_id="rss", rollout_count=K, source="trainer", directory=tmp)
        hook_run(batch, tokenizer, 1)  # imports, the first records: not the step's cost
        gc.collect()
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim(0)  # the heap the first call freed back to the system
        before = _status_kib("VmRSS")
        with open("/proc/self/clear_refs", "w") as refs:  # VmHWM := VmRSS
            refs.write("5")
        hook_run(batch, tokenizer, 2)
        peak = _status_kib("VmHWM")
        gc.collect()
        libc.malloc_trim(0)
        after = _status_kib("VmRSS")
        tracemalloc.start()  # a third call: its Python and numpy allocations, which the allocator does not blur
        hook_run(batch, tokenizer, 3)
        traced = tracemalloc.get_traced_memory()[1] // 1024
        tracemalloc.stop()
        vg.shutdown()
    print(json.dumps({"prompts": prompts_count, "before": before, "peak": peak, "after": after, "traced": traced}))


def report(batch: Any, times: dict[str, list[float]], summaries: list[dict[str, Any]], repeats: int) -> None:
    """Print the batch, the medians and the hook's ratio to verl's dump."""
    lengths = batch.batch["attention_mask"].sum(-1)
    masked = batch.batch["response_mask"].sum(-1)
    spans = batch.batch["attention_mask"][:, PROMPT_LEN:].sum(-1)
    print(
        f"batch: {PROMPTS} prompts x {N} = {len(batch)} rows, {TOOL_TURNS} tool turns per trajectory; prompts "
        f"{PROMPT_LEN} (left-padded), responses {RESPONSE_LEN} (right-padded); tokens per trajectory median "
        f"{int(lengths.median())}, response mask 0 on {1 - float(masked.sum() / spans.sum()):.1%} of response tokens, "
        f"{int((spans >= RESPONSE_LEN).sum())} cut at the limit; k = {K} prompts"
    )
    closed = {(s["valgen.prompts_kept"], s["valgen.kept"]) for s in summaries} == {(K, K * N)}
    counted = {s.get("valgen.trajectories", {}).get("count") for s in summaries}
    print("destination: the built collector (build/otelcol-valgen, collector.yaml) over OTLP/HTTP, stand-ins after it")
    print(
        f"  {len(summaries)} rollout steps closed, each {K} prompts x {N} responses kept: {closed}; "
        f"trajectories counted per step: {sorted(counted, key=str)}"
    )
    verl_ms, hook_ms = shared.ms(times["verl"]), shared.ms(times["hook"])
    print(f"per step, median of {repeats} runs:")
    print(f"  verl _log_rollout_data, as the loop waits     {verl_ms:9.1f} ms   1.000x")
    print(f"  verl, until its JSONL write completes         {shared.ms(times['verl_written']):9.1f} ms")
    print(f"  otel-valgen send_rollout_batch                {hook_ms:9.1f} ms   {hook_ms / verl_ms:.3f}x (goal 0.1x)")


def rss_report(cache: Path) -> None:
    """The hook's peak RSS at each of ``RSS_SIZES``, each in a fresh child process."""
    print("peak RSS of the hook (embedded sink), one child process per batch size, second call:")
    added = {}
    for prompts_count in RSS_SIZES:
        out = subprocess.run(
            [sys.executable, __file__, "--rss-child", str(prompts_count), "--cache-dir", str(cache)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        rss = json.loads(out.strip().splitlines()[-1])
        added[prompts_count] = rss["peak"] - rss["before"]
        print(
            f"  {prompts_count:>4} x {N}: process {rss['before'] / 1024:7.1f} MiB before the call (the batch in it), "
            f"peak {rss['peak'] / 1024:7.1f} MiB: the hook +{added[prompts_count] / 1024:5.1f} MiB "
            f"({(rss['after'] - rss['before']) / 1024:+.1f} MiB after it, heap trimmed); "
            f"traced peak of a third call {rss['traced'] / 1024:5.1f} MiB"
        )
    first, last = RSS_SIZES[0], RSS_SIZES[-1]
    print(f"  the hook's peak, {first} -> {last} prompts: {added[first] / 1024:.1f} -> {added[last] / 1024:.1f} MiB")


def main() -> None:
    """Build the batch, time both dumps ``--repeats`` times through the built collector, print medians and RSS."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cache-dir", type=Path, default=shared.DEFAULT_CACHE, help="where the tokenizer is kept")
    parser.add_argument("--no-rss", action="store_true", help="leave out the peak RSS per batch size")
    parser.add_argument("--rss-child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rss_child:
        peak_rss_child(args.rss_child, args.cache_dir)
        return
    from tests.e2e import harness

    if not harness.COLLECTOR_BIN.is_file():
        sys.exit("build/otelcol-valgen is absent; run `make collector` first")
    tokenizer, pool = shared.tokenizer_and_pool(args.cache_dir)
    batch = make_agentic_batch(pool, tokenizer)
    print(
        f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}, torch {torch.__version__}; "
        f"tokenizer: byte-level BPE, {len(tokenizer)} tokens, {type(tokenizer).__name__}"
    )
    times, summaries = measure(batch, tokenizer, args.repeats)
    report(batch, times, summaries, args.repeats)
    if not args.no_rss:
        del batch
        gc.collect()
        rss_report(args.cache_dir)


if __name__ == "__main__":
    main()
