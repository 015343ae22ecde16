// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/extension"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
)

type dataSourceCases struct {
	Cases []struct {
		Name    string `json:"name"`
		Kind    string `json:"kind"`
		K       int    `json:"k"`
		Seed    string `json:"seed"`
		Records []struct {
			SampleID   string `json:"sample_id"`
			SampleKey  string `json:"sample_key"`
			PromptID   string `json:"prompt_id"`
			PromptKey  string `json:"prompt_key"`
			DataSource string `json:"data_source"`
			SampleBy   string `json:"sample_by"`
		} `json:"records"`
		Expected                 []string         `json:"expected"`
		Split                    bool             `json:"split"`
		ExpectedKeptByDataSource map[string]int64 `json:"expected_kept_by_data_source"`
	} `json:"cases"`
}

// dataSourcesOf returns a summary's valgen.data_sources by data source, nil when absent.
func dataSourcesOf(t *testing.T, s plog.LogRecord) map[string]map[string]any {
	t.Helper()
	if _, ok := s.Attributes().Get(attrDataSources); !ok {
		return nil
	}
	out := map[string]map[string]any{}
	for _, raw := range sliceOf(t, s, attrDataSources) {
		entry := raw.(map[string]any)
		out[entry[figureDataSource].(string)] = entry
	}
	return out
}

// keptByDataSource is the "kept" of each entry of a summary's valgen.data_sources.
func keptByDataSource(t *testing.T, s plog.LogRecord) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for name, entry := range dataSourcesOf(t, s) {
		out[name] = entry[figureKept].(int64)
	}
	return out
}

// TestDataSourceVectors checks the shared k-per-data-source cases on the group's sample and
// through the processor, whole and split over two sources: the ranked ids, whether the group is
// split, and on the summary valgen.sample_by and the kept records of each data source.
func TestDataSourceVectors(t *testing.T) {
	var cases dataSourceCases
	readJSON(t, "data_source.json", &cases)
	require.NotEmpty(t, cases.Cases)
	for _, c := range cases.Cases {
		t.Run(c.Name, func(t *testing.T) {
			seed := parseUint(t, c.Seed)
			rollout := c.Kind == kindRollout
			var views *dataSourceViews
			records := make([]rec, 0, len(c.Records))
			for i, r := range c.Records {
				gen := generation{
					order:        sortKey{key: sampleKey(keyVersionMix, seed, r.SampleID), id: r.SampleID},
					dataSource:   r.DataSource,
					byDataSource: r.SampleBy == sampleByDataSource,
				}
				key, promptKey := int64(-1), int64(-1)
				if r.SampleKey != "" {
					gen.order.key = parseUint(t, r.SampleKey)
					key = int64(gen.order.key)
				}
				gen.prompt = gen.order
				if rollout {
					gen.prompt = sortKey{key: sampleKey(keyVersionMix, seed, r.PromptID), id: r.PromptID}
					if r.PromptKey != "" {
						gen.prompt.key = parseUint(t, r.PromptKey)
						promptKey = int64(gen.prompt.key)
					}
				}
				if views == nil {
					views = newDataSourceViews(c.K, gen.byDataSource)
				}
				views.ask(gen.byDataSource)
				views.offer(gen, func() keptRecord { return keptRecord{resourceSchema: r.SampleID} })

				source := fmt.Sprintf("s%d", i%2)
				var out rec
				if rollout {
					out = rolloutRec(source, r.PromptID, r.SampleID, key, promptKey, int64(c.K))
				} else {
					out = rec{step: 1, id: r.SampleID, source: source, keyVersion: keyVersionMix, count: int64(c.K)}
					out.hasKey, out.key = key >= 0, key
					if c.K == 0 {
						out.count = zeroCount
					}
				}
				out.dataSource, out.sampleBy = r.DataSource, r.SampleBy
				records = append(records, out)
			}
			got := []string{}
			for _, e := range views.sorted() {
				got = append(got, e.item.resourceSchema)
			}
			require.Equal(t, c.Expected, got, "dataSourceViews")
			require.Equal(t, c.Split, views.split, "split")

			for _, split := range []bool{false, true} {
				h := newHarness(t, func(cfg *Config) { cfg.Seed = seed; cfg.MaxCount = max(cfg.MaxCount, c.K) })
				h.consumeWholeOrSplit(t, records, split)
				require.NoError(t, h.p.Shutdown(context.Background()))
				out := collect(h.sink)
				require.Equal(t, c.Expected, nonNil(ids(out.kept)), "processor, split %v", split)
				for i, lr := range out.kept {
					assert.Equal(t, int64(i+1), intOf(t, lr, attrRank))
				}
				require.Len(t, out.summaries, 1)
				s := out.summaries[0]
				sampleBy, ok := s.Attributes().Get(attrSampleBy)
				if c.Split {
					require.True(t, ok, "valgen.sample_by")
					assert.Equal(t, sampleByDataSource, sampleBy.Str())
					assert.Equal(t, c.ExpectedKeptByDataSource, keptByDataSource(t, s), "processor, split %v", split)
				} else {
					assert.False(t, ok, "a joined group is sampled per step")
					assert.Nil(t, dataSourcesOf(t, s), "no data source figures to report")
				}
			}
		})
	}
}

