// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor // import "github.com/otel-valgen/otel-valgen/collector/valgensamplerprocessor"

import (
	"sort"

	"go.opentelemetry.io/collector/pdata/pcommon"
)

// k per (step, data source): a generation whose valgen.sample_by is "data_source" asks for k
// per data source (valgen.data_source, absent is ""). A group whose first generation asks for
// it is split: each data source keeps its own group view of the group's k and rate. The first
// later generation that does not ask joins the group for good into one group view, which is
// exact: a prompt of the bottom-k of the whole group is in the bottom-k of its data source, so
// the bottom-k of the union of the views is the group's (splitting a view kept per step would
// not be). So a group ends split when every generation of it asked. otel_valgen.sampling.
// DataSourceViews is the same rule in Python, and testdata/sampling/data_source.json the cases
// both suites check.

// dataSourceViews is a group's sample: one group view, or while split one per data source, and
// each view's ranked slots (slots.go): with extremes (validation groups, extremes.go) its n
// lowest- and n highest-scored, with the most mismatched (rollout groups, mismatched.go) its m
// responses of the largest KL.
type dataSourceViews struct {
	k     int
	rate  float64 // the rate applied to every view (stepRate), 0 for none
	split bool
	views map[string]*groupView // by data source while split, else the one view under ""
	// n is how many lowest- and highest-scored records each view keeps beside its k, m how many
	// of the largest KL (0: none); extremes holds the ranked slots under the names of views (those
	// offered a record with a figure), nil for none.
	n, m     int
	extremes map[string]*slotRanks
}

// newDataSourceViews starts the sample of a group whose first generation asks for k and, when
// split, for k per data source.
func newDataSourceViews(k int, split bool) *dataSourceViews {
	return &dataSourceViews{k: k, split: split, views: make(map[string]*groupView, 1)}
}

// parseSampleBy reads a generation's data source and whether it asks for k per data source.
// Neither makes a record invalid: a value that is not a string is "" (data source) or per step.
func parseSampleBy(attrs pcommon.Map) (dataSource string, byDataSource bool) {
	dataSource = dataSourceOf(attrs)
	if v, ok := attrs.Get(attrSampleBy); ok && v.Type() == pcommon.ValueTypeStr {
		byDataSource = v.Str() == sampleByDataSource
	}
	return dataSource, byDataSource
}

// dataSourceOf is a record's valgen.data_source, "" when absent or not a string.
func dataSourceOf(attrs pcommon.Map) string {
	if v, ok := attrs.Get(attrDataSource); ok && v.Type() == pcommon.ValueTypeStr {
		return v.Str()
	}
	return ""
}

// ask applies a later generation's valgen.sample_by: one that does not ask for k per data
// source joins a split group.
func (d *dataSourceViews) ask(byDataSource bool) {
	if d.split && !byDataSource {
		d.join()
	}
}

// join turns the views into one: the bottom-k of their union, and their ranked slots into
// those of the union.
func (d *dataSourceViews) join() {
	joined := d.newView()
	for _, name := range d.names() {
		d.views[name].each(func(prompt sortKey, response *entry[keptRecord]) {
			item := response.item
			joined.offer(generation{order: response.order, prompt: prompt}, func() keptRecord { return item })
		})
	}
	d.split = false
	d.views = map[string]*groupView{"": joined}
	if len(d.extremes) > 0 {
		extremes := newSlotRanks(d.ns())
		for _, x := range d.extremes {
			extremes.absorb(x)
		}
		d.extremes = map[string]*slotRanks{"": extremes}
	}
}

func (d *dataSourceViews) newView() *groupView {
	v := newGroupView(d.k)
	v.lowerRate(d.rate)
	return v
}

// offer offers the generation to its data source's view (the one view when not split), see
// groupView.offer, and to that view's ranked slots it has a figure for (a score with extremes, a
// KL with the most mismatched). It returns whether any keeps it; makeItem is called at most
// once, only then, and all that keep it share the item.
func (d *dataSourceViews) offer(gen generation, makeItem func() keptRecord) bool {
	name := ""
	if d.split {
		name = gen.dataSource
	}
	v, ok := d.views[name]
	if !ok {
		v = d.newView()
		d.views[name] = v
	}
	if (d.n == 0 || !gen.scored) && (d.m == 0 || !gen.hasKL) {
		return v.offer(gen, makeItem)
	}
	x, ok := d.extremes[name]
	if !ok {
		if d.extremes == nil {
			d.extremes = make(map[string]*slotRanks, 1)
		}
		x = newSlotRanks(d.ns())
		d.extremes[name] = x
	}
	f := gen.figures()
	if !x.wouldKeep(f, gen.order) { // most records: no shared item to make
		return v.offer(gen, makeItem)
	}
	var item keptRecord
	made := false
	once := func() keptRecord {
		if !made {
			item, made = makeItem(), true
		}
		return item
	}
	kept := v.offer(gen, once)
	return x.offer(f, gen.prompt, gen.order, once) || kept
}

