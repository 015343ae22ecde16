// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// sharedVectors is the folder of sampling vectors shared with the Python test suite.
var sharedVectors = filepath.Join("..", "..", "testdata", "sampling")

type keyVectors struct {
	Vectors []struct {
		Seed      string `json:"seed"`
		SampleID  string `json:"sample_id"`
		SampleKey string `json:"sample_key"`
	} `json:"vectors"`
}

type bottomKCases struct {
	Cases []struct {
		Name    string `json:"name"`
		K       int    `json:"k"`
		Seed    string `json:"seed"`
		Records []struct {
			SampleID  string `json:"sample_id"`
			SampleKey string `json:"sample_key"`
		} `json:"records"`
		Expected []string `json:"expected"`
	} `json:"cases"`
}

func readJSON(t *testing.T, name string, into any) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(sharedVectors, name))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, into))
}

func parseUint(t *testing.T, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(s, 10, 64)
	require.NoError(t, err)
	return v
}

// TestSampleKeyVectors checks the key function against the vectors Python generated.
func TestSampleKeyVectors(t *testing.T) {
	var vectors keyVectors
	readJSON(t, "key_vectors.json", &vectors)
	require.NotEmpty(t, vectors.Vectors)
	for _, v := range vectors.Vectors {
		got := sampleKey(parseUint(t, v.Seed), v.SampleID)
		require.Equalf(t, parseUint(t, v.SampleKey), got, "seed=%s id=%q", v.Seed, v.SampleID)
		require.Less(t, got, uint64(1)<<63)
	}
}

// TestBottomKVectors checks the shared bottom-k cases on the heap and through the processor.
func TestBottomKVectors(t *testing.T) {
	var cases bottomKCases
	readJSON(t, "bottom_k.json", &cases)
	require.NotEmpty(t, cases.Cases)
	for _, c := range cases.Cases {
		t.Run(c.Name, func(t *testing.T) {
			var seed uint64
			if c.Seed != "" {
				seed = parseUint(t, c.Seed)
			}
			heapOnly := newBottomK[string](c.K)
			records := make([]rec, 0, len(c.Records))
			for _, r := range c.Records {
				order := sortKey{id: r.SampleID}
				if r.SampleKey != "" {
					order.key = parseUint(t, r.SampleKey)
				} else {
					order.key = sampleKey(seed, r.SampleID)
				}
				heapOnly.offer(order, func() string { return order.id })
				count := int64(c.K)
				if c.K == 0 {
					count = zeroCount
				}
				records = append(records, rec{id: r.SampleID, key: int64(order.key), hasKey: r.SampleKey != "", count: count})
			}
			got := make([]string, 0, heapOnly.len())
			for _, e := range heapOnly.sorted() {
				got = append(got, e.item)
			}
			require.Equal(t, c.Expected, nonNil(got), "bottomK")

			h := newHarness(t, func(cfg *Config) { cfg.Seed = seed; cfg.MaxCount = max(cfg.MaxCount, c.K) })
			h.consume(t, logsOf(records...))
			require.NoError(t, h.p.Shutdown(context.Background()))
			require.Equal(t, c.Expected, nonNil(ids(collect(h.sink).kept)), "processor")
		})
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
