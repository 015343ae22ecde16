// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/plog"
)

// Tests of single rules of the sampler, each written so that breaking the rule fails it
// (tools/mutation_check.py breaks them one at a time).

// TestCompleteWaitsForEveryGenerationAnEndedSourceEmitted checks that a step whose only
// source has ended does not close while a generation that source emitted is still in flight.
func TestCompleteWaitsForEveryGenerationAnEndedSourceEmitted(t *testing.T) {
	h := newHarness(t, nil)
	records := stepRecords(1, "trainer", 3, 0)
	h.consume(t, logsOf(records[0], records[1], endRec(1, "trainer", 3, 3, 1)))
	require.Empty(t, collect(h.sink).summaries, "one of the three emitted generations has not arrived")

	h.consume(t, logsOf(records[2]))
	got := collect(h.sink)
	require.Len(t, got.summaries, 1, "the last generation completes the step")
	assert.Equal(t, closedComplete, strOf(t, got.summaries[0], attrClosedReason))
	assert.Equal(t, int64(3), intOf(t, got.summaries[0], attrKept))
	assert.Equal(t, int64(0), intOf(t, got.summaries[0], attrMissing))
}

// TestTwoProcessesSharingASourceNameAreTwoSources checks that a source is identified by its
// valgen.source and its service.instance.id: two processes with the default name each count.
func TestTwoProcessesSharingASourceNameAreTwoSources(t *testing.T) {
	h := newHarness(t, nil)
	part := func(instance string, n int) []rec {
		var out []rec
		for i := range n {
			out = append(out, rec{step: 1, id: fmt.Sprintf("%s/%d", instance, i), source: "main", instance: instance})
		}
		end := endRec(1, "main", int64(n), int64(n), 2)
		end.instance = instance
		return append(out, end)
	}
	h.consume(t, logsOf(part("pod-a", 2)...))
	require.Empty(t, collect(h.sink).summaries, "one of the two promised processes has ended")
	h.consume(t, logsOf(part("pod-b", 3)...))

	got := collect(h.sink)
	require.Len(t, got.summaries, 1)
	s := got.summaries[0]
	assert.Equal(t, closedComplete, strOf(t, s, attrClosedReason))
	assert.Equal(t, int64(2), intOf(t, s, attrSources))
	assert.Equal(t, int64(2), intOf(t, s, attrSourcesEnded))
	assert.Equal(t, int64(2+3), intOf(t, s, attrSeen), "each process's end record counts")
	assert.Equal(t, int64(5), intOf(t, s, attrKept))
}

// TestSourcesMissingNamesTheProcessThatDidNotEnd checks that of two processes sharing a
// source name, the one that did not end is listed as "source@instance".
func TestSourcesMissingNamesTheProcessThatDidNotEnd(t *testing.T) {
	h := newHarness(t, nil)
	end := endRec(1, "main", 1, 1, 0)
	end.instance = "pod-a"
	h.consume(t, logsOf(
		rec{step: 1, id: "a/0", source: "main", instance: "pod-a"}, end,
		rec{step: 1, id: "b/0", source: "main", instance: "pod-b"},
	))
	require.NoError(t, h.p.Shutdown(context.Background()))
	s := collect(h.sink).summaries[0]
	assert.Equal(t, int64(2), intOf(t, s, attrSources))
	assert.Equal(t, []any{"main@pod-b"}, sliceOf(t, s, attrSourcesMissing))
}

// TestRecordSeedComputesTheKey checks that a generation's own valgen.seed, not the
// configured seed, computes its sampling key (records carry no valgen.sample_key here).
func TestRecordSeedComputesTheKey(t *testing.T) {
	const k = 5
	recordSeed := int64(-7)
	var allIDs []string
	ld := plog.NewLogs()
	lrs := ld.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords()
	for i := range 40 {
		id := fmt.Sprintf("prompt-%d/0", i)
		allIDs = append(allIDs, id)
		lr := appendRec(lrs, rec{step: 1, id: id, count: k, keyVersion: keyVersionMix})
		lr.Attributes().PutInt(attrSeed, recordSeed)
	}
	want := referenceBottomK(keyVersionMix, uint64(recordSeed), allIDs, k) //nolint:gosec // the seed modulo 2^64
	require.NotEqual(t, referenceBottomK(keyVersionMix, defaultSeed, allIDs, k), want,
		"the two seeds must choose differently for this test to tell them apart")

	h := newHarness(t, nil)
	h.consume(t, ld)
	require.NoError(t, h.p.Shutdown(context.Background()))
	assert.Equal(t, want, ids(collect(h.sink).kept))
}

// TestShrinkingAFullBottomKKeepsExactlyTheSmallest checks that lowering k of a full bottom-k
// keeps the k' smallest sort keys, no fewer.
func TestShrinkingAFullBottomKKeepsExactlyTheSmallest(t *testing.T) {
	b := newBottomK[string](6)
	for i := range 10 {
		id := fmt.Sprintf("x/%d", i)
		b.offer(sortKey{key: uint64(100 - i), id: id}, func() string { return id })
	}
	require.Equal(t, 6, b.len())
	b.shrink(4)
	var got []string
	for _, e := range b.sorted() {
		got = append(got, e.item)
	}
	assert.Equal(t, []string{"x/9", "x/8", "x/7", "x/6"}, got)
	b.shrink(4) // not lower: nothing changes
	assert.Equal(t, 4, b.len())
}

