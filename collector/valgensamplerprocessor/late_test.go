// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"

	"github.com/otel-valgen/otel-valgen/collector/valgensamplerprocessor/internal/metadatatest"
)

// TestLateRecords checks that records for a closed group never open a new group: they are
// dropped, or (late generations only) forwarded marked valgen.late, and counted.
func TestLateRecords(t *testing.T) {
	for _, policy := range []string{LateRecordsDrop, LateRecordsForward} {
		t.Run(policy, func(t *testing.T) {
			h := newHarness(t, func(c *Config) { c.LateRecords = policy })
			h.consume(t, logsOf(append(stepRecords(1, "trainer", 2, 0), endRec(1, "trainer", 2, 2, 1))...))
			require.Len(t, collect(h.sink).summaries, 1)

			h.consume(t, logsOf(rec{step: 1, id: "late/0"}, endRec(1, "trainer", 3, 3, 1)))
			require.Empty(t, h.p.groups, "a late record must not open a group")
			require.NoError(t, h.p.Shutdown(context.Background()))

			got := collect(h.sink)
			require.Len(t, got.summaries, 1)
			if policy == LateRecordsForward {
				require.Len(t, got.kept, 3)
				assert.ElementsMatch(t, []string{"trainer/0", "trainer/1"}, ids(got.kept[:2]))
				assert.Equal(t, "late/0", ids(got.kept[2:])[0])
				late, ok := got.kept[2].Attributes().Get(attrLate)
				require.True(t, ok)
				require.True(t, late.Bool())
			} else {
				require.Len(t, got.kept, 2)
			}
			// Under either policy the late end record is dropped, never forwarded: what else
			// leaves is the valgen.step.late report.
			require.Len(t, got.other, 1, "only the late report; the late end record is not forwarded")
			assert.Equal(t, eventLate, eventName(got.other[0]))
			assert.Equal(t, int64(2), intOf(t, got.other[0], attrLate))
			metadatatest.AssertEqualValgenSamplerRecordsLate(t, h.tel,
				[]metricdata.DataPoint[int64]{{Value: 2}}, metricdatatest.IgnoreTimestamp())
		})
	}
}

// TestMalformedRecords checks that bad attributes are dropped with a reason and never panic.
// A generation whose run, step and attempt are usable is still a record of its step: the
// step's summary counts it in valgen.dropped.invalid.
func TestMalformedRecords(t *testing.T) {
	tests := []struct {
		name   string
		event  string
		edit   func(pcommon.Map)
		reason string
		ofStep bool // a generation of a known step: counted in its summary
	}{
		{"missing run_id", eventGeneration, func(m pcommon.Map) { m.Remove(attrRunID) }, reasonMissingAttribute, false},
		{"int run_id", eventGeneration, func(m pcommon.Map) { m.PutInt(attrRunID, 1) }, reasonInvalidAttribute, false},
		{"empty run_id", eventGeneration, func(m pcommon.Map) { m.PutStr(attrRunID, "") }, reasonInvalidAttribute, false},
		{"missing step", eventGeneration, func(m pcommon.Map) { m.Remove(attrStep) }, reasonMissingAttribute, false},
		{"string step", eventGeneration, func(m pcommon.Map) { m.PutStr(attrStep, "3") }, reasonInvalidAttribute, false},
		{"double step", eventGeneration, func(m pcommon.Map) { m.PutDouble(attrStep, 3) }, reasonInvalidAttribute, false},
		{"missing sample_id", eventGeneration, func(m pcommon.Map) { m.Remove(attrSampleID) }, reasonMissingAttribute, true},
		{"map sample_id", eventGeneration, func(m pcommon.Map) { m.PutEmptyMap(attrSampleID) }, reasonInvalidAttribute, true},
		{"negative sample_key", eventGeneration, func(m pcommon.Map) { m.PutInt(attrSampleKey, -1) }, reasonInvalidAttribute, true},
		{"string sample_key", eventGeneration, func(m pcommon.Map) { m.PutStr(attrSampleKey, "1") }, reasonInvalidAttribute, true},
		{"string seed", eventGeneration, func(m pcommon.Map) { m.PutStr(attrSeed, "42") }, reasonInvalidAttribute, true},
		{"unknown key_version", eventGeneration, func(m pcommon.Map) { m.PutInt(attrKeyVersion, 3) }, reasonInvalidAttribute, true},
		{"zero key_version", eventGeneration, func(m pcommon.Map) { m.PutInt(attrKeyVersion, 0) }, reasonInvalidAttribute, true},
		{"string key_version", eventGeneration, func(m pcommon.Map) { m.PutStr(attrKeyVersion, "2") }, reasonInvalidAttribute, true},
		{"negative sample_count", eventGeneration, func(m pcommon.Map) { m.PutInt(attrSampleCount, -5) }, reasonInvalidAttribute, true},
		{"bytes sample_count", eventGeneration, func(m pcommon.Map) { m.PutEmptyBytes(attrSampleCount) }, reasonInvalidAttribute, true},
		{"end without emitted", eventEnd, func(m pcommon.Map) { m.Remove(attrEmitted) }, reasonMissingAttribute, false},
		{"end with string seen", eventEnd, func(m pcommon.Map) { m.PutStr(attrSeen, "x") }, reasonInvalidAttribute, false},
		{"end with negative expected", eventEnd, func(m pcommon.Map) { m.PutInt(attrSourcesExpected, -2) }, reasonInvalidAttribute, false},
		{"end without run_id", eventEnd, func(m pcommon.Map) { m.Remove(attrRunID) }, reasonMissingAttribute, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, nil)
			ld := logsOf(rec{event: tt.event, id: "a/0", seen: 1, emitted: 1})
			tt.edit(ld.ResourceLogs().At(0).ScopeLogs().At(0).LogRecords().At(0).Attributes())
			require.NotPanics(t, func() { h.consume(t, ld) })
			require.NoError(t, h.p.Shutdown(context.Background()))
			if tt.ofStep {
				got := collect(h.sink)
				require.Len(t, got.summaries, 1, "the step of an invalid generation still closes")
				s := got.summaries[0]
				assert.Equal(t, []int64{1, 0, 1, 1}, []int64{intOf(t, s, attrSeen), intOf(t, s, attrKept),
					intOf(t, s, attrDropped), intOf(t, s, attrDroppedInvalid)})
			} else {
				require.Empty(t, h.sink.AllLogs())
			}
			metadatatest.AssertEqualValgenSamplerRecordsDropped(t, h.tel, []metricdata.DataPoint[int64]{
				{Value: 1, Attributes: attribute.NewSet(attribute.String("reason", tt.reason))},
			}, metricdatatest.IgnoreTimestamp())
		})
	}
}

