// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor // import "github.com/otel-valgen/otel-valgen/collector/valgensamplerprocessor"

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/otel-valgen/otel-valgen/collector/valgensamplerprocessor/internal/metadata"
)

// stats gathers counts under the processor's lock; record reports them after it is released.
type stats struct {
	received, kept, late, openDelta int64
	concurrent                      int64 // groups closed with valgen.attempts_concurrent > 0
	dropped                         map[string]int64
	closed                          map[string]int64
}

func (s *stats) drop(reason string) {
	if s.dropped == nil {
		s.dropped = make(map[string]int64)
	}
	s.dropped[reason]++
}

func (s *stats) close(reason string, kept int) {
	if s.closed == nil {
		s.closed = make(map[string]int64)
	}
	s.closed[reason]++
	s.kept += int64(kept)
	s.openDelta--
}

func (s *stats) record(ctx context.Context, tb *metadata.TelemetryBuilder) {
	if s.received > 0 {
		tb.ValgenSamplerRecordsReceived.Add(ctx, s.received)
	}
	if s.kept > 0 {
		tb.ValgenSamplerRecordsKept.Add(ctx, s.kept)
	}
	if s.late > 0 {
		tb.ValgenSamplerRecordsLate.Add(ctx, s.late)
	}
	if s.concurrent > 0 {
		tb.ValgenSamplerGroupsConcurrent.Add(ctx, s.concurrent)
	}
	if s.openDelta != 0 {
		tb.ValgenSamplerGroupsOpen.Add(ctx, s.openDelta)
	}
	for reason, n := range s.dropped {
		tb.ValgenSamplerRecordsDropped.Add(ctx, n, metric.WithAttributes(attribute.String("reason", reason)))
	}
	for reason, n := range s.closed {
		tb.ValgenSamplerGroupsClosed.Add(ctx, n, metric.WithAttributes(attribute.String("reason", reason)))
	}
}
