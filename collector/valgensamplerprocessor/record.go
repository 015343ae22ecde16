// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor // import "github.com/otel-valgen/otel-valgen/collector/valgensamplerprocessor"

import (
	"strconv"
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
)

// Event names and attribute keys of the otel-valgen wire contract (otel_valgen/contract.py).
const (
	eventGeneration = "valgen.generation"
	eventStart      = "valgen.validation.start"
	eventProgress   = "valgen.validation.progress"
	eventEnd        = "valgen.validation.end"
	eventSummary    = "valgen.step.summary"
	eventLate       = "valgen.step.late"

	attrEventName       = "event.name" // older SDKs carry the event name as an attribute
	attrServiceInstance = "service.instance.id"

	attrRunID           = "valgen.run_id"
	attrStep            = "valgen.step"
	attrSampleID        = "valgen.sample_id"
	attrSampleKey       = "valgen.sample_key"
	attrSeed            = "valgen.seed"
	attrKeyVersion      = "valgen.key_version"
	attrSource          = "valgen.source"
	attrSampleCount     = "valgen.sample_count"
	attrSeen            = "valgen.seen"
	attrEmitted         = "valgen.emitted"
	attrDropped         = "valgen.dropped"
	attrSourcesExpected = "valgen.sources_expected"
	attrKept            = "valgen.kept"
	attrSources         = "valgen.sources"
	attrSourcesEnded    = "valgen.sources_ended"
	attrLate            = "valgen.late"
	attrMissing         = "valgen.missing"
	attrClosedReason    = "valgen.closed_reason"
	attrRank            = "valgen.rank"
	attrAttempt         = "valgen.attempt"
	attrAttemptStart    = "valgen.attempt_start"
	attrSourcesAnnounce = "valgen.sources_announced"
	attrSourcesMissing  = "valgen.sources_missing"
	attrScoreCount      = "valgen.score.count"
	attrScoreSum        = "valgen.score.sum"
	attrScoreMean       = "valgen.score.mean"

	// The summary's balance, seen = kept + dropped (balance.go), and its split-launch mark
	// (concurrent.go). valgen.dropped is the total of the reasons.
	attrDroppedSampled     = "valgen.dropped.sampled"
	attrDroppedSource      = "valgen.dropped.source"
	attrDroppedInvalid     = "valgen.dropped.invalid"
	attrDroppedUndelivered = "valgen.dropped.undelivered"
	attrDroppedNotEnded    = "valgen.dropped.not_ended"
	attrAttemptsConcurrent = "valgen.attempts_concurrent"

	// Which sampler closed the group, and what it knew of each source: enough for the exporter
	// service and show/push to merge partial groups of one step that different samplers closed
	// (an agent re-routed the step mid-way) into the exact step (partials.go).
	attrSampler       = "valgen.sampler"
	attrSourceFigures = "valgen.source_figures"

	// A source that ran verl's own validation table instead of otel-valgen (unhooked.go).
	attrIntegration     = "valgen.integration"
	attrUnhookedReason  = "valgen.unhooked_reason"
	attrSourcesUnhooked = "valgen.sources_unhooked"
	integrationUnhooked = "unhooked"

	// Which stream a record belongs to (absent: validation), and the prompt of a rollout
	// (groupview.go): its id, its key, and on end records and summaries the prompts counted.
	attrKind        = "valgen.kind"
	kindValidation  = "validation"
	kindRollout     = "rollout"
	attrPromptID    = "valgen.prompt_id"
	attrPromptKey   = "valgen.prompt_key"
	attrPromptsSeen = "valgen.prompts_seen"
	attrPromptsKept = "valgen.prompts_kept"
	// The watch-list (groupview.go): a rollout's rate on its generation and end records and the
	// summary, the prompts under it a source saw, and on the summary those the cap k left out.
	attrSampleRate       = "valgen.sample_rate"
	attrPromptsUnderRate = "valgen.prompts_under_rate"
	attrPromptsOverCap   = "valgen.prompts_over_cap"
	// Rollouts: the distinct prompt keys sketch (end records and summaries, distinct.go), whether
	// prompts_seen is an estimate and its relative standard error, and how many kept prompts may
	// lack responses of a source that never ended.
	attrPromptKeys           = "valgen.prompt_keys"
	attrPromptsSeenEstimated = "valgen.prompts_seen_estimated"
	attrPromptsSeenError     = "valgen.prompts_seen_error"
	attrPromptsIncomplete    = "valgen.prompts_incomplete"
	// k per (step, data source) (datasource.go): a generation's data source and what it asks
	// for (valgen.sample_by: sampleByDataSource, else per step), and each data source's figures
	// on end records and summaries.
	attrDataSource     = "valgen.data_source"
	attrSampleBy       = "valgen.sample_by"
	sampleByDataSource = "data_source"
	attrDataSources    = "valgen.data_sources"
	// The best and the worst (extremes.go): what a validation generation asks for (valgen.extremes,
	// also on the summary), its score, and on each kept record the slots it fills.
	attrExtremes = "valgen.extremes"
	attrScore    = "valgen.score"
	attrSlots    = "valgen.slots"
)

