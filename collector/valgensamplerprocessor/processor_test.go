// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
)

// stepRecords returns n generations of one step from one source, ids "<source>/<i>".
func stepRecords(step int64, source string, n int, count int64) []rec {
	out := make([]rec, 0, n)
	for i := range n {
		out = append(out, rec{step: step, id: fmt.Sprintf("%s/%d", source, i), source: source, count: count})
	}
	return out
}

func endRec(step int64, source string, seen, emitted, expected int64) rec {
	return rec{event: eventEnd, step: step, source: source, seen: seen, emitted: emitted, expected: expected}
}

// TestPassThrough checks that non-valgen records and unknown valgen events leave at once, untouched.
func TestPassThrough(t *testing.T) {
	h := newHarness(t, nil)
	ld := plog.NewLogs()
	lrs := ld.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords()
	lrs.AppendEmpty().Body().SetStr("plain log")
	other := lrs.AppendEmpty()
	other.SetEventName("valgen.step.summary")
	other.Attributes().PutStr(attrRunID, "upstream")
	appendRec(lrs, rec{id: "a/0"})
	h.consume(t, ld)

	got := collect(h.sink)
	require.Empty(t, got.kept, "generations wait for their group to close")
	require.Len(t, got.summaries, 1)
	require.Len(t, got.other, 1)
	require.Equal(t, "plain log", got.other[0].Body().Str())
}

// TestCompleteClose checks that a step closes as soon as every expected source has ended and
// all it emitted has arrived, with ranked records in key order and a reconciling summary.
func TestCompleteClose(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Count = 4 })
	trainer := stepRecords(3, "trainer", 6, 0)
	rollouter := stepRecords(3, "rollouter", 5, 0)
	h.consume(t, logsOf(append(trainer, endRec(3, "trainer", 9, 6, 2))...))
	require.Empty(t, collect(h.sink).summaries, "one of two sources has ended")
	h.consume(t, logsOf(rollouter...))
	require.Empty(t, collect(h.sink).summaries, "rollouter has not ended")
	h.consume(t, logsOf(endRec(3, "rollouter", 5, 5, 2)))

	got := collect(h.sink)
	require.Len(t, got.kept, 4)
	require.Len(t, got.summaries, 1)
	var want []sortKey
	for _, r := range append(trainer, rollouter...) {
		want = append(want, sortKey{key: sampleKey(keyVersionHMAC, defaultSeed, r.id), id: r.id})
	}
	ref := newBottomK[string](4)
	for _, o := range want {
		ref.offer(o, func() string { return o.id })
	}
	var wantIDs []string
	for _, e := range ref.sorted() {
		wantIDs = append(wantIDs, e.item)
	}
	require.Equal(t, wantIDs, ids(got.kept))
	for i, lr := range got.kept {
		assert.Equal(t, int64(i+1), intOf(t, lr, attrRank))
		assert.Equal(t, pcommon.TraceID{1}, lr.TraceID())
		instance, _ := got.resources[i].Attributes().Get(attrServiceInstance)
		assert.Equal(t, "i-"+strOf(t, lr, attrSource), instance.Str(), "resource preserved")
	}
	s := got.summaries[0]
	assert.Equal(t, "run-1", strOf(t, s, attrRunID))
	assert.Equal(t, int64(3), intOf(t, s, attrStep))
	assert.Equal(t, int64(9+5), intOf(t, s, attrSeen))
	assert.Equal(t, int64(4), intOf(t, s, attrKept))
	assert.Equal(t, int64(2), intOf(t, s, attrSources))
	assert.Equal(t, int64(2), intOf(t, s, attrSourcesEnded))
	assert.Equal(t, int64(2), intOf(t, s, attrSourcesExpected))
	assert.Equal(t, int64(0), intOf(t, s, attrLate))
	assert.Equal(t, int64(0), intOf(t, s, attrMissing))
	assert.Equal(t, closedComplete, strOf(t, s, attrClosedReason))
	assert.Equal(t, pcommon.TraceID{1}, s.TraceID())
	assert.Equal(t, plog.SeverityNumberInfo, s.SeverityNumber())
	assert.Zero(t, len(h.p.groups))
}

