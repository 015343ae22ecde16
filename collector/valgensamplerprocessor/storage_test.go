// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/extension"
	"go.opentelemetry.io/collector/extension/xextension/storage"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"

	"github.com/otel-valgen/otel-valgen/collector/valgensamplerprocessor/internal/metadatatest"
)

var errInjected = errors.New("injected storage failure")

// memStorage is a storage extension whose data outlives its clients, like a file on disk
// outlives a killed process, and that can be told to fail.
type memStorage struct {
	component.StartFunc
	component.ShutdownFunc

	mu         sync.Mutex
	data       map[string][]byte
	failWrites atomic.Bool
	failReads  atomic.Bool
	failNext   atomic.Int32 // fail this many more write batches
}

var _ storage.Extension = (*memStorage)(nil)

func newMemStorage() *memStorage { return &memStorage{data: make(map[string][]byte)} }

func (m *memStorage) GetClient(context.Context, component.Kind, component.ID, string) (storage.Client, error) {
	return memClient{m}, nil
}

func (m *memStorage) keys() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, 0, len(m.data))
	for k := range m.data {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (m *memStorage) put(key string, value []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.data[key] = value
}

type memClient struct{ m *memStorage }

func (c memClient) Get(ctx context.Context, key string) ([]byte, error) {
	op := storage.GetOperation(key)
	err := c.Batch(ctx, op)
	return op.Value, err
}

func (c memClient) Set(ctx context.Context, key string, value []byte) error {
	return c.Batch(ctx, storage.SetOperation(key, value))
}

func (c memClient) Delete(ctx context.Context, key string) error {
	return c.Batch(ctx, storage.DeleteOperation(key))
}

func (c memClient) Batch(_ context.Context, ops ...*storage.Operation) error {
	for _, op := range ops {
		if op.Type == storage.Get && c.m.failReads.Load() || op.Type != storage.Get && c.m.failWrites.Load() {
			return errInjected
		}
	}
	for _, op := range ops {
		if op.Type != storage.Get {
			if c.m.failNext.Add(-1) >= 0 {
				return errInjected
			}
			c.m.failNext.Add(1)
			break
		}
	}
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	for _, op := range ops {
		switch op.Type {
		case storage.Get:
			op.Value = append([]byte(nil), c.m.data[op.Key]...)
			if _, ok := c.m.data[op.Key]; !ok {
				op.Value = nil
			}
		case storage.Set:
			c.m.data[op.Key] = append([]byte(nil), op.Value...)
		case storage.Delete:
			delete(c.m.data, op.Key)
		}
	}
	return nil
}

func (memClient) Close(context.Context) error { return nil }

// storageHost offers one extension under storageID.
type storageHost struct{ ext extension.Extension }

var storageID = component.MustNewIDWithName("file_storage", "sampler")

func (h storageHost) GetExtensions() map[component.ID]component.Component {
	return map[component.ID]component.Component{storageID: h.ext}
}

// withStorage configures the processor to use storageID.
func withStorage(edit func(*Config)) func(*Config) {
	return func(c *Config) {
		id := storageID
		c.Storage = &id
		if edit != nil {
			edit(c)
		}
	}
}

// startStored starts a new processor (a new collector process) on ext, at the given clock time.
func startStored(t *testing.T, ext extension.Extension, now time.Time, edit func(*Config)) *harness {
	t.Helper()
	h := newHarness(t, withStorage(edit))
	h.clock.now = now
	h.p.tick = time.Hour // tests close expired groups by calling closeExpired
	require.NoError(t, h.p.Start(context.Background(), storageHost{ext}))
	t.Cleanup(func() { _ = h.p.Shutdown(context.Background()) })
	return h
}

// kill abandons a processor as SIGKILL would: no Shutdown, nothing flushed or stored.
func kill(h *harness) {
	h.p.lifecycle.Lock()
	defer h.p.lifecycle.Unlock()
	if h.p.cancel != nil {
		h.p.cancel()
		h.p.wg.Wait()
		h.p.cancel = nil
	}
	h.p.mu.Lock()
	_ = h.p.store.close(context.Background()) // the dead process's files are closed; nothing more is written
	h.p.store = memoryStore{}                 // so that the test's cleanup Shutdown neither stores nor flushes anything
	h.p.groups = map[string]*group{}
	h.p.mu.Unlock()
}

// wantBottomK is the expected kept sample ids, in rank order, of a group of these records.
func wantBottomK(k int, records ...[]rec) []string {
	var orders []sortKey
	for _, list := range records {
		for _, r := range list {
			if r.event == "" {
				orders = append(orders, sortKey{key: sampleKey(keyVersionHMAC, defaultSeed, r.id), id: r.id})
			}
		}
	}
	sort.Slice(orders, func(i, j int) bool { return orders[i].less(orders[j]) })
	out := make([]string, 0, k)
	for i := 0; i < len(orders) && i < k; i++ {
		out = append(out, orders[i].id)
	}
	return out
}

// TestStorageRestart checks that with storage an open group outlives a restart (killed or
// stopped) and closes once, exactly, afterwards.
func TestStorageRestart(t *testing.T) {
	const k = 4
	partA := append(stepRecords(5, "A", 6, k), endRec(5, "A", 6, 6, 2))
	partB := append(stepRecords(5, "B", 6, k), endRec(5, "B", 6, 6, 2))
	tests := []struct {
		name    string
		stop    func(t *testing.T, h *harness)
		advance time.Duration // clock moves before the restart
		second  []rec         // what arrives after the restart
		reason  string
		kept    []string
		seen    int64
		sources int64
	}{
		{
			name:   "killed, then the other source ends",
			stop:   func(_ *testing.T, h *harness) { kill(h) },
			second: partB, reason: closedComplete, kept: wantBottomK(k, partA, partB), seen: 12, sources: 2,
		},
		{
			name:   "stopped, then the other source ends",
			stop:   func(t *testing.T, h *harness) { require.NoError(t, h.p.Shutdown(context.Background())) },
			second: partB, reason: closedComplete, kept: wantBottomK(k, partA, partB), seen: 12, sources: 2,
		},
		{
			// sources_expected = 2 and one source ended: silence does not close the step.
			name:    "killed, max_step_duration passes while down",
			stop:    func(_ *testing.T, h *harness) { kill(h) },
			advance: defaultMaxStepDuration, reason: closedMaxDuration, kept: wantBottomK(k, partA), seen: 6, sources: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ext := newMemStorage()
			first := startStored(t, ext, newFakeClock().Now(), nil)
			first.consume(t, logsOf(partA[:3]...))
			first.consume(t, logsOf(partA[3:]...))
			tt.stop(t, first)
			require.Empty(t, first.sink.AllLogs(), "nothing leaves before the step closes")

			second := startStored(t, ext, first.clock.Now().Add(tt.advance), nil)
			metadatatest.AssertEqualValgenSamplerGroupsOpen(t, second.tel,
				[]metricdata.DataPoint[int64]{{Value: 1}}, metricdatatest.IgnoreTimestamp())
			if len(tt.second) > 0 {
				second.consume(t, logsOf(tt.second...))
			}
			second.p.closeExpired(context.Background())
			got := collect(second.sink)
			require.Len(t, got.summaries, 1)
			assert.Equal(t, tt.kept, ids(got.kept))
			for i, lr := range got.kept {
				assert.Equal(t, int64(i+1), intOf(t, lr, attrRank))
				assert.Equal(t, "prompt "+ids(got.kept)[i], lr.Body().Map().AsRaw()["input"])
			}
			s := got.summaries[0]
			assert.Equal(t, tt.reason, strOf(t, s, attrClosedReason))
			assert.Equal(t, tt.seen, intOf(t, s, attrSeen))
			assert.Equal(t, tt.sources, intOf(t, s, attrSources))
			assert.Equal(t, int64(2), intOf(t, s, attrSourcesExpected))
			assert.Equal(t, int64(0), intOf(t, s, attrMissing))
			assert.Equal(t, "run-1", strOf(t, s, attrRunID))
			assert.Equal(t, int64(5), intOf(t, s, attrStep))

			require.NoError(t, second.p.Shutdown(context.Background()))
			assert.ElementsMatch(t, []string{storageKeyIndex, storageKeyClosedMeta, closedStorageKey(0)}, ext.keys(),
				"a closed group leaves only its key in the closed ring")
		})
	}
}

