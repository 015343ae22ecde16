// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgenspanconnector // import "github.com/otel-valgen/otel-valgen/collector/valgenspanconnector"

import (
	"strconv"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// step is one span of a trajectory's subtree: an assistant turn, or one of its tool calls.
type step struct {
	turn    int // index of the assistant message among the trajectory's assistant messages
	message int // index of the assistant message in the output messages
	call    int // index of the tool call among the turn's calls; -1 for the turn itself
	part    pcommon.Map
}

// trajectorySteps lists the subtree of a generation's output messages in conversation order:
// each assistant message, then each of its tool calls. It returns nil when the output is not
// a trajectory: at most one assistant message and no tool call.
func trajectorySteps(output pcommon.Slice) []step {
	var steps []step
	turns, calls := 0, 0
	for i, msg := range output.All() {
		if roleOf(msg) != roleAssistant {
			continue
		}
		steps = append(steps, step{turn: turns, message: i, call: -1})
		call := 0
		for _, part := range partsOf(msg).All() {
			if part.Type() == pcommon.ValueTypeMap && strOf(part.Map(), keyType) == partToolCall {
				steps = append(steps, step{turn: turns, message: i, call: call, part: part.Map()})
				call++
			}
		}
		calls += call
		turns++
	}
	if turns <= 1 && calls == 0 {
		return nil
	}
	return steps
}

// appendTrajectory appends the steps' spans beneath parent, in conversation order, each in
// its own slot of parent's interval (slot i is [start + i·d, start + (i+1)·d], d = (end−start)/n
// rounded down, the last one ending at end): a chat span
// per turn (its input: the prompt and what came before it for the first turn, else the
// messages since the previous assistant message; its output: the assistant message) and an
// execute_tool span per call (gen_ai.tool.call.result from the tool_call_response of the same
// id among the messages before the next assistant message; without an id, the call's
// position among those responses).
func (b *traceBuilder) appendTrajectory(spans ptrace.SpanSlice, parent ptrace.Span, g *generation, conv conversation, steps []step) {
	start, end := int64(parent.StartTimestamp()), int64(parent.EndTimestamp()) //nolint:gosec // after 1970
	n := int64(len(steps))
	slot := (end - start) / n
	prev := -1 // the previous turn's message
	for i, st := range steps {
		s := spans.AppendEmpty()
		s.SetTraceID(parent.TraceID())
		s.SetParentSpanID(parent.SpanID())
		from, to := start+int64(i)*slot, start+int64(i+1)*slot
		if i == len(steps)-1 {
			to = end // the last slot takes what the division left
		}
		s.SetStartTimestamp(pcommon.Timestamp(from)) //nolint:gosec // after 1970
		s.SetEndTimestamp(pcommon.Timestamp(to))     //nolint:gosec // as above
		turn := strconv.Itoa(st.turn)
		attrs := s.Attributes()
		if st.call < 0 {
			s.SetSpanID(spanIDOf(b.traceID, roleTurn, b.attempt, g.sampleID, turn))
			s.SetName(b.chatName(g))
			s.SetKind(ptrace.SpanKindClient)
			attrs.PutStr(attrOperation, operationChat)
			b.putModel(attrs, g)
			attrs.PutInt("valgen.turn", int64(st.turn))
			b.putTurnInput(attrs, conv, prev, st.message)
			b.putMessages(attrs, attrOutputMessages, conv, true, st.message, st.message+1)
			prev = st.message
			continue
		}
		name := strOf(st.part, keyName)
		id := strOf(st.part, keyID)
		s.SetSpanID(spanIDOf(b.traceID, roleTool, b.attempt, g.sampleID, turn, strconv.Itoa(st.call)))
		s.SetName(operationTool + " " + name)
		s.SetKind(ptrace.SpanKindInternal)
		attrs.PutStr(attrOperation, operationTool)
		attrs.PutStr(attrToolName, name)
		if id != "" {
			attrs.PutStr(attrToolCallID, id)
		}
		if args, ok := st.part.Get(keyArguments); ok {
			b.putStructured(attrs, attrToolArguments, args)
		}
		if result, ok := toolResult(conv.output, st.message, id, st.call); ok {
			b.putStructured(attrs, attrToolResult, result)
		}
	}
}

// putTurnInput puts the input messages of the turn whose assistant message is output message
// message: after the previous turn's (prev), the output messages between the two; for the
// first turn (prev < 0), the prompt and the output messages before it. Messages that are
// inputs here are copied as they are, without a finish_reason of their own.
func (b *traceBuilder) putTurnInput(attrs pcommon.Map, conv conversation, prev, message int) {
	if prev >= 0 {
		if prev+1 < message {
			out := b.beginMessages(attrs, attrInputMessages, message-prev-1)
			for j := prev + 1; j < message; j++ {
				b.appendMessage(out, conv.output.At(j))
			}
			b.endMessages(attrs, attrInputMessages)
		}
		return
	}
	if conv.input.Len()+message == 0 {
		return
	}
	out := b.beginMessages(attrs, attrInputMessages, conv.input.Len()+message)
	for _, m := range conv.input.All() {
		b.appendMessage(out, m)
	}
	for j := 0; j < message; j++ {
		b.appendMessage(out, conv.output.At(j))
	}
	b.endMessages(attrs, attrInputMessages)
}

// toolResult finds the response to a tool call of the assistant message at index message.
func toolResult(output pcommon.Slice, message int, id string, call int) (pcommon.Value, bool) {
	nth := 0
	for i := message + 1; i < output.Len(); i++ {
		msg := output.At(i)
		if roleOf(msg) == roleAssistant {
			break
		}
		for _, part := range partsOf(msg).All() {
			if part.Type() != pcommon.ValueTypeMap || strOf(part.Map(), keyType) != partToolResponse {
				continue
			}
			pm := part.Map()
			if (id != "" && strOf(pm, keyID) == id) || (id == "" && nth == call) {
				v, ok := pm.Get(keyResponse)
				return v, ok
			}
			nth++
		}
	}
	return pcommon.Value{}, false
}
