"""End-to-end tests of the built otel-valgen collector (build/otelcol-valgen)."""
