// Package bustest runs a real embedded nats-server with JetStream for tests,
// with its store in t.TempDir(), and connects a Bus to it with the arena's
// streams provisioned.
package bustest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events/bus"
)

// Server starts an embedded nats-server with JetStream on a random loopback
// port, storing in dir (t.TempDir() when empty), and shuts it down at the
// end of the test.
func Server(t testing.TB, dir string) *server.Server {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	s, err := server.NewServer(&server.Options{
		ServerName: "bustest",
		Host:       "127.0.0.1",
		Port:       server.RANDOM_PORT,
		JetStream:  true,
		StoreDir:   dir,
		NoLog:      true,
		NoSigs:     true,
	})
	require.NoError(t, err)
	go s.Start()
	require.True(t, s.ReadyForConnections(10*time.Second), "nats-server did not start")
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

// Connect opens a client connection to s, closed at the end of the test.
func Connect(t testing.TB, s *server.Server) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL(), nats.Name(t.Name()))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

// Bus starts a server, connects, provisions the arena's streams and returns
// the bus and the server.
func Bus(t testing.TB, opts ...bus.Option) (*bus.Bus, *server.Server) {
	t.Helper()
	s := Server(t, "")
	b, err := bus.New(Connect(t, s), opts...)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, bus.Provision(ctx, b.JetStream(), bus.Topology{}))
	return b, s
}
