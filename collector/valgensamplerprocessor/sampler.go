// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor // import "github.com/otel-valgen/otel-valgen/collector/valgensamplerprocessor"

import (
	"context"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.uber.org/zap"
)

// batch is the state of one ConsumeLogs call while it holds the processor's lock.
type batch struct {
	now     time.Time
	out     plog.Logs
	st      stats
	touched []*group
}

// ConsumeLogs takes the generation, start, progress and end records out of ld into their groups, forwards
// everything else at once, then sends the groups that this batch completed and that close at once (completeNow).
func (p *samplerProcessor) ConsumeLogs(ctx context.Context, ld plog.Logs) error {
	b := &batch{out: plog.NewLogs()}
	p.mu.Lock()
	b.now = p.now()
	ld.ResourceLogs().RemoveIf(func(rl plog.ResourceLogs) bool {
		emptied := false
		rl.ScopeLogs().RemoveIf(func(sl plog.ScopeLogs) bool {
			records := sl.LogRecords()
			before := records.Len()
			at := origin{rl: rl, sl: sl}
			records.RemoveIf(func(lr plog.LogRecord) bool { return p.take(lr, at, b) })
			removed := records.Len() < before && records.Len() == 0
			emptied = emptied || removed
			return removed
		})
		return emptied && rl.ScopeLogs().Len() == 0
	})
	for _, g := range b.touched {
		if p.groups[g.key] == g && g.completeNow() {
			p.closeGroup(g, closedComplete, b.now, b.out, &b.st)
		}
	}
	// With storage, what this call took is stored before it returns (and before the closed
	// groups go downstream), so that records the receiver acknowledges survive a crash. A failed
	// write is logged and counted, and the next write rewrites the whole state.
	_ = p.persist(ctx, p.takeOps(b.touched)) // releases p.mu

	b.st.record(ctx, p.telemetry)
	var err error
	if ld.LogRecordCount() > 0 {
		err = p.next.ConsumeLogs(ctx, ld)
	}
	p.emit(ctx, b.out)
	return err
}

// take handles one record and reports whether it leaves the batch. Callers hold p.mu.
func (p *samplerProcessor) take(lr plog.LogRecord, at origin, b *batch) bool {
	name := eventName(lr)
	if !isSampled(name) {
		return false
	}
	attrs := lr.Attributes()
	var gen generation
	var info endInfo
	var reason string
	switch name {
	case eventGeneration:
		b.st.received++
		gen, reason = parseGeneration(attrs, p.cfg)
	case eventStart:
		info, reason = parseStart(attrs)
	case eventProgress:
		info, reason = parseProgress(attrs)
	default:
		info, reason = parseEnd(attrs)
	}
	if reason != "" {
		b.st.drop(reason)
		return true
	}

	key := groupKey(attrs, p.cfg.GroupBy)
	g, open := p.groups[key]
	if open {
		// A group whose time is up closes before it takes more, whether or not a tick has
		// run yet: the record is then late, as it would be after the tick.
		if why := g.closeReason(b.now, p.cfg); why != "" {
			p.closeGroup(g, why, b.now, b.out, &b.st)
			open = false
		}
	}
	if !open {
		if p.closed.markLate(key, lr, at.rl.Resource(), p.cfg.GroupBy) {
			b.st.late++
			if name == eventGeneration && p.cfg.LateRecords == LateRecordsForward {
				attrs.PutBool(attrLate, true)
				return false
			}
			b.st.drop(reasonLate)
			return true
		}
		g = p.open(key, lr, at.rl.Resource(), b)
	}
	src := sourceOf(attrs, at.rl.Resource())
	switch name {
	case eventGeneration:
		rekeyed := g.rekeyed
		g.addGeneration(gen, lr, at, src, b.now)
		if rekeyed == 0 && g.rekeyed > 0 {
			p.logger.Warn("a valgen step mixes sampling key versions; keys of the other version are recomputed",
				zap.String("group", g.key), zap.Int64("key_version", g.keyVersion))
		}
	case eventStart:
		g.addStart(info, lr, src, b.now)
	case eventProgress:
		g.addProgress(info, lr, src, b.now)
	default:
		g.addEnd(info, lr, src, b.now)
	}
	if n := len(b.touched); n == 0 || b.touched[n-1] != g {
		b.touched = append(b.touched, g)
	}
	return true
}

// open starts a group, first closing the oldest one when max_groups are open.
func (p *samplerProcessor) open(key string, lr plog.LogRecord, res pcommon.Resource, b *batch) *group {
	if len(p.groups) >= p.cfg.MaxGroups {
		if oldest := p.oldestGroup(); oldest != nil {
			p.closeGroup(oldest, closedMaxGroups, b.now, b.out, &b.st)
		}
	}
	p.seq++
	g := newGroup(key, p.seq, lr, res, b.now)
	p.groups[key] = g
	if p.store != nil {
		p.store.indexDirty = true
	}
	b.st.openDelta++
	return g
}

func (p *samplerProcessor) oldestGroup() *group {
	var oldest *group
	for _, g := range p.groups {
		if oldest == nil || g.seq < oldest.seq {
			oldest = g
		}
	}
	return oldest
}
