// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/plog"
)

// droppedReasons are the summary's valgen.dropped.<reason> attributes.
var droppedReasons = []string{
	attrDroppedSampled, attrDroppedSource, attrDroppedInvalid, attrDroppedUndelivered, attrDroppedNotEnded,
}

// requireBalance checks the summary's balance: seen = kept + dropped, dropped = the sum of
// its reasons, none negative, and valgen.missing = dropped.undelivered. It returns the
// reasons' values.
func requireBalance(t *testing.T, s plog.LogRecord) map[string]int64 {
	t.Helper()
	got := map[string]int64{}
	var sum int64
	for _, attr := range droppedReasons {
		got[attr] = intOf(t, s, attr)
		require.GreaterOrEqual(t, got[attr], int64(0), attr)
		sum += got[attr]
	}
	require.Equal(t, intOf(t, s, attrDropped), sum, "valgen.dropped is the sum of its reasons: %v", got)
	require.Equal(t, intOf(t, s, attrSeen), intOf(t, s, attrKept)+sum, "seen = kept + dropped: %v", got)
	require.Equal(t, got[attrDroppedUndelivered], intOf(t, s, attrMissing))
	return got
}

// TestSourceBalance checks the split of one source's seen generations, worked out by hand.
func TestSourceBalance(t *testing.T) {
	ended := func(seen, emitted, dropped, received, invalid int64) *sourceState {
		return &sourceState{ended: true, received: received, invalid: invalid,
			end: endInfo{seen: seen, emitted: emitted, dropped: dropped}}
	}
	tests := []struct {
		name  string
		state *sourceState
		kept  int64
		seen  int64
		want  dropCounts
	}{
		// 100 seen, 3 dropped at the source, 97 logged, presampled to 10 sent, all arrived, 4 kept:
		// 87 left out by the presampler + 6 ranked out = 93 sampled.
		{"presampled", ended(100, 10, 3, 10, 0), 4, 100, dropCounts{sampled: 93, source: 3}},
		// 10 emitted: 2 never arrived, 1 arrived without a sample id, 7 valid, 4 kept, 3 ranked out.
		{"lost and invalid", ended(10, 10, 0, 7, 1), 4, 10, dropCounts{sampled: 3, invalid: 1, undelivered: 2}},
		// Every record delivered twice: nothing undelivered, the copies change nothing.
		{"redelivered", ended(10, 10, 0, 20, 0), 4, 10, dropCounts{sampled: 6}},
		// An older part's end record (seen 3, emitted 3) while 5 arrived and 4 are kept: the
		// source emitted at least the 4 kept and saw at least that many.
		{"stale end record", ended(3, 3, 0, 5, 0), 4, 4, dropCounts{}},
		// seen 5 but 4 emitted and 3 dropped: it saw at least 7.
		{"seen below emitted plus dropped", ended(5, 4, 3, 4, 0), 2, 7, dropCounts{sampled: 2, source: 3}},
		// More invalid arrivals than emitted records not kept: only those count.
		{"invalid beyond emitted", ended(3, 3, 0, 1, 5), 1, 3, dropCounts{invalid: 2}},
		// Not ended: progress said 50, 6 arrived (1 invalid), 2 kept: 44 never arrived.
		{"not ended, progress", &sourceState{received: 5, invalid: 1, progressSeen: 50}, 2, 50,
			dropCounts{sampled: 3, invalid: 1, notEnded: 44}},
		// Not ended, no progress: what arrived is what it saw.
		{"not ended, no progress", &sourceState{received: 5}, 2, 5, dropCounts{sampled: 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			seen, got := tt.state.balance(tt.kept)
			assert.Equal(t, tt.seen, seen)
			assert.Equal(t, tt.want, got)
			assert.Equal(t, seen, tt.kept+got.total())
		})
	}
}

// balanceSource is one source of a random step: what it did and what became of its records.
type balanceSource struct {
	name                 string
	logged, dropped      int  // it saw logged + dropped generations and dropped the latter itself
	presample            bool // it sends only its own bottom-k
	lost, invalid, twice int  // of the records it sent: never delivered, delivered without a sample id, delivered twice
	// end: 0 none (killed), 1 its end record, 2 also an older part's smaller one, 3 only that older one
	end      int
	progress bool // it sends a progress record with everything it saw
}

