// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/otel-valgen/otel-valgen/collector/valgensamplerprocessor/internal/metadatatest"
)

// fakeClock is a clock that only moves when a test advances it.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// harness is a processor wired to a sink, a fake clock and test telemetry.
type harness struct {
	p     *samplerProcessor
	sink  *consumertest.LogsSink
	clock *fakeClock
	tel   *componenttest.Telemetry
}

func newHarness(t *testing.T, edit func(*Config)) *harness {
	t.Helper()
	cfg := createDefaultConfig().(*Config)
	if edit != nil {
		edit(cfg)
	}
	require.NoError(t, cfg.Validate())
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tel.Shutdown(context.Background())) })
	set := metadatatest.NewSettings(tel)
	sink := &consumertest.LogsSink{}
	p, err := newSamplerProcessor(cfg, sink, set)
	require.NoError(t, err)
	clock := newFakeClock()
	p.now = clock.Now
	return &harness{p: p, sink: sink, clock: clock, tel: tel}
}

func (h *harness) consume(t *testing.T, ld plog.Logs) {
	t.Helper()
	require.NoError(t, h.p.ConsumeLogs(context.Background(), ld))
}

// zeroCount asks logsOf for an explicit valgen.sample_count of 0.
const zeroCount = -1

// rec describes one test record; zero values mean "use the default".
type rec struct {
	event  string // default: valgen.generation
	run    string // default: "run-1"
	step   int64
	id     string
	key    int64 // sent only when hasKey; otherwise computed from the seed
	hasKey bool
	// keyVersion is sent as valgen.key_version when > 0; 0 leaves it out (a legacy record: version 1)
	keyVersion int64
	count      int64 // valgen.sample_count: 0 = absent, zeroCount = an explicit 0
	source     string
	instance   string
	traceID    byte
	// end records (expected, valgen.sources_expected, also on start records; seen, also on
	// progress records; dropped: valgen.dropped, sent when > 0)
	seen, emitted, expected, dropped int64
	// noID leaves valgen.sample_id out of a generation: the sampler drops it as invalid
	noID bool
	// attempt is valgen.attempt, sent when not empty; at is the record's time when not zero
	attempt string
	at      time.Time
	// valgen.score.count and valgen.score.sum on an end record, when scored
	scored     bool
	scoreCount int64
	scoreSum   float64
	// kind is valgen.kind, sent when not empty; a rollout generation's prompt id, and its prompt
	// key when hasPromptKey; promptsSeen is valgen.prompts_seen on an end record, sent when > 0
	kind         string
	promptID     string
	promptKey    int64
	hasPromptKey bool
	promptsSeen  int64
	promptKeys   []int64 // valgen.prompt_keys on an end record, sent when not nil
	// a generation's valgen.data_source and valgen.sample_by, each sent when not empty;
	// valgen.data_sources on an end record (raw entries), sent when not nil
	dataSource  string
	sampleBy    string
	dataSources []any
	// valgen.trajectories on an end record (raw figures), sent when not nil
	trajectories map[string]any
	// valgen.mismatch on an end record (raw figures), sent when not nil
	mismatch map[string]any
	// a generation's valgen.score: nil leaves it out, a float64 is sent as a double (NaN, ±Inf and
	// -0.0 included), an int64 as an int, anything else (a string, a bool) as that type; and its
	// valgen.extremes, sent when not 0 (a negative value too)
	score    any
	extremes int64
	// a rollout record's valgen.mismatch.kl (as score: nil leaves it out), its valgen.mismatched,
	// sent when not 0, and its valgen.sample_rate, sent when > 0
	kl         any
	mismatched int64
	rate       float64
}

// logsOf builds one ResourceLogs per record, with service.instance.id as the resource.
// consumeWholeOrSplit sends records in one batch, or with split as two batches by source (the
// records of source "s0" last), so that a test sees the same choice whichever way they arrive.
func (h *harness) consumeWholeOrSplit(t *testing.T, records []rec, split bool) {
	t.Helper()
	if !split {
		h.consume(t, logsOf(records...))
		return
	}
	var a, b []rec
	for _, r := range records {
		if r.source == "s0" {
			a = append(a, r)
		} else {
			b = append(b, r)
		}
	}
	h.consume(t, logsOf(b...))
	h.consume(t, logsOf(a...))
}