// TestStorageClosedCacheSurvivesRestart checks that a step redelivered after a restart is late,
// not a second group.
func TestStorageClosedCacheSurvivesRestart(t *testing.T) {
	step := func(n int64) []rec {
		return append(append(stepRecords(n, "A", 3, 0), endRec(n, "A", 3, 3, 2)),
			append(stepRecords(n, "B", 3, 0), endRec(n, "B", 3, 3, 2))...)
	}
	tests := []struct {
		name      string
		cache     int // closed_groups_cache after the restart
		stop      func(t *testing.T, h *harness)
		wantLate  int64
		summaries int
	}{
		{"stopped", defaultClosedGroupsCache, func(t *testing.T, h *harness) { require.NoError(t, h.p.Shutdown(context.Background())) }, 8, 0},
		{"killed", defaultClosedGroupsCache, func(_ *testing.T, h *harness) { kill(h) }, 8, 0},
		{"cache shrunk to the newest group", 1, func(_ *testing.T, h *harness) { kill(h) }, 8, 0},
		{"cache disabled", 0, func(_ *testing.T, h *harness) { kill(h) }, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ext := newMemStorage()
			first := startStored(t, ext, newFakeClock().Now(), func(c *Config) { c.ClosedGroupsCache = 2 })
			for n := int64(1); n <= 3; n++ { // three steps through a ring of two: slot 0 is reused
				first.consume(t, logsOf(step(n)...))
			}
			require.Len(t, collect(first.sink).summaries, 3)
			tt.stop(t, first)

			second := startStored(t, ext, first.clock.Now(), func(c *Config) { c.ClosedGroupsCache = tt.cache })
			second.consume(t, logsOf(step(3)...))
			require.NoError(t, second.p.Shutdown(context.Background()))
			got := collect(second.sink)
			require.Len(t, got.summaries, tt.summaries)
			if tt.wantLate > 0 {
				require.Empty(t, got.kept)
				metadatatest.AssertEqualValgenSamplerRecordsLate(t, second.tel,
					[]metricdata.DataPoint[int64]{{Value: tt.wantLate}}, metricdatatest.IgnoreTimestamp())
			}
		})
	}
}

