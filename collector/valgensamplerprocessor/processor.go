// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor // import "github.com/otel-valgen/otel-valgen/collector/valgensamplerprocessor"

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/processor"
	"go.uber.org/zap"

	"github.com/otel-valgen/otel-valgen/collector/valgensamplerprocessor/internal/metadata"
)

// samplerProcessor takes the valgen records out of the batches it gets into their groups (one
// per validation step and attempt), keeps each group's bottom-k and sends a group downstream
// when it closes (lifecycle.go says when).
type samplerProcessor struct {
	cfg       *Config
	id        component.ID
	next      consumer.Logs
	logger    *zap.Logger
	telemetry *metadata.TelemetryBuilder
	now       func() time.Time // injectable clock
	tick      time.Duration    // how often expired groups are looked for
	samplerID string           // valgen.sampler on the summaries (Config.SamplerID, else the host name)

	mu     sync.Mutex // guards the fields below
	groups map[string]*group
	seq    uint64
	closed *closedGroups
	store  stateStore // memoryStore without storage (and after Shutdown)

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
		samplerID: samplerID(cfg, set.ID),
		groups:    make(map[string]*group),
		closed:    newClosedGroups(cfg.ClosedGroupsCache),
		store:     memoryStore{},
	}, nil
}

// samplerID is the configured sampler_id, else the host name, else the processor's id.
func samplerID(cfg *Config, id component.ID) string {
	if cfg.SamplerID != "" {
		return cfg.SamplerID
	}
	if host, err := os.Hostname(); err == nil && host != "" {
		return host
	}
	return id.String()
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
		store, err := p.openStorage(ctx, host)
		if err != nil {
			return err
		}
		p.mu.Lock()
		p.store = store
		p.mu.Unlock()
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
	out := &outbox{}
	now := p.now()
	p.reportLate(out, now)
	store := p.store
	p.store = memoryStore{}
	var st stats
	if !store.keepAll(ctx, p) {
		for _, g := range p.groupsByAge() {
			p.closeGroup(g, closedShutdown, now, out, &st, store)
		}
		// Forget them in storage too, so that a restart does not send them again.
		_ = store.save(ctx, p, nil)()
	}
	p.mu.Unlock()
	st.record(ctx, p.telemetry)
	p.emit(ctx, out)
	return store.close(ctx)
}

// Capabilities says that the processor removes and annotates records of the batches it gets.
func (*samplerProcessor) Capabilities() consumer.Capabilities {
	return consumer.Capabilities{MutatesData: true}
}

// batch is the state of one ConsumeLogs call while it holds the processor's lock.
type batch struct {
	now     time.Time
	out     *outbox
	st      stats
	touched []*group
}

// ConsumeLogs takes the generation, start, progress and end records out of ld into their groups, forwards
// everything else at once, then sends the groups that this batch completed and that close at once (completeNow).
func (p *samplerProcessor) ConsumeLogs(ctx context.Context, ld plog.Logs) error {
	b := &batch{out: &outbox{}}
	p.mu.Lock()
	b.now = p.now()
	ld.ResourceLogs().RemoveIf(func(rl plog.ResourceLogs) bool {
		emptied := false
		rl.ScopeLogs().RemoveIf(func(sl plog.ScopeLogs) bool {
			records := sl.LogRecords()
			before := records.Len()
			at := origin{rl: rl, sl: sl}
			records.RemoveIf(func(lr plog.LogRecord) bool { return p.take(lr, at, b) })
			removed := records.Len() < before && records.Len() == 0
			emptied = emptied || removed
			return removed
		})
		return emptied && rl.ScopeLogs().Len() == 0
	})
	for _, g := range b.touched {
		if p.groups[g.key] == g && g.completeNow() {
			p.closeGroup(g, closedComplete, b.now, b.out, &b.st, p.store)
		}
	}
	// With storage, what this call took is stored before it returns (and before the closed
	// groups go downstream), so that records the receiver acknowledges survive a crash. A failed
	// write is logged and counted, and the next write rewrites the whole state.
	wait := p.store.save(ctx, p, b.touched)
	p.mu.Unlock()
	_ = wait()

	b.st.record(ctx, p.telemetry)
	var err error
	if ld.LogRecordCount() > 0 {
		err = p.next.ConsumeLogs(ctx, ld)
	}
	p.emit(ctx, b.out)
	return err
}