// dataSourceRecs returns n split generations of step 1 of one data source from one source,
// ids "<source>-<dataSource>/<i>", of key version 2.
func dataSourceRecs(source, dataSource string, n int, k int64) []rec {
	out := make([]rec, 0, n)
	for i := range n {
		out = append(out, rec{
			step: 1, id: fmt.Sprintf("%s-%s/%d", source, dataSource, i), source: source, count: k,
			keyVersion: keyVersionMix, dataSource: dataSource, sampleBy: sampleByDataSource,
		})
	}
	return out
}

// idsOf lists the ids of records.
func idsOf(records ...[]rec) []string {
	var out []string
	for _, list := range records {
		for _, r := range list {
			out = append(out, r.id)
		}
	}
	return out
}

// figure is one raw entry of valgen.data_sources, scored when count >= 0.
func figure(dataSource string, seen, count int64, sum float64) map[string]any {
	m := map[string]any{figureDataSource: dataSource, figureSeen: seen}
	if count >= 0 {
		m[figureScoreCount], m[figureScoreSum] = count, sum
	}
	return m
}

// TestSummaryDataSourceFigures checks the summary's valgen.data_sources from the end records:
// each data source's seen and score statistics added over the sources, the mean, the kept
// records, a data source that only kept records name, and a repeated end record whose figures
// are those of the one with the largest valgen.seen (a tie: the later one).
func TestSummaryDataSourceFigures(t *testing.T) {
	h := newHarness(t, nil)
	a := append(dataSourceRecs("a", "gsm8k", 3, 2), dataSourceRecs("a", "math", 2, 2)...)
	b := append(dataSourceRecs("b", "gsm8k", 2, 2), dataSourceRecs("b", "zeta", 1, 2)...)
	end := func(source string, seen, emitted int64, figures ...any) rec {
		r := endRec(1, source, seen, emitted, 2)
		r.dataSources = figures
		return r
	}
	h.consume(t, logsOf(append(a, b...)...))
	h.consume(t, logsOf(
		end("a", 8, 5, figure("gsm8k", 1, 1, 9), figure("ghost", 1, -1, 0)),
		end("a", 10, 5, figure("gsm8k", 2, 2, 9), figure("ghost", 1, -1, 0)),
		end("a", 9, 5, figure("gsm8k", 3, 3, 9)),                              // a smaller seen: ignored
		end("a", 10, 5, figure("gsm8k", 6, 6, 3.0), figure("math", 4, -1, 0)), // a tie: the later one
		end("b", 3, 3, figure("gsm8k", 3, 2, 0.5)),
	))
	out := collect(h.sink)
	require.Len(t, out.summaries, 1, "both sources ended with sources_expected 2")
	s := out.summaries[0]
	assert.Equal(t, sampleByDataSource, strOf(t, s, attrSampleBy))
	got := dataSourcesOf(t, s)
	assert.Equal(t, map[string]map[string]any{
		"gsm8k": {figureDataSource: "gsm8k", figureSeen: int64(9), figureKept: int64(2),
			figureScoreCount: int64(8), figureScoreSum: 3.5, figureScoreMean: 3.5 / 8},
		"math": {figureDataSource: "math", figureSeen: int64(4), figureKept: int64(2)},
		"zeta": {figureDataSource: "zeta", figureSeen: int64(0), figureKept: int64(1)},
	}, got)
	var names []string
	for _, raw := range sliceOf(t, s, attrDataSources) {
		names = append(names, raw.(map[string]any)[figureDataSource].(string))
	}
	assert.Equal(t, []string{"gsm8k", "math", "zeta"}, names, "sorted by data source")
	assert.Equal(t, int64(5), intOf(t, s, attrKept))
}

