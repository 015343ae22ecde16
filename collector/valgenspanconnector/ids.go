// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgenspanconnector // import "github.com/otel-valgen/otel-valgen/collector/valgenspanconnector"

import (
	"crypto/sha256"
	"strconv"

	"go.opentelemetry.io/collector/pdata/pcommon"
)

// Roles of the spans of a trace, the first field hashed into their ids.
const (
	roleStep       = "step"
	rolePrompt     = "prompt"
	roleGeneration = "generation"
	roleTurn       = "turn"
	roleTool       = "tool"
)

// traceIDOf is the trace of a step: the first 16 bytes of
// SHA-256("valgen.trace" NUL run_id NUL step), step in decimal, with NUL kind appended unless
// the kind is validation; an all-zero result becomes 00…01. For validation this is the trace
// id the SDK derives for the step's records when no trace context reached the process
// (otel_valgen/_tracing.py: derived_ids), so those log records link to the trace.
func traceIDOf(key groupKey) pcommon.TraceID {
	h := sha256.New()
	h.Write([]byte("valgen.trace\x00"))
	h.Write([]byte(key.run))
	h.Write([]byte{0})
	h.Write(strconv.AppendInt(nil, key.step, 10))
	if key.kind != kindValidation {
		h.Write([]byte{0})
		h.Write([]byte(key.kind))
	}
	var id pcommon.TraceID
	copy(id[:], h.Sum(nil))
	if id.IsEmpty() {
		id[15] = 1
	}
	return id
}

// spanIDOf is a span of the trace: the first 8 bytes of
// SHA-256(trace id's 16 bytes ‖ role ‖ NUL field ‖ NUL field …); an all-zero result becomes
// 00…01. The fields are, by role: step (attempt); prompt (attempt, prompt id); generation
// (attempt, sample id); turn (attempt, sample id, turn); tool (attempt, sample id, turn,
// call), turn and call 0-based in decimal: the assistant message's index among the
// trajectory's assistant messages and the tool call's among that message's calls.
func spanIDOf(trace pcommon.TraceID, role string, fields ...string) pcommon.SpanID {
	h := sha256.New()
	h.Write(trace[:])
	h.Write([]byte(role))
	for _, f := range fields {
		h.Write([]byte{0})
		h.Write([]byte(f))
	}
	var buf [sha256.Size]byte
	var id pcommon.SpanID
	copy(id[:], h.Sum(buf[:0]))
	if id.IsEmpty() {
		id[7] = 1
	}
	return id
}
