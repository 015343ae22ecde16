// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor // import "github.com/otel-valgen/otel-valgen/collector/valgensamplerprocessor"

import "sort"

// groupView is a group's sample, the group view: the k prompts with the smallest prompt sort
// keys, each with every response of it that arrived. A rollout's responses share their
// prompt's (valgen.prompt_key, valgen.prompt_id), so they are kept or dropped together; a
// validation generation is its own prompt with one response, so for validation this is the
// bottom-k of generations. Memory is O(k·n) for n responses per prompt.
// otel_valgen.sampling.GroupView is the same rule in Python, and
// testdata/sampling/group_view.json the cases both suites check.
type groupView struct {
	prompts *bottomK[*keptPrompt]
}

// keptPrompt is one kept prompt's responses, in arrival order.
type keptPrompt struct {
	responses []entry[keptRecord]
}

func newGroupView(k int) *groupView {
	return &groupView{prompts: newBottomK[*keptPrompt](k)}
}

// offer keeps the generation when its prompt is (or enters) the bottom-k prompts; makeItem is
// called only then. A response already kept (same sort key) is not kept twice.
func (v *groupView) offer(gen generation, makeItem func() keptRecord) bool {
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
