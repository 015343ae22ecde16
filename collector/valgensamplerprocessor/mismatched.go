// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor // import "github.com/otel-valgen/otel-valgen/collector/valgensamplerprocessor"

import "go.opentelemetry.io/collector/pdata/pcommon"

// The most mismatched (valgen.mismatched = n): beside the k keyed prompts a rollout group keeps
// the n responses (of each data source while split) with the largest finite valgen.mismatch.kl,
// the k3 estimate of KL(rollout engine || trainer) over the response's tokens: one more bottom-n
// (slots.go), by (-kl, sample key, sample id). Each such response is kept alone, not with its
// prompt's other responses: they may be in parts of the step that did not keep them, so keeping
// the prompt whole would not be exact. The rule is mergeable like the bottom-k, the smallest n
// asked for wins (a rollout record without valgen.mismatched asks for 0), and it ignores the
// watch-list's rate. otel_valgen.sampling.FigureRanks is the same rule in Python, and
// testdata/sampling/mismatched.json the cases both suites check.

const (
	attrMismatched = "valgen.mismatched"
	attrMismatchKL = "valgen.mismatch.kl"
)

// parseMismatched reads a rollout record's valgen.mismatched, as parseExtremes reads valgen.extremes.
func parseMismatched(attrs pcommon.Map) int { return parseSlotCount(attrs, attrMismatched) }

// parseKL reads a rollout record's finite valgen.mismatch.kl (a double or an int); anything else
// is none (never invalid), as otel_valgen.selection.kl_of reads it.
func parseKL(attrs pcommon.Map) (float64, bool) { return parseFinite(attrs, attrMismatchKL) }

// withMismatched sets the n most mismatched that the group's first record asks for.
func (d *dataSourceViews) withMismatched(m int) *dataSourceViews {
	d.m = max(m, 0)
	return d
}

// askMismatched applies a later record's valgen.mismatched: the smallest n wins, 0 for good.
func (d *dataSourceViews) askMismatched(m int) {
	if m < d.m {
		d.m = max(m, 0)
		d.shrinkRanks()
	}
}
