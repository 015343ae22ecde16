// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgenspanconnector

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/otel-valgen/otel-valgen/collector/valgenspanconnector/internal/metadatatest"
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

// harness is a connector wired to a traces sink, a fake clock and test telemetry.
type harness struct {
	c     *spanConnector
	sink  *consumertest.TracesSink
	clock *fakeClock
	tel   *componenttest.Telemetry
}

func newHarness(t testing.TB, edit func(*Config)) *harness {
	t.Helper()
	cfg := createDefaultConfig().(*Config)
	if edit != nil {
		edit(cfg)
	}
	require.NoError(t, cfg.Validate())
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tel.Shutdown(context.Background())) })
	sink := &consumertest.TracesSink{}
	c, err := newSpanConnector(cfg, sink, metadatatest.NewSettings(tel))
	require.NoError(t, err)
	clock := newFakeClock()
	c.now = clock.Now
	return &harness{c: c, sink: sink, clock: clock, tel: tel}
}

func (h *harness) consume(t testing.TB, ld plog.Logs) {
	t.Helper()
	require.NoError(t, h.c.ConsumeLogs(context.Background(), ld))
}

// testRecord is a log record as the shared vectors spell it (testdata/spans/README.md).
type testRecord struct {
	Event      string          `json:"event"`
	Time       int64           `json:"time_unix_nano"`
	Resource   json.RawMessage `json:"resource,omitempty"`
	Attributes json.RawMessage `json:"attributes,omitempty"`
	Body       json.RawMessage `json:"body,omitempty"`
}

// logsOf builds one ResourceLogs per record.
func logsOf(t testing.TB, records []testRecord) plog.Logs {
	t.Helper()
	ld := plog.NewLogs()
	for _, r := range records {
		rl := ld.ResourceLogs().AppendEmpty()
		if len(r.Resource) > 0 {
			putJSONMap(t, rl.Resource().Attributes(), r.Resource)
		}
		sl := rl.ScopeLogs().AppendEmpty()
		sl.Scope().SetName("otel_valgen")
		lr := sl.LogRecords().AppendEmpty()
		lr.SetEventName(r.Event)
		lr.SetSeverityNumber(plog.SeverityNumberInfo)
		lr.SetTimestamp(pcommon.Timestamp(r.Time)) //nolint:gosec // test times after 1970
		if len(r.Attributes) > 0 {
			putJSONMap(t, lr.Attributes(), r.Attributes)
		}
		if len(r.Body) > 0 {
			require.NoError(t, jsonToValue(r.Body, lr.Body()))
		}
	}
	return ld
}

func putJSONMap(t testing.TB, dst pcommon.Map, raw json.RawMessage) {
	t.Helper()
	v := pcommon.NewValueEmpty()
	require.NoError(t, jsonToValue(raw, v))
	require.Equal(t, pcommon.ValueTypeMap, v.Type(), "attributes must be an object")
	v.Map().CopyTo(dst)
}

// jsonToValue decodes JSON into an OTLP value as the shared vectors spell them: a string is a
// string, a number with a '.', 'e' or 'E' a double and any other number an int, a bool a bool,
// an array an array, an object a map, null an empty value.
func jsonToValue(raw json.RawMessage, dst pcommon.Value) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return err
	}
	return putAny(v, dst)
}

func putAny(v any, dst pcommon.Value) error {
	switch x := v.(type) {
	case nil:
	case string:
		dst.SetStr(x)
	case bool:
		dst.SetBool(x)
	case json.Number:
		if strings.ContainsAny(x.String(), ".eE") {
			f, err := x.Float64()
			if err != nil {
				return err
			}
			dst.SetDouble(f)
			return nil
		}
		i, err := x.Int64()
		if err != nil {
			return err
		}
		dst.SetInt(i)
	case []any:
		s := dst.SetEmptySlice()
		for _, e := range x {
			if err := putAny(e, s.AppendEmpty()); err != nil {
				return err
			}
		}
	case map[string]any:
		m := dst.SetEmptyMap()
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if err := putAny(x[k], m.PutEmpty(k)); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("unexpected JSON value %T", v)
	}
	return nil
}

// valueJSON encodes an OTLP value the same way (map keys sorted; a double always with a '.'
// or an exponent, so that it reads back as a double).
func valueJSON(v pcommon.Value) json.RawMessage {
	var b bytes.Buffer
	writeValue(&b, v)
	return b.Bytes()
}

func writeValue(b *bytes.Buffer, v pcommon.Value) {
	switch v.Type() {
	case pcommon.ValueTypeStr:
		writeString(b, v.Str())
	case pcommon.ValueTypeInt:
		b.WriteString(strconv.FormatInt(v.Int(), 10))
	case pcommon.ValueTypeDouble:
		s := strconv.FormatFloat(v.Double(), 'g', -1, 64)
		if !strings.ContainsAny(s, ".eE") {
			s += ".0"
		}
		b.WriteString(s)
	case pcommon.ValueTypeBool:
		b.WriteString(strconv.FormatBool(v.Bool()))
	case pcommon.ValueTypeMap:
		writeMap(b, v.Map())
	case pcommon.ValueTypeSlice:
		b.WriteByte('[')
		for i, e := range v.Slice().All() {
			if i > 0 {
				b.WriteByte(',')
			}
			writeValue(b, e)
		}
		b.WriteByte(']')
	default:
		b.WriteString("null")
	}
}

func writeMap(b *bytes.Buffer, m pcommon.Map) {
	keys := make([]string, 0, m.Len())
	for k := range m.All() {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		writeString(b, k)
		b.WriteByte(':')
		v, _ := m.Get(k)
		writeValue(b, v)
	}
	b.WriteByte('}')
}

// writeString writes a JSON string, leaving <, > and & as they are.
func writeString(b *bytes.Buffer, s string) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	b.Truncate(b.Len() - 1) // Encode's newline
}

func mapJSON(m pcommon.Map) json.RawMessage {
	var b bytes.Buffer
	writeMap(&b, m)
	return b.Bytes()
}
