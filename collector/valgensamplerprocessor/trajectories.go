// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor // import "github.com/otel-valgen/otel-valgen/collector/valgensamplerprocessor"

import (
	"sort"
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
)

// Figures over every trajectory of a step (otel_valgen.trajectories): each end record carries a
// source's figures cumulatively as valgen.trajectories, a map; the summary merges the ended
// sources' figures (each from its end record with the largest seen) and derives the means and
// shares. One rule merges them, as otel_valgen.trajectories.merge does: a key ending in ".max"
// takes the largest value, one ending in ".min" the smallest, a map merges key by key, any other
// number adds up; other values are left out. The shared cases are testdata/sampling/trajectories.json.
const (
	attrTrajectories    = "valgen.trajectories"
	trajectoryCount     = "count"
	trajectoryTurnsSum  = "turns.sum"
	trajectoryToolCalls = "tool_calls.sum"
	trajectoryTurnLimit = "turn_limit"
	trajectoryLengthLim = "length_limit"
	// The figures per data source when the step keeps k per data source: a map of figure maps.
	trajectoryByDataSource = "by_data_source"
	trajectoryMaxSuffix    = ".max"
	trajectoryMinSuffix    = ".min"
	trajectoryMeanSuffix   = ".mean"
	trajectoryShare        = ".share"
	// Per-trajectory reward lists (verl's tool_rewards, turn_scores), over the trajectories with
	// at least one value: <P>.trajectories, .count, .sum, .min, .max, and turn_scores.last.sum.
	rewardTrajectories  = ".trajectories"
	rewardCount         = ".count"
	rewardSum           = ".sum"
	rewardPerTrajectory = ".per_trajectory"
	rewardLastSum       = ".last.sum"
	rewardLastMean      = ".last.mean"
)

// rewardColumns are the prefixes of the reward figures (otel_valgen.trajectories.REWARD_COLUMNS).
var rewardColumns = [...]string{"tool_rewards", "turn_scores"}

// mergeRule is how two sources' values of one figure combine.
type mergeRule int

const (
	mergeSum mergeRule = iota
	mergeMax
	mergeMin
)

func ruleOf(key string) mergeRule {
	switch {
	case strings.HasSuffix(key, trajectoryMaxSuffix):
		return mergeMax
	case strings.HasSuffix(key, trajectoryMinSuffix):
		return mergeMin
	}
	return mergeSum
}

// parseTrajectories reads an end record's valgen.trajectories as raw values: nil when absent or
// not a map (the figures are informational: never the end record).
func parseTrajectories(attrs pcommon.Map) map[string]any {
	v, ok := attrs.Get(attrTrajectories)
	if !ok || v.Type() != pcommon.ValueTypeMap {
		return nil
	}
	return v.Map().AsRaw()
}

// addTrajectories keeps a source's figures from the end record with the largest valgen.seen (on
// a tie the later one), as addDataSources does; called before the end's seen is merged.
func (s *sourceState) addTrajectories(end endInfo) {
	if end.trajectories != nil && end.seen >= s.end.seen {
		s.end.trajectories = end.trajectories
	}
}

// mergeFigures adds one source's figures into the merged ones.
func mergeFigures(into, one map[string]any) {
	for key, value := range one {
		known, exists := into[key]
		switch v := value.(type) {
		case map[string]any:
			inner, ok := known.(map[string]any)
			if !ok {
				inner = map[string]any{}
				into[key] = inner
			}
			mergeFigures(inner, v)
		case int64, float64:
			if !exists {
				into[key] = v
			} else if isNumber(known) {
				into[key] = combine(known, v, ruleOf(key))
			}
		default: // texts, bools, lists: not figures
		}
	}
}

func isNumber(v any) bool {
	switch v.(type) {
	case int64, float64:
		return true
	}
	return false
}

