// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor // import "github.com/otel-valgen/otel-valgen/collector/valgensamplerprocessor"

import (
	"context"
	"fmt"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/extension/xextension/storage"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"
)

// startStorage gets the storage client and reloads the open groups and the closed-groups
// cache. A storage that cannot be reached or read fails the start; stored state that cannot
// be decoded is logged, counted and ignored.
func (p *samplerProcessor) startStorage(ctx context.Context, host component.Host) error {
	ext, ok := host.GetExtensions()[*p.cfg.Storage]
	if !ok {
		return fmt.Errorf("storage extension %q not found", p.cfg.Storage.String())
	}
	se, ok := ext.(storage.Extension)
	if !ok {
		return fmt.Errorf("extension %q is not a storage extension", p.cfg.Storage.String())
	}
	client, err := se.GetClient(ctx, component.KindProcessor, p.id, "")
	if err != nil {
		return fmt.Errorf("failed to get a storage client from %q: %w", p.cfg.Storage.String(), err)
	}
	store := &groupStore{client: client}
	p.mu.Lock()
	err = p.load(ctx, store)
	if err == nil {
		p.store = store
	}
	p.mu.Unlock()
	if err != nil {
		_ = client.Close(ctx)
		return err
	}
	return nil
}

// load reads the stored state into the processor. Callers hold p.mu.
func (p *samplerProcessor) load(ctx context.Context, store *groupStore) error {
	var fix []*storage.Operation
	closedFix, err := p.loadClosed(ctx, store.client)
	if err != nil {
		return err
	}
	fix = append(fix, closedFix...)
	groupsFix, err := p.loadGroups(ctx, store.client)
	if err != nil {
		return err
	}
	fix = append(fix, groupsFix...)
	if len(fix) > 0 {
		if err := store.client.Batch(ctx, fix...); err != nil {
			p.storageError(ctx, storageOpWrite, err)
			store.resync.Store(true)
		}
	}
	if n := len(p.groups); n > 0 {
		p.telemetry.ValgenSamplerGroupsOpen.Add(ctx, int64(n))
	}
	p.logger.Info("valgen sampler state loaded from storage",
		zap.Int("open_groups", len(p.groups)), zap.Int("closed_groups", len(p.closed.ring)))
	return nil
}

// takeOps returns the writes that bring storage up to date after the touched groups changed
// (and the groups closed since the last write). Callers hold p.mu.
func (p *samplerProcessor) takeOps(touched []*group) []*storage.Operation {
	s := p.store
	if s == nil {
		return nil
	}
	if s.resync.Swap(false) {
		return p.fullOps()
	}
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
		if op := p.groupOp(g); op != nil {
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

// fullOps rewrites the whole state after a failed write. Callers hold p.mu.
func (p *samplerProcessor) fullOps() []*storage.Operation {
	s := p.store
	ops := s.pending
	s.pending = nil
	for _, g := range p.groups {
		if op := p.groupOp(g); op != nil {
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

func (p *samplerProcessor) groupOp(g *group) *storage.Operation {
	data, err := encodeGroup(g)
	if err != nil {
		p.logger.Error("failed to encode a valgen group for storage", zap.Error(err))
		p.store.resync.Store(true)
		return nil
	}
	return storage.SetOperation(groupStorageKey(g.key), data)
}

// forgetGroup queues the storage writes of a group that closed (its key went to ring slot
// slot, or nowhere when slot < 0). Callers hold p.mu.
func (s *groupStore) forgetGroup(key string, slot int) {
	s.pending = append(s.pending, storage.DeleteOperation(groupStorageKey(key)))
	if slot >= 0 {
		s.pending = append(s.pending, storage.SetOperation(closedStorageKey(slot), []byte(key)),
			storage.DeleteOperation(closedLateStorageKey(slot)))
		s.closedDirty = true
	}
	s.indexDirty = true
}

// setLate queues the write of the late count of the closed group in ring slot slot.
func (s *groupStore) setLate(slot int, late int64) {
	s.pending = append(s.pending, lateOp(slot, late))
}

// persist hands the write over from p.mu to p.persistMu, so that writes reach storage in the
// order in which the state changed while other batches proceed in memory. Callers hold p.mu;
// persist releases it.
func (p *samplerProcessor) persist(ctx context.Context, ops []*storage.Operation) error {
	if len(ops) == 0 {
		p.mu.Unlock()
		return nil
	}
	store := p.store
	p.persistMu.Lock()
	p.mu.Unlock()
	defer p.persistMu.Unlock()
	if err := store.client.Batch(ctx, ops...); err != nil {
		p.storageError(ctx, storageOpWrite, err)
		store.resync.Store(true)
		return err
	}
	return nil
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

// persistAll stores every open group at shutdown and forgets them in memory (they are
// reloaded at the next start). Callers hold p.mu, which it keeps.
func (p *samplerProcessor) persistAll(ctx context.Context, store *groupStore) error {
	var ops []*storage.Operation
	saved := p.store
	p.store = store
	if store.resync.Swap(false) {
		ops = p.fullOps()
	} else {
		ops = p.takeOps(p.groupsByAge())
	}
	p.store = saved
	if len(ops) > 0 {
		p.persistMu.Lock()
		err := store.client.Batch(ctx, ops...)
		p.persistMu.Unlock()
		if err != nil {
			p.storageError(ctx, storageOpWrite, err)
			return err
		}
	}
	if n := len(p.groups); n > 0 {
		p.telemetry.ValgenSamplerGroupsOpen.Add(ctx, -int64(n))
		p.logger.Info("open valgen groups kept in storage for the next start", zap.Int("groups", n))
	}
	p.groups = make(map[string]*group)
	p.closed = newClosedGroups(p.cfg.ClosedGroupsCache)
	return nil
}
