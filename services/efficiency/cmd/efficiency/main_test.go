package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/platform/store"
	"github.com/lowbarena/lowbarena/services/efficiency"
)

// The efficiency stage reads the quality job's answers from the store, so
// its own binary must open a ClickHouse server's URL: without the
// adapter linked it refused LOWBARENA_STORE at every start (as the
// cluster's processes, and docker-compose.yml, give it) and never ran.
func TestBinaryOpensAClickHouseServer(t *testing.T) {
	require.True(t, efficiency.Component().Store, "the efficiency stage keeps or reads rows")
	require.Contains(t, store.Schemes(), "clickhouse")
}
