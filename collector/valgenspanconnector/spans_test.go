// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgenspanconnector

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// TestTraceIDIsTheSDKs checks that a validation step's trace id is the one the SDK derives for
// the step's records (otel_valgen._tracing.derived_ids("run-1", 12), computed in Python), and
// that its rollouts and other attempts' runs get other traces.
func TestTraceIDIsTheSDKs(t *testing.T) {
	id := traceIDOf(groupKey{run: "run-1", step: 12, kind: kindValidation, attempt: "L1.1"})
	assert.Equal(t, "63707dbed987b76ec28d048015389be9", id.String())
	assert.Equal(t, id, traceIDOf(groupKey{run: "run-1", step: 12, kind: kindValidation, attempt: "L2.1"}), "attempts share the step's trace")
	assert.NotEqual(t, id, traceIDOf(groupKey{run: "run-1", step: 12, kind: kindRollout}))
	assert.NotEqual(t, id, traceIDOf(groupKey{run: "run-1", step: 13, kind: kindValidation}))
}

// TestSpanIDFunction recomputes span ids from the documented definition.
func TestSpanIDFunction(t *testing.T) {
	trace := traceIDOf(groupKey{run: "run-1", step: 12, kind: kindRollout})
	want := func(parts ...string) string {
		msg := append([]byte{}, trace[:]...)
		msg = append(msg, parts[0]...)
		for _, p := range parts[1:] {
			msg = append(msg, 0)
			msg = append(msg, p...)
		}
		sum := sha256.Sum256(msg)
		return hex.EncodeToString(sum[:8])
	}
	assert.Equal(t, want("step", "L1.1"), spanIDOf(trace, roleStep, "L1.1").String())
	assert.Equal(t, want("prompt", "L1.1", "p1"), spanIDOf(trace, rolePrompt, "L1.1", "p1").String())
	assert.Equal(t, want("generation", "L1.1", "p1/0@t"), spanIDOf(trace, roleGeneration, "L1.1", "p1/0@t").String())
	assert.Equal(t, want("turn", "L1.1", "p1/0@t", "2"), spanIDOf(trace, roleTurn, "L1.1", "p1/0@t", "2").String())
	assert.Equal(t, want("tool", "L1.1", "p1/0@t", "2", "1"), spanIDOf(trace, roleTool, "L1.1", "p1/0@t", "2", "1").String())
}

func messageOf(t *testing.T, raw map[string]any) pcommon.Value {
	t.Helper()
	v := pcommon.NewValueEmpty()
	require.NoError(t, v.FromRaw(raw))
	return v
}

// TestChatUIParts checks the chat_ui rewriting of message parts, and that as_recorded copies.
func TestChatUIParts(t *testing.T) {
	msg := messageOf(t, map[string]any{"role": "assistant", "name": "bot", "parts": []any{
		map[string]any{"type": "reasoning", "content": "hmm"},
		map[string]any{"type": "text", "content": "hello", "original_length": int64(99)},
		map[string]any{"type": "uri", "modality": "image", "uri": "https://x/y.png"},
		map[string]any{"type": "uri", "modality": "audio", "mime_type": "audio/wav", "omitted_bytes": int64(10)},
		map[string]any{"type": "custom", "content": `{"k":1}`},
		map[string]any{"type": "tool_call", "id": "c1", "name": "f", "arguments": map[string]any{"x": int64(1)}},
		map[string]any{"type": "tool_call", "id": int64(3), "name": "g"},
		map[string]any{"type": "tool_call_response", "id": "c1", "response": "ok"},
		"bare",
	}})
	chatUI, asRecorded := &traceBuilder{chatUI: true}, &traceBuilder{}
	out := pcommon.NewSlice()
	chatUI.appendMessage(out, msg)
	want := []any{
		map[string]any{"type": "text", "content": "(thinking) hmm"},
		map[string]any{"type": "text", "content": "hello", "original_length": int64(99)},
		map[string]any{"type": "text", "content": "<image: https://x/y.png>"},
		map[string]any{"type": "text", "content": "<audio: audio/wav>"},
		map[string]any{"type": "text", "content": `{"k":1}`},
		map[string]any{"type": "tool_call", "id": "c1", "name": "f", "arguments": map[string]any{"x": int64(1)}},
		map[string]any{"type": "text", "content": `{"id":3,"name":"g","type":"tool_call"}`},
		map[string]any{"type": "tool_call_response", "id": "c1", "response": "ok"},
		map[string]any{"type": "text", "content": "bare"},
	}
	assert.Equal(t, map[string]any{"role": "assistant", "name": "bot", "parts": want}, out.At(0).Map().AsRaw())

	empty := messageOf(t, map[string]any{"role": "assistant", "parts": []any{}})
	chatUI.appendMessage(out, empty)
	assert.Equal(t, []any{map[string]any{"type": "text", "content": ""}}, out.At(1).Map().AsRaw()["parts"])

	asRecorded.appendMessage(out, msg)
	assert.True(t, msg.Equal(out.At(2)), "as_recorded copies the message")
}

