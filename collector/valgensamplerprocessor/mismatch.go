// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor // import "github.com/otel-valgen/otel-valgen/collector/valgensamplerprocessor"

import (
	"math"
	"sort"
	"strconv"

	"go.opentelemetry.io/collector/pdata/pcommon"
)

// The distribution of a step's rollout responses' per-token figures (otel_valgen.tokens): each
// end record carries its source's as valgen.mismatch, a map of count, tokens and, per figure F,
// F.sum, F.max and F.buckets (log-bucket index -> responses). The summary merges the ended
// sources' maps by the figures' rule (mergeFigures: ".max" the largest, maps key by key, numbers
// added up), then derives F.mean and the nearest-rank quantiles F.p50, F.p90, F.p99 from the
// buckets, for the step and for each data source. The shared cases are
// testdata/sampling/mismatch.json.
const (
	attrMismatch             = "valgen.mismatch"
	mismatchCount            = "count"
	mismatchZeroBucket       = "z"
	mismatchRelativeAccuracy = 0.01
)

// mismatchFigures are the per-response figures whose distribution a step carries.
var mismatchFigures = []string{"mean_abs", "max_abs", "kl", "masked"}

// mismatchQuantiles are the quantiles a summary derives, by suffix.
var mismatchQuantiles = []struct {
	suffix string
	q      float64
}{{".p50", 0.5}, {".p90", 0.9}, {".p99", 0.99}}

// mismatchGamma is the ratio of a bucket's upper bound to its lower one.
var mismatchGamma = (1 + mismatchRelativeAccuracy) / (1 - mismatchRelativeAccuracy)

// parseMismatch reads an end record's valgen.mismatch as raw values: nil when absent or not a map
// (the figures are informational: never the end record).
func parseMismatch(attrs pcommon.Map) map[string]any {
	v, ok := attrs.Get(attrMismatch)
	if !ok || v.Type() != pcommon.ValueTypeMap {
		return nil
	}
	return v.Map().AsRaw()
}

// addMismatch keeps a source's distribution from its end record with the largest valgen.seen (on
// a tie the later one), as addTrajectories does; called before the end's seen is merged.
func (s *sourceState) addMismatch(end endInfo) {
	if end.mismatch != nil && end.seen >= s.end.seen {
		s.end.mismatch = end.mismatch
	}
}

// putMismatch writes a summary's valgen.mismatch: the ended sources' distributions merged (in
// source order) with each figure's mean and quantiles, for the step and for each data source;
// nothing when no ended source sent one.
func putMismatch(attrs pcommon.Map, g *group) {
	putMergedFigures(attrs, attrMismatch, g, func(s *sourceState) map[string]any { return s.end.mismatch }, deriveMismatch)
}

// deriveMismatch adds F.mean = F.sum / count and F.p50, F.p90, F.p99 from F.buckets, then leaves
// the buckets out: a summary's attributes become Loki's structured metadata, a few per figure
// (the buckets stay on the end records and in valgen.source_figures, for merges of partial groups).
func deriveMismatch(merged map[string]any) {
	defer func() {
		for _, name := range mismatchFigures {
			delete(merged, name+".buckets")
		}
	}()
	count, ok := merged[mismatchCount]
	if !ok || !isNumber(count) || asDouble(count) <= 0 {
		return
	}
	for _, name := range mismatchFigures {
		if total, ok := merged[name+".sum"]; ok && isNumber(total) {
			merged[name+".mean"] = asDouble(total) / asDouble(count)
		}
		buckets, ok := merged[name+".buckets"].(map[string]any)
		if !ok {
			continue
		}
		largest, hasLargest := merged[name+".max"]
		for _, quantile := range mismatchQuantiles {
			value, found := bucketQuantile(buckets, quantile.q)
			if !found {
				continue
			}
			if hasLargest && isNumber(largest) {
				value = math.Min(value, asDouble(largest))
			}
			merged[name+quantile.suffix] = value
		}
	}
}

type bucketCount struct {
	index int64 // math.MinInt64 for the zero bucket
	n     float64
}

// bucketQuantile is the value of the bucket holding the nearest-rank q quantile (rank ceil(q*n)).
func bucketQuantile(buckets map[string]any, q float64) (float64, bool) {
	counts := make([]bucketCount, 0, len(buckets))
	total := 0.0
	for key, n := range buckets {
		if !isNumber(n) || asDouble(n) <= 0 {
			continue
		}
		index := int64(math.MinInt64)
		if key != mismatchZeroBucket {
			parsed, err := strconv.ParseInt(key, 10, 64)
			if err != nil {
				continue
			}
			index = parsed
		}
		counts = append(counts, bucketCount{index, asDouble(n)})
		total += asDouble(n)
	}
	if total == 0 {
		return 0, false
	}
	sort.Slice(counts, func(i, j int) bool { return counts[i].index < counts[j].index })
	rank := math.Max(1, math.Ceil(q*total))
	seen := 0.0
	for _, c := range counts {
		seen += c.n
		if seen >= rank {
			if c.index == math.MinInt64 {
				return 0, true
			}
			return 2 * math.Pow(mismatchGamma, float64(c.index)) / (mismatchGamma + 1), true
		}
	}
	return 0, false
}
