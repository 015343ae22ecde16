// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
)

type rateVectors struct {
	Thresholds []struct {
		Rate      float64 `json:"rate"`
		Threshold string  `json:"threshold"`
	} `json:"thresholds"`
	Cases []struct {
		Name    string `json:"name"`
		K       int    `json:"k"`
		Seed    string `json:"seed"`
		Records []struct {
			PromptID   string   `json:"prompt_id"`
			PromptKey  string   `json:"prompt_key"`
			SampleID   string   `json:"sample_id"`
			SampleKey  string   `json:"sample_key"`
			SampleRate *float64 `json:"sample_rate"`
			Source     string   `json:"source"`
		} `json:"records"`
		Expected        []string `json:"expected"`
		ExpectedPrompts []string `json:"expected_prompts"`
		PromptsOverCap  int64    `json:"prompts_over_cap"`
	} `json:"cases"`
}

// TestRateThresholdVectors checks floor(rate * 2^63) against the shared file's exact values.
func TestRateThresholdVectors(t *testing.T) {
	var vectors rateVectors
	readJSON(t, "rate.json", &vectors)
	require.NotEmpty(t, vectors.Thresholds)
	for _, v := range vectors.Thresholds {
		assert.Equal(t, parseUint(t, v.Threshold), rateThreshold(v.Rate), "rate %v", v.Rate)
	}
	assert.Equal(t, noRateThreshold, rateThreshold(0), "no rate keeps every key")
}

// withRate sets valgen.sample_rate on the records of ld for which rate says so.
func withRate(ld plog.Logs, rate func(lr plog.LogRecord) (float64, bool)) plog.Logs {
	eachRecord(ld, func(_ plog.ResourceLogs, lr plog.LogRecord) {
		if r, ok := rate(lr); ok {
			lr.Attributes().PutDouble(attrSampleRate, r)
		}
	})
	return ld
}

// TestRateVectors checks the shared watch-list cases on the group view and through the
// processor: whole, from one source that ends with its valgen.prompts_under_rate (the summary
// echoes the rate and counts the prompts over the cap), and split over the cases' sources.
func TestRateVectors(t *testing.T) {
	var vectors rateVectors
	readJSON(t, "rate.json", &vectors)
	require.NotEmpty(t, vectors.Cases)
	for _, c := range vectors.Cases {
		t.Run(c.Name, func(t *testing.T) {
			seed := parseUint(t, c.Seed)
			view := newGroupView(c.K)
			whole := make([]rec, 0, len(c.Records)+1)
			bySource := map[string][]rec{}
			rateOf := map[string]float64{} // by sample id
			smallest := 0.0
			for _, r := range c.Records {
				gen := generation{
					order:  sortKey{key: sampleKey(keyVersionMix, seed, r.SampleID), id: r.SampleID},
					prompt: sortKey{key: sampleKey(keyVersionMix, seed, r.PromptID), id: r.PromptID},
				}
				key, promptKey := int64(-1), int64(-1)
				if r.SampleKey != "" {
					gen.order.key = parseUint(t, r.SampleKey)
					key = int64(gen.order.key)
				}
				if r.PromptKey != "" {
					gen.prompt.key = parseUint(t, r.PromptKey)
					promptKey = int64(gen.prompt.key)
				}
				if r.SampleRate != nil {
					gen.rate = *r.SampleRate
					rateOf[r.SampleID] = *r.SampleRate
				}
				smallest = stepRate(smallest, gen.rate)
				view.lowerRate(gen.rate)
				view.offer(gen, func() keptRecord { return keptRecord{resourceSchema: r.SampleID} })
				whole = append(whole, rolloutRec("s0", r.PromptID, r.SampleID, key, promptKey, int64(c.K)))
				bySource[r.Source] = append(bySource[r.Source], rolloutRec(r.Source, r.PromptID, r.SampleID, key, promptKey, int64(c.K)))
			}
			got := []string{}
			for _, e := range view.sorted() {
				got = append(got, e.item.resourceSchema)
			}
			require.Equal(t, c.Expected, got, "groupView")
			require.Equal(t, len(c.ExpectedPrompts), view.promptCount())

			// The source's end record: every prompt under the group's (smallest) rate it saw.
			under := int64(0)
			counted := map[string]bool{}
			for _, r := range c.Records {
				pk := sampleKey(keyVersionMix, seed, r.PromptID)
				if r.PromptKey != "" {
					pk = parseUint(t, r.PromptKey)
				}
				if !counted[r.PromptID] && pk < rateThreshold(smallest) {
					under++
					counted[r.PromptID] = true
				}
			}
			rates := func(lr plog.LogRecord) (float64, bool) {
				if lr.EventName() == eventEnd {
					return smallest, smallest > 0
				}
				id, _ := lr.Attributes().Get(attrSampleID)
				r, ok := rateOf[id.Str()]
				return r, ok
			}
			end := rec{event: eventEnd, step: 1, source: "s0", kind: kindRollout, seen: int64(len(c.Records)), emitted: int64(len(c.Records))}
			endLogs := withRate(logsOf(end), rates)
			eachRecord(endLogs, func(_ plog.ResourceLogs, lr plog.LogRecord) {
				lr.Attributes().PutInt(attrPromptsUnderRate, under)
			})

			h := newHarness(t, func(cfg *Config) { cfg.Seed = seed; cfg.MaxCount = max(cfg.MaxCount, c.K) })
			h.consume(t, withRate(logsOf(whole...), rates))
			h.consume(t, endLogs)
			require.NoError(t, h.p.Shutdown(context.Background()))
			out := collect(h.sink)
			require.Equal(t, c.Expected, nonNil(ids(out.kept)), "processor, whole")
			require.Len(t, out.summaries, 1)
			summary := out.summaries[0]
			assert.Equal(t, int64(len(c.ExpectedPrompts)), intOf(t, summary, attrPromptsKept))
			if smallest > 0 {
				v, ok := summary.Attributes().Get(attrSampleRate)
				require.True(t, ok, "the summary echoes the rate")
				assert.Equal(t, pcommon.ValueTypeDouble, v.Type())
				assert.Equal(t, smallest, v.Double())
				assert.Equal(t, under, intOf(t, summary, attrPromptsUnderRate))
				assert.Equal(t, c.PromptsOverCap, intOf(t, summary, attrPromptsOverCap))
			} else {
				_, ok := summary.Attributes().Get(attrSampleRate)
				assert.False(t, ok, "no rate, no watch-list attributes")
			}

			// Split over the sources, in reverse source order: the same set.
			h = newHarness(t, func(cfg *Config) { cfg.Seed = seed; cfg.MaxCount = max(cfg.MaxCount, c.K) })
			for _, source := range []string{"s1", "s0"} {
				if len(bySource[source]) > 0 {
					h.consume(t, withRate(logsOf(bySource[source]...), rates))
				}
			}
			require.NoError(t, h.p.Shutdown(context.Background()))
			assert.Equal(t, c.Expected, nonNil(ids(collect(h.sink).kept)), "processor, split")
		})
	}
}

