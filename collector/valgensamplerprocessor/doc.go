// Package valgensamplerprocessor tail-samples otel-valgen validation generations: for each
// group of log records (by default one training run's validation step) it keeps the k
// records with the smallest (sample key, sample id) and emits them, ranked, followed by a
// step summary record.
//
//go:generate mdatagen metadata.yaml
package valgensamplerprocessor // import "github.com/otel-valgen/otel-valgen/collector/valgensamplerprocessor"
