// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor // import "github.com/otel-valgen/otel-valgen/collector/valgensamplerprocessor"

import (
	"math"
	"math/bits"

	"go.opentelemetry.io/collector/pdata/pcommon"
)

// A rollout step's distinct prompts are counted from a sketch: the m smallest distinct prompt
// keys its sources saw (valgen.prompt_keys, a "k minimum values" sketch). Sketches merge
// exactly (the m smallest of a union are the m smallest of the parts' m smallest), so a
// prompt whose responses came from several sources, calls or samplers is counted once. With
// fewer than m keys the count is exact; from m on it is the estimate (m-1)·2^63/(u+1), u the
// m-th smallest key, with a relative standard error of 1/sqrt(m-2). otel_valgen.distinct is
// the same rule in Python, and testdata/sampling/distinct_prompts.json the cases both check.

// promptSketchSize is m: counts below it are exact.
const promptSketchSize = 1024

// promptsSeenError is the estimate's relative standard error, 1/sqrt(m-2).
var promptsSeenError = 1 / math.Sqrt(promptSketchSize-2)

// mergeKeys returns the m smallest distinct keys of two ascending sketches, ascending.
func mergeKeys(a, b []int64, m int) []int64 {
	out := make([]int64, 0, min(len(a)+len(b), m))
	i, j := 0, 0
	for len(out) < m && (i < len(a) || j < len(b)) {
		var next int64
		switch {
		case j >= len(b) || (i < len(a) && a[i] < b[j]):
			next, i = a[i], i+1
		case i >= len(a) || b[j] < a[i]:
			next, j = b[j], j+1
		default: // equal: one key
			next, i, j = a[i], i+1, j+1
		}
		out = append(out, next)
	}
	return out
}

// distinctCount is the count a sketch of size m gives, and whether it is an estimate.
func distinctCount(keys []int64, m int) (int64, bool) {
	if len(keys) < m {
		return int64(len(keys)), false
	}
	largest := uint64(keys[m-1]) + 1 // m distinct keys >= 0: largest >= m, so the quotient fits
	hi, lo := bits.Mul64(uint64(m-1), 1<<63)
	if hi >= largest {
		return math.MaxInt64, true
	}
	q, _ := bits.Div64(hi, lo, largest)
	if q > math.MaxInt64 {
		return math.MaxInt64, true
	}
	return int64(q), true
}

// parsePromptKeys reads valgen.prompt_keys: ascending, distinct keys in [0, 2^63); absent is
// nil (a library before the sketch). Anything else is invalid.
func parsePromptKeys(attrs pcommon.Map) ([]int64, string) {
	return parsePromptKeysAt(attrs, attrPromptKeys)
}

// parsePromptKeysAt reads a sketch from the attribute name.
func parsePromptKeysAt(attrs pcommon.Map, name string) ([]int64, string) {
	v, ok := attrs.Get(name)
	if !ok {
		return nil, ""
	}
	if v.Type() != pcommon.ValueTypeSlice || v.Slice().Len() > promptSketchSize {
		return nil, reasonInvalidAttribute
	}
	keys := make([]int64, v.Slice().Len())
	for i := range keys {
		item := v.Slice().At(i)
		if item.Type() != pcommon.ValueTypeInt || item.Int() < 0 || (i > 0 && item.Int() <= keys[i-1]) {
			return nil, reasonInvalidAttribute
		}
		keys[i] = item.Int()
	}
	return keys, ""
}

// putPromptKeys writes a sketch as an int array attribute.
func putPromptKeys(attrs pcommon.Map, name string, keys []int64) {
	s := attrs.PutEmptySlice(name)
	s.EnsureCapacity(len(keys))
	for _, key := range keys {
		s.AppendEmpty().SetInt(key)
	}
}
