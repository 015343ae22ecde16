// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPromptsIncompleteWhileFewerSourcesEndedThanExpected pins the rule that a rollout step
// whose valgen.sources_expected promised more sources than ended counts every kept prompt in
// valgen.prompts_incomplete, also when the missing source never sent a single record: the
// group then knows only sources that all ended, and the promise alone says responses of the
// kept prompts may be missing. Sources a and b log responses to prompts p (both) and q (a) and
// end; a third source was promised and never sent anything.
func TestPromptsIncompleteWhileFewerSourcesEndedThanExpected(t *testing.T) {
	shutdown := func(t *testing.T, h *harness) {
		require.NoError(t, h.p.Shutdown(context.Background()))
	}
	maxDuration := func(t *testing.T, h *harness) {
		h.clock.Advance(defaultMaxStepDuration)
		h.p.closeExpired(context.Background())
		require.NoError(t, h.p.Shutdown(context.Background()))
	}
	tests := []struct {
		name     string
		expected int64 // valgen.sources_expected
		onStart  bool  // sent on the start records, else on the end records
		close    func(*testing.T, *harness)
		reason   string
		want     int64 // valgen.prompts_incomplete
	}{
		{name: "expected on start records, closed at max_step_duration", expected: 3, onStart: true, close: maxDuration, reason: closedMaxDuration, want: 2},
		{name: "expected on end records, closed at max_step_duration", expected: 3, close: maxDuration, reason: closedMaxDuration, want: 2},
		{name: "expected on start records, closed at shutdown", expected: 3, onStart: true, close: shutdown, reason: closedShutdown, want: 2},
		{name: "every expected source ended", expected: 2, onStart: true, close: shutdown, reason: closedComplete, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, nil)
			var records []rec
			for _, source := range []string{"a", "b"} {
				start := rec{event: eventStart, step: 1, source: source, kind: kindRollout}
				if tt.onStart {
					start.expected = tt.expected
				}
				records = append(records, start)
			}
			records = append(records,
				rolloutRec("a", "p", "p/0@a", -1, -1, 2), rolloutRec("b", "p", "p/0@b", -1, -1, 2),
				rolloutRec("a", "q", "q/0@a", -1, -1, 2))
			for _, source := range []string{"a", "b"} {
				end := rec{event: eventEnd, step: 1, source: source, kind: kindRollout, seen: 2, emitted: 2}
				if source == "b" {
					end.seen, end.emitted = 1, 1
				}
				if !tt.onStart {
					end.expected = tt.expected
				}
				records = append(records, end)
			}
			h.consume(t, logsOf(records...))
			tt.close(t, h)

			out := collect(h.sink)
			require.Len(t, out.summaries, 1)
			s := out.summaries[0]
			assert.Equal(t, tt.reason, strOf(t, s, attrClosedReason))
			assert.Equal(t, tt.expected, intOf(t, s, attrSourcesExpected))
			assert.Equal(t, []int64{2, 2}, []int64{intOf(t, s, attrSources), intOf(t, s, attrSourcesEnded)},
				"the group knows only the two sources that sent records, and both ended")
			assert.Equal(t, []int64{3, 2}, []int64{intOf(t, s, attrKept), intOf(t, s, attrPromptsKept)})
			assert.Equal(t, tt.want, intOf(t, s, attrPromptsIncomplete))
		})
	}
}
