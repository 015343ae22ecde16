// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgenspanconnector // import "github.com/otel-valgen/otel-valgen/collector/valgenspanconnector"

import (
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/collector/component"
)

// How message parts reach the spans (Config.MessageParts).
const (
	// MessagePartsChatUI rewrites the parts that MLflow's chat view does not render (reasoning,
	// uri and unknown parts) as text parts, and gives a message without parts an empty text
	// part, so that every span renders as chat.
	MessagePartsChatUI = "chat_ui"
	// MessagePartsAsRecorded copies the messages as the records carry them.
	MessagePartsAsRecorded = "as_recorded"
)

// How the structured GenAI attributes reach the spans (Config.MessageEncoding).
const (
	// MessageEncodingStructured puts gen_ai.input.messages, gen_ai.output.messages and the
	// other structured GenAI attributes as OTLP arrays and maps, as the records carry them
	// (what the GenAI conventions ask for where the protocol allows it; MLflow reads it).
	MessageEncodingStructured = "structured"
	// MessageEncodingJSON puts each of them as one JSON string, the conventions' JSON form
	// (Phoenix reads the messages only in that form).
	MessageEncodingJSON = "json"
)

// Defaults of the configuration fields.
const (
	defaultMaxWait        = time.Minute
	defaultMaxGroups      = 100
	defaultMaxBufferBytes = 64 << 20
	// A few thousand spans: 64 kept generations (the sampler's default k) with trajectories
	// of up to ~15 turns and as many tool calls. Tempo has no span limit of its own any more.
	defaultMaxSpansPerTrace = 2048
	// Below Tempo's default max_bytes_per_trace (5,000,000): the estimate (size.go) leaves out
	// the protobuf framing, and the root's lists of what was left out come on top.
	defaultMaxTraceBytes = 4_000_000
	defaultMessageParts  = MessagePartsChatUI
	defaultEncoding      = MessageEncodingStructured
)

var (
	errInvalidMaxWait        = errors.New("max_wait must be > 0")
	errInvalidMaxGroups      = errors.New("max_groups must be > 0")
	errInvalidMaxBufferBytes = errors.New("max_buffer_bytes must be > 0")
	errInvalidMaxSpans       = errors.New("max_spans_per_trace must be > 0")
	errInvalidMaxTraceBytes  = errors.New("max_trace_bytes must be > 0")
	errInvalidMessageParts   = errors.New(`message_parts must be "chat_ui" or "as_recorded"`)
	errInvalidEncoding       = errors.New(`message_encoding must be "structured" or "json"`)
)

// Config defines the configuration of the valgen_spans connector.
type Config struct {
	// MaxWait is how long the kept records of a group wait for its valgen.step.summary, from
	// the first of them; then the group is emitted as a partial trace.
	MaxWait time.Duration `mapstructure:"max_wait"`
	// MaxGroups bounds the groups waiting for their summary; one more emits the oldest as a
	// partial trace.
	MaxGroups int `mapstructure:"max_groups"`
	// MaxBufferBytes bounds the estimated size of the waiting records of all groups; past it
	// the oldest groups are emitted as partial traces.
	MaxBufferBytes int `mapstructure:"max_buffer_bytes"`
	// MaxSpansPerTrace bounds the spans of one trace, its root included.
	MaxSpansPerTrace int `mapstructure:"max_spans_per_trace"`
	// MaxTraceBytes bounds the estimated size of one trace's spans.
	MaxTraceBytes int `mapstructure:"max_trace_bytes"`
	// MessageParts is MessagePartsChatUI or MessagePartsAsRecorded.
	MessageParts string `mapstructure:"message_parts"`
	// MessageEncoding is MessageEncodingStructured or MessageEncodingJSON.
	MessageEncoding string `mapstructure:"message_encoding"`

	// prevent unkeyed literal initialization
	_ struct{}
}

var _ component.Config = (*Config)(nil)

func createDefaultConfig() component.Config {
	return &Config{
		MaxWait:          defaultMaxWait,
		MaxGroups:        defaultMaxGroups,
		MaxBufferBytes:   defaultMaxBufferBytes,
		MaxSpansPerTrace: defaultMaxSpansPerTrace,
		MaxTraceBytes:    defaultMaxTraceBytes,
		MessageParts:     defaultMessageParts,
		MessageEncoding:  defaultEncoding,
	}
}

// Validate checks every field that can be checked before the connector starts.
func (cfg *Config) Validate() error {
	var errs []error
	if cfg.MaxWait <= 0 {
		errs = append(errs, fmt.Errorf("%w, got %s", errInvalidMaxWait, cfg.MaxWait))
	}
	if cfg.MaxGroups <= 0 {
		errs = append(errs, fmt.Errorf("%w, got %d", errInvalidMaxGroups, cfg.MaxGroups))
	}
	if cfg.MaxBufferBytes <= 0 {
		errs = append(errs, fmt.Errorf("%w, got %d", errInvalidMaxBufferBytes, cfg.MaxBufferBytes))
	}
	if cfg.MaxSpansPerTrace <= 0 {
		errs = append(errs, fmt.Errorf("%w, got %d", errInvalidMaxSpans, cfg.MaxSpansPerTrace))
	}
	if cfg.MaxTraceBytes <= 0 {
		errs = append(errs, fmt.Errorf("%w, got %d", errInvalidMaxTraceBytes, cfg.MaxTraceBytes))
	}
	if cfg.MessageParts != MessagePartsChatUI && cfg.MessageParts != MessagePartsAsRecorded {
		errs = append(errs, fmt.Errorf("%w, got %q", errInvalidMessageParts, cfg.MessageParts))
	}
	if cfg.MessageEncoding != MessageEncodingStructured && cfg.MessageEncoding != MessageEncodingJSON {
		errs = append(errs, fmt.Errorf("%w, got %q", errInvalidEncoding, cfg.MessageEncoding))
	}
	return errors.Join(errs...)
}
