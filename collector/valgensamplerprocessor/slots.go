// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor // import "github.com/otel-valgen/otel-valgen/collector/valgensamplerprocessor"

// The ranked slots: beside its keyed picks a view keeps, per slot, a bottom-n of the records
// that have a finite figure for it, by (figure, sample key, sample id), or (-figure, ...) for a
// descending slot: the lowest and the highest score (extremes.go, validation), the largest KL
// (mismatched.go, rollouts). Each is mergeable like the bottom-k, and a record in several slots
// is kept (and listed) once. otel_valgen.sampling.FigureRanks and DataSourceViews.ranked are the
// same rule in Python.

// Slots a kept record fills (valgen.slots), in the order they are listed.
const (
	slotKeyed      = "keyed"
	slotLowest     = "lowest"
	slotHighest    = "highest"
	slotMismatched = "mismatched"
)

// slotSet is the set of slots a kept record fills.
type slotSet uint8

const (
	inKeyed slotSet = 1 << iota
	inLowest
	inHighest
	inMismatched
)

var slotNames = [...]struct {
	bit  slotSet
	name string
}{{inKeyed, slotKeyed}, {inLowest, slotLowest}, {inHighest, slotHighest}, {inMismatched, slotMismatched}}

// names lists the slots in the order keyed, lowest, highest, mismatched.
func (s slotSet) names() []string {
	out := make([]string, 0, len(slotNames))
	for _, slot := range slotNames {
		if s&slot.bit != 0 {
			out = append(out, slot.name)
		}
	}
	return out
}

// rankedSlots are the slots kept as a bottom-n of a figure, in the order they are listed, each
// with whether it ranks its figure descending (otel_valgen.sampling.RANKED_SLOTS).
var rankedSlots = [...]struct {
	bit        slotSet
	descending bool
}{{inLowest, false}, {inHighest, true}, {inMismatched, true}}

const rankedSlotCount = len(rankedSlots)

// figures are a record's values for the ranked slots, each with whether it has a finite one.
type figures [rankedSlotCount]struct {
	value float64
	ok    bool
}

// figures are the generation's score for the lowest and the highest, its KL for the most mismatched.
func (gen generation) figures() figures {
	var f figures
	f[0].value, f[0].ok = gen.score, gen.scored
	f[1] = f[0]
	f[2].value, f[2].ok = gen.kl, gen.hasKL
	return f
}

// figureOrder is a ranked slot's order: the figure's rank (scoreRank, its complement for a
// descending slot), then the sort key. Python folds the two into one int, rank << 63 | key
// (keys are below 2^63), which compares the same.
type figureOrder struct {
	rank  uint64
	order sortKey
}

func (a figureOrder) less(b figureOrder) bool {
	if a.rank != b.rank {
		return a.rank < b.rank
	}
	return a.order.less(b.order)
}

// orderIn is the order of a record of figure value and sort key order in ranked slot i.
func orderIn(i int, value float64, order sortKey) figureOrder {
	rank := scoreRank(value)
	if rankedSlots[i].descending {
		rank = ^rank
	}
	return figureOrder{rank: rank, order: order}
}

// rankedItem is a record kept in a ranked slot, with its prompt's sort key (a rollout response's
// is not its own), which storage and a join need.
type rankedItem struct {
	prompt sortKey
	item   keptRecord
}

// slotRanks are one view's ranked slots: a bottom-n per slot, nil while its n is 0.
type slotRanks [rankedSlotCount]*bottomK[figureOrder, rankedItem]

func newSlotRanks(ns [rankedSlotCount]int) *slotRanks {
	var r slotRanks
	for i, n := range ns {
		if n > 0 {
			r[i] = newBottomKBy[figureOrder, rankedItem](n)
		}
	}
	return &r
}

// wouldKeep reports whether a slot would keep a record of these figures if offered now.
func (r *slotRanks) wouldKeep(f figures, order sortKey) bool {
	for i, b := range r {
		if b != nil && f[i].ok && b.wouldKeep(orderIn(i, f[i].value, order)) {
			return true
		}
	}
	return false
}

