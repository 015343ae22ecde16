// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor

import (
	"context"
	"fmt"
	"testing"

	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/extension"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/processor/processortest"

	"github.com/otel-valgen/otel-valgen/collector/valgensamplerprocessor/internal/metadata"
)

const benchBatchSize = 512

// benchBatches builds 64 batches of 512 generations over 8 steps, each asking for k = 64, of
// key version (0: no valgen.key_version, version 1), with their key when keyed (as the SDK
// sends them) or without (the processor computes each); with dataSources > 0, spread over that
// many data sources, each asking for k per data source; with extremes > 0, each asking for that
// many lowest- and highest-scored, with a score.
func benchBatches(version int64, keyed bool, dataSources int, extremes int64) []plog.Logs {
	batches := make([]plog.Logs, 64)
	for i := range batches {
		records := make([]rec, 0, benchBatchSize)
		for j := range benchBatchSize {
			r := rec{step: int64(i % 8), id: fmt.Sprintf("prompt-%d-%d/0", i, j), count: 64, keyVersion: version}
			if keyed {
				r.key, r.hasKey = int64(sampleKey(max(version, keyVersionHMAC), defaultSeed, r.id)), true
			}
			if dataSources > 0 {
				r.dataSource, r.sampleBy = fmt.Sprintf("source-%d", j%dataSources), sampleByDataSource
			}
			if extremes > 0 {
				r.extremes, r.score = extremes, float64((i*benchBatchSize+j)*7919%1000)/1000
			}
			records = append(records, r)
		}
		batches[i] = logsOf(records...)
	}
	return batches
}

// runConsumeBenchmark feeds the batches to p b.N times and reports records/s.
func runConsumeBenchmark(b *testing.B, p *samplerProcessor, batches []plog.Logs) {
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ld := plog.NewLogs()
		batches[i%len(batches)].CopyTo(ld)
		if err := p.ConsumeLogs(context.Background(), ld); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*benchBatchSize)/b.Elapsed().Seconds(), "records/s")
	_ = p.Shutdown(context.Background())
}

// BenchmarkConsumeLogs measures sampling batches of 512 generations into 64-of-N groups:
// records whose key the processor computes (version 1, no valgen.key_version; version 2), and
// records that carry their key, per step or per (step, data source) over 4 data sources, or
// per step with the 4 lowest- and highest-scored beside k (valgen.extremes = 4).
func BenchmarkConsumeLogs(b *testing.B) {
	for _, bench := range []struct {
		name        string
		version     int64
		keyed       bool
		dataSources int
		extremes    int64
	}{
		{"v1-computed", 0, false, 0, 0},
		{"v2-computed", keyVersionMix, false, 0, 0},
		{"v2-keyed", keyVersionMix, true, 0, 0},
		{"v2-keyed-by-data-source", keyVersionMix, true, 4, 0},
		{"v2-keyed-extremes", keyVersionMix, true, 0, 4},
	} {
		b.Run(bench.name, func(b *testing.B) {
			cfg := createDefaultConfig().(*Config)
			p, err := newSamplerProcessor(cfg, consumertest.NewNop(), processortest.NewNopSettings(metadata.Type))
			if err != nil {
				b.Fatal(err)
			}
			runConsumeBenchmark(b, p, benchBatches(bench.version, bench.keyed, bench.dataSources, bench.extremes))
		})
	}
}

// BenchmarkSampleKey measures the key of one sample id: version 1 (HMAC-SHA256), version 2
// of a uid (one XXH64 of the uid) and of an id derived from the input (no hash).
func BenchmarkSampleKey(b *testing.B) {
	for _, bench := range []struct {
		name    string
		version int64
		id      string
	}{
		{"v1", keyVersionHMAC, "gsm8k-train-000123/0"},
		{"v2-uid", keyVersionMix, "gsm8k-train-000123/0"},
		{"v2-derived", keyVersionMix, "9b74c9897bac770f/0"},
	} {
		b.Run(bench.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				_ = sampleKey(bench.version, 42, bench.id)
			}
		})
	}
}

// BenchmarkConsumeLogsStorage is BenchmarkConsumeLogs with storage: every batch stores the
// group it touched (O(k)) before it returns.
func BenchmarkConsumeLogsStorage(b *testing.B) {
	for _, backend := range []struct {
		name string
		ext  func(b *testing.B) extension.Extension
	}{
		{"memory", func(*testing.B) extension.Extension { return newMemStorage() }},
		{"file_storage", func(b *testing.B) extension.Extension { return newFileStorage(b, b.TempDir()) }},
	} {
		b.Run(backend.name, func(b *testing.B) {
			cfg := createDefaultConfig().(*Config)
			id := storageID
			cfg.Storage = &id
			p, err := newSamplerProcessor(cfg, consumertest.NewNop(), processortest.NewNopSettings(metadata.Type))
			if err != nil {
				b.Fatal(err)
			}
			ext := backend.ext(b)
			if err := p.Start(context.Background(), storageHost{ext}); err != nil {
				b.Fatal(err)
			}
			runConsumeBenchmark(b, p, benchBatches(keyVersionMix, false, 0, 0))
			_ = ext.Shutdown(context.Background())
		})
	}
}
