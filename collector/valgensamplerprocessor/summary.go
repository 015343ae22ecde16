// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor // import "github.com/otel-valgen/otel-valgen/collector/valgensamplerprocessor"

import (
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/otel-valgen/otel-valgen/collector/valgensamplerprocessor/internal/metadata"
)

// Reasons for closing a group (valgen.closed_reason and the groups-closed metric).
const (
	closedComplete  = "complete"
	closedWait      = "wait"
	closedMaxGroups = "max_groups"
	closedShutdown  = "shutdown"
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
	attrs.PutInt(attrSeen, seen)
	attrs.PutInt(attrKept, int64(kept))
	attrs.PutInt(attrSources, int64(len(g.sources)))
	attrs.PutInt(attrSourcesEnded, g.endedSources())
	if g.sourcesExpected > 0 {
		attrs.PutInt(attrSourcesExpected, g.sourcesExpected)
	}
	attrs.PutInt(attrLate, g.late)
	attrs.PutInt(attrMissing, missing)
	attrs.PutStr(attrClosedReason, reason)
}
