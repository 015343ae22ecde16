// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgenspanconnector // import "github.com/otel-valgen/otel-valgen/collector/valgenspanconnector"

import (
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
)

// Event names and attribute keys of the otel-valgen wire contract (otel_valgen/contract.py).
const (
	eventGeneration = "valgen.generation"
	eventSummary    = "valgen.step.summary"
	attrEventName   = "event.name" // older SDKs carry the event name as an attribute

	attrRunID          = "valgen.run_id"
	attrStep           = "valgen.step"
	attrKind           = "valgen.kind"
	attrAttempt        = "valgen.attempt"
	attrAttemptStart   = "valgen.attempt_start"
	attrSampleID       = "valgen.sample_id"
	attrRank           = "valgen.rank"
	attrLate           = "valgen.late"
	attrPromptID       = "valgen.prompt_id"
	attrScore          = "valgen.score"
	attrResponseLength = "valgen.response_length"
	attrTokens         = "valgen.tokens"
	attrTruncated      = "valgen.truncated"
	attrDataSources    = "valgen.data_sources"
	attrPromptKeys     = "valgen.prompt_keys"
	attrSourceFigures  = "valgen.source_figures"
	extraPrefix        = "valgen.extra."
	valgenPrefix       = "valgen."
	genAIPrefix        = "gen_ai."

	kindValidation = "validation"
	kindRollout    = "rollout"

	bodyInput       = "input"
	bodyOutput      = "output"
	bodyGroundTruth = "ground_truth"
)

// Reasons of the records-ignored metric.
const (
	ignoredInvalid   = "invalid"
	ignoredLate      = "late"
	ignoredDuplicate = "duplicate"
)

// groupKey is a step group as the sampler forms it: (run, step, attempt, kind).
type groupKey struct {
	run     string
	step    int64
	attempt string
	kind    string
}

// keyOf reads a record's group; ok is false when the run is not a non-empty string, the step
// not an int, the attempt present but not a string or the kind not one of the two.
func keyOf(attrs pcommon.Map) (groupKey, bool) {
	var k groupKey
	run, ok := attrs.Get(attrRunID)
	if !ok || run.Type() != pcommon.ValueTypeStr || run.Str() == "" {
		return k, false
	}
	step, ok := attrs.Get(attrStep)
	if !ok || step.Type() != pcommon.ValueTypeInt {
		return k, false
	}
	k.run, k.step, k.kind = run.Str(), step.Int(), kindValidation
	if v, ok := attrs.Get(attrAttempt); ok {
		if v.Type() != pcommon.ValueTypeStr {
			return k, false
		}
		k.attempt = v.Str()
	}
	if v, ok := attrs.Get(attrKind); ok {
		if v.Type() != pcommon.ValueTypeStr || (v.Str() != kindValidation && v.Str() != kindRollout && v.Str() != "") {
			return k, false
		}
		if v.Str() != "" {
			k.kind = v.Str()
		}
	}
	return k, true
}

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

// generation is a kept generation record: a view of the record in the request being
// consumed, or the connector's own copy once it waits in the buffer.
type generation struct {
	record   plog.LogRecord
	sampleID string
	promptID string // valgen.prompt_id of a rollout response, "" otherwise
	rank     int64  // valgen.rank, 0 when absent
	time     int64  // unix nanos: its timestamp, else its observed timestamp, else 0
	size     int    // estimated bytes (size.go), what it costs in the buffer
}

// parseGeneration reads a valgen.generation record; reason is set when it makes no span.
func parseGeneration(lr plog.LogRecord) (groupKey, *generation, string) {
	attrs := lr.Attributes()
	if v, ok := attrs.Get(attrLate); ok && v.Type() == pcommon.ValueTypeBool && v.Bool() {
		return groupKey{}, nil, ignoredLate // forwarded after its group closed: not part of any trace
	}
	key, ok := keyOf(attrs)
	if !ok {
		return key, nil, ignoredInvalid
	}
	id, ok := attrs.Get(attrSampleID)
	if !ok || id.Type() != pcommon.ValueTypeStr || id.Str() == "" {
		return key, nil, ignoredInvalid
	}
	g := &generation{record: lr, sampleID: id.Str(), time: recordTime(lr)}
	if v, ok := attrs.Get(attrRank); ok && v.Type() == pcommon.ValueTypeInt {
		g.rank = v.Int()
	}
	if v, ok := attrs.Get(attrPromptID); ok && v.Type() == pcommon.ValueTypeStr && key.kind == kindRollout {
		g.promptID = v.Str()
	}
	return key, g, ""
}

// recordTime is the record's timestamp, else its observed timestamp, else 0.
func recordTime(lr plog.LogRecord) int64 {
	if ts := lr.Timestamp(); ts != 0 {
		return int64(ts) //nolint:gosec // timestamps after 1970 and before 2262
	}
	return int64(lr.ObservedTimestamp()) //nolint:gosec // as above
}

// less orders the generations of a trace: by valgen.rank (records without one last), then by
// the UTF-8 bytes of the sample id.
func less(a, b *generation) bool {
	ra, rb := a.rank, b.rank
	if (ra > 0) != (rb > 0) {
		return ra > 0
	}
	if ra != rb {
		return ra < rb
	}
	return a.sampleID < b.sampleID
}