// shrink lowers k (in prompts) in every view.
func (d *dataSourceViews) shrink(k int) {
	d.k = k
	for _, v := range d.views {
		v.shrink(k)
	}
}

// lowerRate applies a rate by stepRate to every view.
func (d *dataSourceViews) lowerRate(rate float64) {
	d.rate = stepRate(d.rate, rate)
	for _, v := range d.views {
		v.lowerRate(d.rate)
	}
}

// promptCount is how many prompts are kept, over the views.
func (d *dataSourceViews) promptCount() int {
	n := 0
	for _, v := range d.views {
		n += v.promptCount()
	}
	return n
}

// len is how many responses the views keep (the keyed picks); keptCount adds the ranked slots.
func (d *dataSourceViews) len() int {
	n := 0
	for _, v := range d.views {
		n += v.len()
	}
	return n
}

// keptCount is how many records are kept: the keyed picks and the ranked slots, each once.
func (d *dataSourceViews) keptCount() int {
	n := 0
	d.each(func(sortKey, *entry[keptRecord]) { n++ })
	return n
}

// each calls f for every kept response with its prompt's sort key, in no particular order: the
// keyed picks, then the ranked slots' records not among them, each record once (a record kept
// by several has one sort key).
func (d *dataSourceViews) each(f func(prompt sortKey, response *entry[keptRecord])) {
	if len(d.extremes) == 0 {
		for _, v := range d.views {
			v.each(f)
		}
		return
	}
	listed := make(map[sortKey]struct{}, d.len())
	for _, v := range d.views {
		v.each(func(prompt sortKey, response *entry[keptRecord]) {
			listed[response.order] = struct{}{}
			f(prompt, response)
		})
	}
	for _, x := range d.extremes {
		x.each(func(prompt sortKey, response *entry[keptRecord]) {
			if _, dup := listed[response.order]; dup {
				return
			}
			listed[response.order] = struct{}{}
			f(prompt, response)
		})
	}
}

// sorted returns the kept responses ranked: data sources ascending by the bytes of their names,
// each one's view ranked as groupView.sorted does.
func (d *dataSourceViews) sorted() []entry[keptRecord] {
	var out []entry[keptRecord]
	for _, name := range d.names() {
		out = append(out, d.views[name].sorted()...)
	}
	return out
}

// names lists the views' keys in ascending byte order.
func (d *dataSourceViews) names() []string { return sortedNames(d.views) }