func logsOf(records ...rec) plog.Logs {
	ld := plog.NewLogs()
	for _, r := range records {
		rl := ld.ResourceLogs().AppendEmpty()
		rl.Resource().Attributes().PutStr("service.name", "trainer")
		rl.Resource().Attributes().PutStr(attrServiceInstance, orDefault(r.instance, "i-"+r.source))
		sl := rl.ScopeLogs().AppendEmpty()
		sl.Scope().SetName("otel_valgen")
		appendRec(sl.LogRecords(), r)
	}
	return ld
}

func appendRec(lrs plog.LogRecordSlice, r rec) plog.LogRecord {
	lr := lrs.AppendEmpty()
	lr.SetEventName(orDefault(r.event, eventGeneration))
	lr.SetSeverityNumber(plog.SeverityNumberInfo)
	lr.SetTraceID(pcommon.TraceID{r.traceID + 1})
	attrs := lr.Attributes()
	attrs.PutStr(attrRunID, orDefault(r.run, "run-1"))
	attrs.PutInt(attrStep, r.step)
	attrs.PutStr(attrSource, orDefault(r.source, "trainer"))
	if r.attempt != "" {
		attrs.PutStr(attrAttempt, r.attempt)
	}
	if r.kind != "" {
		attrs.PutStr(attrKind, r.kind)
	}
	if !r.at.IsZero() {
		lr.SetTimestamp(pcommon.NewTimestampFromTime(r.at))
	}
	if lr.EventName() == eventProgress {
		attrs.PutInt(attrSeen, r.seen)
		return lr
	}
	if lr.EventName() == eventEnd {
		attrs.PutInt(attrSeen, r.seen)
		attrs.PutInt(attrEmitted, r.emitted)
		if r.dropped > 0 {
			attrs.PutInt(attrDropped, r.dropped)
		}
		if r.expected > 0 {
			attrs.PutInt(attrSourcesExpected, r.expected)
		}
		if r.scored {
			attrs.PutInt(attrScoreCount, r.scoreCount)
			attrs.PutDouble(attrScoreSum, r.scoreSum)
		}
		if r.promptsSeen > 0 {
			attrs.PutInt(attrPromptsSeen, r.promptsSeen)
		}
		if r.promptKeys != nil {
			putPromptKeys(attrs, attrPromptKeys, r.promptKeys)
		}
		if r.dataSources != nil {
			if err := attrs.PutEmptySlice(attrDataSources).FromRaw(r.dataSources); err != nil {
				panic(err)
			}
		}
		if r.mismatch != nil {
			if err := attrs.PutEmptyMap(attrMismatch).FromRaw(r.mismatch); err != nil {
				panic(err)
			}
		}
		if r.trajectories != nil {
			if err := attrs.PutEmptyMap(attrTrajectories).FromRaw(r.trajectories); err != nil {
				panic(err)
			}
		}
		return lr
	}
	if lr.EventName() == eventStart && r.expected > 0 {
		attrs.PutInt(attrSourcesExpected, r.expected)
	}
	if !r.noID {
		attrs.PutStr(attrSampleID, r.id)
	}
	if r.hasKey {
		attrs.PutInt(attrSampleKey, r.key)
	}
	if r.promptID != "" {
		attrs.PutStr(attrPromptID, r.promptID)
	}
	if r.hasPromptKey {
		attrs.PutInt(attrPromptKey, r.promptKey)
	}
	if r.keyVersion > 0 {
		attrs.PutInt(attrKeyVersion, r.keyVersion)
	}
	if r.dataSource != "" {
		attrs.PutStr(attrDataSource, r.dataSource)
	}
	if r.sampleBy != "" {
		attrs.PutStr(attrSampleBy, r.sampleBy)
	}
	if r.extremes != 0 {
		attrs.PutInt(attrExtremes, r.extremes)
	}
	putAny(attrs, attrScore, r.score)
	putAny(attrs, attrMismatchKL, r.kl)
	if r.mismatched != 0 {
		attrs.PutInt(attrMismatched, r.mismatched)
	}
	if r.rate > 0 {
		attrs.PutDouble(attrSampleRate, r.rate)
	}
	switch {
	case r.count > 0:
		attrs.PutInt(attrSampleCount, r.count)
	case r.count == zeroCount:
		attrs.PutInt(attrSampleCount, 0)
	}
	body := lr.Body().SetEmptyMap()
	body.PutStr("input", "prompt "+r.id)
	body.PutStr("output", "answer "+r.id)
	return lr
}

