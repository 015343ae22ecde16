// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type trajectoryCases struct {
	Cases []struct {
		Name       string `json:"name"`
		EndRecords []struct {
			Source       string         `json:"source"`
			Instance     string         `json:"instance"`
			Seen         int64          `json:"seen"`
			Emitted      int64          `json:"emitted"`
			Trajectories map[string]any `json:"trajectories"`
		} `json:"end_records"`
		Expected json.RawMessage `json:"expected"`
	} `json:"cases"`
}

// readTrajectoryCases reads testdata/sampling/trajectories.json with its integers as int64 (as
// OTLP ints arrive) and its other numbers as float64.
func readTrajectoryCases(t *testing.T) trajectoryCases {
	t.Helper()
	var cases trajectoryCases
	readJSONNumbers(t, "trajectories.json", &cases)
	for _, c := range cases.Cases {
		for _, e := range c.EndRecords {
			numbersToRaw(e.Trajectories)
		}
	}
	return cases
}

func numbersToRaw(m map[string]any) {
	for key, value := range m {
		switch v := value.(type) {
		case json.Number:
			if i, err := v.Int64(); err == nil {
				m[key] = i
			} else if f, err := v.Float64(); err == nil {
				m[key] = f
			}
		case map[string]any:
			numbersToRaw(v)
		}
	}
}

// TestStepSummaryTrajectoryFigures replays the end records of the shared cases, in order and
// reversed, and compares the summary's valgen.trajectories with the expected figures: each
// source's from its end record with the largest seen, merged (".max" the largest, maps key by
// key, numbers added up), with the means and shares.
func TestStepSummaryTrajectoryFigures(t *testing.T) {
	cases := readTrajectoryCases(t)
	require.NotEmpty(t, cases.Cases)
	for _, c := range cases.Cases {
		for _, reverse := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/reverse=%v", c.Name, reverse), func(t *testing.T) {
				ends := make([]rec, 0, len(c.EndRecords))
				for _, e := range c.EndRecords {
					ends = append(ends, rec{
						event: eventEnd, step: 1, source: e.Source, instance: e.Instance,
						seen: e.Seen, emitted: e.Emitted, trajectories: e.Trajectories,
					})
				}
				got, ok := summaryOfEnds(t, ends, reverse).Attributes().Get(attrTrajectories)
				if string(c.Expected) == "null" {
					assert.False(t, ok, "valgen.trajectories should be absent")
					return
				}
				require.True(t, ok, "valgen.trajectories missing")
				encoded, err := json.Marshal(got.Map().AsRaw())
				require.NoError(t, err)
				assert.JSONEq(t, string(c.Expected), string(encoded))
			})
		}
	}
}