// sortedNames lists a map's keys in ascending byte order.
func sortedNames[V any](m map[string]V) []string {
	names := make([]string, 0, len(m))
	for name := range m {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// Keys of one entry of valgen.data_sources (end records, summaries, the source_figures'
// data_sources and stored sources alike), besides figureSeen, figureKept (summaries only),
// figureScoreCount and figureScoreSum of partials.go.
const (
	figureDataSource = "data_source"
	figureScoreMean  = "score.mean" // summaries only
)

// dataSourceFigures is what an end record's valgen.data_sources says of one data source: the
// generations of it the source saw and their score statistics. Like valgen.seen, each end
// record of a source carries them cumulatively.
type dataSourceFigures struct {
	dataSource string
	seen       int64
	scores     scoreStats
}

// parseEndDataSources reads an end record's valgen.data_sources: nil when absent or not an
// array. A malformed entry is left out, never the end record (the figures are informational).
func parseEndDataSources(attrs pcommon.Map) []dataSourceFigures {
	v, ok := attrs.Get(attrDataSources)
	if !ok || v.Type() != pcommon.ValueTypeSlice {
		return nil
	}
	figures, _ := readDataSourceFigures(v.Slice())
	return figures
}

// readDataSourceFigures reads an array of data source figures in its order (never nil), and how
// many entries it left out: those that are not a map with a string data_source. Otherwise, as
// otel_valgen.data_sources.parse_figures reads them, a seen that is not an int >= 0 is 0, score
// statistics that parseScoreStats refuses are none, and a data source may have several entries
// (the summary adds them up).
func readDataSourceFigures(s pcommon.Slice) ([]dataSourceFigures, int) {
	figures := make([]dataSourceFigures, 0, s.Len())
	for i := 0; i < s.Len(); i++ {
		if f, ok := readDataSourceFigure(s.At(i)); ok {
			figures = append(figures, f)
		}
	}
	return figures, s.Len() - len(figures)
}

func readDataSourceFigure(v pcommon.Value) (dataSourceFigures, bool) {
	if v.Type() != pcommon.ValueTypeMap {
		return dataSourceFigures{}, false
	}
	m := v.Map()
	name, ok := m.Get(figureDataSource)
	if !ok || name.Type() != pcommon.ValueTypeStr {
		return dataSourceFigures{}, false
	}
	f := dataSourceFigures{dataSource: name.Str()}
	if seen, ok := m.Get(figureSeen); ok && seen.Type() == pcommon.ValueTypeInt && seen.Int() >= 0 {
		f.seen = seen.Int()
	}
	f.scores, _ = readScoreStats(m, figureScoreCount, figureScoreSum) // refused: none
	return f, true
}

// putDataSourceFigures writes figures as an array of maps under name, in the end record's shape.
func putDataSourceFigures(m pcommon.Map, name string, figures []dataSourceFigures) {
	s := m.PutEmptySlice(name)
	s.EnsureCapacity(len(figures))
	for _, f := range figures {
		entry := s.AppendEmpty().SetEmptyMap()
		entry.PutStr(figureDataSource, f.dataSource)
		entry.PutInt(figureSeen, f.seen)
		if f.scores.reported {
			entry.PutInt(figureScoreCount, f.scores.count)
			entry.PutDouble(figureScoreSum, f.scores.sum)
		}
	}
}

// addDataSources keeps a source's valgen.data_sources from the end record with the largest
// valgen.seen (on a tie the later one), as partials.py takes a source's end figures from the
// part with the largest seen; an end record without them leaves them as they are. Called
// before the end record's seen is merged into the source's.
func (s *sourceState) addDataSources(end endInfo) {
	if end.dataSources != nil && end.seen >= s.end.seen {
		s.end.dataSources = end.dataSources
	}
}

// dataSourceTotal is one data source of a summary's valgen.data_sources.
type dataSourceTotal struct {
	seen, kept int64
	scores     scoreTotal
}

// putDataSources writes a summary's valgen.sample_by ("data_source" when the group is split)
// and, when it is split or an ended source sent valgen.data_sources, valgen.data_sources: per
// data source (those of the ended sources' figures and of the kept records, by name), the seen
// of the ended sources added up, the kept records (kept, by data source), and the score
// statistics added as for the step.
func putDataSources(attrs pcommon.Map, g *group, kept map[string]int64) {
	split := g.kept != nil && g.kept.split
	if split {
		attrs.PutStr(attrSampleBy, sampleByDataSource)
	}
	totals := map[string]*dataSourceTotal{}
	total := func(name string) *dataSourceTotal {
		t, ok := totals[name]
		if !ok {
			t = &dataSourceTotal{}
			totals[name] = t
		}
		return t
	}
	reported := false
	for _, state := range g.sources {
		if !state.ended || state.end.dataSources == nil {
			continue
		}
		reported = true
		for _, f := range state.end.dataSources {
			t := total(f.dataSource)
			t.seen += f.seen
			t.scores.add(f.scores)
		}
	}
	if !split && !reported {
		return
	}
	for name, n := range kept {
		total(name).kept = n
	}
	names := make([]string, 0, len(totals))
	for name := range totals {
		names = append(names, name)
	}
	sort.Strings(names)
	out := attrs.PutEmptySlice(attrDataSources)
	out.EnsureCapacity(len(names))
	for _, name := range names {
		t := totals[name]
		m := out.AppendEmpty().SetEmptyMap()
		m.PutStr(figureDataSource, name)
		m.PutInt(figureSeen, t.seen)
		m.PutInt(figureKept, t.kept)
		t.scores.put(m, figureScoreCount, figureScoreSum, figureScoreMean)
	}
}
