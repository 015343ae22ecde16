// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgenspanconnector

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/connector/connectortest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"

	"github.com/otel-valgen/otel-valgen/collector/valgenspanconnector/internal/metadata"
	"github.com/otel-valgen/otel-valgen/collector/valgenspanconnector/internal/metadatatest"
)

const t0 = int64(1767225600000000000)

// rec is a log record for the tests below: event, attributes (raw values) and time.
type rec struct {
	event string
	attrs map[string]any
	at    int64
	body  map[string]any
}

func genRec(step int64, id string, rank int64, extra map[string]any) rec {
	attrs := map[string]any{"valgen.run_id": "run-1", "valgen.step": step, "valgen.attempt": "L1.1",
		"valgen.sample_id": id, "valgen.rank": rank, "valgen.score": 1.0}
	for k, v := range extra {
		attrs[k] = v
	}
	return rec{event: eventGeneration, attrs: attrs, at: t0 + rank*int64(time.Second),
		body: map[string]any{"input": "q " + id, "output": "a " + id}}
}

func summaryRec(step int64, extra map[string]any) rec {
	attrs := map[string]any{"valgen.run_id": "run-1", "valgen.step": step, "valgen.attempt": "L1.1",
		"valgen.kind": "validation", "valgen.attempt_start": t0, "valgen.closed_reason": "complete"}
	for k, v := range extra {
		attrs[k] = v
	}
	return rec{event: eventSummary, attrs: attrs, at: t0 + 60*int64(time.Second)}
}

func recs(t *testing.T, records ...rec) plog.Logs {
	t.Helper()
	ld := plog.NewLogs()
	for _, r := range records {
		rl := ld.ResourceLogs().AppendEmpty()
		rl.Resource().Attributes().PutStr("service.name", "trainer")
		lr := rl.ScopeLogs().AppendEmpty().LogRecords().AppendEmpty()
		lr.SetEventName(r.event)
		lr.SetTimestamp(pcommon.Timestamp(r.at)) //nolint:gosec // after 1970
		require.NoError(t, lr.Attributes().FromRaw(r.attrs))
		if r.body != nil {
			require.NoError(t, lr.Body().SetEmptyMap().FromRaw(r.body))
		}
	}
	return ld
}

// spansOf lists the spans of every trace the sink got, in order.
func spansOf(sink *consumertest.TracesSink) []ptrace.Span {
	var out []ptrace.Span
	for _, td := range sink.AllTraces() {
		for _, rs := range td.ResourceSpans().All() {
			for _, ss := range rs.ScopeSpans().All() {
				for _, s := range ss.Spans().All() {
					out = append(out, s)
				}
			}
		}
	}
	return out
}

func reasonAttr(reason string) attribute.Set {
	return attribute.NewSet(attribute.String("reason", reason))
}

// TestFactory checks that the factory builds a logs-to-traces connector and refuses another
// config type.
func TestFactory(t *testing.T) {
	f := NewFactory()
	assert.Equal(t, metadata.Type, f.Type())
	c, err := f.CreateLogsToTraces(context.Background(), connectortest.NewNopSettings(metadata.Type), f.CreateDefaultConfig(), consumertest.NewNop())
	require.NoError(t, err)
	assert.False(t, c.Capabilities().MutatesData)
	_, err = createLogsToTraces(context.Background(), connectortest.NewNopSettings(metadata.Type), nil, consumertest.NewNop())
	require.ErrorContains(t, err, "invalid config type")
}

// TestShutdownBeforeStartAndTwice checks that Shutdown is safe before Start and twice, and that
// Start twice starts one timer.
func TestShutdownBeforeStartAndTwice(t *testing.T) {
	h := newHarness(t, nil)
	require.NoError(t, h.c.Shutdown(context.Background()))
	require.NoError(t, h.c.Start(context.Background(), componenttest.NewNopHost()))
	require.NoError(t, h.c.Start(context.Background(), componenttest.NewNopHost()))
	require.NoError(t, h.c.Shutdown(context.Background()))
	require.NoError(t, h.c.Shutdown(context.Background()))
	assert.Zero(t, h.sink.SpanCount())
}

