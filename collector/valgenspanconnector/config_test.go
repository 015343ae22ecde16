// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgenspanconnector

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/confmaptest"

	"github.com/otel-valgen/otel-valgen/collector/valgenspanconnector/internal/metadata"
)

// TestLoadConfig checks that testdata/config.yaml decodes into the expected configs, and that
// an invalid one names every bad field.
func TestLoadConfig(t *testing.T) {
	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "config.yaml"))
	require.NoError(t, err)

	tests := []struct {
		id          component.ID
		expected    *Config
		errContains []string
	}{
		{
			id:       component.NewID(metadata.Type),
			expected: createDefaultConfig().(*Config),
		},
		{
			id: component.NewIDWithName(metadata.Type, "custom"),
			expected: &Config{
				MaxWait:          10 * time.Second,
				MaxGroups:        5,
				MaxBufferBytes:   1 << 20,
				MaxSpansPerTrace: 100,
				MaxTraceBytes:    500_000,
				MessageParts:     MessagePartsAsRecorded,
				MessageEncoding:  MessageEncodingJSON,
			},
		},
		{
			id: component.NewIDWithName(metadata.Type, "invalid"),
			errContains: []string{
				errInvalidMaxWait.Error(), errInvalidMaxGroups.Error(), errInvalidMaxBufferBytes.Error(),
				errInvalidMaxSpans.Error(), errInvalidMaxTraceBytes.Error(), errInvalidMessageParts.Error(),
				errInvalidEncoding.Error(),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.id.String(), func(t *testing.T) {
			cfg := NewFactory().CreateDefaultConfig()
			sub, err := cm.Sub(tt.id.String())
			require.NoError(t, err)
			require.NoError(t, sub.Unmarshal(cfg))
			err = confmap.Validate(cfg)
			if len(tt.errContains) > 0 {
				for _, want := range tt.errContains {
					require.ErrorContains(t, err, want)
				}
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.expected, cfg)
		})
	}
}

// TestConfigValidate checks each field's bound on its own.
func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Config)
		want error
	}{
		{"defaults", func(*Config) {}, nil},
		{"negative wait", func(c *Config) { c.MaxWait = -time.Second }, errInvalidMaxWait},
		{"no groups", func(c *Config) { c.MaxGroups = 0 }, errInvalidMaxGroups},
		{"no buffer", func(c *Config) { c.MaxBufferBytes = 0 }, errInvalidMaxBufferBytes},
		{"no spans", func(c *Config) { c.MaxSpansPerTrace = 0 }, errInvalidMaxSpans},
		{"no bytes", func(c *Config) { c.MaxTraceBytes = -1 }, errInvalidMaxTraceBytes},
		{"unknown parts", func(c *Config) { c.MessageParts = "semconv" }, errInvalidMessageParts},
		{"json encoding", func(c *Config) { c.MessageEncoding = MessageEncodingJSON }, nil},
		{"unknown encoding", func(c *Config) { c.MessageEncoding = "string" }, errInvalidEncoding},
		{"no encoding", func(c *Config) { c.MessageEncoding = "" }, errInvalidEncoding},
		{"root only", func(c *Config) { c.MaxSpansPerTrace = 1 }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := createDefaultConfig().(*Config)
			tt.edit(cfg)
			err := cfg.Validate()
			if tt.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tt.want)
		})
	}
}
