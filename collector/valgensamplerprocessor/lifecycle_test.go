// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
)

// The shared step-lifecycle vectors (testdata/lifecycle/README.md), also read by the Python tests.
type lifecycleVector struct {
	Name   string `json:"name"`
	Config struct {
		Count           int    `json:"count"`
		DecisionWaitMs  int64  `json:"decision_wait_ms"`
		MaxStepDuration int64  `json:"max_step_duration_ms"`
		LateRecords     string `json:"late_records"`
	} `json:"config"`
	Events []struct {
		TMs    int64          `json:"t_ms"`
		Tick   bool           `json:"tick"`
		Record map[string]any `json:"record"`
	} `json:"events"`
	Expected struct {
		Groups       []vectorGroup `json:"groups"`
		ForwardedIDs []string      `json:"forwarded_ids"`
		Shown        []struct {
			RunID   string `json:"run_id"`
			Step    int64  `json:"step"`
			Attempt string `json:"attempt"`
			Kind    string `json:"kind"` // "": validation
		} `json:"shown"`
	} `json:"expected"`
}

type vectorGroup struct {
	RunID            string   `json:"run_id"`
	Step             int64    `json:"step"`
	Attempt          string   `json:"attempt"`
	ClosedReason     string   `json:"closed_reason"`
	ClosedAtMs       int64    `json:"closed_at_ms"`
	Seen             int64    `json:"seen"`
	KeptIDs          []string `json:"kept_ids"`
	SourcesEnded     int64    `json:"sources_ended"`
	SourcesMissing   []string `json:"sources_missing"`
	Late             int64    `json:"late"`
	AttemptStartMs   *int64   `json:"attempt_start_ms,omitempty"`
	SourcesAnnounced *int64   `json:"sources_announced,omitempty"`
	LateReports      []int64  `json:"late_reports,omitempty"`
	// Dropped is valgen.dropped.<reason> by reason; AttemptsConcurrent valgen.attempts_concurrent;
	// SourcesUnhooked valgen.sources_unhooked.
	Dropped            map[string]int64 `json:"dropped"`
	AttemptsConcurrent int64            `json:"attempts_concurrent"`
	SourcesUnhooked    []string         `json:"sources_unhooked"`
	// Kind is valgen.kind ("": validation); a rollout group's valgen.prompts_seen and _kept.
	Kind        string `json:"kind"`
	PromptsSeen *int64 `json:"prompts_seen,omitempty"`
	PromptsKept *int64 `json:"prompts_kept,omitempty"`
}

// kindOrValidation is a vector's kind: absent is validation.
func kindOrValidation(kind string) string {
	if kind == "" {
		return kindValidation
	}
	return kind
}

// vectorEpoch is t_ms = 0 and timestamp_ms = 0 of every vector.
var vectorEpoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func msSince(ts pcommon.Timestamp) int64 { return ts.AsTime().Sub(vectorEpoch).Milliseconds() }

// vectorLogs builds the OTLP batch of one vector record.
func vectorLogs(t *testing.T, r map[string]any) plog.Logs {
	t.Helper()
	ld := plog.NewLogs()
	rl := ld.ResourceLogs().AppendEmpty()
	rl.Resource().Attributes().PutStr("service.name", "trainer")
	if inst, ok := r["instance"].(string); ok {
		rl.Resource().Attributes().PutStr(attrServiceInstance, inst)
	}
	sl := rl.ScopeLogs().AppendEmpty()
	sl.Scope().SetName("otel_valgen")
	lr := sl.LogRecords().AppendEmpty()
	lr.SetEventName(r["event"].(string))
	attrs := lr.Attributes()
	for field, attr := range map[string]string{
		"run_id": attrRunID, "attempt": attrAttempt, "source": attrSource, "sample_id": attrSampleID,
		"integration": attrIntegration, "unhooked_reason": attrUnhookedReason, "kind": attrKind,
		"prompt_id": attrPromptID,
	} {
		if v, ok := r[field].(string); ok {
			attrs.PutStr(attr, v)
		}
	}
	for field, attr := range map[string]string{
		"step": attrStep, "sample_key": attrSampleKey, "seen": attrSeen, "emitted": attrEmitted,
		"sources_expected": attrSourcesExpected, "sample_count": attrSampleCount, "dropped": attrDropped,
		"prompt_key": attrPromptKey, "prompts_seen": attrPromptsSeen,
	} {
		if v, ok := r[field].(float64); ok {
			attrs.PutInt(attr, int64(v))
		}
	}
	if v, ok := r["timestamp_ms"].(float64); ok {
		lr.SetTimestamp(pcommon.NewTimestampFromTime(vectorEpoch.Add(time.Duration(v) * time.Millisecond)))
	}
	return ld
}

