// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor // import "github.com/otel-valgen/otel-valgen/collector/valgensamplerprocessor"

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"go.opentelemetry.io/collector/extension/xextension/storage"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
)

// Layout of the processor's state in its storage client (one client per processor ID):
//
//	open              JSON list of the open groups' keys (the index; storage clients need not list keys)
//	group/<group key> one open group: its header record and its kept records, as OTLP protobuf
//	closed            JSON closedMeta of the closed-groups ring
//	closed/<slot>     the group key in that ring slot
//	closed_late/<slot> the late count of that closed group (decimal), absent when 0
//
// Version 2 (attempts): group keys end with the attempt (attemptKey), group headers carry the
// attempt, first-record time, attempt start and per-source start/progress figures. Version 1
// groups and rings (no "version" in closed) load as attempt "" and are rewritten. A header
// without key_version (stored before key versions) holds version-1 keys. A source's
// score_count and score_sum are there when its end records carried score statistics; a source
// stored before they existed loads without them.
// Open groups are written after every ConsumeLogs call that touched them, before it returns;
// a group that closes is deleted in the same batch that puts its key in the closed ring.
const (
	storageKeyIndex        = "open"
	storageKeyGroupPrefix  = "group/"
	storageKeyClosedMeta   = "closed"
	storageKeyClosedPrefix = "closed/"
	storageKeyLatePrefix   = "closed_late/"

	stateVersion   = 2
	legacyVersion  = 1       // groups stored before attempts: still decoded
	closedVersion  = 2       // closedMeta.Version of rings whose keys end with the attempt
	maxClosedSlots = 1 << 24 // a stored ring claiming more slots is corrupt
	stateScope     = "valgen_sampler.state"

	// Attribute keys of a group's header record.
	stateAttrVersion         = "version"
	stateAttrKey             = "key"
	stateAttrSeq             = "seq"
	stateAttrK               = "k"
	stateAttrRunID           = "run_id"
	stateAttrStep            = "step"
	stateAttrSourcesExpected = "sources_expected"
	stateAttrLate            = "late"
	stateAttrSources         = "sources"
	stateAttrOrderKeys       = "order_keys"
	stateAttrOrderIDs        = "order_ids"
	stateAttrSourceName      = "name"
	stateAttrSourceInstance  = "instance"
	stateAttrSourceReceived  = "received"
	stateAttrSourceEnded     = "ended"
	stateAttrSourceSeen      = "seen"
	stateAttrSourceEmitted   = "emitted"
	stateAttrSourceDropped   = "dropped"
	stateAttrAttempt         = "attempt"
	stateAttrFirstSeen       = "first_seen"
	stateAttrAttemptStart    = "attempt_start"
	stateAttrSourceAnnounced = "announced"
	stateAttrSourceProgress  = "progress_seen"
	stateAttrKeyVersion      = "key_version"
	stateAttrSourceScoreN    = "score_count" // with score_sum, only for sources that reported score statistics
	stateAttrSourceScoreSum  = "score_sum"
)

// Values of the operation attribute of the storage-errors metric.
const (
	storageOpRead   = "read"
	storageOpWrite  = "write"
	storageOpDecode = "decode"
)

var errCorruptState = errors.New("corrupt stored state")

func groupStorageKey(key string) string { return storageKeyGroupPrefix + key }
func closedStorageKey(slot int) string  { return storageKeyClosedPrefix + strconv.Itoa(slot) }
func closedLateStorageKey(slot int) string {
	return storageKeyLatePrefix + strconv.Itoa(slot)
}

// lateOp stores the late count of ring slot slot (deleting it when 0).
func lateOp(slot int, late int64) *storage.Operation {
	if late == 0 {
		return storage.DeleteOperation(closedLateStorageKey(slot))
	}
	return storage.SetOperation(closedLateStorageKey(slot), []byte(strconv.FormatInt(late, 10)))
}

// decodeLate reads a stored late count; absent is 0.
func decodeLate(data []byte) (int64, error) {
	if data == nil {
		return 0, nil
	}
	n, err := strconv.ParseInt(string(data), 10, 64)
	if err != nil || n < 0 {
		return 0, corrupt("late count %q", data)
	}
	return n, nil
}
func corrupt(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errCorruptState}, a...)...)
}

// closedMeta describes the stored closed-groups ring.
type closedMeta struct {
	Version int `json:"version,omitempty"` // 0: a ring of legacy keys, without the attempt
	Cap     int `json:"cap"`
	Len     int `json:"len"`
	Next    int `json:"next"`
}

