// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor // import "github.com/otel-valgen/otel-valgen/collector/valgensamplerprocessor"

import (
	"context"
	"fmt"
	"sync/atomic"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/extension/xextension/storage"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"
)

// stateStore keeps what a restart must not lose: the open groups and the closed-groups ring.
// A processor always has one: memoryStore when no storage is configured (nothing survives a
// restart), extensionStore on a storage extension's client (state_codec.go is its layout).
//
// The processor calls every method but close while it holds its mu, so a store sees the
// changes in the order in which they happened.
type stateStore interface {
	// opened notes that a group opened.
	opened()
	// closed notes that the group key closed and went to closed-ring slot slot (nowhere
	// when slot < 0).
	closed(key string, slot int)
	// lateCounted notes the late count of the closed group in ring slot slot.
	lateCounted(slot int, late int64)
	// save queues the writes that bring the stored state up to date after the touched groups
	// (and the groups noted since the last save) changed. It returns a function that waits
	// until they are written; callers wait after releasing mu.
	save(ctx context.Context, p *samplerProcessor, touched []*group) (wait func() error)
	// keepAll stores every open group for the next start, forgets them in memory and reports
	// whether it did; false leaves the processor as it was.
	keepAll(ctx context.Context, p *samplerProcessor) bool
	// close stops the store once its queued writes are done.
	close(ctx context.Context) error
}

// memoryStore keeps nothing beyond the process.
type memoryStore struct{}

func (memoryStore) opened()                {}
func (memoryStore) closed(string, int)     {}
func (memoryStore) lateCounted(int, int64) {}
func (memoryStore) save(context.Context, *samplerProcessor, []*group) func() error {
	return written
}
func (memoryStore) keepAll(context.Context, *samplerProcessor) bool { return false }
func (memoryStore) close(context.Context) error                     { return nil }

func written() error { return nil }

// extensionStore writes the state to a storage extension's client. The processor's changes
// are turned into storage operations under its mu (save) and handed, in that order, to one
// writer goroutine, the only caller of the client after loading; so writes reach storage in
// the order in which the state changed while other batches go on in memory.
type extensionStore struct {
	client  storage.Client
	onError func(ctx context.Context, op string, err error)

	// Guarded by the processor's mu.
	pending     []*storage.Operation // deletes and ring writes of groups closed since the last save
	indexDirty  bool                 // the set of open groups changed
	closedDirty bool                 // the closed ring's meta changed

	resync atomic.Bool // a write failed: the next save rewrites the whole state
	writes chan storageWrite
	done   chan struct{}
}

// storageWrite is one batch of operations for the writer and where its result goes.
type storageWrite struct {
	ctx    context.Context
	ops    []*storage.Operation
	result chan error
}

// openStorage gets the configured extension's client, loads the stored state into p and
// starts the writer. A storage that cannot be reached or read fails the start; stored state
// that cannot be decoded is logged, counted and ignored.
func (p *samplerProcessor) openStorage(ctx context.Context, host component.Host) (*extensionStore, error) {
	ext, ok := host.GetExtensions()[*p.cfg.Storage]
	if !ok {
		return nil, fmt.Errorf("storage extension %q not found", p.cfg.Storage.String())
	}
	se, ok := ext.(storage.Extension)
	if !ok {
		return nil, fmt.Errorf("extension %q is not a storage extension", p.cfg.Storage.String())
	}
	client, err := se.GetClient(ctx, component.KindProcessor, p.id, "")
	if err != nil {
		return nil, fmt.Errorf("failed to get a storage client from %q: %w", p.cfg.Storage.String(), err)
	}
	s := &extensionStore{client: client, onError: p.storageError}
	p.mu.Lock()
	err = p.load(ctx, s)
	p.mu.Unlock()
	if err != nil {
		_ = client.Close(ctx)
		return nil, err
	}
	s.writes = make(chan storageWrite, 16)
	s.done = make(chan struct{})
	go s.writer()
	return s, nil
}

// writer performs the queued writes one after another until the store closes.
func (s *extensionStore) writer() {
	defer close(s.done)
	for w := range s.writes {
		err := s.client.Batch(w.ctx, w.ops...)
		if err != nil {
			s.onError(w.ctx, storageOpWrite, err)
			s.resync.Store(true)
		}
		w.result <- err
	}
}

func (s *extensionStore) opened() { s.indexDirty = true }

