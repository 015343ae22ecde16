// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgenspanconnector // import "github.com/otel-valgen/otel-valgen/collector/valgenspanconnector"

import (
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
)

// GenAI attribute keys and message part types (OpenTelemetry GenAI semantic conventions).
const (
	attrOperation      = "gen_ai.operation.name"
	attrInputMessages  = "gen_ai.input.messages"
	attrOutputMessages = "gen_ai.output.messages"
	attrSystemInstr    = "gen_ai.system_instructions"
	attrToolDefs       = "gen_ai.tool.definitions"
	attrRequestModel   = "gen_ai.request.model"
	attrResponseModel  = "gen_ai.response.model"
	attrOutputTokens   = "gen_ai.usage.output_tokens"
	attrToolName       = "gen_ai.tool.name"
	attrToolCallID     = "gen_ai.tool.call.id"
	attrToolArguments  = "gen_ai.tool.call.arguments"
	attrToolResult     = "gen_ai.tool.call.result"
	eventEvaluation    = "gen_ai.evaluation.result"
	attrEvalName       = "gen_ai.evaluation.name"
	attrEvalScore      = "gen_ai.evaluation.score.value"
	attrEvalLabel      = "gen_ai.evaluation.score.label"
	operationChat      = "chat"
	operationTool      = "execute_tool"
	operationAgent     = "invoke_agent"
	roleAssistant      = "assistant"
	roleUser           = "user"
	partText           = "text"
	partReasoning      = "reasoning"
	partToolCall       = "tool_call"
	partToolResponse   = "tool_call_response"
	partURI            = "uri"
	keyRole            = "role"
	keyParts           = "parts"
	keyType            = "type"
	keyContent         = "content"
	keyID              = "id"
	keyName            = "name"
	keyArguments       = "arguments"
	keyResponse        = "response"
	keyFinishReason    = "finish_reason"
	finishStop         = "stop"
	finishLength       = "length"
	finishToolCall     = "tool_call"
	attrGroundTruth    = "valgen.ground_truth"
)

// conversation is a generation's messages: views of the record's gen_ai.input.messages and
// gen_ai.output.messages when it carries them (arrays), else one user and one assistant text
// message built from the body's input and output texts. An empty slice: none. truncated is the
// record's valgen.truncated (the generation was cut at the length limit).
type conversation struct {
	input, output pcommon.Slice
	truncated     bool
}

func conversationOf(lr plog.LogRecord) conversation {
	attrs := lr.Attributes()
	truncated, ok := attrs.Get(attrTruncated)
	return conversation{
		input:     messagesOf(attrs, attrInputMessages, lr.Body(), bodyInput, roleUser),
		output:    messagesOf(attrs, attrOutputMessages, lr.Body(), bodyOutput, roleAssistant),
		truncated: ok && truncated.Type() == pcommon.ValueTypeBool && truncated.Bool(),
	}
}

func messagesOf(attrs pcommon.Map, key string, body pcommon.Value, bodyKey, role string) pcommon.Slice {
	if v, ok := attrs.Get(key); ok && v.Type() == pcommon.ValueTypeSlice {
		return v.Slice()
	}
	s := pcommon.NewSlice()
	if body.Type() != pcommon.ValueTypeMap {
		return s
	}
	text, ok := body.Map().Get(bodyKey)
	if !ok || text.Type() != pcommon.ValueTypeStr {
		return s
	}
	m := s.AppendEmpty().SetEmptyMap()
	m.PutStr(keyRole, role)
	appendTextPart(m.PutEmptySlice(keyParts), text.Str())
	return s
}

