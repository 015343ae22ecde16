// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor // import "github.com/otel-valgen/otel-valgen/collector/valgensamplerprocessor"

import (
	"context"
	"fmt"

	"go.opentelemetry.io/collector/extension/xextension/storage"
	"go.uber.org/zap"
)

// load reads the stored state into the processor and repairs what it could not read.
// Callers hold p.mu.
func (p *samplerProcessor) load(ctx context.Context, s *extensionStore) error {
	var fix []*storage.Operation
	closedFix, err := p.loadClosed(ctx, s.client)
	if err != nil {
		return err
	}
	fix = append(fix, closedFix...)
	groupsFix, err := p.loadGroups(ctx, s.client)
	if err != nil {
		return err
	}
	fix = append(fix, groupsFix...)
	if len(fix) > 0 {
		if err := s.client.Batch(ctx, fix...); err != nil {
			p.storageError(ctx, storageOpWrite, err)
			s.resync.Store(true)
		}
	}
	if n := len(p.groups); n > 0 {
		p.telemetry.ValgenSamplerGroupsOpen.Add(ctx, int64(n))
	}
	p.logger.Info("valgen sampler state loaded from storage",
		zap.Int("open_groups", len(p.groups)), zap.Int("closed_groups", len(p.closed.ring)))
	return nil
}

// loadClosed restores the closed-groups ring; it returns the writes that repair the stored
// ring when it was damaged or closed_groups_cache changed.
func (p *samplerProcessor) loadClosed(ctx context.Context, client storage.Client) ([]*storage.Operation, error) {
	data, err := client.Get(ctx, storageKeyClosedMeta)
	if err != nil {
		p.storageError(ctx, storageOpRead, err)
		return nil, fmt.Errorf("failed to read the closed groups from storage: %w", err)
	}
	if data == nil {
		return nil, nil
	}
	meta, err := decodeClosedMeta(data)
	if err != nil {
		p.corruptState(ctx, storageKeyClosedMeta, err)
		return []*storage.Operation{storage.SetOperation(storageKeyClosedMeta, encodeClosedMeta(p.closed))}, nil
	}
	gets := make([]*storage.Operation, meta.Len)
	lateGets := make([]*storage.Operation, meta.Len)
	for i := range gets {
		gets[i] = storage.GetOperation(closedStorageKey(i))
		lateGets[i] = storage.GetOperation(closedLateStorageKey(i))
	}
	if len(gets) > 0 {
		if err := client.Batch(ctx, append(append([]*storage.Operation{}, gets...), lateGets...)...); err != nil {
			p.storageError(ctx, storageOpRead, err)
			return nil, fmt.Errorf("failed to read the closed groups from storage: %w", err)
		}
	}
	// A ring written before attempts were part of group keys holds legacy keys: they name
	// attempt "" and are rewritten in the current layout.
	legacy := meta.Version < closedVersion
	damaged := legacy
	for n := range meta.Len {
		i := (meta.Next + n) % meta.Len // oldest first
		op := gets[i]
		if len(op.Value) == 0 {
			p.corruptState(ctx, op.Key, corrupt("missing closed group"))
			damaged = true
			continue
		}
		key := string(op.Value)
		if legacy {
			key += attemptKey("")
		}
		if p.closed.add(key, nil) < 0 { // footprints are not stored
			if cap(p.closed.ring) > 0 {
				p.corruptState(ctx, op.Key, corrupt("closed group repeated"))
				damaged = true
			}
			continue
		}
		if late, err := decodeLate(lateGets[i].Value); err != nil {
			p.corruptState(ctx, lateGets[i].Key, err)
			damaged = true
		} else {
			p.closed.entries[key].late = late
		}
	}
	if !damaged && meta.Cap == cap(p.closed.ring) && meta.Next == p.closed.next {
		return nil, nil // the stored ring already has this layout
	}
	fix := make([]*storage.Operation, 0, 2*meta.Len+1)
	for i, key := range p.closed.ring {
		fix = append(fix, storage.SetOperation(closedStorageKey(i), []byte(key)), lateOp(i, p.closed.entries[key].late))
	}
	for i := len(p.closed.ring); i < meta.Len; i++ {
		fix = append(fix, storage.DeleteOperation(closedStorageKey(i)), storage.DeleteOperation(closedLateStorageKey(i)))
	}
	return append(fix, storage.SetOperation(storageKeyClosedMeta, encodeClosedMeta(p.closed))), nil
}

// loadGroups restores the open groups listed in the index; it returns the writes that drop
// undecodable groups from storage.
func (p *samplerProcessor) loadGroups(ctx context.Context, client storage.Client) ([]*storage.Operation, error) {
	data, err := client.Get(ctx, storageKeyIndex)
	if err != nil {
		p.storageError(ctx, storageOpRead, err)
		return nil, fmt.Errorf("failed to read the open groups from storage: %w", err)
	}
	if data == nil {
		return nil, nil
	}
	var fix []*storage.Operation
	keys, err := decodeIndex(data)
	if err != nil {
		p.corruptState(ctx, storageKeyIndex, err)
		return []*storage.Operation{storage.SetOperation(storageKeyIndex, encodeIndex(p.groups))}, nil
	}
	gets := make([]*storage.Operation, len(keys))
	for i, key := range keys {
		gets[i] = storage.GetOperation(groupStorageKey(key))
	}
	if len(gets) > 0 {
		if err := client.Batch(ctx, gets...); err != nil {
			p.storageError(ctx, storageOpRead, err)
			return nil, fmt.Errorf("failed to read the open groups from storage: %w", err)
		}
	}
	damaged := false
	for i, op := range gets {
		var g *group
		migrated := false
		if op.Value == nil {
			err = corrupt("missing open group")
		} else if g, migrated, err = decodeGroup(op.Value); err == nil && g.key != keys[i] &&
			(!migrated || g.key != keys[i]+attemptKey("")) {
			err = corrupt("group key %q under %q", g.key, keys[i])
		}
		if err == nil {
			if _, dup := p.groups[g.key]; dup {
				err = corrupt("open group repeated")
			}
		}
		if err != nil {
			p.corruptState(ctx, op.Key, err)
			fix = append(fix, storage.DeleteOperation(op.Key))
			damaged = true
			continue
		}
		p.groups[g.key] = g
		p.seq = max(p.seq, g.seq)
		if migrated { // stored before attempts: store it again under its current key
			fix = append(fix, storage.DeleteOperation(op.Key))
			if data, err := encodeGroup(g); err == nil {
				fix = append(fix, storage.SetOperation(groupStorageKey(g.key), data))
			}
			damaged = true
		}
	}
	if damaged {
		fix = append(fix, storage.SetOperation(storageKeyIndex, encodeIndex(p.groups)))
	}
	return fix, nil
}
