// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/extension"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
)

// storedRollout returns the records of a rollout step of two sources: 6 prompts of 3 responses
// each, k = 2 prompts, the 3 most mismatched (asked for 4 by the second source: 3 wins), most of
// them responses of prompts that are not kept. Every response's sample key is below every
// prompt key: taken for a prompt of its own, a response kept alone would be a keyed pick.
func storedRollout() (partA, partB []rec) {
	keyed := func(r rec, p, i int) rec {
		r.hasKey, r.key = true, int64(p*3+i)
		r.hasPromptKey, r.promptKey = true, int64(p+1)<<40
		return r
	}
	for p := range 6 {
		for i := range 3 {
			partA = append(partA, keyed(mismatchedRec("a", p, i, 2, 3, float64((p*7+i*5)%18)/10), p, i))
			partB = append(partB, keyed(mismatchedRec("b", p+6, i, 2, 4, float64((p*5+i*11)%18)/10+0.05), p+6, i))
		}
	}
	return partA, partB
}

// storedEnd is the end record of source's part of storedRollout's step (two sources).
func storedEnd(source string) rec {
	end := endRec(1, source, 18, 18, 2)
	end.kind = kindRollout
	return end
}

// TestStorageKeepsMismatched stores a rollout group with its most mismatched, restarts (memory and
// file storage), and checks that it comes back with n, the same ranked records and slots (a
// response kept alone keeps its prompt's key: it does not become a keyed pick), then closes as
// one process that never restarted would have.
func TestStorageKeepsMismatched(t *testing.T) {
	partA, partB := storedRollout()
	all := append(append(append([]rec{}, partA...), storedEnd("a")), append(partB, storedEnd("b"))...)
	want := closeAll(t, 42, logsOf(all...))

	for _, backend := range []string{"memory", "file_storage"} {
		t.Run(backend, func(t *testing.T) {
			dir := t.TempDir()
			var ext extension.Extension = newMemStorage()
			if backend == "file_storage" {
				ext = newFileStorage(t, dir)
			}
			first := startStored(t, ext, newFakeClock().Now(), nil)
			first.consume(t, logsOf(append(partA, storedEnd("a"))...))
			var before *group
			for _, before = range first.p.groups {
			}
			require.Equal(t, 3, before.kept.m)
			ranked := before.kept.ranked()
			kill(first)
			if backend == "file_storage" {
				require.NoError(t, ext.Shutdown(context.Background()))
				ext = newFileStorage(t, dir)
			}

			second := startStored(t, ext, first.clock.Now(), nil)
			require.Contains(t, second.p.groups, before.key)
			back := second.p.groups[before.key]
			assert.Equal(t, 3, back.kept.m, "n after the restart")
			backRanked := back.kept.ranked()
			require.Len(t, backRanked, len(ranked))
			for i := range ranked {
				assert.Equal(t, ranked[i].order, backRanked[i].order)
				assert.Equal(t, ranked[i].slots, backRanked[i].slots)
			}
			assert.Equal(t, before.kept.promptCount(), back.kept.promptCount())
			second.consume(t, logsOf(append(partB, storedEnd("b"))...))
			require.NoError(t, second.p.Shutdown(context.Background()))
			got := collect(second.sink)
			require.Len(t, got.summaries, 1)
			assert.Equal(t, rankedIDsAndSlots(t, want.kept), rankedIDsAndSlots(t, got.kept))
			for _, name := range []string{attrKept, attrSeen, attrDropped, attrPromptsKept, attrMismatched} {
				assert.Equal(t, intOf(t, want.summaries[0], name), intOf(t, got.summaries[0], name), name)
			}
			require.NoError(t, ext.Shutdown(context.Background()))
		})
	}
}

// TestStoredMismatchedState checks the stored n: one that does not parse, or one on a validation
// group, is corrupt state; so are stored records that neither the keyed prompts nor the most
// mismatched keep (the header without its n).
func TestStoredMismatchedState(t *testing.T) {
	partA, _ := storedRollout()
	h := newHarness(t, nil)
	h.consume(t, logsOf(partA...))
	var g *group
	for _, g = range h.p.groups {
	}
	require.Greater(t, g.kept.keptCount(), g.kept.len(), "responses kept alone")
	data, err := encodeGroup(g)
	require.NoError(t, err)
	back, _, err := decodeGroup(data)
	require.NoError(t, err)
	assert.Equal(t, 3, back.kept.m)
	assert.Equal(t, g.kept.ranked(), back.kept.ranked())

	for name, change := range map[string]func(header pcommon.Map){
		"not an int":             func(h pcommon.Map) { h.PutStr(stateAttrMismatched, "2") },
		"negative":               func(h pcommon.Map) { h.PutInt(stateAttrMismatched, -1) },
		"on a validation group":  func(h pcommon.Map) { h.Remove(stateAttrKind) },
		"fewer than the records": func(h pcommon.Map) { h.PutInt(stateAttrMismatched, 1) },
		"absent with records":    func(h pcommon.Map) { h.Remove(stateAttrMismatched) },
	} {
		t.Run(name, func(t *testing.T) {
			ld, err := (&plog.ProtoUnmarshaler{}).UnmarshalLogs(data)
			require.NoError(t, err)
			change(ld.ResourceLogs().At(0).ScopeLogs().At(0).LogRecords().At(0).Attributes())
			edited, err := (&plog.ProtoMarshaler{}).MarshalLogs(ld)
			require.NoError(t, err)
			_, _, err = decodeGroup(edited)
			require.ErrorIs(t, err, errCorruptState)
		})
	}
}
