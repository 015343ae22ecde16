// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor // import "github.com/otel-valgen/otel-valgen/collector/valgensamplerprocessor"

import (
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
)

// The parts of a stored group's header record (state_codec.go has the layout): its sources,
// its lifecycle times, its key version and its kept records.

// encodeSources writes the group's per-source figures into the header's attributes.
func encodeSources(attrs pcommon.Map, g *group) {
	sources := attrs.PutEmptySlice(stateAttrSources)
	sources.EnsureCapacity(len(g.sources))
	for id, state := range g.sources {
		m := sources.AppendEmpty().SetEmptyMap()
		m.PutStr(stateAttrSourceName, id.name)
		m.PutStr(stateAttrSourceInstance, id.instance)
		m.PutInt(stateAttrSourceReceived, state.received)
		m.PutBool(stateAttrSourceEnded, state.ended)
		m.PutInt(stateAttrSourceSeen, state.end.seen)
		m.PutInt(stateAttrSourceEmitted, state.end.emitted)
		m.PutInt(stateAttrSourceDropped, state.end.dropped)
		m.PutBool(stateAttrSourceAnnounced, state.announced)
		m.PutInt(stateAttrSourceProgress, state.progressSeen)
		if state.invalid > 0 {
			m.PutInt(stateAttrSourceInvalid, state.invalid)
		}
		if state.unhooked != "" {
			m.PutStr(stateAttrSourceUnhooked, state.unhooked)
		}
		if state.end.promptsSeen > 0 {
			m.PutInt(stateAttrSourcePromptsSeen, state.end.promptsSeen)
		}
		if state.end.promptKeys != nil {
			putPromptKeys(m, stateAttrSourcePromptKeys, state.end.promptKeys)
		}
		if state.end.promptsUnderRate > 0 {
			m.PutInt(stateAttrSourceUnderRate, state.end.promptsUnderRate)
		}
		if state.end.scores.reported {
			m.PutInt(stateAttrSourceScoreN, state.end.scores.count)
			m.PutDouble(stateAttrSourceScoreSum, state.end.scores.sum)
		}
		if state.end.dataSources != nil {
			putDataSourceFigures(m, stateAttrSourceDataSources, state.end.dataSources)
		}
		if state.end.trajectories != nil {
			_ = m.PutEmptyMap(stateAttrSourceTrajectories).FromRaw(state.end.trajectories) // raw figures always convert
		}
		if state.end.mismatch != nil {
			_ = m.PutEmptyMap(stateAttrSourceMismatch).FromRaw(state.end.mismatch) // raw figures always convert
		}
	}
}

func decodeSources(attrs pcommon.Map, g *group, version int64) error {
	v, ok := attrs.Get(stateAttrSources)
	if !ok || v.Type() != pcommon.ValueTypeSlice {
		return corrupt("no sources")
	}
	for i := 0; i < v.Slice().Len(); i++ {
		item := v.Slice().At(i)
		if item.Type() != pcommon.ValueTypeMap {
			return corrupt("source %d is not a map", i)
		}
		m := item.Map()
		var id sourceID
		state := &sourceState{}
		for name, dst := range map[string]*string{stateAttrSourceName: &id.name, stateAttrSourceInstance: &id.instance} {
			s, ok := m.Get(name)
			if !ok || s.Type() != pcommon.ValueTypeStr {
				return corrupt("source %d: %s", i, name)
			}
			*dst = s.Str()
		}
		for name, dst := range map[string]*int64{
			stateAttrSourceReceived: &state.received,
			stateAttrSourceSeen:     &state.end.seen,
			stateAttrSourceEmitted:  &state.end.emitted,
			stateAttrSourceDropped:  &state.end.dropped,
		} {
			n, ok := m.Get(name)
			if !ok || n.Type() != pcommon.ValueTypeInt || n.Int() < 0 {
				return corrupt("source %d: %s", i, name)
			}
			*dst = n.Int()
		}
		if invalid, ok := m.Get(stateAttrSourceInvalid); ok {
			if invalid.Type() != pcommon.ValueTypeInt || invalid.Int() < 0 {
				return corrupt("source %d: %s", i, stateAttrSourceInvalid)
			}
			state.invalid = invalid.Int()
		}
		if prompts, ok := m.Get(stateAttrSourcePromptsSeen); ok {
			if prompts.Type() != pcommon.ValueTypeInt || prompts.Int() < 0 {
				return corrupt("source %d: %s", i, stateAttrSourcePromptsSeen)
			}
			state.end.promptsSeen = prompts.Int()
		}
		if _, ok := m.Get(stateAttrSourcePromptKeys); ok {
			keys, reason := parsePromptKeysAt(m, stateAttrSourcePromptKeys)
			if reason != "" {
				return corrupt("source %d: %s", i, stateAttrSourcePromptKeys)
			}
			state.end.promptKeys = keys
		}
		if under, ok := m.Get(stateAttrSourceUnderRate); ok {
			if under.Type() != pcommon.ValueTypeInt || under.Int() < 0 {
				return corrupt("source %d: %s", i, stateAttrSourceUnderRate)
			}
			state.end.promptsUnderRate = under.Int()
		}
		if unhooked, ok := m.Get(stateAttrSourceUnhooked); ok {
			if unhooked.Type() != pcommon.ValueTypeStr {
				return corrupt("source %d: %s", i, stateAttrSourceUnhooked)
			}
			state.unhooked = unhooked.Str()
		}
		ended, ok := m.Get(stateAttrSourceEnded)
		if !ok || ended.Type() != pcommon.ValueTypeBool {
			return corrupt("source %d: %s", i, stateAttrSourceEnded)
		}
		state.ended = ended.Bool()
		if version != legacyVersion {
			announced, ok := m.Get(stateAttrSourceAnnounced)
			progress, ok2 := m.Get(stateAttrSourceProgress)
			if !ok || !ok2 || announced.Type() != pcommon.ValueTypeBool || progress.Type() != pcommon.ValueTypeInt || progress.Int() < 0 {
				return corrupt("source %d: start or progress", i)
			}
			state.announced, state.progressSeen = announced.Bool(), progress.Int()
		}
		scores, reason := readScoreStats(m, stateAttrSourceScoreN, stateAttrSourceScoreSum)
		if reason != "" {
			return corrupt("source %d: score statistics", i)
		}
		state.end.scores = scores
		if v, ok := m.Get(stateAttrSourceDataSources); ok {
			if v.Type() != pcommon.ValueTypeSlice {
				return corrupt("source %d: %s", i, stateAttrSourceDataSources)
			}
			figures, malformed := readDataSourceFigures(v.Slice())
			if malformed > 0 {
				return corrupt("source %d: %s", i, stateAttrSourceDataSources)
			}
			state.end.dataSources = figures
		}
		if v, ok := m.Get(stateAttrSourceTrajectories); ok {
			if v.Type() != pcommon.ValueTypeMap {
				return corrupt("source %d: %s", i, stateAttrSourceTrajectories)
			}
			state.end.trajectories = v.Map().AsRaw()
		}
		if v, ok := m.Get(stateAttrSourceMismatch); ok {
			if v.Type() != pcommon.ValueTypeMap {
				return corrupt("source %d: %s", i, stateAttrSourceMismatch)
			}
			state.end.mismatch = v.Map().AsRaw()
		}
		if _, dup := g.sources[id]; dup {
			return corrupt("source %d repeated", i)
		}
		g.sources[id] = state
	}
	return nil
}

