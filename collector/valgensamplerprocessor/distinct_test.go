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

type distinctCases struct {
	Cases []struct {
		Name      string    `json:"name"`
		M         int       `json:"m"`
		Sketches  [][]int64 `json:"sketches"`
		Merged    []int64   `json:"merged"`
		Count     int64     `json:"count"`
		Estimated bool      `json:"estimated"`
	} `json:"cases"`
}

// rolloutEnd is a rollout source's end record of step 1 carrying its prompt keys sketch.
func rolloutEnd(source string, keys []int64) rec {
	r := endRec(1, source, int64(len(keys)), 0, 0)
	r.kind, r.promptsSeen, r.promptKeys = kindRollout, int64(len(keys)), append([]int64{}, keys...)
	return r
}

// TestDistinctPromptsVectors checks the shared distinct-prompt cases: the sketches merged in
// either order, the count, and, at the processor's m, the summary of one end record per source
// (and with every end record delivered twice, and after a restart in the middle).
func TestDistinctPromptsVectors(t *testing.T) {
	var cases distinctCases
	readJSON(t, "distinct_prompts.json", &cases)
	require.NotEmpty(t, cases.Cases)
	for _, c := range cases.Cases {
		t.Run(c.Name, func(t *testing.T) {
			var forward, backward []int64
			for i := range c.Sketches {
				forward = mergeKeys(forward, c.Sketches[i], c.M)
				backward = mergeKeys(backward, c.Sketches[len(c.Sketches)-1-i], c.M)
			}
			require.Equal(t, c.Merged, nonNilKeys(forward))
			require.Equal(t, c.Merged, nonNilKeys(backward))
			n, estimated := distinctCount(forward, c.M)
			assert.Equal(t, c.Count, n)
			assert.Equal(t, c.Estimated, estimated)
			if c.M != promptSketchSize {
				return
			}
			for _, mode := range []string{"once", "twice", "restart"} {
				ext := newMemStorage()
				h := startStored(t, ext, newFakeClock().Now(), nil)
				var ends []rec
				for i, keys := range c.Sketches {
					ends = append(ends, rolloutEnd(fmt.Sprintf("s%d", i), keys))
				}
				if mode == "twice" {
					ends = append(ends, ends...)
				}
				half := len(ends) / 2
				h.consume(t, logsOf(ends[:half]...))
				if mode == "restart" {
					kill(h)
					h = startStored(t, ext, h.clock.Now(), nil)
				}
				h.consume(t, logsOf(ends[half:]...))
				h.clock.Advance(defaultMaxStepDuration)
				h.p.closeExpired(context.Background())
				out := collect(h.sink)
				require.NoError(t, h.p.Shutdown(context.Background()))
				require.Len(t, out.summaries, 1, mode)
				s := out.summaries[0]
				assert.Equal(t, c.Count, intOf(t, s, attrPromptsSeen), mode)
				got, ok := s.Attributes().Get(attrPromptsSeenEstimated)
				require.True(t, ok)
				assert.Equal(t, c.Estimated, got.Bool(), mode)
				_, hasError := s.Attributes().Get(attrPromptsSeenError)
				assert.Equal(t, c.Estimated, hasError, mode)
				keys, reason := parsePromptKeys(s.Attributes())
				require.Empty(t, reason)
				assert.Equal(t, c.Merged, nonNilKeys(keys), mode)
			}
		})
	}
}

// TestPromptsIncompleteWhileASourceDidNotEnd checks that a rollout step closed with a source
// that sent responses but never ended says that each kept prompt may lack responses.
func TestPromptsIncompleteWhileASourceDidNotEnd(t *testing.T) {
	for _, ended := range []bool{true, false} {
		h := newHarness(t, nil)
		records := []rec{
			rolloutRec("a", "p", "p/0@a", -1, -1, 2), rolloutRec("b", "p", "p/0@b", -1, -1, 2),
			rolloutRec("a", "q", "q/0@a", -1, -1, 2), rolloutEnd("a", []int64{1, 2}),
		}
		if ended {
			records = append(records, rolloutEnd("b", []int64{1}))
		}
		h.consume(t, logsOf(records...))
		require.NoError(t, h.p.Shutdown(context.Background()))
		out := collect(h.sink)
		require.Len(t, out.summaries, 1)
		want := int64(0)
		if !ended {
			want = intOf(t, out.summaries[0], attrPromptsKept)
			require.Equal(t, int64(2), want)
		}
		assert.Equal(t, want, intOf(t, out.summaries[0], attrPromptsIncomplete), "source b ended: %v", ended)
	}
}

// TestBadPromptKeysAreInvalid checks that an end record whose sketch is not ascending,
// distinct, non-negative ints is dropped as invalid, not read.
func TestBadPromptKeysAreInvalid(t *testing.T) {
	for _, keys := range [][]int64{{3, 1}, {1, 1}, {-1, 2}} {
		h := newHarness(t, nil)
		h.consume(t, logsOf(rolloutRec("a", "p", "p/0", -1, -1, 2), rolloutEnd("a", keys)))
		require.NoError(t, h.p.Shutdown(context.Background()))
		out := collect(h.sink)
		require.Len(t, out.summaries, 1)
		assert.Equal(t, int64(0), intOf(t, out.summaries[0], attrSourcesEnded), "%v", keys)
	}
}

func nonNilKeys(keys []int64) []int64 {
	if keys == nil {
		return []int64{}
	}
	return keys
}
