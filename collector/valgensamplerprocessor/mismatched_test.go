// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/plog"
)

type mismatchedRecord struct {
	PromptID   string          `json:"prompt_id"`
	PromptKey  string          `json:"prompt_key"`
	SampleID   string          `json:"sample_id"`
	SampleKey  string          `json:"sample_key"`
	DataSource string          `json:"data_source"`
	SampleBy   string          `json:"sample_by"`
	KL         json.RawMessage `json:"kl"`
	Mismatched *int64          `json:"mismatched"`
	SampleRate *float64        `json:"sample_rate"`
	Part       *int            `json:"part"`
}

type mismatchedCases struct {
	Cases []struct {
		Name         string             `json:"name"`
		K            int                `json:"k"`
		N            int                `json:"n"`
		Seed         string             `json:"seed"`
		Records      []mismatchedRecord `json:"records"`
		Expected     [][]any            `json:"expected"`      // [sample id, [slots]]
		PartExpected [][][]any          `json:"part_expected"` // per part, the same
	} `json:"cases"`
}

// rec is the vector record as a rollout record of source with k (keys and kl as the vector says).
func (r mismatchedRecord) rec(t *testing.T, source string, k int) rec {
	t.Helper()
	key, promptKey := int64(-1), int64(-1)
	if r.SampleKey != "" {
		key = int64(parseUint(t, r.SampleKey))
	}
	if r.PromptKey != "" {
		promptKey = int64(parseUint(t, r.PromptKey))
	}
	out := rolloutRec(source, r.PromptID, r.SampleID, key, promptKey, int64(k))
	out.dataSource, out.sampleBy, out.kl = r.DataSource, r.SampleBy, vectorScore(t, r.KL)
	if r.Mismatched != nil {
		out.mismatched = *r.Mismatched
	}
	if r.SampleRate != nil {
		out.rate = *r.SampleRate
	}
	return out
}

// closeAll consumes ld in a new sampler, shuts it down and returns its output, with one summary.
func closeAll(t *testing.T, seed uint64, ld plog.Logs) output {
	t.Helper()
	h := newHarness(t, func(cfg *Config) { cfg.Seed = seed })
	h.consume(t, ld)
	require.NoError(t, h.p.Shutdown(context.Background()))
	out := collect(h.sink)
	require.Len(t, out.summaries, 1)
	return out
}

// logsOfKept are the kept records of outs, each with its resource: what a merge of partial groups reads.
func logsOfKept(outs ...output) plog.Logs {
	ld := plog.NewLogs()
	for _, o := range outs {
		for i, lr := range o.kept {
			rl := ld.ResourceLogs().AppendEmpty()
			o.resources[i].CopyTo(rl.Resource())
			lr.CopyTo(rl.ScopeLogs().AppendEmpty().LogRecords().AppendEmpty())
		}
	}
	return ld
}

