// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/plog"
)

// versionedRecords are the generations p/0 .. p/n-1 of step 1 as an SDK of key version
// version sends them: with their key, and valgen.key_version unless version 1.
func versionedRecords(version int64, from, to int) []rec {
	out := make([]rec, 0, to-from)
	for i := from; i < to; i++ {
		id := fmt.Sprintf("p/%d", i)
		r := rec{step: 1, id: id, key: int64(sampleKey(version, defaultSeed, id)), hasKey: true, count: 6}
		if version != keyVersionHMAC {
			r.keyVersion = version
		}
		out = append(out, r)
	}
	return out
}

func allIDs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("p/%d", i)
	}
	return out
}

// TestMixedKeyVersionsInOneStep checks that a step whose generations come with keys of two
// versions is sampled in the version of its first generation: the other version's keys are
// recomputed from seed and sample id, so the result is the bottom-k of all ids in that version.
func TestMixedKeyVersionsInOneStep(t *testing.T) {
	for _, first := range []int64{keyVersionMix, keyVersionHMAC} {
		other := keyVersionHMAC + keyVersionMix - first
		t.Run(fmt.Sprintf("first v%d", first), func(t *testing.T) {
			h := newHarness(t, nil)
			h.consume(t, logsOf(versionedRecords(first, 0, 20)...))
			h.consume(t, logsOf(versionedRecords(other, 20, 40)...))
			require.NoError(t, h.p.Shutdown(context.Background()))
			want := referenceBottomK(first, defaultSeed, allIDs(40), 6)
			require.Equal(t, want, ids(collect(h.sink).kept))
			require.NotEqual(t, referenceBottomK(other, defaultSeed, allIDs(40), 6), want, "the versions must disagree here")
		})
	}
}

// TestKeyVersionIsStored checks that a stored group keeps its key version across a restart,
// and that a group stored before key versions existed resumes in version 1.
func TestKeyVersionIsStored(t *testing.T) {
	for _, legacy := range []bool{false, true} {
		t.Run(fmt.Sprintf("legacy=%v", legacy), func(t *testing.T) {
			ext := newMemStorage()
			first := startStored(t, ext, newFakeClock().Now(), nil)
			version := keyVersionMix
			if legacy {
				version = keyVersionHMAC
			}
			first.consume(t, logsOf(versionedRecords(version, 0, 20)...))
			var key string
			for key = range first.p.groups {
			}
			kill(first)
			if legacy { // as stored before key versions: no key_version in the header
				ld, err := (&plog.ProtoUnmarshaler{}).UnmarshalLogs(ext.data[groupStorageKey(key)])
				require.NoError(t, err)
				ld.ResourceLogs().At(0).ScopeLogs().At(0).LogRecords().At(0).Attributes().Remove(stateAttrKeyVersion)
				data, err := (&plog.ProtoMarshaler{}).MarshalLogs(ld)
				require.NoError(t, err)
				ext.put(groupStorageKey(key), data)
			}

			second := startStored(t, ext, first.clock.Now(), nil)
			require.Equal(t, version, second.p.groups[key].keyVersion)
			// A current SDK sends the rest of the step, and the step ends (one source, expected).
			second.consume(t, logsOf(append(versionedRecords(keyVersionMix, 20, 40), endRec(1, "", 40, 40, 1))...))
			require.Equal(t, referenceBottomK(version, defaultSeed, allIDs(40), 6), ids(collect(second.sink).kept))
		})
	}
}
