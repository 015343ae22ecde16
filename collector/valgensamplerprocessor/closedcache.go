// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor // import "github.com/otel-valgen/otel-valgen/collector/valgensamplerprocessor"

// closedGroups remembers the most recently closed groups (FIFO, bounded) and how many late
// records each has received since it closed.
type closedGroups struct {
	ring []string
	next int
	late map[string]int64
}

func newClosedGroups(capacity int) *closedGroups {
	return &closedGroups{ring: make([]string, 0, capacity), late: make(map[string]int64, capacity)}
}

// add remembers a closed group, forgetting the oldest one when the cache is full. It returns
// the ring slot the key went to, or -1 when nothing changed (no cache, or already known).
func (c *closedGroups) add(key string) int {
	if cap(c.ring) == 0 {
		return -1
	}
	if _, ok := c.late[key]; ok {
		return -1
	}
	var slot int
	if len(c.ring) < cap(c.ring) {
		slot = len(c.ring)
		c.ring = append(c.ring, key)
	} else {
		slot = c.next
		delete(c.late, c.ring[c.next])
		c.ring[c.next] = key
		c.next = (c.next + 1) % len(c.ring)
	}
	c.late[key] = 0
	return slot
}

// oldestFirst lists the remembered keys from the oldest to the newest.
func (c *closedGroups) oldestFirst() []string {
	out := make([]string, 0, len(c.ring))
	out = append(out, c.ring[c.next:]...)
	return append(out, c.ring[:c.next]...)
}

// markLate counts a late record if the group is a remembered closed one.
func (c *closedGroups) markLate(key string) bool {
	n, ok := c.late[key]
	if ok {
		c.late[key] = n + 1
	}
	return ok
}