// TestDataSourceFiguresOfAStepSampledPerStep checks that a group kept per step reports its
// sources' valgen.data_sources (with the kept records of each data source) without
// valgen.sample_by, and that malformed entries, or a valgen.data_sources that is not an array,
// are left out without dropping the end record, read as otel_valgen.data_sources.parse_figures
// reads them.
func TestDataSourceFiguresOfAStepSampledPerStep(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Count = 10 })
	gens := []rec{
		{step: 1, id: "a/0", source: "a", dataSource: "gsm8k"},
		{step: 1, id: "a/1", source: "a", dataSource: "math", sampleBy: "step"},
		{step: 1, id: "b/0", source: "b"},
	}
	endA := endRec(1, "a", 2, 2, 2)
	endA.dataSources = []any{
		figure("gsm8k", 1, 1, 0.5),
		"not a map",                                // left out
		map[string]any{figureSeen: int64(1)},       // no data source: left out
		map[string]any{figureDataSource: int64(7)}, // a data source that is not a string: left out
		map[string]any{figureDataSource: "math", figureSeen: "1", figureScoreCount: int64(1)}, // seen 0, no statistics
		figure("math", 2, -1, 0), // a second entry of math: added
	}
	ld := logsOf(append(gens, endA, endRec(1, "b", 1, 1, 2))...)
	last := ld.ResourceLogs().At(ld.ResourceLogs().Len() - 1)
	last.ScopeLogs().At(0).LogRecords().At(0).Attributes().PutStr(attrDataSources, "gsm8k") // not an array
	h.consume(t, ld)

	out := collect(h.sink)
	require.Len(t, out.summaries, 1)
	s := out.summaries[0]
	_, split := s.Attributes().Get(attrSampleBy)
	assert.False(t, split)
	assert.Equal(t, int64(2), intOf(t, s, attrSourcesEnded))
	assert.Equal(t, int64(0), intOf(t, s, attrDroppedInvalid))
	assert.Equal(t, map[string]map[string]any{
		"":      {figureDataSource: "", figureSeen: int64(0), figureKept: int64(1)},
		"gsm8k": {figureDataSource: "gsm8k", figureSeen: int64(1), figureKept: int64(1), figureScoreCount: int64(1), figureScoreSum: 0.5, figureScoreMean: 0.5},
		"math":  {figureDataSource: "math", figureSeen: int64(2), figureKept: int64(1)},
	}, dataSourcesOf(t, s))

	plain := newHarness(t, nil)
	plain.consume(t, logsOf(append(stepRecords(1, "a", 2, 0), endRec(1, "a", 2, 2, 1))...))
	out = collect(plain.sink)
	require.Len(t, out.summaries, 1)
	assert.Nil(t, dataSourcesOf(t, out.summaries[0]), "neither split nor reported: no valgen.data_sources")
}

// TestDataSourceJoinRule checks the join through the processor: a split group that gets a
// generation asking for k per step, in a later batch, keeps the bottom-k of the whole group from
// then on; a group whose first generation asks per step (or carries a valgen.sample_by that is
// not a string, which is not invalid) never splits.
func TestDataSourceJoinRule(t *testing.T) {
	const k = 2
	x, y := dataSourceRecs("a", "x", 5, k), dataSourceRecs("a", "y", 5, k)
	h := newHarness(t, nil)
	h.consume(t, logsOf(append(x, y...)...))
	require.Len(t, h.p.groups, 1)
	var g *group
	for _, g = range h.p.groups {
	}
	require.True(t, g.kept.split)
	require.Equal(t, 2*k, g.kept.len(), "k per data source")

	plain := rec{step: 1, id: "a-plain/0", source: "a", count: k, keyVersion: keyVersionMix, dataSource: "x"}
	h.consume(t, logsOf(plain))
	require.False(t, g.kept.split, "joined")
	all := append(idsOf(x, y), plain.id)
	require.Equal(t, k, g.kept.len())
	later := dataSourceRecs("a", "z", 3, k)
	h.consume(t, logsOf(later...))
	require.False(t, g.kept.split, "joined for good")
	require.NoError(t, h.p.Shutdown(context.Background()))
	out := collect(h.sink)
	require.Len(t, out.summaries, 1)
	assert.Equal(t, referenceBottomK(keyVersionMix, defaultSeed, append(all, idsOf(later)...), k), ids(out.kept))
	_, ok := out.summaries[0].Attributes().Get(attrSampleBy)
	assert.False(t, ok)

	for name, first := range map[string]func(plog.LogRecord){
		"per step":     func(lr plog.LogRecord) { lr.Attributes().PutStr(attrSampleBy, "step") },
		"not a string": func(lr plog.LogRecord) { lr.Attributes().PutInt(attrSampleBy, 1) },
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, nil)
			ld := logsOf(x[0])
			first(ld.ResourceLogs().At(0).ScopeLogs().At(0).LogRecords().At(0))
			h.consume(t, ld)
			h.consume(t, logsOf(append(x[1:], y...)...))
			require.NoError(t, h.p.Shutdown(context.Background()))
			out := collect(h.sink)
			require.Len(t, out.summaries, 1)
			assert.Equal(t, referenceBottomK(keyVersionMix, defaultSeed, idsOf(x, y), k), ids(out.kept))
			assert.Equal(t, int64(0), intOf(t, out.summaries[0], attrDroppedInvalid))
			_, ok := out.summaries[0].Attributes().Get(attrSampleBy)
			assert.False(t, ok, "never split")
		})
	}
}