// TestFinishReason checks the finish_reason rule: the message's own, else "length" on the last
// message of a truncated generation, else "tool_call" when the last part is a tool call, else
// "stop"; and that every output message of a span gets one, the input messages none.
func TestFinishReason(t *testing.T) {
	text := map[string]any{"type": "text", "content": "x"}
	call := map[string]any{"type": "tool_call", "id": "c", "name": "f"}
	response := map[string]any{"type": "tool_call_response", "id": "c", "response": "r"}
	output := []any{
		map[string]any{"role": "assistant", "parts": []any{text, call}},                              // 0: ends in a call
		map[string]any{"role": "tool", "parts": []any{response}},                                     // 1
		map[string]any{"role": "assistant", "parts": []any{call, text}},                              // 2: a call, then text
		map[string]any{"role": "assistant", "parts": []any{text}, "finish_reason": "content_filter"}, // 3: its own
		map[string]any{"role": "assistant", "parts": []any{text}, "finish_reason": ""},               // 4: empty is none
		map[string]any{"role": "assistant", "parts": []any{}},                                        // 5: no parts
		map[string]any{"role": "assistant", "parts": []any{text, call}},                              // 6: last
	}
	tests := []struct {
		name      string
		truncated bool
		want      []string
	}{
		{"complete", false, []string{"tool_call", "stop", "stop", "content_filter", "stop", "stop", "tool_call"}},
		{"truncated", true, []string{"tool_call", "stop", "stop", "content_filter", "stop", "stop", "length"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conv := conversation{input: pcommon.NewSlice(), output: pcommon.NewSlice(), truncated: tt.truncated}
			require.NoError(t, conv.output.FromRaw(output))
			for i, want := range tt.want {
				assert.Equal(t, want, conv.finishReason(i), "message %d", i)
			}
			for _, b := range []*traceBuilder{{chatUI: true}, {}} {
				attrs := pcommon.NewMap()
				b.putMessages(attrs, attrOutputMessages, conv, true, 0, conv.output.Len())
				got, _ := attrs.Get(attrOutputMessages)
				for i, msg := range got.Slice().All() {
					assert.Equal(t, tt.want[i], strOf(msg.Map(), keyFinishReason), "message %d (chat_ui %v)", i, b.chatUI)
				}
				assert.Equal(t, output[1], conv.output.At(1).Map().AsRaw(), "the record's messages are not changed")
			}
		})
	}
	in := conversation{input: pcommon.NewSlice(), output: pcommon.NewSlice()}
	require.NoError(t, in.input.FromRaw([]any{map[string]any{"role": "user", "parts": []any{text}}}))
	attrs := pcommon.NewMap()
	(&traceBuilder{chatUI: true}).putMessages(attrs, attrInputMessages, in, false, 0, 1)
	got, _ := attrs.Get(attrInputMessages)
	_, has := got.Slice().At(0).Map().Get(keyFinishReason)
	assert.False(t, has, "input messages have no finish_reason")
}

