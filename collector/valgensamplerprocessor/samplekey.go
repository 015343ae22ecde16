// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgensamplerprocessor // import "github.com/otel-valgen/otel-valgen/collector/valgensamplerprocessor"

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"strings"

	"github.com/cespare/xxhash/v2"
)

// Versions of the sampling key function, as records name them in valgen.key_version. The
// Python package (otel_valgen.sampling) defines both; testdata/sampling holds the vectors that
// both test suites check.
const (
	keyVersionHMAC    int64 = 1 // records without valgen.key_version
	keyVersionMix     int64 = 2
	goldenGamma             = 0x9E3779B97F4A7C15
	maxIndexDigits          = 19 // 10^19 - 1 + 1 still fits in 64 bits
	hexBaseLength           = 16
	splitMixMultiply1       = 0xBF58476D1CE4E5B9
	splitMixMultiply2       = 0x94D049BB133111EB
)

// knownKeyVersion reports whether the processor can compute keys of version v.
func knownKeyVersion(v int64) bool { return v == keyVersionHMAC || v == keyVersionMix }

// sampleKey returns the sampling key of sampleID under seed with key function version, in
// [0, 2^63). Unknown versions are refused when records are parsed (knownKeyVersion).
func sampleKey(version int64, seed uint64, sampleID string) uint64 {
	if version == keyVersionMix {
		return mixKey(seed, sampleID)
	}
	return hmacKey(seed, sampleID)
}

// hmacKey is version 1: the first 8 bytes (big-endian) of HMAC-SHA256 keyed with the seed's
// 8 big-endian bytes over the UTF-8 bytes of sampleID, shifted right by one bit.
func hmacKey(seed uint64, sampleID string) uint64 {
	var key [8]byte
	binary.BigEndian.PutUint64(key[:], seed)
	mac := hmac.New(sha256.New, key[:])
	_, _ = mac.Write([]byte(sampleID))
	var sum [sha256.Size]byte
	return binary.BigEndian.Uint64(mac.Sum(sum[:0])[:8]) >> 1
}

// mixKey is version 2: mix64(idHash(base) XOR seedLane(seed, n)) >> 1, where base and n come
// from the id's response-index suffix (splitSampleID).
func mixKey(seed uint64, sampleID string) uint64 {
	base, n := splitSampleID(sampleID)
	return mix64(idHash(base)^seedLane(seed, n)) >> 1
}

// splitSampleID returns (base, 1 + index) for "<base>/<index>" and "<base>/<index>@<tag>",
// where index is 1 to 19 ASCII digits without a leading zero (unless it is "0"), and
// (sampleID, 0) for any other id. The tag names the part that emitted the record: two parts
// answering one prompt get the same key and different ids.
func splitSampleID(sampleID string) (string, uint64) {
	slash := strings.LastIndexByte(sampleID, '/')
	if slash < 0 {
		return sampleID, 0
	}
	digits := sampleID[slash+1:]
	if at := strings.IndexByte(digits, '@'); at >= 0 {
		digits = digits[:at]
	}
	if len(digits) == 0 || len(digits) > maxIndexDigits || (digits[0] == '0' && len(digits) > 1) {
		return sampleID, 0
	}
	var index uint64
	for i := 0; i < len(digits); i++ {
		c := digits[i]
		if c < '0' || c > '9' {
			return sampleID, 0
		}
		index = index*10 + uint64(c-'0')
	}
	return sampleID[:slash], index + 1
}

// idHash is a prompt id's 64-bit hash: the value of its 16 lowercase hex digits when it is
// one (an id the SDK derived from the input's XXH64), else the XXH64 of its bytes.
func idHash(base string) uint64 {
	if len(base) == hexBaseLength {
		var value uint64
		hex := true
		for i := 0; i < hexBaseLength && hex; i++ {
			switch c := base[i]; {
			case c >= '0' && c <= '9':
				value = value<<4 | uint64(c-'0')
			case c >= 'a' && c <= 'f':
				value = value<<4 | uint64(c-'a'+10)
			default:
				hex = false
			}
		}
		if hex {
			return value
		}
	}
	return xxhash.Sum64String(base)
}

// mix64 is the SplitMix64 finaliser, a bijection of 64-bit words.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * splitMixMultiply1
	z = (z ^ (z >> 27)) * splitMixMultiply2
	return z ^ (z >> 31)
}

// seedLane is the word that response lane n is keyed with: SplitMix64's n-th output for seed.
func seedLane(seed, n uint64) uint64 {
	return mix64(seed + n*goldenGamma)
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