// TestSourceFiguresCarryDataSources checks that valgen.source_figures lists the data source
// figures of a source's end records (what partials.py merges), only for a source that sent them.
func TestSourceFiguresCarryDataSources(t *testing.T) {
	h := newHarness(t, nil)
	endA := endRec(1, "a", 3, 0, 2)
	endA.dataSources = []any{figure("math", 1, -1, 0), figure("gsm8k", 2, 2, 1.5)}
	h.consume(t, logsOf(endA, endRec(1, "b", 1, 0, 2)))
	out := collect(h.sink)
	require.Len(t, out.summaries, 1)
	figures := map[string]map[string]any{}
	for _, raw := range sliceOf(t, out.summaries[0], attrSourceFigures) {
		f := raw.(map[string]any)
		figures[f[figureSource].(string)] = f
	}
	assert.Equal(t, endA.dataSources, figures["a@i-a"][figureDataSources], "the end record's figures")
	assert.NotContains(t, figures["b@i-b"], figureDataSources)
}

// TestStorageKeepsASplitGroupSplit stores a split group with a source's data source figures,
// restarts (memory and file storage), and checks that the group comes back split with them, then
// closes with k per data source over the records sent before and after the restart.
func TestStorageKeepsASplitGroupSplit(t *testing.T) {
	const k = 2
	partA := append(dataSourceRecs("a", "x", 4, k), dataSourceRecs("a", "y", 3, k)...)
	endA := endRec(1, "a", 7, 7, 2)
	endA.dataSources = []any{figure("x", 4, 4, 2.0), figure("y", 3, -1, 0)}
	partB := append(dataSourceRecs("b", "x", 4, k), dataSourceRecs("b", "y", 1, k)...)
	endB := endRec(1, "b", 5, 5, 2)
	endB.dataSources = []any{figure("x", 4, 4, 1.0), figure("y", 1, -1, 0)}

	for _, backend := range []string{"memory", "file_storage"} {
		t.Run(backend, func(t *testing.T) {
			dir := t.TempDir()
			var ext extension.Extension = newMemStorage()
			if backend == "file_storage" {
				ext = newFileStorage(t, dir)
			}
			first := startStored(t, ext, newFakeClock().Now(), nil)
			first.consume(t, logsOf(append(partA, endA)...))
			var before *group
			for _, before = range first.p.groups {
			}
			kill(first)
			if backend == "file_storage" {
				require.NoError(t, ext.Shutdown(context.Background()))
				ext = newFileStorage(t, dir)
			}

			second := startStored(t, ext, first.clock.Now(), nil)
			require.Contains(t, second.p.groups, before.key)
			back := second.p.groups[before.key]
			require.True(t, back.kept.split, "split after the restart")
			assert.Equal(t, before.sources, back.sources, "with the data source figures")
			second.consume(t, logsOf(append(partB, endB)...))
			require.NoError(t, second.p.Shutdown(context.Background()))
			out := collect(second.sink)
			require.Len(t, out.summaries, 1)
			s := out.summaries[0]
			assert.Equal(t, closedComplete, strOf(t, s, attrClosedReason))
			assert.Equal(t, sampleByDataSource, strOf(t, s, attrSampleBy))
			want := append(
				referenceBottomK(keyVersionMix, defaultSeed, idsOf(partA[:4], partB[:4]), k),
				referenceBottomK(keyVersionMix, defaultSeed, idsOf(partA[4:], partB[4:]), k)...)
			assert.Equal(t, want, ids(out.kept))
			assert.Equal(t, map[string]map[string]any{
				"x": {figureDataSource: "x", figureSeen: int64(8), figureKept: int64(k),
					figureScoreCount: int64(8), figureScoreSum: 3.0, figureScoreMean: 3.0 / 8},
				"y": {figureDataSource: "y", figureSeen: int64(4), figureKept: int64(k)},
			}, dataSourcesOf(t, s))
			require.NoError(t, ext.Shutdown(context.Background()))
		})
	}
}

