// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/confmaptest"

	"github.com/otel-valgen/otel-valgen/collector/valgensamplerprocessor/internal/metadata"
)

// TestGroupByIsRefused checks that a config still naming group_by (removed: every component
// groups by run and step) fails to load with the key named, instead of being ignored.
func TestGroupByIsRefused(t *testing.T) {
	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "config.yaml"))
	require.NoError(t, err)
	sub, err := cm.Sub(component.NewIDWithName(metadata.Type, "group_by").String())
	require.NoError(t, err)
	require.ErrorContains(t, sub.Unmarshal(NewFactory().CreateDefaultConfig()), "group_by")
}

// TestLoadConfig checks that testdata/config.yaml decodes into the expected configs.
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
				Count:             8,
				MaxCount:          32,
				Seed:              7,
				DecisionWait:      5 * time.Second,
				MaxStepDuration:   time.Hour,
				MaxGroups:         10,
				ClosedGroupsCache: 100,
				LateRecords:       LateRecordsForward,
			},
		},
		{
			id: component.NewIDWithName(metadata.Type, "stored"),
			expected: func() *Config {
				cfg := createDefaultConfig().(*Config)
				id := component.MustNewIDWithName("file_storage", "sampler")
				cfg.Storage = &id
				return cfg
			}(),
		},
		{
			id:          component.NewIDWithName(metadata.Type, "invalid"),
			errContains: []string{errInvalidCount.Error(), errInvalidLateRecords.Error(), errMaxStepDurBelowWait.Error()},
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

// TestValidateConfig checks each config-time rule with its sentinel error.
func TestValidateConfig(t *testing.T) {
	valid := func(edit func(*Config)) *Config {
		cfg := createDefaultConfig().(*Config)
		edit(cfg)
		return cfg
	}
	tests := []struct {
		name    string
		cfg     *Config
		wantErr error
	}{
		{"default", valid(func(*Config) {}), nil},
		{"zero count", valid(func(c *Config) { c.Count = 0 }), errInvalidCount},
		{"max_count below count", valid(func(c *Config) { c.MaxCount = c.Count - 1 }), errInvalidMaxCount},
		{"zero decision_wait", valid(func(c *Config) { c.DecisionWait = 0 }), errInvalidDecisionWait},
		{"tiny decision_wait", valid(func(c *Config) { c.DecisionWait = time.Millisecond }), errDecisionWaitTooShort},
		{"zero max_step_duration", valid(func(c *Config) { c.MaxStepDuration = 0 }), errInvalidMaxStepDur},
		{"negative max_step_duration", valid(func(c *Config) { c.MaxStepDuration = -time.Second }), errInvalidMaxStepDur},
		{"max_step_duration below decision_wait", valid(func(c *Config) { c.MaxStepDuration = c.DecisionWait - time.Second }), errMaxStepDurBelowWait},
		{"max_step_duration equal to decision_wait", valid(func(c *Config) { c.MaxStepDuration = c.DecisionWait }), nil},
		{"zero max_groups", valid(func(c *Config) { c.MaxGroups = 0 }), errInvalidMaxGroups},
		{"negative cache", valid(func(c *Config) { c.ClosedGroupsCache = -1 }), errInvalidClosedCache},
		{"no cache is allowed", valid(func(c *Config) { c.ClosedGroupsCache = 0 }), nil},
		{"unknown late policy", valid(func(c *Config) { c.LateRecords = "keep" }), errInvalidLateRecords},
		{"forward late records", valid(func(c *Config) { c.LateRecords = LateRecordsForward }), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.wantErr == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tt.wantErr)
			require.ErrorContains(t, err, tt.wantErr.Error())
		})
	}
}

// TestDefaultsAreTheSharedOnes checks count and seed against testdata/defaults.json, which the
// Python library and collector-config/collector.yaml are checked against too.
func TestDefaultsAreTheSharedOnes(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "testdata", "defaults.json"))
	require.NoError(t, err)
	var shared struct {
		Count int    `json:"count"`
		Seed  uint64 `json:"seed"`
	}
	require.NoError(t, json.Unmarshal(data, &shared))
	cfg := createDefaultConfig().(*Config)
	require.Equal(t, shared.Count, cfg.Count)
	require.Equal(t, shared.Seed, cfg.Seed)
}
