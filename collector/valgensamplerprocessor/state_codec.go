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
// stored before they existed loads without them. A source's invalid (generations dropped as
// invalid) and the header's attempt_last (largest record time) are optional too: absent, they
// are 0 and the last record's arrival. So are the header's sample_by ("data_source": the group
// is split, its kept records go back to the views of their valgen.data_source; absent: one view,
// as groups stored before it) and a source's data_sources (its end records' valgen.data_sources).
// So is the header's extremes (the n of valgen.extremes, when > 0; absent: 0, as groups stored
// before it): the lowest- and highest-scored are among the kept records, which keep their
// valgen.score, and come back by offering them again (extremes.go). So is its mismatched (the n
// of valgen.mismatched of a rollout group), whose records keep their valgen.mismatch.kl and,
// like every kept rollout record, their prompt's key and id (mismatched.go).
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
	stateAttrSourceInvalid   = "invalid"      // absent: 0 (and in groups stored before it existed)
	stateAttrAttemptLast     = "attempt_last" // absent in groups stored before it existed
	stateAttrSourceUnhooked  = "unhooked"     // absent: the source did not run verl's own table
	// A rollout group's kind and the prompt of each kept record (absent: validation, each
	// record its own prompt), and each source's prompts seen (absent: 0).
	stateAttrKind              = "kind"
	stateAttrPromptKeys        = "prompt_keys"
	stateAttrPromptIDs         = "prompt_ids"
	stateAttrSourcePromptsSeen = "prompts_seen"
	stateAttrSourcePromptKeys  = "prompt_keys"
	stateAttrRate              = "rate"               // the watch-list's rate (groupview.go); absent: none
	stateAttrSourceUnderRate   = "prompts_under_rate" // absent: 0
	// "data_source" when the group is split (datasource.go), absent otherwise; each source's
	// valgen.data_sources of its end records (absent: none).
	stateAttrSampleBy          = "sample_by"
	stateAttrSourceDataSources = "data_sources"
	// Each source's valgen.trajectories of its end records (absent: none).
	stateAttrSourceTrajectories = "trajectories"
	// Each source's valgen.mismatch of its end records (absent: none).
	stateAttrSourceMismatch = "mismatch"
	// The n lowest- and highest-scored a validation group keeps beside k (extremes.go), when > 0.
	stateAttrExtremes = "extremes"
	// The n most mismatched a rollout group keeps beside k (mismatched.go), when > 0.
	stateAttrMismatched = "mismatched"
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
	attrs.PutInt(stateAttrAttemptLast, g.attemptLast)
	encodeSources(attrs, g)
	if g.kind != kindValidation {
		attrs.PutStr(stateAttrKind, g.kind)
	}
	if g.rate > 0 {
		attrs.PutDouble(stateAttrRate, g.rate)
	}
	if g.kept != nil && g.kept.split {
		attrs.PutStr(stateAttrSampleBy, sampleByDataSource)
	}
	if g.kept != nil && g.kept.n > 0 {
		attrs.PutInt(stateAttrExtremes, int64(g.kept.n))
	}
	if g.kept != nil && g.kept.m > 0 {
		attrs.PutInt(stateAttrMismatched, int64(g.kept.m))
	}
	if g.kept != nil {
		keys := attrs.PutEmptySlice(stateAttrOrderKeys)
		ids := attrs.PutEmptySlice(stateAttrOrderIDs)
		var promptKeys, promptIDs pcommon.Slice
		if g.kind == kindRollout {
			promptKeys = attrs.PutEmptySlice(stateAttrPromptKeys)
			promptIDs = attrs.PutEmptySlice(stateAttrPromptIDs)
		}
		g.kept.each(func(prompt sortKey, e *entry[keptRecord]) {
			keys.AppendEmpty().SetInt(int64(e.order.key)) //nolint:gosec // keys are < 2^63
			ids.AppendEmpty().SetStr(e.order.id)
			if g.kind == kindRollout {
				promptKeys.AppendEmpty().SetInt(int64(prompt.key)) //nolint:gosec // keys are < 2^63
				promptIDs.AppendEmpty().SetStr(prompt.id)
			}
			krl := ld.ResourceLogs().AppendEmpty()
			e.item.resource.CopyTo(krl.Resource())
			krl.SetSchemaUrl(e.item.resourceSchema)
			ksl := krl.ScopeLogs().AppendEmpty()
			e.item.scope.CopyTo(ksl.Scope())
			ksl.SetSchemaUrl(e.item.scopeSchema)
			e.item.record.CopyTo(ksl.LogRecords().AppendEmpty())
		})
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
	if err := decodeKind(attrs, g); err != nil {
		return nil, 0, err
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
	if _, ok := attrs.Get(stateAttrRate); ok {
		rate, reason := parseRateAt(attrs, stateAttrRate)
		if reason != "" {
			return nil, 0, corrupt("rate")
		}
		g.applyRate(rate)
	}
	return g, version, nil
}
