// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor // import "github.com/otel-valgen/otel-valgen/collector/valgensamplerprocessor"

import (
	"math"
	"sort"

	"go.opentelemetry.io/collector/pdata/pcommon"
)

// groupView is a group's sample, the group view: the k prompts with the smallest prompt sort
// keys, each with every response of it that arrived. A rollout's responses share their
// prompt's (valgen.prompt_key, valgen.prompt_id), so they are kept or dropped together; a
// validation generation is its own prompt with one response, so for validation this is the
// bottom-k of generations. Memory is O(k·n) for n responses per prompt.
// otel_valgen.sampling.GroupView is the same rule in Python, and
// testdata/sampling/group_view.json the cases both suites check.
//
// With a sample rate (valgen.sample_rate, the watch-list) only prompts whose key is below
// rateThreshold(rate) are eligible: the view keeps the eligible prompts, the k smallest when more
// are eligible. testdata/sampling/rate.json holds the cases both suites check.
type groupView struct {
	prompts *bottomK[sortKey, *keptPrompt]
	rate    float64 // the smallest rate applied (stepRate), 0 for none
	limit   uint64  // rateThreshold(rate): prompts whose key is this or more are not eligible
}

// keptPrompt is one kept prompt's responses, in arrival order.
type keptPrompt struct {
	responses []entry[keptRecord]
}

func newGroupView(k int) *groupView {
	return &groupView{prompts: newBottomK[*keptPrompt](k), limit: noRateThreshold}
}

// noRateThreshold is the threshold of rate 1 (or of no rate): every key, in [0, 2^63), is below it.
const noRateThreshold = uint64(1) << 63

// rateThreshold is floor(rate * 2^63) for a rate in (0, 1], 2^63 for none (0): a prompt whose key
// is below it is eligible. rate * 2^63 is exact in binary64 (a power-of-two scaling) and the
// conversion truncates, which is the floor of a positive number, so Python's
// otel_valgen.sampling.rate_threshold gets the same integer.
func rateThreshold(rate float64) uint64 {
	if rate <= 0 || rate >= 1 {
		return noRateThreshold
	}
	return uint64(math.Ldexp(rate, 63))
}

// stepRate is a group's rate once a record asks for asked (0: none): the smallest rate wins.
// Lowering a rate is exact (the prompts below the lower threshold are a prefix of those below
// the higher one) and raising it is not, as for k (stepK); no rate is rate 1.
func stepRate(current, asked float64) float64 {
	switch {
	case current == 0:
		return asked
	case asked == 0:
		return current
	}
	return min(current, asked)
}

// parseRate reads a record's valgen.sample_rate: 0 when absent; a double (or int) in (0, 1],
// else the record is invalid.
func parseRate(attrs pcommon.Map) (float64, string) {
	return parseRateAt(attrs, attrSampleRate)
}

// parseRateAt reads a rate from the attribute name (a record's, or a stored group's).
func parseRateAt(attrs pcommon.Map, name string) (float64, string) {
	v, ok := attrs.Get(name)
	if !ok {
		return 0, ""
	}
	var rate float64
	switch v.Type() {
	case pcommon.ValueTypeDouble:
		rate = v.Double()
	case pcommon.ValueTypeInt:
		rate = float64(v.Int())
	default:
		return 0, reasonInvalidAttribute
	}
	if !(rate > 0 && rate <= 1) { // also rejects NaN
		return 0, reasonInvalidAttribute
	}
	return rate, ""
}

// lowerRate applies a record's rate by stepRate, dropping the kept prompts no longer eligible.
func (v *groupView) lowerRate(rate float64) {
	lowered := stepRate(v.rate, rate)
	if lowered == v.rate {
		return
	}
	v.rate, v.limit = lowered, rateThreshold(lowered)
	v.prompts.cut(sortKey{key: v.limit}) // the smallest sort key of that key: cuts the keys >= limit
}

// applyRate lowers the group's rate by a record's (0: none) and cuts its view to it. The
// watch-list applies to rollouts: a validation group ignores rates.
func (g *group) applyRate(rate float64) {
	if g.kind != kindRollout {
		return
	}
	g.rate = stepRate(g.rate, rate)
	if g.kept != nil {
		g.kept.lowerRate(g.rate)
	}
}

// promptsUnderRate is how many distinct prompts under the rate its ended sources saw. From the
// merged sketch of their prompt keys (distinct.go) when they sent one: exact while fewer than m
// keys of the sketch are under the threshold (the sketch holds every key below its largest).
// Else each source's largest valgen.prompts_under_rate added up (an upper bound when a prompt's
// responses come from several sources).
func (g *group) promptsUnderRate() int64 {
	if _, _, sketch := g.promptsSeen(); sketch != nil {
		limit := rateThreshold(g.rate)
		return int64(sort.Search(len(sketch), func(i int) bool { return uint64(sketch[i]) >= limit }))
	}
	var n int64
	for _, state := range g.sources {
		if state.ended {
			n += state.end.promptsUnderRate
		}
	}
	return n
}

// putRate writes a rollout summary's watch-list figures when its records carry a rate: the rate
// (the smallest), the prompts under it that its sources saw, and of those how many the cap k left
// out (valgen.prompts_over_cap).
func putRate(attrs pcommon.Map, g *group, promptsKept int) {
	if g.rate == 0 {
		return
	}
	under := g.promptsUnderRate()
	attrs.PutDouble(attrSampleRate, g.rate)
	attrs.PutInt(attrPromptsUnderRate, under)
	attrs.PutInt(attrPromptsOverCap, max(under-int64(promptsKept), 0))
}

// offer keeps the generation when its prompt is (or enters) the bottom-k prompts; makeItem is
// called only then. A response already kept (same sort key) is not kept twice.
func (v *groupView) offer(gen generation, makeItem func() keptRecord) bool {
	if gen.prompt.key >= v.limit {
		return false
	}
	if p, ok := v.prompts.get(gen.prompt); ok {
		for i := range p.responses {
			if p.responses[i].order == gen.order {
				return false
			}
		}
		p.responses = append(p.responses, entry[keptRecord]{order: gen.order, item: makeItem()})
		return true
	}
	return v.prompts.offer(gen.prompt, func() *keptPrompt {
		return &keptPrompt{responses: []entry[keptRecord]{{order: gen.order, item: makeItem()}}}
	})
}

// shrink lowers k (in prompts); the bottom-k' of a bottom-k is exact.
func (v *groupView) shrink(k int) { v.prompts.shrink(k) }

// promptCount is how many prompts are kept.
func (v *groupView) promptCount() int { return v.prompts.len() }

// len is how many responses are kept.
func (v *groupView) len() int {
	n := 0
	for i := range v.prompts.heap {
		n += len(v.prompts.heap[i].item.responses)
	}
	return n
}

// each calls f for every kept response with its prompt's sort key, in no particular order.
func (v *groupView) each(f func(prompt sortKey, response *entry[keptRecord])) {
	for i := range v.prompts.heap {
		p := &v.prompts.heap[i]
		for j := range p.item.responses {
			f(p.order, &p.item.responses[j])
		}
	}
}

// sorted returns the kept responses ranked: prompts in ascending prompt sort-key order, each
// prompt's responses together in ascending sort-key order.
func (v *groupView) sorted() []entry[keptRecord] {
	var out []entry[keptRecord]
	for _, p := range v.prompts.sorted() {
		responses := append([]entry[keptRecord](nil), p.item.responses...)
		sort.Slice(responses, func(i, j int) bool { return responses[i].order.less(responses[j].order) })
		out = append(out, responses...)
	}
	return out
}
