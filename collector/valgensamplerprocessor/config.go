// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor // import "github.com/otel-valgen/otel-valgen/collector/valgensamplerprocessor"

import (
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/collector/component"
)

// Late record policies.
const (
	LateRecordsDrop    = "drop"
	LateRecordsForward = "forward"
)

// Defaults of the configuration fields.
const (
	defaultCount             = 64
	defaultMaxCount          = 1024
	defaultSeed              = 42
	defaultDecisionWait      = 30 * time.Second
	defaultMaxStepDuration   = 6 * time.Hour
	defaultMaxGroups         = 1000
	defaultClosedGroupsCache = 10000
	defaultLateRecords       = LateRecordsDrop
)

var (
	errInvalidCount         = errors.New("count must be > 0")
	errInvalidMaxCount      = errors.New("max_count must be >= count")
	errInvalidDecisionWait  = errors.New("decision_wait must be > 0")
	errInvalidMaxGroups     = errors.New("max_groups must be > 0")
	errInvalidClosedCache   = errors.New("closed_groups_cache must be >= 0")
	errInvalidLateRecords   = errors.New("late_records must be \"drop\" or \"forward\"")
	errDecisionWaitTooShort = errors.New("decision_wait must be at least 10ms")
	errInvalidMaxStepDur    = errors.New("max_step_duration must be > 0")
	errMaxStepDurBelowWait  = errors.New("max_step_duration must be >= decision_wait")
)

// Config defines the configuration of the valgen_sampler processor.
type Config struct {
	// Count is the number of records kept per group when a record carries no valgen.sample_count.
	Count int `mapstructure:"count"`
	// MaxCount caps the valgen.sample_count that records may ask for.
	MaxCount int `mapstructure:"max_count"`
	// Seed is the sampling seed used for records that carry neither valgen.sample_key nor valgen.seed.
	Seed uint64 `mapstructure:"seed"`
	// DecisionWait is how long a group stays open after its last record when it cannot close as complete.
	DecisionWait time.Duration `mapstructure:"decision_wait"`
	// MaxStepDuration closes a group this long after its first record, whatever its sources
	// announced: the bound for a step whose source promised to come (start record,
	// sources_expected) and died.
	MaxStepDuration time.Duration `mapstructure:"max_step_duration"`
	// MaxGroups bounds the open groups; opening one more closes the oldest early.
	MaxGroups int `mapstructure:"max_groups"`
	// ClosedGroupsCache is how many closed groups are remembered to recognise late records.
	ClosedGroupsCache int `mapstructure:"closed_groups_cache"`
	// LateRecords says what happens to generations of a closed group: "drop" or "forward".
	LateRecords string `mapstructure:"late_records"`
	// Storage is the ID of a storage extension (e.g. file_storage) that keeps the open groups
	// and the closed-groups cache across restarts. Unset: both live in memory only and open
	// groups are flushed downstream at shutdown.
	Storage *component.ID `mapstructure:"storage"`
	// SamplerID names this sampler on the summaries it emits (valgen.sampler), so that partial
	// groups of one step closed by different samplers can be merged downstream. Unset: the
	// host name (a StatefulSet pod's name is stable across restarts).
	SamplerID string `mapstructure:"sampler_id"`

	// prevent unkeyed literal initialization
	_ struct{}
}

var _ component.Config = (*Config)(nil)

func createDefaultConfig() component.Config {
	return &Config{
		Count:             defaultCount,
		MaxCount:          defaultMaxCount,
		Seed:              defaultSeed,
		DecisionWait:      defaultDecisionWait,
		MaxStepDuration:   defaultMaxStepDuration,
		MaxGroups:         defaultMaxGroups,
		ClosedGroupsCache: defaultClosedGroupsCache,
		LateRecords:       defaultLateRecords,
	}
}

// Validate checks every field that can be checked before the processor starts.
func (cfg *Config) Validate() error {
	var errs []error
	if cfg.Count <= 0 {
		errs = append(errs, fmt.Errorf("%w, got %d", errInvalidCount, cfg.Count))
	}
	if cfg.MaxCount < cfg.Count {
		errs = append(errs, fmt.Errorf("%w (%d), got %d", errInvalidMaxCount, cfg.Count, cfg.MaxCount))
	}
	switch {
	case cfg.DecisionWait <= 0:
		errs = append(errs, fmt.Errorf("%w, got %s", errInvalidDecisionWait, cfg.DecisionWait))
	case cfg.DecisionWait < 10*time.Millisecond:
		errs = append(errs, fmt.Errorf("%w, got %s", errDecisionWaitTooShort, cfg.DecisionWait))
	}
	switch {
	case cfg.MaxStepDuration <= 0:
		errs = append(errs, fmt.Errorf("%w, got %s", errInvalidMaxStepDur, cfg.MaxStepDuration))
	case cfg.MaxStepDuration < cfg.DecisionWait:
		errs = append(errs, fmt.Errorf("%w (%s), got %s", errMaxStepDurBelowWait, cfg.DecisionWait, cfg.MaxStepDuration))
	}
	if cfg.MaxGroups <= 0 {
		errs = append(errs, fmt.Errorf("%w, got %d", errInvalidMaxGroups, cfg.MaxGroups))
	}
	if cfg.ClosedGroupsCache < 0 {
		errs = append(errs, fmt.Errorf("%w, got %d", errInvalidClosedCache, cfg.ClosedGroupsCache))
	}
	if cfg.LateRecords != LateRecordsDrop && cfg.LateRecords != LateRecordsForward {
		errs = append(errs, fmt.Errorf("%w, got %q", errInvalidLateRecords, cfg.LateRecords))
	}
	return errors.Join(errs...)
}