// TestAppendJSON checks the JSON form of values (message_encoding: json): what encoding/json
// reads back, keys in their order, doubles kept doubles, no HTML escapes.
func TestAppendJSON(t *testing.T) {
	v := pcommon.NewValueEmpty()
	m := v.SetEmptyMap()
	m.PutStr("role", "assistant")
	parts := m.PutEmptySlice("parts")
	p := parts.AppendEmpty().SetEmptyMap()
	p.PutStr("type", "text")
	p.PutStr("content", "a \"quote\", a \\ and <tags> & é\n\t\x01\u2028")
	m.PutInt("n", -3)
	m.PutDouble("d", 1)
	m.PutDouble("e", 1e21)
	m.PutDouble("small", 2.5e-7)
	m.PutDouble("neg0", math.Copysign(0, -1))
	m.PutDouble("nan", math.NaN())
	m.PutBool("b", true)
	m.PutEmptyBytes("bytes").FromRaw([]byte{0, 1, 2})
	m.PutEmpty("empty")
	m.PutEmptyMap("none")
	m.PutEmptySlice("zero")
	m.PutStr("bad", string([]byte{'a', 0xff, 'b'}))
	got := string(appendJSON(nil, v)) // U+2028 is valid in a JSON string: as it is
	assert.Equal(t, `{"role":"assistant","parts":[{"type":"text","content":"a \"quote\", a \\ and <tags> & é\n\t\u0001`+"\u2028"+`"}],`+
		`"n":-3,"d":1.0,"e":1e+21,"small":2.5e-07,"neg0":-0.0,"nan":null,"b":true,"bytes":"AAEC","empty":null,"none":{},"zero":[],"bad":"a\ufffdb"}`, got)
	var back map[string]any
	require.NoError(t, json.Unmarshal([]byte(got), &back))
	assert.Equal(t, "a \"quote\", a \\ and <tags> & é\n\t\x01\u2028", back["parts"].([]any)[0].(map[string]any)["content"])
	assert.Equal(t, 2.5e-7, back["small"])
}

// TestEvaluationEvents checks the evaluation events: score first, then the numeric extras by
// name; labels only at exactly 0 and 1; no event for what is not a finite number.
func TestEvaluationEvents(t *testing.T) {
	attrs := pcommon.NewMap()
	require.NoError(t, attrs.FromRaw(map[string]any{
		"valgen.score": math.Copysign(0, -1), "valgen.extra.z": 0.5, "valgen.extra.a": int64(1),
		"valgen.extra.flag": true, "valgen.extra.note": "x", "valgen.extra.nan": math.NaN(),
		"valgen.extra.inf": math.Inf(1), "valgen.response_length": int64(3),
	}))
	s := ptrace.NewSpan()
	appendEvaluations(s, attrs, 7)
	var got []map[string]any
	for _, e := range s.Events().All() {
		assert.Equal(t, eventEvaluation, e.Name())
		assert.Equal(t, pcommon.Timestamp(7), e.Timestamp())
		got = append(got, e.Attributes().AsRaw())
	}
	assert.Equal(t, []map[string]any{
		{attrEvalName: "score", attrEvalScore: 0.0, attrEvalLabel: labelFail},
		{attrEvalName: "a", attrEvalScore: 1.0, attrEvalLabel: labelPass},
		{attrEvalName: "z", attrEvalScore: 0.5},
	}, got)
	assert.False(t, math.Signbit(got[0][attrEvalScore].(float64)), "-0.0 is reported as 0.0")
}

// TestToolResultWithoutIDs checks that calls without ids take the responses in order, and
// that a call without a response gets no result.
func TestToolResultWithoutIDs(t *testing.T) {
	out := pcommon.NewSlice()
	require.NoError(t, out.FromRaw([]any{
		map[string]any{"role": "assistant", "parts": []any{
			map[string]any{"type": "tool_call", "name": "a"},
			map[string]any{"type": "tool_call", "name": "b"},
			map[string]any{"type": "tool_call", "name": "c"},
		}},
		map[string]any{"role": "tool", "parts": []any{map[string]any{"type": "tool_call_response", "response": "ra"}}},
		map[string]any{"role": "tool", "parts": []any{map[string]any{"type": "tool_call_response", "response": "rb"}}},
		map[string]any{"role": "assistant", "parts": []any{map[string]any{"type": "text", "content": "done"}}},
	}))
	steps := trajectorySteps(out)
	require.Len(t, steps, 5)
	for call, want := range []string{"ra", "rb"} {
		v, ok := toolResult(out, 0, "", call)
		require.True(t, ok)
		assert.Equal(t, want, v.Str())
	}
	_, ok := toolResult(out, 0, "", 2)
	assert.False(t, ok, "the third call has no response before the next turn")
}

// TestNotATrajectory checks that one assistant message without tool calls is a plain chat.
func TestNotATrajectory(t *testing.T) {
	out := pcommon.NewSlice()
	require.NoError(t, out.FromRaw([]any{
		map[string]any{"role": "assistant", "parts": []any{map[string]any{"type": "text", "content": "x"}}},
	}))
	assert.Nil(t, trajectorySteps(out))
}
