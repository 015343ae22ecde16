// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor // import "github.com/otel-valgen/otel-valgen/collector/valgensamplerprocessor"

import (
	"slices"
	"strings"

	"github.com/cespare/xxhash/v2"
	"go.uber.org/zap"
)

// splitFix is what the warning about a launch split into attempts tells the user to do.
const splitFix = "set OTEL_VALGEN_LAUNCH_ID to one new value per launch for all processes, " +
	"or launch with torchrun/Slurm/MPI/Ray, which otel-valgen recognises"

// footprint is what tells a launch split into attempts from a resumed one: the sources of an
// attempt and the span of its record times. Processes of one launch that each got their own
// launch id form attempts that run at the same time and share no source; a resumed launch
// starts after the earlier one stopped. otel_valgen.splits is the same rule in Python.
type footprint struct {
	step        string   // the step key (run, step) of the attempt
	first, last int64    // its smallest and largest record time, unix nanos
	sources     []uint64 // its sources, hashed, sorted
	concurrent  int64    // what its summary reported (valgen.attempts_concurrent)
}

// stepKey is the part of the group's key that names its step (run, step), without the attempt.
func (g *group) stepKey() string {
	return strings.TrimSuffix(g.key, attemptKey(g.attempt))
}

func (g *group) footprint() *footprint {
	f := &footprint{step: g.stepKey(), first: g.attemptStart, last: g.attemptLast}
	f.sources = make([]uint64, 0, len(g.sources))
	for id := range g.sources {
		f.sources = append(f.sources, xxhash.Sum64String(id.name+"\x00"+id.instance))
	}
	slices.Sort(f.sources)
	return f
}

// concurrentWith reports whether two attempts ran at the same time (their record spans
// overlap, ends included) and have no source in common.
func (f *footprint) concurrentWith(o *footprint) bool {
	if len(f.sources) == 0 || len(o.sources) == 0 || f.first > o.last || o.first > f.last {
		return false
	}
	for i, j := 0, 0; i < len(f.sources) && j < len(o.sources); {
		switch {
		case f.sources[i] == o.sources[j]:
			return false
		case f.sources[i] < o.sources[j]:
			i++
		default:
			j++
		}
	}
	return true
}

// concurrentAttempts counts the other attempts of the closing group's step, open or closed
// earlier in this process, that ran at the same time with no common source; fp is the
// closing group's footprint and gets the count. It warns once per step (not when one of those
// attempts closed with a warning already). Callers hold p.mu.
func (p *samplerProcessor) concurrentAttempts(g *group, fp *footprint, st *stats) int64 {
	var n int64
	warned := false
	for _, other := range p.groups {
		if other != g && other.stepKey() == fp.step && fp.concurrentWith(other.footprint()) {
			n++
		}
	}
	for _, other := range p.closed.sameStep(fp.step) {
		if fp.concurrentWith(other) {
			n++
			warned = warned || other.concurrent > 0
		}
	}
	fp.concurrent = n
	if n == 0 {
		return 0
	}
	st.concurrent++
	if !warned {
		p.logger.Warn("a valgen step has attempts that ran at the same time with no common source: "+
			"one launch was probably split into attempts, and each shows as the whole step; "+splitFix,
			zap.String("run_id", g.runID.AsString()), zap.String("step", g.step.AsString()),
			zap.String("attempt", g.attempt), zap.Int64("concurrent_attempts", n))
	}
	return n
}
