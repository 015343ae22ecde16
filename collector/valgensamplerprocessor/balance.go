// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor // import "github.com/otel-valgen/otel-valgen/collector/valgensamplerprocessor"

// A step summary balances: valgen.seen = valgen.kept + valgen.dropped, and valgen.dropped is
// the sum of its reasons. Each source's seen generations are split on their own (sourceState.
// balance), then added up; otel_valgen.balance is the same rule in Python, and the
// expected "dropped" of testdata/lifecycle/*.json the cases both suites check.

// dropCounts says where the seen generations of a step (or one source) went, other than into
// the kept sample.
type dropCounts struct {
	// sampled: not among the k (nor the extremes, extremes.go). Left out by a source's
	// presampler (its seen minus emitted minus dropped), or ranked out (or delivered twice) at
	// the sampler.
	sampled int64
	// source: dropped by the source itself (bad input, calls after shutdown): its end
	// records' valgen.dropped.
	source int64
	// invalid: reached the sampler but could not be sampled (no sample id, a bad key, seed,
	// count or key version).
	invalid int64
	// undelivered: emitted by an ended source, never arrived before the close (= valgen.missing).
	undelivered int64
	// notEnded: reported seen by the progress records of a source that never ended, never arrived.
	notEnded int64
}

func (d dropCounts) total() int64 {
	return d.sampled + d.source + d.invalid + d.undelivered + d.notEnded
}

func (d *dropCounts) add(o dropCounts) {
	d.sampled += o.sampled
	d.source += o.source
	d.invalid += o.invalid
	d.undelivered += o.undelivered
	d.notEnded += o.notEnded
}

// arrived counts the source's generation records that reached the group, valid or not.
func (s *sourceState) arrived() int64 { return s.received + s.invalid }

// balance splits what one source saw, given how many of its records the group keeps: it
// returns the source's seen and where the rest went, with seen = kept + dropped.total().
//
// A source that ended is taken at its end record (the largest of each count), raised where it
// contradicts what arrived: it emitted at least the records kept from it, and saw at least
// what it emitted plus what it dropped. Of its emitted records, those that did not arrive are
// undelivered, those that arrived invalid are invalid, and the rest that are not kept were
// ranked out; arrivals beyond its emitted (redeliveries) change nothing. A source that did not
// end saw the larger of what arrived from it and its last progress figure; what it reported
// beyond the arrivals is notEnded.
func (s *sourceState) balance(kept int64) (seen int64, d dropCounts) {
	if !s.ended {
		seen = max(s.arrived(), s.progressSeen)
		d.invalid = s.invalid
		d.sampled = s.received - kept
		d.notEnded = seen - s.arrived()
		return seen, d
	}
	emitted := max(s.end.emitted, kept)
	seen = max(s.end.seen, emitted+s.end.dropped)
	d.source = s.end.dropped
	notKept := emitted - kept
	d.undelivered = max(0, emitted-s.arrived())
	d.invalid = min(s.invalid, notKept-d.undelivered)
	d.sampled = seen - emitted - s.end.dropped + notKept - d.undelivered - d.invalid
	return seen, d
}

// balance is the group's seen and its dropped generations by reason (see sourceState.balance).
func (g *group) balance() (seen int64, d dropCounts) {
	keptBy := keptBySource(g)
	for id, state := range g.sources {
		s, sd := state.balance(keptBy[id])
		seen += s
		d.add(sd)
	}
	return seen, d
}

// keptBySource counts the group's kept records per source.
func keptBySource(g *group) map[sourceID]int64 {
	return countKept(g, func(kept *keptRecord) sourceID { return sourceOf(kept.record.Attributes(), kept.resource) })
}

// countKept counts the group's kept records per keyOf.
func countKept[K comparable](g *group, keyOf func(*keptRecord) K) map[K]int64 {
	counts := make(map[K]int64)
	if g.kept != nil {
		g.kept.each(func(_ sortKey, e *entry[keptRecord]) { counts[keyOf(&e.item)]++ })
	}
	return counts
}