// vectorOutput is what a replay sent downstream, per group.
type vectorOutput struct {
	summaries []plog.LogRecord
	kept      [][]string         // kept ids, per summary
	late      map[string][]int64 // late reports per group (run|step|attempt|kind)
	forwarded []string           // late generations forwarded
}

func groupName(run string, step int64, attempt, kind string) string {
	return fmt.Sprintf("%s|%d|%s|%s", run, step, attempt, kind)
}

func collectVector(t *testing.T, sink []plog.Logs) vectorOutput {
	out := vectorOutput{late: map[string][]int64{}}
	var pending []string
	for _, ld := range sink {
		eachRecord(ld, func(_ plog.ResourceLogs, lr plog.LogRecord) {
			switch lr.EventName() {
			case eventGeneration:
				if _, ranked := lr.Attributes().Get(attrRank); ranked {
					pending = append(pending, strOf(t, lr, attrSampleID))
					return
				}
				late, ok := lr.Attributes().Get(attrLate)
				require.True(t, ok && late.Bool(), "an unranked generation is a tagged late one")
				out.forwarded = append(out.forwarded, strOf(t, lr, attrSampleID))
			case eventSummary:
				out.summaries = append(out.summaries, lr)
				out.kept = append(out.kept, pending)
				pending = nil
			case eventLate:
				name := groupName(strOf(t, lr, attrRunID), intOf(t, lr, attrStep), strOf(t, lr, attrAttempt), strOf(t, lr, attrKind))
				out.late[name] = append(out.late[name], intOf(t, lr, attrLate))
			default:
				t.Fatalf("unexpected record %q downstream", lr.EventName())
			}
		})
	}
	require.Empty(t, pending, "kept records without their summary")
	return out
}

// shownAttempt applies the attempt choice of the spec to the summaries of one (run, step, kind).
func shownAttempt(t *testing.T, summaries []plog.LogRecord, run string, step int64, kind string) string {
	var cands []plog.LogRecord
	for _, s := range summaries {
		if strOf(t, s, attrRunID) == run && intOf(t, s, attrStep) == step && strOf(t, s, attrKind) == kind {
			cands = append(cands, s)
		}
	}
	require.NotEmpty(t, cands)
	sort.SliceStable(cands, func(i, j int) bool {
		ci := strOf(t, cands[i], attrClosedReason) == closedComplete
		cj := strOf(t, cands[j], attrClosedReason) == closedComplete
		if ci != cj {
			return ci
		}
		si, sj := intOf(t, cands[i], attrAttemptStart), intOf(t, cands[j], attrAttemptStart)
		if si != sj {
			return si > sj
		}
		return strOf(t, cands[i], attrAttempt) > strOf(t, cands[j], attrAttempt)
	})
	return strOf(t, cands[0], attrAttempt)
}

