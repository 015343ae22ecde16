// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/plog"
)

// TestAValidationGroupIgnoresTheWatchListRate checks that the watch-list applies to rollout
// groups only: a validation step whose generations and end record carry a valgen.sample_rate
// (one that no key is below) still keeps its k smallest keys, and its summary says no rate.
func TestAValidationGroupIgnoresTheWatchListRate(t *testing.T) {
	const k, n = 3, 5
	tiny := math.Ldexp(1, -62) // threshold 2: every key below is under it, none of these is
	h := newHarness(t, nil)
	records := make([]rec, 0, n+1)
	want := make([]string, 0, k)
	for i := range n {
		id := fmt.Sprintf("q%d/0", i)
		records = append(records, rec{step: 1, id: id, key: int64(i+1) << 40, hasKey: true, source: "trainer", count: k})
		if i < k {
			want = append(want, id)
		}
	}
	records = append(records, rec{event: eventEnd, step: 1, source: "trainer", seen: n, emitted: n, expected: 1})
	h.consume(t, withRate(logsOf(records...), func(plog.LogRecord) (float64, bool) { return tiny, true }))

	got := collect(h.sink)
	require.Len(t, got.summaries, 1, "sources_expected 1 ended: the step closes at once")
	s := got.summaries[0]
	assert.Equal(t, closedComplete, strOf(t, s, attrClosedReason))
	assert.Equal(t, int64(n), intOf(t, s, attrSeen))
	assert.Equal(t, int64(k), intOf(t, s, attrKept), "a validation group keeps k whatever rate its records carry")
	assert.Equal(t, want, ids(got.kept))
	_, hasRate := s.Attributes().Get(attrSampleRate)
	assert.False(t, hasRate, "a validation summary carries no valgen.sample_rate")
}