// TestOddInputsNeverPanic feeds huge bodies, empty batches and odd values through the processor.
func TestOddInputsNeverPanic(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Count = 2 })
	huge := logsOf(rec{id: "huge"})
	huge.ResourceLogs().At(0).ScopeLogs().At(0).LogRecords().At(0).Body().SetStr(strings.Repeat("x", 8<<20))
	odd := plog.NewLogs()
	odd.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty()
	lrs := odd.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords()
	appendRec(lrs, rec{id: "\xff\xfe invalid utf-8"})
	appendRec(lrs, rec{id: ""})
	withEventAttr := lrs.AppendEmpty()
	withEventAttr.Attributes().PutStr(attrEventName, eventGeneration)
	withEventAttr.Attributes().PutStr(attrRunID, "run-1")
	withEventAttr.Attributes().PutInt(attrStep, 0)
	withEventAttr.Attributes().PutStr(attrSampleID, "via-attribute")
	withEventAttr.Attributes().PutInt(attrSeed, -7)
	require.NotPanics(t, func() {
		h.consume(t, plog.NewLogs())
		h.consume(t, huge)
		h.consume(t, odd)
		require.NoError(t, h.p.Shutdown(context.Background()))
	})
	got := collect(h.sink)
	require.Len(t, got.kept, 2)
	require.Len(t, got.summaries, 1)
	require.Equal(t, int64(4), intOf(t, got.summaries[0], attrSeen))
	metadatatest.AssertEqualValgenSamplerRecordsReceived(t, h.tel,
		[]metricdata.DataPoint[int64]{{Value: 4}}, metricdatatest.IgnoreTimestamp())
	metadatatest.AssertEqualValgenSamplerRecordsKept(t, h.tel,
		[]metricdata.DataPoint[int64]{{Value: 2}}, metricdatatest.IgnoreTimestamp())
	metadatatest.AssertEqualValgenSamplerGroupsOpen(t, h.tel,
		[]metricdata.DataPoint[int64]{{Value: 0}}, metricdatatest.IgnoreTimestamp())
	metadatatest.AssertEqualValgenSamplerGroupsClosed(t, h.tel, []metricdata.DataPoint[int64]{
		{Value: 1, Attributes: attribute.NewSet(attribute.String("reason", closedShutdown))},
	}, metricdatatest.IgnoreTimestamp())
}
