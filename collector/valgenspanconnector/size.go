// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgenspanconnector // import "github.com/otel-valgen/otel-valgen/collector/valgenspanconnector"

import (
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// The sizes below estimate the OTLP protobuf encoding: the bytes of every text and a few bytes
// for each field's tag, length and numbers. They stay within a few percent of it for the
// text-heavy spans of this connector, and cost one walk over the values, no encoding.

const spanOverhead = 64 // ids, parent, times, kind, status and their tags

// valueSize estimates an attribute value.
func valueSize(v pcommon.Value) int {
	switch v.Type() {
	case pcommon.ValueTypeStr:
		return len(v.Str()) + 3
	case pcommon.ValueTypeBytes:
		return v.Bytes().Len() + 3
	case pcommon.ValueTypeInt, pcommon.ValueTypeDouble:
		return 10
	case pcommon.ValueTypeBool:
		return 3
	case pcommon.ValueTypeMap:
		return mapSize(v.Map()) + 3
	case pcommon.ValueTypeSlice:
		s := v.Slice()
		n := 3
		for i := 0; i < s.Len(); i++ {
			n += valueSize(s.At(i)) + 2
		}
		return n
	default:
		return 2
	}
}

// mapSize estimates attributes (a map's key-value pairs).
func mapSize(m pcommon.Map) int {
	n := 0
	for k, v := range m.All() {
		n += len(k) + valueSize(v) + 4
	}
	return n
}

// spanSize estimates a span with its attributes and events.
func spanSize(s ptrace.Span) int {
	n := spanOverhead + len(s.Name()) + mapSize(s.Attributes())
	events := s.Events()
	for i := 0; i < events.Len(); i++ {
		e := events.At(i)
		n += 16 + len(e.Name()) + mapSize(e.Attributes())
	}
	return n
}

// recordSize estimates a log record, what it costs while it waits in the buffer.
func recordSize(lr plog.LogRecord) int {
	return 48 + len(lr.EventName()) + valueSize(lr.Body()) + mapSize(lr.Attributes())
}