// Reasons attached to the dropped-records metric.
const (
	reasonMissingAttribute = "missing_attribute"
	reasonInvalidAttribute = "invalid_attribute"
	reasonLate             = "late"
)

// eventName returns the record's event name, falling back to the event.name attribute.
func eventName(lr plog.LogRecord) string {
	if name := lr.EventName(); name != "" {
		return name
	}
	if v, ok := lr.Attributes().Get(attrEventName); ok && v.Type() == pcommon.ValueTypeStr {
		return v.Str()
	}
	return ""
}

// isSampled reports whether the processor handles the record rather than passing it through.
func isSampled(name string) bool {
	switch name {
	case eventGeneration, eventStart, eventProgress, eventEnd:
		return true
	}
	return false
}

// generation is what the sampler needs from a valgen.generation record.
type generation struct {
	order      sortKey
	prompt     sortKey // the order of its prompt: a rollout's (prompt_key, prompt_id), else order
	rollout    bool
	k          int
	keyVersion int64  // valgen.key_version, 1 when absent
	seed       uint64 // valgen.seed, else the configured seed: to recompute the key

	rate float64 // valgen.sample_rate, 0 when absent (groupview.go)

	dataSource   string // valgen.data_source, "" when absent or not a string (datasource.go)
	byDataSource bool   // valgen.sample_by is sampleByDataSource: k per (step, data source)

	// The best and the worst (extremes.go), validation generations only: the n asked for
	// (valgen.extremes, 0 when absent or not usable), and when n > 0 its finite valgen.score.
	extremes int
	score    float64
	scored   bool
	// The most mismatched (mismatched.go), rollout records only: the n asked for
	// (valgen.mismatched, 0 when absent or not usable), and when n > 0 its finite valgen.mismatch.kl.
	mismatched int
	kl         float64
	hasKL      bool
}

// endInfo is what the sampler needs from a valgen.validation.end record; start records fill
// sourcesExpected, progress records seen, start and end records unhooked.
type endInfo struct {
	seen, emitted, dropped int64
	sourcesExpected        int64 // 0 when the record does not say
	scores                 scoreStats
	unhooked               string              // why verl's own table ran in the source (unhookedOf), "" when it did not
	promptsSeen            int64               // rollout end records: the prompts the source saw (valgen.prompts_seen)
	promptsUnderRate       int64               // rollout end records: of those, the prompts under its rate (valgen.prompts_under_rate)
	rate                   float64             // valgen.sample_rate, 0 when absent (groupview.go)
	promptKeys             []int64             // rollout end records: the source's distinct prompt keys sketch (distinct.go)
	dataSources            []dataSourceFigures // valgen.data_sources, nil when absent (datasource.go)
	trajectories           map[string]any      // valgen.trajectories as raw values, nil when absent (trajectories.go)
	mismatch               map[string]any      // valgen.mismatch as raw values, nil when absent (mismatch.go)
}

// checkCommon verifies the attributes that every sampled record must carry.
func checkCommon(attrs pcommon.Map) string {
	runID, ok := attrs.Get(attrRunID)
	if !ok {
		return reasonMissingAttribute
	}
	if runID.Type() != pcommon.ValueTypeStr || runID.Str() == "" {
		return reasonInvalidAttribute
	}
	if v, ok := attrs.Get(attrAttempt); ok && v.Type() != pcommon.ValueTypeStr {
		return reasonInvalidAttribute
	}
	if v, ok := attrs.Get(attrKind); ok && (v.Type() != pcommon.ValueTypeStr || (v.Str() != kindValidation && v.Str() != kindRollout)) {
		return reasonInvalidAttribute
	}
	_, reason := intAttr(attrs, attrStep, true)
	return reason
}

