// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/stretchr/testify/require"
)

// sharedVectors is the folder of sampling vectors shared with the Python test suite.
var sharedVectors = filepath.Join("..", "..", "testdata", "sampling")

type keyVectors struct {
	Vectors []struct {
		Version   int64  `json:"version"`
		Seed      string `json:"seed"`
		SampleID  string `json:"sample_id"`
		SampleKey string `json:"sample_key"`
	} `json:"vectors"`
	Mix64 []struct {
		In  string `json:"in"`
		Out string `json:"out"`
	} `json:"mix64"`
	IDHash []struct {
		Base string `json:"base"`
		Hash string `json:"hash"`
	} `json:"id_hash"`
	SeedLane []struct {
		Seed string `json:"seed"`
		N    uint64 `json:"n"`
		Lane string `json:"lane"`
	} `json:"seed_lane"`
	Split []struct {
		SampleID string `json:"sample_id"`
		Base     string `json:"base"`
		N        string `json:"n"`
	} `json:"split"`
	MessagePrompts []struct {
		Name      string `json:"name"`
		Canonical string `json:"canonical"`
		Base      string `json:"base"`
		Seed      string `json:"seed"`
		SampleID  string `json:"sample_id"`
		SampleKey string `json:"sample_key"`
	} `json:"message_prompts"`
}