// offer keeps the record in every slot it belongs to; makeItem is called only then (the caller
// makes it once for all).
func (r *slotRanks) offer(f figures, prompt, order sortKey, makeItem func() keptRecord) bool {
	kept := false
	for i, b := range r {
		if b != nil && f[i].ok && b.offer(orderIn(i, f[i].value, order), func() rankedItem { return rankedItem{prompt, makeItem()} }) {
			kept = true
		}
	}
	return kept
}

// absorb offers what other keeps, with its orders: the slots of the union.
func (r *slotRanks) absorb(other *slotRanks) {
	for i, b := range r {
		if b == nil || other[i] == nil {
			continue
		}
		for _, e := range other[i].heap {
			b.offer(e.order, func() rankedItem { return e.item })
		}
	}
}

// shrink lowers each slot's n (exact, as bottomK.shrink); a slot of n = 0 is dropped.
func (r *slotRanks) shrink(ns [rankedSlotCount]int) {
	for i, b := range r {
		switch {
		case b == nil:
		case ns[i] == 0:
			r[i] = nil
		default:
			b.shrink(ns[i])
		}
	}
}

// each calls f for every record a slot keeps, with its prompt's sort key (a record of several
// slots once per slot).
func (r *slotRanks) each(f func(prompt sortKey, response *entry[keptRecord])) {
	for _, b := range r {
		if b == nil {
			continue
		}
		for _, e := range b.heap {
			f(e.item.prompt, &entry[keptRecord]{order: e.order.order, item: e.item.item})
		}
	}
}

// ns is the n of each ranked slot: the extremes' n for the lowest and the highest, then the
// most mismatched's.
func (d *dataSourceViews) ns() [rankedSlotCount]int { return [rankedSlotCount]int{d.n, d.n, d.m} }

// shrinkRanks applies a smaller n to every view's slots; with every n 0 the slots are gone for good.
func (d *dataSourceViews) shrinkRanks() {
	if d.n == 0 && d.m == 0 {
		d.extremes = nil
		return
	}
	for _, x := range d.extremes {
		x.shrink(d.ns())
	}
}

// rankedRecord is a kept record in the output's order, with the slots it fills.
type rankedRecord struct {
	order sortKey
	item  keptRecord
	slots slotSet
}

// ranked returns every kept record once, ranked: the keyed picks first, as sorted ranks them
// (so the same prompts keep their ranks with or without ranked slots), then data source by data
// source (ascending name bytes) its lowest ascending, its highest descending and its most
// mismatched (largest KL first) that are not listed yet; each with the slots it fills.
func (d *dataSourceViews) ranked() []rankedRecord {
	keyed := d.sorted()
	out := make([]rankedRecord, 0, len(keyed)+len(d.extremes)*(2*d.n+d.m))
	if len(d.extremes) == 0 {
		for _, e := range keyed {
			out = append(out, rankedRecord{order: e.order, item: e.item, slots: inKeyed})
		}
		return out
	}
	slots := make(map[sortKey]slotSet, cap(out))
	for _, e := range keyed {
		slots[e.order] |= inKeyed
	}
	var lists [][]orderedEntry[figureOrder, rankedItem]
	for _, name := range sortedNames(d.extremes) {
		for i, b := range d.extremes[name] {
			if b == nil {
				continue
			}
			list := b.sorted()
			for _, e := range list {
				slots[e.order.order] |= rankedSlots[i].bit
			}
			lists = append(lists, list)
		}
	}
	listed := make(map[sortKey]struct{}, len(slots))
	for _, e := range keyed {
		listed[e.order] = struct{}{}
		out = append(out, rankedRecord{order: e.order, item: e.item, slots: slots[e.order]})
	}
	for _, list := range lists {
		for _, e := range list {
			if _, dup := listed[e.order.order]; dup {
				continue
			}
			listed[e.order.order] = struct{}{}
			out = append(out, rankedRecord{order: e.order.order, item: e.item.item, slots: slots[e.order.order]})
		}
	}
	return out
}
