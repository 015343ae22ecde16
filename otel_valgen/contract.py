"""The wire contract: event names and attribute keys that every component agrees on.

One validation generation is one OTel LogRecord with event name ``valgen.generation``,
severity INFO, a map body ``{input, output, ground_truth?}`` and the attributes below.
A source announces its part of a step with ``valgen.validation.start``, sends
``valgen.validation.progress`` periodically while the part is open, and ends it with
``valgen.validation.end``; every one of these records carries ``valgen.attempt`` and
``valgen.kind`` (``validation``, the default when absent, or ``rollout``). The sampler
groups by (run, step, attempt, kind) and closes a group with a ``valgen.step.summary`` record after
the kept records; records arriving after the close are reported in ``valgen.step.late``.
"""

from __future__ import annotations

from typing import Final

# Event names (LogRecord.event_name).
EVENT_GENERATION: Final = "valgen.generation"
EVENT_VALIDATION_START: Final = "valgen.validation.start"
EVENT_VALIDATION_PROGRESS: Final = "valgen.validation.progress"
EVENT_VALIDATION_END: Final = "valgen.validation.end"
EVENT_STEP_SUMMARY: Final = "valgen.step.summary"
EVENT_STEP_LATE: Final = "valgen.step.late"
EVENT_PREFIX: Final = "valgen."

# Body keys of a generation record.
BODY_INPUT: Final = "input"
BODY_OUTPUT: Final = "output"
BODY_GROUND_TRUTH: Final = "ground_truth"

# Record attributes.
RUN_ID: Final = "valgen.run_id"  # str, required
STEP: Final = "valgen.step"  # int, required
SAMPLE_ID: Final = "valgen.sample_id"  # str, required on generations
SAMPLE_KEY: Final = "valgen.sample_key"  # int in [0, 2**63)
SEED: Final = "valgen.seed"  # int: the seed the key was computed with
KEY_VERSION: Final = "valgen.key_version"  # int: the key function (otel_valgen.sampling); absent = 1
SCORE: Final = "valgen.score"  # double, optional
DATA_SOURCE: Final = "valgen.data_source"  # str, optional
SOURCE: Final = "valgen.source"  # str: which part emitted the record
SAMPLE_COUNT: Final = "valgen.sample_count"  # int: the k the job asked for
ATTEMPT: Final = "valgen.attempt"  # str: "<launch id>.<n>"; absent or "" on records of old SDKs
SCORE_INVALID: Final = "valgen.score_invalid"  # str: why a given score was not sent
INPUT_LENGTH: Final = "valgen.input.original_length"  # int: set when input was truncated
OUTPUT_LENGTH: Final = "valgen.output.original_length"
GROUND_TRUTH_LENGTH: Final = "valgen.ground_truth.original_length"
REPLACED_CHARS: Final = "valgen.replaced_chars"  # int: undecodable chars replaced by U+FFFD
# Conversations (otel_valgen.conversations): a generation whose input or output is a list of chat
# messages carries them under the OpenTelemetry GenAI names, an array of maps ({role, parts,
# name?}); the body's input/output texts are then their readable rendering.
GEN_AI_INPUT_MESSAGES: Final = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES: Final = "gen_ai.output.messages"
# map: figures over every trajectory a source saw (end record, cumulative like valgen.seen) and,
# merged over the ended sources with means and shares, on the summary (otel_valgen.trajectories).
TRAJECTORIES: Final = "valgen.trajectories"
# The stream a record belongs to, on every record: absent means KIND_VALIDATION (records of
# earlier releases). A step's validation and its rollouts never share a group.
KIND: Final = "valgen.kind"  # str, one of KINDS
KIND_VALIDATION: Final = "validation"
KIND_ROLLOUT: Final = "rollout"
KINDS: Final = frozenset({KIND_VALIDATION, KIND_ROLLOUT})
# A rollout generation's prompt: all n responses of a prompt share both, and a group keeps the
# bottom-k prompts by (PROMPT_KEY, UTF-8 of PROMPT_ID) with every response of each (the group
# view, otel_valgen.sampling.GroupView). The key is sample_key(seed, prompt id), so a prompt
# that comes back in a later epoch gets the same key.
PROMPT_ID: Final = "valgen.prompt_id"  # str, required on rollout generations
PROMPT_KEY: Final = "valgen.prompt_key"  # int in [0, 2**63); absent: computed from seed and prompt id
# Rollout columns of a generation (log_rollouts): the advantage, the response's length in
# tokens, whether it was cut at the length limit, and the parameter (policy) version that
# generated it (asynchronous training: step minus it is the response's staleness). The reward is SCORE.
ADVANTAGE: Final = "valgen.advantage"  # double
RESPONSE_LENGTH: Final = "valgen.response_length"  # int, tokens
TRUNCATED: Final = "valgen.truncated"  # bool
PARAM_VERSION: Final = "valgen.param_version"  # int
# Token by token (otel_valgen.tokens): a kept rollout response with per-token columns carries
# them packed as TOKENS (a map: version, count, one bytes value per column, cut_from/cut_count
# when the middle was left out) and its figures as MISMATCH_PREFIX + mean_abs, max_abs, kl,
# masked, tokens; the end record and the summary carry MISMATCH, the distribution of those
# figures over every response of the step (merged like TRAJECTORIES).
TOKENS: Final = "valgen.tokens"
MISMATCH_PREFIX: Final = "valgen.mismatch."
MISMATCH: Final = "valgen.mismatch"
# Extra columns of a generation (``log_generations(..., extra={name: values})``): one attribute
# ``valgen.extra.<name>`` per column, a bool, int, finite double or string. A name is 1 to 64
# characters of [A-Za-z0-9_./-] (EXTRA_NAME_PATTERN); a call sends at most MAX_EXTRA_COLUMNS.
EXTRA_PREFIX: Final = "valgen.extra."
EXTRA_NAME_PATTERN: Final = r"[A-Za-z0-9_./-]{1,64}"
MAX_EXTRA_COLUMNS: Final = 32

