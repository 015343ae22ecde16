// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSummaryNamesSamplerAndSourceFigures checks what a downstream merge of partial groups
// relies on: the summary names the sampler, and lists per source what arrived and what its
// end record said, with the kept records split by source.
func TestSummaryNamesSamplerAndSourceFigures(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Count = 3; c.SamplerID = "samplers-1" })
	records := append(stepRecords(1, "a", 4, 0), stepRecords(1, "b", 2, 0)...)
	end := endRec(1, "a", 9, 4, 0)
	end.scored, end.scoreCount, end.scoreSum = true, 9, 4.5
	records = append(records, end, rec{event: eventProgress, step: 1, source: "b", seen: 5})
	h.consume(t, logsOf(records...))
	h.clock.Advance(time.Hour)
	h.p.closeExpired(context.Background())

	out := collect(h.sink)
	require.Len(t, out.summaries, 1)
	summary := out.summaries[0]
	require.Equal(t, "samplers-1", strOf(t, summary, attrSampler))
	figures := map[string]map[string]any{}
	var kept int64
	for _, raw := range sliceOf(t, summary, attrSourceFigures) {
		figure := raw.(map[string]any)
		figures[figure[figureSource].(string)] = figure
		kept += figure[figureKept].(int64)
	}
	require.Equal(t, intOf(t, summary, attrKept), kept, "the kept records, split by source")
	require.Equal(t, int64(3), intOf(t, summary, attrSampleCount), "the k the group kept to")
	a, b := figures["a@i-a"], figures["b@i-b"]
	require.NotNil(t, a)
	require.NotNil(t, b)
	require.Equal(t, true, a[figureEnded])
	require.Equal(t, int64(9), a[figureSeen])
	require.Equal(t, int64(4), a[figureEmitted])
	require.Equal(t, int64(4), a[figureReceived])
	require.Equal(t, int64(9), a[figureScoreCount])
	require.Equal(t, 4.5, a[figureScoreSum])
	require.Equal(t, false, b[figureEnded])
	require.Equal(t, int64(5), b[figureProgressSeen])
	require.Equal(t, int64(2), b[figureReceived])
	require.NotContains(t, b, figureScoreCount, "no end record, no score statistics")
}

// TestSourceFiguresCountWhatEachSourceSent checks the per-source figures a downstream merge adds
// up or takes the largest of: received counts only the valid generations (the invalid ones are
// counted apart, so that arrivals of two parts add up without counting one twice), a source is
// announced only when its start record arrived, and score statistics appear only when the end
// record reported them (an end record without them is not a score count of 0).
func TestSourceFiguresCountWhatEachSourceSent(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Count = 2; c.SamplerID = "samplers-0" })
	records := []rec{{event: eventStart, step: 1, source: "a"}}
	records = append(records, stepRecords(1, "a", 3, 0)...)
	records = append(records, rec{step: 1, id: "a/x", source: "a", noID: true})
	records = append(records, stepRecords(1, "b", 2, 0)...)
	scored := endRec(1, "a", 6, 4, 0)
	scored.scored, scored.scoreCount, scored.scoreSum = true, 6, 3.0
	records = append(records, scored, endRec(1, "b", 2, 2, 0))
	h.consume(t, logsOf(records...))
	h.clock.Advance(time.Hour)
	h.p.closeExpired(context.Background())

	out := collect(h.sink)
	require.Len(t, out.summaries, 1)
	figures := map[string]map[string]any{}
	for _, raw := range sliceOf(t, out.summaries[0], attrSourceFigures) {
		figure := raw.(map[string]any)
		figures[figure[figureSource].(string)] = figure
	}
	a, b := figures["a@i-a"], figures["b@i-b"]
	require.NotNil(t, a)
	require.NotNil(t, b)
	require.Equal(t, int64(3), a[figureReceived], "the valid generations only")
	require.Equal(t, int64(1), a[figureInvalid])
	require.Equal(t, int64(2), b[figureReceived])
	require.Equal(t, int64(0), b[figureInvalid])
	require.Equal(t, true, a[figureAnnounced], "a sent its start record")
	require.Equal(t, false, b[figureAnnounced], "b ended without a start record")
	require.Equal(t, true, b[figureEnded])
	require.Equal(t, int64(6), a[figureScoreCount])
	require.NotContains(t, b, figureScoreCount, "b's end record reported no score statistics")
	require.NotContains(t, b, figureScoreSum)
	require.Equal(t, intOf(t, out.summaries[0], attrKept), a[figureKept].(int64)+b[figureKept].(int64))
}

// TestSamplerIDDefaultsToHostName checks the default that a StatefulSet pod keeps across restarts.
func TestSamplerIDDefaultsToHostName(t *testing.T) {
	host, err := os.Hostname()
	require.NoError(t, err)
	h := newHarness(t, nil)
	require.Equal(t, host, h.p.samplerID)
}
