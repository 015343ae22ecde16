// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor // import "github.com/otel-valgen/otel-valgen/collector/valgensamplerprocessor"

import (
	"math"

	"go.opentelemetry.io/collector/pdata/pcommon"
)

// The best and the worst (valgen.extremes = n): beside the keyed picks a validation group keeps
// the n lowest- and the n highest-scored generations (of each data source while split) that
// have a finite valgen.score: two more bottom-n's (slots.go), by (score, sample key, sample id)
// and (-score, sample key, sample id). They are mergeable like the bottom-k (the extremes of a
// union are the extremes of the parts' extremes), and the smallest n asked for wins, as for k (a
// generation without valgen.extremes asks for 0). otel_valgen.sampling.FigureRanks is the same
// rule in Python, and testdata/sampling/extremes.json the cases both suites check.

// parseExtremes reads a validation generation's valgen.extremes: an int >= 0; absent, or
// anything else, is 0 (never invalid), as otel_valgen.selection.extremes_of reads it.
func parseExtremes(attrs pcommon.Map) int { return parseSlotCount(attrs, attrExtremes) }

// parseSlotCount reads the n a record asks of a ranked slot (valgen.extremes, valgen.mismatched):
// an int >= 0; absent, or anything else, is 0 (never invalid).
func parseSlotCount(attrs pcommon.Map, name string) int {
	v, ok := attrs.Get(name)
	if !ok || v.Type() != pcommon.ValueTypeInt || v.Int() < 0 {
		return 0
	}
	return int(min(v.Int(), math.MaxInt32))
}

// parseScore reads a generation's valgen.score: a double (or an int) that is finite; anything
// else is no score (never invalid), as otel_valgen.reader reads it.
func parseScore(attrs pcommon.Map) (float64, bool) { return parseFinite(attrs, attrScore) }

// parseFinite reads a figure of a record: a double (or an int) that is finite; anything else is
// none (never invalid).
func parseFinite(attrs pcommon.Map, name string) (float64, bool) {
	v, ok := attrs.Get(name)
	if !ok {
		return 0, false
	}
	var value float64
	switch v.Type() {
	case pcommon.ValueTypeDouble:
		value = v.Double()
	case pcommon.ValueTypeInt:
		value = float64(v.Int())
	default:
		return 0, false
	}
	if math.IsNaN(value) || math.IsInf(value, 0) {
		return 0, false
	}
	return value, true
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

// withExtremes sets the n lowest- and highest-scored that the group's first generation asks for.
func (d *dataSourceViews) withExtremes(n int) *dataSourceViews {
	d.n = max(n, 0)
	return d
}

// askExtremes applies a later generation's valgen.extremes: the smallest n wins (exact, as a
// smaller k: the bottom-n' of a bottom-n). n = 0 turns the extremes off for good.
func (d *dataSourceViews) askExtremes(n int) {
	if n < d.n {
		d.n = max(n, 0)
		d.shrinkRanks()
	}
}