// TestStorageRestartKeepsClosedStepsAndOpenOnes checks a mix: closed steps stay closed, an open
// step resumes, new steps open after the restored ones.
func TestStorageRestartKeepsClosedStepsAndOpenOnes(t *testing.T) {
	ext := newMemStorage()
	first := startStored(t, ext, newFakeClock().Now(), func(c *Config) { c.MaxGroups = 2 })
	first.consume(t, logsOf(append(stepRecords(1, "A", 3, 0), endRec(1, "A", 3, 3, 1))...)) // complete
	first.consume(t, logsOf(stepRecords(2, "A", 3, 0)...))                                  // open
	require.Len(t, collect(first.sink).summaries, 1)
	kill(first)

	second := startStored(t, ext, first.clock.Now(), func(c *Config) { c.MaxGroups = 2 })
	second.consume(t, logsOf(stepRecords(1, "A", 3, 0)...)) // late
	second.consume(t, logsOf(stepRecords(3, "A", 1, 0)...)) // opens beside step 2
	second.consume(t, logsOf(stepRecords(4, "A", 1, 0)...)) // max_groups closes step 2, the oldest
	got := collect(second.sink)
	require.Len(t, got.summaries, 1)
	assert.Equal(t, int64(2), intOf(t, got.summaries[0], attrStep))
	assert.Equal(t, closedMaxGroups, strOf(t, got.summaries[0], attrClosedReason))
	assert.Equal(t, int64(3), intOf(t, got.summaries[0], attrKept))
	metadatatest.AssertEqualValgenSamplerRecordsLate(t, second.tel,
		[]metricdata.DataPoint[int64]{{Value: 3}}, metricdatatest.IgnoreTimestamp())
}