// records returns the source's records and, when its figures are consistent (an end record
// with all it did, or none; never a loss hidden by a redelivery), the summary's expected
// figures for it, given how many of its records are kept (filled in once the step closed).
func (b balanceSource) records(rng *rand.Rand, step, expected int64, k int) ([]rec, func(kept int64) (int64, dropCounts), bool) {
	all := make([]string, 0, b.logged)
	for i := range b.logged {
		all = append(all, fmt.Sprintf("%s/%d", b.name, i))
	}
	emitted := all
	if b.presample {
		emitted = referenceBottomK(keyVersionHMAC, defaultSeed, all, k)
	}
	order := rng.Perm(len(emitted))
	var out []rec
	lost, invalid, twice := 0, 0, 0
	for _, i := range order {
		r := rec{step: step, id: emitted[i], source: b.name}
		switch {
		case lost < b.lost:
			lost++
			continue
		case invalid < b.invalid:
			invalid++
			r.noID = true
		case twice < b.twice:
			twice++
			out = append(out, r)
		}
		out = append(out, r)
	}
	seen, sent := int64(b.logged+b.dropped), int64(len(emitted))
	out = append(out, rec{event: eventStart, step: step, source: b.name})
	if b.progress {
		out = append(out, rec{event: eventProgress, step: step, source: b.name, seen: seen})
	}
	full := rec{event: eventEnd, step: step, source: b.name, seen: seen, emitted: sent, dropped: int64(b.dropped), expected: expected}
	older := rec{event: eventEnd, step: step, source: b.name, seen: seen / 2, emitted: sent / 2, dropped: int64(b.dropped / 2), expected: expected}
	switch b.end {
	case 1:
		out = append(out, full)
	case 2:
		out = append(out, full, older)
	case 3:
		out = append(out, older)
	}
	arrived, received := int64(len(emitted)-lost+twice), int64(len(emitted)-lost-invalid+twice)
	want := func(kept int64) (int64, dropCounts) {
		if b.end == 0 {
			seen := arrived
			if b.progress {
				seen = max(seen, int64(b.logged+b.dropped))
			}
			return seen, dropCounts{sampled: received - kept, invalid: int64(invalid), notEnded: seen - arrived}
		}
		return seen, dropCounts{
			sampled: seen - kept - int64(b.dropped+lost+invalid), source: int64(b.dropped),
			invalid: int64(invalid), undelivered: int64(lost),
		}
	}
	return out, want, b.end != 3 && (lost == 0 || twice == 0)
}

func randomBalanceSource(rng *rand.Rand, i int) balanceSource {
	b := balanceSource{
		name: fmt.Sprintf("s%d", i), logged: rng.IntN(30), dropped: rng.IntN(3) * rng.IntN(4),
		presample: rng.IntN(2) == 0, end: []int{0, 1, 1, 1, 2, 3}[rng.IntN(6)], progress: rng.IntN(3) == 0,
	}
	if b.logged > 0 {
		b.lost, b.invalid, b.twice = rng.IntN(3)*rng.IntN(2), rng.IntN(3)*rng.IntN(2), rng.IntN(4)*rng.IntN(2)
	}
	return b
}

// Ways a random step closes (TestStepBalanceOnEverySummary).
const (
	closeByTick     = iota // decision_wait passes: complete after silence, or wait
	closeByShutdown        // the collector stops without storage
	closeByDuration        // sources_expected is never reached: max_step_duration passes
	closeByGroups          // max_groups 1 and another step arrives
	closeAtOnce            // sources_expected = the number of sources: complete at once when it can
)

