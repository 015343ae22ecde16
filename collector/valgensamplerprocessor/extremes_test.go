// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/extension"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
)

type extremesCases struct {
	Cases []struct {
		Name    string `json:"name"`
		K       int    `json:"k"`
		N       int    `json:"n"`
		Seed    string `json:"seed"`
		Records []struct {
			SampleID   string          `json:"sample_id"`
			SampleKey  string          `json:"sample_key"`
			DataSource string          `json:"data_source"`
			SampleBy   string          `json:"sample_by"`
			Score      json.RawMessage `json:"score"`
			Extremes   *int64          `json:"extremes"`
		} `json:"records"`
		Expected [][]any `json:"expected"` // [sample id, [slots]]
	} `json:"cases"`
}

// vectorScore is a vector's score as the record sends it: nil (absent, or null), or a double;
// the strings nan, inf and -inf stand for those doubles, and -0.0 stays -0.0.
func vectorScore(t *testing.T, raw json.RawMessage) any {
	t.Helper()
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case "nan":
			return math.NaN()
		case "inf":
			return math.Inf(1)
		case "-inf":
			return math.Inf(-1)
		}
		t.Fatalf("score %q", s)
	}
	v, err := strconv.ParseFloat(string(raw), 64)
	require.NoError(t, err)
	return v
}

// rankedIDsAndSlots lists [id, slots] of the output: slots is nil when the record has no
// valgen.slots.
func rankedIDsAndSlots(t *testing.T, records []plog.LogRecord) [][]any {
	t.Helper()
	out := [][]any{}
	for i, lr := range records {
		assert.Equal(t, int64(i+1), intOf(t, lr, attrRank))
		var slots []any
		if v, ok := lr.Attributes().Get(attrSlots); ok {
			require.Equal(t, pcommon.ValueTypeSlice, v.Type())
			slots = v.Slice().AsRaw()
		}
		out = append(out, []any{strOf(t, lr, attrSampleID), slots})
	}
	return out
}

// expectedWithSlots turns a vector's expected list into rankedIDsAndSlots' shape: empty slots
// are no valgen.slots.
func expectedWithSlots(expected [][]any) [][]any {
	out := [][]any{}
	for _, e := range expected {
		slots := e[1].([]any)
		if len(slots) == 0 {
			slots = nil
		}
		out = append(out, []any{e[0], slots})
	}
	return out
}

// TestExtremesVectors checks the shared best-and-worst cases on the group's sample (parsed as
// the processor parses the records) and through the processor, whole and split over two
// sources: the ranked ids with their slots (no valgen.slots when n is 0), valgen.rank, and on the
// summary valgen.extremes, valgen.kept, the balance and each data source's kept records.
func TestExtremesVectors(t *testing.T) {
	var cases extremesCases
	readJSON(t, "extremes.json", &cases)
	require.NotEmpty(t, cases.Cases)
	for _, c := range cases.Cases {
		t.Run(c.Name, func(t *testing.T) {
			seed := parseUint(t, c.Seed)
			cfg := createDefaultConfig().(*Config)
			cfg.Seed, cfg.MaxCount = seed, max(cfg.MaxCount, c.K)
			var views *dataSourceViews
			records := make([]rec, 0, len(c.Records))
			dataSourceOfID := map[string]string{}
			for i, r := range c.Records {
				out := rec{
					step: 1, id: r.SampleID, source: fmt.Sprintf("s%d", i%2), keyVersion: keyVersionMix, count: int64(c.K),
					dataSource: r.DataSource, sampleBy: r.SampleBy, score: vectorScore(t, r.Score),
				}
				if c.K == 0 {
					out.count = zeroCount
				}
				if r.SampleKey != "" {
					out.hasKey, out.key = true, int64(parseUint(t, r.SampleKey))
				}
				if r.Extremes != nil {
					out.extremes = *r.Extremes
				}
				records = append(records, out)
				dataSourceOfID[r.SampleID] = r.DataSource

				lr := appendRec(plog.NewLogRecordSlice(), out)
				gen, reason := parseGeneration(lr.Attributes(), cfg)
				require.Empty(t, reason)
				if views == nil {
					views = newDataSourceViews(gen.k, gen.byDataSource).withExtremes(gen.extremes)
				}
				views.ask(gen.byDataSource)
				views.askExtremes(gen.extremes)
				views.offer(gen, func() keptRecord { return keptRecord{resourceSchema: r.SampleID} })
			}
			require.Equal(t, c.N, views.n, "n")
			got := [][]any{}
			for _, e := range views.ranked() {
				slots := []any{}
				if views.n > 0 {
					for _, name := range e.slots.names() {
						slots = append(slots, name)
					}
				}
				got = append(got, []any{e.item.resourceSchema, slots})
			}
			require.Equal(t, c.Expected, got, "dataSourceViews")
			require.Len(t, got, views.keptCount())

			for _, split := range []bool{false, true} {
				h := newHarness(t, func(cfg *Config) { cfg.Seed = seed; cfg.MaxCount = max(cfg.MaxCount, c.K) })
				h.consumeWholeOrSplit(t, records, split)
				require.NoError(t, h.p.Shutdown(context.Background()))
				out := collect(h.sink)
				require.Equal(t, expectedWithSlots(c.Expected), rankedIDsAndSlots(t, out.kept), "processor, split %v", split)
				require.Len(t, out.summaries, 1)
				s := out.summaries[0]
				n, ok := s.Attributes().Get(attrExtremes)
				if c.N > 0 {
					require.True(t, ok, "valgen.extremes")
					assert.Equal(t, int64(c.N), n.Int())
				} else {
					assert.False(t, ok, "no valgen.extremes when n is 0")
				}
				assert.Equal(t, int64(len(c.Expected)), intOf(t, s, attrKept))
				assert.Equal(t, intOf(t, s, attrSeen), intOf(t, s, attrKept)+intOf(t, s, attrDropped))
				assert.Equal(t, int64(0), intOf(t, s, attrDroppedInvalid))
				if _, byDataSource := s.Attributes().Get(attrSampleBy); byDataSource {
					want := map[string]int64{}
					for _, e := range c.Expected {
						want[dataSourceOfID[e[0].(string)]]++
					}
					assert.Equal(t, want, keptByDataSource(t, s), "every kept record, extremes included")
				}
			}
		})
	}
}