// encodeGroup serialises a group: one ResourceLogs with the group's first resource and a
// header record (counters, sources, sort keys of the kept records, first trace id, last-record
// time), then one ResourceLogs per kept record with its own resource and scope. O(k).
func encodeGroup(g *group) ([]byte, error) {
	ld := plog.NewLogs()
	rl := ld.ResourceLogs().AppendEmpty()
	g.resource.CopyTo(rl.Resource())
	sl := rl.ScopeLogs().AppendEmpty()
	sl.Scope().SetName(stateScope)
	lr := sl.LogRecords().AppendEmpty()
	lr.SetTraceID(g.traceID)
	lr.SetTimestamp(pcommon.Timestamp(g.lastSeen.UnixNano())) //nolint:gosec // times after 1970
	attrs := lr.Attributes()
	attrs.PutInt(stateAttrVersion, stateVersion)
	attrs.PutStr(stateAttrKey, g.key)
	attrs.PutInt(stateAttrSeq, int64(g.seq)) //nolint:gosec // sequence numbers stay far below 2^63
	attrs.PutInt(stateAttrK, int64(g.k))
	g.runID.CopyTo(attrs.PutEmpty(stateAttrRunID))
	g.step.CopyTo(attrs.PutEmpty(stateAttrStep))
	attrs.PutInt(stateAttrSourcesExpected, g.sourcesExpected)
	attrs.PutInt(stateAttrLate, g.late)
	attrs.PutStr(stateAttrAttempt, g.attempt)
	attrs.PutInt(stateAttrFirstSeen, g.firstSeen.UnixNano())
	attrs.PutInt(stateAttrAttemptStart, g.attemptStart)
	attrs.PutInt(stateAttrKeyVersion, g.keyVersion)
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
		if state.end.scores.reported {
			m.PutInt(stateAttrSourceScoreN, state.end.scores.count)
			m.PutDouble(stateAttrSourceScoreSum, state.end.scores.sum)
		}
	}
	if g.kept != nil {
		keys := attrs.PutEmptySlice(stateAttrOrderKeys)
		ids := attrs.PutEmptySlice(stateAttrOrderIDs)
		keys.EnsureCapacity(g.kept.len())
		ids.EnsureCapacity(g.kept.len())
		ld.ResourceLogs().EnsureCapacity(1 + g.kept.len())
		for i := range g.kept.heap {
			e := &g.kept.heap[i]
			keys.AppendEmpty().SetInt(int64(e.order.key)) //nolint:gosec // keys are < 2^63
			ids.AppendEmpty().SetStr(e.order.id)
			krl := ld.ResourceLogs().AppendEmpty()
			e.item.resource.CopyTo(krl.Resource())
			krl.SetSchemaUrl(e.item.resourceSchema)
			ksl := krl.ScopeLogs().AppendEmpty()
			e.item.scope.CopyTo(ksl.Scope())
			ksl.SetSchemaUrl(e.item.scopeSchema)
			e.item.record.CopyTo(ksl.LogRecords().AppendEmpty())
		}
	}
	m := plog.ProtoMarshaler{}
	return m.MarshalLogs(ld)
}

func encodeIndex(groups map[string]*group) []byte {
	keys := make([]string, 0, len(groups))
	for key := range groups {
		keys = append(keys, key)
	}
	data, _ := json.Marshal(keys) // a []string always marshals
	return data
}

func decodeIndex(data []byte) ([]string, error) {
	var keys []string
	if err := json.Unmarshal(data, &keys); err != nil {
		return nil, corrupt("open groups index: %v", err)
	}
	return keys, nil
}

func encodeClosedMeta(c *closedGroups) []byte {
	data, _ := json.Marshal(closedMeta{Version: closedVersion, Cap: cap(c.ring), Len: len(c.ring), Next: c.next})
	return data
}

func decodeClosedMeta(data []byte) (closedMeta, error) {
	var meta closedMeta
	if err := json.Unmarshal(data, &meta); err != nil {
		return meta, corrupt("closed groups: %v", err)
	}
	if meta.Len < 0 || meta.Cap < meta.Len || meta.Cap > maxClosedSlots || meta.Next < 0 || (meta.Next > 0 && meta.Next >= meta.Len) ||
		(meta.Next > 0 && meta.Len < meta.Cap) {
		return meta, corrupt("closed groups: %+v", meta)
	}
	return meta, nil
}

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
		scores, reason := readScoreStats(m, stateAttrSourceScoreN, stateAttrSourceScoreSum)
		if reason != "" {
			return corrupt("source %d: score statistics", i)
		}
		state.end.scores = scores
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