// combine gives the largest of the two, the smallest, or their sum, by rule; two ints stay an int.
func combine(known, value any, rule mergeRule) any {
	a, aInt := known.(int64)
	b, bInt := value.(int64)
	if aInt && bInt {
		switch rule {
		case mergeMax:
			return max(a, b)
		case mergeMin:
			return min(a, b)
		}
		return a + b
	}
	x, y := asDouble(known), asDouble(value)
	switch rule {
	case mergeMax:
		return max(x, y)
	case mergeMin:
		return min(x, y)
	}
	return x + y
}

func asDouble(v any) float64 {
	if i, ok := v.(int64); ok {
		return float64(i)
	}
	f, _ := v.(float64)
	return f
}

// putTrajectories writes a summary's valgen.trajectories: the ended sources' figures merged (in
// source order), with turns.mean, tool_calls.mean and the turn and length limits' shares of
// count, for the step and for each data source; nothing when no ended source sent figures.
func putTrajectories(attrs pcommon.Map, g *group) {
	putMergedFigures(attrs, attrTrajectories, g, func(s *sourceState) map[string]any { return s.end.trajectories }, deriveFigures)
}

// putMergedFigures writes a summary's figure map `key` (valgen.trajectories, valgen.mismatch): the
// ended sources' maps that `of` picks, merged in source order by mergeFigures, then `derive`d for
// the step and for each data source (by_data_source); nothing when no ended source sent one.
func putMergedFigures(
	attrs pcommon.Map, key string, g *group, of func(*sourceState) map[string]any, derive func(map[string]any),
) {
	ids := make([]sourceID, 0, len(g.sources))
	for id := range g.sources {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i].String() < ids[j].String() })
	var merged map[string]any
	for _, id := range ids {
		state := g.sources[id]
		figures := of(state)
		if !state.ended || figures == nil {
			continue
		}
		if merged == nil {
			merged = map[string]any{}
		}
		mergeFigures(merged, figures)
	}
	if merged == nil {
		return
	}
	derive(merged)
	if perSource, ok := merged[trajectoryByDataSource].(map[string]any); ok {
		for _, figures := range perSource {
			if m, ok := figures.(map[string]any); ok {
				derive(m)
			}
		}
	}
	_ = attrs.PutEmptyMap(key).FromRaw(merged) // raw ints, doubles and maps always convert
}

// deriveFigures adds turns.mean, tool_calls.mean and the turn and length limits' shares of count,
// and for each reward column P: P.mean = P.sum / P.count, P.per_trajectory = P.sum /
// P.trajectories, P.last.mean = P.last.sum / P.trajectories.
func deriveFigures(merged map[string]any) {
	deriveRewards(merged)
	if count, ok := merged[trajectoryCount]; ok && isNumber(count) && asDouble(count) > 0 {
		n := asDouble(count)
		for _, total := range []string{trajectoryTurnsSum, trajectoryToolCalls} {
			if v, ok := merged[total]; ok && isNumber(v) {
				merged[strings.TrimSuffix(total, ".sum")+trajectoryMeanSuffix] = asDouble(v) / n
			}
		}
		for _, key := range []string{trajectoryTurnLimit, trajectoryLengthLim} {
			if v, ok := merged[key]; ok && isNumber(v) {
				merged[key+trajectoryShare] = asDouble(v) / n
			}
		}
	}
}

func deriveRewards(merged map[string]any) {
	for _, prefix := range rewardColumns {
		sum, ok := merged[prefix+rewardSum]
		if !ok || !isNumber(sum) {
			continue
		}
		for _, d := range [...]struct{ of, derived string }{
			{rewardCount, trajectoryMeanSuffix},
			{rewardTrajectories, rewardPerTrajectory},
		} {
			if n, ok := merged[prefix+d.of]; ok && isNumber(n) && asDouble(n) > 0 {
				merged[prefix+d.derived] = asDouble(sum) / asDouble(n)
			}
		}
		last, okLast := merged[prefix+rewardLastSum]
		n, okN := merged[prefix+rewardTrajectories]
		if okLast && okN && isNumber(last) && isNumber(n) && asDouble(n) > 0 {
			merged[prefix+rewardLastMean] = asDouble(last) / asDouble(n)
		}
	}
}