// TestScoreRank checks scoreRank against otel_valgen.sampling.score_rank's values: monotonic
// over the finite doubles, and -0.0 is 0.0.
func TestScoreRank(t *testing.T) {
	want := []struct {
		score float64
		rank  uint64
	}{
		{-1e308, 8500377982089055},
		{-2.5, 4610560118520545279},
		{-5e-324, 9223372036854775806},
		{math.Copysign(0, -1), 9223372036854775808},
		{0, 9223372036854775808},
		{5e-324, 9223372036854775809},
		{0.1, 13815242216921733530},
		{1.0, 13830554455654793216},
		{1e308, 18438243695727462560},
	}
	for i, w := range want {
		assert.Equal(t, w.rank, scoreRank(w.score), "%v", w.score)
		if i > 0 {
			assert.LessOrEqual(t, scoreRank(want[i-1].score), scoreRank(w.score))
		}
	}
	assert.Equal(t, ^scoreRank(0.5), math.MaxUint64-scoreRank(0.5), "the highest's rank is 2^64-1 - rank")
}

// scoredRec is a validation generation of step 1 asking for k (0 included) and n extremes, with
// a score (see rec.score).
func scoredRec(source, id string, k, n int64, score any) rec {
	r := rec{step: 1, id: id, source: source, count: k, keyVersion: keyVersionMix, extremes: n, score: score}
	if k == 0 {
		r.count = zeroCount
	}
	return r
}

