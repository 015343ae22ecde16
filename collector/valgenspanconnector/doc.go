// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

// Package valgenspanconnector turns the otel-valgen sampler's output (the kept generation
// records of a step, closed by its valgen.step.summary) into one OpenTelemetry trace per step
// that trace UIs render as GenAI chat: a root span for the step, a span per kept generation
// (its messages, its reward as gen_ai.evaluation.result events) and, for agent trajectories,
// a span per turn and per tool call.
//
//go:generate mdatagen metadata.yaml
package valgenspanconnector // import "github.com/otel-valgen/otel-valgen/collector/valgenspanconnector"
