package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/platform/bus/bustest"
)

// TestWaitForNATS: a try that JetStream interrupts is made again until it
// passes, for up to NATSOutage; any other error returns at once.
func TestWaitForNATS(t *testing.T) {
	defer func(o time.Duration) { NATSOutage = o }(NATSOutage)
	NATSOutage = 2500 * time.Millisecond
	interrupted := fmt.Errorf("bus: look up stream ARENA: %w", context.DeadlineExceeded)
	for _, tc := range []struct {
		name      string
		fails     int // tries that fail before one passes (-1: all)
		err       error
		wantCalls int
		wantErr   string
	}{
		{name: "passes at once", fails: 0, err: interrupted, wantCalls: 1},
		{name: "interrupted twice", fails: 2, err: interrupted, wantCalls: 3},
		{name: "no stream leader yet", fails: 1, err: jetstream.ErrNoStreamResponse, wantCalls: 2},
		{name: "refused", fails: -1, err: errors.New("permissions violation"), wantCalls: 1, wantErr: "permissions violation"},
		{name: "interrupted for good", fails: -1, err: interrupted, wantCalls: 3, wantErr: "NATS answered nothing for 2.5s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			err := waitForNATS(context.Background(), nil, "test", func(ctx context.Context) error {
				calls++
				_, bounded := ctx.Deadline()
				require.True(t, bounded, "each try is bounded")
				if tc.fails < 0 || calls <= tc.fails {
					return tc.err
				}
				return nil
			})
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, tc.wantCalls, calls)
		})
	}
}

// TestStartWaitsForJetStream: a service started while JetStream answers
// nothing (the server's JetStream off, on again once the service has said
// that it waits) waits for it and starts, instead of exiting into its
// orchestrator's restarts.
func TestStartWaitsForJetStream(t *testing.T) {
	defer func(o, tt, p time.Duration) { NATSOutage, TryTimeout, natsPause = o, tt, p }(NATSOutage, TryTimeout, natsPause)
	// The pause after the first failed try is long enough for the
	// server to bring its JetStream and streams back before the next.
	NATSOutage, TryTimeout, natsPause = time.Minute, time.Second, 3*time.Second
	dir := t.TempDir()
	srv := bustest.Server(t, dir)
	cfg := DefaultConfig("svc")
	cfg.NATSURL = srv.ClientURL()
	rt, err := Start(context.Background(), cfg, WithLogOutput(&bytes.Buffer{}), WithoutTelemetry())
	require.NoError(t, err)
	rt.Close()

	require.NoError(t, srv.DisableJetStream())
	var logs lockedBuffer
	back := make(chan error, 1)
	go func() {
		for !strings.Contains(logs.String(), "NATS does not answer yet") {
			time.Sleep(20 * time.Millisecond)
		}
		back <- srv.EnableJetStream(&server.JetStreamConfig{StoreDir: dir})
	}()
	cfg.Provision = ProvisionNo
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rt, err = Start(ctx, cfg, WithLogOutput(&logs), WithoutTelemetry())
	require.NoError(t, err)
	defer rt.Close()
	require.NoError(t, <-back)
}

// lockedBuffer is a bytes.Buffer safe for a writer and a reader at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
