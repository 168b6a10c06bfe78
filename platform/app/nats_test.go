package app

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/access"
	"github.com/lowbarena/lowbarena/platform/access/enforce"
	"github.com/lowbarena/lowbarena/platform/app/apptest"
	"github.com/lowbarena/lowbarena/platform/bus"
)

// natsServer starts a real nats-server with JetStream whose options edit
// adjusts, and shuts it down at the end of the test.
func natsServer(t *testing.T, edit func(*server.Options)) *server.Server {
	t.Helper()
	opts := &server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true}
	edit(opts)
	s, err := server.NewServer(opts)
	require.NoError(t, err)
	go s.Start()
	require.True(t, s.ReadyForConnections(10*time.Second))
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}

// arenaNATS starts a server with the permission table's users.
func arenaNATS(t *testing.T) (*server.Server, *access.Credentials) {
	t.Helper()
	creds, err := access.LoadOrCreate(t.TempDir())
	require.NoError(t, err)
	s := natsServer(t, func(o *server.Options) { require.NoError(t, enforce.Configure(o, creds)) })
	return s, creds
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestNATSConfigValidate(t *testing.T) {
	dir := t.TempDir()
	seedFile := filepath.Join(dir, "score.nk")
	kp, err := nkeys.CreateUser()
	require.NoError(t, err)
	seed, err := kp.Seed()
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(seedFile, seed, 0o600))
	pwFile := filepath.Join(dir, "pw")
	require.NoError(t, os.WriteFile(pwFile, []byte("secret\n"), 0o600))

	base := DefaultConfig("score")
	base.NATSAuth, base.NATSTLS, base.Provision = NATSAuth{}, NATSTLS{}, ProvisionAuto
	tests := []struct {
		name  string
		edit  func(*Config)
		wants []string
	}{
		{"a seed file", func(c *Config) { c.NATSAuth.CredsFile = seedFile }, nil},
		{"a seed in the environment", func(c *Config) { c.NATSAuth.Nkey = string(seed) }, nil},
		{"a user with a password file", func(c *Config) { c.NATSAuth.User, c.NATSAuth.PasswordFile = "score", pwFile }, nil},
		{"TLS files", func(c *Config) { c.NATSTLS = NATSTLS{CA: pwFile, Cert: pwFile, Key: pwFile} }, nil},
		{"provision no", func(c *Config) { c.Provision = ProvisionNo }, nil},
		{"two ways at once", func(c *Config) { c.NATSAuth.CredsFile, c.NATSAuth.User, c.NATSAuth.Password = seedFile, "u", "p" }, []string{"not several"}},
		{"a missing credentials file", func(c *Config) { c.NATSAuth.CredsFile = filepath.Join(dir, "none.nk") }, []string{"NATS credentials file", "no such file"}},
		{"a seed that is not one", func(c *Config) { c.NATSAuth.Nkey = "SUnotaseed" }, []string{EnvNATSNkey + " is not a user's nkey seed"}},
		{"a password without its user", func(c *Config) { c.NATSAuth.Password = "p" }, []string{"needs its user"}},
		{"a user without a password", func(c *Config) { c.NATSAuth.User = "u" }, []string{"needs a password"}},
		{"a certificate without its key", func(c *Config) { c.NATSTLS.Cert = pwFile }, []string{"needs its key"}},
		{"a missing CA", func(c *Config) { c.NATSTLS.CA = filepath.Join(dir, "ca.pem") }, []string{"NATS TLS CA"}},
		{"an unknown provisioning mode", func(c *Config) { c.Provision = "sometimes" }, []string{`provision "sometimes"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base
			tt.edit(&c)
			err := c.Validate()
			if tt.wants == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrConfig)
			for _, w := range tt.wants {
				require.ErrorContains(t, err, w)
			}
			require.NotContains(t, err.Error(), string(seed), "no error quotes a seed")
		})
	}
}

func TestNATSFlagsAndEnvironment(t *testing.T) {
	t.Setenv(EnvNATSCreds, "/run/secrets/score.nk")
	t.Setenv(EnvNATSCA, "/etc/ca.pem")
	t.Setenv(EnvProvision, ProvisionNo)
	c := DefaultConfig("score")
	require.Equal(t, "/run/secrets/score.nk", c.NATSAuth.CredsFile)
	require.Equal(t, "/etc/ca.pem", c.NATSTLS.CA)
	require.False(t, c.provisions())
	fs := flag.NewFlagSet("score", flag.ContinueOnError)
	c.RegisterFlags(fs)
	require.NoError(t, fs.Parse([]string{"--nats-creds", "/other.nk", "--provision", "yes"}))
	require.Equal(t, "/other.nk", c.NATSAuth.CredsFile, "a flag wins over its variable")
	require.True(t, c.provisions())
	// auto: only a client without credentials provisions.
	c.Provision = ProvisionAuto
	require.False(t, c.provisions())
	c.NATSAuth = NATSAuth{}
	require.True(t, c.provisions())
	require.Nil(t, fs.Lookup("nats-password"), "no flag carries a secret")
}

func TestConnectNATS(t *testing.T) {
	s, creds := arenaNATS(t)
	pw := natsServer(t, func(o *server.Options) {
		o.Users = []*server.User{{Username: "score", Password: "right"}}
	})
	raw, err := os.ReadFile(creds.SeedFile(access.Score))
	require.NoError(t, err)
	kp, err := access.ParseSeed(raw)
	require.NoError(t, err)
	seed, err := kp.Seed()
	require.NoError(t, err)
	seedEnv := string(seed)
	stranger, err := nkeys.CreateUser()
	require.NoError(t, err)
	strangerSeed, err := stranger.Seed()
	require.NoError(t, err)
	strangerFile := filepath.Join(t.TempDir(), "stranger.nk")
	require.NoError(t, os.WriteFile(strangerFile, strangerSeed, 0o600))
	pwFile := filepath.Join(t.TempDir(), "pw")
	require.NoError(t, os.WriteFile(pwFile, []byte("right\n"), 0o600))

	tests := []struct {
		name string
		url  string
		auth NATSAuth
		want error
	}{
		{"its seed file", s.ClientURL(), NATSAuth{CredsFile: creds.SeedFile(access.Score)}, nil},
		{"its seed from the environment", s.ClientURL(), NATSAuth{Nkey: seedEnv}, nil},
		{"no credentials", s.ClientURL(), NATSAuth{}, ErrNATSAuth},
		{"a key the arena does not know", s.ClientURL(), NATSAuth{CredsFile: strangerFile}, ErrNATSAuth},
		{"a user and password", pw.ClientURL(), NATSAuth{User: "score", Password: "right"}, nil},
		{"a password file", pw.ClientURL(), NATSAuth{User: "score", PasswordFile: pwFile}, nil},
		{"a wrong password", pw.ClientURL(), NATSAuth{User: "score", Password: "wrong"}, ErrNATSAuth},
		{"nothing there", "nats://127.0.0.1:1", NATSAuth{}, ErrNATSUnreachable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nc, err := ConnectNATS(NATSClient{URLs: tt.url, Name: "test", User: access.Score, Auth: tt.auth}, quiet())
			if tt.want != nil {
				require.ErrorIs(t, err, tt.want)
				require.NotContains(t, err.Error(), seedEnv)
				require.NotContains(t, err.Error(), "wrong", "no error quotes a password")
				return
			}
			require.NoError(t, err)
			defer nc.Close()
			require.Equal(t, access.InboxPrefix(access.Score), nc.Opts.InboxPrefix)
		})
	}
}

func TestStartWithCredentials(t *testing.T) {
	s, creds := arenaNATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := func(user, provision string) Config {
		c := DefaultConfig(user)
		c.NATSURL, c.Provision = s.ClientURL(), provision
		c.NATSAuth, c.NATSTLS = NATSAuth{CredsFile: creds.SeedFile(user)}, NATSTLS{}
		return c
	}
	// A service does not create the arena's streams: it says who should.
	_, err := Start(ctx, cfg(access.Score, ProvisionAuto), WithLogOutput(io.Discard), WithoutTelemetry())
	require.ErrorIs(t, err, ErrNotProvisioned)
	require.ErrorContains(t, err, "provision")
	// Told to, it is refused by the server at once, with the code.
	_, err = Start(ctx, cfg(access.Score, ProvisionYes), WithLogOutput(io.Discard), WithoutTelemetry())
	require.ErrorIs(t, err, bus.ErrDenied)
	require.ErrorContains(t, err, string(reason.PermissionDenied))
	require.NotErrorIs(t, err, context.DeadlineExceeded)

	// The operator provisions (the `provision` command).
	op := cfg(access.Operator, ProvisionAuto)
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	op.RegisterFlags(fs)
	require.Equal(t, 0, run(&op, fs, []string{CommandProvision}, nil))
	js, err := jetstream.New(connectAs(t, s, creds, access.Operator))
	require.NoError(t, err)
	for _, name := range access.Streams {
		_, err := js.Stream(ctx, name)
		require.NoError(t, err, name)
	}

	// A service set for a three-node cluster, started against this
	// one-node arena, refuses to start and says why.
	r3 := cfg(access.Score, ProvisionAuto)
	r3.Replicas = 3
	_, err = Start(ctx, r3, WithLogOutput(io.Discard), WithoutTelemetry())
	require.ErrorIs(t, err, bus.ErrStreamMismatch)
	require.ErrorContains(t, err, "1 replicas, want 3")
	require.ErrorContains(t, err, EnvReplicas)

	// Then the service starts as its own user.
	rt, err := Start(ctx, cfg(access.Score, ProvisionAuto), WithLogOutput(io.Discard), WithoutTelemetry())
	require.NoError(t, err)
	defer rt.Close()
	_, err = bus.Emit(ctx, rt.Bus, events.Source(access.Score), events.Score.Failed, "s1",
		events.StageFailedData{SubmissionID: "s1", Stage: "score", Reason: "x", Message: "x."}, bus.WithID("f1"))
	require.NoError(t, err, "its own event")
	_, err = bus.Emit(ctx, rt.Bus, events.Source(access.Score), events.Contract.Failed, "s1",
		events.StageFailedData{SubmissionID: "s1", Stage: "contract", Reason: "x", Message: "x."}, bus.WithID("f2"))
	require.ErrorIs(t, err, bus.ErrDenied, "another stage's")
}

func connectAs(t *testing.T, s *server.Server, creds *access.Credentials, user string) *nats.Conn {
	t.Helper()
	nc, err := ConnectNATS(NATSClient{URLs: s.ClientURL(), Name: user, User: user, Auth: NATSAuth{CredsFile: creds.SeedFile(user)}}, quiet())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

func TestConnectNATSOverTLS(t *testing.T) {
	ca, cert, key := apptest.TLSFiles(t)
	creds, err := access.LoadOrCreate(t.TempDir())
	require.NoError(t, err)
	s := natsServer(t, func(o *server.Options) {
		require.NoError(t, enforce.Configure(o, creds))
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: cert, KeyFile: key})
		require.NoError(t, err)
		o.TLS, o.TLSConfig, o.TLSTimeout = true, tc, 2
	})
	auth := NATSAuth{CredsFile: creds.SeedFile(access.Operator)}
	nc, err := ConnectNATS(NATSClient{URLs: s.ClientURL(), Name: "tls", User: access.Operator, Auth: auth, TLS: NATSTLS{CA: ca}}, quiet())
	require.NoError(t, err)
	state, err := nc.TLSConnectionState()
	require.NoError(t, err)
	require.True(t, state.HandshakeComplete)
	nc.Close()

	// Without the CA the server's certificate is not trusted.
	_, err = ConnectNATS(NATSClient{URLs: s.ClientURL(), Name: "tls", User: access.Operator, Auth: auth}, quiet())
	require.ErrorIs(t, err, ErrNATSTLS)
	require.ErrorContains(t, err, "--nats-ca")
}