// TestSummaryClosesWaitingGroup checks that kept records wait for their summary, in the
// connector's own copies (the request's records may be reused once ConsumeLogs returns), and
// that the summary makes one trace of them.
func TestSummaryClosesWaitingGroup(t *testing.T) {
	h := newHarness(t, nil)
	ld := recs(t, genRec(3, "a/0", 1, nil), genRec(3, "b/0", 2, nil))
	h.consume(t, ld)
	ld.ResourceLogs().RemoveIf(func(plog.ResourceLogs) bool { return true }) // the caller reuses it
	assert.Zero(t, h.sink.SpanCount())
	metadatatest.AssertEqualValgenSpansGroupsBuffered(t, h.tel, []metricdata.DataPoint[int64]{{Value: 1}}, metricdatatest.IgnoreTimestamp())

	h.consume(t, recs(t, genRec(3, "c/0", 3, nil), summaryRec(3, map[string]any{"valgen.kept": int64(3)})))
	require.Len(t, h.sink.AllTraces(), 1)
	spans := spansOf(h.sink)
	require.Len(t, spans, 4)
	for i, id := range []string{"a/0", "b/0", "c/0"} {
		v, _ := spans[i+1].Attributes().Get(attrSampleID)
		assert.Equal(t, id, v.Str())
	}
	v, _ := spans[0].Attributes().Get("valgen.kept")
	assert.Equal(t, int64(3), v.Int())
	metadatatest.AssertEqualValgenSpansGroupsBuffered(t, h.tel, []metricdata.DataPoint[int64]{{Value: 0}}, metricdatatest.IgnoreTimestamp())
	metadatatest.AssertEqualValgenSpansTracesEmitted(t, h.tel, []metricdata.DataPoint[int64]{{Value: 1}}, metricdatatest.IgnoreTimestamp())
	metadatatest.AssertEqualValgenSpansSpansEmitted(t, h.tel, []metricdata.DataPoint[int64]{{Value: 4}}, metricdatatest.IgnoreTimestamp())
}

// TestMaxWaitEmitsPartialTrace checks the unclosed group's fate: after max_wait it is emitted
// as a partial trace (named so on the root, counted), and a summary arriving later emits the
// root again with the same ids and the summary's figures.
func TestMaxWaitEmitsPartialTrace(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MaxWait = time.Minute })
	h.consume(t, recs(t, genRec(5, "a/0", 1, nil)))
	h.clock.Advance(59 * time.Second)
	h.c.expire(context.Background())
	assert.Zero(t, h.sink.SpanCount())
	h.clock.Advance(time.Second)
	h.c.expire(context.Background())
	spans := spansOf(h.sink)
	require.Len(t, spans, 2)
	root := spans[0]
	partial, _ := root.Attributes().Get(attrTracePartial)
	reason, _ := root.Attributes().Get(attrTracePartialReason)
	assert.True(t, partial.Bool())
	assert.Equal(t, partialMaxWait, reason.Str())
	assert.Equal(t, pcommon.Timestamp(t0+int64(time.Second)), root.StartTimestamp())
	metadatatest.AssertEqualValgenSpansGroupsPartial(t, h.tel, []metricdata.DataPoint[int64]{{Value: 1, Attributes: reasonAttr(partialMaxWait)}}, metricdatatest.IgnoreTimestamp())

	h.consume(t, recs(t, summaryRec(5, map[string]any{"valgen.kept": int64(1)})))
	spans = spansOf(h.sink)
	require.Len(t, spans, 3)
	assert.Equal(t, root.TraceID(), spans[2].TraceID())
	assert.Equal(t, root.SpanID(), spans[2].SpanID())
	_, partial2 := spans[2].Attributes().Get(attrTracePartial)
	assert.False(t, partial2)
}

