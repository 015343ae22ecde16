// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgenspanconnector // import "github.com/otel-valgen/otel-valgen/collector/valgenspanconnector"

import (
	"context"
	"fmt"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/connector"
	"go.opentelemetry.io/collector/consumer"

	"github.com/otel-valgen/otel-valgen/collector/valgenspanconnector/internal/metadata"
)

// NewFactory returns the factory of the valgen_spans connector.
func NewFactory() connector.Factory {
	return connector.NewFactory(
		metadata.Type,
		createDefaultConfig,
		connector.WithLogsToTraces(createLogsToTraces, metadata.LogsToTracesStability),
	)
}

func createLogsToTraces(_ context.Context, set connector.Settings, cfg component.Config, next consumer.Traces) (connector.Logs, error) {
	cCfg, ok := cfg.(*Config)
	if !ok {
		return nil, fmt.Errorf("invalid config type: %T", cfg)
	}
	return newSpanConnector(cCfg, next, set)
}
