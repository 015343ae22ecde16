// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor // import "github.com/otel-valgen/otel-valgen/collector/valgensamplerprocessor"

import (
	"sort"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.uber.org/zap"
)

// unhookedFix is what the warning about sources that ran verl's own validation table tells the
// user to do (otel_valgen.unhooked.UNHOOKED_FIX).
const unhookedFix = "the process logged an otel_valgen WARNING that says why and how to fix it (e.g. a trainer " +
	"subclass that overrides _maybe_log_val_generations: put ValGenerationsMixin first in its bases); " +
	"see docs/troubleshooting.md"

// unknownReason stands for an unhooked record that does not say why.
const unknownReason = "unknown"

// unhookedOf reads a start or end record's mark of a source whose validation ran in verl's own
// table (valgen.integration = "unhooked"): its valgen.unhooked_reason, else "unknown"; "" when
// the record has no such mark. The marks are informational: a mistyped one is no mark.
func unhookedOf(attrs pcommon.Map) string {
	v, ok := attrs.Get(attrIntegration)
	if !ok || v.Type() != pcommon.ValueTypeStr || v.Str() != integrationUnhooked {
		return ""
	}
	if why, ok := attrs.Get(attrUnhookedReason); ok && why.Type() == pcommon.ValueTypeStr && why.Str() != "" {
		return why.Str()
	}
	return unknownReason
}

// markUnhooked notes why the source ran verl's own table, when a record says so.
func (s *sourceState) markUnhooked(why string) {
	if why != "" {
		s.unhooked = why
	}
}

// unhookedSources lists the sources that ran verl's own table, as sorted "source@instance".
func (g *group) unhookedSources() []string {
	return g.describeUnhooked(func(id sourceID, _ string) string { return id.String() })
}

// describeUnhooked describes each source that ran verl's own table with describe(id, why), sorted.
func (g *group) describeUnhooked(describe func(id sourceID, why string) string) []string {
	var out []string
	for id, state := range g.sources {
		if state.unhooked != "" {
			out = append(out, describe(id, state.unhooked))
		}
	}
	sort.Strings(out)
	return out
}

// warnUnhooked logs one WARN for a closing group some of whose sources ran verl's own table:
// their generations are not in the step. Callers hold p.mu.
func (p *samplerProcessor) warnUnhooked(g *group) {
	reasons := g.describeUnhooked(func(id sourceID, why string) string { return id.String() + ": " + why })
	if len(reasons) == 0 {
		return
	}
	p.logger.Warn("a valgen step has sources whose validation ran in verl's own table instead of otel-valgen, "+
		"so their generations are not in the step; "+unhookedFix,
		zap.String("run_id", g.runID.AsString()), zap.String("step", g.step.AsString()),
		zap.String("attempt", g.attempt), zap.Strings("sources_unhooked", reasons))
}
