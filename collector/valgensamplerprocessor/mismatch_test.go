// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type mismatchCases struct {
	Gamma float64 `json:"gamma"`
	Cases []struct {
		Name       string `json:"name"`
		EndRecords []struct {
			Source   string         `json:"source"`
			Instance string         `json:"instance"`
			Seen     int64          `json:"seen"`
			Emitted  int64          `json:"emitted"`
			Mismatch map[string]any `json:"mismatch"`
		} `json:"end_records"`
		Expected map[string]any `json:"expected"`
	} `json:"cases"`
}

// readMismatchCases reads testdata/sampling/mismatch.json with its integers as int64 (as OTLP ints
// arrive) and its other numbers as float64.
func readMismatchCases(t *testing.T) mismatchCases {
	t.Helper()
	var cases mismatchCases
	readJSONNumbers(t, "mismatch.json", &cases)
	for _, c := range cases.Cases {
		for _, e := range c.EndRecords {
			numbersToRaw(e.Mismatch)
		}
		numbersToRaw(c.Expected)
	}
	return cases
}

// sameFigures compares figure maps: numbers to 1e-12 relative (a bucket's value is a power, whose
// last bit may differ between math libraries), everything else exactly.
func sameFigures(t *testing.T, want, got any, path string) {
	t.Helper()
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		require.True(t, ok, "%s: not a map", path)
		assert.Len(t, g, len(w), "%s: keys %v", path, keysOf(g))
		for key, value := range w {
			sameFigures(t, value, g[key], path+"."+key)
		}
	case int64, float64:
		require.True(t, isNumber(got), "%s: %v is no number", path, got)
		a, b := asDouble(want), asDouble(got)
		assert.LessOrEqual(t, math.Abs(a-b), 1e-12*math.Max(math.Abs(a), math.Abs(b)), "%s: %v != %v", path, a, b)
	default:
		assert.Equal(t, want, got, path)
	}
}

func keysOf(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for key := range m {
		out = append(out, key)
	}
	return out
}

// TestStepSummaryMismatchFigures replays the end records of the shared cases, in order and
// reversed, and compares the summary's valgen.mismatch with the expected distribution: each
// source's from its end record with the largest seen, merged by the figures' rule, with each
// figure's mean and nearest-rank quantiles from its buckets.
func TestStepSummaryMismatchFigures(t *testing.T) {
	cases := readMismatchCases(t)
	require.NotEmpty(t, cases.Cases)
	assert.InDelta(t, mismatchGamma, cases.Gamma, 1e-15, "the buckets' ratio")
	for _, c := range cases.Cases {
		for _, reverse := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/reverse=%v", c.Name, reverse), func(t *testing.T) {
				ends := make([]rec, 0, len(c.EndRecords))
				for _, e := range c.EndRecords {
					ends = append(ends, rec{
						event: eventEnd, step: 1, source: e.Source, instance: e.Instance,
						seen: e.Seen, emitted: e.Emitted, mismatch: e.Mismatch,
					})
				}
				got, ok := summaryOfEnds(t, ends, reverse).Attributes().Get(attrMismatch)
				if c.Expected == nil {
					assert.False(t, ok, "valgen.mismatch should be absent")
					return
				}
				require.True(t, ok, "valgen.mismatch missing")
				sameFigures(t, c.Expected, got.Map().AsRaw(), "mismatch")
			})
		}
	}
}
