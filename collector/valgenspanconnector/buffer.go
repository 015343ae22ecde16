// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgenspanconnector // import "github.com/otel-valgen/otel-valgen/collector/valgenspanconnector"

import (
	"sort"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
)

// Reasons of the groups-partial metric (and valgen.trace.partial_reason): why a group was
// emitted before its summary arrived.
const (
	partialMaxWait   = "max_wait"
	partialMaxGroups = "max_groups"
	partialMaxBytes  = "max_buffer_bytes"
	partialShutdown  = "shutdown"
)

// pending is a group whose kept records wait for its summary, in the connector's own copies.
type pending struct {
	key      groupKey
	resource pcommon.Resource
	gens     []*generation
	ids      map[string]struct{}
	bytes    int
	first    time.Time // when its first record arrived: max_wait counts from here
	seq      uint64
}

// buffer holds the pending groups. Its methods are called with the connector's lock held.
type buffer struct {
	groups map[groupKey]*pending
	bytes  int
	seq    uint64
}

func newBuffer() *buffer {
	return &buffer{groups: make(map[groupKey]*pending)}
}

// take removes a group and returns it (nil when none waits).
func (b *buffer) take(key groupKey) *pending {
	p, ok := b.groups[key]
	if !ok {
		return nil
	}
	delete(b.groups, key)
	b.bytes -= p.bytes
	return p
}

// add copies generations of a group (views of the request being consumed) into the buffer.
// A sample id already waiting is a duplicate and is not added; it returns how many were.
func (b *buffer) add(key groupKey, res pcommon.Resource, gens []*generation, now time.Time) (duplicates int64) {
	p, ok := b.groups[key]
	if !ok {
		b.seq++
		p = &pending{key: key, resource: pcommon.NewResource(), ids: make(map[string]struct{}), first: now, seq: b.seq}
		res.CopyTo(p.resource)
		b.groups[key] = p
	}
	for _, g := range gens {
		if _, dup := p.ids[g.sampleID]; dup {
			duplicates++
			continue
		}
		p.ids[g.sampleID] = struct{}{}
		owned := *g
		owned.record = plog.NewLogRecord()
		g.record.CopyTo(owned.record)
		owned.size = recordSize(owned.record)
		p.gens = append(p.gens, &owned)
		p.bytes += owned.size
		b.bytes += owned.size
	}
	return duplicates
}

// evict removes the groups that the bounds no longer allow, oldest first: those waiting
// max_wait or longer, then the oldest while more than maxGroups wait or their records take more
// than maxBytes. Each comes back with the reason it is emitted as a partial trace.
func (b *buffer) evict(now time.Time, cfg *Config) []*closedGroup {
	if len(b.groups) == 0 {
		return nil
	}
	byAge := make([]*pending, 0, len(b.groups))
	for _, p := range b.groups {
		byAge = append(byAge, p)
	}
	sort.Slice(byAge, func(i, j int) bool { return byAge[i].seq < byAge[j].seq })
	var out []*closedGroup
	for _, p := range byAge {
		reason := ""
		switch {
		case now.Sub(p.first) >= cfg.MaxWait:
			reason = partialMaxWait
		case len(b.groups) > cfg.MaxGroups:
			reason = partialMaxGroups
		case b.bytes > cfg.MaxBufferBytes:
			reason = partialMaxBytes
		default:
			continue
		}
		out = append(out, b.take(p.key).partial(reason))
	}
	return out
}

// drain removes every group, oldest first, as partial groups closed for reason.
func (b *buffer) drain(reason string) []*closedGroup {
	byAge := make([]*pending, 0, len(b.groups))
	for _, p := range b.groups {
		byAge = append(byAge, p)
	}
	sort.Slice(byAge, func(i, j int) bool { return byAge[i].seq < byAge[j].seq })
	out := make([]*closedGroup, 0, len(byAge))
	for _, p := range byAge {
		out = append(out, b.take(p.key).partial(reason))
	}
	return out
}

func (p *pending) partial(reason string) *closedGroup {
	return &closedGroup{key: p.key, resource: p.resource, summary: plog.NewLogRecord(), partial: reason, gens: p.gens}
}