// TestInvalidRateIsDropped checks that a generation whose valgen.sample_rate is not a number in
// (0, 1] is dropped as invalid, and that rate 1 as an int is taken.
func TestInvalidRateIsDropped(t *testing.T) {
	attrs := pcommon.NewMap()
	for _, bad := range []float64{0, -0.5, 1.5} {
		attrs.PutDouble(attrSampleRate, bad)
		_, reason := parseRate(attrs)
		assert.Equal(t, reasonInvalidAttribute, reason, "rate %v", bad)
	}
	attrs.PutStr(attrSampleRate, "0.5")
	_, reason := parseRate(attrs)
	assert.Equal(t, reasonInvalidAttribute, reason)
	attrs.PutInt(attrSampleRate, 1)
	rate, reason := parseRate(attrs)
	assert.Empty(t, reason)
	assert.Equal(t, 1.0, rate)
}

// TestValidationIgnoresRates checks that the watch-list applies to rollouts only: validation
// generations that carry a (tiny) rate keep exactly k, and their summary has no rate.
func TestValidationIgnoresRates(t *testing.T) {
	h := newHarness(t, nil)
	var records []rec
	for i := range 6 {
		records = append(records, rec{step: 1, id: "v" + string(rune('a'+i)) + "/0", count: 2})
	}
	h.consume(t, withRate(logsOf(records...), func(plog.LogRecord) (float64, bool) { return 1e-9, true }))
	require.NoError(t, h.p.Shutdown(context.Background()))
	out := collect(h.sink)
	assert.Len(t, out.kept, 2)
	require.Len(t, out.summaries, 1)
	_, ok := out.summaries[0].Attributes().Get(attrSampleRate)
	assert.False(t, ok)
}

// TestRateAndPromptsUnderItSurviveARestart checks that a stored rollout group keeps its rate and
// its sources' sketches: closed after a restart with no further record, its summary has the
// rate and counts the prompts under it that both sources saw once.
func TestRateAndPromptsUnderItSurviveARestart(t *testing.T) {
	const rate = 0.5
	limit := int64(rateThreshold(rate))
	keys := []int64{1, 2, limit - 1, limit, limit + 5}
	ext := newMemStorage()
	h := startStored(t, ext, newFakeClock().Now(), nil)
	a := withRate(logsOf(rolloutRec("a", "p", "p/0@a", 7, 1, 4), rolloutEnd("a", keys[:4])),
		func(plog.LogRecord) (float64, bool) { return rate, true })
	b := withRate(logsOf(rolloutEnd("b", keys[1:])), func(plog.LogRecord) (float64, bool) { return rate, true })
	h.consume(t, a)
	h.consume(t, b)
	kill(h)
	second := startStored(t, ext, h.clock.Now().Add(defaultMaxStepDuration), nil)
	second.p.closeExpired(context.Background())
	out := collect(second.sink)
	require.Len(t, out.summaries, 1)
	s := out.summaries[0]
	got, ok := doubleOf(t, s, attrSampleRate)
	require.True(t, ok)
	assert.Equal(t, rate, got)
	assert.Equal(t, int64(3), intOf(t, s, attrPromptsUnderRate), "keys 1, 2 and limit-1, once each")
	assert.Equal(t, int64(5), intOf(t, s, attrPromptsSeen))
	require.NoError(t, second.p.Shutdown(context.Background()))
}
