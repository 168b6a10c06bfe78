// Package bustest runs a real embedded nats-server with JetStream for tests,
// with its store in t.TempDir(), and connects a Bus to it with the arena's
// streams provisioned.
package bustest

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/ce"
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
		// The arena's default limits reserve a DefaultVolume, which the
		// server must grant whatever the test machine's free disk
		// (nats-server's default is 75% of it); the files only hold what
		// a test writes.
		JetStreamMaxStore: bus.DefaultVolume,
		NoLog:             true,
		NoSigs:            true,
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

// Stored returns the events stored in the ARENA stream on subjects that
// match filter (e.g. "arena.build.*.<id>"), in stream order.
func Stored(t testing.TB, b *bus.Bus, filter string) []event.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := b.JetStream().OrderedConsumer(ctx, events.StreamArena, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}})
	require.NoError(t, err)
	info, err := c.Info(ctx)
	require.NoError(t, err)
	var out []event.Event
	for pending := info.NumPending; pending > 0; pending-- {
		m, err := c.Next(jetstream.FetchMaxWait(5 * time.Second))
		require.NoError(t, err)
		e, err := ce.Decode(m.Headers(), m.Data())
		require.NoError(t, err)
		out = append(out, e)
	}
	return out
}

// Await waits (up to 30 s, a bound on the wait, not a speed assertion)
// until the ARENA stream holds an event of one of types on a subject that
// matches filter, and returns the first such event.
func Await(t testing.TB, b *bus.Bus, filter string, types ...events.Type) event.Event {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, e := range Stored(t, b, filter) {
			if slices.Contains(types, events.Type(e.Type())) {
				return e
			}
		}
		if time.Now().After(deadline) {
			require.FailNow(t, "no such event", "no %v on %s within 30 s", types, filter)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Cluster starts n embedded nats-servers with JetStream, routed to each
// other on loopback as one cluster, each storing in its own t.TempDir(),
// and waits until JetStream has a meta leader. They shut down at the end
// of the test. Streams and buckets on it may be replicated (R3).
func Cluster(t testing.TB, n int) []*server.Server {
	t.Helper()
	ports := make([]int, n)
	for i := range ports {
		ports[i] = freePort(t)
	}
	var routes []*url.URL
	for _, p := range ports {
		routes = append(routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", p)})
	}
	servers := make([]*server.Server, n)
	for i := range servers {
		s, err := server.NewServer(&server.Options{
			ServerName: fmt.Sprintf("n%d", i+1),
			Host:       "127.0.0.1",
			Port:       server.RANDOM_PORT,
			JetStream:  true,
			StoreDir:   t.TempDir(),
			// As Server: the default limits' reservation on each node.
			JetStreamMaxStore: bus.DefaultVolume,
			NoLog:             true,
			NoSigs:            true,
			Cluster:           server.ClusterOpts{Name: "bustest", Host: "127.0.0.1", Port: ports[i]},
			Routes:            routes,
		})
		require.NoError(t, err)
		go s.Start()
		servers[i] = s
		t.Cleanup(func() {
			s.Shutdown()
			s.WaitForShutdown()
		})
	}
	for _, s := range servers {
		require.True(t, s.ReadyForConnections(10*time.Second), "nats-server did not start")
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ready := 0
		for _, s := range servers {
			if s.JetStreamIsLeader() || s.JetStreamIsCurrent() {
				ready++
			}
		}
		if ready == n && slices.ContainsFunc(servers, (*server.Server).JetStreamIsLeader) {
			return servers
		}
		if time.Now().After(deadline) {
			require.FailNow(t, "no JetStream meta leader", "the %d-node cluster elected none within 30 s", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ClusterURL is the comma-separated client URLs of servers.
func ClusterURL(servers []*server.Server) string {
	urls := make([]string, len(servers))
	for i, s := range servers {
		urls[i] = s.ClientURL()
	}
	return strings.Join(urls, ",")
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
