// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor // import "github.com/otel-valgen/otel-valgen/collector/valgensamplerprocessor"

import (
	"container/heap"
	"sort"
)

// ordered is an order a bottomK keeps by: comparable (a record delivered twice has the same
// order) and totally ordered by less. sortKey is the keyed picks' order, figureOrder the ranked slots'.
type ordered[O any] interface {
	comparable
	less(O) bool
}

// orderedEntry is one kept item with its order.
type orderedEntry[O, T any] struct {
	order O
	item  T
}

// entry is an item kept by sort key (the keyed picks).
type entry[T any] = orderedEntry[sortKey, T]

// maxHeap orders entries so that the largest order kept sits at index 0.
type maxHeap[O ordered[O], T any] []orderedEntry[O, T]

func (h maxHeap[O, T]) Len() int           { return len(h) }
func (h maxHeap[O, T]) Less(i, j int) bool { return h[j].order.less(h[i].order) }
func (h maxHeap[O, T]) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *maxHeap[O, T]) Push(x any)        { *h = append(*h, x.(orderedEntry[O, T])) }
func (h *maxHeap[O, T]) Pop() any {
	old := *h
	last := old[len(old)-1]
	var zero orderedEntry[O, T]
	old[len(old)-1] = zero
	*h = old[:len(old)-1]
	return last
}

// bottomK keeps the k items with the smallest orders offered so far, in O(k) memory.
// Offering an order that is already kept is a no-op, so a record delivered twice is kept once.
type bottomK[O ordered[O], T any] struct {
	k    int
	heap maxHeap[O, T]
	kept map[O]T
}

// newBottomK is a bottom-k by sort key.
func newBottomK[T any](k int) *bottomK[sortKey, T] { return newBottomKBy[sortKey, T](k) }

// newBottomKBy is a bottom-k by any order.
func newBottomKBy[O ordered[O], T any](k int) *bottomK[O, T] {
	return &bottomK[O, T]{k: max(k, 0), kept: make(map[O]T)}
}

// get returns the kept item with this order.
func (b *bottomK[O, T]) get(order O) (T, bool) {
	item, ok := b.kept[order]
	return item, ok
}

// wouldKeep reports whether an item with this order would be kept if offered now.
func (b *bottomK[O, T]) wouldKeep(order O) bool {
	if b.k == 0 {
		return false
	}
	if _, dup := b.kept[order]; dup {
		return false
	}
	return len(b.heap) < b.k || order.less(b.heap[0].order)
}

// offer keeps the item built by makeItem when its order belongs to the bottom k; makeItem
// is called only then, so rejected records cost no copy.
func (b *bottomK[O, T]) offer(order O, makeItem func() T) bool {
	if !b.wouldKeep(order) {
		return false
	}
	if len(b.heap) == b.k {
		evicted := heap.Pop(&b.heap).(orderedEntry[O, T])
		delete(b.kept, evicted.order)
	}
	item := makeItem()
	heap.Push(&b.heap, orderedEntry[O, T]{order: order, item: item})
	b.kept[order] = item
	return true
}

// shrink lowers k, dropping the largest kept items; the bottom-k' of a bottom-k is exact.
func (b *bottomK[O, T]) shrink(k int) {
	if k < 0 {
		k = 0
	}
	if k >= b.k {
		return
	}
	b.k = k
	for len(b.heap) > k {
		evicted := heap.Pop(&b.heap).(orderedEntry[O, T])
		delete(b.kept, evicted.order)
	}
}

// cut drops the kept items whose order is bound or more. Exact like shrink: the orders below a
// bound are a prefix of the order, so the bottom-k of those seen below it are the kept ones below it.
func (b *bottomK[O, T]) cut(bound O) {
	for len(b.heap) > 0 && !b.heap[0].order.less(bound) {
		evicted := heap.Pop(&b.heap).(orderedEntry[O, T])
		delete(b.kept, evicted.order)
	}
}

func (b *bottomK[O, T]) len() int { return len(b.heap) }

// sorted returns the kept entries in ascending order.
func (b *bottomK[O, T]) sorted() []orderedEntry[O, T] {
	out := make([]orderedEntry[O, T], len(b.heap))
	copy(out, b.heap)
	sort.Slice(out, func(i, j int) bool { return out[i].order.less(out[j].order) })
	return out
}
