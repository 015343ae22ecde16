// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor // import "github.com/otel-valgen/otel-valgen/collector/valgensamplerprocessor"

import (
	"container/heap"
	"sort"
)

type entry[T any] struct {
	order sortKey
	item  T
}

// maxHeap orders entries so that the largest sort key kept sits at index 0.
type maxHeap[T any] []entry[T]

func (h maxHeap[T]) Len() int           { return len(h) }
func (h maxHeap[T]) Less(i, j int) bool { return h[j].order.less(h[i].order) }
func (h maxHeap[T]) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *maxHeap[T]) Push(x any)        { *h = append(*h, x.(entry[T])) }
func (h *maxHeap[T]) Pop() any {
	old := *h
	last := old[len(old)-1]
	var zero entry[T]
	old[len(old)-1] = zero
	*h = old[:len(old)-1]
	return last
}

// bottomK keeps the k items with the smallest sort keys offered so far, in O(k) memory.
// Offering a sort key that is already kept is a no-op, so a record delivered twice is kept once.
type bottomK[T any] struct {
	k    int
	heap maxHeap[T]
	kept map[sortKey]T
}

func newBottomK[T any](k int) *bottomK[T] {
	return &bottomK[T]{k: max(k, 0), kept: make(map[sortKey]T)}
}

// get returns the kept item with this sort key.
func (b *bottomK[T]) get(order sortKey) (T, bool) {
	item, ok := b.kept[order]
	return item, ok
}

// wouldKeep reports whether an item with this sort key would be kept if offered now.
func (b *bottomK[T]) wouldKeep(order sortKey) bool {
	if b.k == 0 {
		return false
	}
	if _, dup := b.kept[order]; dup {
		return false
	}
	return len(b.heap) < b.k || order.less(b.heap[0].order)
}

// offer keeps the item built by makeItem when its sort key belongs to the bottom k; makeItem
// is called only then, so rejected records cost no copy.
func (b *bottomK[T]) offer(order sortKey, makeItem func() T) bool {
	if !b.wouldKeep(order) {
		return false
	}
	if len(b.heap) == b.k {
		evicted := heap.Pop(&b.heap).(entry[T])
		delete(b.kept, evicted.order)
	}
	item := makeItem()
	heap.Push(&b.heap, entry[T]{order: order, item: item})
	b.kept[order] = item
	return true
}

// shrink lowers k, dropping the largest kept items; the bottom-k' of a bottom-k is exact.
func (b *bottomK[T]) shrink(k int) {
	if k < 0 {
		k = 0
	}
	if k >= b.k {
		return
	}
	b.k = k
	for len(b.heap) > k {
		evicted := heap.Pop(&b.heap).(entry[T])
		delete(b.kept, evicted.order)
	}
}

// cut drops the kept items whose key is bound or more. Exact like shrink: the keys below a
// bound are a prefix of the order, so the bottom-k of those seen below it are the kept ones below it.
func (b *bottomK[T]) cut(bound uint64) {
	for len(b.heap) > 0 && b.heap[0].order.key >= bound {
		evicted := heap.Pop(&b.heap).(entry[T])
		delete(b.kept, evicted.order)
	}
}

func (b *bottomK[T]) len() int { return len(b.heap) }

// sorted returns the kept entries in ascending sort-key order.
func (b *bottomK[T]) sorted() []entry[T] {
	out := make([]entry[T], len(b.heap))
	copy(out, b.heap)
	sort.Slice(out, func(i, j int) bool { return out[i].order.less(out[j].order) })
	return out
}
