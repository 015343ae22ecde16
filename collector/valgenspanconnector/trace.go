// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgenspanconnector // import "github.com/otel-valgen/otel-valgen/collector/valgenspanconnector"

import (
	"sort"
	"strconv"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/otel-valgen/otel-valgen/collector/valgenspanconnector/internal/metadata"
)

// Reasons of the spans-omitted metric: the bound that left a span out.
const (
	omittedMaxSpans = "max_spans_per_trace"
	omittedMaxBytes = "max_trace_bytes"
)

// closedGroup is what a trace is built from: a group's kept generations, deduplicated, and its
// summary record (an empty record for a partial group, with partial naming the reason).
type closedGroup struct {
	key      groupKey
	resource pcommon.Resource
	summary  plog.LogRecord
	partial  string
	gens     []*generation
}

// traceBuilder builds the trace of one closed group.
type traceBuilder struct {
	cfg     *Config
	chatUI  bool
	json    bool // message_encoding: json
	traceID pcommon.TraceID
	attempt string

	spansLeft, bytesLeft   int
	omitted                map[string]int64 // spans left out, by reason
	omittedGenerations     []string
	omittedTrajectories    []string
	omittedSpans, included int64
	prompts                []ptrace.Span // the prompt spans placed

	messages pcommon.Value // json encoding: a slice the messages are gathered in, then encoded
	jsonBuf  []byte
}

// buildTrace builds the group's trace: the root span, then (rollouts) a span per prompt, then a
// span per generation with its trajectory, in rank order, as long as they fit the bounds.
func buildTrace(cfg *Config, cg *closedGroup) (ptrace.Traces, *traceBuilder) {
	b := &traceBuilder{
		cfg:       cfg,
		chatUI:    cfg.MessageParts == MessagePartsChatUI,
		json:      cfg.MessageEncoding == MessageEncodingJSON,
		traceID:   traceIDOf(cg.key),
		attempt:   cg.key.attempt,
		spansLeft: cfg.MaxSpansPerTrace - 1,
	}
	if b.json {
		b.messages = pcommon.NewValueSlice()
	}
	sort.SliceStable(cg.gens, func(i, j int) bool { return less(cg.gens[i], cg.gens[j]) })
	rollout := cg.key.kind == kindRollout
	if rollout { // a prompt's responses together, the prompts in the order of their first response
		first := make(map[string]int, len(cg.gens))
		for i, g := range cg.gens {
			if _, ok := first[g.promptID]; !ok {
				first[g.promptID] = i
			}
		}
		sort.SliceStable(cg.gens, func(i, j int) bool { return first[cg.gens[i].promptID] < first[cg.gens[j].promptID] })
	}

	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	cg.resource.CopyTo(rs.Resource())
	ss := rs.ScopeSpans().AppendEmpty()
	ss.Scope().SetName(metadata.ScopeName)
	spans := ss.Spans()

	root := spans.AppendEmpty()
	start, end := b.rootInterval(cg)
	b.putRoot(root, cg)
	b.bytesLeft = cfg.MaxTraceBytes - spanSize(root)

	scratch := ptrace.NewSpanSlice()
	promptStart, placed := 0, false
	for i, g := range cg.gens {
		parent := root.SpanID()
		if rollout {
			if i == 0 || g.promptID != cg.gens[i-1].promptID {
				promptStart, placed = i, false
			}
			parent = spanIDOf(b.traceID, rolePrompt, b.attempt, g.promptID)
		}
		genEnd := g.time
		if genEnd == 0 {
			genEnd = end
		}
		b.appendGeneration(scratch, g, parent, min(start, genEnd), genEnd)
		var pending []ptrace.Span
		if rollout && !placed {
			p := ptrace.NewSpan()
			b.putPrompt(p, cg, promptStart, root.SpanID())
			pending = append(pending, p)
		}
		if b.fit(g, scratch, pending) {
			if len(pending) > 0 {
				moved := spans.AppendEmpty()
				pending[0].MoveTo(moved)
				b.prompts = append(b.prompts, moved)
				placed = true
			}
			scratch.MoveAndAppendTo(spans)
		}
		scratch.RemoveIf(func(ptrace.Span) bool { return true })
	}
	b.fixTimes(spans, start, end)
	putOmitted(root.Attributes(), b.omittedSpans, b.omittedGenerations, b.omittedTrajectories)
	return td, b
}

// fit decides whether the generation in scratch (its span first, then its trajectory's) goes
// into the trace, with the prompt span when it is its prompt's first response: whole if it
// fits what is left of both bounds; else without its trajectory; else not at all. It leaves in
// scratch what goes in.
func (b *traceBuilder) fit(g *generation, scratch ptrace.SpanSlice, prompt []ptrace.Span) bool {
	spansNeeded, bytesNeeded := len(prompt), 0
	for _, p := range prompt {
		bytesNeeded += spanSize(p)
	}
	genBytes := spanSize(scratch.At(0))
	subBytes := 0
	for i := 1; i < scratch.Len(); i++ {
		subBytes += spanSize(scratch.At(i))
	}
	all := scratch.Len()
	if spansNeeded+all <= b.spansLeft && bytesNeeded+genBytes+subBytes <= b.bytesLeft {
		b.take(spansNeeded+all, bytesNeeded+genBytes+subBytes)
		return true
	}
	reason := b.reason(spansNeeded + all)
	if all > 1 && spansNeeded+1 <= b.spansLeft && bytesNeeded+genBytes <= b.bytesLeft {
		b.omit(reason, int64(all-1))
		b.omittedTrajectories = append(b.omittedTrajectories, g.sampleID)
		first := 0
		scratch.RemoveIf(func(ptrace.Span) bool { first++; return first > 1 })
		b.take(spansNeeded+1, bytesNeeded+genBytes)
		return true
	}
	b.omit(b.reason(spansNeeded+1), int64(all))
	b.omittedGenerations = append(b.omittedGenerations, g.sampleID)
	return false
}

