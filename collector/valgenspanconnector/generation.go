// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgenspanconnector // import "github.com/otel-valgen/otel-valgen/collector/valgenspanconnector"

import (
	"math"
	"sort"
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// Labels of a pass/fail score (gen_ai.evaluation.score.label).
const (
	labelPass = "pass"
	labelFail = "fail"
)

// appendGeneration appends the span of one kept generation beneath parent, in [start, end],
// and, when its output is a trajectory, the trajectory's turn and tool spans after it.
//
// The span carries gen_ai.operation.name (chat, or invoke_agent for a trajectory), its
// messages, the record's other gen_ai.* attributes (gen_ai.system_instructions, a model name),
// gen_ai.usage.output_tokens from valgen.response_length, the record's valgen.* attributes
// but those on the root (run, step, kind, attempt) and valgen.tokens (packed per-token data),
// valgen.ground_truth from the body, and one gen_ai.evaluation.result event per reward.
func (b *traceBuilder) appendGeneration(spans ptrace.SpanSlice, g *generation, parent pcommon.SpanID, start, end int64) {
	conv := conversationOf(g.record)
	steps := trajectorySteps(conv.output)
	if n := int64(len(steps)); end-start < n {
		end = start + n // a slot of at least 1ns per step
	}

	s := spans.AppendEmpty()
	s.SetTraceID(b.traceID)
	s.SetSpanID(spanIDOf(b.traceID, roleGeneration, b.attempt, g.sampleID))
	s.SetParentSpanID(parent)
	s.SetStartTimestamp(pcommon.Timestamp(start)) //nolint:gosec // after 1970
	s.SetEndTimestamp(pcommon.Timestamp(end))     //nolint:gosec // after 1970
	attrs := s.Attributes()
	src := g.record.Attributes()
	attrs.EnsureCapacity(src.Len() + 4)
	if steps != nil {
		s.SetName(operationAgent)
		s.SetKind(ptrace.SpanKindInternal)
		attrs.PutStr(attrOperation, operationAgent)
	} else {
		s.SetName(b.chatName(g))
		s.SetKind(ptrace.SpanKindClient)
		attrs.PutStr(attrOperation, operationChat)
	}
	b.putMessages(attrs, attrInputMessages, conv, false, 0, conv.input.Len())
	b.putMessages(attrs, attrOutputMessages, conv, true, 0, conv.output.Len())
	if v, ok := src.Get(attrResponseLength); ok && v.Type() == pcommon.ValueTypeInt {
		attrs.PutInt(attrOutputTokens, v.Int())
	}
	for k, v := range src.All() {
		switch {
		case k == attrInputMessages || k == attrOutputMessages:
		case structured(k):
			b.putStructured(attrs, k, v)
		case strings.HasPrefix(k, genAIPrefix):
			v.CopyTo(attrs.PutEmpty(k))
		case strings.HasPrefix(k, valgenPrefix) && !onRoot(k):
			v.CopyTo(attrs.PutEmpty(k))
		}
	}
	if body := g.record.Body(); body.Type() == pcommon.ValueTypeMap {
		if gt, ok := body.Map().Get(bodyGroundTruth); ok && gt.Type() == pcommon.ValueTypeStr {
			attrs.PutStr(attrGroundTruth, gt.Str())
		}
	}
	appendEvaluations(s, src, end)
	if steps != nil {
		b.appendTrajectory(spans, s, g, conv, steps)
	}
}

// onRoot lists the record attributes that the generation span leaves out: those the root
// carries (they are the same for every generation of the trace) and the packed token data.
func onRoot(key string) bool {
	switch key {
	case attrRunID, attrStep, attrKind, attrAttempt, attrTokens:
		return true
	}
	return false
}

// chatName is a chat span's name: "chat", followed by the model when the record names one
// (gen_ai.request.model, else gen_ai.response.model), as the GenAI conventions name spans.
func (b *traceBuilder) chatName(g *generation) string {
	if model := modelOf(g.record.Attributes()); model != "" {
		return operationChat + " " + model
	}
	return operationChat
}

func (b *traceBuilder) putModel(dst pcommon.Map, g *generation) {
	for _, key := range []string{attrRequestModel, attrResponseModel} {
		if v, ok := g.record.Attributes().Get(key); ok && v.Type() == pcommon.ValueTypeStr {
			dst.PutStr(key, v.Str())
		}
	}
}

func modelOf(attrs pcommon.Map) string {
	if m := strOf(attrs, attrRequestModel); m != "" {
		return m
	}
	return strOf(attrs, attrResponseModel)
}

// appendEvaluations adds a gen_ai.evaluation.result event for valgen.score (named "score"),
// then for each numeric extra column valgen.extra.<name> (named <name>, in the order of the
// names' bytes), each with gen_ai.evaluation.score.value and, when the value is exactly 0 or
// 1, the label "fail" or "pass". A value that is not an int or a finite double
// (valgen.score_invalid, a text or bool extra, NaN) gives no event.
func appendEvaluations(s ptrace.Span, attrs pcommon.Map, at int64) {
	if v, ok := attrs.Get(attrScore); ok {
		appendEvaluation(s, "score", v, at)
	}
	var extras []string
	for k := range attrs.All() {
		if strings.HasPrefix(k, extraPrefix) {
			extras = append(extras, k)
		}
	}
	sort.Strings(extras)
	for _, k := range extras {
		v, _ := attrs.Get(k)
		appendEvaluation(s, k[len(extraPrefix):], v, at)
	}
}

func appendEvaluation(s ptrace.Span, name string, v pcommon.Value, at int64) {
	value, ok := numeric(v)
	if !ok {
		return
	}
	e := s.Events().AppendEmpty()
	e.SetName(eventEvaluation)
	e.SetTimestamp(pcommon.Timestamp(at)) //nolint:gosec // after 1970
	e.Attributes().PutStr(attrEvalName, name)
	e.Attributes().PutDouble(attrEvalScore, value)
	switch value {
	case 0:
		e.Attributes().PutStr(attrEvalLabel, labelFail)
	case 1:
		e.Attributes().PutStr(attrEvalLabel, labelPass)
	}
}

// numeric reads an int or a finite double (-0.0 as 0.0).
func numeric(v pcommon.Value) (float64, bool) {
	switch v.Type() {
	case pcommon.ValueTypeInt:
		return float64(v.Int()), true
	case pcommon.ValueTypeDouble:
		d := v.Double()
		if math.IsNaN(d) || math.IsInf(d, 0) {
			return 0, false
		}
		return d + 0, true // -0.0 + 0 is +0.0
	}
	return 0, false
}