// TestExtremesAttributesAreNeverInvalid checks that a valgen.extremes that is not an int >= 0
// asks for 0 (the group keeps no extremes) and that a score that is not a finite double or int
// is no score, without making any record invalid; an int score counts as its double.
func TestExtremesAttributesAreNeverInvalid(t *testing.T) {
	for name, edit := range map[string]func(plog.LogRecord){
		"a string":   func(lr plog.LogRecord) { lr.Attributes().PutStr(attrExtremes, "2") },
		"a double":   func(lr plog.LogRecord) { lr.Attributes().PutDouble(attrExtremes, 2) },
		"negative":   func(lr plog.LogRecord) { lr.Attributes().PutInt(attrExtremes, -1) },
		"absent":     func(lr plog.LogRecord) { lr.Attributes().Remove(attrExtremes) },
		"explicit 0": func(lr plog.LogRecord) { lr.Attributes().PutInt(attrExtremes, 0) },
	} {
		t.Run("extremes "+name, func(t *testing.T) {
			h := newHarness(t, nil)
			ld := logsOf(scoredRec("a", "x/0", 1, 2, 0.5), scoredRec("a", "x/1", 1, 2, 0.9), scoredRec("a", "x/2", 1, 2, 0.1))
			edit(ld.ResourceLogs().At(1).ScopeLogs().At(0).LogRecords().At(0))
			h.consume(t, ld)
			require.NoError(t, h.p.Shutdown(context.Background()))
			out := collect(h.sink)
			require.Len(t, out.summaries, 1)
			require.Len(t, out.kept, 1, "the keyed pick only")
			_, ok := out.kept[0].Attributes().Get(attrSlots)
			assert.False(t, ok)
			_, ok = out.summaries[0].Attributes().Get(attrExtremes)
			assert.False(t, ok)
			assert.Equal(t, int64(0), intOf(t, out.summaries[0], attrDroppedInvalid))
		})
	}

	h := newHarness(t, nil)
	h.consume(t, logsOf(
		scoredRec("a", "s/0", 0, 1, "9"),        // a string: no score
		scoredRec("a", "s/1", 0, 1, true),       // a bool: no score
		scoredRec("a", "s/2", 0, 1, math.NaN()), // not finite: no score
		scoredRec("a", "s/3", 0, 1, math.Inf(1)),
		scoredRec("a", "s/4", 0, 1, nil),
		scoredRec("a", "s/5", 0, 1, int64(3)), // an int: 3.0, the highest
		scoredRec("a", "s/6", 0, 1, 2.5),
		scoredRec("a", "s/7", 0, 1, -1.5), // the lowest
	))
	require.NoError(t, h.p.Shutdown(context.Background()))
	out := collect(h.sink)
	require.Len(t, out.summaries, 1)
	assert.Equal(t, [][]any{{"s/7", []any{slotLowest}}, {"s/5", []any{slotHighest}}}, rankedIDsAndSlots(t, out.kept))
	assert.Equal(t, int64(0), intOf(t, out.summaries[0], attrDroppedInvalid))
	assert.Equal(t, int64(1), intOf(t, out.summaries[0], attrExtremes))
	assert.Equal(t, int64(0), intOf(t, out.summaries[0], attrSampleCount))
}

// TestExtremesIgnoredByRollouts checks that a rollout group ignores valgen.extremes: the same
// kept records as without it, no valgen.slots, no valgen.extremes on the summary.
func TestExtremesIgnoredByRollouts(t *testing.T) {
	var plain, asking []rec
	for p := range 6 {
		for i := range 2 {
			r := rolloutRec("a", fmt.Sprintf("p%d", p), fmt.Sprintf("p%d/%d", p, i), -1, -1, 2)
			plain = append(plain, r)
			r.extremes, r.score = 3, float64(p*2+i)/10
			asking = append(asking, r)
		}
	}
	run := func(records []rec) output {
		h := newHarness(t, nil)
		h.consume(t, logsOf(records...))
		require.NoError(t, h.p.Shutdown(context.Background()))
		return collect(h.sink)
	}
	want, got := run(plain), run(asking)
	require.Len(t, got.summaries, 1)
	assert.Equal(t, ids(want.kept), ids(got.kept))
	assert.Len(t, got.kept, 4, "2 prompts of 2 responses")
	for _, lr := range got.kept {
		_, ok := lr.Attributes().Get(attrSlots)
		assert.False(t, ok)
	}
	_, ok := got.summaries[0].Attributes().Get(attrExtremes)
	assert.False(t, ok)
	assert.Equal(t, intOf(t, want.summaries[0], attrKept), intOf(t, got.summaries[0], attrKept))
}

// TestExtremesBalanceAndFigures checks, on a group split by data source over two sources that
// end, that the extreme-only records are kept records everywhere: valgen.kept, the balance
// (seen = kept + dropped, the rest sampled), each source's kept figure and each data source's.
func TestExtremesBalanceAndFigures(t *testing.T) {
	h := newHarness(t, nil)
	var records []rec
	for _, source := range []string{"a", "b"} {
		for _, dataSource := range []string{"x", "y"} {
			for i := range 5 {
				r := scoredRec(source, fmt.Sprintf("%s-%s/%d", source, dataSource, i), 1, 1, float64(i))
				r.dataSource, r.sampleBy = dataSource, sampleByDataSource
				records = append(records, r)
			}
		}
	}
	h.consume(t, logsOf(append(records, endRec(1, "a", 12, 10, 2), endRec(1, "b", 10, 10, 2))...))
	out := collect(h.sink)
	require.Len(t, out.summaries, 1)
	s := out.summaries[0]
	kept := int64(len(out.kept))
	assert.LessOrEqual(t, kept, int64(6), "per data source one keyed, one lowest, one highest")
	assert.GreaterOrEqual(t, kept, int64(4), "per data source the lowest (0) and the highest (4) differ")
	assert.Equal(t, kept, intOf(t, s, attrKept))
	assert.Equal(t, int64(22), intOf(t, s, attrSeen))
	assert.Equal(t, intOf(t, s, attrSeen), kept+intOf(t, s, attrDropped))
	assert.Equal(t, 22-kept, intOf(t, s, attrDroppedSampled))
	var bySource int64
	for _, raw := range sliceOf(t, s, attrSourceFigures) {
		bySource += raw.(map[string]any)[figureKept].(int64)
	}
	assert.Equal(t, kept, bySource)
	byDataSource := keptByDataSource(t, s)
	assert.Equal(t, kept, byDataSource["x"]+byDataSource["y"])
	for _, lr := range out.kept {
		v, ok := lr.Attributes().Get(attrSlots)
		require.True(t, ok)
		assert.Positive(t, v.Slice().Len())
	}
}