// TestStorageCorruptStateIgnored checks that damaged stored state is logged, counted and
// ignored: the processor starts, never panics, and works on.
func TestStorageCorruptStateIgnored(t *testing.T) {
	tests := []struct {
		name   string
		damage func(ext *memStorage, groupKey string)
		open   int // groups restored
		errors int64
	}{
		{"group bytes garbage", func(ext *memStorage, key string) { ext.put(groupStorageKey(key), []byte("\xff\x00garbage")) }, 0, 1},
		{"group empty", func(ext *memStorage, key string) { ext.put(groupStorageKey(key), []byte{}) }, 0, 1},
		{"group missing", func(ext *memStorage, key string) {
			ext.mu.Lock()
			defer ext.mu.Unlock()
			delete(ext.data, groupStorageKey(key))
		}, 0, 1},
		{"group under another key", func(ext *memStorage, key string) {
			ext.put(storageKeyIndex, []byte(`["other"]`))
			ext.mu.Lock()
			ext.data[groupStorageKey("other")] = ext.data[groupStorageKey(key)]
			ext.mu.Unlock()
		}, 0, 1},
		{"index garbage", func(ext *memStorage, _ string) { ext.put(storageKeyIndex, []byte("{not json")) }, 0, 1},
		{"closed meta garbage", func(ext *memStorage, _ string) { ext.put(storageKeyClosedMeta, []byte("[")) }, 1, 1},
		{"closed meta out of range", func(ext *memStorage, _ string) {
			ext.put(storageKeyClosedMeta, []byte(`{"cap":2,"len":5,"next":7}`))
		}, 1, 1},
		{"closed slot missing", func(ext *memStorage, _ string) {
			ext.put(storageKeyClosedMeta, []byte(`{"cap":10000,"len":2,"next":0}`))
		}, 1, 1},
		{"group truncated", func(ext *memStorage, key string) {
			ext.mu.Lock()
			defer ext.mu.Unlock()
			data := ext.data[groupStorageKey(key)]
			ext.data[groupStorageKey(key)] = data[:len(data)/2]
		}, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ext := newMemStorage()
			first := startStored(t, ext, newFakeClock().Now(), nil)
			first.consume(t, logsOf(append(stepRecords(1, "A", 2, 0), endRec(1, "A", 2, 2, 1))...)) // closes
			first.consume(t, logsOf(stepRecords(2, "A", 3, 0)...))                                  // stays open
			var key string
			for key = range first.p.groups {
			}
			kill(first)
			tt.damage(ext, key)

			second := startStored(t, ext, first.clock.Now(), nil)
			require.Len(t, second.p.groups, tt.open)
			metadatatest.AssertEqualValgenSamplerStorageErrors(t, second.tel, []metricdata.DataPoint[int64]{
				{Value: tt.errors, Attributes: attribute.NewSet(attribute.String("operation", storageOpDecode))},
			}, metricdatatest.IgnoreTimestamp())
			require.NotPanics(t, func() { second.consume(t, logsOf(stepRecords(2, "B", 2, 0)...)) })
			require.NoError(t, second.p.Shutdown(context.Background()))

			third := startStored(t, ext, first.clock.Now(), nil)
			require.Len(t, third.p.groups, 1, "the repaired state loads cleanly")
			require.NoError(t, third.p.Shutdown(context.Background()))
		})
	}
}