// intAttr reads an int attribute; reason is empty when the value is usable.
func intAttr(attrs pcommon.Map, key string, required bool) (value int64, reason string) {
	v, ok := attrs.Get(key)
	if !ok {
		if required {
			return 0, reasonMissingAttribute
		}
		return 0, ""
	}
	if v.Type() != pcommon.ValueTypeInt {
		return 0, reasonInvalidAttribute
	}
	return v.Int(), ""
}

// parseGeneration validates a generation record and computes its sort key and k.
func parseGeneration(attrs pcommon.Map, cfg *Config) (generation, string) {
	if reason := checkCommon(attrs); reason != "" {
		return generation{}, reason
	}
	idValue, ok := attrs.Get(attrSampleID)
	if !ok {
		return generation{}, reasonMissingAttribute
	}
	if idValue.Type() != pcommon.ValueTypeStr {
		return generation{}, reasonInvalidAttribute
	}
	id := idValue.Str()
	gen := generation{k: cfg.Count}
	var reason string
	if count, present := attrs.Get(attrSampleCount); present {
		if count.Type() != pcommon.ValueTypeInt || count.Int() < 0 {
			return generation{}, reasonInvalidAttribute
		}
		gen.k = int(min(count.Int(), int64(cfg.MaxCount)))
	}
	gen.keyVersion = keyVersionHMAC
	if v, present := attrs.Get(attrKeyVersion); present {
		if v.Type() != pcommon.ValueTypeInt || !knownKeyVersion(v.Int()) {
			return generation{}, reasonInvalidAttribute
		}
		gen.keyVersion = v.Int()
	}
	gen.seed = cfg.Seed
	if s, present := attrs.Get(attrSeed); present {
		if s.Type() != pcommon.ValueTypeInt {
			return generation{}, reasonInvalidAttribute
		}
		gen.seed = uint64(s.Int()) // two's complement: the seed modulo 2^64, as in Python
	}
	if key, present := attrs.Get(attrSampleKey); present {
		if key.Type() != pcommon.ValueTypeInt || key.Int() < 0 {
			return generation{}, reasonInvalidAttribute
		}
		gen.order = sortKey{key: uint64(key.Int()), id: id}
	} else {
		gen.order = sortKey{key: sampleKey(gen.keyVersion, gen.seed, id), id: id}
	}
	gen.dataSource, gen.byDataSource = parseSampleBy(attrs)
	if reason = gen.parsePrompt(attrs); reason == "" && gen.rollout {
		gen.rate, reason = parseRate(attrs) // the watch-list applies to rollouts
	}
	if reason == "" && !gen.rollout { // rollout groups ignore valgen.extremes
		if gen.extremes = parseExtremes(attrs); gen.extremes > 0 {
			gen.score, gen.scored = parseScore(attrs) // with n = 0 (the group's too) no score is needed
		}
	}
	if reason == "" && gen.rollout { // validation groups ignore valgen.mismatched
		if gen.mismatched = parseMismatched(attrs); gen.mismatched > 0 {
			gen.kl, gen.hasKL = parseKL(attrs)
		}
	}
	return gen, reason
}

// parsePrompt sets the generation's prompt order: a rollout's valgen.prompt_id (required) and
// valgen.prompt_key (else computed from its seed and the prompt id, as a sample key is); any
// other generation is its own prompt.
func (gen *generation) parsePrompt(attrs pcommon.Map) string {
	gen.prompt = gen.order
	if kindOf(attrs) != kindRollout {
		return ""
	}
	gen.rollout = true
	idValue, ok := attrs.Get(attrPromptID)
	if !ok {
		return reasonMissingAttribute
	}
	if idValue.Type() != pcommon.ValueTypeStr {
		return reasonInvalidAttribute
	}
	gen.prompt = sortKey{key: sampleKey(gen.keyVersion, gen.seed, idValue.Str()), id: idValue.Str()}
	if key, present := attrs.Get(attrPromptKey); present {
		if key.Type() != pcommon.ValueTypeInt || key.Int() < 0 {
			return reasonInvalidAttribute
		}
		gen.prompt.key = uint64(key.Int())
	}
	return ""
}

// inKeyVersion returns gen with its key recomputed from its seed and sample id under version
// when it is of another version: a group compares keys of one version only.
func (gen generation) inKeyVersion(version int64) generation {
	if gen.keyVersion != version {
		gen.order.key = sampleKey(version, gen.seed, gen.order.id)
		gen.prompt = gen.order
		if gen.rollout {
			gen.prompt.key = sampleKey(version, gen.seed, gen.prompt.id)
		}
		gen.keyVersion = version
	}
	return gen
}