type bottomKCases struct {
	Cases []struct {
		Name       string `json:"name"`
		K          int    `json:"k"`
		Seed       string `json:"seed"`
		KeyVersion int64  `json:"key_version"`
		Records    []struct {
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

// readJSONNumbers reads a shared vectors file keeping its numbers as json.Number, so that its
// figure maps can be turned into the int64 and float64 values OTLP delivers (numbersToRaw).
func readJSONNumbers(t *testing.T, name string, into any) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(sharedVectors, name))
	require.NoError(t, err)
	decoder := json.NewDecoder(bytes.NewReader(data))
	decoder.UseNumber()
	require.NoError(t, decoder.Decode(into))
}

func parseUint(t *testing.T, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(s, 10, 64)
	require.NoError(t, err)
	return v
}

// TestSampleKeyVectors checks both key functions, the finaliser and the seed lanes against the
// vectors Python generated.
func TestSampleKeyVectors(t *testing.T) {
	var vectors keyVectors
	readJSON(t, "key_vectors.json", &vectors)
	versions := map[int64]int{}
	for _, v := range vectors.Vectors {
		versions[v.Version]++
		got := sampleKey(v.Version, parseUint(t, v.Seed), v.SampleID)
		require.Equalf(t, parseUint(t, v.SampleKey), got, "version=%d seed=%s id=%q", v.Version, v.Seed, v.SampleID)
		require.Less(t, got, uint64(1)<<63)
	}
	require.Len(t, versions, 2)
	require.Positive(t, versions[keyVersionHMAC])
	require.Positive(t, versions[keyVersionMix])
	require.NotEmpty(t, vectors.Mix64)
	for _, v := range vectors.Mix64 {
		require.Equal(t, parseUint(t, v.Out), mix64(parseUint(t, v.In)), v.In)
	}
	require.NotEmpty(t, vectors.SeedLane)
	for _, v := range vectors.SeedLane {
		require.Equal(t, parseUint(t, v.Lane), seedLane(parseUint(t, v.Seed), v.N), v)
	}
	require.NotEmpty(t, vectors.IDHash)
	for _, v := range vectors.IDHash {
		require.Equalf(t, parseUint(t, v.Hash), idHash(v.Base), "base=%q", v.Base)
	}
}

// TestMessagePromptVectors checks the ids of chat-message prompts: a prompt's id is the 16 hex
// digits of XXH64 of its canonical text, and its first response's key is the version 2 key of
// that id, whichever process (Python SDK or this processor) computes it.
func TestMessagePromptVectors(t *testing.T) {
	var vectors keyVectors
	readJSON(t, "key_vectors.json", &vectors)
	require.NotEmpty(t, vectors.MessagePrompts)
	for _, v := range vectors.MessagePrompts {
		digest := xxhash.Sum64String(v.Canonical)
		require.Equalf(t, fmt.Sprintf("%016x", digest), v.Base, "prompt %s", v.Name)
		require.Equalf(t, digest, idHash(v.Base), "prompt %s", v.Name)
		require.Equalf(t, v.Base+"/0", v.SampleID, "prompt %s", v.Name)
		got := sampleKey(keyVersionMix, parseUint(t, v.Seed), v.SampleID)
		require.Equalf(t, parseUint(t, v.SampleKey), got, "prompt %s", v.Name)
	}
}

// TestSplitSampleIDVectors checks how ids split into base and lane against the shared cases:
// a part's "@<tag>" after the response index is not part of the key.
func TestSplitSampleIDVectors(t *testing.T) {
	var vectors keyVectors
	readJSON(t, "key_vectors.json", &vectors)
	require.NotEmpty(t, vectors.Split)
	tagged := 0
	for _, v := range vectors.Split {
		base, n := splitSampleID(v.SampleID)
		require.Equalf(t, v.Base, base, "id=%q", v.SampleID)
		require.Equalf(t, parseUint(t, v.N), n, "id=%q", v.SampleID)
		if strings.Contains(v.SampleID, "@") {
			tagged++
		}
	}
	require.Positive(t, tagged)
}

// TestSeedLanesAreSplitMix64 checks lanes 1..5 of seed 1234567 against SplitMix64's published
// reference outputs for that seed.
func TestSeedLanesAreSplitMix64(t *testing.T) {
	want := []uint64{6457827717110365317, 3203168211198807973, 9817491932198370423, 4593380528125082431, 16408922859458223821}
	for n, w := range want {
		require.Equal(t, w, seedLane(1234567, uint64(n+1)))
	}
}

// TestSplitSampleID checks which suffixes are response indexes.
func TestSplitSampleID(t *testing.T) {
	tests := []struct {
		id   string
		base string
		n    uint64
	}{
		{"abc/0", "abc", 1},
		{"abc/12", "abc", 13},
		{"a/b/3", "a/b", 4},
		{"/0", "", 1},
		{"abc", "abc", 0},
		{"abc/", "abc/", 0},
		{"abc/01", "abc/01", 0},
		{"abc/+1", "abc/+1", 0},
		{"abc/\u0661", "abc/\u0661", 0},
		{"abc/1 ", "abc/1 ", 0},
		{"x/9999999999999999999", "x", 10_000_000_000_000_000_000},
		{"x/10000000000000000000", "x/10000000000000000000", 0},
	}
	for _, tt := range tests {
		base, n := splitSampleID(tt.id)
		require.Equal(t, tt.base, base, tt.id)
		require.Equal(t, tt.n, n, tt.id)
	}
}

// TestIDHash checks that only 16 lowercase hex digits are read as a number and that anything
// else is XXH64 with seed 0 (the empty input's value is the one the xxHash spec publishes).
func TestIDHash(t *testing.T) {
	require.Equal(t, uint64(42), idHash("000000000000002a"))
	require.Equal(t, uint64(0xEF46DB3751D8E999), idHash(""))
	for _, base := range []string{"000000000000002A", "000000000000002", "000000000000002a0", "g00000000000002a"} {
		require.Equal(t, xxhash.Sum64String(base), idHash(base), base)
	}
}

// inclusionChiSquare counts how often each id is kept over the seeds and returns the
// chi-square statistic (len(ids) - 1 degrees of freedom): one seed keeps k of M ids without
// replacement, hence the variance S p (1 - p) and the factor (M - 1) / M.
func inclusionChiSquare(ids []string, k int, seeds int, key func(seed uint64, id string) uint64) float64 {
	hits := make(map[string]int, len(ids))
	for seed := range seeds {
		b := newBottomK[string](k)
		for _, id := range ids {
			b.offer(sortKey{key: key(uint64(seed), id), id: id}, func() string { return id })
		}
		for _, e := range b.sorted() {
			hits[e.item]++
		}
	}
	m, total := float64(len(ids)), float64(seeds)
	p := float64(k) / m
	var sum float64
	for _, id := range ids {
		d := float64(hits[id]) - total*p
		sum += d * d
	}
	return sum / (total * p * (1 - p)) * (m - 1) / m
}

// chiSquare999 is the 0.999 quantile of chi-square with df degrees of freedom (Wilson-Hilferty).
func chiSquare999(df int) float64 {
	d := float64(df)
	return d * math.Pow(1-2/(9*d)+3.0902*math.Sqrt(2/(9*d)), 3)
}

// adjacentPairsChiSquare counts how often neighbours in ids are kept together over the seeds
// and returns the chi-square statistic (len(ids) - 1 degrees of freedom).
func adjacentPairsChiSquare(ids []string, k int, seeds int, key func(seed uint64, id string) uint64) float64 {
	together := make([]int, len(ids)-1)
	for seed := range seeds {
		b := newBottomK[string](k)
		for _, id := range ids {
			b.offer(sortKey{key: key(uint64(seed), id), id: id}, func() string { return id })
		}
		kept := map[string]bool{}
		for _, e := range b.sorted() {
			kept[e.item] = true
		}
		for i := range together {
			if kept[ids[i]] && kept[ids[i+1]] {
				together[i]++
			}
		}
	}
	m := float64(len(ids))
	q := float64(k*(k-1)) / (m * (m - 1))
	expected := float64(seeds) * q
	var sum float64
	for _, c := range together {
		d := float64(c) - expected
		sum += d * d
	}
	return sum / (expected * (1 - q))
}

// TestKeyIsUniformOverSeeds checks with chi-square tests (p = 0.001) over 5000 seeds that,
// under version 2, every id is kept with probability k/M and neighbours are not kept together
// more or less often than chance, for uids, ids derived from inputs, hex ids with structure and
// several responses per prompt; and that the tests catch a key without the final mix.
func TestKeyIsUniformOverSeeds(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	sets := map[string][]string{}
	for i := range 40 {
		sets["uids"] = append(sets["uids"], fmt.Sprintf("gsm8k-train-%05d/0", i))
		sets["derived"] = append(sets["derived"], fmt.Sprintf("%016x/0", rng.Uint64()))
		sets["sequential_hex"] = append(sets["sequential_hex"], fmt.Sprintf("%016x/0", i))
		sets["responses"] = append(sets["responses"], fmt.Sprintf("p%d/%d", i/8, i%8))
	}
	v2 := func(seed uint64, id string) uint64 { return sampleKey(keyVersionMix, seed, id) }
	limit := chiSquare999(39)
	for name, ids := range sets {
		stat := inclusionChiSquare(ids, 8, 5000, v2)
		require.Lessf(t, stat, limit, "%s: inclusion chi-square %.1f", name, stat)
		stat = adjacentPairsChiSquare(ids, 8, 5000, v2)
		require.Lessf(t, stat, limit, "%s: pairs chi-square %.1f", name, stat)
	}
	weak := func(seed uint64, id string) uint64 {
		base, n := splitSampleID(id)
		return (idHash(base) ^ seedLane(seed, n)) >> 1
	}
	require.Greater(t, inclusionChiSquare(sets["sequential_hex"], 8, 5000, weak), 10*limit)
	require.Greater(t, adjacentPairsChiSquare(sets["sequential_hex"], 8, 5000, weak), 10*limit)
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
			version := keyVersionMix
			if c.KeyVersion != 0 {
				version = c.KeyVersion
			}
			heapOnly := newBottomK[string](c.K)
			records := make([]rec, 0, len(c.Records))
			for _, r := range c.Records {
				order := sortKey{id: r.SampleID}
				if r.SampleKey != "" {
					order.key = parseUint(t, r.SampleKey)
				} else {
					order.key = sampleKey(version, seed, r.SampleID)
				}
				heapOnly.offer(order, func() string { return order.id })
				count := int64(c.K)
				if c.K == 0 {
					count = zeroCount
				}
				records = append(records, rec{id: r.SampleID, key: int64(order.key), hasKey: r.SampleKey != "", count: count, keyVersion: version})
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
