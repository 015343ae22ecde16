// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/pdata/plog"
)

// referenceBottomK sorts every id by (key, id) and keeps the first k: the definition itself.
func referenceBottomK(version int64, seed uint64, idsIn []string, k int) []string {
	orders := make([]sortKey, 0, len(idsIn))
	seen := map[string]bool{}
	for _, id := range idsIn {
		if !seen[id] {
			seen[id] = true
			orders = append(orders, sortKey{key: sampleKey(version, seed, id), id: id})
		}
	}
	sort.Slice(orders, func(i, j int) bool { return orders[i].less(orders[j]) })
	out := make([]string, 0, k)
	for _, o := range orders[:min(k, len(orders))] {
		out = append(out, o.id)
	}
	return out
}

// randomBatches shuffles records and splits them into batches of random sizes, with records of
// one batch spread over several ResourceLogs (consecutive records of one source may share one).
func randomBatches(rng *rand.Rand, records []rec) []plog.Logs {
	shuffled := append([]rec(nil), records...)
	rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	var batches []plog.Logs
	for len(shuffled) > 0 {
		n := 1 + rng.IntN(min(len(shuffled), 64))
		ld := plog.NewLogs()
		prevSource := ""
		for _, r := range shuffled[:n] {
			var lrs plog.LogRecordSlice
			if ld.ResourceLogs().Len() > 0 && r.source == prevSource && rng.IntN(2) == 0 {
				lrs = ld.ResourceLogs().At(ld.ResourceLogs().Len() - 1).ScopeLogs().At(0).LogRecords()
			} else {
				rl := ld.ResourceLogs().AppendEmpty()
				rl.Resource().Attributes().PutStr(attrServiceInstance, "i-"+r.source)
				lrs = rl.ScopeLogs().AppendEmpty().LogRecords()
			}
			appendRec(lrs, r)
			prevSource = r.source
		}
		batches = append(batches, ld)
		shuffled = shuffled[n:]
	}
	return batches
}

// TestPartitionInvariance checks that any split of a step's records over batches, arrival
// orders, sources and per-source pre-sampling yields the same kept records in the same order,
// for keys of either version computed by the processor.
func TestPartitionInvariance(t *testing.T) {
	const k, n, steps = 16, 300, 3
	sources := []string{"trainer", "rollouter-0", "rollouter-1"}
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 25 {
		t.Run(fmt.Sprintf("trial-%d", trial), func(t *testing.T) {
			var all []rec
			want := map[int64][]string{}
			for step := int64(0); step < steps; step++ {
				var stepIDs []string
				perSource := map[string][]string{}
				for i := range n {
					id := fmt.Sprintf("prompt-%d/%d", i/2, i%2)
					src := sources[rng.IntN(len(sources))]
					perSource[src] = append(perSource[src], id)
					stepIDs = append(stepIDs, id)
				}
				version, sent := keyVersionHMAC, int64(0) // legacy records: no valgen.key_version
				if trial%4 >= 2 {
					version, sent = keyVersionMix, keyVersionMix
				}
				want[step] = referenceBottomK(version, defaultSeed, stepIDs, k)
				presample := trial%2 == 1 // odd trials: each source sends only its own bottom-k
				for src, srcIDs := range perSource {
					if presample {
						srcIDs = referenceBottomK(version, defaultSeed, srcIDs, k)
					}
					for _, id := range srcIDs {
						all = append(all, rec{step: step, id: id, source: src, count: k, keyVersion: sent})
					}
					if rng.IntN(3) == 0 { // a redelivered record must not change the result
						all = append(all, rec{step: step, id: srcIDs[0], source: src, count: k, keyVersion: sent})
					}
				}
			}
			h := newHarness(t, func(c *Config) { c.Count = 4 })
			for _, ld := range randomBatches(rng, all) {
				h.consume(t, ld)
			}
			require.NoError(t, h.p.Shutdown(context.Background()))
			got := map[int64][]string{}
			for _, lr := range collect(h.sink).kept {
				step := intOf(t, lr, attrStep)
				got[step] = append(got[step], ids([]plog.LogRecord{lr})[0])
			}
			require.Equal(t, want, got)
		})
	}
}

// TestSmallestCountWins checks that records asking for different counts give the same result
// in any order: the group keeps the smallest count asked for. Besides shuffled orders, the
// largest counts come first in three batches, so that a full bottom-k of 15 shrinks to 10 and
// a full one of 10 to 5 (the shrink path).
func TestSmallestCountWins(t *testing.T) {
	var records []rec
	var allIDs []string
	byCount := map[int64][]rec{}
	for i := range 60 {
		id := fmt.Sprintf("p/%d", i)
		allIDs = append(allIDs, id)
		r := rec{id: id, count: int64(5 + i%3*5)}
		records = append(records, r)
		byCount[r.count] = append(byCount[r.count], r)
	}
	want := referenceBottomK(keyVersionHMAC, defaultSeed, allIDs, 5)

	t.Run("largest count first", func(t *testing.T) {
		h := newHarness(t, nil)
		for _, count := range []int64{15, 10, 5} {
			for _, g := range h.p.groups {
				require.Equal(t, int(count)+5, g.kept.len(), "the bottom-k is full before it shrinks to %d", count)
			}
			h.consume(t, logsOf(byCount[count]...))
		}
		require.NoError(t, h.p.Shutdown(context.Background()))
		require.Equal(t, want, ids(collect(h.sink).kept))
	})
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 10 {
		t.Run(fmt.Sprintf("shuffled-%d", trial), func(t *testing.T) {
			h := newHarness(t, nil)
			for _, ld := range randomBatches(rng, records) {
				h.consume(t, ld)
			}
			require.NoError(t, h.p.Shutdown(context.Background()))
			require.Equal(t, want, ids(collect(h.sink).kept))
		})
	}
}

// TestConcurrentConsumers checks that batches consumed from several goroutines, while the
// timer runs, still yield the exact bottom-k.
func TestConcurrentConsumers(t *testing.T) {
	var records []rec
	var allIDs []string
	for i := range 400 {
		id := fmt.Sprintf("c/%d", i)
		allIDs = append(allIDs, id)
		records = append(records, rec{id: id, source: fmt.Sprintf("worker-%d", i%4), count: 12})
	}
	h := newHarness(t, nil)
	require.NoError(t, h.p.Start(context.Background(), componenttest.NewNopHost()))
	batches := randomBatches(rand.New(rand.NewPCG(5, 6)), records)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(batches); i += 4 {
				require.NoError(t, h.p.ConsumeLogs(context.Background(), batches[i]))
			}
		}()
	}
	wg.Wait()
	require.NoError(t, h.p.Shutdown(context.Background()))
	got := collect(h.sink)
	require.Equal(t, referenceBottomK(keyVersionHMAC, defaultSeed, allIDs, 12), ids(got.kept))
	require.Len(t, got.summaries, 1)
	require.Equal(t, int64(4), intOf(t, got.summaries[0], attrSources))
}