// finishReason is the finish_reason of output message i, which the GenAI conventions require
// on every output message: the message's own when it carries a non-empty string; else
// "length" for the last message of a truncated generation (valgen.truncated); else
// "tool_call" when the message's last part is a tool call (the model stopped to call a tool);
// else "stop".
func (c conversation) finishReason(i int) string {
	msg := c.output.At(i)
	if msg.Type() == pcommon.ValueTypeMap {
		if r := strOf(msg.Map(), keyFinishReason); r != "" {
			return r
		}
	}
	if c.truncated && i == c.output.Len()-1 {
		return finishLength
	}
	if parts := partsOf(msg); parts.Len() > 0 {
		last := parts.At(parts.Len() - 1)
		if last.Type() == pcommon.ValueTypeMap && strOf(last.Map(), keyType) == partToolCall {
			return finishToolCall
		}
	}
	return finishStop
}

// beginMessages starts the messages of attribute key: the attribute itself when the encoding
// is structured, else the builder's scratch slice, which endMessages encodes.
func (b *traceBuilder) beginMessages(dst pcommon.Map, key string, n int) pcommon.Slice {
	var out pcommon.Slice
	if b.json {
		out = b.scratchMessages()
	} else {
		out = dst.PutEmptySlice(key)
	}
	out.EnsureCapacity(n)
	return out
}

// endMessages puts the messages begun with beginMessages as one JSON string (json encoding).
func (b *traceBuilder) endMessages(dst pcommon.Map, key string) {
	if b.json {
		b.jsonBuf = appendJSON(b.jsonBuf[:0], b.messages)
		dst.PutStr(key, string(b.jsonBuf))
	}
}

// scratchMessages is the builder's scratch slice (json encoding), emptied.
func (b *traceBuilder) scratchMessages() pcommon.Slice {
	s := b.messages.Slice()
	s.RemoveIf(func(pcommon.Value) bool { return true })
	return s
}

// putMessages puts conv's input (output false) or output messages [from, to) under key
// (nothing when the range is empty); output messages get their finish_reason.
func (b *traceBuilder) putMessages(dst pcommon.Map, key string, conv conversation, output bool, from, to int) {
	if from >= to {
		return
	}
	out := b.beginMessages(dst, key, to-from)
	for i := from; i < to; i++ {
		if output {
			b.appendOutput(out, conv, i)
		} else {
			b.appendMessage(out, conv.input.At(i))
		}
	}
	b.endMessages(dst, key)
}

// appendOutput appends output message i of conv with its finish_reason.
func (b *traceBuilder) appendOutput(dst pcommon.Slice, conv conversation, i int) {
	m := b.appendMessage(dst, conv.output.At(i))
	if m.Type() == pcommon.ValueTypeMap {
		m.Map().PutStr(keyFinishReason, conv.finishReason(i))
	}
}

// putStructured copies a value of a structured GenAI attribute (arguments, results, system
// instructions, tool definitions): as it is, or, with the json encoding, a map or an array as
// its JSON text.
func (b *traceBuilder) putStructured(dst pcommon.Map, key string, v pcommon.Value) {
	if b.json && (v.Type() == pcommon.ValueTypeMap || v.Type() == pcommon.ValueTypeSlice) {
		b.jsonBuf = appendJSON(b.jsonBuf[:0], v)
		dst.PutStr(key, string(b.jsonBuf))
		return
	}
	v.CopyTo(dst.PutEmpty(key))
}

// structured lists the GenAI attributes whose values the conventions define as structured
// ("any": JSON-shaped), besides the messages.
func structured(key string) bool {
	switch key {
	case attrSystemInstr, attrToolDefs, attrToolArguments, attrToolResult:
		return true
	}
	return false
}