// TestExtremesShrinkAndJoin checks on the sample that a smaller n shrinks the lowest and the
// highest of every view, that a later view starts with it, and that a join merges the views'
// extremes into those of the union; n = 0 turns them off.
func TestExtremesShrinkAndJoin(t *testing.T) {
	views := newDataSourceViews(0, true).withExtremes(3)
	offer := func(dataSource string, key uint64, score float64) bool {
		id := fmt.Sprintf("%s/%d", dataSource, key)
		order := sortKey{key: key, id: id}
		return views.offer(generation{order: order, prompt: order, dataSource: dataSource, score: score, scored: true},
			func() keptRecord { return keptRecord{resourceSchema: id} })
	}
	idsOfRanked := func() []string {
		var out []string
		for _, e := range views.ranked() {
			out = append(out, e.item.resourceSchema)
		}
		return out
	}
	for i := range uint64(6) {
		offer("x", i, float64(i))
		offer("y", i+10, float64(i)+0.5)
	}
	require.Equal(t, 12, views.keptCount(), "3 lowest and 3 highest of each")
	views.askExtremes(2)
	assert.Equal(t, []string{"x/0", "x/1", "x/5", "x/4", "y/10", "y/11", "y/15", "y/14"}, idsOfRanked())
	assert.False(t, offer("x", 7, 2), "n is 2 now")
	views.ask(false)
	assert.Equal(t, []string{"x/0", "y/10", "y/15", "x/5"}, idsOfRanked(), "the extremes of the union")
	assert.Equal(t, 4, views.keptCount())
	views.askExtremes(0)
	assert.Empty(t, idsOfRanked())
	assert.False(t, offer("x", 8, -1), "off for good")
	views.askExtremes(5)
	assert.Equal(t, 0, views.n)
}

// TestStorageKeepsExtremes stores a group with extremes, restarts (memory and file storage), and
// checks that it comes back with n and its lowest and highest, then closes as one process that
// never restarted would have, over the records sent before and after (which ask for a smaller n).
func TestStorageKeepsExtremes(t *testing.T) {
	var partA, partB []rec
	for i := range 12 {
		partA = append(partA, scoredRec("a", fmt.Sprintf("a/%d", i), 2, 3, float64((i*7)%12)/4))
		partB = append(partB, scoredRec("b", fmt.Sprintf("b/%d", i), 2, 2, float64((i*5)%12)/4-0.1))
	}
	all := append(append(append([]rec{}, partA...), endRec(1, "a", 12, 12, 2)), append(partB, endRec(1, "b", 12, 12, 2))...)
	ref := newHarness(t, nil)
	ref.consume(t, logsOf(all...))
	want := collect(ref.sink)
	require.Len(t, want.summaries, 1)

	for _, backend := range []string{"memory", "file_storage"} {
		t.Run(backend, func(t *testing.T) {
			dir := t.TempDir()
			var ext extension.Extension = newMemStorage()
			if backend == "file_storage" {
				ext = newFileStorage(t, dir)
			}
			first := startStored(t, ext, newFakeClock().Now(), nil)
			first.consume(t, logsOf(append(partA, endRec(1, "a", 12, 12, 2))...))
			var before *group
			for _, before = range first.p.groups {
			}
			require.Equal(t, 3, before.kept.n)
			ranked := before.kept.ranked()
			kill(first)
			if backend == "file_storage" {
				require.NoError(t, ext.Shutdown(context.Background()))
				ext = newFileStorage(t, dir)
			}

			second := startStored(t, ext, first.clock.Now(), nil)
			require.Contains(t, second.p.groups, before.key)
			back := second.p.groups[before.key]
			assert.Equal(t, 3, back.kept.n, "n after the restart")
			backRanked := back.kept.ranked()
			require.Len(t, backRanked, len(ranked))
			for i := range ranked {
				assert.Equal(t, ranked[i].order, backRanked[i].order)
				assert.Equal(t, ranked[i].slots, backRanked[i].slots)
			}
			second.consume(t, logsOf(append(partB, endRec(1, "b", 12, 12, 2))...))
			require.NoError(t, second.p.Shutdown(context.Background()))
			got := collect(second.sink)
			require.Len(t, got.summaries, 1)
			assert.Equal(t, rankedIDsAndSlots(t, want.kept), rankedIDsAndSlots(t, got.kept))
			assert.Equal(t, int64(2), intOf(t, got.summaries[0], attrExtremes))
			for _, name := range []string{attrKept, attrSeen, attrDropped, attrDroppedSampled} {
				assert.Equal(t, intOf(t, want.summaries[0], name), intOf(t, got.summaries[0], name), name)
			}
			require.NoError(t, ext.Shutdown(context.Background()))
		})
	}
}