// TestStorageFailures checks that failing storage never fails the pipeline: writes are counted
// and retried in full, and a shutdown that cannot store flushes instead of dropping.
func TestStorageFailures(t *testing.T) {
	t.Run("write fails, then recovers", func(t *testing.T) {
		ext := newMemStorage()
		h := startStored(t, ext, newFakeClock().Now(), nil)
		ext.failWrites.Store(true)
		h.consume(t, logsOf(stepRecords(1, "A", 3, 0)...))
		metadatatest.AssertEqualValgenSamplerStorageErrors(t, h.tel, []metricdata.DataPoint[int64]{
			{Value: 1, Attributes: attribute.NewSet(attribute.String("operation", storageOpWrite))},
		}, metricdatatest.IgnoreTimestamp())
		ext.failWrites.Store(false)
		h.consume(t, logsOf(stepRecords(2, "A", 1, 0)...)) // rewrites step 1 too
		kill(h)
		again := startStored(t, ext, h.clock.Now(), nil)
		require.Len(t, again.p.groups, 2)
	})
	t.Run("shutdown cannot store: flush", func(t *testing.T) {
		ext := newMemStorage()
		h := startStored(t, ext, newFakeClock().Now(), nil)
		h.consume(t, logsOf(stepRecords(1, "A", 3, 0)...))
		ext.failWrites.Store(true)
		require.NoError(t, h.p.Shutdown(context.Background()))
		got := collect(h.sink)
		require.Len(t, got.summaries, 1)
		assert.Equal(t, closedShutdown, strOf(t, got.summaries[0], attrClosedReason))
	})
	t.Run("shutdown cannot store, then storage recovers: flushed once, forgotten", func(t *testing.T) {
		ext := newMemStorage()
		h := startStored(t, ext, newFakeClock().Now(), nil)
		h.consume(t, logsOf(stepRecords(1, "A", 3, 0)...))
		ext.failNext.Store(1)
		require.NoError(t, h.p.Shutdown(context.Background()))
		require.Len(t, collect(h.sink).summaries, 1)
		again := startStored(t, ext, h.clock.Now(), nil)
		require.Empty(t, again.p.groups, "a flushed group is not reloaded")
	})
	t.Run("read fails: start fails", func(t *testing.T) {
		ext := newMemStorage()
		ext.failReads.Store(true)
		h := newHarness(t, withStorage(nil))
		require.Error(t, h.p.Start(context.Background(), storageHost{ext}))
	})
	t.Run("extension missing or not storage", func(t *testing.T) {
		h := newHarness(t, withStorage(nil))
		require.ErrorContains(t, h.p.Start(context.Background(), componenttest.NewNopHost()), "not found")
		h = newHarness(t, withStorage(nil))
		require.ErrorContains(t, h.p.Start(context.Background(), storageHost{notStorage{}}), "not a storage extension")
	})
}

type notStorage struct {
	component.StartFunc
	component.ShutdownFunc
}

// TestStorageShutdownKeepsGroups checks that with storage a shutdown sends nothing downstream.
func TestStorageShutdownKeepsGroups(t *testing.T) {
	ext := newMemStorage()
	h := startStored(t, ext, newFakeClock().Now(), nil)
	h.consume(t, logsOf(stepRecords(1, "A", 3, 0)...))
	h.consume(t, logsOf(stepRecords(2, "A", 3, 0)...))
	require.NoError(t, h.p.Shutdown(context.Background()))
	require.NoError(t, h.p.Shutdown(context.Background()))
	require.Empty(t, h.sink.AllLogs())
	metadatatest.AssertEqualValgenSamplerGroupsOpen(t, h.tel,
		[]metricdata.DataPoint[int64]{{Value: 0}}, metricdatatest.IgnoreTimestamp())
	again := startStored(t, ext, h.clock.Now(), nil)
	require.Len(t, again.p.groups, 2)
	require.NoError(t, again.p.Shutdown(context.Background()))
}