// TestWaitClose checks that a group that cannot complete closes decision_wait after its last
// record, unless fewer sources than sources_expected have ended: then only max_step_duration
// closes it.
func TestWaitClose(t *testing.T) {
	tests := []struct {
		name     string
		expected int64         // sources_expected of rollouter's end record
		after    time.Duration // from the last record to the close
		reason   string
	}{
		{"no sources_expected", 0, 10 * time.Second, closedWait},
		{"sources_expected not reached", 2, time.Hour - 9*time.Second, closedMaxDuration},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, func(c *Config) { c.DecisionWait = 10 * time.Second; c.MaxStepDuration = time.Hour })
			h.consume(t, logsOf(stepRecords(1, "trainer", 3, 0)...))
			h.clock.Advance(9 * time.Second)
			h.consume(t, logsOf(append(stepRecords(1, "rollouter", 2, 0), endRec(1, "rollouter", 3, 3, tt.expected))...))
			h.clock.Advance(tt.after - time.Millisecond)
			h.p.closeExpired(context.Background())
			require.Empty(t, collect(h.sink).summaries, "too early")

			h.clock.Advance(time.Millisecond)
			h.p.closeExpired(context.Background())
			got := collect(h.sink)
			require.Len(t, got.summaries, 1)
			s := got.summaries[0]
			assert.Equal(t, tt.reason, strOf(t, s, attrClosedReason))
			assert.Equal(t, int64(3+3), intOf(t, s, attrSeen))
			assert.Equal(t, int64(1), intOf(t, s, attrMissing), "rollouter emitted 3, 2 arrived")
			assert.Equal(t, int64(5), intOf(t, s, attrKept))
			assert.Equal(t, []any{"trainer@i-trainer"}, sliceOf(t, s, attrSourcesMissing))
		})
	}
}

// TestCompleteAfterSilence pins when a complete group closes: at once when sources_expected is
// set (on a start or an end record); without it only after decision_wait of silence since its
// last record, because another source may still announce itself: a start record arriving in
// that window makes the group incomplete again until the new source ends.
func TestCompleteAfterSilence(t *testing.T) {
	const wait = 10 * time.Second
	const ms = time.Millisecond
	part := func(source string, expected int64) []rec {
		return append(stepRecords(1, source, 2, 0), endRec(1, source, 2, 2, expected))
	}
	start := func(source string, expected int64) rec {
		return rec{event: eventStart, step: 1, source: source, expected: expected}
	}
	type event struct {
		at      time.Duration // since the first event
		records []rec         // consumed at `at`, in one batch
		tick    bool          // closeExpired at `at`, after the records
		closed  bool          // the group has closed after this event
	}
	tests := []struct {
		name     string
		events   []event
		closedAt time.Duration // summary timestamp, since the first event
		ended    int64         // valgen.sources_ended
		late     int64         // last valgen.step.late count (0: none)
	}{
		{
			name:     "sources_expected on the end record: closes at once",
			events:   []event{{at: 0, records: part("A", 1), closed: true}},
			closedAt: 0, ended: 1,
		},
		{
			name: "sources_expected on a start record: closes at once when the last promised source ends",
			events: []event{
				{at: 0, records: part("A", 0)},
				{at: wait - ms, records: []rec{start("B", 2)}},
				{at: 3 * wait, tick: true}, // one of the two promised sources ended: silence does not close it
				{at: 3 * wait, records: part("B", 0), closed: true},
			},
			closedAt: 3 * wait, ended: 2,
		},
		{
			name: "no sources_expected: not before decision_wait of silence",
			events: []event{
				{at: 0, records: part("A", 0)},
				{at: 0, tick: true},
				{at: wait - ms, tick: true},
				{at: wait, tick: true, closed: true},
			},
			closedAt: wait, ended: 1,
		},
		{
			name: "no sources_expected: a start within the window keeps the group open until the new source ends",
			events: []event{
				{at: 0, records: part("A", 0)},                 // complete, but B may still announce itself
				{at: wait - ms, records: []rec{start("B", 0)}}, // B does: not complete any more
				{at: wait, tick: true},                         // A's decision_wait is up, B's start is 1 ms old
				{at: 2*wait - 2*ms, tick: true},                // B has not ended, silent for wait - 1 ms
				{at: 2*wait - 2*ms, records: part("B", 0)},     // complete again
				{at: 3*wait - 3*ms, tick: true},                // silent for wait - 1 ms
				{at: 3*wait - 2*ms, tick: true, closed: true},
			},
			closedAt: 3*wait - 2*ms, ended: 2,
		},
		{
			name: "no sources_expected: a record after decision_wait of silence is late",
			events: []event{
				{at: 0, records: part("A", 0)},
				// the group closes (complete) before the record joins it: the record is late
				{at: wait, records: []rec{{step: 1, id: "A/9", source: "A"}}, closed: true},
				{at: wait, tick: true, closed: true}, // reports it
			},
			closedAt: wait, ended: 1, late: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, func(c *Config) { c.DecisionWait = wait; c.MaxStepDuration = time.Hour })
			base := h.clock.Now()
			for i, ev := range tt.events {
				h.clock.Advance(base.Add(ev.at).Sub(h.clock.Now()))
				if len(ev.records) > 0 {
					h.consume(t, logsOf(ev.records...))
				}
				if ev.tick {
					h.p.closeExpired(context.Background())
				}
				closed := 0
				if ev.closed {
					closed = 1
				}
				require.Len(t, collect(h.sink).summaries, closed, "after event %d (at %v)", i, ev.at)
				require.Len(t, h.p.groups, 1-closed, "after event %d: a late record never opens a group", i)
			}
			got := collect(h.sink)
			s := got.summaries[0]
			assert.Equal(t, closedComplete, strOf(t, s, attrClosedReason))
			assert.Equal(t, base.Add(tt.closedAt), s.Timestamp().AsTime())
			assert.Equal(t, tt.ended, intOf(t, s, attrSourcesEnded))
			assert.Equal(t, 2*tt.ended, intOf(t, s, attrKept), "every generation of the ended sources")
			assert.Empty(t, sliceOf(t, s, attrSourcesMissing))
			var late int64
			for _, lr := range got.other {
				require.Equal(t, eventLate, lr.EventName())
				late = intOf(t, lr, attrLate)
			}
			assert.Equal(t, tt.late, late)
		})
	}
}