// TestRedeliveredGenerationsNeverMakeMissingNegative checks that valgen.missing counts the
// emitted generations that did not arrive, and is 0 (not negative) when some arrived twice.
func TestRedeliveredGenerationsNeverMakeMissingNegative(t *testing.T) {
	h := newHarness(t, nil)
	records := stepRecords(1, "trainer", 2, 0)
	h.consume(t, logsOf(records...))
	h.consume(t, logsOf(append(records, endRec(1, "trainer", 2, 2, 0))...)) // a retried delivery
	require.NoError(t, h.p.Shutdown(context.Background()))
	s := collect(h.sink).summaries[0]
	assert.Equal(t, int64(0), intOf(t, s, attrMissing))
	assert.Equal(t, int64(2), intOf(t, s, attrKept))
	assert.Equal(t, int64(2), intOf(t, s, attrSeen))
}

// TestRepeatedEndRecordsKeepTheLargestCounts checks that of a source's repeated end records
// (block-less parts, an older one redelivered late) the largest seen, emitted and
// sources_expected count, whatever order they arrive in.
func TestRepeatedEndRecordsKeepTheLargestCounts(t *testing.T) {
	h := newHarness(t, nil)
	records := stepRecords(1, "trainer", 3, 0)
	h.consume(t, logsOf(records[0], records[1], endRec(1, "trainer", 5, 3, 1)))
	h.consume(t, logsOf(endRec(1, "trainer", 2, 1, 0))) // the first part's end, arriving last
	require.Empty(t, collect(h.sink).summaries, "the third generation emitted has not arrived")

	h.consume(t, logsOf(records[2]))
	got := collect(h.sink)
	require.Len(t, got.summaries, 1, "sources_expected 1 stays promised: the step closes at once")
	s := got.summaries[0]
	assert.Equal(t, closedComplete, strOf(t, s, attrClosedReason))
	assert.Equal(t, int64(5), intOf(t, s, attrSeen))
	assert.Equal(t, int64(3), intOf(t, s, attrKept))
	assert.Equal(t, int64(1), intOf(t, s, attrSourcesExpected))
	assert.Equal(t, int64(0), intOf(t, s, attrMissing))
}

// TestASourceThatDidNotEndCountsWhatItsProgressReported checks that the summary's seen counts,
// for a source without an end record, the larger of the generations that arrived and the
// valgen.seen of its progress records (a presampling source sends fewer than it saw).
func TestASourceThatDidNotEndCountsWhatItsProgressReported(t *testing.T) {
	h := newHarness(t, nil)
	ld := logsOf(stepRecords(1, "trainer", 2, 0)...)
	lrs := ld.ResourceLogs().At(0).ScopeLogs().At(0).LogRecords()
	progress := appendRec(lrs, rec{event: eventProgress, step: 1, source: "trainer"})
	progress.Attributes().PutInt(attrSeen, 10)
	h.consume(t, ld)
	require.NoError(t, h.p.Shutdown(context.Background()))
	s := collect(h.sink).summaries[0]
	assert.Equal(t, int64(10), intOf(t, s, attrSeen))
	assert.Equal(t, int64(2), intOf(t, s, attrKept))
	assert.Equal(t, int64(0), intOf(t, s, attrSourcesEnded))
}

// TestABatchWithAStepsEndAndThenARedeliveredRecordClosesTheStepOnce checks that one batch
// holding a step's end record, then a record of another step, then a redelivered generation of
// the first step sends one summary for the first step: the redelivery is late, never a second
// close of the same group.
func TestABatchWithAStepsEndAndThenARedeliveredRecordClosesTheStepOnce(t *testing.T) {
	h := newHarness(t, nil)
	records := stepRecords(1, "trainer", 2, 0)
	h.consume(t, logsOf(
		records[0], records[1], endRec(1, "trainer", 2, 2, 1),
		rec{step: 2, id: "other/0"},
		records[0], // redelivered by a retrying exporter, in the same batch
	))
	got := collect(h.sink)
	require.Len(t, got.summaries, 1, "step 1 closes once; step 2 is still open")
	s := got.summaries[0]
	assert.Equal(t, int64(1), intOf(t, s, attrStep))
	assert.Equal(t, closedComplete, strOf(t, s, attrClosedReason))
	assert.Equal(t, int64(2), intOf(t, s, attrKept))
	assert.ElementsMatch(t, []string{"trainer/0", "trainer/1"}, ids(got.kept))

	require.NoError(t, h.p.Shutdown(context.Background()))
	got = collect(h.sink)
	steps := make([]int64, 0, len(got.summaries))
	for _, s := range got.summaries {
		steps = append(steps, intOf(t, s, attrStep))
	}
	assert.Equal(t, []int64{1, 2}, steps, "one summary per step")
	assert.ElementsMatch(t, []string{"trainer/0", "trainer/1", "other/0"}, ids(got.kept))
}
