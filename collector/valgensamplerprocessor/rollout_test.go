// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type groupViewCases struct {
	Cases []struct {
		Name    string `json:"name"`
		K       int    `json:"k"`
		Seed    string `json:"seed"`
		Records []struct {
			PromptID  string `json:"prompt_id"`
			PromptKey string `json:"prompt_key"`
			SampleID  string `json:"sample_id"`
			SampleKey string `json:"sample_key"`
		} `json:"records"`
		Expected        []string `json:"expected"`
		ExpectedPrompts []string `json:"expected_prompts"`
	} `json:"cases"`
}

// rolloutRec is a rollout generation of step 1 with its prompt; key and promptKey < 0 are left
// out (computed from the seed).
func rolloutRec(source, promptID, id string, key, promptKey, count int64) rec {
	r := rec{step: 1, id: id, source: source, kind: kindRollout, promptID: promptID, count: count}
	if count == 0 {
		r.count = zeroCount
	}
	r.keyVersion = keyVersionMix
	r.hasKey, r.key = key >= 0, key
	r.hasPromptKey, r.promptKey = promptKey >= 0, promptKey
	return r
}

// TestGroupViewVectors checks the shared rollout cases on the group view and through the
// processor, whole and split over two sources (the group view is mergeable).
func TestGroupViewVectors(t *testing.T) {
	var cases groupViewCases
	readJSON(t, "group_view.json", &cases)
	require.NotEmpty(t, cases.Cases)
	for _, c := range cases.Cases {
		t.Run(c.Name, func(t *testing.T) {
			seed := parseUint(t, c.Seed)
			view := newGroupView(c.K)
			records := make([]rec, 0, len(c.Records))
			for i, r := range c.Records {
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
				view.offer(gen, func() keptRecord { return keptRecord{resourceSchema: r.SampleID} })
				records = append(records, rolloutRec(fmt.Sprintf("s%d", i%2), r.PromptID, r.SampleID, key, promptKey, int64(c.K)))
			}
			got := []string{}
			for _, e := range view.sorted() {
				got = append(got, e.item.resourceSchema)
			}
			require.Equal(t, c.Expected, got, "groupView")
			require.Equal(t, len(c.ExpectedPrompts), view.promptCount())

			for _, split := range []bool{false, true} {
				h := newHarness(t, func(cfg *Config) { cfg.Seed = seed; cfg.MaxCount = max(cfg.MaxCount, c.K) })
				h.consumeWholeOrSplit(t, records, split)
				require.NoError(t, h.p.Shutdown(context.Background()))
				out := collect(h.sink)
				require.Equal(t, c.Expected, nonNil(ids(out.kept)), "processor, split %v", split)
				require.Len(t, out.summaries, 1)
				assert.Equal(t, int64(len(c.ExpectedPrompts)), intOf(t, out.summaries[0], attrPromptsKept))
			}
		})
	}
}

// TestKindsNeverShareAGroup checks that a step's validation and its rollouts, with the same
// run, step and attempt, close as two groups, each with its own records and summary.
func TestKindsNeverShareAGroup(t *testing.T) {
	h := newHarness(t, nil)
	var records []rec
	for i := range 4 {
		records = append(records, rec{step: 1, id: fmt.Sprintf("v%d/0", i), attempt: "L.1", count: 2})
		r := rolloutRec("trainer", fmt.Sprintf("p%d", i), fmt.Sprintf("p%d/0", i), -1, -1, 2)
		r.attempt = "L.1"
		records = append(records, r)
	}
	h.consume(t, logsOf(records...))
	require.NoError(t, h.p.Shutdown(context.Background()))
	out := collect(h.sink)
	require.Len(t, out.summaries, 2)
	kinds := map[string]int64{}
	for _, s := range out.summaries {
		kinds[strOf(t, s, attrKind)] = intOf(t, s, attrKept)
		assert.Equal(t, int64(4), intOf(t, s, attrSeen))
	}
	assert.Equal(t, map[string]int64{kindValidation: 2, kindRollout: 2}, kinds)
	for _, lr := range out.kept {
		_, isRollout := lr.Attributes().Get(attrPromptID)
		sid, _ := lr.Attributes().Get(attrSampleID)
		assert.Equal(t, isRollout, sid.Str()[0] == 'p', "%s in the right group", sid.Str())
	}
}