// TestBufferBounds checks that too many waiting groups, or too many waiting bytes, emit the
// oldest groups as partial traces, and that shutdown flushes the rest.
func TestBufferBounds(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MaxGroups = 1 })
	h.consume(t, recs(t, genRec(1, "a/0", 1, nil)))
	h.consume(t, recs(t, genRec(2, "b/0", 1, nil)))
	require.Len(t, h.sink.AllTraces(), 1)
	step, _ := spansOf(h.sink)[0].Attributes().Get(attrStep)
	assert.Equal(t, int64(1), step.Int())

	require.NoError(t, h.c.Shutdown(context.Background()))
	require.Len(t, h.sink.AllTraces(), 2)
	metadatatest.AssertEqualValgenSpansGroupsPartial(t, h.tel, []metricdata.DataPoint[int64]{
		{Value: 1, Attributes: reasonAttr(partialMaxGroups)},
		{Value: 1, Attributes: reasonAttr(partialShutdown)},
	}, metricdatatest.IgnoreTimestamp())
	metadatatest.AssertEqualValgenSpansGroupsBuffered(t, h.tel, []metricdata.DataPoint[int64]{{Value: 0}}, metricdatatest.IgnoreTimestamp())

	h = newHarness(t, func(c *Config) { c.MaxBufferBytes = 100 })
	h.consume(t, recs(t, genRec(1, "a/0", 1, nil)))
	require.Len(t, h.sink.AllTraces(), 1)
	metadatatest.AssertEqualValgenSpansGroupsPartial(t, h.tel, []metricdata.DataPoint[int64]{
		{Value: 1, Attributes: reasonAttr(partialMaxBytes)},
	}, metricdatatest.IgnoreTimestamp())
}

// TestIgnoredRecords checks what makes no span: late generations (valgen.late), records
// without a usable group or sample id, and a sample id delivered twice; other records pass
// unnoticed.
func TestIgnoredRecords(t *testing.T) {
	h := newHarness(t, nil)
	h.consume(t, recs(t,
		genRec(1, "a/0", 1, map[string]any{"valgen.late": true}),
		genRec(1, "", 2, nil),
		genRec(1, "b/0", 3, map[string]any{"valgen.step": "1"}),
		genRec(1, "c/0", 4, nil),
		genRec(1, "c/0", 4, nil),
		rec{event: "valgen.step.late", attrs: map[string]any{"valgen.run_id": "run-1"}},
		rec{event: eventSummary, attrs: map[string]any{"valgen.step": int64(1)}},
		summaryRec(1, nil),
	))
	spans := spansOf(h.sink)
	require.Len(t, spans, 2)
	metadatatest.AssertEqualValgenSpansRecordsIgnored(t, h.tel, []metricdata.DataPoint[int64]{
		{Value: 1, Attributes: reasonAttr(ignoredLate)},
		{Value: 3, Attributes: reasonAttr(ignoredInvalid)},
		{Value: 1, Attributes: reasonAttr(ignoredDuplicate)},
	}, metricdatatest.IgnoreTimestamp())
}

// TestDownstreamError checks that a failed ConsumeTraces is returned to the logs pipeline.
func TestDownstreamError(t *testing.T) {
	cfg := createDefaultConfig().(*Config)
	c, err := newSpanConnector(cfg, consumertest.NewErr(errors.New("traces refused")), connectortest.NewNopSettings(metadata.Type))
	require.NoError(t, err)
	err = c.ConsumeLogs(context.Background(), recs(t, genRec(1, "a/0", 1, nil), summaryRec(1, nil)))
	require.ErrorContains(t, err, "traces refused")
}

// TestTimelessRecords checks records without timestamps: the generation spans end at the
// summary's time, and every span stays inside the root.
func TestTimelessRecords(t *testing.T) {
	h := newHarness(t, nil)
	g := genRec(1, "a/0", 1, nil)
	g.at = 0
	s := summaryRec(1, nil)
	delete(s.attrs, "valgen.attempt_start")
	h.consume(t, recs(t, g, s))
	spans := spansOf(h.sink)
	require.Len(t, spans, 2)
	assert.Equal(t, spans[0].EndTimestamp(), spans[1].EndTimestamp())
	assert.LessOrEqual(t, spans[0].StartTimestamp(), spans[1].StartTimestamp())
}
