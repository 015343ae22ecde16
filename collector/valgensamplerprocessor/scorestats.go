// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor // import "github.com/otel-valgen/otel-valgen/collector/valgensamplerprocessor"

import (
	"math"
	"math/big"

	"go.opentelemetry.io/collector/pdata/pcommon"
)

// exactSumPrec is wide enough for any sum of float64s to be exact: their exponents span about
// 2100 bits, and the rest leaves room for carries of up to 2^1900 addends.
const exactSumPrec = 4096

// scoreStats are a source's valgen.score.count and valgen.score.sum: the generations it saw
// with a valid score (all of them, not only those it sent) and their sum. Like valgen.seen,
// each end record of a source carries them cumulatively.
type scoreStats struct {
	count    int64
	sum      float64
	reported bool // the end record carried them (SDKs before score statistics did not)
}

// parseScoreStats reads the optional score statistics of an end record: both or neither,
// the count an int >= 0, the sum a finite double (an int is taken as one).
func parseScoreStats(attrs pcommon.Map) (scoreStats, string) {
	return readScoreStats(attrs, attrScoreCount, attrScoreSum)
}

// readScoreStats reads a count and a sum stored under countKey and sumKey, by the rules of
// parseScoreStats (end records and stored sources alike).
func readScoreStats(m pcommon.Map, countKey, sumKey string) (scoreStats, string) {
	count, hasCount := m.Get(countKey)
	sum, hasSum := m.Get(sumKey)
	if !hasCount && !hasSum {
		return scoreStats{}, ""
	}
	if !hasCount || !hasSum || count.Type() != pcommon.ValueTypeInt || count.Int() < 0 {
		return scoreStats{}, reasonInvalidAttribute
	}
	stats := scoreStats{count: count.Int(), reported: true}
	switch sum.Type() {
	case pcommon.ValueTypeDouble:
		stats.sum = sum.Double()
	case pcommon.ValueTypeInt:
		stats.sum = float64(sum.Int())
	default:
		return scoreStats{}, reasonInvalidAttribute
	}
	if math.IsNaN(stats.sum) || math.IsInf(stats.sum, 0) {
		return scoreStats{}, reasonInvalidAttribute
	}
	return stats, ""
}

// larger returns, of a source's known statistics and those of another of its end records, the
// pair with the larger count (on a tie, the larger sum): a source's end records are cumulative,
// so this is its latest whatever the order they arrive in, and count and sum stay one record's
// pair. otel_valgen.selection does the same.
func (s scoreStats) larger(other scoreStats) scoreStats {
	switch {
	case !other.reported:
		return s
	case !s.reported, other.count > s.count, other.count == s.count && other.sum > s.sum:
		return other
	}
	return s
}

// scoreTotal adds score statistics up: the counts, and the sums added exactly then rounded to
// the nearest float64 (so the result does not depend on the order of the addends;
// otel_valgen.selection.score_totals adds them exactly too). The zero value is empty.
type scoreTotal struct {
	count int64
	exact *big.Float // nil until statistics are reported
}

// add adds one source's statistics, when it reported them.
func (t *scoreTotal) add(s scoreStats) {
	if !s.reported {
		return
	}
	if t.exact == nil {
		t.exact = new(big.Float).SetPrec(exactSumPrec)
	}
	t.count += s.count
	t.exact.Add(t.exact, new(big.Float).SetFloat64(s.sum))
}

// put writes the count (only when statistics were reported), the sum (unless it overflows a
// float64) and the mean sum/count (with the sum, when the count is > 0) under the given keys:
// the summary's, or one entry's of its valgen.data_sources.
func (t *scoreTotal) put(m pcommon.Map, countKey, sumKey, meanKey string) {
	if t.exact == nil {
		return
	}
	m.PutInt(countKey, t.count)
	sum, _ := t.exact.Float64()
	if math.IsInf(sum, 0) {
		return
	}
	m.PutDouble(sumKey, sum)
	if t.count > 0 {
		m.PutDouble(meanKey, sum/float64(t.count))
	}
}

// scoreTotals are the step's score statistics over its ended sources that reported them.
// testdata/sampling/score_stats.json holds the shared cases.
func (g *group) scoreTotals() scoreTotal {
	var total scoreTotal
	for _, state := range g.sources {
		if state.ended {
			total.add(state.end.scores)
		}
	}
	return total
}
