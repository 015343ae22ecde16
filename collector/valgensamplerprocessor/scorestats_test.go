// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
)

type scoreStatsCases struct {
	Cases []struct {
		Name       string `json:"name"`
		EndRecords []struct {
			Source     string   `json:"source"`
			Instance   string   `json:"instance"`
			Seen       int64    `json:"seen"`
			Emitted    int64    `json:"emitted"`
			ScoreCount *int64   `json:"score_count"`
			ScoreSum   *float64 `json:"score_sum"`
		} `json:"end_records"`
		Expected struct {
			ScoreCount *int64   `json:"score_count"`
			ScoreSum   *float64 `json:"score_sum"`
			ScoreMean  *float64 `json:"score_mean"`
		} `json:"expected"`
	} `json:"cases"`
}

// assertDouble checks an optional double attribute of the summary: exactly want, or absent.
func assertDouble(t *testing.T, s plog.LogRecord, key string, want *float64) {
	t.Helper()
	got, ok := doubleOf(t, s, key)
	if want == nil {
		assert.Falsef(t, ok, "%s should be absent, is %v", key, got)
		return
	}
	require.Truef(t, ok, "%s missing", key)
	assert.Equalf(t, math.Float64bits(*want), math.Float64bits(got), "%s: want %v, got %v", key, *want, got)
}

// TestStepSummaryScoreStatistics replays the end records of the cases Python generated
// (testdata/sampling/score_stats.json), in order and reversed, and compares the summary's
// score count, sum and mean with the expected ones, bit for bit.
func TestStepSummaryScoreStatistics(t *testing.T) {
	var cases scoreStatsCases
	readJSON(t, "score_stats.json", &cases)
	require.NotEmpty(t, cases.Cases)
	for _, c := range cases.Cases {
		for _, reverse := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/reverse=%v", c.Name, reverse), func(t *testing.T) {
				ends := make([]rec, 0, len(c.EndRecords))
				for _, e := range c.EndRecords {
					r := rec{event: eventEnd, step: 1, source: e.Source, instance: e.Instance, seen: e.Seen, emitted: e.Emitted}
					if e.ScoreCount != nil {
						r.scored, r.scoreCount, r.scoreSum = true, *e.ScoreCount, *e.ScoreSum
					}
					ends = append(ends, r)
				}
				s := summaryOfEnds(t, ends, reverse)
				count, ok := s.Attributes().Get(attrScoreCount)
				if c.Expected.ScoreCount == nil {
					assert.False(t, ok, "valgen.score.count should be absent")
				} else {
					require.True(t, ok, "valgen.score.count missing")
					assert.Equal(t, *c.Expected.ScoreCount, count.Int())
				}
				assertDouble(t, s, attrScoreSum, c.Expected.ScoreSum)
				assertDouble(t, s, attrScoreMean, c.Expected.ScoreMean)
			})
		}
	}
}

// TestEndRecordScoreStatisticsAreChecked checks that an end record's score statistics are
// both present or both absent, a count >= 0 and a finite sum; otherwise the record is invalid.
func TestEndRecordScoreStatisticsAreChecked(t *testing.T) {
	tests := []struct {
		name   string
		set    func(pcommon.Map)
		want   scoreStats
		reason string
	}{
		{name: "absent", set: func(pcommon.Map) {}},
		{
			name: "both",
			set:  func(m pcommon.Map) { m.PutInt(attrScoreCount, 3); m.PutDouble(attrScoreSum, 1.25) },
			want: scoreStats{count: 3, sum: 1.25, reported: true},
		},
		{
			name: "int sum",
			set:  func(m pcommon.Map) { m.PutInt(attrScoreCount, 2); m.PutInt(attrScoreSum, 2) },
			want: scoreStats{count: 2, sum: 2, reported: true},
		},
		{name: "count alone", set: func(m pcommon.Map) { m.PutInt(attrScoreCount, 3) }, reason: reasonInvalidAttribute},
		{name: "sum alone", set: func(m pcommon.Map) { m.PutDouble(attrScoreSum, 1) }, reason: reasonInvalidAttribute},
		{
			name:   "negative count",
			set:    func(m pcommon.Map) { m.PutInt(attrScoreCount, -1); m.PutDouble(attrScoreSum, 0) },
			reason: reasonInvalidAttribute,
		},
		{
			name:   "string sum",
			set:    func(m pcommon.Map) { m.PutInt(attrScoreCount, 1); m.PutStr(attrScoreSum, "1") },
			reason: reasonInvalidAttribute,
		},
		{
			name:   "NaN sum",
			set:    func(m pcommon.Map) { m.PutInt(attrScoreCount, 1); m.PutDouble(attrScoreSum, math.NaN()) },
			reason: reasonInvalidAttribute,
		},
		{
			name:   "infinite sum",
			set:    func(m pcommon.Map) { m.PutInt(attrScoreCount, 1); m.PutDouble(attrScoreSum, math.Inf(-1)) },
			reason: reasonInvalidAttribute,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ld := logsOf(rec{event: eventEnd, step: 1, seen: 3, emitted: 0})
			attrs := ld.ResourceLogs().At(0).ScopeLogs().At(0).LogRecords().At(0).Attributes()
			tt.set(attrs)
			end, reason := parseEnd(attrs)
			assert.Equal(t, tt.reason, reason)
			assert.Equal(t, tt.want, end.scores)
		})
	}
}

