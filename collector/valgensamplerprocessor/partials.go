// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor // import "github.com/otel-valgen/otel-valgen/collector/valgensamplerprocessor"

import (
	"sort"

	"go.opentelemetry.io/collector/pdata/pcommon"
)

// When an agent re-routes a step mid-way (a sampler lost, added or replaced), two samplers
// each close a partial group of it. Each summary then names its sampler (valgen.sampler) and
// carries what the sampler knew of each source (valgen.source_figures). The bottom-k is
// mergeable and each source's figures add up (arrivals) or take the largest (end and progress
// counts, which are cumulative), so the exporter service and otel-valgen show/push merge the
// partials into the step one sampler would have closed (otel_valgen/partials.py).

// Keys of one entry of valgen.source_figures.
const (
	figureSource       = "source" // "source@instance", as valgen.sources_missing lists it
	figureAnnounced    = "announced"
	figureEnded        = "ended"
	figureSeen         = "seen" // the end record's counts (0 when the source did not end here)
	figureEmitted      = "emitted"
	figureDropped      = "dropped"
	figureProgressSeen = "progress_seen"
	figureReceived     = "received" // valid generation records that arrived here
	figureInvalid      = "invalid"
	figureKept         = "kept"
	figureScoreCount   = "score.count" // only when the end record reported score statistics
	figureScoreSum     = "score.sum"
	figurePromptsSeen  = "prompts_seen" // rollout sources that ended
	figureUnhooked     = "unhooked"     // why verl's own table ran in the source, when it did
	figureDataSources  = "data_sources" // the end records' valgen.data_sources (datasource.go), when sent
	figureTrajectories = "trajectories" // the end records' valgen.trajectories (trajectories.go), when sent
	figureMismatch     = "mismatch"     // the end records' valgen.mismatch (mismatch.go), when sent
)

// putSourceFigures writes valgen.source_figures: one map per source of the group, in source order.
func putSourceFigures(attrs pcommon.Map, g *group, keptBy map[sourceID]int64) {
	ids := make([]sourceID, 0, len(g.sources))
	for id := range g.sources {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i].String() < ids[j].String() })
	figures := attrs.PutEmptySlice(attrSourceFigures)
	figures.EnsureCapacity(len(ids))
	for _, id := range ids {
		s := g.sources[id]
		m := figures.AppendEmpty().SetEmptyMap()
		m.PutStr(figureSource, id.String())
		m.PutBool(figureAnnounced, s.announced)
		m.PutBool(figureEnded, s.ended)
		m.PutInt(figureSeen, s.end.seen)
		m.PutInt(figureEmitted, s.end.emitted)
		m.PutInt(figureDropped, s.end.dropped)
		m.PutInt(figureProgressSeen, s.progressSeen)
		m.PutInt(figureReceived, s.received)
		m.PutInt(figureInvalid, s.invalid)
		m.PutInt(figureKept, keptBy[id])
		if s.end.scores.reported {
			m.PutInt(figureScoreCount, s.end.scores.count)
			m.PutDouble(figureScoreSum, s.end.scores.sum)
		}
		if g.kind == kindRollout && s.ended {
			m.PutInt(figurePromptsSeen, s.end.promptsSeen)
		}
		if s.unhooked != "" {
			m.PutStr(figureUnhooked, s.unhooked)
		}
		if s.end.trajectories != nil {
			_ = m.PutEmptyMap(figureTrajectories).FromRaw(s.end.trajectories) // raw figures always convert
		}
		if s.end.mismatch != nil {
			_ = m.PutEmptyMap(figureMismatch).FromRaw(s.end.mismatch) // raw figures always convert
		}
		if s.end.dataSources != nil {
			putDataSourceFigures(m, figureDataSources, s.end.dataSources)
		}
	}
}
