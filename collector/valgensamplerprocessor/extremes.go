// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor // import "github.com/otel-valgen/otel-valgen/collector/valgensamplerprocessor"

import (
	"math"

	"go.opentelemetry.io/collector/pdata/pcommon"
)

// The best and the worst (valgen.extremes = n): beside the keyed picks a validation group keeps
// the n lowest- and the n highest-scored generations (of each data source while split) that
// have a finite valgen.score: two more bottom-n's, by (score, sample key, sample id) and
// (-score, sample key, sample id). They are mergeable like the bottom-k (the extremes of a union
// are the extremes of the parts' extremes), and the smallest n asked for wins, as for k (a
// generation without valgen.extremes asks for 0). otel_valgen.sampling.ScoreExtremes is the
// same rule in Python, and testdata/sampling/extremes.json the cases both suites check.

// Slots a kept record fills (valgen.slots), in the order they are listed.
const (
	slotKeyed   = "keyed"
	slotLowest  = "lowest"
	slotHighest = "highest"
)

// slotSet is the set of slots a kept record fills.
type slotSet uint8

const (
	inKeyed slotSet = 1 << iota
	inLowest
	inHighest
)

// names lists the slots in the order keyed, lowest, highest.
func (s slotSet) names() []string {
	out := make([]string, 0, 3)
	for _, slot := range []struct {
		bit  slotSet
		name string
	}{{inKeyed, slotKeyed}, {inLowest, slotLowest}, {inHighest, slotHighest}} {
		if s&slot.bit != 0 {
			out = append(out, slot.name)
		}
	}
	return out
}

// parseExtremes reads a validation generation's valgen.extremes: an int >= 0; absent, or
// anything else, is 0 (never invalid), as otel_valgen.selection.extremes_of reads it.
func parseExtremes(attrs pcommon.Map) int {
	v, ok := attrs.Get(attrExtremes)
	if !ok || v.Type() != pcommon.ValueTypeInt || v.Int() < 0 {
		return 0
	}
	return int(min(v.Int(), math.MaxInt32))
}

// parseScore reads a generation's valgen.score: a double (or an int) that is finite; anything
// else is no score (never invalid), as otel_valgen.reader reads it.
func parseScore(attrs pcommon.Map) (float64, bool) {
	v, ok := attrs.Get(attrScore)
	if !ok {
		return 0, false
	}
	var score float64
	switch v.Type() {
	case pcommon.ValueTypeDouble:
		score = v.Double()
	case pcommon.ValueTypeInt:
		score = float64(v.Int())
	default:
		return 0, false
	}
	if math.IsNaN(score) || math.IsInf(score, 0) {
		return 0, false
	}
	return score, true
}

// scoreRank is a finite score as a uint64 in the same order: its IEEE 754 bits made monotonic
// (negative scores have every bit flipped, the others the sign bit set), with -0.0 as 0.0.
// otel_valgen.sampling.score_rank is the same function.
func scoreRank(score float64) uint64 {
	if score == 0 {
		score = 0 // -0.0 is 0.0
	}
	bits := math.Float64bits(score)
	if bits>>63 != 0 {
		return ^bits
	}
	return bits | 1<<63
}

// scoreOrder is the order of the lowest (rank = scoreRank(score)) and of the highest (rank =
// its complement, 2^64-1 - scoreRank): the rank, then the sort key. Python folds the rank and the
// sample key into one int, rank << 63 | key (keys are below 2^63), which compares the same.
type scoreOrder struct {
	rank  uint64
	order sortKey
}

func (a scoreOrder) less(b scoreOrder) bool {
	if a.rank != b.rank {
		return a.rank < b.rank
	}
	return a.order.less(b.order)
}

// scoreExtremes are the n lowest- and the n highest-scored records of one view.
type scoreExtremes struct {
	lowest, highest *bottomK[scoreOrder, keptRecord]
}

func newScoreExtremes(n int) *scoreExtremes {
	return &scoreExtremes{lowest: newBottomKBy[scoreOrder, keptRecord](n), highest: newBottomKBy[scoreOrder, keptRecord](n)}
}

// offer keeps the record of a finite score when it is among the lowest or the highest; makeItem
// is called only then (the caller makes it once for both).
func (x *scoreExtremes) offer(score float64, order sortKey, makeItem func() keptRecord) bool {
	rank := scoreRank(score)
	low := x.lowest.offer(scoreOrder{rank: rank, order: order}, makeItem)
	high := x.highest.offer(scoreOrder{rank: ^rank, order: order}, makeItem)
	return low || high
}

// wouldKeep reports whether the lowest or the highest would keep a record of this score if
// offered now.
func (x *scoreExtremes) wouldKeep(score float64, order sortKey) bool {
	rank := scoreRank(score)
	return x.lowest.wouldKeep(scoreOrder{rank: rank, order: order}) || x.highest.wouldKeep(scoreOrder{rank: ^rank, order: order})
}

// absorb offers what other keeps, with its orders: the extremes of the union.
func (x *scoreExtremes) absorb(other *scoreExtremes) {
	for _, e := range other.lowest.heap {
		x.lowest.offer(e.order, func() keptRecord { return e.item })
	}
	for _, e := range other.highest.heap {
		x.highest.offer(e.order, func() keptRecord { return e.item })
	}
}

// shrink lowers n in both (exact, as bottomK.shrink).
func (x *scoreExtremes) shrink(n int) {
	x.lowest.shrink(n)
	x.highest.shrink(n)
}

// each calls f for every record either keeps, with its sort key (a record of both twice).
func (x *scoreExtremes) each(f func(order sortKey, item keptRecord)) {
	for _, list := range []maxHeap[scoreOrder, keptRecord]{x.lowest.heap, x.highest.heap} {
		for _, e := range list {
			f(e.order.order, e.item)
		}
	}
}
