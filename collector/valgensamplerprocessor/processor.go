// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor // import "github.com/otel-valgen/otel-valgen/collector/valgensamplerprocessor"

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/extension/xextension/storage"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/processor"
	"go.uber.org/zap"

	"github.com/otel-valgen/otel-valgen/collector/valgensamplerprocessor/internal/metadata"
)

// samplerProcessor holds the open groups and closes them; sampler.go routes the records.
type samplerProcessor struct {
	cfg       *Config
	id        component.ID
	next      consumer.Logs
	logger    *zap.Logger
	telemetry *metadata.TelemetryBuilder
	now       func() time.Time // injectable clock
	tick      time.Duration    // how often expired groups are looked for

	mu     sync.Mutex // guards the fields below
	groups map[string]*group
	seq    uint64
	closed *closedGroups
	store  *groupStore // nil without storage (or before Start, after Shutdown)

	persistMu sync.Mutex // orders the storage writes; taken while holding mu, then mu is released

	lifecycle sync.Mutex // guards cancel
	cancel    context.CancelFunc
	wg        sync.WaitGroup
}

var _ processor.Logs = (*samplerProcessor)(nil)

func newSamplerProcessor(cfg *Config, next consumer.Logs, set processor.Settings) (*samplerProcessor, error) {
	tb, err := metadata.NewTelemetryBuilder(set.TelemetrySettings)
	if err != nil {
		return nil, fmt.Errorf("failed to create telemetry builder: %w", err)
	}
	return &samplerProcessor{
		cfg:       cfg,
		id:        set.ID,
		next:      next,
		logger:    set.Logger,
		telemetry: tb,
		now:       time.Now,
		tick:      tickInterval(cfg.DecisionWait),
		groups:    make(map[string]*group),
		closed:    newClosedGroups(cfg.ClosedGroupsCache),
	}, nil
}

// tickInterval checks for expired groups about ten times per decision_wait, at most once a
// second and at least every 5ms.
func tickInterval(wait time.Duration) time.Duration {
	return min(max(wait/10, 5*time.Millisecond), time.Second)
}

// Start reloads the stored state when storage is configured and launches the goroutine that
// closes groups whose time is up and reports late records (a reloaded group whose wait has
// passed closes at its first tick).
func (p *samplerProcessor) Start(ctx context.Context, host component.Host) error {
	p.lifecycle.Lock()
	defer p.lifecycle.Unlock()
	if p.cancel != nil {
		return nil
	}
	if p.cfg.Storage != nil {
		if err := p.startStorage(ctx, host); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	p.wg.Add(1)
	go p.run(ctx)
	return nil
}

func (p *samplerProcessor) run(ctx context.Context) {
	defer p.wg.Done()
	ticker := time.NewTicker(p.tick)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			p.closeExpired(ctx)
		}
	}
}

// Shutdown stops the timer and sends the pending late reports. With storage it makes sure the open groups are stored and keeps
// them for the next start instead of sending them; without storage, or when they cannot be
// stored, it flushes every open group downstream (closed as shutdown). It is safe to call
// twice and before Start.
func (p *samplerProcessor) Shutdown(ctx context.Context) error {
	p.lifecycle.Lock()
	if p.cancel != nil {
		p.cancel()
		p.wg.Wait()
		p.cancel = nil
	}
	p.lifecycle.Unlock()

	p.mu.Lock()
	out := plog.NewLogs()
	now := p.now()
	p.reportLate(out, now)
	if store := p.store; store != nil {
		p.store = nil
		err := p.persistAll(ctx, store)
		if err == nil {
			p.mu.Unlock()
			p.emit(ctx, out)
			return store.client.Close(ctx)
		}
		p.logger.Error("open valgen groups could not be stored; flushing them downstream instead",
			zap.Int("groups", len(p.groups)), zap.Error(err))
		// Try to forget them in storage too, so that a restart does not send them again.
		forget := []*storage.Operation{storage.SetOperation(storageKeyIndex, encodeIndex(nil))}
		for key := range p.groups {
			forget = append(forget, storage.DeleteOperation(groupStorageKey(key)))
		}
		defer func() {
			if err := store.client.Batch(ctx, forget...); err != nil {
				p.storageError(ctx, storageOpWrite, err)
			}
			_ = store.client.Close(ctx)
		}()
	}
	var st stats
	for _, g := range p.groupsByAge() {
		p.closeGroup(g, closedShutdown, now, out, &st)
	}
	p.mu.Unlock()
	st.record(ctx, p.telemetry)
	p.emit(ctx, out)
	return nil
}

// Capabilities says that the processor removes and annotates records of the batches it gets.
func (*samplerProcessor) Capabilities() consumer.Capabilities {
	return consumer.Capabilities{MutatesData: true}
}

// closeExpired closes the groups whose time is up (see group.closeReason) and sends the late
// reports of the closed groups that received late records since the last tick.
func (p *samplerProcessor) closeExpired(ctx context.Context) {
	out := plog.NewLogs()
	var st stats
	p.mu.Lock()
	now := p.now()
	for _, g := range p.groupsByAge() {
		if reason := g.closeReason(now, p.cfg); reason != "" {
			p.closeGroup(g, reason, now, out, &st)
		}
	}
	p.reportLate(out, now)
	_ = p.persist(ctx, p.takeOps(nil)) // releases p.mu; failures are logged, counted and retried
	st.record(ctx, p.telemetry)
	p.emit(ctx, out)
}

// reportLate appends the pending valgen.step.late records and queues the storage writes of
// the late counts they report. Callers hold p.mu.
func (p *samplerProcessor) reportLate(out plog.Logs, now time.Time) {
	reports := p.closed.takeReports()
	if len(reports) == 0 {
		return
	}
	appendLateReports(out, reports, now)
	if p.store == nil {
		return
	}
	for key, r := range reports {
		if e, ok := p.closed.entries[key]; ok {
			p.store.setLate(e.slot, r.late)
		}
	}
}

// groupsByAge lists the open groups, oldest first. Callers hold p.mu.
func (p *samplerProcessor) groupsByAge() []*group {
	list := make([]*group, 0, len(p.groups))
	for _, g := range p.groups {
		list = append(list, g)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].seq < list[j].seq })
	return list
}

// closeGroup removes a group, remembers it as closed and appends its output. Callers hold p.mu.
func (p *samplerProcessor) closeGroup(g *group, reason string, now time.Time, out plog.Logs, st *stats) {
	delete(p.groups, g.key)
	slot := p.closed.add(g.key)
	if p.store != nil {
		p.store.forgetGroup(g.key, slot)
	}
	st.close(reason, appendClosed(out, g, reason, now))
}

// emit sends closed groups downstream; it is called without holding p.mu.
func (p *samplerProcessor) emit(ctx context.Context, out plog.Logs) {
	if out.LogRecordCount() == 0 {
		return
	}
	if err := p.next.ConsumeLogs(ctx, out); err != nil {
		p.logger.Error("failed to send closed valgen groups downstream",
			zap.Int("records", out.LogRecordCount()), zap.Error(err))
	}
}
