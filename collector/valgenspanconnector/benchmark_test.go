// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgenspanconnector

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/connector/connectortest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/otel-valgen/otel-valgen/collector/valgenspanconnector/internal/metadata"
)

const (
	benchGenerations = 64 // the sampler's default k
	benchTurns       = 8  // assistant messages per trajectory, each but the last calling a tool
)

// benchStep builds one closed validation step as the sampler sends it: 64 kept records, each
// an 8-turn trajectory (a 1 KB prompt, 7 tool calls with 500-byte results, 500-byte turns:
// about 8 KB of messages), then the summary. With summary false, only the records.
func benchStep(summary bool) plog.Logs {
	text := func(role, content string) map[string]any {
		return map[string]any{"role": role, "parts": []any{map[string]any{"type": "text", "content": content}}}
	}
	ld := plog.NewLogs()
	rl := ld.ResourceLogs().AppendEmpty()
	rl.Resource().Attributes().PutStr("service.name", "trainer")
	records := rl.ScopeLogs().AppendEmpty().LogRecords()
	for i := range benchGenerations {
		var output []any
		for turn := range benchTurns {
			parts := []any{map[string]any{"type": "text", "content": strings.Repeat("t", 500)}}
			if turn < benchTurns-1 {
				id := fmt.Sprintf("call_%d", turn)
				parts = append(parts, map[string]any{"type": "tool_call", "id": id, "name": "search",
					"arguments": map[string]any{"query": fmt.Sprintf("q%d", turn)}})
				output = append(output, map[string]any{"role": "assistant", "parts": parts},
					map[string]any{"role": "tool", "parts": []any{map[string]any{"type": "tool_call_response", "id": id, "response": strings.Repeat("r", 500)}}})
				continue
			}
			output = append(output, map[string]any{"role": "assistant", "parts": parts})
		}
		lr := records.AppendEmpty()
		lr.SetEventName(eventGeneration)
		lr.SetTimestamp(pcommon.Timestamp(t0 + int64(i)))
		_ = lr.Attributes().FromRaw(map[string]any{
			"valgen.run_id": "run-1", "valgen.step": int64(100), "valgen.attempt": "L1.1",
			"valgen.sample_id": fmt.Sprintf("%016x/0@abcdefabcdef", i), "valgen.rank": int64(i + 1),
			"valgen.score": float64(i % 2), "valgen.data_source": "bench", "valgen.extra.acc": int64(i % 2),
			"gen_ai.input.messages":  []any{text("system", strings.Repeat("s", 500)), text("user", strings.Repeat("u", 500))},
			"gen_ai.output.messages": output,
		})
		_ = lr.Body().SetEmptyMap().FromRaw(map[string]any{"input": "rendered prompt", "output": "rendered trajectory"})
	}
	if summary {
		lr := records.AppendEmpty()
		lr.SetEventName(eventSummary)
		lr.SetTimestamp(pcommon.Timestamp(t0 + 1e9))
		_ = lr.Attributes().FromRaw(map[string]any{
			"valgen.run_id": "run-1", "valgen.step": int64(100), "valgen.attempt": "L1.1", "valgen.kind": "validation",
			"valgen.attempt_start": t0, "valgen.kept": int64(benchGenerations), "valgen.seen": int64(1000),
			"valgen.closed_reason": "complete",
		})
	}
	return ld
}

// BenchmarkConsumeStep measures turning one closed step (64 kept 8-turn trajectories: 64 + 64 ×
// 15 + 1 = 1,025 spans) into its trace: "one-request" as the sampler sends it (records and
// summary together, read in place), "buffered" with the records in a request of their own (copied
// into the buffer) and the summary in the next, and "json" as "one-request" with message_encoding
// json (each message array encoded as a JSON string).
func BenchmarkConsumeStep(b *testing.B) {
	for _, bench := range []struct {
		name     string
		buffered bool
		encoding string
	}{{"one-request", false, MessageEncodingStructured}, {"buffered", true, MessageEncodingStructured}, {"json", false, MessageEncodingJSON}} {
		b.Run(bench.name, func(b *testing.B) {
			cfg := createDefaultConfig().(*Config)
			cfg.MessageEncoding = bench.encoding
			c, err := newSpanConnector(cfg, consumertest.NewNop(), connectortest.NewNopSettings(metadata.Type))
			if err != nil {
				b.Fatal(err)
			}
			step, records, summary := benchStep(true), benchStep(false), benchStep(true)
			summary.ResourceLogs().At(0).ScopeLogs().At(0).LogRecords().RemoveIf(func(lr plog.LogRecord) bool {
				return lr.EventName() != eventSummary
			})
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if bench.buffered {
					_ = c.ConsumeLogs(ctx, records)
					_ = c.ConsumeLogs(ctx, summary)
					continue
				}
				_ = c.ConsumeLogs(ctx, step)
			}
			b.ReportMetric(float64(b.N*benchGenerations)/b.Elapsed().Seconds(), "generations/s")
		})
	}
}