// TestStoredDataSourceState checks the stored split flag and data source figures: a group
// stored before they existed (no sample_by) loads kept per step, and a sample_by or data source
// figures that do not parse are corrupt state.
func TestStoredDataSourceState(t *testing.T) {
	h := newHarness(t, nil)
	records := append(dataSourceRecs("a", "x", 4, 2), dataSourceRecs("a", "y", 4, 2)...)
	endA := endRec(1, "a", 8, 0, 0)
	endA.dataSources = []any{figure("x", 4, -1, 0)}
	h.consume(t, logsOf(append(records, endA)...))
	var g *group
	for _, g = range h.p.groups {
	}
	data, err := encodeGroup(g)
	require.NoError(t, err)
	back, _, err := decodeGroup(data)
	require.NoError(t, err)
	require.True(t, back.kept.split)
	assert.Equal(t, g.sources, back.sources)
	want, got := g.kept.sorted(), back.kept.sorted()
	require.Len(t, got, 4)
	for i := range want {
		assert.Equal(t, want[i].order, got[i].order)
	}

	edit := func(t *testing.T, change func(header, source pcommon.Map)) error {
		t.Helper()
		ld, err := (&plog.ProtoUnmarshaler{}).UnmarshalLogs(data)
		require.NoError(t, err)
		header := ld.ResourceLogs().At(0).ScopeLogs().At(0).LogRecords().At(0).Attributes()
		sources, _ := header.Get(stateAttrSources)
		change(header, sources.Slice().At(0).Map())
		edited, err := (&plog.ProtoMarshaler{}).MarshalLogs(ld)
		require.NoError(t, err)
		_, _, err = decodeGroup(edited)
		return err
	}
	t.Run("stored before sample_by", func(t *testing.T) {
		ld, err := (&plog.ProtoUnmarshaler{}).UnmarshalLogs(data)
		require.NoError(t, err)
		header := ld.ResourceLogs().At(0).ScopeLogs().At(0).LogRecords().At(0).Attributes()
		header.Remove(stateAttrSampleBy)
		header.PutInt(stateAttrK, 4) // one view holds the 4 records
		edited, err := (&plog.ProtoMarshaler{}).MarshalLogs(ld)
		require.NoError(t, err)
		old, _, err := decodeGroup(edited)
		require.NoError(t, err)
		assert.False(t, old.kept.split)
		assert.Equal(t, 4, old.kept.len())
	})
	for name, change := range map[string]func(header, source pcommon.Map){
		"unknown sample_by":        func(h, _ pcommon.Map) { h.PutStr(stateAttrSampleBy, "step") },
		"more than k in a view":    func(h, _ pcommon.Map) { h.Remove(stateAttrSampleBy) },
		"data_sources not a slice": func(_, s pcommon.Map) { s.PutStr(stateAttrSourceDataSources, "x") },
		"data source without a name": func(_, s pcommon.Map) {
			v, _ := s.Get(stateAttrSourceDataSources)
			v.Slice().At(0).Map().Remove(figureDataSource)
		},
	} {
		t.Run(name, func(t *testing.T) {
			require.ErrorIs(t, edit(t, change), errCorruptState)
		})
	}
}

// TestDataSourceViewsWithRateAndShrink checks that each data source's view takes the group's
// k and rate, also a view that starts after they were lowered.
func TestDataSourceViewsWithRateAndShrink(t *testing.T) {
	views := newDataSourceViews(3, true)
	offer := func(dataSource string, key uint64) bool {
		id := fmt.Sprintf("%s/%d", dataSource, key)
		return views.offer(generation{order: sortKey{key: key, id: id}, prompt: sortKey{key: key, id: id}, dataSource: dataSource},
			func() keptRecord { return keptRecord{} })
	}
	for key := range uint64(4) {
		offer("x", key<<61)
	}
	require.Equal(t, 3, views.len())
	views.shrink(2)
	views.lowerRate(0.25) // keys below 2^61
	require.Equal(t, 1, views.len(), "x keeps its key 0 only")
	assert.False(t, offer("y", 1<<61), "a new view takes the rate")
	assert.True(t, offer("y", 1))
	assert.True(t, offer("y", 2))
	assert.False(t, offer("y", 3), "and k")
	assert.Equal(t, 3, views.len())
	views.ask(false)
	assert.Equal(t, 2, views.len(), "joined: the bottom-2 of the union")
}