// TestScoreStatisticsSurviveRestart stores a group whose first source ended with score
// statistics, restarts, ends the second source, and checks the summary counts both; state
// stored before score statistics existed (no score fields) still loads, without them.
func TestScoreStatisticsSurviveRestart(t *testing.T) {
	scoredEnd := func(source string, count int64, sum float64) rec {
		r := endRec(9, source, 5, 0, 2)
		r.scored, r.scoreCount, r.scoreSum = true, count, sum
		return r
	}
	for _, legacy := range []bool{false, true} {
		t.Run(fmt.Sprintf("stored without score fields=%v", legacy), func(t *testing.T) {
			ext := newMemStorage()
			first := startStored(t, ext, newFakeClock().Now(), nil)
			first.consume(t, logsOf(scoredEnd("A", 4, 1.5)))
			var key string
			for key = range first.p.groups {
			}
			kill(first)
			if legacy {
				ext.put(groupStorageKey(key), withoutScoreFields(t, ext.data[groupStorageKey(key)]))
			}

			second := startStored(t, ext, first.clock.Now(), nil)
			require.Contains(t, second.p.groups, key)
			second.consume(t, logsOf(scoredEnd("B", 1, 0.25)))
			out := collect(second.sink)
			require.Len(t, out.summaries, 1)
			s := out.summaries[0]
			assert.Equal(t, closedComplete, strOf(t, s, attrClosedReason))
			wantCount, wantSum := int64(5), 1.75
			if legacy { // source A's statistics were stored by a release without them
				wantCount, wantSum = 1, 0.25
			}
			assert.Equal(t, wantCount, intOf(t, s, attrScoreCount))
			sum, _ := doubleOf(t, s, attrScoreSum)
			mean, _ := doubleOf(t, s, attrScoreMean)
			assert.Equal(t, wantSum, sum)
			assert.Equal(t, wantSum/float64(wantCount), mean)
		})
	}
}

// withoutScoreFields rewrites a stored group as a release before score statistics wrote it.
func withoutScoreFields(t *testing.T, data []byte) []byte {
	t.Helper()
	ld, err := (&plog.ProtoUnmarshaler{}).UnmarshalLogs(data)
	require.NoError(t, err)
	attrs := ld.ResourceLogs().At(0).ScopeLogs().At(0).LogRecords().At(0).Attributes()
	sources, _ := attrs.Get(stateAttrSources)
	removed := 0
	for i := 0; i < sources.Slice().Len(); i++ {
		m := sources.Slice().At(i).Map()
		if m.Remove(stateAttrSourceScoreN) && m.Remove(stateAttrSourceScoreSum) {
			removed++
		}
	}
	require.Equal(t, 1, removed, "the stored source had score statistics to remove")
	out, err := (&plog.ProtoMarshaler{}).MarshalLogs(ld)
	require.NoError(t, err)
	return out
}

// TestStoredScoreStatisticsAreChecked checks that a stored source with half of its score
// statistics, or a sum that is not a finite double, is corrupt state.
func TestStoredScoreStatisticsAreChecked(t *testing.T) {
	for name, edit := range map[string]func(pcommon.Map){
		"count without sum": func(m pcommon.Map) { m.Remove(stateAttrSourceScoreSum) },
		"sum without count": func(m pcommon.Map) { m.Remove(stateAttrSourceScoreN) },
		"NaN sum":           func(m pcommon.Map) { m.PutDouble(stateAttrSourceScoreSum, math.NaN()) },
		"negative count":    func(m pcommon.Map) { m.PutInt(stateAttrSourceScoreN, -2) },
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, nil)
			r := endRec(1, "A", 2, 0, 0)
			r.scored, r.scoreCount, r.scoreSum = true, 2, 1
			h.consume(t, logsOf(r))
			var g *group
			for _, g = range h.p.groups {
			}
			data, err := encodeGroup(g)
			require.NoError(t, err)
			_, _, err = decodeGroup(data)
			require.NoError(t, err, "the untouched state loads")
			ld, err := (&plog.ProtoUnmarshaler{}).UnmarshalLogs(data)
			require.NoError(t, err)
			sources, _ := ld.ResourceLogs().At(0).ScopeLogs().At(0).LogRecords().At(0).Attributes().Get(stateAttrSources)
			edit(sources.Slice().At(0).Map())
			data, err = (&plog.ProtoMarshaler{}).MarshalLogs(ld)
			require.NoError(t, err)
			_, _, err = decodeGroup(data)
			require.ErrorIs(t, err, errCorruptState)
		})
	}
}
