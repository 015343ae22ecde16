// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor // import "github.com/otel-valgen/otel-valgen/collector/valgensamplerprocessor"

import (
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
)

// decodeGroup rebuilds a group from encodeGroup's bytes, checking everything it reads.
// migrated reports a group stored before attempts (version 1): it gets attempt "", its
// group key gains attemptKey(""), and its first record and attempt start are taken to be
// its last record.
func decodeGroup(data []byte) (g *group, migrated bool, err error) {
	g, version, err := decodeGroupData(data)
	if err != nil {
		return nil, false, err
	}
	return g, version == legacyVersion, nil
}

func decodeGroupData(data []byte) (*group, int64, error) {
	u := plog.ProtoUnmarshaler{}
	ld, err := u.UnmarshalLogs(data)
	if err != nil {
		return nil, 0, corrupt("%v", err)
	}
	rls := ld.ResourceLogs()
	if rls.Len() == 0 || rls.At(0).ScopeLogs().Len() != 1 {
		return nil, 0, corrupt("no header")
	}
	hsl := rls.At(0).ScopeLogs().At(0)
	if hsl.Scope().Name() != stateScope || hsl.LogRecords().Len() != 1 {
		return nil, 0, corrupt("no header record")
	}
	hdr := hsl.LogRecords().At(0)
	attrs := hdr.Attributes()
	ints := map[string]int64{}
	for _, name := range []string{stateAttrVersion, stateAttrSeq, stateAttrK, stateAttrSourcesExpected, stateAttrLate} {
		v, ok := attrs.Get(name)
		if !ok || v.Type() != pcommon.ValueTypeInt {
			return nil, 0, corrupt("header attribute %q", name)
		}
		ints[name] = v.Int()
	}
	version := ints[stateAttrVersion]
	if version != stateVersion && version != legacyVersion {
		return nil, 0, corrupt("unknown version %d", version)
	}
	key, ok := attrs.Get(stateAttrKey)
	if !ok || key.Type() != pcommon.ValueTypeStr || key.Str() == "" {
		return nil, 0, corrupt("no group key")
	}
	k := ints[stateAttrK]
	if k < -1 || k > 1<<31 || ints[stateAttrSeq] < 0 || ints[stateAttrSourcesExpected] < 0 || ints[stateAttrLate] < 0 {
		return nil, 0, corrupt("header values out of range")
	}
	g := &group{
		key:             key.Str(),
		seq:             uint64(ints[stateAttrSeq]),
		lastSeen:        time.Unix(0, int64(hdr.Timestamp())), //nolint:gosec // written from UnixNano
		k:               int(k),
		resource:        pcommon.NewResource(),
		traceID:         hdr.TraceID(),
		runID:           pcommon.NewValueEmpty(),
		step:            pcommon.NewValueEmpty(),
		sources:         make(map[sourceID]*sourceState),
		sourcesExpected: ints[stateAttrSourcesExpected],
		late:            ints[stateAttrLate],
	}
	rls.At(0).Resource().CopyTo(g.resource)
	if v, ok := attrs.Get(stateAttrRunID); ok {
		v.CopyTo(g.runID)
	}
	if v, ok := attrs.Get(stateAttrStep); ok {
		v.CopyTo(g.step)
	}
	if err := decodeLifecycle(attrs, g, version); err != nil {
		return nil, 0, err
	}
	if err := decodeSources(attrs, g, version); err != nil {
		return nil, 0, err
	}
	if err := decodeKept(attrs, rls, g); err != nil {
		return nil, 0, err
	}
	if err := decodeKeyVersion(attrs, g); err != nil {
		return nil, 0, err
	}
	return g, version, nil
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

// decodeLifecycle reads the version 2 header fields; a version 1 group is migrated.
func decodeLifecycle(attrs pcommon.Map, g *group, version int64) error {
	if version == legacyVersion {
		g.key += attemptKey("")
		g.firstSeen = g.lastSeen
		g.attemptStart = g.lastSeen.UnixNano()
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
	return nil
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
		if _, dup := g.sources[id]; dup {
			return corrupt("source %d repeated", i)
		}
		g.sources[id] = state
	}
	return nil
}

func decodeKept(attrs pcommon.Map, rls plog.ResourceLogsSlice, g *group) error {
	keys, hasKeys := attrs.Get(stateAttrOrderKeys)
	ids, hasIDs := attrs.Get(stateAttrOrderIDs)
	records := rls.Len() - 1
	if g.k < 0 {
		if hasKeys || hasIDs || records != 0 {
			return corrupt("kept records before the first generation")
		}
		return nil
	}
	if !hasKeys || !hasIDs || keys.Type() != pcommon.ValueTypeSlice || ids.Type() != pcommon.ValueTypeSlice ||
		keys.Slice().Len() != records || ids.Slice().Len() != records || records > g.k {
		return corrupt("kept records and sort keys disagree")
	}
	g.kept = newBottomK[keptRecord](g.k)
	for i := range records {
		kv, iv := keys.Slice().At(i), ids.Slice().At(i)
		if kv.Type() != pcommon.ValueTypeInt || kv.Int() < 0 || iv.Type() != pcommon.ValueTypeStr {
			return corrupt("sort key %d", i)
		}
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
		order := sortKey{key: uint64(kv.Int()), id: iv.Str()}
		if !g.kept.offer(order, func() keptRecord { return kept }) {
			return corrupt("kept record %d repeated", i)
		}
	}
	return nil
}
