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
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/otel-valgen/otel-valgen/collector/valgensamplerprocessor/internal/metadatatest"
)

// attemptPart is one process's part of step 7 in an attempt: a start record at from, two
// generations, an end record at to (times from the test's epoch).
type attemptPart struct {
	attempt, source string
	from, to        time.Duration
	expected        int64 // sources_expected on its records
}

func (a attemptPart) records(epoch time.Time) []rec {
	base := rec{step: 7, source: a.source, attempt: a.attempt, expected: a.expected}
	start, end := base, base
	start.event, start.at = eventStart, epoch.Add(a.from)
	end.event, end.at, end.seen, end.emitted = eventEnd, epoch.Add(a.to), 2, 2
	out := []rec{start}
	for i := range 2 {
		gen := base
		gen.id, gen.at, gen.expected = fmt.Sprintf("%s-%s/%d", a.attempt, a.source, i), epoch.Add(a.from), 0
		out = append(out, gen)
	}
	return append(out, end)
}

// TestConcurrentAttemptsMarkTheSummary checks valgen.attempts_concurrent: the other attempts
// of the step, open or closed before, whose record times overlap the attempt's and that share
// no source with it (a launch split into attempts), with one warning per step naming the fix.
func TestConcurrentAttemptsMarkTheSummary(t *testing.T) {
	tests := []struct {
		name   string
		parts  []attemptPart
		closes [][]string // the attempts that arrive, then close, together
		want   map[string]int64
		warns  int
	}{
		{
			name:   "two processes of one launch, each its own attempt",
			parts:  []attemptPart{{"p1.1", "w0", 0, time.Second, 0}, {"p2.1", "w1", 100 * time.Millisecond, time.Second, 0}},
			closes: [][]string{{"p1.1", "p2.1"}},
			want:   map[string]int64{"p1.1": 1, "p2.1": 1}, warns: 1,
		},
		{
			name: "three processes, one closing before the others arrive",
			parts: []attemptPart{
				{"p1.1", "w0", 0, 2 * time.Second, 1}, {"p2.1", "w1", time.Second, 3 * time.Second, 0},
				{"p3.1", "w2", time.Second, 3 * time.Second, 0},
			},
			closes: [][]string{{"p1.1"}, {"p2.1", "p3.1"}},
			want:   map[string]int64{"p1.1": 0, "p2.1": 2, "p3.1": 2}, warns: 1,
		},
		{
			name:   "a resumed launch starts after the first one stopped",
			parts:  []attemptPart{{"L1.1", "w0", 0, time.Second, 0}, {"L2.1", "w1", time.Hour, time.Hour + time.Second, 0}},
			closes: [][]string{{"L1.1"}, {"L2.1"}},
			want:   map[string]int64{"L1.1": 0, "L2.1": 0},
		},
		{
			name:   "overlapping attempts that share a source",
			parts:  []attemptPart{{"L.1", "w0", 0, time.Second, 0}, {"L.2", "w0", 0, time.Second, 0}},
			closes: [][]string{{"L.1", "L.2"}},
			want:   map[string]int64{"L.1": 0, "L.2": 0},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, nil)
			core, logs := observer.New(zap.WarnLevel)
			h.p.logger = zap.New(core)
			epoch := h.clock.Now()
			parts := map[string]attemptPart{}
			for _, part := range tt.parts {
				parts[part.attempt] = part
			}
			for _, together := range tt.closes {
				for _, attempt := range together {
					h.consume(t, logsOf(parts[attempt].records(epoch)...))
				}
				h.clock.Advance(defaultDecisionWait)
				h.p.closeExpired(context.Background())
			}
			got := map[string]int64{}
			var flagged int64
			for _, s := range collect(h.sink).summaries {
				got[strOf(t, s, attrAttempt)] = intOf(t, s, attrAttemptsConcurrent)
				if got[strOf(t, s, attrAttempt)] > 0 {
					flagged++
				}
			}
			assert.Equal(t, tt.want, got)
			warnings := logs.FilterMessageSnippet("OTEL_VALGEN_LAUNCH_ID").All()
			require.Len(t, warnings, tt.warns, "one warning per step")
			if tt.warns > 0 {
				assert.Contains(t, warnings[0].Message, "torchrun/Slurm/MPI/Ray")
				metadatatest.AssertEqualValgenSamplerGroupsConcurrent(t, h.tel,
					[]metricdata.DataPoint[int64]{{Value: flagged}}, metricdatatest.IgnoreTimestamp())
			}
		})
	}
}

// TestFootprintsLiveAsLongAsTheRingRemembers checks that an attempt forgotten by the
// closed-groups cache is no longer compared, and that one still in it is.
func TestFootprintsLiveAsLongAsTheRingRemembers(t *testing.T) {
	for cache, want := range map[int]int64{1: 0, 2: 1} {
		t.Run(fmt.Sprintf("closed_groups_cache %d", cache), func(t *testing.T) {
			h := newHarness(t, func(c *Config) { c.ClosedGroupsCache = cache })
			epoch := h.clock.Now()
			h.consume(t, logsOf(attemptPart{"p1.1", "w0", 0, time.Second, 1}.records(epoch)...))
			h.consume(t, logsOf(rec{step: 8, id: "x/0", source: "x", expected: 1},
				rec{event: eventEnd, step: 8, source: "x", seen: 1, emitted: 1, expected: 1}))
			assert.Len(t, h.p.closed.steps, cache, "the steps of the remembered closed attempts")
			h.consume(t, logsOf(attemptPart{"p2.1", "w1", 0, time.Second, 1}.records(epoch)...))
			summaries := collect(h.sink).summaries
			require.Len(t, summaries, 3)
			assert.Equal(t, "p2.1", strOf(t, summaries[2], attrAttempt))
			assert.Equal(t, want, intOf(t, summaries[2], attrAttemptsConcurrent))
		})
	}
}

// TestConcurrentAttemptsAreOfOneStepAndKind checks what is compared: only the attempts of the
// same step and kind (another step, or the step's rollouts, run at the same time in other
// processes by design), and sources told apart by their instance (two processes of one source
// name are two sources).
func TestConcurrentAttemptsAreOfOneStepAndKind(t *testing.T) {
	tests := []struct {
		name   string
		second func(*rec) // edits each record of the second attempt
		want   int64
	}{
		{"another step", func(r *rec) { r.step = 8 }, 0},
		{"the step's rollouts", func(r *rec) {
			r.kind = kindRollout
			if r.event == "" {
				r.promptID = "p-" + r.id
			}
		}, 0},
		{"one source name on two instances", func(r *rec) { r.source, r.instance = "w0", "i-other" }, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, nil)
			core, logs := observer.New(zap.WarnLevel)
			h.p.logger = zap.New(core)
			epoch := h.clock.Now()
			records := attemptPart{"p1.1", "w0", 0, time.Second, 0}.records(epoch)
			for _, r := range (attemptPart{"p2.1", "w1", 100 * time.Millisecond, time.Second, 0}).records(epoch) {
				tt.second(&r)
				records = append(records, r)
			}
			h.consume(t, logsOf(records...))
			h.clock.Advance(defaultDecisionWait)
			h.p.closeExpired(context.Background())
			summaries := collect(h.sink).summaries
			require.Len(t, summaries, 2)
			for _, s := range summaries {
				assert.Equal(t, tt.want, intOf(t, s, attrAttemptsConcurrent), strOf(t, s, attrAttempt))
			}
			assert.Len(t, logs.FilterMessageSnippet("OTEL_VALGEN_LAUNCH_ID").All(), int(tt.want))
		})
	}
}