// putAny puts a test value under name: nil leaves it out, a float64 is sent as a double, an int64
// as an int, a string or a bool as that type.
func putAny(attrs pcommon.Map, name string, value any) {
	switch v := value.(type) {
	case nil:
	case float64:
		attrs.PutDouble(name, v)
	case int64:
		attrs.PutInt(name, v)
	case string:
		attrs.PutStr(name, v)
	case bool:
		attrs.PutBool(name, v)
	default:
		panic(fmt.Sprintf("%s of type %T", name, v))
	}
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// output is what the sink received, split into kinds.
type output struct {
	kept      []plog.LogRecord // generation records, in the order received
	summaries []plog.LogRecord
	other     []plog.LogRecord
	resources []pcommon.Resource // resource of each kept record
}

// eachRecord calls fn with every log record of ld, in order, and the resource logs it is in.
func eachRecord(ld plog.Logs, fn func(rl plog.ResourceLogs, lr plog.LogRecord)) {
	for i := 0; i < ld.ResourceLogs().Len(); i++ {
		rl := ld.ResourceLogs().At(i)
		for j := 0; j < rl.ScopeLogs().Len(); j++ {
			lrs := rl.ScopeLogs().At(j).LogRecords()
			for k := 0; k < lrs.Len(); k++ {
				fn(rl, lrs.At(k))
			}
		}
	}
}

func collect(sink *consumertest.LogsSink) output {
	var out output
	for _, ld := range sink.AllLogs() {
		eachRecord(ld, func(rl plog.ResourceLogs, lr plog.LogRecord) {
			switch eventName(lr) {
			case eventGeneration:
				out.kept = append(out.kept, lr)
				out.resources = append(out.resources, rl.Resource())
			case eventSummary:
				out.summaries = append(out.summaries, lr)
			default:
				out.other = append(out.other, lr)
			}
		})
	}
	return out
}

func ids(records []plog.LogRecord) []string {
	out := make([]string, 0, len(records))
	for _, lr := range records {
		v, _ := lr.Attributes().Get(attrSampleID)
		out = append(out, v.Str())
	}
	return out
}

func intOf(t *testing.T, lr plog.LogRecord, key string) int64 {
	t.Helper()
	v, ok := lr.Attributes().Get(key)
	require.Truef(t, ok, "attribute %s missing", key)
	require.Equal(t, pcommon.ValueTypeInt, v.Type(), key)
	return v.Int()
}

func strOf(t *testing.T, lr plog.LogRecord, key string) string {
	t.Helper()
	v, ok := lr.Attributes().Get(key)
	require.Truef(t, ok, "attribute %s missing", key)
	return v.AsString()
}

// doubleOf returns a double attribute, and whether the record has it.
func doubleOf(t *testing.T, lr plog.LogRecord, key string) (float64, bool) {
	t.Helper()
	v, ok := lr.Attributes().Get(key)
	if !ok {
		return 0, false
	}
	require.Equal(t, pcommon.ValueTypeDouble, v.Type(), key)
	return v.Double(), true
}

func sliceOf(t *testing.T, lr plog.LogRecord, key string) []any {
	t.Helper()
	v, ok := lr.Attributes().Get(key)
	require.Truef(t, ok, "attribute %s missing", key)
	require.Equal(t, pcommon.ValueTypeSlice, v.Type(), key)
	return v.Slice().AsRaw()
}

// summaryOfEnds consumes one step's end records, in order or reversed, shuts the sampler down and
// returns the step's one summary (the shared end-record cases replay through it).
func summaryOfEnds(t *testing.T, ends []rec, reverse bool) plog.LogRecord {
	t.Helper()
	h := newHarness(t, nil)
	for i := range ends {
		e := ends[i]
		if reverse {
			e = ends[len(ends)-1-i]
		}
		h.consume(t, logsOf(e))
	}
	require.NoError(t, h.p.Shutdown(context.Background()))
	out := collect(h.sink)
	require.Len(t, out.summaries, 1)
	return out.summaries[0]
}
