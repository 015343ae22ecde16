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

// TestSamplerIDDefaultsToHostName checks the default that a StatefulSet pod keeps across restarts.
func TestSamplerIDDefaultsToHostName(t *testing.T) {
	host, err := os.Hostname()
	require.NoError(t, err)
	h := newHarness(t, nil)
	require.Equal(t, host, h.p.samplerID)
}
