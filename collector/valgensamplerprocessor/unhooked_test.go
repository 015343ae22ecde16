// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// withMarks puts valgen.integration (and valgen.unhooked_reason, when given) on every record of ld.
func withMarks(ld plog.Logs, integration any, reason string) plog.Logs {
	eachRecord(ld, func(_ plog.ResourceLogs, lr plog.LogRecord) {
		switch v := integration.(type) {
		case string:
			lr.Attributes().PutStr(attrIntegration, v)
		case int:
			lr.Attributes().PutInt(attrIntegration, int64(v))
		}
		if reason != "" {
			lr.Attributes().PutStr(attrUnhookedReason, reason)
		}
	})
	return ld
}

// TestUnhookedSourcesMarkTheSummary checks valgen.sources_unhooked: the sources whose start or
// end record says their validation ran in verl's own table (valgen.integration = unhooked),
// listed with the step's balance intact and one warning naming the fix; other marks list nothing.
func TestUnhookedSourcesMarkTheSummary(t *testing.T) {
	tests := []struct {
		name       string
		start, end any // valgen.integration of the trainer's start and end records (nil: absent)
		reason     string
		want       []any
		warning    string
	}{
		{name: "an unhooked part", start: "unhooked", end: "unhooked", reason: "override",
			want: []any{"trainer@i-trainer"}, warning: "trainer@i-trainer: override"},
		{name: "a routed block whose own table ran after all", start: "verl/0.9.1", end: "unhooked", reason: "actor_copy",
			want: []any{"trainer@i-trainer"}, warning: "trainer@i-trainer: actor_copy"},
		{name: "no reason given", start: "unhooked", want: []any{"trainer@i-trainer"}, warning: "trainer@i-trainer: unknown"},
		{name: "a routed part", start: "verl/0.9.1", end: "verl/0.9.1", want: []any{}},
		{name: "the plain API", want: []any{}},
		{name: "a mistyped mark is no mark", start: 1, end: 1, reason: "override", want: []any{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, nil)
			core, logs := observer.New(zap.WarnLevel)
			h.p.logger = zap.New(core)
			h.consume(t, logsOf(append(stepRecords(3, "a", 4, 2), endRec(3, "a", 4, 4, 2))...))
			h.consume(t, withMarks(logsOf(rec{event: eventStart, step: 3, source: "trainer"}), tt.start, tt.reason))
			h.consume(t, withMarks(logsOf(rec{event: eventEnd, step: 3, source: "trainer", expected: 2}), tt.end, tt.reason))
			summaries := collect(h.sink).summaries
			require.Len(t, summaries, 1, "both sources ended: complete at once")
			s := summaries[0]
			assert.Equal(t, closedComplete, strOf(t, s, attrClosedReason))
			assert.Equal(t, tt.want, sliceOf(t, s, attrSourcesUnhooked))
			assert.Equal(t, int64(4), intOf(t, s, attrSeen), "a part with no generation changes nothing")
			requireBalance(t, s)
			warnings := logs.FilterMessageSnippet("verl's own table").All()
			if tt.warning == "" {
				assert.Empty(t, warnings)
				return
			}
			require.Len(t, warnings, 1)
			assert.Contains(t, warnings[0].Message, "ValGenerationsMixin")
			assert.Contains(t, warnings[0].ContextMap()["sources_unhooked"], tt.warning)
		})
	}
}
