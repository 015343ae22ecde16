// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor

import (
	"context"
	"testing"

	"github.com/open-telemetry/opentelemetry-collector-contrib/extension/storage/filestorage"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/extension"
	"go.opentelemetry.io/collector/extension/extensiontest"
)

// newFileStorage starts the real file_storage extension on dir.
func newFileStorage(tb testing.TB, dir string) extension.Extension {
	tb.Helper()
	factory := filestorage.NewFactory()
	cfg := factory.CreateDefaultConfig().(*filestorage.Config)
	cfg.Directory = dir
	cfg.Compaction.Directory = dir
	ext, err := factory.Create(context.Background(), extensiontest.NewNopSettings(factory.Type()), cfg)
	require.NoError(tb, err)
	require.NoError(tb, ext.Start(context.Background(), componenttest.NewNopHost()))
	return ext
}

// TestFileStorageRestart runs the kill-and-restart story on the real file_storage extension:
// the process dies after one source's part of a step was acknowledged, the step completes once
// after the restart, and a redelivery of the closed step is late.
func TestFileStorageRestart(t *testing.T) {
	const k = 4
	dir := t.TempDir()
	partA := append(stepRecords(5, "A", 6, k), endRec(5, "A", 6, 6, 2))
	partB := append(stepRecords(5, "B", 6, k), endRec(5, "B", 6, 6, 2))

	ext := newFileStorage(t, dir)
	first := startStored(t, ext, newFakeClock().Now(), nil)
	first.consume(t, logsOf(partA...))
	kill(first)
	require.NoError(t, ext.Shutdown(context.Background())) // the process is gone: its files are closed

	ext = newFileStorage(t, dir)
	second := startStored(t, ext, first.clock.Now(), nil)
	second.consume(t, logsOf(partB...))
	got := collect(second.sink)
	require.Len(t, got.summaries, 1)
	assert.Equal(t, wantBottomK(k, partA, partB), ids(got.kept))
	assert.Equal(t, closedComplete, strOf(t, got.summaries[0], attrClosedReason))
	assert.Equal(t, int64(12), intOf(t, got.summaries[0], attrSeen))
	require.NoError(t, second.p.Shutdown(context.Background()))
	require.NoError(t, ext.Shutdown(context.Background()))

	ext = newFileStorage(t, dir)
	third := startStored(t, ext, first.clock.Now(), nil)
	third.consume(t, logsOf(partA...))
	require.NoError(t, third.p.Shutdown(context.Background()))
	require.NoError(t, ext.Shutdown(context.Background()))
	got = collect(third.sink)
	require.Empty(t, got.kept, "the redelivered step is late, not a second step")
	require.Empty(t, got.summaries)
	require.Len(t, got.other, 1, "one late report")
	assert.Equal(t, eventLate, got.other[0].EventName())
	assert.Equal(t, int64(7), intOf(t, got.other[0], attrLate))
}

var _ component.Host = storageHost{}