// TestMismatchedVectors checks the shared most-mismatched cases on the group's sample (parsed as
// the processor parses the records) and through the processor, whole and split over two sources:
// the ranked ids with their slots, and on the summary valgen.mismatched, valgen.kept,
// valgen.prompts_kept (keyed prompts only) and the balance. A case in two parts closes each part
// in a sampler of its own, then the parts' kept records together in one more: the merge.
func TestMismatchedVectors(t *testing.T) {
	var cases mismatchedCases
	readJSON(t, "mismatched.json", &cases)
	require.NotEmpty(t, cases.Cases)
	for _, c := range cases.Cases {
		t.Run(c.Name, func(t *testing.T) {
			seed := parseUint(t, c.Seed)
			cfg := createDefaultConfig().(*Config)
			cfg.Seed = seed
			var views *dataSourceViews
			records := make([]rec, 0, len(c.Records))
			parts := map[int][]rec{}
			for i, r := range c.Records {
				out := r.rec(t, fmt.Sprintf("s%d", i%2), c.K)
				records = append(records, out)
				if r.Part != nil {
					parts[*r.Part] = append(parts[*r.Part], out)
				}
				gen, reason := parseGeneration(appendRec(plog.NewLogRecordSlice(), out).Attributes(), cfg)
				require.Empty(t, reason)
				if views == nil {
					views = newDataSourceViews(gen.k, gen.byDataSource).withMismatched(gen.mismatched)
				}
				views.ask(gen.byDataSource)
				views.askMismatched(gen.mismatched)
				views.lowerRate(gen.rate)
				views.offer(gen, func() keptRecord { return keptRecord{resourceSchema: r.SampleID} })
			}
			require.Equal(t, c.N, views.m, "n")
			got := [][]any{}
			for _, e := range views.ranked() {
				slots := []any{}
				if views.m > 0 {
					for _, name := range e.slots.names() {
						slots = append(slots, name)
					}
				}
				got = append(got, []any{e.item.resourceSchema, slots})
			}
			require.Equal(t, c.Expected, got, "dataSourceViews")

			for _, split := range []bool{false, true} {
				h := newHarness(t, func(cfg *Config) { cfg.Seed = seed })
				h.consumeWholeOrSplit(t, records, split)
				require.NoError(t, h.p.Shutdown(context.Background()))
				out := collect(h.sink)
				require.Equal(t, expectedWithSlots(c.Expected), rankedIDsAndSlots(t, out.kept), "processor, split %v", split)
				require.Len(t, out.summaries, 1)
				checkMismatchedSummary(t, out.summaries[0], c.N, c.Expected)
			}

			if len(parts) == 0 {
				return
			}
			require.Len(t, c.PartExpected, len(parts))
			outs := make([]output, 0, len(parts))
			for p := range len(parts) {
				out := closeAll(t, seed, logsOf(parts[p]...))
				require.Equal(t, expectedWithSlots(c.PartExpected[p]), rankedIDsAndSlots(t, out.kept), "part %d", p)
				outs = append(outs, out)
			}
			merged := closeAll(t, seed, logsOfKept(outs...))
			require.Equal(t, expectedWithSlots(c.Expected), rankedIDsAndSlots(t, merged.kept), "the parts merged")
			checkMismatchedSummary(t, merged.summaries[0], c.N, c.Expected)
		})
	}
}

// checkMismatchedSummary checks a rollout summary against a case: valgen.mismatched when n > 0,
// every ranked record kept, the keyed prompts only in valgen.prompts_kept, and the balance.
func checkMismatchedSummary(t *testing.T, s plog.LogRecord, n int, expected [][]any) {
	t.Helper()
	v, ok := s.Attributes().Get(attrMismatched)
	if n > 0 {
		require.True(t, ok, "valgen.mismatched")
		assert.Equal(t, int64(n), v.Int())
	} else {
		assert.False(t, ok, "no valgen.mismatched when n is 0")
	}
	assert.Equal(t, int64(len(expected)), intOf(t, s, attrKept))
	assert.Equal(t, intOf(t, s, attrSeen), intOf(t, s, attrKept)+intOf(t, s, attrDropped))
	keyed := map[string]bool{}
	for _, e := range expected {
		slots := e[1].([]any)
		if len(slots) == 0 || slots[0] == slotKeyed {
			id := e[0].(string)
			keyed[id[:len(id)-2]] = true // the vectors' ids are <prompt>/<i>
		}
	}
	assert.Equal(t, int64(len(keyed)), intOf(t, s, attrPromptsKept), "a response kept alone is no kept prompt")
}

// mismatchedRec is a response of prompt p of a rollout step of k prompts asking for n most
// mismatched, with a kl (see rec.kl).
func mismatchedRec(source string, p, i int, k, n int64, kl any) rec {
	r := rolloutRec(source, fmt.Sprintf("p%d", p), fmt.Sprintf("p%d/%d", p, i), -1, -1, k)
	r.mismatched, r.kl = n, kl
	return r
}

