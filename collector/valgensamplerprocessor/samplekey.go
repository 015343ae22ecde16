// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor // import "github.com/otel-valgen/otel-valgen/collector/valgensamplerprocessor"

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
)

// sampleKey returns the sampling key of sampleID under seed, in [0, 2^63).
//
// It is the first 8 bytes (big-endian) of HMAC-SHA256 keyed with the seed's 8 big-endian
// bytes over the UTF-8 bytes of sampleID, shifted right by one bit. The Python package
// (otel_valgen.sampling.sample_key) computes the same value; testdata/sampling holds the
// vectors that both test suites check.
func sampleKey(seed uint64, sampleID string) uint64 {
	var key [8]byte
	binary.BigEndian.PutUint64(key[:], seed)
	mac := hmac.New(sha256.New, key[:])
	_, _ = mac.Write([]byte(sampleID))
	var sum [sha256.Size]byte
	return binary.BigEndian.Uint64(mac.Sum(sum[:0])[:8]) >> 1
}

// sortKey is the order in which records are kept: by key, ties broken by the id's bytes.
type sortKey struct {
	key uint64
	id  string
}

func (a sortKey) less(b sortKey) bool {
	if a.key != b.key {
		return a.key < b.key
	}
	return a.id < b.id
}
