// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor // import "github.com/otel-valgen/otel-valgen/collector/valgensamplerprocessor"

import (
	"sort"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/otel-valgen/otel-valgen/collector/valgensamplerprocessor/internal/metadata"
)

// appendClosed appends the group's kept records in ascending sort-key order, each ranked
// from 1 and with its own resource and scope, then the group's step summary record.
// It returns how many generation records it appended.
func appendClosed(out plog.Logs, g *group, reason string, now time.Time) int {
	var entries []entry[keptRecord]
	if g.kept != nil {
		entries = g.kept.sorted()
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
	}
	appendSummary(out, g, len(entries), reason, now)
	return len(entries)
}

func sameOrigin(a, b *keptRecord) bool {
	return a.resourceSchema == b.resourceSchema && a.scopeSchema == b.scopeSchema &&
		a.resource.Attributes().Equal(b.resource.Attributes()) &&
		a.scope.Name() == b.scope.Name() && a.scope.Version() == b.scope.Version() &&
		a.scope.Attributes().Equal(b.scope.Attributes())
}

// appendSummary appends the valgen.step.summary record of a closed group.
func appendSummary(out plog.Logs, g *group, kept int, reason string, now time.Time) {
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

	seen, missing := g.totals()
	attrs := lr.Attributes()
	g.runID.CopyTo(attrs.PutEmpty(attrRunID))
	g.step.CopyTo(attrs.PutEmpty(attrStep))
	attrs.PutStr(attrAttempt, g.attempt)
	attrs.PutInt(attrAttemptStart, g.attemptStart)
	attrs.PutInt(attrSeen, seen)
	attrs.PutInt(attrKept, int64(kept))
	attrs.PutInt(attrSources, int64(len(g.sources)))
	attrs.PutInt(attrSourcesAnnounce, g.announcedSources())
	attrs.PutInt(attrSourcesEnded, g.endedSources())
	missingSources := attrs.PutEmptySlice(attrSourcesMissing)
	for _, id := range g.missingSources() {
		missingSources.AppendEmpty().SetStr(id)
	}
	if g.sourcesExpected > 0 {
		attrs.PutInt(attrSourcesExpected, g.sourcesExpected)
	}
	attrs.PutInt(attrLate, g.late) // 0: late records come after the close, see appendLateReports
	attrs.PutInt(attrMissing, missing)
	attrs.PutStr(attrClosedReason, reason)
	if count, sum, reported, fits := g.scoreTotals(); reported {
		attrs.PutInt(attrScoreCount, count)
		if fits {
			attrs.PutDouble(attrScoreSum, sum)
		}
		if fits && count > 0 {
			attrs.PutDouble(attrScoreMean, sum/float64(count))
		}
	}
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