// TestMismatchedAttributesAreNeverInvalid checks that a valgen.mismatched that is not an int >= 0
// asks for 0 and that a kl that is not a finite double or int is none, without making any record
// invalid; an int kl counts as its double.
func TestMismatchedAttributesAreNeverInvalid(t *testing.T) {
	for name, edit := range map[string]func(plog.LogRecord){
		"a string": func(lr plog.LogRecord) { lr.Attributes().PutStr(attrMismatched, "2") },
		"a double": func(lr plog.LogRecord) { lr.Attributes().PutDouble(attrMismatched, 2) },
		"negative": func(lr plog.LogRecord) { lr.Attributes().PutInt(attrMismatched, -1) },
		"absent":   func(lr plog.LogRecord) { lr.Attributes().Remove(attrMismatched) },
	} {
		t.Run("mismatched "+name, func(t *testing.T) {
			ld := logsOf(mismatchedRec("a", 0, 0, 1, 2, 0.5), mismatchedRec("a", 1, 0, 1, 2, 0.9), mismatchedRec("a", 2, 0, 1, 2, 0.1))
			edit(ld.ResourceLogs().At(1).ScopeLogs().At(0).LogRecords().At(0))
			out := closeAll(t, 42, ld)
			require.Len(t, out.kept, 1, "the keyed prompt only")
			_, ok := out.kept[0].Attributes().Get(attrSlots)
			assert.False(t, ok)
			_, ok = out.summaries[0].Attributes().Get(attrMismatched)
			assert.False(t, ok)
			assert.Equal(t, int64(0), intOf(t, out.summaries[0], attrDroppedInvalid))
		})
	}

	out := closeAll(t, 42, logsOf(
		mismatchedRec("a", 0, 0, 0, 1, "9"),        // a string: no kl
		mismatchedRec("a", 0, 1, 0, 1, true),       // a bool: no kl
		mismatchedRec("a", 1, 0, 0, 1, math.NaN()), // not finite: no kl
		mismatchedRec("a", 1, 1, 0, 1, math.Inf(1)),
		mismatchedRec("a", 2, 0, 0, 1, nil),
		mismatchedRec("a", 2, 1, 0, 1, int64(3)), // an int: 3.0, the largest
		mismatchedRec("a", 3, 0, 0, 1, 2.5),
	))
	assert.Equal(t, [][]any{{"p2/1", []any{slotMismatched}}}, rankedIDsAndSlots(t, out.kept))
	assert.Equal(t, int64(0), intOf(t, out.summaries[0], attrDroppedInvalid))
	assert.Equal(t, int64(1), intOf(t, out.summaries[0], attrMismatched))
	assert.Equal(t, int64(0), intOf(t, out.summaries[0], attrPromptsKept))
}

// TestMismatchedIgnoredByValidation checks that a validation group ignores valgen.mismatched and
// valgen.mismatch.kl: the same kept records as without them, no valgen.slots, no valgen.mismatched.
func TestMismatchedIgnoredByValidation(t *testing.T) {
	var plain, asking []rec
	for i := range 6 {
		r := rec{step: 1, id: fmt.Sprintf("v/%d", i), source: "a", count: 2, keyVersion: keyVersionMix}
		plain = append(plain, r)
		r.mismatched, r.kl = 3, float64(i)
		asking = append(asking, r)
	}
	want, got := closeAll(t, 42, logsOf(plain...)), closeAll(t, 42, logsOf(asking...))
	assert.Equal(t, ids(want.kept), ids(got.kept))
	assert.Len(t, got.kept, 2)
	for _, lr := range got.kept {
		_, ok := lr.Attributes().Get(attrSlots)
		assert.False(t, ok)
	}
	_, ok := got.summaries[0].Attributes().Get(attrMismatched)
	assert.False(t, ok)
}
