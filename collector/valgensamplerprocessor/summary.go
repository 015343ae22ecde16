// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor // import "github.com/otel-valgen/otel-valgen/collector/valgensamplerprocessor"

import (
	"context"
	"sort"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.uber.org/zap"

	"github.com/otel-valgen/otel-valgen/collector/valgensamplerprocessor/internal/metadata"
)

// appendClosed appends the group's kept records ranked from 1 (dataSourceViews.ranked: the
// keyed picks in ascending sort-key order, by data source when the group is split, then the
// ranked slots' records not among them), each with its own resource and scope (and with ranked
// slots its valgen.slots), then the group's step summary record (concurrent: the other attempts
// of the step that ran at the same time with no common source, see concurrent.go). It returns
// how many generation records it appended.
func appendClosed(out plog.Logs, g *group, reason string, concurrent int64, sampler string, now time.Time) int {
	seen, dropped := g.balance() // before the kept records move out of the group
	keptBy := keptBySource(g)
	keptByDataSource := countKept(g, func(kept *keptRecord) string { return dataSourceOf(kept.record.Attributes()) })
	var entries []rankedRecord
	withSlots := false
	if g.kept != nil {
		entries = g.kept.ranked()
		withSlots = g.kept.n > 0 || g.kept.m > 0
	}
	var sl plog.ScopeLogs
	var prev *keptRecord
	for i := range entries {
		kept := &entries[i].item
		if prev == nil || !sameOrigin(prev, kept) {
			rl := out.ResourceLogs().AppendEmpty()
			kept.resource.CopyTo(rl.Resource())
			rl.SetSchemaUrl(kept.resourceSchema)
			sl = rl.ScopeLogs().AppendEmpty()
			kept.scope.CopyTo(sl.Scope())
			sl.SetSchemaUrl(kept.scopeSchema)
		}
		prev = kept
		lr := sl.LogRecords().AppendEmpty()
		kept.record.MoveTo(lr)
		lr.Attributes().PutInt(attrRank, int64(i+1))
		if withSlots {
			slots := lr.Attributes().PutEmptySlice(attrSlots)
			for _, name := range entries[i].slots.names() {
				slots.AppendEmpty().SetStr(name)
			}
		} else {
			lr.Attributes().Remove(attrSlots) // a record another sampler marked, in a group without slots
		}
	}
	lr := appendSummary(out, g, len(entries), reason, now)
	putBalance(lr.Attributes(), seen, dropped)
	lr.Attributes().PutInt(attrAttemptsConcurrent, concurrent)
	lr.Attributes().PutStr(attrSampler, sampler)
	putSourceFigures(lr.Attributes(), g, keptBy)
	putDataSources(lr.Attributes(), g, keptByDataSource)
	return len(entries)
}

func sameOrigin(a, b *keptRecord) bool {
	return a.resourceSchema == b.resourceSchema && a.scopeSchema == b.scopeSchema &&
		a.resource.Attributes().Equal(b.resource.Attributes()) &&
		a.scope.Name() == b.scope.Name() && a.scope.Version() == b.scope.Version() &&
		a.scope.Attributes().Equal(b.scope.Attributes())
}