// TestRolloutSummaryCountsPromptsAndResponses checks the rollout summary: prompts seen (the
// ended sources' largest valgen.prompts_seen, added) and kept; valgen.seen and valgen.kept
// count responses and balance with valgen.dropped.
func TestRolloutSummaryCountsPromptsAndResponses(t *testing.T) {
	h := newHarness(t, nil)
	var records []rec
	for p := range 3 {
		for i := range 4 {
			records = append(records, rolloutRec("a", fmt.Sprintf("a%d", p), fmt.Sprintf("a%d/%d", p, i), -1, -1, 2))
		}
	}
	records = append(records, rolloutRec("b", "b0", "b0/0", -1, -1, 2))
	end := func(source string, seen, emitted, prompts int64) rec {
		r := endRec(1, source, seen, emitted, 2)
		r.kind, r.promptsSeen = kindRollout, prompts
		return r
	}
	// "a" presampled nothing away but saw 5 prompts of 4 responses (2 never sent); "b" repeats its end record.
	records = append(records, end("a", 20, 12, 3), end("a", 20, 12, 5), end("b", 1, 1, 1))
	h.consume(t, logsOf(records...))
	out := collect(h.sink)
	require.Len(t, out.summaries, 1, "both sources ended with sources_expected 2: closed at once")
	s := out.summaries[0]
	assert.Equal(t, kindRollout, strOf(t, s, attrKind))
	assert.Equal(t, int64(6), intOf(t, s, attrPromptsSeen))
	assert.Equal(t, int64(2), intOf(t, s, attrPromptsKept))
	kept := intOf(t, s, attrKept)
	assert.Equal(t, int64(len(out.kept)), kept)
	assert.Contains(t, []int64{5, 8}, kept, "two whole prompts: 4+4 of a, or 4 of a and 1 of b")
	assert.Equal(t, int64(21), intOf(t, s, attrSeen))
	assert.Equal(t, intOf(t, s, attrSeen), kept+intOf(t, s, attrDropped))
}

// TestRolloutInvalidRecords checks that a rollout generation without a usable prompt id is
// dropped as invalid in its group, and that a record of an unknown kind is dropped.
func TestRolloutInvalidRecords(t *testing.T) {
	h := newHarness(t, nil)
	noPrompt := rolloutRec("trainer", "", "x/0", -1, -1, 2)
	badPromptKey := rolloutRec("trainer", "p", "p/0", -1, -1, 2)
	badPromptKey.hasPromptKey, badPromptKey.promptKey = true, -5
	unknown := rec{step: 1, id: "u/0", kind: "training"}
	h.consume(t, logsOf(noPrompt, badPromptKey, rolloutRec("trainer", "q", "q/0", -1, -1, 2), unknown))
	require.NoError(t, h.p.Shutdown(context.Background()))
	out := collect(h.sink)
	require.Len(t, out.summaries, 1, "the unknown kind opens no group")
	assert.Equal(t, []string{"q/0"}, ids(out.kept))
	assert.Equal(t, int64(2), intOf(t, out.summaries[0], attrDroppedInvalid))
}

// TestStorageRollout checks that a stored rollout group comes back with its kind, its prompts
// and its sources' prompts seen.
func TestStorageRollout(t *testing.T) {
	h := newHarness(t, nil)
	var records []rec
	for p := range 5 {
		for i := range 3 {
			records = append(records, rolloutRec("a", fmt.Sprintf("p%d", p), fmt.Sprintf("p%d/%d", p, i), -1, -1, 2))
		}
	}
	end := endRec(1, "a", 15, 15, 0)
	end.kind, end.promptsSeen = kindRollout, 5
	h.consume(t, logsOf(append(records, end)...))
	require.Len(t, h.p.groups, 1)
	var g *group
	for _, g = range h.p.groups {
	}
	data, err := encodeGroup(g)
	require.NoError(t, err)
	back, _, err := decodeGroup(data)
	require.NoError(t, err)
	assert.Equal(t, kindRollout, back.kind)
	assert.Equal(t, g.key, back.key)
	assert.Equal(t, g.sources, back.sources)
	assert.Equal(t, 2, back.kept.promptCount())
	want, got := g.kept.sorted(), back.kept.sorted()
	require.Len(t, got, 6)
	for i := range want {
		assert.Equal(t, want[i].order, got[i].order)
	}
	// a later response of a kept prompt joins it after the restart
	promptID := strOf(t, want[0].item.record, attrPromptID)
	prompt := sortKey{key: sampleKey(keyVersionMix, defaultSeed, promptID), id: promptID}
	require.True(t, back.kept.offer(generation{order: sortKey{key: 1, id: promptID + "/9"}, prompt: prompt},
		func() keptRecord { return keptRecord{} }))
	assert.Equal(t, 2, back.kept.promptCount())
	assert.Equal(t, 7, back.kept.len())
}
