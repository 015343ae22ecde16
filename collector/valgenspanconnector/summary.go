// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgenspanconnector // import "github.com/otel-valgen/otel-valgen/collector/valgenspanconnector"

import (
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
)

// What the root span says about the trace itself.
const (
	attrTracePartial       = "valgen.trace.partial"
	attrTracePartialReason = "valgen.trace.partial_reason"
	attrSpansOmitted       = "valgen.trace.spans_omitted"
	attrGenerationsOmitted = "valgen.trace.generations_omitted"
	attrSubtreesOmitted    = "valgen.trace.trajectories_omitted"
	// maxOmittedListed caps the sample ids the two lists above name; the count says the rest.
	maxOmittedListed = 32
)

// putSummaryFigures copies the step summary's figures onto the root span, as attributes a
// trace UI can show and search:
//   - scalars and arrays of scalars as they are (valgen.seen, valgen.kept, valgen.closed_reason,
//     valgen.sources_missing, valgen.score.mean, ...);
//   - maps flattened to one attribute per scalar leaf, the keys joined by dots
//     (valgen.trajectories.turns.mean, valgen.mismatch.kl.p90), leaving out the histograms
//     (map keys ending in "buckets");
//   - valgen.data_sources, an array of maps, as valgen.data_sources.<data source>.<figure>;
//   - left out: valgen.prompt_keys (a sketch of up to 1,024 keys) and valgen.source_figures
//     (each source's raw figures, for merging partial groups), which no one reads in a UI.
func putSummaryFigures(dst, src pcommon.Map) {
	for k, v := range src.All() {
		switch {
		case k == attrPromptKeys || k == attrSourceFigures || k == attrEventName:
		case k == attrDataSources && v.Type() == pcommon.ValueTypeSlice:
			putDataSources(dst, v.Slice())
		case v.Type() == pcommon.ValueTypeMap:
			flatten(dst, k, v.Map())
		case v.Type() == pcommon.ValueTypeSlice:
			if scalars(v.Slice()) {
				v.CopyTo(dst.PutEmpty(k))
			}
		default:
			v.CopyTo(dst.PutEmpty(k))
		}
	}
}

// flatten puts a map's scalar leaves as prefix.key attributes (maps recursively).
func flatten(dst pcommon.Map, prefix string, m pcommon.Map) {
	for k, v := range m.All() {
		if strings.HasSuffix(k, "buckets") {
			continue
		}
		name := prefix + "." + k
		switch v.Type() {
		case pcommon.ValueTypeMap:
			flatten(dst, name, v.Map())
		case pcommon.ValueTypeSlice:
			if scalars(v.Slice()) {
				v.CopyTo(dst.PutEmpty(name))
			}
		case pcommon.ValueTypeBytes, pcommon.ValueTypeEmpty:
		default:
			v.CopyTo(dst.PutEmpty(name))
		}
	}
}

// putDataSources flattens each entry of valgen.data_sources under its data_source's name.
func putDataSources(dst pcommon.Map, entries pcommon.Slice) {
	for _, e := range entries.All() {
		if e.Type() != pcommon.ValueTypeMap {
			continue
		}
		name, ok := e.Map().Get("data_source")
		if !ok || name.Type() != pcommon.ValueTypeStr {
			continue
		}
		figures := pcommon.NewMap()
		e.Map().CopyTo(figures)
		figures.Remove("data_source")
		flatten(dst, attrDataSources+"."+name.Str(), figures)
	}
}

// scalars reports whether every element of s is a string, int, double or bool.
func scalars(s pcommon.Slice) bool {
	for _, v := range s.All() {
		switch v.Type() {
		case pcommon.ValueTypeStr, pcommon.ValueTypeInt, pcommon.ValueTypeDouble, pcommon.ValueTypeBool:
		default:
			return false
		}
	}
	return true
}

// putOmitted names on the root what the bounds left out: the count of spans, and the sample
// ids (at most maxOmittedListed each) of the generations left out whole and of those that kept
// their span but lost their trajectory's turn and tool spans.
func putOmitted(dst pcommon.Map, spans int64, generations, trajectories []string) {
	if spans == 0 {
		return
	}
	dst.PutInt(attrSpansOmitted, spans)
	putList(dst, attrGenerationsOmitted, generations)
	putList(dst, attrSubtreesOmitted, trajectories)
}

func putList(dst pcommon.Map, key string, ids []string) {
	if len(ids) == 0 {
		return
	}
	s := dst.PutEmptySlice(key)
	for _, id := range ids[:min(len(ids), maxOmittedListed)] {
		s.AppendEmpty().SetStr(id)
	}
}