// TestStepBalanceOnEverySummary runs random steps (sources that presample or not, drop
// generations themselves, lose records, send invalid ones or redeliver them, end once, twice,
// with an older part's end record only, or never, with or without progress) through the
// processor, closed every way and sometimes across a restart on storage, and checks that each
// summary balances and, where the sources' figures are consistent, that each reason counts
// what happened.
func TestStepBalanceOnEverySummary(t *testing.T) {
	const k = 5
	reasons := map[string]int{}
	restored, exact := 0, 0
	for seed := range uint64(400) {
		rng := rand.New(rand.NewPCG(seed, 22))
		closer, stored := rng.IntN(5), rng.IntN(3) == 0
		if closer == closeByShutdown {
			stored = false // with storage, Shutdown keeps the group for the next start
		}
		sources := make([]balanceSource, 1+rng.IntN(4))
		var expected int64
		switch closer {
		case closeByDuration:
			expected = int64(len(sources) + 1)
		case closeAtOnce:
			expected = int64(len(sources))
		}
		var records []rec
		wants := map[string]func(int64) (int64, dropCounts){}
		consistent := true
		for i := range sources {
			sources[i] = randomBalanceSource(rng, i)
			out, want, ok := sources[i].records(rng, int64(seed), expected, k)
			records = append(records, out...)
			wants[sources[i].name] = want
			// Closing at once, the step may close on an older part's end record, or before a
			// redelivered copy's original arrives.
			consistent = consistent && ok && (closer != closeAtOnce || sources[i].end == 1 && sources[i].twice == 0)
		}
		edit := func(c *Config) {
			c.Count = k
			if closer == closeByGroups {
				c.MaxGroups = 1
			}
		}
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
			batches := randomBatches(rng, records)
			var h *harness
			sink := &consumertest.LogsSink{} // what either process sent
			if stored {
				ext := newMemStorage()
				first := startStored(t, ext, newFakeClock().Now(), edit)
				half := len(batches) / 2
				for _, ld := range batches[:half] {
					first.consume(t, ld)
				}
				kill(first)
				for _, ld := range first.sink.AllLogs() {
					require.NoError(t, sink.ConsumeLogs(context.Background(), ld))
				}
				h = startStored(t, ext, first.clock.Now(), edit)
				batches = batches[half:]
				restored++
			} else {
				h = newHarness(t, edit)
			}
			for _, ld := range batches {
				h.consume(t, ld)
			}
			switch closer {
			case closeByTick:
				h.clock.Advance(defaultDecisionWait)
				h.p.closeExpired(context.Background())
			case closeAtOnce: // else: complete after silence, wait, or (a source never ended) max_duration
				h.clock.Advance(defaultDecisionWait)
				h.p.closeExpired(context.Background())
				h.clock.Advance(defaultMaxStepDuration)
				h.p.closeExpired(context.Background())
			case closeByDuration:
				h.clock.Advance(defaultMaxStepDuration)
				h.p.closeExpired(context.Background())
			case closeByGroups:
				h.consume(t, logsOf(rec{step: 1 << 40, id: "other/0", source: "other"}))
			}
			require.NoError(t, h.p.Shutdown(context.Background()))
			for _, ld := range h.sink.AllLogs() {
				require.NoError(t, sink.ConsumeLogs(context.Background(), ld))
			}

			got := collect(sink)
			require.NotEmpty(t, got.summaries)
			keptBy := map[string]int64{}
			for _, lr := range got.kept {
				if intOf(t, lr, attrStep) == int64(seed) {
					keptBy[strOf(t, lr, attrSource)]++
				}
			}
			for _, s := range got.summaries {
				dropped := requireBalance(t, s)
				if intOf(t, s, attrStep) != int64(seed) {
					continue
				}
				reasons[strOf(t, s, attrClosedReason)]++
				if !consistent {
					continue
				}
				exact++
				var seen int64
				var want dropCounts
				for name, wantOf := range wants {
					sSeen, sDrops := wantOf(keptBy[name])
					seen += sSeen
					want.add(sDrops)
				}
				assert.Equal(t, seen, intOf(t, s, attrSeen), "seen")
				assert.Equal(t, map[string]int64{
					attrDroppedSampled: want.sampled, attrDroppedSource: want.source, attrDroppedInvalid: want.invalid,
					attrDroppedUndelivered: want.undelivered, attrDroppedNotEnded: want.notEnded,
				}, dropped)
			}
		})
	}
	for _, reason := range []string{closedComplete, closedWait, closedMaxDuration, closedMaxGroups, closedShutdown} {
		assert.Positive(t, reasons[reason], "no random step closed by %s: %v", reason, reasons)
	}
	assert.Positive(t, restored, "no step was restored from storage")
	assert.Greater(t, exact, 100, "too few steps with consistent figures")
	t.Logf("closed: %v; restored %d, checked reason by reason %d", reasons, restored, exact)
}