// TestLifecycleVectors replays each shared vector with an injected clock: records at their
// t_ms, closeExpired at each tick, Shutdown after the last event.
func TestLifecycleVectors(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "testdata", "lifecycle", "*.json"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(files), 7)
	for _, file := range files {
		data, err := os.ReadFile(file)
		require.NoError(t, err)
		var v lifecycleVector
		require.NoError(t, json.Unmarshal(data, &v))
		t.Run(v.Name, func(t *testing.T) {
			h := newHarness(t, func(c *Config) {
				c.Count = v.Config.Count
				c.DecisionWait = time.Duration(v.Config.DecisionWaitMs) * time.Millisecond
				c.MaxStepDuration = time.Duration(v.Config.MaxStepDuration) * time.Millisecond
				c.LateRecords = v.Config.LateRecords
			})
			h.clock.now = vectorEpoch
			for _, ev := range v.Events {
				h.clock.mu.Lock()
				h.clock.now = vectorEpoch.Add(time.Duration(ev.TMs) * time.Millisecond)
				h.clock.mu.Unlock()
				if ev.Tick {
					h.p.closeExpired(context.Background())
					continue
				}
				h.consume(t, vectorLogs(t, ev.Record))
			}
			require.NoError(t, h.p.Shutdown(context.Background()))

			got := collectVector(t, h.sink.AllLogs())
			require.Len(t, got.summaries, len(v.Expected.Groups), "one summary per group")
			for i, want := range v.Expected.Groups {
				s := got.summaries[i]
				name := groupName(want.RunID, want.Step, want.Attempt, kindOrValidation(want.Kind))
				assert.Equal(t, want.RunID, strOf(t, s, attrRunID), "group %d", i)
				assert.Equal(t, kindOrValidation(want.Kind), strOf(t, s, attrKind), name)
				if want.PromptsSeen != nil || want.PromptsKept != nil {
					require.NotNil(t, want.PromptsSeen, name)
					require.NotNil(t, want.PromptsKept, name)
					assert.Equal(t, *want.PromptsSeen, intOf(t, s, attrPromptsSeen), name)
					assert.Equal(t, *want.PromptsKept, intOf(t, s, attrPromptsKept), name)
				}
				assert.Equal(t, want.Step, intOf(t, s, attrStep), name)
				assert.Equal(t, want.Attempt, strOf(t, s, attrAttempt), name)
				assert.Equal(t, want.ClosedReason, strOf(t, s, attrClosedReason), name)
				assert.Equal(t, want.ClosedAtMs, msSince(s.Timestamp()), name)
				assert.Equal(t, want.Seen, intOf(t, s, attrSeen), name)
				assert.Equal(t, want.KeptIDs, got.kept[i], name)
				assert.Equal(t, int64(len(want.KeptIDs)), intOf(t, s, attrKept), name)
				assert.Equal(t, want.SourcesEnded, intOf(t, s, attrSourcesEnded), name)
				missing := make([]any, 0, len(want.SourcesMissing))
				for _, m := range want.SourcesMissing {
					missing = append(missing, m)
				}
				assert.Equal(t, missing, sliceOf(t, s, attrSourcesMissing), name)
				assert.Equal(t, int64(0), intOf(t, s, attrLate), "late records come after the summary")
				dropped := requireBalance(t, s)
				require.NotNil(t, want.Dropped, name)
				for reason, n := range want.Dropped {
					assert.Equal(t, n, dropped["valgen.dropped."+reason], "%s: dropped.%s", name, reason)
				}
				assert.Len(t, want.Dropped, len(dropped), "%s: every reason", name)
				assert.Equal(t, want.AttemptsConcurrent, intOf(t, s, attrAttemptsConcurrent), name)
				require.NotNil(t, want.SourcesUnhooked, name)
				unhooked := make([]any, 0, len(want.SourcesUnhooked))
				for _, u := range want.SourcesUnhooked {
					unhooked = append(unhooked, u)
				}
				assert.Equal(t, unhooked, sliceOf(t, s, attrSourcesUnhooked), name)
				if want.AttemptStartMs != nil {
					assert.Equal(t, *want.AttemptStartMs, msSince(pcommon.Timestamp(intOf(t, s, attrAttemptStart))), name) //nolint:gosec
				}
				if want.SourcesAnnounced != nil {
					assert.Equal(t, *want.SourcesAnnounced, intOf(t, s, attrSourcesAnnounce), name)
				}
				reports := got.late[name]
				var late int64
				if len(reports) > 0 {
					late = reports[len(reports)-1]
				}
				assert.Equal(t, want.Late, late, "%s: late count of the last late report", name)
				if want.LateReports != nil {
					assert.Equal(t, want.LateReports, reports, name)
				}
			}
			assert.Equal(t, v.Expected.ForwardedIDs, got.forwarded)
			for _, want := range v.Expected.Shown {
				assert.Equal(t, want.Attempt, shownAttempt(t, got.summaries, want.RunID, want.Step, kindOrValidation(want.Kind)))
			}
		})
	}
}
