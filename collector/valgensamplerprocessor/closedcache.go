// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor // import "github.com/otel-valgen/otel-valgen/collector/valgensamplerprocessor"

import (
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
)

// closedGroups remembers the most recently closed groups (FIFO, bounded), how many late
// records each has received since it closed, and the footprint of each attempt closed since
// the start (concurrent.go), by step.
type closedGroups struct {
	ring    []string
	next    int
	entries map[string]*closedEntry
	reports map[string]*lateReport         // groups with late records not yet reported
	steps   map[string]map[string]struct{} // step key -> keys of entries with a footprint
}

// closedEntry is a remembered closed group: its ring slot, its cumulative late count and,
// when it closed in this process, its footprint (not stored: nil after a restart).
type closedEntry struct {
	slot      int
	late      int64
	footprint *footprint
}

// lateReport is the pending valgen.step.late record of a closed group: the step attributes' values
// and attempt of its first late record, that record's resource, the cumulative late count.
type lateReport struct {
	attrs    pcommon.Map
	resource pcommon.Resource
	late     int64
}

func newClosedGroups(capacity int) *closedGroups {
	return &closedGroups{
		ring:    make([]string, 0, capacity),
		entries: make(map[string]*closedEntry, capacity),
		reports: make(map[string]*lateReport),
		steps:   make(map[string]map[string]struct{}),
	}
}

// add remembers a closed group and its footprint (nil when unknown), forgetting the oldest
// one when the cache is full. It returns the ring slot the key went to, or -1 when nothing
// changed (no cache, or already known).
func (c *closedGroups) add(key string, fp *footprint) int {
	if cap(c.ring) == 0 {
		return -1
	}
	if _, ok := c.entries[key]; ok {
		return -1
	}
	var slot int
	if len(c.ring) < cap(c.ring) {
		slot = len(c.ring)
		c.ring = append(c.ring, key)
	} else {
		slot = c.next
		c.forget(c.ring[c.next])
		c.ring[c.next] = key
		c.next = (c.next + 1) % len(c.ring)
	}
	c.entries[key] = &closedEntry{slot: slot, footprint: fp}
	if fp != nil {
		if c.steps[fp.step] == nil {
			c.steps[fp.step] = make(map[string]struct{})
		}
		c.steps[fp.step][key] = struct{}{}
	}
	return slot
}

// forget drops a remembered group (its ring slot is reused by the caller).
func (c *closedGroups) forget(key string) {
	if e := c.entries[key]; e != nil && e.footprint != nil {
		delete(c.steps[e.footprint.step], key)
		if len(c.steps[e.footprint.step]) == 0 {
			delete(c.steps, e.footprint.step)
		}
	}
	delete(c.entries, key)
}

// sameStep returns the footprints of the remembered closed attempts of a step.
func (c *closedGroups) sameStep(step string) []*footprint {
	keys := c.steps[step]
	out := make([]*footprint, 0, len(keys))
	for key := range keys {
		out = append(out, c.entries[key].footprint)
	}
	return out
}

// markLate counts a late record if the group is a remembered closed one, and queues the
// group's late report (built from the record's step attributes, attempt, kind and resource).
func (c *closedGroups) markLate(key string, lr plog.LogRecord, res pcommon.Resource) bool {
	e, ok := c.entries[key]
	if !ok {
		return false
	}
	e.late++
	r, queued := c.reports[key]
	if !queued {
		r = &lateReport{attrs: pcommon.NewMap(), resource: pcommon.NewResource()}
		attrs := lr.Attributes()
		for _, name := range stepAttributes {
			if v, present := attrs.Get(name); present {
				v.CopyTo(r.attrs.PutEmpty(name))
			}
		}
		r.attrs.PutStr(attrAttempt, attemptOf(attrs))
		r.attrs.PutStr(attrKind, kindOf(attrs))
		res.CopyTo(r.resource)
		c.reports[key] = r
	}
	r.late = e.late
	return true
}

// takeReports returns the queued late reports and starts a new queue.
func (c *closedGroups) takeReports() map[string]*lateReport {
	r := c.reports
	c.reports = make(map[string]*lateReport)
	return r
}