// reason is the bound that a part of spans spans cannot fit in.
func (b *traceBuilder) reason(spans int) string {
	if spans > b.spansLeft {
		return omittedMaxSpans
	}
	return omittedMaxBytes
}

func (b *traceBuilder) take(spans, bytes int) {
	b.spansLeft -= spans
	b.bytesLeft -= bytes
	b.included += int64(spans)
}

func (b *traceBuilder) omit(reason string, spans int64) {
	if b.omitted == nil {
		b.omitted = make(map[string]int64)
	}
	b.omitted[reason] += spans
	b.omittedSpans += spans
}

// rootInterval is the step's interval: from valgen.attempt_start (the attempt's first record)
// to the summary's timestamp (the close); without them, the generations' first and last times.
func (b *traceBuilder) rootInterval(cg *closedGroup) (start, end int64) {
	if v, ok := cg.summary.Attributes().Get(attrAttemptStart); ok && v.Type() == pcommon.ValueTypeInt && v.Int() > 0 {
		start = v.Int()
	}
	end = recordTime(cg.summary)
	for _, g := range cg.gens {
		if g.time == 0 {
			continue
		}
		if start == 0 || g.time < start {
			start = g.time
		}
		end = max(end, g.time)
	}
	if start == 0 {
		start = end
	}
	return start, max(start, end)
}

// putRoot names the root span and puts the step's attributes and the summary's figures.
func (b *traceBuilder) putRoot(root ptrace.Span, cg *closedGroup) {
	root.SetTraceID(b.traceID)
	root.SetSpanID(spanIDOf(b.traceID, roleStep, b.attempt))
	root.SetName("valgen " + cg.key.kind + " step " + strconv.FormatInt(cg.key.step, 10))
	root.SetKind(ptrace.SpanKindInternal)
	root.Status().SetCode(ptrace.StatusCodeOk)
	attrs := root.Attributes()
	attrs.PutStr(attrRunID, cg.key.run)
	attrs.PutInt(attrStep, cg.key.step)
	attrs.PutStr(attrKind, cg.key.kind)
	attrs.PutStr(attrAttempt, cg.key.attempt)
	if cg.partial != "" {
		attrs.PutBool(attrTracePartial, true)
		attrs.PutStr(attrTracePartialReason, cg.partial)
		return
	}
	putSummaryFigures(attrs, cg.summary.Attributes())
}

// putPrompt names the span of a rollout prompt whose first response is cg.gens[first], with
// its id, its responses' count and their mean score (of those with a numeric valgen.score).
func (b *traceBuilder) putPrompt(s ptrace.Span, cg *closedGroup, first int, root pcommon.SpanID) {
	id := cg.gens[first].promptID
	s.SetTraceID(b.traceID)
	s.SetSpanID(spanIDOf(b.traceID, rolePrompt, b.attempt, id))
	s.SetParentSpanID(root)
	s.SetName("valgen prompt " + id)
	s.SetKind(ptrace.SpanKindInternal)
	var responses, scored int64
	var sum float64
	for _, g := range cg.gens[first:] {
		if g.promptID != id {
			break
		}
		responses++
		if v, ok := g.record.Attributes().Get(attrScore); ok {
			if score, ok := numeric(v); ok {
				scored++
				sum += score
			}
		}
	}
	attrs := s.Attributes()
	attrs.PutStr(attrPromptID, id)
	attrs.PutInt("valgen.prompt.responses", responses)
	if scored > 0 {
		attrs.PutDouble("valgen.prompt.score_mean", sum/float64(scored))
	}
}

// fixTimes makes every parent cover its children: a prompt span spans its responses, and the
// root spans the step and every span of the trace.
func (b *traceBuilder) fixTimes(spans ptrace.SpanSlice, start, end int64) {
	prompts := make(map[pcommon.SpanID]ptrace.Span, len(b.prompts))
	for _, p := range b.prompts {
		prompts[p.SpanID()] = p
	}
	for i := 1; i < spans.Len(); i++ {
		s := spans.At(i)
		if _, isPrompt := prompts[s.SpanID()]; isPrompt {
			continue
		}
		if p, ok := prompts[s.ParentSpanID()]; ok {
			if p.StartTimestamp() == 0 || s.StartTimestamp() < p.StartTimestamp() {
				p.SetStartTimestamp(s.StartTimestamp())
			}
			p.SetEndTimestamp(max(p.EndTimestamp(), s.EndTimestamp()))
		}
		start = min(start, int64(s.StartTimestamp())) //nolint:gosec // after 1970
		end = max(end, int64(s.EndTimestamp()))       //nolint:gosec // after 1970
	}
	root := spans.At(0)
	root.SetStartTimestamp(pcommon.Timestamp(start)) //nolint:gosec // after 1970
	root.SetEndTimestamp(pcommon.Timestamp(end))     //nolint:gosec // after 1970
}
