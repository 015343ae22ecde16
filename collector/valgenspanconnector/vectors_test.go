// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgenspanconnector

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// update rewrites the expected spans of the shared vectors from what the connector emits
// (go test -run TestSpanVectors -update); review the diff before committing it.
var update = flag.Bool("update", false, "rewrite testdata/spans/*.json expected spans")

var sharedVectors = filepath.Join("..", "..", "testdata", "spans")

// spanVector is one file of testdata/spans.
type spanVector struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Config      struct {
		MaxSpansPerTrace int    `json:"max_spans_per_trace,omitempty"`
		MaxTraceBytes    int    `json:"max_trace_bytes,omitempty"`
		MessageParts     string `json:"message_parts,omitempty"`
		MessageEncoding  string `json:"message_encoding,omitempty"`
	} `json:"config"`
	Batches  [][]testRecord `json:"batches"`
	Expected struct {
		Traces []vectorTrace `json:"traces"`
	} `json:"expected"`
}

type vectorTrace struct {
	Resource json.RawMessage `json:"resource"`
	Spans    []vectorSpan    `json:"spans"`
}

type vectorSpan struct {
	Name       string          `json:"name"`
	TraceID    string          `json:"trace_id"`
	SpanID     string          `json:"span_id"`
	Parent     int             `json:"parent"`
	ParentName string          `json:"parent_name,omitempty"`
	Kind       string          `json:"kind"`
	Status     string          `json:"status"`
	Start      int64           `json:"start_unix_nano"`
	End        int64           `json:"end_unix_nano"`
	Attributes json.RawMessage `json:"attributes"`
	Events     []vectorEvent   `json:"events,omitempty"`
}

type vectorEvent struct {
	Name       string          `json:"name"`
	Time       int64           `json:"time_unix_nano"`
	Attributes json.RawMessage `json:"attributes"`
}

// vectorTraceOf spells an emitted trace as the vectors do: spans in emission order, each
// parent by its index (-1: none) and name.
func vectorTraceOf(t *testing.T, td ptrace.Traces) vectorTrace {
	t.Helper()
	require.Equal(t, 1, td.ResourceSpans().Len())
	rs := td.ResourceSpans().At(0)
	require.Equal(t, 1, rs.ScopeSpans().Len())
	spans := rs.ScopeSpans().At(0).Spans()
	index := map[string]int{}
	out := vectorTrace{Resource: mapJSON(rs.Resource().Attributes())}
	for i, s := range spans.All() {
		_, dup := index[s.SpanID().String()]
		require.False(t, dup, "span id %s twice in one trace", s.SpanID())
		index[s.SpanID().String()] = i
		vs := vectorSpan{
			Name: s.Name(), TraceID: s.TraceID().String(), SpanID: s.SpanID().String(), Parent: -1,
			Kind: strings.ToLower(s.Kind().String()), Status: strings.ToLower(s.Status().Code().String()),
			Start: int64(s.StartTimestamp()), End: int64(s.EndTimestamp()), //nolint:gosec // after 1970
			Attributes: mapJSON(s.Attributes()),
		}
		if !s.ParentSpanID().IsEmpty() {
			p, ok := index[s.ParentSpanID().String()]
			require.True(t, ok, "span %q: its parent precedes it in the trace", s.Name())
			vs.Parent, vs.ParentName = p, spans.At(p).Name()
		}
		for _, e := range s.Events().All() {
			vs.Events = append(vs.Events, vectorEvent{Name: e.Name(), Time: int64(e.Timestamp()), Attributes: mapJSON(e.Attributes())}) //nolint:gosec // after 1970
		}
		out.Spans = append(out.Spans, vs)
	}
	return out
}

// canonical re-encodes a vector trace so that hand-written and emitted JSON compare equal.
func canonical(t *testing.T, vt vectorTrace) string {
	t.Helper()
	norm := func(raw json.RawMessage) json.RawMessage {
		if len(raw) == 0 {
			return raw
		}
		var b bytes.Buffer
		require.NoError(t, json.Compact(&b, raw))
		return b.Bytes()
	}
	vt.Resource = norm(vt.Resource)
	for i := range vt.Spans {
		vt.Spans[i].Attributes = norm(vt.Spans[i].Attributes)
		for j := range vt.Spans[i].Events {
			vt.Spans[i].Events[j].Attributes = norm(vt.Spans[i].Events[j].Attributes)
		}
	}
	b, err := json.MarshalIndent(vt, "", " ")
	require.NoError(t, err)
	return string(b)
}

// TestSpanVectors replays every testdata/spans case: each batch is one ConsumeLogs call, and
// the traces emitted (in order) must be the expected ones, span by span.
func TestSpanVectors(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(sharedVectors, "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".json"), func(t *testing.T) {
			data, err := os.ReadFile(file)
			require.NoError(t, err)
			var v spanVector
			require.NoError(t, json.Unmarshal(data, &v))
			h := newHarness(t, func(cfg *Config) {
				if v.Config.MaxSpansPerTrace > 0 {
					cfg.MaxSpansPerTrace = v.Config.MaxSpansPerTrace
				}
				if v.Config.MaxTraceBytes > 0 {
					cfg.MaxTraceBytes = v.Config.MaxTraceBytes
				}
				if v.Config.MessageParts != "" {
					cfg.MessageParts = v.Config.MessageParts
				}
				if v.Config.MessageEncoding != "" {
					cfg.MessageEncoding = v.Config.MessageEncoding
				}
			})
			for _, batch := range v.Batches {
				h.consume(t, logsOf(t, batch))
			}
			var got []vectorTrace
			for _, td := range h.sink.AllTraces() {
				got = append(got, vectorTraceOf(t, td))
			}
			for _, vt := range got {
				checkInvariants(t, vt)
			}
			if *update {
				v.Expected.Traces = got
				var out bytes.Buffer
				enc := json.NewEncoder(&out)
				enc.SetEscapeHTML(false)
				enc.SetIndent("", " ")
				require.NoError(t, enc.Encode(v))
				require.NoError(t, os.WriteFile(file, out.Bytes(), 0o600))
				return
			}
			require.Len(t, got, len(v.Expected.Traces), "traces emitted")
			for i := range got {
				assert.Equal(t, canonical(t, v.Expected.Traces[i]), canonical(t, got[i]), "trace %d", i)
			}
		})
	}
}

// checkInvariants checks what holds for every trace, independently of the expected spans: one
// trace id, the root first and alone without a parent, every child inside its parent's
// interval and, among siblings, starting no earlier than the one before it.
func checkInvariants(t *testing.T, vt vectorTrace) {
	t.Helper()
	require.NotEmpty(t, vt.Spans)
	assert.Equal(t, -1, vt.Spans[0].Parent, "the root comes first")
	lastStart := map[int]int64{}
	for i, s := range vt.Spans {
		assert.Equal(t, vt.Spans[0].TraceID, s.TraceID, "span %d: one trace id", i)
		assert.LessOrEqual(t, s.Start, s.End, "span %d %q: start <= end", i, s.Name)
		if i == 0 {
			continue
		}
		require.GreaterOrEqual(t, s.Parent, 0, "span %d %q has a parent", i, s.Name)
		p := vt.Spans[s.Parent]
		assert.GreaterOrEqual(t, s.Start, p.Start, "span %d %q starts inside its parent", i, s.Name)
		assert.LessOrEqual(t, s.End, p.End, "span %d %q ends inside its parent", i, s.Name)
		assert.GreaterOrEqual(t, s.Start, lastStart[s.Parent], "span %d %q: siblings in order", i, s.Name)
		lastStart[s.Parent] = s.Start
	}
}