// decodeLifecycle reads the version 2 header fields; a version 1 group is migrated.
func decodeLifecycle(attrs pcommon.Map, g *group, version int64) error {
	if version == legacyVersion {
		g.key += attemptKey("")
		g.firstSeen = g.lastSeen
		g.attemptStart = g.lastSeen.UnixNano()
		g.attemptLast = g.attemptStart
		return nil
	}
	attempt, ok := attrs.Get(stateAttrAttempt)
	if !ok || attempt.Type() != pcommon.ValueTypeStr {
		return corrupt("header attribute %q", stateAttrAttempt)
	}
	g.attempt = attempt.Str()
	firstSeen, ok := attrs.Get(stateAttrFirstSeen)
	start, ok2 := attrs.Get(stateAttrAttemptStart)
	if !ok || !ok2 || firstSeen.Type() != pcommon.ValueTypeInt || start.Type() != pcommon.ValueTypeInt {
		return corrupt("header attributes %q, %q", stateAttrFirstSeen, stateAttrAttemptStart)
	}
	g.firstSeen = time.Unix(0, firstSeen.Int())
	g.attemptStart = start.Int()
	g.attemptLast = max(g.attemptStart, g.lastSeen.UnixNano())
	if last, ok := attrs.Get(stateAttrAttemptLast); ok {
		if last.Type() != pcommon.ValueTypeInt {
			return corrupt("header attribute %q", stateAttrAttemptLast)
		}
		g.attemptLast = last.Int()
	}
	return nil
}

// decodeKeyVersion reads the key version of the group's kept records; groups stored before
// key versions existed have version-1 keys (or no generation yet).
func decodeKeyVersion(attrs pcommon.Map, g *group) error {
	v, ok := attrs.Get(stateAttrKeyVersion)
	switch {
	case !ok && g.kept != nil:
		g.keyVersion = keyVersionHMAC
	case !ok:
	case v.Type() != pcommon.ValueTypeInt || (v.Int() != 0 && !knownKeyVersion(v.Int())):
		return corrupt("header attribute %q", stateAttrKeyVersion)
	default:
		g.keyVersion = v.Int()
	}
	return nil
}

// decodeKind reads a group's kind: absent is validation (groups stored before kinds existed).
func decodeKind(attrs pcommon.Map, g *group) error {
	g.kind = kindValidation
	v, ok := attrs.Get(stateAttrKind)
	if !ok {
		return nil
	}
	if v.Type() != pcommon.ValueTypeStr || v.Str() != kindRollout {
		return corrupt("header attribute %q", stateAttrKind)
	}
	g.kind = kindRollout
	return nil
}