// TestStoredExtremesState checks the stored n: a group stored before extremes existed (no
// extremes in its header) loads with n = 0, and an n that does not parse, or one on a rollout
// group or before the first generation, is corrupt state; so are stored records that neither
// the keyed picks nor the extremes keep.
func TestStoredExtremesState(t *testing.T) {
	h := newHarness(t, nil)
	var records []rec
	for i := range 8 {
		records = append(records, scoredRec("a", fmt.Sprintf("x/%d", i), 2, 2, float64(i)))
	}
	h.consume(t, logsOf(records...))
	var g *group
	for _, g = range h.p.groups {
	}
	data, err := encodeGroup(g)
	require.NoError(t, err)
	back, _, err := decodeGroup(data)
	require.NoError(t, err)
	assert.Equal(t, 2, back.kept.n)
	assert.Equal(t, g.kept.keptCount(), back.kept.keptCount())
	assert.Equal(t, g.kept.ranked(), back.kept.ranked())

	edit := func(t *testing.T, data []byte, change func(header pcommon.Map)) (*group, error) {
		t.Helper()
		ld, err := (&plog.ProtoUnmarshaler{}).UnmarshalLogs(data)
		require.NoError(t, err)
		change(ld.ResourceLogs().At(0).ScopeLogs().At(0).LogRecords().At(0).Attributes())
		edited, err := (&plog.ProtoMarshaler{}).MarshalLogs(ld)
		require.NoError(t, err)
		g, _, err := decodeGroup(edited)
		return g, err
	}
	t.Run("stored before extremes", func(t *testing.T) {
		old := newHarness(t, nil)
		asked := records[:3] // an older sampler kept them all as keyed picks, with their attributes
		old.consume(t, logsOf(asked...))
		var g *group
		for _, g = range old.p.groups {
		}
		g.kept.askExtremes(0)
		g.kept.shrink(2)
		data, err := encodeGroup(g)
		require.NoError(t, err)
		_, ok := (func() (pcommon.Value, bool) {
			ld, err := (&plog.ProtoUnmarshaler{}).UnmarshalLogs(data)
			require.NoError(t, err)
			return ld.ResourceLogs().At(0).ScopeLogs().At(0).LogRecords().At(0).Attributes().Get(stateAttrExtremes)
		})()
		require.False(t, ok, "n = 0 is not stored: the header of an older release")
		loaded, _, err := decodeGroup(data)
		require.NoError(t, err)
		assert.Equal(t, 0, loaded.kept.n)
		assert.Equal(t, 2, loaded.kept.keptCount())
		assert.Empty(t, loaded.kept.extremes)
	})
	for name, change := range map[string]func(header pcommon.Map){
		"not an int":             func(h pcommon.Map) { h.PutStr(stateAttrExtremes, "2") },
		"negative":               func(h pcommon.Map) { h.PutInt(stateAttrExtremes, -1) },
		"on a rollout group":     func(h pcommon.Map) { h.PutStr(stateAttrKind, kindRollout) },
		"fewer than the records": func(h pcommon.Map) { h.PutInt(stateAttrExtremes, 1) },
		"absent with extremes":   func(h pcommon.Map) { h.Remove(stateAttrExtremes) },
	} {
		t.Run(name, func(t *testing.T) {
			_, err := edit(t, data, change)
			require.ErrorIs(t, err, errCorruptState)
		})
	}
	t.Run("before the first generation", func(t *testing.T) {
		h := newHarness(t, nil)
		h.consume(t, logsOf(rec{event: eventStart, step: 1, source: "a"}))
		var g *group
		for _, g = range h.p.groups {
		}
		data, err := encodeGroup(g)
		require.NoError(t, err)
		_, err = edit(t, data, func(h pcommon.Map) { h.PutInt(stateAttrExtremes, 2) })
		require.ErrorIs(t, err, errCorruptState)
	})
}