# End-of-source and summary attributes.
# On an end record seen = emitted + dropped + what presampling left out (not sent separately).
SEEN: Final = "valgen.seen"  # int: generations the source (or the group) saw, dropped ones included
EMITTED: Final = "valgen.emitted"  # int: generation records the source sent
# int: end record: what the source dropped (bad input, internal errors); summary: the step's total
DROPPED: Final = "valgen.dropped"
SOURCES_EXPECTED: Final = "valgen.sources_expected"  # int, optional
# Score statistics over every generation a source saw (not only the kept ones), on end records
# (cumulative, like valgen.seen) and, summed over the ended sources, on the step summary.
SCORE_COUNT: Final = "valgen.score.count"  # int: generations with a finite score
SCORE_SUM: Final = "valgen.score.sum"  # double: the sum of those scores
SCORE_MEAN: Final = "valgen.score.mean"  # double, summary only: sum / count, absent when count is 0
KEPT: Final = "valgen.kept"  # on a rollout summary, like valgen.seen: responses
# Rollouts: the distinct prompts a source saw (end record, cumulative like valgen.seen) with its
# sketch of their keys and, on the summary, the count over the ended sources' merged sketches
# (a prompt logged by several sources counts once) and the prompts kept.
PROMPTS_SEEN: Final = "valgen.prompts_seen"  # int: distinct prompts (an estimate when PROMPTS_SEEN_ESTIMATED)
PROMPT_KEYS: Final = "valgen.prompt_keys"  # int array: the m smallest distinct prompt keys (otel_valgen.distinct)
PROMPTS_SEEN_ESTIMATED: Final = "valgen.prompts_seen_estimated"  # bool (summaries)
PROMPTS_SEEN_ERROR: Final = "valgen.prompts_seen_error"  # double: relative standard error, when estimated
PROMPTS_INCOMPLETE: Final = "valgen.prompts_incomplete"  # int: kept prompts a source that never ended may lack
PROMPTS_KEPT: Final = "valgen.prompts_kept"  # int, summary only
# Rollouts' watch-list (rollout_rate): the rate on each generation and end record (and echoed by
# the summary: the smallest of the group's records, absent = 1); a prompt is kept when its key is
# below floor(rate * 2**63), at most k of them. The prompts under it a source saw (end record,
# each call's distinct ones added up, cumulative) and, on the summary, their sum over the ended
# sources and how many of them the cap k left out.
SAMPLE_RATE: Final = "valgen.sample_rate"  # double in (0, 1]
# k per (step, data source) (``sample_by = data_source``; otel_valgen.sampling.DataSourceViews):
# SAMPLE_BY on each generation asks for it (absent or another value: k per step; a group is split
# while every generation asks), and on a split group's summary. DATA_SOURCES, an array of maps
# (DATA_SOURCE_FIELDS' keys), gives each data source's figures: on an end record its seen and
# score statistics (cumulative, like valgen.seen), on the summary those summed over the ended
# sources with the kept generations and the mean score.
SAMPLE_BY: Final = "valgen.sample_by"  # str: SAMPLE_BY_DATA_SOURCE, or absent
SAMPLE_BY_STEP: Final = "step"
SAMPLE_BY_DATA_SOURCE: Final = "data_source"
SAMPLE_BY_VALUES: Final = (SAMPLE_BY_STEP, SAMPLE_BY_DATA_SOURCE)
DATA_SOURCES: Final = "valgen.data_sources"  # array of maps
FIGURE_DATA_SOURCE: Final = "data_source"
FIGURE_SEEN: Final = "seen"
FIGURE_KEPT: Final = "kept"  # summary only
FIGURE_SCORE_COUNT: Final = "score.count"
FIGURE_SCORE_SUM: Final = "score.sum"
FIGURE_SCORE_MEAN: Final = "score.mean"  # summary only, absent when the count is 0
FIELD_DATA_SOURCES: Final = "data_sources"  # in an entry of valgen.source_figures: the source's end figures
FIELD_TRAJECTORIES: Final = "trajectories"  # in an entry of valgen.source_figures: the source's valgen.trajectories
FIELD_MISMATCH: Final = "mismatch"  # in an entry of valgen.source_figures: the source's valgen.mismatch
# The best and the worst (``extremes = n``; otel_valgen.sampling.FigureRanks): EXTREMES on each
# validation generation asks for the n lowest- and n highest-scored beside the k keyed picks (the
# smallest n asked wins, absent is 0), and on the summary. The most mismatched (``mismatched = n``):
# MISMATCHED on each rollout record asks for the n responses with the largest
# MISMATCH_PREFIX + "kl" beside the k keyed prompts (the same rule), and on the summary. SLOTS on
# each kept record of such a step lists the slots it fills, of SLOTS_ORDER.
EXTREMES: Final = "valgen.extremes"  # int >= 0
MISMATCHED: Final = "valgen.mismatched"  # int >= 0
SLOTS: Final = "valgen.slots"  # str array, set by the sampler
SLOT_KEYED: Final = "keyed"
SLOT_LOWEST: Final = "lowest"
SLOT_HIGHEST: Final = "highest"
SLOT_MISMATCHED: Final = "mismatched"
SLOTS_ORDER: Final = (SLOT_KEYED, SLOT_LOWEST, SLOT_HIGHEST, SLOT_MISMATCHED)
PROMPTS_UNDER_RATE: Final = "valgen.prompts_under_rate"  # int
PROMPTS_OVER_CAP: Final = "valgen.prompts_over_cap"  # int, summary only
SOURCES: Final = "valgen.sources"  # sources that sent anything for the step
SOURCES_ENDED: Final = "valgen.sources_ended"  # of those, the ones that sent their end record
LATE: Final = "valgen.late"  # summary/late record: int count; a forwarded late generation: true
MISSING: Final = "valgen.missing"
CLOSED_REASON: Final = "valgen.closed_reason"
RANK: Final = "valgen.rank"  # int, 1-based, set by the sampler on kept records
ATTEMPT_START: Final = "valgen.attempt_start"  # int, unix nanos: the smallest record time of the attempt
SOURCES_ANNOUNCED: Final = "valgen.sources_announced"  # int: sources that sent a start record
SOURCES_MISSING: Final = "valgen.sources_missing"  # str array: "source@instance" known but not ended
# The summary's balance, valgen.seen = valgen.kept + valgen.dropped: on a summary, valgen.dropped
# (DROPPED) is the step's total, and one valgen.dropped.<reason> per reason of
# otel_valgen.balance.DROP_REASONS says where the rest of what its sources saw went.
DROPPED_PREFIX: Final = "valgen.dropped."
# int, summary: the other attempts of the step that ran at the same time with no common source
# (one launch probably split into attempts; otel_valgen.splits).
ATTEMPTS_CONCURRENT: Final = "valgen.attempts_concurrent"
# Partial groups (otel_valgen.partials): the sampler that closed a group (str), what it knew of
# each source (array of maps, keys FIGURE_*), and on a summary merged from partials of several
# samplers, their names (str array). A summary's valgen.sample_count is the k it kept to.
SAMPLER: Final = "valgen.sampler"
SAMPLERS: Final = "valgen.samplers"
SOURCE_FIGURES: Final = "valgen.source_figures"
# Which integration opened a source's part, on its start and end records; absent: the plain API.
# "verl/<verl version>": the verl integration routed the part. INTEGRATION_UNHOOKED: verl's own
# validation table ran in the process instead (the part has no generations; UNHOOKED_REASON says
# why: UNHOOKED_REASONS). A routed part whose own table ran after all says so on its end record.
INTEGRATION: Final = "valgen.integration"  # str
INTEGRATION_UNHOOKED: Final = "unhooked"
UNHOOKED_REASON: Final = "valgen.unhooked_reason"  # str, with INTEGRATION_UNHOOKED
UNHOOKED_REASONS: Final = frozenset({"override", "actor_copy", "drift", "call_shape", "unknown"})
# str array, summary: the sources ("source@instance") any of whose start or end records says
# INTEGRATION_UNHOOKED, sorted (otel_valgen.unhooked).
SOURCES_UNHOOKED: Final = "valgen.sources_unhooked"

# Resource attributes.
WANDB_PROJECT: Final = "wandb.project"
WANDB_ENTITY: Final = "wandb.entity"
WANDB_RUN_ID: Final = "wandb.run_id"
RAY_JOB_ID: Final = "ray.job_id"
RAY_NODE_ID: Final = "ray.node_id"
RAY_ACTOR_ID: Final = "ray.actor_id"

SCOPE_NAME: Final = "otel_valgen"