// storedOrders reads a slice of sort keys from the parallel attributes keysAttr and idsAttr,
// which must hold n of them.
func storedOrders(attrs pcommon.Map, keysAttr, idsAttr string, n int) ([]sortKey, error) {
	keys, hasKeys := attrs.Get(keysAttr)
	ids, hasIDs := attrs.Get(idsAttr)
	if !hasKeys || !hasIDs || keys.Type() != pcommon.ValueTypeSlice || ids.Type() != pcommon.ValueTypeSlice ||
		keys.Slice().Len() != n || ids.Slice().Len() != n {
		return nil, corrupt("kept records and %s disagree", keysAttr)
	}
	orders := make([]sortKey, n)
	for i := range n {
		kv, iv := keys.Slice().At(i), ids.Slice().At(i)
		if kv.Type() != pcommon.ValueTypeInt || kv.Int() < 0 || iv.Type() != pcommon.ValueTypeStr {
			return nil, corrupt("%s %d", keysAttr, i)
		}
		orders[i] = sortKey{key: uint64(kv.Int()), id: iv.Str()}
	}
	return orders, nil
}

// decodeSplit reads whether a group is split (k per data source): sample_by is "data_source";
// absent, it is not (no generation yet, or the group was kept per step, also by releases before
// sample_by existed).
func decodeSplit(attrs pcommon.Map) (bool, error) {
	v, ok := attrs.Get(stateAttrSampleBy)
	if !ok {
		return false, nil
	}
	if v.Type() != pcommon.ValueTypeStr || v.Str() != sampleByDataSource {
		return false, corrupt("header attribute %q", stateAttrSampleBy)
	}
	return true, nil
}

// decodeSlotCount reads the n of a ranked slot a group of kind keeps (the header's extremes for
// validation, mismatched for rollouts): absent is 0 (none, also in groups stored before it).
func decodeSlotCount(attrs pcommon.Map, g *group, name, kind string) (int, error) {
	v, ok := attrs.Get(name)
	if !ok {
		return 0, nil
	}
	if v.Type() != pcommon.ValueTypeInt || v.Int() < 0 || v.Int() > 1<<31 || (v.Int() > 0 && g.kind != kind) {
		return 0, corrupt("header attribute %q", name)
	}
	return int(v.Int()), nil
}

// decodeKept rebuilds the group's sample by offering its stored records again: the keyed picks
// of a set that holds them are the same (they are the bottom-k of all the group saw), and so are
// the ranked slots, from each record's valgen.score or valgen.mismatch.kl.
func decodeKept(attrs pcommon.Map, rls plog.ResourceLogsSlice, g *group) error {
	records := rls.Len() - 1
	split, err := decodeSplit(attrs)
	if err != nil {
		return err
	}
	extremes, err := decodeSlotCount(attrs, g, stateAttrExtremes, kindValidation)
	if err != nil {
		return err
	}
	mismatched, err := decodeSlotCount(attrs, g, stateAttrMismatched, kindRollout)
	if err != nil {
		return err
	}
	if g.k < 0 {
		_, hasKeys := attrs.Get(stateAttrOrderKeys)
		_, hasIDs := attrs.Get(stateAttrOrderIDs)
		if hasKeys || hasIDs || split || extremes > 0 || mismatched > 0 || records != 0 {
			return corrupt("kept records before the first generation")
		}
		return nil
	}
	orders, err := storedOrders(attrs, stateAttrOrderKeys, stateAttrOrderIDs, records)
	if err != nil {
		return err
	}
	prompts := orders // validation: each record is its own prompt
	if g.kind == kindRollout {
		if prompts, err = storedOrders(attrs, stateAttrPromptKeys, stateAttrPromptIDs, records); err != nil {
			return err
		}
	}
	g.kept = newDataSourceViews(g.k, split).withExtremes(extremes).withMismatched(mismatched)
	for i := range records {
		rl := rls.At(i + 1)
		if rl.ScopeLogs().Len() != 1 || rl.ScopeLogs().At(0).LogRecords().Len() != 1 {
			return corrupt("kept record %d", i)
		}
		sl := rl.ScopeLogs().At(0)
		kept := keptRecord{
			record:         plog.NewLogRecord(),
			resource:       pcommon.NewResource(),
			resourceSchema: rl.SchemaUrl(),
			scope:          pcommon.NewInstrumentationScope(),
			scopeSchema:    sl.SchemaUrl(),
		}
		sl.LogRecords().At(0).MoveTo(kept.record)
		rl.Resource().MoveTo(kept.resource)
		sl.Scope().MoveTo(kept.scope)
		gen := generation{order: orders[i], prompt: prompts[i], dataSource: dataSourceOf(kept.record.Attributes())}
		if extremes > 0 {
			gen.score, gen.scored = parseScore(kept.record.Attributes())
		}
		if mismatched > 0 {
			gen.kl, gen.hasKL = parseKL(kept.record.Attributes())
		}
		if !g.kept.offer(gen, func() keptRecord { return kept }) {
			return corrupt("kept record %d repeated", i)
		}
	}
	if g.kept.keptCount() != records { // a prompt evicted another: more prompts than k (in a view), or than an n
		return corrupt("more kept prompts than k")
	}
	return nil
}
