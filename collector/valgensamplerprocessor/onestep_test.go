// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/plog"
)

// requestGroups lists, per ConsumeLogs call the sink received, the (step) of every sampled
// record in it and how many summaries it holds.
func requestGroups(t *testing.T, all []plog.Logs) (steps [][]int64, summaries []int) {
	t.Helper()
	for _, ld := range all {
		var these []int64
		n := 0
		eachRecord(ld, func(_ plog.ResourceLogs, lr plog.LogRecord) {
			if eventName(lr) == eventSummary {
				n++
			}
			these = append(these, intOf(t, lr, attrStep))
		})
		steps = append(steps, these)
		summaries = append(summaries, n)
	}
	return steps, summaries
}

// TestOneClosedStepPerRequest checks that groups closed together (by one batch, by the timer,
// by shutdown) go downstream as one request each: the kept records and the summary of one
// step, nothing of another. The exporter service relies on it to write without buffering.
func TestOneClosedStepPerRequest(t *testing.T) {
	cases := map[string]func(h *harness){
		"one batch completes two steps": func(h *harness) {
			records := append(stepRecords(1, "trainer", 3, 0), endRec(1, "trainer", 3, 3, 1))
			records = append(records, stepRecords(2, "trainer", 4, 0)...)
			records = append(records, endRec(2, "trainer", 4, 4, 1))
			h.consume(t, logsOf(records...))
		},
		"the timer closes two steps": func(h *harness) {
			h.consume(t, logsOf(append(stepRecords(1, "trainer", 3, 0), stepRecords(2, "trainer", 4, 0)...)...))
			h.clock.Advance(time.Hour)
			h.p.closeExpired(context.Background())
		},
		"shutdown flushes two steps": func(h *harness) {
			h.consume(t, logsOf(append(stepRecords(1, "trainer", 3, 0), stepRecords(2, "trainer", 4, 0)...)...))
			require.NoError(t, h.p.Shutdown(context.Background()))
		},
	}
	for name, run := range cases {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, func(c *Config) { c.Count = 2 })
			run(h)
			steps, summaries := requestGroups(t, h.sink.AllLogs())
			require.Len(t, steps, 2, "one request per closed step")
			for i, these := range steps {
				require.Len(t, these, 3, "two kept records and the summary")
				require.Equal(t, 1, summaries[i])
				for _, s := range these {
					require.Equal(t, these[0], s, "records of one step only")
				}
			}
			require.NotEqual(t, steps[0][0], steps[1][0])
		})
	}
}
