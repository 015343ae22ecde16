// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor

import (
	"context"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
)

type kRuleCases struct {
	Asked []struct {
		Asked []int `json:"asked"`
		K     int   `json:"k"`
	} `json:"asked"`
	Records []struct {
		SampleID    string `json:"sample_id"`
		SampleCount int64  `json:"sample_count"`
	} `json:"records"`
	Seed     string   `json:"seed"`
	K        int      `json:"k"`
	Expected []string `json:"expected"`
}

// TestSmallestKAskedForWins checks the k rule against the cases Python generated.
func TestSmallestKAskedForWins(t *testing.T) {
	var cases kRuleCases
	readJSON(t, "k_rule.json", &cases)
	require.NotEmpty(t, cases.Asked)
	for _, c := range cases.Asked {
		k := c.Asked[0]
		for _, asked := range c.Asked[1:] {
			k = stepK(k, asked)
		}
		require.Equal(t, c.K, k, c.Asked)
	}
}

// TestGroupKeepsTheSmallestKOfItsRecords sends the shared records, whose valgen.sample_count
// differ, in order and in reverse: the group keeps the same k and the same records either way.
func TestGroupKeepsTheSmallestKOfItsRecords(t *testing.T) {
	var cases kRuleCases
	readJSON(t, "k_rule.json", &cases)
	require.Equal(t, uint64(defaultSeed), parseUint(t, cases.Seed))
	for _, reverse := range []bool{false, true} {
		h := newHarness(t, nil)
		records := make([]rec, 0, len(cases.Records))
		for _, r := range cases.Records {
			records = append(records, rec{id: r.SampleID, count: r.SampleCount, keyVersion: keyVersionMix})
		}
		if reverse {
			for i, j := 0, len(records)-1; i < j; i, j = i+1, j-1 {
				records[i], records[j] = records[j], records[i]
			}
		}
		for _, r := range records {
			h.consume(t, logsOf(r))
		}
		require.NoError(t, h.p.Shutdown(context.Background()))
		out := collect(h.sink)
		got := ids(out.kept)
		sort.Strings(got)
		want := append([]string(nil), cases.Expected...)
		sort.Strings(want)
		require.Equal(t, want, got, "reverse=%v", reverse)
		require.Len(t, got, cases.K)
	}
}
