// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor // import "github.com/otel-valgen/otel-valgen/collector/valgensamplerprocessor"

import (
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
)

// keptRecord is a copy of a kept generation with the resource and scope it came with.
type keptRecord struct {
	record         plog.LogRecord
	resource       pcommon.Resource
	resourceSchema string
	scope          pcommon.InstrumentationScope
	scopeSchema    string
}

// origin is where a record sits in the incoming batch.
type origin struct {
	rl plog.ResourceLogs
	sl plog.ScopeLogs
}

func (o origin) keep(lr plog.LogRecord) keptRecord {
	kept := keptRecord{
		record:         plog.NewLogRecord(),
		resource:       pcommon.NewResource(),
		resourceSchema: o.rl.SchemaUrl(),
		scope:          pcommon.NewInstrumentationScope(),
		scopeSchema:    o.sl.SchemaUrl(),
	}
	lr.CopyTo(kept.record)
	o.rl.Resource().CopyTo(kept.resource)
	o.sl.Scope().CopyTo(kept.scope)
	return kept
}

// sourceState is what a group knows of one source.
type sourceState struct {
	received     int64 // valid generation records that arrived
	invalid      int64 // generation records of the group dropped as invalid (no sample id, ...)
	announced    bool  // a start record arrived
	progressSeen int64 // the largest valgen.seen of its progress records
	ended        bool
	end          endInfo
	unhooked     string // why verl's own table ran in it, from its start or end records ("" = it did not)
}

// group is one open validation step: its bottom-k and the bookkeeping of its sources.
type group struct {
	key       string
	seq       uint64    // opening order, to close the oldest first
	firstSeen time.Time // arrival of the first record, for max_step_duration
	lastSeen  time.Time // arrival of the last record (any kind), for decision_wait

	attempt      string // valgen.attempt ("" for legacy records)
	kind         string // valgen.kind: kindValidation or kindRollout
	attemptStart int64  // smallest record time seen (unix nanos), see recordTime
	attemptLast  int64  // largest record time seen (unix nanos): with attemptStart, its span

	k int // the smallest k any record asked for (prompts of a rollout); -1 before the first generation
	// kept is nil before the first generation, which decides whether it is split (datasource.go).
	kept *dataSourceViews
	// rate is the smallest valgen.sample_rate of its records, 0 for none (groupview.go).
	rate float64
	// keyVersion is the key version of the group's first generation (0 before it): the keys
	// of generations of another version are recomputed in it. rekeyed counts those.
	keyVersion int64
	rekeyed    int64

	resource pcommon.Resource // of the group's first record
	traceID  pcommon.TraceID  // the first non-empty trace id
	runID    pcommon.Value
	step     pcommon.Value

	sources         map[sourceID]*sourceState
	sourcesExpected int64
	late            int64
}

func newGroup(key string, seq uint64, lr plog.LogRecord, res pcommon.Resource, now time.Time) *group {
	g := &group{
		key:          key,
		seq:          seq,
		firstSeen:    now,
		attempt:      attemptOf(lr.Attributes()),
		kind:         kindOf(lr.Attributes()),
		attemptStart: recordTime(lr, now),
		attemptLast:  recordTime(lr, now),
		k:            -1,
		resource:     pcommon.NewResource(),
		runID:        pcommon.NewValueEmpty(),
		step:         pcommon.NewValueEmpty(),
		sources:      make(map[sourceID]*sourceState),
	}
	res.CopyTo(g.resource)
	if v, ok := lr.Attributes().Get(attrRunID); ok {
		v.CopyTo(g.runID)
	}
	if v, ok := lr.Attributes().Get(attrStep); ok {
		v.CopyTo(g.step)
	}
	return g
}

func (g *group) touch(lr plog.LogRecord, src sourceID, now time.Time) *sourceState {
	g.lastSeen = now
	at := recordTime(lr, now)
	g.attemptStart = min(g.attemptStart, at)
	g.attemptLast = max(g.attemptLast, at)
	if g.traceID.IsEmpty() {
		g.traceID = lr.TraceID()
	}
	state, ok := g.sources[src]
	if !ok {
		state = &sourceState{}
		g.sources[src] = state
	}
	return state
}