// appendMessage copies a message and returns the copy; with chat_ui parts its parts become
// what MLflow's chat view renders (its OTel GenAI reader takes a message only when every part
// is a text, tool_call or tool_call_response and there is at least one): reasoning as a text
// "(thinking) …", a uri part as a text "<modality: uri>", any other part as a text of its
// content (else of its JSON), and a message without parts gets one empty text part. The other
// keys (role, name, finish_reason) stay.
func (b *traceBuilder) appendMessage(dst pcommon.Slice, msg pcommon.Value) pcommon.Value {
	out := dst.AppendEmpty()
	if !b.chatUI || msg.Type() != pcommon.ValueTypeMap {
		msg.CopyTo(out)
		return out
	}
	src := msg.Map()
	m := out.SetEmptyMap()
	m.EnsureCapacity(src.Len() + 1)
	for k, v := range src.All() {
		if k != keyParts {
			v.CopyTo(m.PutEmpty(k))
		}
	}
	parts := m.PutEmptySlice(keyParts)
	if p, ok := src.Get(keyParts); ok && p.Type() == pcommon.ValueTypeSlice {
		parts.EnsureCapacity(p.Slice().Len())
		for _, part := range p.Slice().All() {
			appendChatPart(parts, part)
		}
	}
	if parts.Len() == 0 {
		appendTextPart(parts, "")
	}
	return out
}

func appendChatPart(dst pcommon.Slice, part pcommon.Value) {
	if part.Type() != pcommon.ValueTypeMap {
		appendTextPart(dst, part.AsString())
		return
	}
	pm := part.Map()
	switch strOf(pm, keyType) {
	case partText:
		if isStr(pm, keyContent) {
			part.CopyTo(dst.AppendEmpty())
			return
		}
	case partToolCall:
		if isStr(pm, keyName) && idOK(pm) {
			part.CopyTo(dst.AppendEmpty())
			return
		}
	case partToolResponse:
		if _, ok := pm.Get(keyResponse); ok && idOK(pm) {
			part.CopyTo(dst.AppendEmpty())
			return
		}
	case partReasoning:
		appendTextPart(dst, "(thinking) "+contentOf(pm))
		return
	case partURI:
		what := strOf(pm, "uri")
		if what == "" {
			what = strOf(pm, "mime_type")
		}
		if what == "" {
			what = "inline data"
		}
		modality := strOf(pm, "modality")
		if modality == "" {
			modality = "media"
		}
		appendTextPart(dst, "<"+modality+": "+what+">")
		return
	}
	if _, ok := pm.Get(keyContent); ok {
		appendTextPart(dst, contentOf(pm))
		return
	}
	appendTextPart(dst, part.AsString()) // the part's JSON
}

func appendTextPart(dst pcommon.Slice, text string) {
	p := dst.AppendEmpty().SetEmptyMap()
	p.PutStr(keyType, partText)
	p.PutStr(keyContent, text)
}

// contentOf is a part's content as a text (a structured content as its JSON).
func contentOf(pm pcommon.Map) string {
	if v, ok := pm.Get(keyContent); ok {
		return v.AsString()
	}
	return ""
}

func strOf(m pcommon.Map, key string) string {
	if v, ok := m.Get(key); ok && v.Type() == pcommon.ValueTypeStr {
		return v.Str()
	}
	return ""
}

func isStr(m pcommon.Map, key string) bool {
	v, ok := m.Get(key)
	return ok && v.Type() == pcommon.ValueTypeStr
}

// idOK: a tool part's id is absent or a string.
func idOK(m pcommon.Map) bool {
	v, ok := m.Get(keyID)
	return !ok || v.Type() == pcommon.ValueTypeStr || v.Type() == pcommon.ValueTypeEmpty
}

// roleOf is a message's role ("" when it is not a map with a string role).
func roleOf(msg pcommon.Value) string {
	if msg.Type() != pcommon.ValueTypeMap {
		return ""
	}
	return strOf(msg.Map(), keyRole)
}

// partsOf is a message's parts (an empty slice when it has none).
func partsOf(msg pcommon.Value) pcommon.Slice {
	if msg.Type() == pcommon.ValueTypeMap {
		if p, ok := msg.Map().Get(keyParts); ok && p.Type() == pcommon.ValueTypeSlice {
			return p.Slice()
		}
	}
	return pcommon.NewSlice()
}
