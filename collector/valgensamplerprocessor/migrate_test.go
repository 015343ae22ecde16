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
)

// toLegacyGroup rewrites a stored group as version 1 wrote it: no attempt in its key, no
// lifecycle fields.
func toLegacyGroup(t *testing.T, data []byte) (legacyKey string, legacy []byte) {
	t.Helper()
	ld, err := (&plog.ProtoUnmarshaler{}).UnmarshalLogs(data)
	require.NoError(t, err)
	attrs := ld.ResourceLogs().At(0).ScopeLogs().At(0).LogRecords().At(0).Attributes()
	attrs.PutInt(stateAttrVersion, legacyVersion)
	key, _ := attrs.Get(stateAttrKey)
	legacyKey = strings.TrimSuffix(key.Str(), attemptKey(""))
	attrs.PutStr(stateAttrKey, legacyKey)
	for _, name := range []string{stateAttrAttempt, stateAttrFirstSeen, stateAttrAttemptStart} {
		attrs.Remove(name)
	}
	sources, _ := attrs.Get(stateAttrSources)
	for i := 0; i < sources.Slice().Len(); i++ {
		sources.Slice().At(i).Map().Remove(stateAttrSourceAnnounced)
		sources.Slice().At(i).Map().Remove(stateAttrSourceProgress)
	}
	legacy, err = (&plog.ProtoMarshaler{}).MarshalLogs(ld)
	require.NoError(t, err)
	return legacyKey, legacy
}

// TestStorageLegacyState checks that state stored before attempts (version 1 groups, a ring
// of keys without attempt) loads as attempt "": the open step resumes, the closed one is late.
func TestStorageLegacyState(t *testing.T) {
	ext := newMemStorage()
	first := startStored(t, ext, newFakeClock().Now(), nil)
	first.consume(t, logsOf(append(stepRecords(1, "A", 2, 0), endRec(1, "A", 2, 2, 1))...)) // closes
	first.consume(t, logsOf(stepRecords(2, "A", 3, 0)...))                                  // stays open
	var key string
	for key = range first.p.groups {
	}
	kill(first)

	legacyKey, legacy := toLegacyGroup(t, ext.data[groupStorageKey(key)])
	ext.mu.Lock()
	delete(ext.data, groupStorageKey(key))
	ext.mu.Unlock()
	ext.put(groupStorageKey(legacyKey), legacy)
	ext.put(storageKeyIndex, []byte(`["`+strings.ReplaceAll(legacyKey, `"`, `\"`)+`"]`))
	closedKey := string(ext.data[closedStorageKey(0)])
	ext.put(closedStorageKey(0), []byte(strings.TrimSuffix(closedKey, attemptKey(""))))
	ext.put(storageKeyClosedMeta, []byte(`{"cap":10000,"len":1,"next":0}`))

	second := startStored(t, ext, first.clock.Now(), nil)
	require.Len(t, second.p.groups, 1)
	require.Contains(t, second.p.groups, key, "the legacy group gets attempt \"\"")
	second.consume(t, logsOf(stepRecords(1, "A", 1, 0)...)) // late: step 1 closed before the upgrade
	// sources_expected = 2 on the end records: the resumed group closes complete at once (without
	// it, a complete group waits decision_wait for another source, and Shutdown would store it).
	second.consume(t, logsOf(append(stepRecords(2, "B", 2, 0), endRec(2, "A", 3, 3, 2), endRec(2, "B", 2, 2, 2))...))
	require.NoError(t, second.p.Shutdown(context.Background()))
	got := collect(second.sink)
	require.Len(t, got.summaries, 1)
	s := got.summaries[0]
	assert.Equal(t, int64(2), intOf(t, s, attrStep))
	assert.Equal(t, closedComplete, strOf(t, s, attrClosedReason))
	assert.Equal(t, int64(5), intOf(t, s, attrSeen))
	assert.Equal(t, "", strOf(t, s, attrAttempt))
	require.Len(t, got.other, 1)
	assert.Equal(t, eventLate, got.other[0].EventName())
	assert.Equal(t, int64(1), intOf(t, got.other[0], attrLate))

	third := startStored(t, ext, first.clock.Now(), nil)
	assert.Empty(t, third.p.groups)
	assert.Len(t, third.p.closed.ring, 2, "the migrated ring is stored in the current layout")
	assert.Contains(t, third.p.closed.entries, closedKey)
}

