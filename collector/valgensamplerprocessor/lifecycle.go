// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor // import "github.com/otel-valgen/otel-valgen/collector/valgensamplerprocessor"

import (
	"context"
	"sort"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
)

// Reasons for closing a group (valgen.closed_reason and the groups-closed metric).
const (
	closedComplete    = "complete"
	closedWait        = "wait"
	closedMaxDuration = "max_duration"
	closedMaxGroups   = "max_groups"
	closedShutdown    = "shutdown"
)

// parseStart validates a valgen.validation.start record: the common attributes and an
// optional valgen.sources_expected (valgen.sample_count is informational here: k comes from
// the generations).
func parseStart(attrs pcommon.Map) (endInfo, string) {
	if reason := checkCommon(attrs); reason != "" {
		return endInfo{}, reason
	}
	expected, reason := optionalCount(attrs, attrSourcesExpected)
	return endInfo{sourcesExpected: expected, unhooked: unhookedOf(attrs)}, reason
}

// parseProgress validates a valgen.validation.progress record and its optional valgen.seen.
func parseProgress(attrs pcommon.Map) (endInfo, string) {
	if reason := checkCommon(attrs); reason != "" {
		return endInfo{}, reason
	}
	seen, reason := optionalCount(attrs, attrSeen)
	return endInfo{seen: seen}, reason
}

// optionalCount reads an optional int attribute that must not be negative (0 when absent).
func optionalCount(attrs pcommon.Map, key string) (int64, string) {
	n, reason := intAttr(attrs, key, false)
	if reason == "" && n < 0 {
		reason = reasonInvalidAttribute
	}
	return n, reason
}

// recordTime is the record's time for valgen.attempt_start: its timestamp, else its observed
// timestamp, else its arrival.
func recordTime(lr plog.LogRecord, now time.Time) int64 {
	if ts := lr.Timestamp(); ts != 0 {
		return int64(ts) //nolint:gosec // timestamps after 1970 and before 2262
	}
	if ts := lr.ObservedTimestamp(); ts != 0 {
		return int64(ts) //nolint:gosec // as above
	}
	return now.UnixNano()
}

// addStart records that a source opened its part of the step.
func (g *group) addStart(start endInfo, lr plog.LogRecord, src sourceID, now time.Time) {
	state := g.touch(lr, src, now)
	state.announced = true
	state.markUnhooked(start.unhooked)
	g.sourcesExpected = max(g.sourcesExpected, start.sourcesExpected)
}

// addProgress records that a source is still working; it only keeps the group open.
func (g *group) addProgress(progress endInfo, lr plog.LogRecord, src sourceID, now time.Time) {
	state := g.touch(lr, src, now)
	state.progressSeen = max(state.progressSeen, progress.seen)
}

// complete reports whether every known source has ended, all that each ended source emitted
// has arrived (more arrivals, retried deliveries, also count, and so do generations dropped
// as invalid: they arrived), and at least sources_expected sources have ended.
func (g *group) complete() bool {
	if len(g.sources) == 0 {
		return false
	}
	var ended int64
	for _, state := range g.sources {
		if !state.ended || state.arrived() < state.end.emitted {
			return false
		}
		ended++
	}
	return ended >= g.sourcesExpected
}

// expired returns why an open group that is not complete closes at now, or "" when it stays
// open: silence of decision_wait (unless fewer than the promised sources_expected have
// ended), then max_step_duration since its first record.
func (g *group) expired(now time.Time, cfg *Config) string {
	waiting := g.sourcesExpected > 0 && g.endedSources() < g.sourcesExpected
	switch {
	case !waiting && now.Sub(g.lastSeen) >= cfg.DecisionWait:
		return closedWait
	case now.Sub(g.firstSeen) >= cfg.MaxStepDuration:
		return closedMaxDuration
	}
	return ""
}

// completeNow reports whether the group closes as complete as soon as it is: only when
// sources_expected promised how many sources there are. Without that promise another source
// may still announce itself, so a complete group closes after decision_wait of silence.
func (g *group) completeNow() bool {
	return g.sourcesExpected > 0 && g.complete()
}

// closeReason is the reason the group closes at now (complete first), or "".
func (g *group) closeReason(now time.Time, cfg *Config) string {
	if g.complete() && (g.sourcesExpected > 0 || now.Sub(g.lastSeen) >= cfg.DecisionWait) {
		return closedComplete
	}
	return g.expired(now, cfg)
}

// announcedSources counts the sources that sent a start record.
func (g *group) announcedSources() int64 {
	return g.countSources(func(state *sourceState) bool { return state.announced })
}

// countSources counts the group's sources for which is(state) is true.
func (g *group) countSources(is func(*sourceState) bool) int64 {
	var n int64
	for _, state := range g.sources {
		if is(state) {
			n++
		}
	}
	return n
}

// missingSources lists the known sources that have not ended, as sorted "source@instance".
func (g *group) missingSources() []string {
	var out []string
	for id, state := range g.sources {
		if !state.ended {
			out = append(out, id.String())
		}
	}
	sort.Strings(out)
	return out
}

// closeExpired closes the groups whose time is up (see group.closeReason) and sends the late
// reports of the closed groups that received late records since the last tick.
func (p *samplerProcessor) closeExpired(ctx context.Context) {
	out := &outbox{}
	var st stats
	p.mu.Lock()
	now := p.now()
	for _, g := range p.groupsByAge() {
		if reason := g.closeReason(now, p.cfg); reason != "" {
			p.closeGroup(g, reason, now, out, &st, p.store)
		}
	}
	p.reportLate(out, now)
	wait := p.store.save(ctx, p, nil)
	p.mu.Unlock()
	_ = wait() // a failed write is logged and counted, and the next one rewrites the whole state
	st.record(ctx, p.telemetry)
	p.emit(ctx, out)
}

// reportLate appends the pending valgen.step.late records and queues the storage writes of
// the late counts they report. Callers hold p.mu.
func (p *samplerProcessor) reportLate(out *outbox, now time.Time) {
	reports := p.closed.takeReports()
	if len(reports) == 0 {
		return
	}
	appendLateReports(out.add(), reports, now)
	for key, r := range reports {
		if e, ok := p.closed.entries[key]; ok {
			p.store.lateCounted(e.slot, r.late)
		}
	}
}

// groupsByAge lists the open groups, oldest first. Callers hold p.mu.
func (p *samplerProcessor) groupsByAge() []*group {
	list := make([]*group, 0, len(p.groups))
	for _, g := range p.groups {
		list = append(list, g)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].seq < list[j].seq })
	return list
}

// closeGroup removes a group, counts the other attempts of its step that ran at the same
// time with no common source, remembers it as closed (with its footprint), notes it in store
// and appends its output. Callers hold p.mu.
func (p *samplerProcessor) closeGroup(g *group, reason string, now time.Time, out *outbox, st *stats, store stateStore) {
	delete(p.groups, g.key)
	p.warnUnhooked(g)
	fp := g.footprint()
	concurrent := p.concurrentAttempts(g, fp, st)
	store.closed(g.key, p.closed.add(g.key, fp))
	st.close(reason, appendClosed(out.add(), g, reason, concurrent, p.samplerID, now))
}