// addGeneration offers one generation to the group's bottom-k (and ranked slots), in the group's
// key version.
func (g *group) addGeneration(gen generation, lr plog.LogRecord, at origin, src sourceID, now time.Time) {
	g.touch(lr, src, now).received++
	switch {
	case g.keyVersion == 0:
		g.keyVersion = gen.keyVersion
	case gen.keyVersion != g.keyVersion:
		gen = gen.inKeyVersion(g.keyVersion)
		g.rekeyed++
	}
	if g.kept == nil {
		g.k = gen.k
		g.kept = newDataSourceViews(gen.k, gen.byDataSource).withExtremes(gen.extremes).withMismatched(gen.mismatched)
	}
	g.kept.ask(gen.byDataSource)
	g.kept.askExtremes(gen.extremes)     // always 0 for rollouts (parseGeneration)
	g.kept.askMismatched(gen.mismatched) // always 0 for validation
	if stepK(g.k, gen.k) < g.k {
		g.k = stepK(g.k, gen.k)
		g.kept.shrink(g.k)
	}
	g.applyRate(gen.rate)
	g.kept.offer(gen, func() keptRecord { return at.keep(lr) })
}

// addInvalid counts a generation of the group that the sampler dropped as invalid (it has
// the group's run, step and attempt, but not a usable sample id, key, seed, count or key
// version): it is activity of its source and part of the step's balance (dropped.invalid).
func (g *group) addInvalid(lr plog.LogRecord, src sourceID, now time.Time) {
	g.touch(lr, src, now).invalid++
}

// addEnd records a source's end of step; a repeated end record keeps the largest counts (and
// the score statistics of the one with the largest score count, see scoreStats.larger, and the
// data source figures of the one with the largest seen, see addDataSources).
func (g *group) addEnd(end endInfo, lr plog.LogRecord, src sourceID, now time.Time) {
	state := g.touch(lr, src, now)
	state.ended = true
	state.addDataSources(end)
	state.addTrajectories(end)
	state.addMismatch(end)
	state.end.seen = max(state.end.seen, end.seen)
	state.end.emitted = max(state.end.emitted, end.emitted)
	state.end.dropped = max(state.end.dropped, end.dropped)
	state.end.scores = state.end.scores.larger(end.scores)
	state.end.promptsSeen = max(state.end.promptsSeen, end.promptsSeen)
	state.end.promptsUnderRate = max(state.end.promptsUnderRate, end.promptsUnderRate)
	g.applyRate(end.rate)
	if end.promptKeys != nil || state.end.promptKeys != nil {
		state.end.promptKeys = mergeKeys(state.end.promptKeys, end.promptKeys, promptSketchSize)
	}
	state.markUnhooked(end.unhooked)
	g.sourcesExpected = max(g.sourcesExpected, end.sourcesExpected)
}

// endedSources counts the sources that sent their end record; sources minus this is how
// many sent generations but never ended (e.g. a worker killed mid-step).
func (g *group) endedSources() int64 {
	return g.countSources(func(state *sourceState) bool { return state.ended })
}

// promptsSeen is how many distinct prompts its ended sources saw, whether that is an estimate,
// and the merged sketch (nil when no source sent one). Sources that sent sketches are merged
// (distinct.go), so a prompt logged by several sources counts once; a source of a library
// before the sketch adds its valgen.prompts_seen, exact when each prompt's responses came from
// one source, else an upper bound.
func (g *group) promptsSeen() (int64, bool, []int64) {
	var sketch []int64
	var unsketched int64
	sketched := false
	for _, state := range g.sources {
		switch {
		case !state.ended:
		case state.end.promptKeys != nil:
			sketched = true
			sketch = mergeKeys(sketch, state.end.promptKeys, promptSketchSize)
		default:
			unsketched += state.end.promptsSeen
		}
	}
	if !sketched {
		return unsketched, false, nil
	}
	n, estimated := distinctCount(sketch, promptSketchSize)
	return n + unsketched, estimated, sketch
}

// promptsIncomplete is how many kept prompts may lack responses: all of them while a source of
// the group did not end (it may hold responses of any prompt), or fewer sources ended than
// announced as expected; else 0.
func (g *group) promptsIncomplete(kept int) int64 {
	ended := g.endedSources()
	if ended < int64(len(g.sources)) || ended < g.sourcesExpected {
		return int64(kept)
	}
	return 0
}

// stepK is a group's k once a record asks for asked: the smallest k asked for wins. Shrinking
// a bottom-k is exact and growing one is not, so the kept set does not depend on the order in
// which records with different counts arrive. otel_valgen.sampling.step_k is the same rule, and
// testdata/sampling/k_rule.json the cases both suites check.
func stepK(current, asked int) int {
	return min(current, asked)
}
