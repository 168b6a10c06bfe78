package main

import (
	"net"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/platform/app"
)

// TestUpRefusesBadMetricsAddr: a --metrics-addr arena up cannot listen on
// is a usage error, said before the arena starts anything.
func TestUpRefusesBadMetricsAddr(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { held.Close() })
	tests := []struct {
		name, addr string
		wants      []string
	}{
		{"no port", "127.0.0.1", []string{`metrics address "127.0.0.1" is not host:port`}},
		{"port in use", held.Addr().String(), []string{"address already in use", "--metrics-addr", app.EnvMetricsAddr}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := arena(t, "up", "--data", t.TempDir(), "--nats-listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--metrics-addr", tt.addr)
			require.Equal(t, exitUsage, r.code, r.stderr)
			for _, w := range tt.wants {
				require.Contains(t, r.stderr, w)
			}
			require.NotContains(t, r.stdout, "arena up: NATS", "the arena did not come up")
		})
	}
}
