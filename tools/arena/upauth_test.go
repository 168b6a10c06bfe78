//go:build embedded

package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/platform/access"
	"github.com/lowbarena/lowbarena/platform/app"
	"github.com/lowbarena/lowbarena/platform/app/apptest"
	"github.com/lowbarena/lowbarena/platform/bus"
)

// natsFor starts the embedded NATS of an arena on data, as `arena up`
// does (its users from DATA/credentials, the streams provisioned by the
// operator), and returns it as an arenaProc holding what the helpers use.
func natsFor(t *testing.T, data string, tls serverTLS) *arenaProc {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	creds, err := access.LoadOrCreate(credentialsDir(data))
	require.NoError(t, err)
	ns, err := startNATS(filepath.Join(data, "nats"), "127.0.0.1:0", bus.DefaultVolume, creds, tls, log)
	require.NoError(t, err)
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	a := &arenaProc{data: data, natsURL: ns.ClientURL(), ns: ns, creds: creds, tls: tls, log: log}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, a.provision(ctx))
	return a
}

// An arena keeps its users' credentials across restarts: the same seed
// files, mode 0600, still let the operator in.
func TestUpKeepsItsCredentials(t *testing.T) {
	data := t.TempDir()
	first := natsFor(t, data, serverTLS{})
	seed, err := os.ReadFile(first.creds.SeedFile(access.Operator))
	require.NoError(t, err)
	first.ns.Shutdown()
	first.ns.WaitForShutdown()

	second := natsFor(t, data, serverTLS{})
	again, err := os.ReadFile(second.creds.SeedFile(access.Operator))
	require.NoError(t, err)
	require.Equal(t, seed, again)
	for _, u := range access.Names() {
		st, err := os.Stat(second.creds.SeedFile(u))
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o600), st.Mode().Perm(), u)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := second.dial(ctx)
	require.NoError(t, err)
	c.close()
}

// `arena up --nats-tls-cert --nats-tls-key` serves NATS over TLS only;
// its own clients trust it with --nats-tls-ca.
func TestUpServesNATSOverTLS(t *testing.T) {
	ca, cert, key := apptest.TLSFiles(t)
	a := natsFor(t, t.TempDir(), serverTLS{cert: cert, key: key, ca: ca})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := a.dial(ctx)
	require.NoError(t, err)
	state, err := c.nc.TLSConnectionState()
	require.NoError(t, err)
	require.True(t, state.HandshakeComplete)
	c.close()
	_, err = dialWith(ctx, a.natsURL, a.auth(access.Operator), app.NATSTLS{}, "")
	require.ErrorIs(t, err, app.ErrNATSTLS)

	var opts server.Options
	require.Error(t, serverTLS{cert: cert}.configure(&opts), "a certificate without its key")
	require.Error(t, serverTLS{ca: ca}.configure(&opts), "a CA without a certificate")
	require.False(t, opts.TLS)
}
