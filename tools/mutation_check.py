"""Mutation check of the core rules: does a test fail when one rule is broken.

Each mutation below breaks one rule on purpose (the sampling key, bottom-k, the close rules,
the summary counts, the source identity, idempotency, truncation, attempts in show, push, the
ledger and the backends, the emitter's id lanes and seed encoding, the verl integration
against the real verl in tests/verl...) by replacing an exact
snippet of a source file. One at a time, in a temporary copy of the repository (never in the
working tree), the mutation is applied, the tests named for it run, and the file is restored.
A mutation is *killed* when those tests fail, and *survives* when they pass: then the rule
could break without any test noticing. A mutant that does not build (Go) or import (Python)
is an error of the list, not a kill.

Before the mutations, each distinct test command runs once on the unmutated copy and must
pass (otherwise a "kill" would mean nothing). A snippet that is no longer found exactly once
is an error: the list must follow the code.

Usage::

    python tools/mutation_check.py            # every mutation; exit 1 if one survives
    python tools/mutation_check.py --list     # the mutations and their tests
    python tools/mutation_check.py --only go.complete.received --only py.sanitize.fits
    python tools/mutation_check.py --tree /path/to/other/checkout   # check another tree

It runs by hand (about 10 minutes on 2 cores), not in CI on every change: see
docs/reliability.md. Python tests run with PYTHONPATH=<copy>; Go tests with
``go test -count=1 ./...`` in the copy's processor module.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROCESSOR = "collector/valgensamplerprocessor"
GO = ("go",)  # the processor module's whole Go test suite (about 10 s)
_IGNORED = shutil.ignore_patterns(
    ".git", "build", "build-local", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache", "*.pyc", ".venv"
)
_TIMEOUT_S = 600
# The chi-square uniformity tests of the key (about 9 s) are left out: every key mutation listed
# here also breaks the shared vectors, which run in a fraction of that time.
_DESELECT = "not chi_square and not weak_mix"
# Some mutants make a test hang (a lock never released): fail it after a minute, not pyproject's 5.
_TEST_TIMEOUT_S = 60


@dataclass(frozen=True)
class Mutation:
    """One semantic change of one rule, and the tests that must notice it."""

    name: str
    rule: str
    file: str
    original: str
    replacement: str
    tests: tuple[str, ...]  # GO, or pytest paths
    equivalent: str | None = None  # why no test can notice it: it is reported, never counted as a survivor


def _go(path: str) -> str:
    return f"{PROCESSOR}/{path}"


MUTATIONS: tuple[Mutation, ...] = (
    # --- Conversations and the figures over every trajectory ----------------------------------
    Mutation(
        "py.conversations.canonical_keys_sorted",
        "a message prompt's id hashes its GenAI messages' JSON with sorted keys (the shared key vectors)",
        "otel_valgen/conversations.py",
        'return json.dumps(messages, ensure_ascii=False, sort_keys=True, separators=(",", ":"))',
        'return json.dumps(messages, ensure_ascii=False, separators=(",", ":"))',
        ("tests/test_conversations.py",),
    ),
    Mutation(
        "py.records.message_prompt_id",
        "a message prompt's id is the hash of its canonical messages, not of their Python text",
        "otel_valgen/_records.py",
        "if type(raw_input) is not str and conversations.is_conversation(raw_input):",
        "if False:",
        ("tests/test_conversations.py",),
    ),
    Mutation(
        "py.conversations.budget_cuts_the_longest",
        "a record's conversation budget cuts only the texts longer than one common length",
        "otel_valgen/conversations.py",
        "        if size * count > remaining:\n            return remaining // count",
        "        if size * count > remaining:\n            return size",
        ("tests/test_conversations.py",),
    ),
    Mutation(
        "py.trajectories.max_keys_take_the_largest",
        "trajectory figures ending in .max take the largest value when merged, others add up",
        "otel_valgen/trajectories.py",
        "if key.endswith(_MAX):\n        return max(known, value)",
        "if key.endswith(_MAX):\n        return known + value",
        ("tests/test_trajectories.py",),
    ),
    Mutation(
        "py.trajectories.min_keys_take_the_smallest",
        "trajectory figures ending in .min (tool_rewards.min, turn_scores.min) take the smallest value when merged",
        "otel_valgen/trajectories.py",
        "if key.endswith(_MIN):\n        return min(known, value)",
        "if key.endswith(_MIN):\n        return known + value",
        ("tests/test_trajectories.py",),
    ),
    Mutation(
        "py.trajectories.shape_read_per_output",
        "a conversation's turns and tool calls are read from it, shared only by rows holding the same object",
        "otel_valgen/trajectories.py",
        "            key = id(output)\n",
        "            key = len(output)\n",
        ("tests/test_trajectories.py",),
    ),
    Mutation(
        "py.trajectories.rewards_absent_not_zero",
        "a source without any tool reward or turn score sends no such figures (absent, not zeros)",
        "otel_valgen/trajectories.py",
        "if not self.count or not (math.isfinite(self.total) and math.isfinite(self.last)):",
        "if not (math.isfinite(self.total) and math.isfinite(self.last)):",
        ("tests/test_trajectories.py",),
    ),
    Mutation(
        "py.trajectories.reward_per_trajectory",
        "a reward's per-trajectory mean divides by the trajectories with values, not by the values",
        "otel_valgen/trajectories.py",
        "((_COUNT, _MEAN), (_TRAJECTORIES, _PER_TRAJECTORY))",
        "((_COUNT, _MEAN), (_COUNT, _PER_TRAJECTORY))",
        ("tests/test_trajectories.py",),
    ),
    Mutation(
        "py.selection.trajectories_of_latest_end",
        "show takes a source's trajectory figures from its end record with the largest seen",
        "otel_valgen/selection.py",
        "(end if end.seen >= known.seen else known).trajectories or known.trajectories",
        "end.trajectories or known.trajectories",
        ("tests/test_trajectories.py",),
    ),
    Mutation(
        "go.trajectories.max_keys_take_the_largest",
        "the collector merges trajectory figures ending in .max by the largest value",
        _go("trajectories.go"),
        "case strings.HasSuffix(key, trajectoryMaxSuffix):\n\t\treturn mergeMax",
        "case strings.HasSuffix(key, trajectoryMaxSuffix):\n\t\treturn mergeSum",
        GO,
    ),
    Mutation(
        "go.trajectories.min_keys_take_the_smallest",
        "the collector merges trajectory figures ending in .min (tool_rewards.min, turn_scores.min) by the smallest",
        _go("trajectories.go"),
        "case mergeMin:\n\t\treturn min(x, y)",
        "case mergeMin:\n\t\treturn x + y",
        GO,
    ),
    Mutation(
        "go.trajectories.reward_per_trajectory",
        "the collector's per-trajectory reward mean divides by the trajectories with values",
        _go("trajectories.go"),
        "{rewardTrajectories, rewardPerTrajectory},",
        "{rewardCount, rewardPerTrajectory},",
        GO,
    ),
    Mutation(
        "go.trajectories.figures_of_latest_end",
        "the collector keeps a source's trajectory figures from its end record with the largest seen",
        _go("trajectories.go"),
        "if end.trajectories != nil && end.seen >= s.end.seen {",
        "if end.trajectories != nil {",
        GO,
    ),
    Mutation(
        "py.courier.answer_bound",
        "the courier hands delivery back by the delivery's own bound, not a flush timeout below it (0 included)",
        "otel_valgen/_pipeline.py",
        "self.exporter.answer_within_s,  # the delivery's own bound",
        "settings.flush_timeout_s,  # the delivery's own bound",
        ("tests/faults/test_courier_rules.py",),
    ),
    Mutation(
        "py.selection.invalid_score_pair",
        "show reads an end record with a negative score count (or only one of count and sum) without statistics",
        "otel_valgen/selection.py",
        "end.score_count < 0 or not math.isfinite(end.score_sum)",
        "not math.isfinite(end.score_sum)",
        ("tests/test_show_invalid_score_statistics.py",),
    ),
    Mutation(
        "py.selection.validation_ignores_rate",
        "show applies the watch-list rate to rollout steps only: a validation step keeps k whatever rate it carries",
        "otel_valgen/selection.py",
        "    if kind == contract.KIND_ROLLOUT:\n        views.lower_rate(record_rate(record))",
        "    views.lower_rate(record_rate(record))\n    if kind == contract.KIND_ROLLOUT:",
        ("tests/test_show_validation_rate.py",),
    ),
    Mutation(
        "go.group.validation_ignores_rate",
        "the collector applies the watch-list rate to rollout groups only: a validation group keeps k",
        _go("groupview.go"),
        "\tif g.kind != kindRollout {\n\t\treturn\n\t}\n\tg.rate = stepRate(g.rate, rate)",
        "\tg.rate = stepRate(g.rate, rate)",
        GO,
    ),
    Mutation(
        "py.spool.live_never_claimed",
        "a live process's spool (locked) is never claimed and sent by another process of its run",
        "otel_valgen/_spool.py",
        "fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)\n        except OSError:",
        "pass\n        except OSError:",
        ("tests/faults/test_spool_of_a_live_process.py",),
    ),
    Mutation(
        "py.courier.retry_after",
        "the courier asks an endpoint that answered 503 or 429 with Retry-After again no sooner than that",
        "otel_valgen/_courier.py",
        "max(outcome.retry_after_s, FIRST_BACKOFF_S / 2)",
        "min(outcome.retry_after_s, FIRST_BACKOFF_S / 2)",
        ("tests/faults/test_courier_rules.py",),
    ),
    Mutation(
        "py.courier.slow_not_handed_back",
        "delivery goes back to the endpoint only when its last answer came within the flush timeout",
        "otel_valgen/_courier.py",
        "return time.monotonic() - started <= self._healthy_s, None",
        "return True, None",
        ("tests/faults/test_courier_rules.py",),
    ),
    Mutation(
        "py.selection.prompts_estimated_by_merged_sketch",
        "show: prompts_seen is an estimate (≈N (±3%), prompts_seen_estimated) once the merged sketch holds m keys",
        "otel_valgen/selection.py",
        "    value, estimated = distinct_count(merge_keys(*sketches))\n",
        "    value, _ = distinct_count(merge_keys(*sketches))\n"
        "    estimated = any(distinct_count(sketch).estimated for sketch in sketches)\n",
        ("tests/test_show_figures.py",),
    ),
    Mutation(
        "py.selection.data_source_figures_of_latest_end",
        "show: the figures per data source are each source's latest end record's (largest seen), in any read order",
        "otel_valgen/selection.py",
        "data_sources=(end if end.seen >= known.seen else known).data_sources"
        " or known.data_sources or end.data_sources,",
        "data_sources=end.data_sources or known.data_sources,",
        ("tests/test_show_figures.py",),
    ),
    Mutation(
        "py.launch_group.window_from_last_process",
        "a plain launch is joined within 2 s of its last process, not its first: each process that joins moves it on",
        "otel_valgen/_launch_group.py",
        "joined = max(joined, recorded[1])",
        "joined = recorded[1]",
        ("tests/test_launchers.py",),
    ),
    Mutation(
        "py.launch_group.folder_of_another_user",
        "a launch folder another user owns is refused, even with private permissions (0700)",
        "otel_valgen/_launch_group.py",
        "not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid() or",
        "not stat.S_ISDIR(found.st_mode) or",
        ("tests/test_launchers.py",),
    ),
    Mutation(
        "py.partials.incomplete_unended_source",
        "merged parts: a source that sent records but never ended makes every kept prompt incomplete, expected or not",
        "otel_valgen/partials.py",
        "return ended >= _int(summary, contract.SOURCES) and ended >= expected",
        "return ended >= expected",
        ("tests/test_partials.py",),
    ),
    Mutation(
        "go.group.incomplete_expected_source",
        "fewer ended than sources_expected makes every kept prompt incomplete, also when the missing one sent nothing",
        _go("group.go"),
        "if ended < int64(len(g.sources)) || ended < g.sourcesExpected {",
        "if ended < int64(len(g.sources)) {",
        GO,
    ),
    Mutation(
        "go.datasource.figures_of_latest_end",
        "a source's data source figures come from its end record with the largest seen, whatever the arrival order",
        _go("datasource.go"),
        "if end.dataSources != nil && end.seen >= s.end.seen {",
        "if end.dataSources != nil {",
        GO,
    ),
    Mutation(
        "py.sampling.join_on_a_step_generation",
        "a split group is joined by the first generation that asks for k per step",
        "otel_valgen/sampling.py",
        "joins = self.split and not by_data_source",
        "joins = self.split and by_data_source is None",
        ("tests/test_data_sources.py",),
    ),
    Mutation(
        "py.sampling.minus_zero_is_zero",
        "-0.0 is 0.0 in the score order (ties then go by sample key)",
        "otel_valgen/sampling.py",
        'struct.pack(">d", score + 0.0)',
        'struct.pack(">d", score)',
        ("tests/test_extremes.py",),
    ),
    Mutation(
        "py.sampling.extremes_smallest_n",
        "the smallest n asked for wins (extremes and the most mismatched)",
        "otel_valgen/sampling.py",
        "if n is not None and n < self._n[slot]]",
        "if n is not None and n > self._n[slot]]",
        ("tests/test_extremes.py", "tests/test_mismatched.py"),
    ),
    Mutation(
        "py.sampling.mismatched_descending",
        "the most mismatched are the largest KL first, not the smallest",
        "otel_valgen/sampling.py",
        "(SLOT_MISMATCHED, True))",
        "(SLOT_MISMATCHED, False))",
        ("tests/test_mismatched.py",),
    ),
    Mutation(
        "py.sampling.mismatched_by_kl",
        "the most mismatched rank a response by its KL, not by its score",
        "otel_valgen/sampling.py",
        "kept = ranks.offer(kl if slot == SLOT_MISMATCHED else score, order, item) or kept",
        "kept = ranks.offer(score if slot == SLOT_MISMATCHED else score, order, item) or kept",
        ("tests/test_mismatched.py",),
    ),
    Mutation(
        "py.sampling.figures_finite",
        "a figure that is not finite (a KL, a score) takes no ranked slot",
        "otel_valgen/sampling.py",
        "if figure is None or not math.isfinite(figure):",
        "if figure is None:",
        ("tests/test_mismatched.py",),
    ),
    Mutation(
        "py.selection.mismatched_rollouts_only",
        "valgen.mismatched applies to rollout groups",
        "otel_valgen/selection.py",
        "return value if usable and kind == contract.KIND_ROLLOUT else 0",
        "return value if usable and kind == contract.KIND_VALIDATION else 0",
        ("tests/test_mismatched.py",),
    ),
    Mutation(
        "py.partials.keyed_prompts",
        "a response kept alone as most mismatched is no kept prompt",
        "otel_valgen/partials.py",
        "return len({g.prompt_id for g in kept if g.slots is None or contract.SLOT_KEYED in g.slots})",
        "return len({g.prompt_id for g in kept})",
        ("tests/test_mismatched.py",),
    ),
    Mutation(
        "py.exporter.mismatched_after_keyed",
        "the exporter lists a response kept alone after the keyed prompts, as the sampler ranked it",
        "otel_valgen/exporter/steps.py",
        "alone = generation.slots is not None and contract.SLOT_KEYED not in generation.slots",
        "alone = False",
        ("tests/test_mismatched.py",),
    ),
    Mutation(
        "py.records.ranked_kl",
        "a record carries the KL its process ranked it by (the whole call's figures)",
        "otel_valgen/_records.py",
        "figures = columns.figures[index] if columns.figures is not None else tokens.response_figures(read)",
        "figures = tokens.response_figures(read)",
        ("tests/test_mismatched.py",),
    ),
    Mutation(
        "py.partials.parts_split",
        "merged parts keep k per data source only when every part's summary says so",
        "otel_valgen/partials.py",
        "return bool(summaries) and all(",
        "return bool(summaries) and any(",
        ("tests/test_data_sources.py", "tests/exporter/test_parts.py"),
    ),
    Mutation(
        "py.presample.batch_cut_extremes",
        "presampling keeps a call's lowest- and highest-scored generations, not only its keyed candidates",
        "otel_valgen/_presample.py",
        "if keyed or candidate[0] in extreme:",
        "if keyed:",
        ("tests/test_extremes.py",),
    ),
    Mutation(
        "py.presample.batch_cut_mismatched",
        "presampling keeps a call's responses of the largest KL, not only its keyed candidates",
        "otel_valgen/_presample.py",
        " | _first(members, kls, m, -1.0)",
        "",
        ("tests/test_mismatched.py",),
    ),
    Mutation(
        "py.presample.prefilter_mismatched",
        "with the most mismatched a call's responses are not cut to its k smallest prompts before they are keyed",
        "otel_valgen/_presample.py",
        "if self._kept.extremes or self._kept.mismatched:",
        "if self._kept.extremes:",
        ("tests/test_mismatched.py",),
    ),
    Mutation(
        "go.mismatched.descending",
        "the collector's most mismatched are the largest KL first",
        _go("slots.go"),
        "{inMismatched, true}}",
        "{inMismatched, false}}",
        GO,
    ),
    Mutation(
        "go.mismatched.by_kl",
        "the collector ranks the most mismatched by valgen.mismatch.kl",
        _go("slots.go"),
        "f[2].value, f[2].ok = gen.kl, gen.hasKL",
        "f[2].value, f[2].ok = gen.score, gen.hasKL",
        GO,
    ),
    Mutation(
        "go.slots.finite_figures",
        "a figure that is not finite (a score, a KL) takes no ranked slot",
        _go("extremes.go"),
        "if math.IsNaN(value) || math.IsInf(value, 0) {",
        "if math.IsNaN(value) {",
        GO,
    ),
    Mutation(
        "go.mismatched.smallest_n",
        "the smallest valgen.mismatched asked for wins",
        _go("mismatched.go"),
        "if m < d.m {",
        "if m > d.m {",
        GO,
    ),
    Mutation(
        "go.mismatched.stored_prompt",
        "a response kept alone is stored with its prompt's key, so a restart does not make it a keyed pick",
        _go("slots.go"),
        "f(e.item.prompt, &entry[keptRecord]{order: e.order.order, item: e.item.item})",
        "f(e.order.order, &entry[keptRecord]{order: e.order.order, item: e.item.item})",
        GO,
    ),
    Mutation(
        "go.mismatched.slots_on_records",
        "kept records of a group with the most mismatched say their slots",
        _go("summary.go"),
        "withSlots = g.kept.n > 0 || g.kept.m > 0",
        "withSlots = g.kept.n > 0",
        GO,
    ),
    # --- Go: the close rules --------------------------------------------------------------
    Mutation(
        "go.complete.received",
        "a step is complete only when all that each ended source emitted has arrived",
        _go("lifecycle.go"),
        "if !state.ended || state.arrived() < state.end.emitted {",
        "if !state.ended {",
        GO,
    ),
    Mutation(
        "go.complete.sources_expected",
        "a step is complete only when at least sources_expected sources have ended",
        _go("lifecycle.go"),
        "return ended >= g.sourcesExpected",
        "return ended > 0",
        GO,
    ),
    Mutation(
        "go.complete.wait_without_promise",
        "without sources_expected a complete step closes only after decision_wait of silence",
        _go("lifecycle.go"),
        "if g.complete() && (g.sourcesExpected > 0 || now.Sub(g.lastSeen) >= cfg.DecisionWait) {",
        "if g.complete() {",
        GO,
    ),
    Mutation(
        "go.expired.waiting",
        "silence does not close a step while fewer than sources_expected sources have ended",
        _go("lifecycle.go"),
        "waiting := g.sourcesExpected > 0 && g.endedSources() < g.sourcesExpected",
        "waiting := g.sourcesExpected < 0",
        GO,
    ),
    Mutation(
        "go.max_groups.oldest",
        "past max_groups the oldest open group closes",
        _go("processor.go"),
        "if oldest == nil || g.seq < oldest.seq {",
        "if oldest == nil || g.seq > oldest.seq {",
        GO,
    ),
    Mutation(
        "go.late.forward_generations_only",
        "the forward policy forwards late generations only; late lifecycle records are dropped",
        _go("processor.go"),
        "if name == eventGeneration && !invalid && p.cfg.LateRecords == LateRecordsForward {",
        "if p.cfg.LateRecords == LateRecordsForward {",
        GO,
    ),
    Mutation(
        "go.late.never_reopens",
        "a record of a closed step is late: it never opens the step again (idempotency)",
        _go("processor.go"),
        "if p.closed.markLate(key, lr, at.rl.Resource()) {",
        "if p.closed.markLate(key, lr, at.rl.Resource()) && p.cfg.MaxGroups < 0 {",
        GO,
    ),
    Mutation(
        "go.group_key.attempt",
        "two attempts of one step never share a group",
        _go("record.go"),
        "return stepKey(attrs) + kindKey(kindOf(attrs)) + attemptKey(attemptOf(attrs))",
        "return stepKey(attrs) + kindKey(kindOf(attrs))",
        GO,
    ),
    Mutation(
        "go.group_key.kind",
        "a step's validation and its rollouts never share a group",
        _go("record.go"),
        "return stepKey(attrs) + kindKey(kindOf(attrs)) + attemptKey(attemptOf(attrs))",
        "return stepKey(attrs) + attemptKey(attemptOf(attrs))",
        GO,
    ),
    Mutation(
        "go.group_view.prompt",
        "a rollout group keeps the bottom-k prompts, each with all its responses",
        _go("groupview.go"),
        "return v.prompts.offer(gen.prompt, func() *keptPrompt {",
        "return v.prompts.offer(gen.order, func() *keptPrompt {",
        GO,
    ),
    Mutation(
        "go.batch.close_once",
        "a batch holding a step's end record and then a redelivered record of that step closes it once",
        _go("processor.go"),
        "if p.groups[g.key] == g && g.completeNow() {",
        "if g.completeNow() {",
        GO,
    ),
    # --- Go: source identity, seeds, key -------------------------------------------------
    Mutation(
        "go.source.instance",
        "a source is (valgen.source, service.instance.id): two processes never merge",
        _go("record.go"),
        "id.instance = v.AsString()",
        "_ = v",
        GO,
    ),
    Mutation(
        "go.seed.per_record",
        "a record's valgen.seed, not the configured seed, computes its key",
        _go("record.go"),
        "gen.seed = uint64(s.Int())",
        "_ = s.Int()",
        GO,
    ),
    Mutation(
        "go.key.lane",
        "the response index selects the seed's lane (version 2)",
        _go("samplekey.go"),
        "return mix64(idHash(base)^seedLane(seed, n)) >> 1",
        "return mix64(idHash(base)^seedLane(seed, n*0)) >> 1",
        GO,
    ),
    Mutation(
        "go.key.tiebreak",
        "equal keys are ordered by sample id",
        _go("samplekey.go"),
        "return a.id < b.id",
        "return a.id > b.id",
        GO,
    ),
    Mutation(
        "go.key.hex_base",
        "a 16-hex-digit base id is read as its value, not hashed",
        _go("samplekey.go"),
        "if len(base) == hexBaseLength {",
        "if len(base) == -1 {",
        GO,
    ),
    # --- Go: bottom-k ---------------------------------------------------------------------
    Mutation(
        "go.bottomk.shrink",
        "shrinking a full bottom-k to k' keeps exactly the k' smallest",
        _go("bottomk.go"),
        "for len(b.heap) > k {",
        "for len(b.heap) > 0 && len(b.heap) >= k {",
        GO,
    ),
    Mutation(
        "go.bottomk.smallest",
        "a full bottom-k takes a key only when it is smaller than the largest kept",
        _go("bottomk.go"),
        "return len(b.heap) < b.k || order.less(b.heap[0].order)",
        "return len(b.heap) < b.k || b.heap[0].order.less(order)",
        GO,
    ),
    Mutation(
        "go.bottomk.dedupe",
        "a record delivered twice is kept once",
        _go("bottomk.go"),
        "if _, dup := b.kept[order]; dup {",
        "if _, dup := b.kept[order]; dup && b.k < 0 {",
        GO,
    ),
    Mutation(
        "go.group.smallest_k",
        "a group keeps the smallest k any record asked for",
        _go("group.go"),
        "return min(current, asked)",
        "return max(current, asked)",
        GO,
    ),
    # --- Go: summary counts ---------------------------------------------------------------
    Mutation(
        "go.summary.missing_not_negative",
        "valgen.missing never goes negative when records are redelivered",
        _go("balance.go"),
        "d.undelivered = max(0, emitted-s.arrived())",
        "d.undelivered = emitted - s.arrived()",
        GO,
    ),
    Mutation(
        "go.end.largest_seen",
        "a repeated end record keeps the largest seen",
        _go("group.go"),
        "state.end.seen = max(state.end.seen, end.seen)",
        "state.end.seen = end.seen",
        GO,
    ),
    Mutation(
        "go.end.largest_emitted",
        "a repeated end record keeps the largest emitted",
        _go("group.go"),
        "state.end.emitted = max(state.end.emitted, end.emitted)",
        "state.end.emitted = end.emitted",
        GO,
    ),
    Mutation(
        "go.end.largest_sources_expected",
        "a repeated end record keeps the largest sources_expected",
        _go("group.go"),
        "g.sourcesExpected = max(g.sourcesExpected, end.sourcesExpected)",
        "g.sourcesExpected = end.sourcesExpected",
        GO,
    ),
    Mutation(
        "go.summary.seen_progress",
        "a source that did not end counts the larger of what arrived and what progress reported",
        _go("balance.go"),
        "seen = max(s.arrived(), s.progressSeen)",
        "seen = s.arrived()",
        GO,
    ),
    Mutation(
        "go.balance.every_reason",
        "valgen.dropped is the sum of every reason (seen = kept + dropped)",
        _go("balance.go"),
        "return d.sampled + d.source + d.invalid + d.undelivered + d.notEnded",
        "return d.sampled + d.source + d.invalid + d.undelivered",
        GO,
    ),
    Mutation(
        "go.balance.emitted_at_least_kept",
        "a source emitted at least the records kept from it (an older part's end record)",
        _go("balance.go"),
        "emitted := max(s.end.emitted, kept)",
        "emitted := s.end.emitted",
        GO,
    ),
    Mutation(
        "go.balance.invalid_counted",
        "an invalid generation of a known step is counted in its summary (dropped.invalid)",
        _go("group.go"),
        "g.touch(lr, src, now).invalid++",
        "g.touch(lr, src, now)",
        GO,
    ),
    Mutation(
        "go.balance.undelivered_before_invalid",
        "what did not arrive is undelivered, what arrived invalid is invalid, the rest not kept is sampled",
        _go("balance.go"),
        "d.invalid = min(s.invalid, notKept-d.undelivered)",
        "d.invalid = 0",
        GO,
    ),
    # --- Go: attempts of one step that ran at the same time (a split launch) ---------------
    Mutation(
        "go.concurrent.overlap",
        "attempts are concurrent only when their record times overlap (a resumed launch is not)",
        _go("concurrent.go"),
        "if len(f.sources) == 0 || len(o.sources) == 0 || f.first > o.last || o.first > f.last {",
        "if len(f.sources) == 0 || len(o.sources) == 0 {",
        GO,
    ),
    Mutation(
        "go.concurrent.disjoint",
        "attempts that share a source are not concurrent",
        _go("concurrent.go"),
        """		case f.sources[i] == o.sources[j]:
			return false""",
        """		case f.sources[i] == o.sources[j]:
			i++""",
        GO,
    ),
    Mutation(
        "go.concurrent.closed_attempts",
        "a closing group is compared with the attempts of its step closed earlier too",
        _go("concurrent.go"),
        "for _, other := range p.closed.sameStep(fp.step) {",
        'for _, other := range p.closed.sameStep("") {',
        GO,
    ),
    Mutation(
        "go.concurrent.warn_once",
        "the split-launch warning is logged once per step",
        _go("concurrent.go"),
        "warned = warned || other.concurrent > 0",
        "warned = warned || other.concurrent < 0",
        GO,
    ),
    Mutation(
        "go.summary.sources",
        "valgen.sources counts every source that sent a record, ended or not",
        _go("summary.go"),
        "attrs.PutInt(attrSources, int64(len(g.sources)))",
        "attrs.PutInt(attrSources, g.endedSources())",
        GO,
    ),
    # --- Python: the sampling key and bottom-k ------------------------------------------
    Mutation(
        "py.key.lane",
        "the response index selects the seed's lane (version 2)",
        "otel_valgen/sampling.py",
        "return mix64(id_hash(base) ^ seed_lane(seed, n)) >> 1",
        "return mix64(id_hash(base) ^ seed_lane(seed, 0)) >> 1",
        ("tests/test_sampling.py",),
    ),
    Mutation(
        "py.key.split_leading_zero",
        "an index with a leading zero is part of the base id",
        "otel_valgen/sampling.py",
        'and (digits[0] != "0" or digits == "0")',
        "",
        ("tests/test_sampling.py",),
    ),
    Mutation(
        "py.bottomk.dedupe",
        "a record delivered twice is kept once",
        "otel_valgen/sampling.py",
        "order in self._kept:\n            return False\n        if len(",
        "False:\n            return False\n        if len(",
        ("tests/test_sampling.py", "tests/test_presampling.py"),
    ),
    Mutation(
        "py.bottomk.equal_to_largest",
        "a full bottom-k refuses a key equal to its largest",
        "otel_valgen/sampling.py",
        "if order >= self._heap[0].order:",
        "if order > self._heap[0].order:",
        ("tests/test_sampling.py",),
        equivalent="a sort key equal to the largest kept one is in _kept, and offer returned False before",
    ),
    Mutation(
        "py.bottomk.threshold_full",
        "the presampling threshold exists only once k items are kept",
        "otel_valgen/sampling.py",
        "if self.k and len(self._heap) >= self.k else None",
        "if self.k and self._heap else None",
        ("tests/test_presampling.py", "tests/test_sampling.py"),
    ),
    Mutation(
        "py.keyer.kth_kept",
        "the batch's own cut keeps its k-th smallest key (and its ties)",
        "otel_valgen/_keys.py",
        "limit = min(limit, int(kth))",
        "limit = min(limit, int(kth) - 1)",
        ("tests/test_sampling.py", "tests/test_presampling.py"),
    ),
    # --- Token by token: the figures, the wire encoding, the step's distribution -----------
    Mutation(
        "py.tokens.model_tokens_only",
        "a response's figures are over its model tokens only (a tool's tokens are left out)",
        "otel_valgen/tokens.py",
        "            compared &= model.astype(bool, copy=False)",
        "            compared &= np.ones_like(compared)",
        ("tests/test_tokens.py",),
    ),
    Mutation(
        "py.tokens.nearest_rank",
        "the summary's quantiles are the nearest rank, ceil(q * n)",
        "otel_valgen/tokens.py",
        "    rank = max(1, math.ceil(q * total))",
        "    rank = max(1, math.floor(q * total))",
        ("tests/test_tokens.py",),
    ),
    Mutation(
        "py.tokens.cut_marked",
        "tokens left out to fit the budget are marked on the attribute",
        "otel_valgen/tokens.py",
        "    return {**header, CUT_FROM: head, CUT_COUNT: cut, **packed}, cut",
        "    return {**header, CUT_FROM: head, **packed}, cut",
        ("tests/test_tokens.py",),
    ),
    Mutation(
        "go.mismatch.nearest_rank",
        "the collector's quantiles are the nearest rank, ceil(q * n)",
        _go("mismatch.go"),
        "rank := math.Max(1, math.Ceil(q*total))",
        "rank := math.Max(1, math.Floor(q*total))",
        GO,
    ),
    Mutation(
        "go.mismatch.latest_end",
        "a source's distribution is its end record's with the largest seen",
        _go("mismatch.go"),
        "if end.mismatch != nil && end.seen >= s.end.seen {",
        "if end.mismatch != nil {",
        GO,
    ),
    # --- Python: sample ids ---------------------------------------------------------------
    Mutation(
        "py.ids.empty_uid_fallback",
        "an empty uid falls back to the input hash (one at a time)",
        "otel_valgen/_records.py",
        "        if text:\n",
        "        if True:\n",
        ("tests/test_api.py", "tests/test_sampling.py"),
    ),
    Mutation(
        "py.ids.empty_uid_batch",
        "an empty uid in a batch of str uids falls back to the input hash",
        "otel_valgen/_records.py",
        'if "" in distinct:\n            return None',
        'if "" in distinct and False:\n            return None',
        ("tests/test_api.py", "tests/test_sampling.py"),
    ),
    Mutation(
        "py.ids.hash_length_non_str",
        "a non-str input's id is the 16 hex digits of its text's XXH64, as for str",
        "otel_valgen/_records.py",
        "return xxhash.xxh64_hexdigest(_utf8(raw_input))",
        "return xxhash.xxh64_hexdigest(_utf8(raw_input))[:12]",
        ("tests/test_api.py", "tests/test_sampling.py", "tests/test_bad_input.py"),
    ),
    # --- Python: truncation and repairs ---------------------------------------------------
    Mutation(
        "py.sanitize.cut_at_boundary",
        "a cut text's head ends at a character boundary (no character is split)",
        "otel_valgen/_sanitize.py",
        "    while 0 < end < len(encoded) and (encoded[end] & 0xC0) == 0x80:",
        "    while False:",
        ("tests/test_long_outputs.py", "tests/test_bad_input.py"),
    ),
    Mutation(
        "py.k_rule.smallest",
        "the k of a step is the smallest asked for (show and the emitter)",
        "otel_valgen/sampling.py",
        "return asked if current is None else min(current, asked)",
        "return asked if current is None else max(current, asked)",
        ("tests/test_k_rule.py",),
    ),
    Mutation(
        "py.emitter.later_smaller_k",
        "a later call asking for a smaller k shrinks the open step's bottom-k",
        "otel_valgen/_emitter.py",
        "if count is None or count >= self.count:",
        "if True:",
        ("tests/test_k_rule.py",),
    ),
    Mutation(
        "py.sanitize.fits",
        "a text of exactly max_bytes is sent whole",
        "otel_valgen/_sanitize.py",
        "if len(encoded) <= max_bytes:",
        "if len(encoded) < max_bytes:",
        ("tests/test_bad_input.py",),
    ),
    Mutation(
        "py.sanitize.existing_fffd",
        "a U+FFFD already in byte input is not counted as a repair",
        "otel_valgen/_sanitize.py",
        'replaced = text.count(_REPLACEMENT) - raw.count(_REPLACEMENT.encode("utf-8"))',
        "replaced = text.count(_REPLACEMENT)",
        ("tests/test_bad_input.py",),
    ),
    # --- Python: the emitter and the API --------------------------------------------------
    Mutation(
        "py.api.block_only_for_its_step",
        "an enclosing block lends its source, trace and k only to calls of its own step",
        "otel_valgen/_api.py",
        "same_step = block if block is not None and block.step == resolved_step else None",
        "same_step = block",
        ("tests/test_api.py", "tests/test_lifecycle.py"),
    ),
    Mutation(
        "py.emitter.evict_oldest_step",
        "past MAX_OPEN_STEPS the oldest open step is ended early",
        "otel_valgen/_emitter.py",
        "_, overflow = self._steps.popitem(last=False)",
        "_, overflow = self._steps.popitem(last=True)",
        ("tests/test_lifecycle.py",),
    ),
    Mutation(
        "py.emitter.evict_oldest_part",
        "past MAX_OPEN_STEPS block-less parts, the least recently logged one ends",
        "otel_valgen/_emitter.py",
        "_, evicted = self._parts.popitem(last=False)",
        "_, evicted = self._parts.popitem(last=True)",
        ("tests/test_lifecycle.py",),
    ),
    Mutation(
        "py.emitter.end_sample_count",
        "the end record carries the step's k, not the configured one",
        "otel_valgen/_emitter.py",
        "            contract.SAMPLE_COUNT: state.count,\n",
        "            contract.SAMPLE_COUNT: self.settings.count,\n",
        ("tests/test_lifecycle.py",),
    ),
    Mutation(
        "py.api.missing_step_counted",
        "a call without a step drops and counts every generation of it",
        "otel_valgen/_api.py",
        '"missing_step",\n            size,',
        '"missing_step",\n            1,',
        ("tests/test_api.py", "tests/test_verl.py"),
    ),
    # --- Python: attempts, id lanes, seeds, sources and tracker runs in the emitter ------------
    Mutation(
        "py.emitter.attempt_counts_every_end",
        "validating a step a third (fourth...) time in one process gives a new attempt each time",
        "otel_valgen/_emitter.py",
        "self._ended[key] = self._ended.pop(key, 0) + 1",
        "self._ended[key] = 1",
        ("tests/test_lifecycle.py",),
    ),
    Mutation(
        "py.ids.shared_uid_lanes",
        "responses sharing one uid in a call get distinct ids uid/0, uid/1, ... and keys",
        "otel_valgen/_records.py",
        "return _call_lanes(hashes)",
        "return None",
        ("tests/test_api.py",),
    ),
    Mutation(
        "py.ids.repeats_among_shared_buckets",
        "two equal id hashes of a call are found, wherever they sit among the others",
        "otel_valgen/_records.py",
        "shared = words[np.bincount(buckets, minlength=1 << bits)[buckets] > 1]",
        "shared = words[np.bincount(buckets, minlength=1 << bits)[buckets] > 2]",
        ("tests/test_api.py",),
    ),
    Mutation(
        "py.emit.unplain_values_checked_by_the_sdk",
        "a record with a value the SDK's attribute checks would change goes through those checks",
        "otel_valgen/_pipeline.py",
        "            or not plain_attributes(attributes)\n",
        "",
        ("tests/test_record_emit.py",),
    ),
    Mutation(
        "py.emit.attribute_limits_apply",
        "a user's attribute value length limit cuts record attributes as the SDK does",
        "otel_valgen/_pipeline.py",
        "            or limits.max_log_record_attribute_length is not None\n",
        "",
        ("tests/test_record_emit.py",),
    ),
    Mutation(
        "py.otlp_request.empty_array_present",
        "an empty list or tuple is an AnyValue holding an empty array, as the library encodes it",
        "otel_valgen/_otlp_request.py",
        "        array.SetInParent()  # present when empty, as the library's\n",
        "",
        ("tests/test_otlp_request.py",),
    ),
    Mutation(
        "py.otlp_request.records_by_resource_and_scope",
        "records group under their own resource and scope, in order of first appearance",
        "otel_valgen/_sink.py",
        "if last is not None and resource is last[0] and scope is last[1]:",
        "if last is not None:",
        ("tests/test_otlp_request.py", "tests/test_sink_encoding.py"),
    ),
    Mutation(
        "py.sink.forked_child_starts_afresh",
        "a forked child does not write the records waiting in its parent's embedded sink",
        "otel_valgen/_delivery.py",
        """        if self._pid != os.getpid():
            self._start()
        readable""",
        "        readable",
        ("tests/test_embedded_sink_batching.py",),
    ),
    Mutation(
        "py.sink.full_batch_written_by_its_call",
        "the embedded sink writes a full batch in the call that fills it, so what waits stays bounded",
        "otel_valgen/_delivery.py",
        "            full = len(self._pending) >= self._max_batch",
        "            full = False",
        ("tests/test_embedded_sink_batching.py",),
    ),
    Mutation(
        "py.ids.response_index_from_zero",
        "the i-th response to one uid is uid/i, counted from 0",
        "otel_valgen/_records.py",
        'sample_id = f"{ids.base(index)}/{numbered[index] - 1 if numbered is not None else 0}@{tag}".encode()',
        'sample_id = f"{ids.base(index)}/{numbered[index] if numbered is not None else 0}@{tag}".encode()',
        ("tests/test_api.py",),
    ),
    Mutation(
        "py.records.seed_as_int64",
        "any accepted seed (>= 2^63, negative) travels as its 64 bits read as int64, so records encode",
        "otel_valgen/_records.py",
        "self._seed_attribute = seed - (1 << 64) if seed >= 1 << 63 else seed",
        "self._seed_attribute = seed",
        ("tests/test_otlp_wire.py",),
    ),
    Mutation(
        "py.api.explicit_source_wins",
        "an explicit source= inside a block of the same step wins over the block's source",
        "otel_valgen/_api.py",
        "name = source or (same_step.source if same_step is not None else None) or emitter.settings.source",
        "name = (same_step.source if same_step is not None else None) or source or emitter.settings.source",
        ("tests/test_api.py",),
    ),
    Mutation(
        "py.process.no_reinstall_mid_step",
        "a tracker run started while a block is open does not re-install the emitter (no second attempt)",
        "otel_valgen/_process.py",
        "        if emitter.has_open_steps():  # a step keeps the runs it opened with; no need to look\n"
        "            return emitter\n",
        "",
        ("tests/test_run_identity.py",),
    ),
    # --- Python: the generation accounting (seen = emitted + dropped + sampled out + held) ---
    Mutation(
        "py.accounting.failure_drops_batch",
        "a batch whose ids or keys fail is counted as seen and dropped (internal_error), in its step too",
        "otel_valgen/_emitter.py",
        "            self.refuse(state, size)\n"
        '            self.stats.failed("computing sample ids and keys", error, size)',
        "            self.stats.add(_stats.INTERNAL_ERRORS)",
        ("tests/test_accounting.py",),
    ),
    Mutation(
        "py.accounting.guard_counts_call",
        "an unexpected failure in log_generations counts the call's generations as seen and dropped",
        "otel_valgen/_api.py",
        "        _process.counters.add(_stats.GENERATIONS_SEEN, size)\n"
        '        _process.counters.failed("in log_generations", error, size)',
        '        _process.counters.failed("in log_generations", error)',
        ("tests/test_accounting.py",),
    ),
    Mutation(
        "py.accounting.evicted_sampled_out",
        "held generations evicted by a smaller key are counted as sampled out",
        "otel_valgen/_emitter.py",
        "size - len(entered) + evicted)",
        "size - len(entered))",
        ("tests/test_accounting.py",),
    ),
    Mutation(
        "py.accounting.shrink_sampled_out",
        "held generations cut by a smaller k mid-step are counted as sampled out",
        "otel_valgen/_presample.py",
        "        return _settle(self._kept.shrink(k))",
        "        self._kept.shrink(k)\n        return 0",
        ("tests/test_accounting.py",),
    ),
    Mutation(
        "py.accounting.settled_once",
        "a generation whose fate is counted is never counted again when it leaves the bottom-k",
        "otel_valgen/_presample.py",
        "        evicted = _settle(item for item in before if id(item) not in alive)",
        "        evicted = sum(1 for item in before if id(item) not in alive)",
        ("tests/test_accounting.py",),
    ),
    Mutation(
        "py.accounting.block_drop_in_end_record",
        "a call dropped whole inside a block of its step is seen and dropped in that block's end record",
        "otel_valgen/_api.py",
        "    if state is not None and emitter is not None:",
        "    if False:",
        ("tests/test_accounting.py",),
    ),
    # --- Python: reading steps back (show, the embedded sink) -----------------------------
    Mutation(
        "py.selection.largest_end",
        "repeated end records of a source keep the largest seen",
        "otel_valgen/selection.py",
        "seen=max(known.seen, end.seen),",
        "seen=end.seen,",
        ("tests/test_show_attempts.py", "tests/test_lifecycle.py"),
    ),
    Mutation(
        "py.selection.source_instance",
        "a source is (valgen.source, service.instance.id) when steps are read back",
        "otel_valgen/selection.py",
        """    elif isinstance(record, EndRecord):
        source = (record.source, record.instance)""",
        """    elif isinstance(record, EndRecord):
        source = (record.source, "")""",
        ("tests/test_show_attempts.py", "tests/test_lifecycle.py"),
    ),
    Mutation(
        "py.selection.complete_sources_expected",
        "a step read back is complete only when sources_expected sources ended",
        "otel_valgen/selection.py",
        "group.starts <= ended and len(ended) >= (group.sources_expected or 0)",
        "group.starts <= ended",
        ("tests/test_show_attempts.py", "tests/test_lifecycle.py"),
    ),
    Mutation(
        "py.balance.every_reason",
        "a step's dropped generations cover every reason (seen = kept + dropped)",
        "otel_valgen/balance.py",
        'DROP_REASONS: Final = ("sampled", "source", "invalid", "undelivered", "not_ended")',
        'DROP_REASONS: Final = ("sampled", "source", "invalid", "undelivered")',
        ("tests/test_show_attempts.py",),
    ),
    Mutation(
        "py.balance.emitted_at_least_kept",
        "a source emitted at least the records kept from it (an older part's end record)",
        "otel_valgen/balance.py",
        "emitted = max(source.emitted, source.kept)",
        "emitted = source.emitted",
        ("tests/test_show_attempts.py",),
    ),
    Mutation(
        "py.splits.overlap",
        "attempts are concurrent only when their record times overlap (a resumed launch is not)",
        "otel_valgen/splits.py",
        "if not self.sources or not other.sources or self.first > other.last or other.first > self.last:",
        "if not self.sources or not other.sources:",
        ("tests/test_show_attempts.py", "tests/exporter/test_split_launch.py"),
    ),
    Mutation(
        "py.splits.disjoint",
        "attempts that share a source are not concurrent",
        "otel_valgen/splits.py",
        "return self.sources.isdisjoint(other.sources)",
        "return True",
        ("tests/test_show_attempts.py", "tests/exporter/test_split_launch.py"),
    ),
    Mutation(
        "py.selection.summary_mark",
        "show takes the sampler's valgen.attempts_concurrent over what the files hold",
        "otel_valgen/selection.py",
        "if group.summary is not None and group.summary.attempts_concurrent is not None:",
        "if group.summary is not None and group.summary.attempts_concurrent is None:",
        ("tests/test_show_attempts.py",),
    ),
    Mutation(
        "py.selection.kind",
        "show selects one kind at a time: a step's validation and rollouts never share a group",
        "otel_valgen/selection.py",
        "        if record.kind != kind:\n            continue",
        "        if False:\n            continue",
        ("tests/test_rollouts.py", "tests/test_show_attempts.py"),
    ),
    Mutation(
        "py.group_view.prompt",
        "the group view keeps whole prompts: responses are kept or dropped with their prompt",
        "otel_valgen/sampling.py",
        "        return self._prompts.offer(prompt, {order: item})",
        "        return self._prompts.offer(order, {order: item})",
        ("tests/test_rollouts.py", "tests/test_show_attempts.py"),
    ),
    Mutation(
        "py.emitter.kind_part",
        "a process's validation and rollouts of one step are separate parts",
        "otel_valgen/_emitter.py",
        "        key = (step, source, kind)\n        state = self._parts.get(key)",
        "        key = (step, source, contract.KIND_VALIDATION)\n        state = self._parts.get(key)",
        ("tests/test_rollouts.py",),
    ),
    Mutation(
        "py.selection.late_never_sampled",
        "late forwarded generations are never a step's sample, also when its summary is not in the files",
        "otel_valgen/selection.py",
        "    elif not record.late:\n        source = _source_of(record)",
        "    else:\n        source = _source_of(record)",
        ("tests/test_show_attempts.py",),
    ),
    Mutation(
        "py.selection.attempt_needs_summary",
        "in collector output an attempt without a summary is never chosen, nor counted in attempts",
        "otel_valgen/selection.py",
        "        if (run_id, step) in collector_steps and group.summary is None:\n            continue",
        "        pass",
        ("tests/test_show_attempts.py",),
    ),
    Mutation(
        "py.selection.show_count",
        "show --count k on collector output shows at most k (k = 0 too)",
        "otel_valgen/selection.py",
        "    k = count if count is not None else (record.sample_count or DEFAULT_COUNT)",
        "    k = record.sample_count or DEFAULT_COUNT",
        ("tests/test_show_attempts.py",),
    ),
    Mutation(
        "py.cli.csv_rank_from_one",
        "CSV ranks start at 1, like valgen.rank",
        "otel_valgen/cli/main.py",
        "        for rank, g in enumerate(selection.generations, start=1):\n            writer.writerow(",
        "        for rank, g in enumerate(selection.generations):\n            writer.writerow(",
        ("tests/test_show_attempts.py",),
    ),
    # --- Python: the exporter service and its backends ----------------------------------------
    Mutation(
        "py.wandb.verl_idempotent",
        "a second push (verl layout) with the same state folder writes no step again",
        "otel_valgen/exporter/backends/wandb.py",
        "if self.ledger.is_committed(*step.key):\n                if new_ids:",
        "if False:\n                if new_ids:",
        ("tests/exporter/test_layouts.py",),
    ),
    Mutation(
        "py.wandb.verl_rows_added",
        "a verl-layout step adds one row",
        "otel_valgen/exporter/backends/wandb.py",
        "data=html_cells(data)), 1",
        "data=html_cells(data)), len(step.generations)",
        ("tests/exporter/test_layouts.py",),
    ),
    Mutation(
        "py.wandb.rows_added",
        "a rows-layout write reports the rows it added, not the step's kept count",
        "otel_valgen/exporter/backends/wandb.py",
        "self._rows_table(target, step.kind, columns, html_cells(rows)), len(rows)",
        "self._rows_table(target, step.kind, columns, html_cells(rows)), len(step.generations)",
        ("tests/exporter/test_layouts.py",),
    ),
    Mutation(
        "py.wandb.rows_skip_committed",
        "the rows layout never writes a sample id the ledger has",
        "otel_valgen/exporter/backends/wandb.py",
        "columns, rows = rows_layout(step, skip=committed)",
        "columns, rows = rows_layout(step)",
        ("tests/exporter/test_layouts.py", "tests/exporter/test_service.py"),
    ),
    Mutation(
        "py.wandb.width_widest_row",
        "the verl table is as wide as its widest row",
        "otel_valgen/exporter/tables.py",
        'width = max(((len(row["cells"]) - 1) // 3 for row in wide), default=0)',
        'width = (len(wide[-1]["cells"]) - 1) // 3 if wide else 0',
        ("tests/exporter/test_layouts.py",),
    ),
    Mutation(
        "py.exporter.late_dropped",
        "a late generation the sampler forwarded is not part of a step",
        "otel_valgen/exporter/steps.py",
        "            if record.late:",
        "            if False:",
        ("tests/exporter/test_steps.py",),
    ),
    Mutation(
        "py.exporter.backend_ledgers",
        "a step already written to one backend is not written to it again after another one's outage",
        "otel_valgen/exporter/backends/__init__.py",
        "return backend.ledger.is_committed(*step.key) and step.samplers <= backend.ledger.samplers(*step.key)",
        "return False",
        ("tests/exporter/test_mlflow.py", "tests/exporter/test_tensorboard.py"),
    ),
    Mutation(
        "py.exporter.split_launch",
        "the exporter warns once about a step whose attempts ran at the same time with no common source",
        "otel_valgen/exporter/service.py",
        "split = [(step, n) for step in assembled.steps if (n := self._splits.observe(step))]",
        "split = [(step, n) for step in assembled.steps if (n := 0)]",
        ("tests/exporter/test_split_launch.py",),
    ),
    Mutation(
        "py.exporter.outage_isolated",
        "one backend's outage refuses requests only when it holds max_pending_steps",
        "otel_valgen/exporter/service.py",
        "if all(worker.failing for worker in self.workers):",
        "if any(worker.failing for worker in self.workers):",
        ("tests/exporter/test_mlflow.py",),
    ),
    Mutation(
        "py.trackio.read_back",
        "a Trackio step the store did not keep (a locked store only warns) is written again, not committed",
        "otel_valgen/exporter/backends/trackio.py",
        "if not self._stored(project, name, run.id, step.step, probe):",
        "if False:",
        ("tests/exporter/test_trackio.py",),
    ),
    Mutation(
        "py.tensorboard.inside_root",
        "the TensorBoard backend never writes outside its root",
        "otel_valgen/exporter/backends/tensorboard.py",
        "if candidate == root or root in candidate.parents:",
        "if True:",
        ("tests/exporter/test_tensorboard.py",),
    ),
    Mutation(
        "py.push.attempt_complete",
        "push marks an attempt complete only when its summary says so (a later complete attempt is written)",
        "otel_valgen/exporter/push.py",
        "attempt_complete=selection.complete,",
        "attempt_complete=True,",
        ("tests/exporter/test_push.py",),
    ),
    Mutation(
        "py.ledger.restart_keeps_start",
        "after a restart the ledger knows when the shown attempt started: an older one never replaces it",
        "otel_valgen/exporter/ledger.py",
        'shown = ShownAttempt(key[2], int(entry.get("attempt_start", 0)), bool(entry.get("complete", True)))',
        'shown = ShownAttempt(key[2], 0, bool(entry.get("complete", True)))',
        ("tests/exporter/test_ledger.py",),
    ),
    Mutation(
        "py.backends.commit_real_attempt",
        "MLflow, TensorBoard, ClearML and Trackio record a step under its real attempt: a retry writes nothing",
        "otel_valgen/exporter/backends/__init__.py",
        "step.group_id, step.step, sample_ids, shown=step.shown_attempt(), kind=step.kind, samplers=step.samplers",
        "step.group_id, step.step, sample_ids, kind=step.kind, samplers=step.samplers",
        (
            "tests/exporter/test_tensorboard.py",
            "tests/exporter/test_mlflow.py",
            "tests/exporter/test_clearml.py",
            "tests/exporter/test_trackio.py",
        ),
    ),
    Mutation(
        "py.ledger.kinds_apart",
        "a rollout step is not taken as written because the same (run, step, attempt) of validation was",
        "otel_valgen/exporter/ledger.py",
        "            return (group, step, attempt, kind) in self._committed",
        "            return (group, step, attempt, VALIDATION) in self._committed",
        ("tests/exporter/test_ledger.py",),
    ),
    Mutation(
        "py.exporter.rollouts_by_prompt",
        "a rollout step's responses are written by prompt (the group view's order), ranked or not",
        "otel_valgen/exporter/steps.py",
        "key=_rollout_order_key if kind == contract.KIND_ROLLOUT else _order_key",
        "key=_order_key",
        ("tests/exporter/test_steps.py", "tests/exporter/test_push.py"),
    ),
    Mutation(
        "py.backends.rollout_key",
        "every backend writes rollout steps under the rollout key, never into the validation table",
        "otel_valgen/exporter/backends/__init__.py",
        "return self.rollout_key if step.rollout else self.table_key",
        "return self.table_key",
        ("tests/exporter/test_tensorboard.py", "tests/exporter/test_layouts.py"),
    ),
    # --- Python: the verl integration (real verl 0.9.1) ------------------------------------------
    Mutation(
        "py.verl.default_k_without_key",
        "a trainer config without trainer.log_val_generations logs with the default k (only 0 disables)",
        "otel_valgen/integrations/verl/_validation.py",
        "    if count == 0:\n        return None",
        "    if not count:\n        return None",
        ("tests/verl/test_sync.py", "tests/test_verl.py"),
    ),
    Mutation(
        "py.verl.own_param_version",
        "a trainer validating by itself logs at its current_param_version, as trainer",
        "otel_valgen/integrations/verl/_validation.py",
        "    if isinstance(own_version, int):  # a fully-async trainer validating by itself",
        "    if False:  # a fully-async trainer validating by itself",
        ("tests/verl/test_sync.py", "tests/test_verl.py"),
    ),
    # --- Python: verl's full validation row, read from _validate ------------------------------------
    Mutation(
        "py.verl_rows.score_column_left_out",
        "reward_extra_infos_dict's reward column (the score) is not sent again as an extra column",
        "otel_valgen/integrations/verl/_rows.py",
        "            if name != SCORE_COLUMN and _one_per_generation(values, size) is not None",
        "            if _one_per_generation(values, size) is not None",
        ("tests/verl/test_sync.py",),
    ),
    Mutation(
        "py.verl_rows.sizes_tallied",
        "each validation batch's response lengths and truncation are tallied while _validate runs",
        "otel_valgen/integrations/verl/_rows.py",
        "        if tallies is not None:\n            _tally_batch(tallies, batch)",
        "        if False:\n            _tally_batch(tallies, batch)",
        ("tests/verl/test_sync.py",),
    ),
    Mutation(
        "py.verl_rows.batched_sources_flattened",
        "the legacy _validate's per-batch data source arrays become one data source per generation",
        "otel_valgen/integrations/verl/_rows.py",
        "        sources = [value for batch in sources for value in _as_list(batch)]",
        "        sources = list(sources)",
        ("tests/verl/test_sync.py",),
    ),
    # ===== Partial groups, rollouts, launches and Ray: each rule killed by the fast tests next to its module =====
    # --- Python: parts of one step closed by different samplers (otel_valgen/partials.py) ----------
    Mutation(
        "py.partials.end_seen_largest",
        "a source's end counts in two parts are cumulative: the merge takes the largest seen, not their sum",
        "otel_valgen/partials.py",
        'self.seen = max(self.seen, _int(figure, "seen"))',
        'self.seen += _int(figure, "seen")',
        ("tests/test_partials.py",),
    ),
    Mutation(
        "py.partials.end_emitted_largest",
        "a source's end counts in two parts are cumulative: the merge takes the largest emitted, not their sum",
        "otel_valgen/partials.py",
        'self.emitted = max(self.emitted, _int(figure, "emitted"))',
        'self.emitted += _int(figure, "emitted")',
        ("tests/test_partials.py",),
    ),
    Mutation(
        "py.partials.progress_largest",
        "a source's progress counts in two parts are cumulative: the merge takes the largest, not their sum",
        "otel_valgen/partials.py",
        'self.progress_seen = max(self.progress_seen, _int(figure, "progress_seen"))',
        'self.progress_seen += _int(figure, "progress_seen")',
        ("tests/test_partials.py",),
    ),
    Mutation(
        "py.partials.received_add",
        "a source's arrivals at different samplers are disjoint: the merge adds them up",
        "otel_valgen/partials.py",
        'self.received += _int(figure, "received")',
        'self.received = max(self.received, _int(figure, "received"))',
        ("tests/test_partials.py",),
    ),
    Mutation(
        "py.partials.invalid_add",
        "a source's invalid arrivals at different samplers add up in the merge (dropped.invalid)",
        "otel_valgen/partials.py",
        'self.invalid += _int(figure, "invalid")',
        'self.invalid = max(self.invalid, _int(figure, "invalid"))',
        ("tests/test_partials.py",),
    ),
    Mutation(
        "py.partials.score_of_latest_end",
        "the merged score statistics are those of the source's latest end record, whatever order the parts come in",
        "otel_valgen/partials.py",
        'if not self.ended or _int(figure, "seen") >= self.seen:',
        "if not self.ended:",
        ("tests/test_partials.py",),
    ),
    Mutation(
        "py.partials.prompts_seen_largest",
        "a rollout source's prompts seen in two parts are cumulative: the merge takes the largest",
        "otel_valgen/partials.py",
        'self.prompts_seen = max(self.prompts_seen, _int(figure, "prompts_seen"))',
        'self.prompts_seen += _int(figure, "prompts_seen")',
        ("tests/test_partials.py",),
    ),
    Mutation(
        "py.partials.sources_missing",
        "a source that ended in no part is listed in valgen.sources_missing and the merged step is not complete",
        "otel_valgen/partials.py",
        "out[contract.SOURCES_MISSING] = sorted(set(sources) - ended)",
        "out[contract.SOURCES_MISSING] = []",
        ("tests/test_partials.py",),
    ),
    Mutation(
        "py.partials.complete_needs_expected",
        "a merged step is complete only when at least sources_expected sources ended",
        "otel_valgen/partials.py",
        "    complete = complete and len(ended) >= expected\n",
        "",
        ("tests/test_partials.py",),
    ),
    Mutation(
        "py.partials.smallest_k",
        "the merged summary's valgen.sample_count is the smallest k a part kept to",
        "otel_valgen/partials.py",
        "out[contract.SAMPLE_COUNT] = min(ks)",
        "out[contract.SAMPLE_COUNT] = max(ks)",
        ("tests/test_partials.py",),
    ),
    Mutation(
        "py.partials.earliest_start",
        "a merged attempt started when its earliest part did",
        "otel_valgen/partials.py",
        "out[contract.ATTEMPT_START] = min(starts, default=0)",
        "out[contract.ATTEMPT_START] = max(starts, default=0)",
        ("tests/test_partials.py",),
    ),
    Mutation(
        "py.partials.no_figures_no_merge",
        "parts from a collector without source figures are not merged by counts: the first part stands, all named",
        "otel_valgen/partials.py",
        "        if not isinstance(figures, list):\n            return None",
        "        if not isinstance(figures, list):\n            continue",
        ("tests/test_partials.py",),
    ),
    # --- Python: the exporter service's parts of recent steps (otel_valgen/exporter/parts.py) ------
    Mutation(
        "py.parts.resent_not_merged_twice",
        "a part its sampler sends again (a retried request) is not counted as merged twice",
        "otel_valgen/exporter/parts.py",
        "new = sampler not in parts",
        "new = True",
        ("tests/exporter/test_parts.py",),
    ),
    Mutation(
        "py.parts.forget_oldest",
        "past max_steps the parts of the oldest step are forgotten, never those of the step just received",
        "otel_valgen/exporter/parts.py",
        "                old, _ = self._parts.popitem(last=False)",
        "                old, _ = self._parts.popitem(last=True)",
        ("tests/exporter/test_parts.py",),
    ),
    Mutation(
        "py.parts.unmerged_counted",
        "a part of a step whose other parts were forgotten is counted (parts_unmerged)",
        "otel_valgen/exporter/parts.py",
        "                if step.key in self._forgotten:",
        "                if False:",
        ("tests/exporter/test_parts.py",),
    ),
    Mutation(
        "py.parts.arrival_order",
        "the merged step does not depend on the order its parts arrived",
        "otel_valgen/exporter/parts.py",
        "ordered = [parts[name] for name in sorted(parts)]",
        "ordered = list(parts.values())",
        ("tests/exporter/test_parts.py",),
    ),
    Mutation(
        "py.parts.restart_keeps_parts",
        "the parts kept in the state folder merge with a part arriving after a restart",
        "otel_valgen/exporter/parts.py",
        "                self._parts.setdefault(step.key, {})[sampler_of(step.summary)] = step",
        "                self._parts.setdefault(step.key, {})",
        ("tests/exporter/test_parts.py",),
    ),
    # --- Python: show/push cutting and merging the parts they read (otel_valgen/selection.py) -------
    Mutation(
        "py.selection.parts_k_smallest",
        "parts read back are cut to the smallest k any part's sampler kept to",
        "otel_valgen/selection.py",
        "return min(asked) if asked else None",
        "return max(asked) if asked else None",
        ("tests/test_selection.py",),
    ),
    Mutation(
        "py.selection.cut_kept_by_key",
        "the kept records of parts read back are the bottom-k of their union, by sort key",
        "otel_valgen/selection.py",
        "    order = sort_key_of(record, seed, key_version)\n",
        "    order = SortKey.of(0, record.sample_id)\n",
        ("tests/test_selection.py",),
    ),
    Mutation(
        "py.selection.cut_kept_prompts_whole",
        "rollout parts read back keep the bottom-k prompts, each with all its responses",
        "otel_valgen/selection.py",
        "prompt = prompt_key_of(record, seed, key_version or LEGACY_KEY_VERSION)",
        "prompt = order",
        ("tests/test_selection.py",),
    ),
    Mutation(
        "py.selection.parts_summaries_merged",
        "show merges the summaries of a step's parts closed by different samplers",
        "otel_valgen/selection.py",
        "        if len(parts) > 1:\n            summary = Summary(",
        "        if False:\n            summary = Summary(",
        ("tests/test_selection.py",),
    ),
    Mutation(
        "py.selection.part_per_sampler",
        "a sampler's summary read twice is one part: not merged with itself, its arrivals not counted twice",
        "otel_valgen/selection.py",
        "group.parts[sampler_of(record.attributes)] = record",
        "group.parts[str(len(group.parts))] = record",
        ("tests/test_selection.py",),
    ),
    # --- Python: the exporter's watch for launches split into attempts (split_watch.py) -----------
    Mutation(
        "py.split_watch.kinds_apart",
        "a step's validation and its rollouts are watched apart: one running beside the other is no split",
        "otel_valgen/exporter/split_watch.py",
        "key = (step.group_id, step.step, step.kind)",
        'key = (step.group_id, step.step, "")',
        ("tests/exporter/test_split_watch.py",),
    ),
    Mutation(
        "py.split_watch.span_from_start",
        "an attempt's span runs from its start (valgen.attempt_start), not from its first kept record",
        "otel_valgen/exporter/split_watch.py",
        "    first = step.attempt_start\n",
        "    first = min((g.timestamp for g in step.generations), default=step.attempt_start)\n",
        ("tests/exporter/test_split_watch.py",),
    ),
    Mutation(
        "py.split_watch.forget_oldest",
        "the watch remembers the last max_steps steps: the oldest is forgotten, never the one just seen",
        "otel_valgen/exporter/split_watch.py",
        "        if len(self._steps) > self._max_steps:\n            self._steps.popitem(last=False)",
        "        if len(self._steps) > self._max_steps:\n            self._steps.popitem(last=True)",
        ("tests/exporter/test_split_watch.py",),
    ),
    Mutation(
        "py.split_watch.report_once",
        "a split step is reported once, also when a third concurrent attempt arrives",
        "otel_valgen/exporter/split_watch.py",
        "if not involved or key in self._reported:",
        "if not involved:",
        ("tests/exporter/test_split_watch.py",),
    ),
    # --- Python: the exporter's /metrics (otel_valgen/exporter/metrics.py) ---------------------------
    Mutation(
        "py.metrics.flagged_merged",
        'steps merged from parts of several samplers are counted as steps_flagged_total{reason="merged"}',
        "otel_valgen/exporter/metrics.py",
        '"merged": "merged_steps",',
        '"merged": "split_steps",',
        ("tests/exporter/test_metrics.py::test_merged_parts_and_set_aside_records_are_counted_by_reason",),
    ),
    Mutation(
        "py.metrics.flagged_part_unmerged",
        'only parts whose step was forgotten count as steps_flagged_total{reason="part_unmerged"}',
        "otel_valgen/exporter/metrics.py",
        '"part_unmerged": "parts_unmerged",',
        '"part_unmerged": "merged_steps",',
        ("tests/exporter/test_metrics.py::test_merged_parts_and_set_aside_records_are_counted_by_reason",),
    ),
    Mutation(
        "py.metrics.dropped_late",
        'late generations are counted as records_dropped_total{reason="late"}, apart from duplicates',
        "otel_valgen/exporter/metrics.py",
        '"late": "late_dropped"',
        '"late": "duplicates"',
        ("tests/exporter/test_metrics.py::test_merged_parts_and_set_aside_records_are_counted_by_reason",),
    ),
    Mutation(
        "py.metrics.backend_down",
        "backend_up is 0 while the last write found the tracker unavailable",
        "otel_valgen/exporter/metrics.py",
        'up.add_metric([name], 0 if worker["failing"] else 1)',
        "up.add_metric([name], 1)",
        ("tests/exporter/test_metrics.py::test_a_tracker_down_holds_spools_and_requeues_its_step",),
    ),
    Mutation(
        "py.metrics.steps_held",
        "steps_held is the backend's queue depth: a step held during an outage shows",
        "otel_valgen/exporter/metrics.py",
        'held.add_metric([name], worker["pending"])',
        "held.add_metric([name], 0)",
        ("tests/exporter/test_metrics.py::test_a_tracker_down_holds_spools_and_requeues_its_step",),
    ),
    Mutation(
        "py.metrics.requeued",
        "steps queued again from the spool at start are counted as requeued, apart from those spooled at stop",
        "otel_valgen/exporter/metrics.py",
        'requeued.add_metric([name], worker["requeued"])',
        'requeued.add_metric([name], worker["spooled"])',
        ("tests/exporter/test_metrics.py::test_a_tracker_down_holds_spools_and_requeues_its_step",),
    ),
    # --- Go: the per-source figures of a part (partials.go) ----------------------------------------
    Mutation(
        "go.partials.received_valid_only",
        "a source's figure counts its valid arrivals in received and its invalid ones apart (never twice when merged)",
        _go("partials.go"),
        "m.PutInt(figureReceived, s.received)",
        "m.PutInt(figureReceived, s.arrived())",
        GO,
    ),
    Mutation(
        "go.partials.invalid",
        "a source's figure carries its invalid arrivals (the merged dropped.invalid)",
        _go("partials.go"),
        "m.PutInt(figureInvalid, s.invalid)",
        "m.PutInt(figureInvalid, 0)",
        GO,
    ),
    Mutation(
        "go.partials.announced",
        "a source's figure says announced only when its start record arrived",
        _go("partials.go"),
        "m.PutBool(figureAnnounced, s.announced)",
        "m.PutBool(figureAnnounced, s.announced || s.ended)",
        GO,
    ),
    Mutation(
        "go.partials.scores_reported_only",
        "a source's figure carries score statistics only when its end record reported them",
        _go("partials.go"),
        "if s.end.scores.reported {",
        "if s.ended {",
        GO,
    ),
    # --- Go: attempts of one step that ran at the same time (concurrent.go) ------------------------
    Mutation(
        "go.concurrent.same_step_only",
        "only attempts of the same step are compared: another step running at the same time is no split",
        _go("concurrent.go"),
        "if other != g && other.stepKey() == fp.step && fp.concurrentWith(other.footprint()) {",
        "if other != g && fp.concurrentWith(other.footprint()) {",
        GO,
    ),
    Mutation(
        "go.concurrent.kinds_apart",
        "a step's rollouts running beside its validation in another process are no split",
        _go("concurrent.go"),
        "return strings.TrimSuffix(g.key, attemptKey(g.attempt))",
        "return strings.TrimSuffix(g.key, kindKey(g.kind)+attemptKey(g.attempt))",
        GO,
    ),
    Mutation(
        "go.concurrent.source_instance",
        "a source is (valgen.source, service.instance.id): two processes of one source name are two sources",
        _go("concurrent.go"),
        'xxhash.Sum64String(id.name+"\\x00"+id.instance)',
        "xxhash.Sum64String(id.name)",
        GO,
    ),
    Mutation(
        "go.concurrent.span_to_last",
        "an attempt's span runs to its latest record time",
        _go("concurrent.go"),
        "first: g.attemptStart, last: g.attemptLast}",
        "first: g.attemptStart, last: g.attemptStart}",
        GO,
    ),
    # --- Python: log_rollouts -----------------------------------------------------------------------
    Mutation(
        "py.rollouts.advantage_column",
        "each response's valgen.advantage is its own advantages value (not its reward)",
        "otel_valgen/_rollouts.py",
        'advantages=columns["advantages"],',
        'advantages=columns["rewards"],',
        ("tests/test_rollouts.py",),
    ),
    Mutation(
        "py.rollouts.param_version_column",
        "param_versions reach each response as valgen.param_version",
        "otel_valgen/_rollouts.py",
        'param_versions=columns["param_versions"],',
        "param_versions=None,",
        ("tests/test_rollouts.py",),
    ),
    Mutation(
        "py.rollouts.truncated_column",
        "truncated reaches each response as valgen.truncated",
        "otel_valgen/_rollouts.py",
        'truncated=columns["truncated"],',
        "truncated=None,",
        ("tests/test_rollouts.py",),
    ),
    Mutation(
        "py.rollouts.data_source_column",
        "data_sources reach each response as valgen.data_source",
        "otel_valgen/_rollouts.py",
        'data_sources=columns["data_sources"],',
        "data_sources=None,",
        ("tests/test_rollouts.py",),
    ),
    Mutation(
        "py.rollouts.prompt_id_column",
        "given prompt_ids are the prompts' ids (and keys), not a hash of the prompt text",
        "otel_valgen/_rollouts.py",
        'prompt_ids=columns["prompt_ids"],',
        "prompt_ids=None,",
        ("tests/test_rollouts.py",),
    ),
    Mutation(
        "py.rollouts.count_argument",
        "log_rollouts(count=k) keeps k prompts, over rollout_count (also when rollouts are off)",
        "otel_valgen/_rollouts.py",
        "k = count if count is not None else (emitter.settings.rollout_count if emitter is not None else 0)",
        "k = emitter.settings.rollout_count if emitter is not None else 0",
        ("tests/test_rollouts.py",),
    ),
    Mutation(
        "py.rollouts.source_argument",
        "log_rollouts(source=...) names the emitting part",
        "otel_valgen/_rollouts.py",
        "name = source or emitter.settings.source",
        "name = emitter.settings.source",
        ("tests/test_rollouts.py",),
    ),
    Mutation(
        "py.rollouts.length_mismatch",
        "columns of unequal lengths drop the call, counted as dropped.length_mismatch",
        "otel_valgen/_rollouts.py",
        "if len(set(lengths.values())) > 1:",
        "if False:",
        ("tests/test_rollouts.py",),
    ),
    Mutation(
        "py.rollouts.off_counts_nothing",
        "with rollouts off (k = 0) a call returns 0 at once, computing and counting nothing",
        "otel_valgen/_rollouts.py",
        "    if emitter is not None and k == 0:\n        return 0",
        "    if False:\n        return 0",
        ("tests/test_rollouts.py",),
    ),
    # --- Python: the verl rollout hook (real verl 0.9.1 DataProto and trainers, in one process) ---------
    Mutation(
        "py.verl_rollouts.prompt_id_text",
        "a text-only prompt's id is log_rollouts' id of its decoded text (what verl's dump writes as input)",
        "otel_valgen/integrations/verl_rollouts.py",
        "return base_sample_id(None, text)",
        'return xxhash.xxh64_hexdigest(text.encode("utf-16"))',
        ("tests/test_verl_rollouts.py",),
    ),
    Mutation(
        "py.verl_rollouts.uid_repeat_suffix",
        "the same prompt under two uids of one batch is two groups: the later uid's id gets .<j>",
        "otel_valgen/integrations/verl_rollouts.py",
        'ids[group] = f"{base}.{seen}" if seen else base',
        "ids[group] = base",
        ("tests/test_verl_rollouts.py",),
    ),
    Mutation(
        "py.verl_rollouts.media_in_id",
        "a prompt's id covers its images: the same text with other images is another prompt",
        "otel_valgen/integrations/verl_rollouts.py",
        "base = prompt_id(texts[group], _media_bytes(media, row))",
        "base = prompt_id(texts[group])",
        ("tests/test_verl_rollouts.py",),
    ),
    Mutation(
        "py.verl_rollouts.length_response_mask",
        "the response length is response_mask summed: a multi-turn tool's tokens are not the model's",
        "otel_valgen/integrations/verl_rollouts.py",
        "lengths[pick] = mask.sum(axis=1)",
        "lengths[pick] = span",
        ("tests/test_verl_rollouts.py",),
    ),
    Mutation(
        "py.verl_rollouts.text_with_tool_tokens",
        "the response text is decoded from the response part of attention_mask, a tool's tokens included",
        "otel_valgen/integrations/verl_rollouts.py",
        "decode = _response_decoder(responses, rows.spans, tokenizer)",
        "decode = _response_decoder(responses, np.asarray(rows.lengths), tokenizer)",
        ("tests/test_verl_rollouts.py",),
    ),
    Mutation(
        "py.verl_rollouts.advantage_response_mask",
        "the advantage is averaged over response_mask, not over a tool's tokens",
        "otel_valgen/integrations/verl_rollouts.py",
        "kept = trained[pick, :wide].astype(bool) if trained is not None and trained is not response_mask else mask",
        "kept = _mask(span, wide)",
        ("tests/test_verl_rollouts.py",),
    ),
    Mutation(
        "py.verl_rollouts.advantage_mean",
        "the advantage is the mean over the response's tokens (GRPO's one value), not their sum",
        "otel_valgen/integrations/verl_rollouts.py",
        "float(total / count) if count else None",
        "float(total) if count else None",
        ("tests/test_verl_rollouts.py",),
    ),
    Mutation(
        "py.verl_rollouts.score_token_level_first",
        "the score is token_level_scores summed (verl's dump); rm_scores only without them",
        "otel_valgen/integrations/verl_rollouts.py",
        'for name in ("token_level_scores", "rm_scores"):',
        'for name in ("rm_scores", "token_level_scores"):',
        ("tests/test_verl_rollouts.py",),
    ),
    Mutation(
        "py.verl_rollouts.truncated_limit",
        "truncated means filling max_response_length (default the width of responses)",
        "otel_valgen/integrations/verl_rollouts.py",
        '"truncated": _truncated(responses, rows.spans, max_response_length or responses.shape[1], tokenizer),',
        '"truncated": _truncated(responses, rows.spans, responses.shape[1], tokenizer),',
        ("tests/test_verl_rollouts.py",),
    ),
    Mutation(
        "py.verl_rollouts.truncated_eos",
        "a response that fills the limit and ends on EOS is not truncated",
        "otel_valgen/integrations/verl_rollouts.py",
        "length >= limit and last_token not in eos",
        "length >= limit",
        ("tests/test_verl_rollouts.py",),
    ),
    Mutation(
        "py.verl_rollouts.param_version_max",
        "the param version is max_global_steps (the version that finished the response)",
        "otel_valgen/integrations/verl_rollouts.py",
        'PARAM_VERSION_KEY = "max_global_steps"',
        'PARAM_VERSION_KEY = "min_global_steps"',
        ("tests/test_verl_rollouts.py",),
    ),
    Mutation(
        "py.verl_rollouts.ground_truth",
        "the ground truth is reward_model's ground_truth",
        "otel_valgen/integrations/verl_rollouts.py",
        '"ground_truths": _ground_truths(non_tensor.get("reward_model")),',
        '"ground_truths": None,',
        ("tests/test_verl_rollouts.py",),
    ),
    Mutation(
        "py.verl_rollouts.given_extra_wins",
        "a given reward_extra_info replaces the batch's reward_extra_keys columns",
        "otel_valgen/integrations/verl_rollouts.py",
        "    if reward_extra_info is None:\n        keys = batch.meta_info",
        "    if True:\n        keys = batch.meta_info",
        ("tests/test_verl_rollouts.py",),
    ),
    Mutation(
        "py.verl_rollouts.off_reads_nothing",
        "with rollouts off the hook reads nothing of the batch",
        "otel_valgen/integrations/verl_rollouts.py",
        "        if not rollouts_on():\n            return 0\n        columns = rollout_columns(",
        "        columns = rollout_columns(",
        ("tests/test_verl_rollouts.py",),
    ),
    Mutation(
        "py.verl_rollouts.rollout_length_first",
        "the length limit is actor_rollout_ref.rollout.response_length, before data.max_response_length",
        "otel_valgen/integrations/verl_rollouts.py",
        'for path in (("actor_rollout_ref", "rollout", "response_length"), ("data", "max_response_length")):',
        'for path in (("data", "max_response_length"), ("actor_rollout_ref", "rollout", "response_length")):',
        ("tests/test_verl_rollouts.py",),
    ),
    Mutation(
        "py.verl_rollouts.separation_next_version",
        "a fully-async batch before the sync cycle's last local step belongs to the next version",
        "otel_valgen/integrations/verl_rollouts.py",
        'return version if getattr(trainer, "local_trigger_step", 1) == 1 else version + 1',
        "return version",
        ("tests/test_verl_rollouts.py",),
    ),
    Mutation(
        "py.verl_rollouts.separation_extra",
        "the fully-async trainer's reward_extra_infos_dict gives the extra columns",
        "otel_valgen/integrations/verl_rollouts.py",
        "reward_extra_info=extra or None,",
        "reward_extra_info=None,",
        ("tests/test_verl_rollouts.py",),
    ),
    # --- Python: the fully-async trainer's published step ----------------------------------------------
    Mutation(
        "py.trainer_step.latest_wins",
        "the rollouter reads the step the trainer published last",
        "otel_valgen/integrations/_trainer_step.py",
        "_internal_kv_put(key, value, overwrite=True, namespace=NAMESPACE)",
        "_internal_kv_put(key, value, overwrite=False, namespace=NAMESPACE)",
        ("tests/test_trainer_step.py",),
    ),
    Mutation(
        "py.trainer_step.job_scoped",
        "a trainer's step is read by its own Ray job only",
        "otel_valgen/integrations/_trainer_step.py",
        'return f"verl/trainer_step/{ray.get_runtime_context().get_job_id()}"',
        'return "verl/trainer_step/"',
        ("tests/test_trainer_step.py",),
    ),
    Mutation(
        "py.trainer_step.bool_not_a_step",
        "a bool assigned to current_param_version is no step: the last int step stays",
        "otel_valgen/integrations/_trainer_step.py",
        "    if not isinstance(step, int) or isinstance(step, bool):\n        return\n",
        "    if not isinstance(step, int):\n        return\n",
        ("tests/test_trainer_step.py",),
    ),
    Mutation(
        "py.trainer_step.no_made_up_run_id",
        "a run id the trainer would only make up (generated) is not published",
        "otel_valgen/integrations/_trainer_step.py",
        '        if origin == "generated":\n            run_id = None',
        "        if False:\n            run_id = None",
        ("tests/test_trainer_step.py",),
    ),
    Mutation(
        "py.trainer_step.runs_resource",
        "the trainer's tracker runs (resource attributes) reach the rollouter with its step",
        "otel_valgen/integrations/_trainer_step.py",
        '_strings(entry.get("resource")))',
        "{})",
        ("tests/test_trainer_step.py",),
    ),
    # --- Python: Ray workers' settings and setup hook --------------------------------------------------
    Mutation(
        "py.ray.job_env_wins",
        "a variable the job's runtime env sets itself wins over the forwarded one",
        "otel_valgen/ray.py",
        'env_vars = {**worker_env(), **dict(merged.get("env_vars") or {})}',
        'env_vars = {**dict(merged.get("env_vars") or {}), **worker_env()}',
        ("tests/test_ray_runtime_env_hook.py",),
    ),
    Mutation(
        "py.ray.default_run_id",
        "a run id not set explicitly goes as OTEL_VALGEN_DEFAULT_RUN_ID (a worker's own wandb run comes first)",
        "otel_valgen/ray.py",
        "explicit = settings.run_id_origin in RUN_ID_EXPLICIT",
        "explicit = True",
        ("tests/test_ray_runtime_env_hook.py",),
    ),
    Mutation(
        "py.ray.forwarded_rows_only",
        "only the settings table's forwarded variables go to workers (not each process's own source)",
        "otel_valgen/ray.py",
        "for name in FORWARDED_ENV if os.environ.get(name)}",
        "for name in variable_names() if os.environ.get(name)}",
        ("tests/test_ray_runtime_env_hook.py",),
    ),
    Mutation(
        "py.ray.forward_set_only",
        "an empty variable is not forwarded",
        "otel_valgen/ray.py",
        "for name in FORWARDED_ENV if os.environ.get(name)}",
        "for name in FORWARDED_ENV if name in os.environ}",
        ("tests/test_ray_runtime_env_hook.py",),
    ),
    Mutation(
        "py.ray.presample_off",
        "a driver's presample off reaches its workers",
        "otel_valgen/ray.py",
        '"true" if settings.presample else "false"',
        '"true"',
        ("tests/test_ray_runtime_env_hook.py",),
    ),
    Mutation(
        "py.ray.dir_absolute",
        "workers get the driver's sink folder as an absolute path",
        "otel_valgen/ray.py",
        "os.path.abspath(settings.directory)",
        "settings.directory",
        ("tests/test_ray_runtime_env_hook.py",),
    ),
    Mutation(
        "py.ray.rollout_count_forwarded",
        "the driver's rollout k reaches its workers",
        "otel_valgen/ray.py",
        "values[env.OTEL_VALGEN_ROLLOUT_COUNT] = str(settings.rollout_count)",
        "_ = settings.rollout_count",
        ("tests/test_ray_runtime_env_hook.py",),
    ),
    Mutation(
        "py.ray.chain_ray_variable",
        "a job's hook found only in Ray's setup-hook variable (job submission) is chained",
        "otel_valgen/ray.py",
        "chained = inherited if inherited not in (None, SETUP_HOOK) else hook",
        "chained = hook",
        ("tests/test_ray_runtime_env_hook.py",),
    ),
    Mutation(
        "py.ray.chain_function",
        "a job's setup function is wrapped and still runs in every worker, never dropped",
        "otel_valgen/ray.py",
        'merged["worker_process_setup_hook"] = _after(chained)',
        'merged["worker_process_setup_hook"] = SETUP_HOOK',
        ("tests/test_ray_runtime_env_hook.py",),
    ),
    Mutation(
        "py.ray.never_chains_itself_driver",
        "runtime_env() over a runtime env that already has otel-valgen's hook chains nothing",
        "otel_valgen/ray.py",
        "if isinstance(chained, str) and chained and chained != SETUP_HOOK:",
        "if isinstance(chained, str) and chained:",
        ("tests/test_ray_runtime_env_hook.py",),
    ),
    Mutation(
        "py.ray.never_chains_itself_worker",
        "a worker whose chained hook is otel-valgen's own runs its setup once (no recursion)",
        "otel_valgen/ray.py",
        "    if not chained or chained == SETUP_HOOK:\n        return",
        "    if not chained:\n        return",
        ("tests/test_ray_runtime_env_hook.py",),
    ),
    # --- Python and Go: distinct generations ----------------------------------------------------
    Mutation(
        "py.records.part_tag",
        "two parts answering one prompt are two records: a validation id carries its part's tag",
        "otel_valgen/_records.py",
        'sample_id = f"{ids.base(index)}/{numbered[index] - 1 if numbered is not None else 0}@{tag}".encode()',
        'sample_id = f"{ids.base(index)}/{numbered[index] - 1 if numbered is not None else 0}".encode()',
        ("tests/test_embedded_and_cli.py", "tests/test_api.py"),
    ),
    Mutation(
        "py.records.rollout_part_tag",
        "two processes rolling out one prompt keep every response: a rollout id carries its part's tag",
        "otel_valgen/_records.py",
        'sample_id = f"{pid}/{lanes[pid]}@{tag}"',
        'sample_id = f"{pid}/{lanes[pid]}"',
        ("tests/test_embedded_and_cli.py",),
    ),
    Mutation(
        "py.records.lanes_over_calls",
        "a second sampling pass over the same prompts in a later call of the part gets the next lane, not /0 again",
        "otel_valgen/_records.py",
        "if self._first is None and self._counts is None:",
        "if True:",
        ("tests/test_sampling.py", "tests/test_embedded_and_cli.py"),
    ),
    Mutation(
        "py.emitter.tag_per_part",
        "each part draws its own tag, so two processes never share one",
        "otel_valgen/_emitter.py",
        "tag: str = field(default_factory=new_part_tag)",
        'tag: str = "000000000000"',
        ("tests/test_embedded_and_cli.py",),
    ),
    Mutation(
        "py.sampling.split_tag",
        "the tag after a response index is not part of the key: <base>/<i>@<tag> keys as <base>/<i>",
        "otel_valgen/sampling.py",
        'digits = index.partition("@")[0]',
        "digits = index",
        ("tests/test_sampling.py",),
    ),
    Mutation(
        "go.samplekey.split_tag",
        "the collector keys <base>/<i>@<tag> as <base>/<i>, as the SDK does",
        _go("samplekey.go"),
        "if at := strings.IndexByte(digits, '@'); at >= 0 {",
        "if at := strings.IndexByte(digits, '@'); at > len(digits) {",
        GO,
    ),
    # --- Python: launches and run ids (otel_valgen/_identity.py, _launch_group.py) ----------------
    Mutation(
        "py.launch_group.running_joins",
        "a process started while a process of its group's launch still runs joins that launch",
        "otel_valgen/_launch_group.py",
        "if recorded is not None and (running or together):",
        "if recorded is not None and together:",
        ("tests/test_launchers.py",),
    ),
    Mutation(
        "py.launch_group.rerun_is_new",
        "a process of the group configuring after the launch's processes ended (and 2 s later) starts a new launch",
        "otel_valgen/_launch_group.py",
        "together = recorded is not None and abs(joined - recorded[1]) <= STARTED_TOGETHER_S",
        "together = recorded is not None",
        ("tests/test_launchers.py",),
    ),
    Mutation(
        "py.launch_group.spans_hosts",
        "a job that may span hosts (WORLD_SIZE above LOCAL_WORLD_SIZE) falls back to one launch per run",
        "otel_valgen/_launch_group.py",
        "return world > 1 and world > local",
        "return False",
        ("tests/test_launchers.py",),
    ),
    Mutation(
        "py.launch_group.private_folder",
        "a launch folder other users could write is refused",
        "otel_valgen/_launch_group.py",
        "found.st_uid != os.getuid() or found.st_mode & 0o077:",
        "found.st_uid != os.getuid():",
        ("tests/test_launchers.py",),
    ),
    Mutation(
        "py.identity.launchers_before_process_group",
        "a launcher's id (Slurm, torchrun, MPI) wins over the process group's",
        "otel_valgen/_identity.py",
        """_LAUNCHERS: Final = (
    ("ray", ray_job_launch_id),""",
        """_LAUNCHERS: Final = (
    (LAUNCH_PROCESS_GROUP, _launch_group.launch_id),
    ("ray", ray_job_launch_id),""",
        ("tests/test_launchers.py",),
    ),
    Mutation(
        "py.identity.argument_beats_environment",
        "configure(launch_id=...) wins over OTEL_VALGEN_LAUNCH_ID",
        "otel_valgen/_identity.py",
        "if launch_id is not None and str(launch_id).strip():",
        "if launch_id is not None and str(launch_id).strip() and not os.environ.get(OTEL_VALGEN_LAUNCH_ID):",
        ("tests/test_launchers.py",),
    ),
    Mutation(
        "py.identity.restart_is_new_launch",
        "a launcher's restart (torchrun, Slurm requeue) is a new launch",
        "otel_valgen/_identity.py",
        'return f"{launch_id}-r{restarts}" if restarts else launch_id',
        "return launch_id",
        ("tests/test_launchers.py",),
    ),
    Mutation(
        "py.identity.tell_children_only_lost_ids",
        "only ids a child could not find itself go into OTEL_VALGEN_LAUNCH_ID (a launcher's are not)",
        "otel_valgen/_identity.py",
        '_TOLD_TO_CHILDREN: Final = frozenset({"argument", "ray"})',
        '_TOLD_TO_CHILDREN: Final = frozenset({"argument", "ray", "slurm", "process_group"})',
        ("tests/test_launchers.py",),
    ),
    Mutation(
        "py.settings.unnamed_launch_follows_ray",
        "a driver whose launch no launcher named (process group) moves to the Ray job's once connected",
        "otel_valgen/_settings.py",
        "if settings.launch_id_origin not in LAUNCH_UNNAMED:\n        return settings",
        'if settings.launch_id_origin != "fallback":\n        return settings',
        ("tests/test_launchers.py",),
    ),
    Mutation(
        "py.ray.unnamed_launch_not_forwarded",
        "a driver forwards no launch id that no launcher named: its workers use ray-<job id>",
        "otel_valgen/ray.py",
        "if settings.launch_id_origin not in LAUNCH_UNNAMED:",
        'if settings.launch_id_origin != "fallback":',
        ("tests/test_launchers.py",),
    ),
    Mutation(
        "py.identity.run_env_beats_wandb",
        "OTEL_VALGEN_RUN_ID wins over the process's wandb run",
        "otel_valgen/_identity.py",
        """    from_env = os.environ.get(OTEL_VALGEN_RUN_ID, "").strip()
    if from_env:""",
        """    from_env = os.environ.get(OTEL_VALGEN_RUN_ID, "").strip()
    if from_env and not getattr(wandb_run(), "id", None):""",
        ("tests/test_run_identity.py",),
    ),
    Mutation(
        "py.identity.wandb_run_beats_its_env",
        "the process's live wandb run wins over WANDB_RUN_ID",
        "otel_valgen/_identity.py",
        '''    wandb_id = getattr(wandb_run(), "id", None)
    if wandb_id:
        return str(wandb_id), "wandb"''',
        '''    wandb_id = getattr(wandb_run(), "id", None)
    if wandb_id and not os.environ.get(WANDB_RUN_ID):
        return str(wandb_id), "wandb"''',
        ("tests/test_run_identity.py",),
    ),
    # --- distinct prompts of a rollout step, incomplete groups -------------------------------
    Mutation(
        "go.distinct.merge_once",
        "a key in two sketches is one prompt: the merge keeps it once",
        _go("distinct.go"),
        "next, i, j = a[i], i+1, j+1",
        "next, i = a[i], i+1",
        GO,
    ),
    Mutation(
        "go.distinct.exact_below_m",
        "a sketch of fewer than m keys counts exactly; m keys is an estimate",
        _go("distinct.go"),
        "if len(keys) < m {",
        "if len(keys) <= m {",
        GO,
    ),
    Mutation(
        "go.distinct.estimate_m_minus_1",
        "the estimate is (m-1)·2^63/(u+1), u the m-th smallest key",
        _go("distinct.go"),
        "hi, lo := bits.Mul64(uint64(m-1), 1<<63)",
        "hi, lo := bits.Mul64(uint64(m), 1<<63)",
        GO,
    ),
    Mutation(
        "go.group.sources_sketches_merged",
        "the summary counts the ended sources' sketches merged: a prompt two sources saw counts once",
        _go("group.go"),
        "sketch = mergeKeys(sketch, state.end.promptKeys, promptSketchSize)",
        "sketch = append(sketch, state.end.promptKeys...)",
        GO,
    ),
    Mutation(
        "go.group.incomplete_unended_source",
        "a source that sent records but never ended makes every kept prompt possibly incomplete",
        _go("group.go"),
        "if ended < int64(len(g.sources)) || ended < g.sourcesExpected {",
        "if ended < g.sourcesExpected {",
        GO,
    ),
    Mutation(
        "go.storage.prompt_keys",
        "a source's sketch is stored with its open group and survives a restart",
        _go("state_group.go"),
        "putPromptKeys(m, stateAttrSourcePromptKeys, state.end.promptKeys)",
        "_ = m",
        GO,
    ),
    Mutation(
        "py.distinct.exact_below_m",
        "a sketch of fewer than m keys counts exactly; m keys is an estimate",
        "otel_valgen/distinct.py",
        "if len(smallest) < m:",
        "if len(smallest) <= m:",
        ("tests/test_distinct.py",),
    ),
    Mutation(
        "py.distinct.estimate_m_minus_1",
        "the estimate is floor((m-1)·2^63/(u+1)), u the m-th smallest key",
        "otel_valgen/distinct.py",
        "return DistinctCount(((m - 1) << 63) // (smallest[-1] + 1), True)",
        "return DistinctCount((m << 63) // (smallest[-1] + 1), True)",
        ("tests/test_distinct.py",),
    ),
    Mutation(
        "py.distinct.full_sketch_keeps_smallest",
        "a full sketch takes a smaller key in place of its largest, never a larger one",
        "otel_valgen/distinct.py",
        "elif key < -self._largest[0]:",
        "elif key > -self._largest[0]:",
        ("tests/test_distinct.py",),
    ),
    Mutation(
        "py.emitter.prompts_over_calls",
        "a part's prompts seen count over all its calls of the step, not the last call's",
        "otel_valgen/_emitter.py",
        "                state.prompts.add(prompts)",
        "                state.prompts = DistinctKeys()\n                state.prompts.add(prompts)",
        ("tests/test_rollouts.py", "tests/test_distinct.py"),
    ),
    Mutation(
        "py.selection.incomplete_unended_source",
        "show: a source that sent records but never ended makes every kept prompt possibly incomplete",
        "otel_valgen/selection.py",
        "prompts_incomplete=prompts_kept if prompts_kept and not (complete and _all_ended(group)) else 0,",
        "prompts_incomplete=prompts_kept if prompts_kept and not complete else 0,",
        ("tests/test_distinct.py",),
    ),
    Mutation(
        "py.partials.sketches_united",
        "partial summaries of a step count a prompt several samplers saw once: their sketches are united",
        "otel_valgen/partials.py",
        "keys = merge_keys(*sketches)",
        "keys = list(sketches[0])",
        ("tests/test_distinct.py",),
    ),
)


def _copy_tree(source: Path, target: Path) -> None:
    shutil.copytree(source, target, ignore=_IGNORED, symlinks=True)


def _command(tests: tuple[str, ...], tree: Path) -> tuple[list[str], Path, dict[str, str]]:
    env = dict(os.environ)
    if tests == GO:
        return ["go", "test", "-count=1", "./..."], tree / PROCESSOR, env
    env["PYTHONPATH"] = str(tree)
    env.pop("VALGEN_REQUIRE_ALL", None)
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-x", "-o", "addopts="]
    argv += ["-k", _DESELECT, f"--timeout={_TEST_TIMEOUT_S}"]
    return [*argv, *sorted(tests)], tree, env


# Output that says the mutant never ran: it does not compile or import.
_BROKEN = ("[build failed]", "[setup failed]", "error during collection", "errors during collection")


@dataclass(frozen=True)
class Outcome:
    """One run of a test command."""

    passed: bool
    broken: bool  # the code did not build or import: the tests never ran
    seconds: float
    tail: str


def _run(tests: tuple[str, ...], tree: Path) -> Outcome:
    """Run the tests in ``tree``."""
    argv, cwd, env = _command(tests, tree)
    started = time.monotonic()
    try:
        done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return Outcome(False, False, time.monotonic() - started, f"timed out after {_TIMEOUT_S} s")
    output = done.stdout + done.stderr
    tail = "\n".join(output.strip().splitlines()[-15:])
    broken = done.returncode != 0 and any(marker in output for marker in _BROKEN)
    return Outcome(done.returncode == 0, broken, time.monotonic() - started, tail)


def _label(tests: tuple[str, ...]) -> str:
    return f"go test ./... ({PROCESSOR})" if tests == GO else "pytest " + " ".join(tests)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--tree", type=Path, default=REPO, help="the repository to copy and mutate (default: this one)")
    parser.add_argument("--only", action="append", default=[], help="run only this mutation (repeatable)")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--no-baseline", action="store_true", help="skip the unmutated run of each test command")
    args = parser.parse_args(argv)
    known = {m.name for m in MUTATIONS}
    if unknown := set(args.only) - known:
        parser.error(f"unknown mutation(s): {sorted(unknown)}")
    return args


def _check_snippets(tree: Path, chosen: list[Mutation]) -> bool:
    ok = True
    for m in chosen:
        count = (tree / m.file).read_text(encoding="utf-8").count(m.original)
        if count != 1:
            print(f"ERROR {m.name}: the snippet occurs {count} times in {m.file}")
            ok = False
    return ok


def _baseline(tree: Path, chosen: list[Mutation]) -> bool:
    for tests in dict.fromkeys(tuple(sorted(m.tests)) for m in chosen if m.equivalent is None):
        outcome = _run(tests, tree)
        print(f"baseline {'ok  ' if outcome.passed else 'FAIL'} {outcome.seconds:6.1f} s  {_label(tests)}", flush=True)
        if not outcome.passed:
            print(outcome.tail)
            return False
    return True


def _mutate(tree: Path, m: Mutation) -> Outcome:
    path = tree / m.file
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace(m.original, m.replacement), encoding="utf-8")
    try:
        return _run(m.tests, tree)
    finally:
        path.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    chosen = [m for m in MUTATIONS if not args.only or m.name in args.only]
    if args.list:
        for m in chosen:
            print(f"{m.name:40} {m.file}  [{_label(m.tests)}]\n    {m.rule}")
        return 0

    started = time.monotonic()
    verdicts: dict[str, list[str]] = {"killed": [], "SURVIVED": [], "BROKEN": [], "equivalent": []}
    with tempfile.TemporaryDirectory(prefix="valgen-mutants-") as temp:
        tree = Path(temp) / "repo"
        _copy_tree(args.tree.resolve(), tree)
        if not _check_snippets(tree, chosen) or (not args.no_baseline and not _baseline(tree, chosen)):
            return 2
        for m in chosen:
            outcome = _mutate(tree, m)
            if outcome.broken:
                verdict, shown = "BROKEN", "BROKEN (does not build)"
            elif m.equivalent is not None:
                verdict, shown = "equivalent", "equivalent" if outcome.passed else "equivalent (yet killed)"
            else:
                verdict = shown = "killed" if not outcome.passed else "SURVIVED"
            verdicts[verdict].append(m.name)
            print(f"{shown:24} {outcome.seconds:6.1f} s  {m.name}: {m.rule}", flush=True)
            if outcome.broken:
                print(outcome.tail)
    killed, survived = verdicts["killed"], verdicts["SURVIVED"]
    print(
        f"\nscore: {len(killed)}/{len(killed) + len(survived)} killed"
        f" ({len(verdicts['equivalent'])} listed as equivalent and not counted, {len(verdicts['BROKEN'])} broken)"
        f" in {time.monotonic() - started:.0f} s"
    )
    for name in survived:
        print(f"  survived: {name}")
    for name in verdicts["BROKEN"]:
        print(f"  broken (fix its replacement): {name}")
    for m in chosen:
        if m.equivalent is not None:
            print(f"  equivalent: {m.name}: {m.equivalent}")
    return 1 if survived or verdicts["BROKEN"] else 0


if __name__ == "__main__":
    sys.exit(main())
