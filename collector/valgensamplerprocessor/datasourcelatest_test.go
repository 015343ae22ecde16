// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDataSourceFiguresComeFromTheLatestEndRecord pins the rule that a source's per-data-source
// figures (valgen.data_sources of its end records) come from its latest end record, the one with
// the largest valgen.seen, whatever order its end records arrive in: a retried or late earlier
// end record does not roll the step summary's valgen.data_sources, or the source's entry of
// valgen.source_figures, back. Source a logs gsm8k, ends (seen 4), logs math and ends again
// (seen 7); each end record arrives in a request of its own, in both orders.
func TestDataSourceFiguresComeFromTheLatestEndRecord(t *testing.T) {
	const k = 2
	earlier := endRec(1, "a", 4, 3, 0)
	earlier.dataSources = []any{figure("gsm8k", 4, 4, 1.0)}
	latest := endRec(1, "a", 7, 5, 0)
	latest.dataSources = []any{figure("gsm8k", 4, 4, 1.0), figure("math", 3, 2, 1.5)}
	tests := []struct {
		name string
		ends []rec
	}{
		{name: "latest last", ends: []rec{earlier, latest}},
		{name: "latest first", ends: []rec{latest, earlier}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, nil)
			h.consume(t, logsOf(append(dataSourceRecs("a", "gsm8k", 3, k), dataSourceRecs("a", "math", 2, k)...)...))
			for _, end := range tt.ends {
				h.consume(t, logsOf(end))
			}
			h.clock.Advance(h.p.cfg.DecisionWait)
			h.p.closeExpired(context.Background())
			require.NoError(t, h.p.Shutdown(context.Background()))

			out := collect(h.sink)
			require.Len(t, out.summaries, 1)
			s := out.summaries[0]
			assert.Equal(t, closedComplete, strOf(t, s, attrClosedReason))
			assert.Equal(t, sampleByDataSource, strOf(t, s, attrSampleBy))
			assert.Equal(t, map[string]map[string]any{
				"gsm8k": {figureDataSource: "gsm8k", figureSeen: int64(4), figureKept: int64(k),
					figureScoreCount: int64(4), figureScoreSum: 1.0, figureScoreMean: 0.25},
				"math": {figureDataSource: "math", figureSeen: int64(3), figureKept: int64(k),
					figureScoreCount: int64(2), figureScoreSum: 1.5, figureScoreMean: 0.75},
			}, dataSourcesOf(t, s))
			figures := sliceOf(t, s, attrSourceFigures)
			require.Len(t, figures, 1)
			assert.Equal(t, latest.dataSources, figures[0].(map[string]any)[figureDataSources],
				"the source's figures for a merge of parts")
		})
	}
}
