// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgenspanconnector // import "github.com/otel-valgen/otel-valgen/collector/valgenspanconnector"

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/otel-valgen/otel-valgen/collector/valgenspanconnector/internal/metadata"
)

// stats gathers the counts of one call; record reports them.
type stats struct {
	traces, spans int64
	buffered      int64 // change of the groups waiting
	ignored       map[string]int64
	omitted       map[string]int64
	partial       map[string]int64
}

func (s *stats) ignore(reason string, n int64) {
	if n == 0 {
		return
	}
	if s.ignored == nil {
		s.ignored = make(map[string]int64)
	}
	s.ignored[reason] += n
}

// emitted counts a trace built from cg.
func (s *stats) emitted(cg *closedGroup, b *traceBuilder) {
	s.traces++
	s.spans += 1 + b.included
	for reason, n := range b.omitted {
		if s.omitted == nil {
			s.omitted = make(map[string]int64)
		}
		s.omitted[reason] += n
	}
	if cg.partial != "" {
		if s.partial == nil {
			s.partial = make(map[string]int64)
		}
		s.partial[cg.partial]++
	}
}

func (s *stats) record(ctx context.Context, tb *metadata.TelemetryBuilder) {
	if s.traces > 0 {
		tb.ValgenSpansTracesEmitted.Add(ctx, s.traces)
		tb.ValgenSpansSpansEmitted.Add(ctx, s.spans)
	}
	if s.buffered != 0 {
		tb.ValgenSpansGroupsBuffered.Add(ctx, s.buffered)
	}
	for reason, n := range s.ignored {
		tb.ValgenSpansRecordsIgnored.Add(ctx, n, metric.WithAttributes(attribute.String("reason", reason)))
	}
	for reason, n := range s.omitted {
		tb.ValgenSpansSpansOmitted.Add(ctx, n, metric.WithAttributes(attribute.String("reason", reason)))
	}
	for reason, n := range s.partial {
		tb.ValgenSpansGroupsPartial.Add(ctx, n, metric.WithAttributes(attribute.String("reason", reason)))
	}
}