// appendSummary appends the valgen.step.summary record of a closed group, without what needs
// its kept records (its balance, putBalance; source and data source figures) and its
// split-launch mark.
func appendSummary(out plog.Logs, g *group, kept int, reason string, now time.Time) plog.LogRecord {
	rl := out.ResourceLogs().AppendEmpty()
	g.resource.CopyTo(rl.Resource())
	sl := rl.ScopeLogs().AppendEmpty()
	sl.Scope().SetName(metadata.ScopeName)
	lr := sl.LogRecords().AppendEmpty()
	ts := pcommon.NewTimestampFromTime(now)
	lr.SetTimestamp(ts)
	lr.SetObservedTimestamp(ts)
	lr.SetEventName(eventSummary)
	lr.SetSeverityNumber(plog.SeverityNumberInfo)
	lr.SetSeverityText("INFO")
	lr.SetTraceID(g.traceID)

	attrs := lr.Attributes()
	g.runID.CopyTo(attrs.PutEmpty(attrRunID))
	g.step.CopyTo(attrs.PutEmpty(attrStep))
	attrs.PutStr(attrAttempt, g.attempt)
	attrs.PutStr(attrKind, g.kind)
	attrs.PutInt(attrAttemptStart, g.attemptStart)
	attrs.PutInt(attrKept, int64(kept))
	if g.k >= 0 { // the k the group kept to (prompts for rollouts): what a merge of partials cuts to
		attrs.PutInt(attrSampleCount, int64(g.k))
	}
	if g.kept != nil && g.kept.n > 0 { // the n of lowest- and highest-scored it kept beside k
		attrs.PutInt(attrExtremes, int64(g.kept.n))
	}
	if g.kept != nil && g.kept.m > 0 { // the n of most mismatched responses it kept beside k
		attrs.PutInt(attrMismatched, int64(g.kept.m))
	}
	if g.kind == kindRollout { // valgen.seen and valgen.kept count responses
		prompts := 0
		if g.kept != nil {
			prompts = g.kept.promptCount()
		}
		attrs.PutInt(attrPromptsKept, int64(prompts))
		putRate(attrs, g, prompts) // the watch-list's rate and counts, when its records carry one
		seen, estimated, sketch := g.promptsSeen()
		attrs.PutInt(attrPromptsSeen, seen)
		attrs.PutBool(attrPromptsSeenEstimated, estimated)
		if estimated {
			attrs.PutDouble(attrPromptsSeenError, promptsSeenError)
		}
		if sketch != nil { // what a merge of partials unites
			putPromptKeys(attrs, attrPromptKeys, sketch)
		}
		attrs.PutInt(attrPromptsIncomplete, g.promptsIncomplete(prompts))
	}
	attrs.PutInt(attrSources, int64(len(g.sources)))
	attrs.PutInt(attrSourcesAnnounce, g.announcedSources())
	attrs.PutInt(attrSourcesEnded, g.endedSources())
	missingSources := attrs.PutEmptySlice(attrSourcesMissing)
	for _, id := range g.missingSources() {
		missingSources.AppendEmpty().SetStr(id)
	}
	unhookedSources := attrs.PutEmptySlice(attrSourcesUnhooked)
	for _, id := range g.unhookedSources() {
		unhookedSources.AppendEmpty().SetStr(id)
	}
	if g.sourcesExpected > 0 {
		attrs.PutInt(attrSourcesExpected, g.sourcesExpected)
	}
	attrs.PutInt(attrLate, g.late) // 0: late records come after the close, see appendLateReports
	attrs.PutStr(attrClosedReason, reason)
	total := g.scoreTotals()
	total.put(attrs, attrScoreCount, attrScoreSum, attrScoreMean)
	putTrajectories(attrs, g)
	putMismatch(attrs, g)
	return lr
}

// putBalance writes the summary's seen, its dropped generations (the total and one attribute
// per reason) and valgen.missing, which is dropped.undelivered under its older name.
func putBalance(attrs pcommon.Map, seen int64, d dropCounts) {
	attrs.PutInt(attrSeen, seen)
	attrs.PutInt(attrDropped, d.total())
	attrs.PutInt(attrDroppedSampled, d.sampled)
	attrs.PutInt(attrDroppedSource, d.source)
	attrs.PutInt(attrDroppedInvalid, d.invalid)
	attrs.PutInt(attrDroppedUndelivered, d.undelivered)
	attrs.PutInt(attrDroppedNotEnded, d.notEnded)
	attrs.PutInt(attrMissing, d.undelivered)
}

// appendLateReports appends one valgen.step.late record per closed group that received late
// records since the last call, in key order, with the group's cumulative late count.
func appendLateReports(out plog.Logs, reports map[string]*lateReport, now time.Time) {
	keys := make([]string, 0, len(reports))
	for key := range reports {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	ts := pcommon.NewTimestampFromTime(now)
	for _, key := range keys {
		r := reports[key]
		rl := out.ResourceLogs().AppendEmpty()
		r.resource.CopyTo(rl.Resource())
		sl := rl.ScopeLogs().AppendEmpty()
		sl.Scope().SetName(metadata.ScopeName)
		lr := sl.LogRecords().AppendEmpty()
		lr.SetTimestamp(ts)
		lr.SetObservedTimestamp(ts)
		lr.SetEventName(eventLate)
		lr.SetSeverityNumber(plog.SeverityNumberWarn)
		lr.SetSeverityText("WARN")
		r.attrs.CopyTo(lr.Attributes())
		lr.Attributes().PutInt(attrLate, r.late)
	}
}

// outbox holds what one call sends downstream: each closed group in its own plog.Logs, so that
// every closed step (its kept records and its summary) reaches the next consumer as one
// request, which the exporter service writes without buffering (README: "One closed step per
// request").
type outbox struct {
	logs []plog.Logs
}

// add starts the next request.
func (o *outbox) add() plog.Logs {
	ld := plog.NewLogs()
	o.logs = append(o.logs, ld)
	return ld
}

// emit sends the closed groups downstream, one ConsumeLogs call each; it is called without
// holding p.mu.
func (p *samplerProcessor) emit(ctx context.Context, out *outbox) {
	for _, ld := range out.logs {
		if ld.LogRecordCount() == 0 {
			continue
		}
		if err := p.next.ConsumeLogs(ctx, ld); err != nil {
			p.logger.Error("failed to send a closed valgen group downstream",
				zap.Int("records", ld.LogRecordCount()), zap.Error(err))
		}
	}
}