func (s *extensionStore) closed(key string, slot int) {
	s.pending = append(s.pending, storage.DeleteOperation(groupStorageKey(key)))
	if slot >= 0 {
		s.pending = append(s.pending, storage.SetOperation(closedStorageKey(slot), []byte(key)),
			storage.DeleteOperation(closedLateStorageKey(slot)))
		s.closedDirty = true
	}
	s.indexDirty = true
}

func (s *extensionStore) lateCounted(slot int, late int64) {
	s.pending = append(s.pending, lateOp(slot, late))
}

func (s *extensionStore) save(ctx context.Context, p *samplerProcessor, touched []*group) func() error {
	var ops []*storage.Operation
	if s.resync.Swap(false) {
		ops = s.allOps(p)
	} else {
		ops = s.changedOps(p, touched)
	}
	if len(ops) == 0 {
		return written
	}
	result := make(chan error, 1)
	s.writes <- storageWrite{ctx: ctx, ops: ops, result: result}
	return func() error { return <-result }
}

// changedOps are the writes of the touched groups that are still open, and of what was noted
// since the last save.
func (s *extensionStore) changedOps(p *samplerProcessor, touched []*group) []*storage.Operation {
	ops := s.pending
	s.pending = nil
	var done map[*group]struct{}
	if len(touched) > 1 {
		done = make(map[*group]struct{}, len(touched))
	}
	for _, g := range touched {
		if p.groups[g.key] != g {
			continue // closed in this batch
		}
		if done != nil {
			if _, dup := done[g]; dup {
				continue
			}
			done[g] = struct{}{}
		}
		if op := s.groupOp(p, g); op != nil {
			ops = append(ops, op)
		}
	}
	if s.indexDirty {
		ops = append(ops, storage.SetOperation(storageKeyIndex, encodeIndex(p.groups)))
		s.indexDirty = false
	}
	if s.closedDirty {
		ops = append(ops, storage.SetOperation(storageKeyClosedMeta, encodeClosedMeta(p.closed)))
		s.closedDirty = false
	}
	return ops
}

// allOps rewrite the whole state, after a failed write.
func (s *extensionStore) allOps(p *samplerProcessor) []*storage.Operation {
	ops := s.pending
	s.pending = nil
	for _, g := range p.groups {
		if op := s.groupOp(p, g); op != nil {
			ops = append(ops, op)
		}
	}
	ops = append(ops, storage.SetOperation(storageKeyIndex, encodeIndex(p.groups)))
	for i, key := range p.closed.ring {
		ops = append(ops, storage.SetOperation(closedStorageKey(i), []byte(key)), lateOp(i, p.closed.entries[key].late))
	}
	ops = append(ops, storage.SetOperation(storageKeyClosedMeta, encodeClosedMeta(p.closed)))
	s.indexDirty, s.closedDirty = false, false
	return ops
}

func (s *extensionStore) groupOp(p *samplerProcessor, g *group) *storage.Operation {
	data, err := encodeGroup(g)
	if err != nil {
		p.logger.Error("failed to encode a valgen group for storage", zap.Error(err))
		s.resync.Store(true)
		return nil
	}
	return storage.SetOperation(groupStorageKey(g.key), data)
}

func (s *extensionStore) keepAll(ctx context.Context, p *samplerProcessor) bool {
	if err := s.save(ctx, p, p.groupsByAge())(); err != nil {
		p.logger.Error("open valgen groups could not be stored; flushing them downstream instead",
			zap.Int("groups", len(p.groups)), zap.Error(err))
		return false
	}
	if n := len(p.groups); n > 0 {
		p.telemetry.ValgenSamplerGroupsOpen.Add(ctx, -int64(n))
		p.logger.Info("open valgen groups kept in storage for the next start", zap.Int("groups", n))
	}
	p.groups = make(map[string]*group)
	p.closed = newClosedGroups(p.cfg.ClosedGroupsCache)
	return true
}

func (s *extensionStore) close(ctx context.Context) error {
	close(s.writes)
	<-s.done
	return s.client.Close(ctx)
}

func (p *samplerProcessor) storageError(ctx context.Context, op string, err error) {
	p.logger.Error("valgen sampler storage operation failed", zap.String("operation", op), zap.Error(err))
	p.telemetry.ValgenSamplerStorageErrors.Add(ctx, 1, metric.WithAttributes(attribute.String("operation", op)))
}

func (p *samplerProcessor) corruptState(ctx context.Context, key string, err error) {
	p.logger.Warn("ignoring stored valgen sampler state that cannot be decoded",
		zap.String("key", key), zap.Error(err))
	p.telemetry.ValgenSamplerStorageErrors.Add(ctx, 1, metric.WithAttributes(attribute.String("operation", storageOpDecode)))
}