// TestWaitCloseByTimer checks that the goroutine Start launches closes expired groups.
func TestWaitCloseByTimer(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.DecisionWait = 20 * time.Millisecond })
	h.p.now = time.Now
	require.NoError(t, h.p.Start(context.Background(), componenttest.NewNopHost()))
	h.consume(t, logsOf(stepRecords(1, "trainer", 3, 0)...))
	require.Eventually(t, func() bool { return len(collect(h.sink).summaries) == 1 }, 5*time.Second, 5*time.Millisecond)
	require.NoError(t, h.p.Shutdown(context.Background()))
	assert.Equal(t, closedWait, strOf(t, collect(h.sink).summaries[0], attrClosedReason))
}

// TestShutdownFlush checks that shutdown emits every open group and is safe to repeat.
func TestShutdownFlush(t *testing.T) {
	h := newHarness(t, nil)
	require.NoError(t, h.p.Start(context.Background(), componenttest.NewNopHost()))
	h.consume(t, logsOf(stepRecords(1, "trainer", 3, 0)...))
	h.consume(t, logsOf(stepRecords(2, "trainer", 2, 0)...))
	require.NoError(t, h.p.Shutdown(context.Background()))
	require.NoError(t, h.p.Shutdown(context.Background()))
	got := collect(h.sink)
	require.Len(t, got.kept, 5)
	require.Len(t, got.summaries, 2)
	for _, s := range got.summaries {
		assert.Equal(t, closedShutdown, strOf(t, s, attrClosedReason))
	}
	assert.Equal(t, int64(1), intOf(t, got.summaries[0], attrStep), "oldest group first")
}

// TestShutdownBeforeStart checks that shutdown works on a processor that never started.
func TestShutdownBeforeStart(t *testing.T) {
	h := newHarness(t, nil)
	require.NoError(t, h.p.Shutdown(context.Background()))
	require.NoError(t, h.p.Shutdown(context.Background()))
	require.Empty(t, h.sink.AllLogs())
}

// TestSampleCountCap checks that k is the record's sample_count capped by max_count, else count.
func TestSampleCountCap(t *testing.T) {
	tests := []struct {
		name  string
		count int64
		want  int
	}{
		{"asked below cap", 5, 5},
		{"asked above cap", 500, 8},
		{"not asked", 0, 3},
		{"asked for none", zeroCount, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, func(c *Config) { c.Count = 3; c.MaxCount = 8 })
			h.consume(t, logsOf(stepRecords(1, "trainer", 20, tt.count)...))
			require.NoError(t, h.p.Shutdown(context.Background()))
			got := collect(h.sink)
			require.Len(t, got.kept, tt.want)
			require.Equal(t, int64(tt.want), intOf(t, got.summaries[0], attrKept))
			require.Equal(t, int64(20), intOf(t, got.summaries[0], attrSeen))
		})
	}
}

// TestDuplicatesKeptOnce checks that a record delivered twice is kept once.
func TestDuplicatesKeptOnce(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Count = 10 })
	records := stepRecords(1, "trainer", 4, 0)
	h.consume(t, logsOf(records...))
	h.consume(t, logsOf(records...))
	require.NoError(t, h.p.Shutdown(context.Background()))
	require.Len(t, collect(h.sink).kept, 4)
}

// TestMaxGroups checks that opening a group beyond max_groups closes the oldest one early.
func TestMaxGroups(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MaxGroups = 2 })
	for step := int64(1); step <= 3; step++ {
		h.consume(t, logsOf(stepRecords(step, "trainer", 2, 0)...))
	}
	got := collect(h.sink)
	require.Len(t, got.summaries, 1)
	assert.Equal(t, int64(1), intOf(t, got.summaries[0], attrStep))
	assert.Equal(t, closedMaxGroups, strOf(t, got.summaries[0], attrClosedReason))
	assert.Len(t, h.p.groups, 2)
}
