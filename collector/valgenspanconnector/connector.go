// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgenspanconnector // import "github.com/otel-valgen/otel-valgen/collector/valgenspanconnector"

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/connector"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.uber.org/zap"

	"github.com/otel-valgen/otel-valgen/collector/valgenspanconnector/internal/metadata"
)

// spanConnector turns the sampler's closed groups into traces: it holds a group's kept
// generation records until the group's valgen.step.summary arrives, then sends one trace for
// the step to the traces pipeline (trace.go builds it).
type spanConnector struct {
	cfg       *Config
	next      consumer.Traces
	logger    *zap.Logger
	telemetry *metadata.TelemetryBuilder
	now       func() time.Time // injectable clock
	tick      time.Duration    // how often groups past max_wait are looked for

	mu  sync.Mutex // guards buf
	buf *buffer

	lifecycle sync.Mutex // guards cancel
	cancel    context.CancelFunc
	wg        sync.WaitGroup
}

var _ connector.Logs = (*spanConnector)(nil)

func newSpanConnector(cfg *Config, next consumer.Traces, set connector.Settings) (*spanConnector, error) {
	tb, err := metadata.NewTelemetryBuilder(set.TelemetrySettings)
	if err != nil {
		return nil, fmt.Errorf("failed to create telemetry builder: %w", err)
	}
	return &spanConnector{
		cfg:       cfg,
		next:      next,
		logger:    set.Logger,
		telemetry: tb,
		now:       time.Now,
		tick:      min(max(cfg.MaxWait/10, 10*time.Millisecond), time.Second),
		buf:       newBuffer(),
	}, nil
}

// Start launches the goroutine that emits the groups waiting longer than max_wait.
func (c *spanConnector) Start(context.Context, component.Host) error {
	c.lifecycle.Lock()
	defer c.lifecycle.Unlock()
	if c.cancel != nil {
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	c.wg.Add(1)
	go c.run(ctx)
	return nil
}

func (c *spanConnector) run(ctx context.Context) {
	defer c.wg.Done()
	ticker := time.NewTicker(c.tick)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			c.expire(ctx)
		}
	}
}

// expire emits the groups that the bounds no longer allow as partial traces.
func (c *spanConnector) expire(ctx context.Context) {
	var st stats
	c.mu.Lock()
	evicted := c.buf.evict(c.now(), c.cfg)
	c.mu.Unlock()
	st.buffered -= int64(len(evicted))
	if err := c.emit(ctx, evicted, &st); err != nil {
		c.logger.Error("failed to send partial valgen traces downstream", zap.Error(err))
	}
	st.record(ctx, c.telemetry)
}

// Shutdown stops the timer and emits every waiting group as a partial trace (reason
// shutdown). It is safe to call twice and before Start.
func (c *spanConnector) Shutdown(ctx context.Context) error {
	c.lifecycle.Lock()
	if c.cancel != nil {
		c.cancel()
		c.wg.Wait()
		c.cancel = nil
	}
	c.lifecycle.Unlock()

	var st stats
	c.mu.Lock()
	drained := c.buf.drain(partialShutdown)
	c.mu.Unlock()
	st.buffered -= int64(len(drained))
	if err := c.emit(ctx, drained, &st); err != nil {
		c.logger.Error("failed to send partial valgen traces downstream at shutdown", zap.Error(err))
	}
	st.record(ctx, c.telemetry)
	return nil
}

// Capabilities says that the connector only reads the records it gets.
func (*spanConnector) Capabilities() consumer.Capabilities {
	return consumer.Capabilities{MutatesData: false}
}

// batchGroup is a group's kept records in the request being consumed (views of it).
type batchGroup struct {
	resource pcommon.Resource
	gens     []*generation
}

// ConsumeLogs takes the kept generation records and summaries out of ld. A summary closes its
// group: the group's records waiting in the buffer and those before the summary in ld make
// its trace, sent before ConsumeLogs returns. The records of groups that ld does not close are
// copied into the buffer. Other records are ignored (the logs pipeline has them).
func (c *spanConnector) ConsumeLogs(ctx context.Context, ld plog.Logs) error {
	var st stats
	batch := make(map[groupKey]*batchGroup)
	var order []groupKey
	var closing []*closedGroup
	for _, rl := range ld.ResourceLogs().All() {
		for _, sl := range rl.ScopeLogs().All() {
			for _, lr := range sl.LogRecords().All() {
				switch eventName(lr) {
				case eventGeneration:
					key, g, reason := parseGeneration(lr)
					if reason != "" {
						st.ignore(reason, 1)
						continue
					}
					bg, ok := batch[key]
					if !ok {
						bg = &batchGroup{resource: rl.Resource()}
						batch[key] = bg
						order = append(order, key)
					}
					bg.gens = append(bg.gens, g)
				case eventSummary:
					key, ok := keyOf(lr.Attributes())
					if !ok {
						st.ignore(ignoredInvalid, 1)
						continue
					}
					cg := &closedGroup{key: key, resource: rl.Resource(), summary: lr}
					if bg, ok := batch[key]; ok {
						cg.gens = bg.gens
						delete(batch, key)
					}
					closing = append(closing, cg)
				}
			}
		}
	}

	c.mu.Lock()
	now := c.now()
	for _, cg := range closing {
		if p := c.buf.take(cg.key); p != nil {
			st.buffered--
			cg.gens = append(p.gens, cg.gens...)
		}
		var dups int64
		cg.gens, dups = dedup(cg.gens)
		st.ignore(ignoredDuplicate, dups)
	}
	for _, key := range order {
		bg, ok := batch[key]
		if !ok {
			continue
		}
		delete(batch, key)
		if _, waiting := c.buf.groups[key]; !waiting {
			st.buffered++
		}
		st.ignore(ignoredDuplicate, c.buf.add(key, bg.resource, bg.gens, now))
	}
	evicted := c.buf.evict(now, c.cfg)
	c.mu.Unlock()
	st.buffered -= int64(len(evicted))

	err := c.emit(ctx, append(closing, evicted...), &st)
	st.record(ctx, c.telemetry)
	return err
}

// dedup keeps the first generation of each sample id.
func dedup(gens []*generation) ([]*generation, int64) {
	seen := make(map[string]struct{}, len(gens))
	out := gens[:0]
	for _, g := range gens {
		if _, dup := seen[g.sampleID]; dup {
			continue
		}
		seen[g.sampleID] = struct{}{}
		out = append(out, g)
	}
	return out, int64(len(gens) - len(out))
}

// emit builds each group's trace and sends it downstream, one ConsumeTraces call per trace.
func (c *spanConnector) emit(ctx context.Context, groups []*closedGroup, st *stats) error {
	var errs []error
	for _, cg := range groups {
		td, b := buildTrace(c.cfg, cg)
		st.emitted(cg, b)
		if err := c.next.ConsumeTraces(ctx, td); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