// parseEnd validates an end record.
func parseEnd(attrs pcommon.Map) (endInfo, string) {
	if reason := checkCommon(attrs); reason != "" {
		return endInfo{}, reason
	}
	var end endInfo
	var reason string
	if end.seen, reason = intAttr(attrs, attrSeen, true); reason != "" {
		return endInfo{}, reason
	}
	if end.emitted, reason = intAttr(attrs, attrEmitted, true); reason != "" {
		return endInfo{}, reason
	}
	if end.dropped, reason = intAttr(attrs, attrDropped, false); reason != "" {
		return endInfo{}, reason
	}
	if end.sourcesExpected, reason = intAttr(attrs, attrSourcesExpected, false); reason != "" {
		return endInfo{}, reason
	}
	if end.seen < 0 || end.emitted < 0 || end.dropped < 0 || end.sourcesExpected < 0 {
		return endInfo{}, reasonInvalidAttribute
	}
	if end.scores, reason = parseScoreStats(attrs); reason != "" {
		return endInfo{}, reason
	}
	end.unhooked = unhookedOf(attrs)
	if end.promptsSeen, reason = optionalCount(attrs, attrPromptsSeen); reason != "" {
		return endInfo{}, reason
	}
	if end.promptKeys, reason = parsePromptKeys(attrs); reason != "" {
		return endInfo{}, reason
	}
	if end.promptsUnderRate, reason = optionalCount(attrs, attrPromptsUnderRate); reason != "" {
		return endInfo{}, reason
	}
	if end.rate, reason = parseRate(attrs); reason != "" {
		return endInfo{}, reason
	}
	end.dataSources = parseEndDataSources(attrs)
	end.trajectories = parseTrajectories(attrs)
	end.mismatch = parseMismatch(attrs)
	return end, ""
}

// stepAttributes identify a validation step, here as in every other component (the
// summary, otel-valgen show, the exporters): a group is one (run, step, attempt, kind).
var stepAttributes = []string{attrRunID, attrStep}

// groupKey builds an unambiguous key from the step attributes' values (type and value)
// followed by the record's kind and attempt, so that two attempts of one step, or its
// validation and its rollouts, never share a group.
func groupKey(attrs pcommon.Map) string {
	return stepKey(attrs) + kindKey(kindOf(attrs)) + attemptKey(attemptOf(attrs))
}

// kindKey is the part of a group key that names the kind: "" for validation, so that the
// keys of validation groups (stored, or in the closed-groups ring) are those of earlier releases.
func kindKey(kind string) string {
	if kind == kindValidation {
		return ""
	}
	return "k:" + kind + "|"
}

// kindOf returns the record's valgen.kind; absent is validation (checkCommon drops records
// whose kind is not one of the two).
func kindOf(attrs pcommon.Map) string {
	if v, ok := attrs.Get(attrKind); ok && v.Type() == pcommon.ValueTypeStr && v.Str() != "" {
		return v.Str()
	}
	return kindValidation
}

// attemptKey is the part of a group key that names the attempt ("" for legacy records).
func attemptKey(attempt string) string {
	return "a:" + strconv.Itoa(len(attempt)) + ":" + attempt + "|"
}

// attemptOf returns the record's valgen.attempt; absent is the legacy "" (checkCommon
// drops records whose attempt is not a string).
func attemptOf(attrs pcommon.Map) string {
	if v, ok := attrs.Get(attrAttempt); ok && v.Type() == pcommon.ValueTypeStr {
		return v.Str()
	}
	return ""
}

// stepKey encodes the step attributes' values, as keys did before attempts existed.
func stepKey(attrs pcommon.Map) string {
	var b strings.Builder
	for _, name := range stepAttributes {
		v, ok := attrs.Get(name)
		if !ok {
			b.WriteString("-|")
			continue
		}
		s := v.AsString()
		b.WriteString(strconv.Itoa(int(v.Type())))
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(len(s)))
		b.WriteByte(':')
		b.WriteString(s)
		b.WriteByte('|')
	}
	return b.String()
}

// sourceID identifies one emitting process: its valgen.source and its service.instance.id.
type sourceID struct {
	name, instance string
}

// String is the source as the summary's valgen.sources_missing lists it: "source@instance".
func (id sourceID) String() string { return id.name + "@" + id.instance }

func sourceOf(attrs pcommon.Map, res pcommon.Resource) sourceID {
	var id sourceID
	if v, ok := attrs.Get(attrSource); ok {
		id.name = v.AsString()
	}
	if v, ok := res.Attributes().Get(attrServiceInstance); ok {
		id.instance = v.AsString()
	}
	return id
}