// TestStorageEncodeRoundTrip checks that a decoded group equals the encoded one, whatever its
// sources, kept records and k.
func TestStorageEncodeRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, 5, 40} {
		t.Run(fmt.Sprintf("%d records", n), func(t *testing.T) {
			h := newHarness(t, func(c *Config) { c.Count = 7 })
			scored := endRec(1, "C", 4, 0, 3)
			scored.scored, scored.scoreCount, scored.scoreSum = true, 3, -0.75
			invalid := rec{step: 1, id: "A/x", source: "A", noID: true, at: h.clock.Now().Add(time.Minute)}
			agentic := endRec(1, "B", 9, 8, 3) // with figures over its trajectories, kept across a restart
			agentic.trajectories = map[string]any{
				"count": int64(3), "turns.max": int64(4), "tool_calls.by_name": map[string]any{"calc": int64(2)},
			}
			agentic.mismatch = map[string]any{ // and the distribution of its responses' per-token figures
				"count": int64(3), "kl.max": 0.25, "kl.buckets": map[string]any{"-70": int64(2), "z": int64(1)},
			}
			h.consume(t, logsOf(append(stepRecords(1, "A", n, 0), agentic, scored, invalid)...))
			h.consume(t, withMarks(logsOf(rec{event: eventStart, step: 1, source: "D"}), "unhooked", "override"))
			require.Len(t, h.p.groups, 1)
			var g *group
			for _, g = range h.p.groups {
			}
			g.late = 2
			data, err := encodeGroup(g)
			require.NoError(t, err)
			back, migrated, err := decodeGroup(data)
			require.NoError(t, err)
			assert.False(t, migrated)
			assert.Equal(t, g.attempt, back.attempt)
			assert.True(t, g.firstSeen.Equal(back.firstSeen))
			assert.Equal(t, g.attemptStart, back.attemptStart)
			assert.Equal(t, g.attemptLast, back.attemptLast)
			assert.Equal(t, int64(1), back.sources[sourceID{"A", "i-A"}].invalid)
			assert.Equal(t, "override", back.sources[sourceID{"D", "i-D"}].unhooked)
			assert.Equal(t, g.key, back.key)
			assert.Equal(t, g.seq, back.seq)
			assert.True(t, g.lastSeen.Equal(back.lastSeen))
			assert.Equal(t, g.k, back.k)
			assert.Equal(t, g.traceID, back.traceID)
			assert.Equal(t, g.sources, back.sources)
			assert.Equal(t, int64(4), back.sources[sourceID{"B", "i-B"}].end.trajectories["turns.max"])
			assert.Equal(t, 0.25, back.sources[sourceID{"B", "i-B"}].end.mismatch["kl.max"])
			assert.Equal(t, g.sourcesExpected, back.sourcesExpected)
			assert.Equal(t, g.late, back.late)
			assert.Equal(t, g.keyVersion, back.keyVersion)
			assert.Equal(t, g.runID.AsRaw(), back.runID.AsRaw())
			assert.Equal(t, g.step.AsRaw(), back.step.AsRaw())
			assert.Equal(t, g.resource.Attributes().AsRaw(), back.resource.Attributes().AsRaw())
			if n == 0 {
				assert.Nil(t, back.kept)
				return
			}
			want, got := g.kept.sorted(), back.kept.sorted()
			require.Len(t, got, len(want))
			for i := range want {
				assert.Equal(t, want[i].order, got[i].order)
				assert.Equal(t, want[i].item.record.Attributes().AsRaw(), got[i].item.record.Attributes().AsRaw())
				assert.Equal(t, want[i].item.record.Body().AsRaw(), got[i].item.record.Body().AsRaw())
				assert.Equal(t, want[i].item.resource.Attributes().AsRaw(), got[i].item.resource.Attributes().AsRaw())
				assert.Equal(t, want[i].item.scope.Name(), got[i].item.scope.Name())
			}
		})
	}
}

// TestStorageConcurrentBatches checks, under -race, that concurrent ConsumeLogs calls leave the
// stored state equal to the state in memory: every batch's writes land in order.
func TestStorageConcurrentBatches(t *testing.T) {
	ext := newMemStorage()
	h := startStored(t, ext, newFakeClock().Now(), func(c *Config) { c.Count = 5 })
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				step := int64(i % 3)
				r := rec{step: step, id: fmt.Sprintf("w%d/%d", w, i), source: fmt.Sprintf("w%d", w)}
				assert.NoError(t, h.p.ConsumeLogs(context.Background(), logsOf(r)))
			}
		}()
	}
	wg.Wait()
	h.p.mu.Lock()
	want := map[string][]string{}
	for key, g := range h.p.groups {
		for _, e := range g.kept.sorted() {
			want[key] = append(want[key], e.order.id)
		}
	}
	h.p.mu.Unlock()
	kill(h)

	again := startStored(t, ext, h.clock.Now(), func(c *Config) { c.Count = 5 })
	require.Len(t, again.p.groups, 3)
	for key, g := range again.p.groups {
		var got []string
		var received int64
		for _, e := range g.kept.sorted() {
			got = append(got, e.order.id)
		}
		for _, s := range g.sources {
			received += s.received
		}
		assert.Equal(t, want[key], got, key)
		assert.Equal(t, int64(len(want[key])), min(received, 5))
	}
	var total int64
	for _, g := range again.p.groups {
		for _, s := range g.sources {
			total += s.received
		}
	}
	assert.Equal(t, int64(100), total, "every acknowledged record is counted after the restart")
}
