package app

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
)

func TestConfigValidate(t *testing.T) {
	base := DefaultConfig("svc")
	base.NATSURL = DefaultNATSURL
	tests := []struct {
		name  string
		edit  func(*Config)
		wants []string // substrings of the error; none means valid
	}{
		{"defaults", func(*Config) {}, nil},
		{"cluster urls", func(c *Config) { c.NATSURL = "nats://a:4222, nats://b:4222"; c.Replicas = 3 }, nil},
		{"chdb store", func(c *Config) { c.Store = "chdb:///var/lib/arena" }, nil},
		{"clickhouse store", func(c *Config) { c.Store = "clickhouse://u:p@ch:9000/arena" }, nil},
		{"empty nats", func(c *Config) { c.NATSURL = " " }, []string{"NATS URL is empty"}},
		{"http nats", func(c *Config) { c.NATSURL = "http://x:1" }, []string{`"http://x:1" is not nats://host:port`}},
		{"relative chdb", func(c *Config) { c.Store = "chdb://data" }, []string{"absolute folder"}},
		{"postgres", func(c *Config) { c.Store = "postgres://x/y" }, []string{"scheme must be chdb or clickhouse"}},
		{"bad otel", func(c *Config) { c.OTel = "jaeger" }, []string{"unknown exporter"}},
		{"metrics on every interface", func(c *Config) { c.MetricsAddr = ":9464" }, nil},
		{"metrics without port", func(c *Config) { c.MetricsAddr = "localhost" }, []string{`metrics address "localhost" is not host:port`}},
		{"metrics port not a number", func(c *Config) { c.MetricsAddr = "127.0.0.1:http" }, []string{`port "http" is not a number`}},
		{"bad level and format and replicas, all reported", func(c *Config) {
			c.LogLevel, c.LogFormat, c.Replicas = "loud", "xml", 2
		}, []string{`log level "loud"`, `log format "xml"`, "replicas 2"}},
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
		})
	}
}

func TestDefaultConfigFromEnv(t *testing.T) {
	t.Setenv(EnvNATSURL, "nats://10.0.0.1:4222")
	t.Setenv(EnvStore, "clickhouse://ch:9000/arena")
	t.Setenv(EnvReplicas, "three")
	t.Setenv(EnvMetricsAddr, "0.0.0.0:9464")
	c := DefaultConfig("svc")
	require.Equal(t, "0.0.0.0:9464", c.MetricsAddr)
	require.Equal(t, "nats://10.0.0.1:4222", c.NATSURL)
	require.Equal(t, "clickhouse://ch:9000/arena", c.Store)
	require.ErrorContains(t, c.Validate(), "replicas -1")
}

func TestRunActors(t *testing.T) {
	boom := errors.New("boom")
	waitCancel := func(ctx context.Context) error { <-ctx.Done(); return nil }

	t.Run("first failure cancels the others", func(t *testing.T) {
		stopped := make(chan struct{})
		err := RunActors(context.Background(), nil,
			Actor{"waits", func(ctx context.Context) error { <-ctx.Done(); close(stopped); return nil }},
			Actor{"fails", func(context.Context) error { return boom }},
		)
		require.ErrorIs(t, err, boom)
		require.ErrorContains(t, err, "fails: boom")
		_, open := <-stopped
		require.False(t, open)
	})
	t.Run("cancelled context is a clean stop", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		require.NoError(t, RunActors(ctx, nil, Actor{"a", waitCancel}, Actor{"b", waitCancel}))
	})
	t.Run("an actor that returns early is a failure", func(t *testing.T) {
		err := RunActors(context.Background(), nil, Actor{"a", waitCancel}, Actor{"quitter", func(context.Context) error { return nil }})
		require.ErrorContains(t, err, "quitter stopped unexpectedly")
	})
}

func TestStartProvisionsAndCloses(t *testing.T) {
	srv := bustest.Server(t, "")
	cfg := DefaultConfig("svc")
	cfg.NATSURL = srv.ClientURL()
	var logs bytes.Buffer
	rt, err := Start(context.Background(), cfg, WithLogOutput(&logs), WithoutTelemetry())
	require.NoError(t, err)
	require.Nil(t, rt.Store)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, name := range []string{events.StreamArena, events.StreamRunnerJobs, events.StreamDLQ} {
		_, err := rt.Bus.JetStream().Stream(ctx, name)
		require.NoError(t, err, name)
	}
	_, err = rt.Bus.JetStream().KeyValue(ctx, "submissions")
	require.NoError(t, err)
	rt.Close()
	rt.Close() // idempotent
	require.True(t, rt.NC.IsClosed())
	_, err = rt.Bus.JetStream().Stream(ctx, events.StreamArena)
	require.Error(t, err)
	require.NotErrorIs(t, err, jetstream.ErrStreamNotFound)
}

func TestStartFailsFastWithoutNATS(t *testing.T) {
	cfg := DefaultConfig("svc")
	cfg.NATSURL = "nats://127.0.0.1:1" // nothing listens on port 1
	_, err := Start(context.Background(), cfg, WithLogOutput(&bytes.Buffer{}), WithoutTelemetry())
	require.ErrorIs(t, err, ErrNATSUnreachable)
	require.ErrorContains(t, err, "127.0.0.1:1")
}

func TestStartRejectsBadConfigBeforeConnecting(t *testing.T) {
	cfg := DefaultConfig("svc")
	cfg.NATSURL = "nats://127.0.0.1:1"
	cfg.LogLevel = "chatty"
	_, err := Start(context.Background(), cfg, WithoutTelemetry())
	require.ErrorIs(t, err, ErrConfig)
	require.NotErrorIs(t, err, ErrNATSUnreachable)
}

func TestHTTPActorServesUntilCancelled(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	a := HTTPActor("api", ln, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("pong")) }), time.Second)
	go func() { done <- a.Run(ctx) }()
	resp, err := http.Get("http://" + ln.Addr().String() + "/")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, "pong", string(body))
	cancel()
	require.NoError(t, <-done)
	_, err = http.Get("http://" + ln.Addr().String() + "/")
	require.Error(t, err, "the listener must be closed after shutdown")
}