// take handles one record and reports whether it leaves the batch. Callers hold p.mu.
func (p *samplerProcessor) take(lr plog.LogRecord, at origin, b *batch) bool {
	name := eventName(lr)
	if !isSampled(name) {
		return false
	}
	attrs := lr.Attributes()
	var gen generation
	var info endInfo
	var reason string
	switch name {
	case eventGeneration:
		b.st.received++
		gen, reason = parseGeneration(attrs, p.cfg)
	case eventStart:
		info, reason = parseStart(attrs)
	case eventProgress:
		info, reason = parseProgress(attrs)
	default:
		info, reason = parseEnd(attrs)
	}
	// A generation with a usable run, step and attempt but no usable sample id (key, seed,
	// count, key version) is still a record of its group: dropped, and counted there.
	invalid := reason != "" && name == eventGeneration && checkCommon(attrs) == ""
	if reason != "" && !invalid {
		b.st.drop(reason)
		return true
	}

	key := groupKey(attrs)
	g, open := p.groups[key]
	if open {
		// A group whose time is up closes before it takes more, whether or not a tick has
		// run yet: the record is then late, as it would be after the tick.
		if why := g.closeReason(b.now, p.cfg); why != "" {
			p.closeGroup(g, why, b.now, b.out, &b.st, p.store)
			open = false
		}
	}
	if !open {
		if p.closed.markLate(key, lr, at.rl.Resource()) {
			b.st.late++
			if name == eventGeneration && !invalid && p.cfg.LateRecords == LateRecordsForward {
				attrs.PutBool(attrLate, true)
				return false
			}
			b.st.drop(reasonLate)
			return true
		}
		g = p.open(key, lr, at.rl.Resource(), b)
	}
	src := sourceOf(attrs, at.rl.Resource())
	switch {
	case invalid:
		b.st.drop(reason)
		g.addInvalid(lr, src, b.now)
	case name == eventGeneration:
		rekeyed := g.rekeyed
		g.addGeneration(gen, lr, at, src, b.now)
		if rekeyed == 0 && g.rekeyed > 0 {
			p.logger.Warn("a valgen step mixes sampling key versions; keys of the other version are recomputed",
				zap.String("group", g.key), zap.Int64("key_version", g.keyVersion))
		}
	case name == eventStart:
		g.addStart(info, lr, src, b.now)
	case name == eventProgress:
		g.addProgress(info, lr, src, b.now)
	default:
		g.addEnd(info, lr, src, b.now)
	}
	if n := len(b.touched); n == 0 || b.touched[n-1] != g {
		b.touched = append(b.touched, g)
	}
	return true
}

// open starts a group, first closing the oldest one when max_groups are open.
func (p *samplerProcessor) open(key string, lr plog.LogRecord, res pcommon.Resource, b *batch) *group {
	if len(p.groups) >= p.cfg.MaxGroups {
		if oldest := p.oldestGroup(); oldest != nil {
			p.closeGroup(oldest, closedMaxGroups, b.now, b.out, &b.st, p.store)
		}
	}
	p.seq++
	g := newGroup(key, p.seq, lr, res, b.now)
	p.groups[key] = g
	p.store.opened()
	b.st.openDelta++
	return g
}

func (p *samplerProcessor) oldestGroup() *group {
	var oldest *group
	for _, g := range p.groups {
		if oldest == nil || g.seq < oldest.seq {
			oldest = g
		}
	}
	return oldest
}