// TestStorageLateCountSurvivesRestart checks that the late count of a closed group is stored
// with its late report, so that reports after a restart stay cumulative.
func TestStorageLateCountSurvivesRestart(t *testing.T) {
	ext := newMemStorage()
	first := startStored(t, ext, newFakeClock().Now(), nil)
	first.consume(t, logsOf(append(stepRecords(1, "A", 2, 0), endRec(1, "A", 2, 2, 1))...))
	first.consume(t, logsOf(stepRecords(1, "A", 2, 0)...))
	first.p.closeExpired(context.Background())
	kill(first)

	second := startStored(t, ext, first.clock.Now(), nil)
	second.consume(t, logsOf(stepRecords(1, "A", 1, 0)...))
	second.p.closeExpired(context.Background())
	var reports []int64
	for _, sink := range []output{collect(first.sink), collect(second.sink)} {
		for _, lr := range sink.other {
			require.Equal(t, eventLate, lr.EventName())
			reports = append(reports, intOf(t, lr, attrLate))
		}
	}
	assert.Equal(t, []int64{2, 3}, reports)
}

// TestLifecycleRecords checks start and progress records: they keep a group open, are never
// forwarded, and malformed ones are dropped with a reason.
func TestLifecycleRecords(t *testing.T) {
	tests := []struct {
		name   string
		event  string
		edit   func(pcommon.Map)
		reason string
	}{
		{"start with string sources_expected", eventStart, func(m pcommon.Map) { m.PutStr(attrSourcesExpected, "2") }, reasonInvalidAttribute},
		{"start with negative sources_expected", eventStart, func(m pcommon.Map) { m.PutInt(attrSourcesExpected, -1) }, reasonInvalidAttribute},
		{"progress without step", eventProgress, func(m pcommon.Map) { m.Remove(attrStep) }, reasonMissingAttribute},
		{"progress with negative seen", eventProgress, func(m pcommon.Map) { m.PutInt(attrSeen, -1) }, reasonInvalidAttribute},
		{"int attempt", eventGeneration, func(m pcommon.Map) { m.PutInt(attrAttempt, 1) }, reasonInvalidAttribute},
		{"valid start", eventStart, func(pcommon.Map) {}, ""},
		{"valid progress", eventProgress, func(m pcommon.Map) { m.PutInt(attrSeen, 4) }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, nil)
			ld := logsOf(rec{event: tt.event, id: "a/0", seen: 1, emitted: 1})
			tt.edit(ld.ResourceLogs().At(0).ScopeLogs().At(0).LogRecords().At(0).Attributes())
			h.consume(t, ld)
			require.Empty(t, h.sink.AllLogs(), "nothing is forwarded")
			if tt.reason != "" {
				require.Empty(t, h.p.groups)
				return
			}
			require.Len(t, h.p.groups, 1)
			require.NoError(t, h.p.Shutdown(context.Background()))
			s := collect(h.sink).summaries[0]
			assert.Equal(t, []any{"trainer@i-"}, sliceOf(t, s, attrSourcesMissing), "known, not ended")
		})
	}
}

// TestStorageGroupStoredBeforeInvalidCounts checks that a group stored before the sampler
// kept a source's invalid count and the attempt's last record time loads with invalid 0 and
// its last record's arrival as that time, and that a mistyped invalid count is corrupt.
func TestStorageGroupStoredBeforeInvalidCounts(t *testing.T) {
	h := newHarness(t, nil)
	h.consume(t, logsOf(rec{step: 1, id: "A/0", source: "A"}, rec{step: 1, id: "A/1", source: "A", noID: true}))
	var g *group
	for _, g = range h.p.groups {
	}
	data, err := encodeGroup(g)
	require.NoError(t, err)
	rewrite := func(edit func(header, source pcommon.Map)) []byte {
		ld, err := (&plog.ProtoUnmarshaler{}).UnmarshalLogs(data)
		require.NoError(t, err)
		header := ld.ResourceLogs().At(0).ScopeLogs().At(0).LogRecords().At(0).Attributes()
		sources, _ := header.Get(stateAttrSources)
		edit(header, sources.Slice().At(0).Map())
		out, err := (&plog.ProtoMarshaler{}).MarshalLogs(ld)
		require.NoError(t, err)
		return out
	}

	older := rewrite(func(header, source pcommon.Map) {
		header.Remove(stateAttrAttemptLast)
		source.Remove(stateAttrSourceInvalid)
	})
	back, _, err := decodeGroup(older)
	require.NoError(t, err)
	assert.Equal(t, int64(0), back.sources[sourceID{"A", "i-A"}].invalid)
	assert.Equal(t, g.lastSeen.UnixNano(), back.attemptLast)

	_, _, err = decodeGroup(rewrite(func(_, source pcommon.Map) { source.PutStr(stateAttrSourceInvalid, "1") }))
	require.ErrorIs(t, err, errCorruptState)
}
