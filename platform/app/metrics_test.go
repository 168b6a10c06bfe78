package app_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/observability"
	"github.com/lowbarena/lowbarena/platform/app"
	"github.com/lowbarena/lowbarena/platform/app/apptest"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
)

func tctx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// get returns the status and body of a GET of url.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// startWithMetrics starts a runtime the way a service binary does, from
// its flags (--metrics-addr 127.0.0.1:0), against srvURL, and serves its
// metrics actor until the test ends.
func startWithMetrics(t *testing.T, natsURL string) (*app.Runtime, string) {
	t.Helper()
	cfg := app.DefaultConfig("metricsvc")
	fs := app.Component{Name: "metricsvc"}.FlagSet(&cfg)
	require.NoError(t, fs.Parse([]string{"--nats", natsURL, "--metrics-addr", "127.0.0.1:0"}))
	rt, err := app.Start(context.Background(), cfg, app.WithLogOutput(io.Discard))
	require.NoError(t, err)
	t.Cleanup(rt.Close)
	a, ok := rt.MetricsActor()
	require.True(t, ok)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	return rt, "http://" + rt.MetricsAddr().String()
}

func TestMetricsEndpointCountsConsumedEvents(t *testing.T) {
	srv := bustest.Server(t, "")
	rt, base := startWithMetrics(t, srv.ClientURL())
	ctx := tctx(t)

	code, body := get(t, base+app.PathHealthz)
	require.Equal(t, http.StatusOK, code, body)
	code, body = get(t, base+app.PathReadyz)
	require.Equal(t, http.StatusOK, code, body)

	cons := bus.ConsumerConfig{Name: "metrics-test", Subjects: []string{"arena.build.>"}}
	consumed := map[string]string{"consumer": cons.Name, "outcome": "ack", "type": string(events.BuildStarted)}
	before, err := apptest.Scrape(ctx, base+app.PathMetrics)
	require.NoError(t, err)
	// The Go and process collectors are on the service's own registry.
	for _, name := range []string{"go_goroutines", "process_cpu_seconds_total", "target_info"} {
		_, ok := before.Sum(name, nil)
		require.True(t, ok, "%s missing from %v", name, before.Names())
	}
	n0, _ := before.Sum(apptest.ConsumedTotal, consumed)
	total0, err := apptest.Consumed(ctx, base+app.PathMetrics)
	require.NoError(t, err)
	require.Zero(t, total0, "nothing consumed yet")

	_, err = rt.Bus.PublishNew(ctx, "metrics-1", events.BuildStarted, events.Source("test"), bustest.SampleSubject, bustest.Sample(events.BuildStarted))
	require.NoError(t, err)
	out, err := rt.Bus.Next(ctx, cons, 10*time.Second, func(context.Context, *bus.Delivery) bus.Outcome { return bus.Ack() })
	require.NoError(t, err)
	require.True(t, out.IsAck())

	after, err := apptest.Scrape(ctx, base+app.PathMetrics)
	require.NoError(t, err)
	n1, ok := after.Sum(apptest.ConsumedTotal, consumed)
	require.True(t, ok, "no %s in %v", apptest.ConsumedTotal, after.Names())
	require.Equal(t, n0+1, n1, "one message consumed and acked")
	require.Equal(t, n0+1, after.By(apptest.ConsumedTotal, "consumer")[cons.Name])
	total1, err := apptest.Consumed(ctx, base+app.PathMetrics)
	require.NoError(t, err)
	require.Equal(t, 1.0, total1, "the cluster harness's helper sees the message too")
	pub, ok := after.Sum("lowbarena_events_published_total", map[string]string{"type": string(events.BuildStarted)})
	require.True(t, ok)
	require.Equal(t, 1.0, pub)
	handled, ok := after.Sum("lowbarena_events_handler_duration_seconds", map[string]string{"consumer": cons.Name})
	require.True(t, ok, "the handler's time is a histogram in seconds")
	require.Equal(t, 1.0, handled)
}

// TestMetricNamesAndBuckets holds the Prometheus names of the bus's
// instruments to Prometheus's conventions (unit suffix, _total on
// counters, annotations such as {event} dropped) and its duration
// histogram to buckets in seconds, not the SDK's default (0 … 10000, for
// milliseconds).
func TestMetricNamesAndBuckets(t *testing.T) {
	srv := bustest.Server(t, "")
	rt, base := startWithMetrics(t, srv.ClientURL())
	ctx := tctx(t)
	cons := bus.ConsumerConfig{Name: "names-test", Subjects: []string{"arena.build.>"}}
	_, err := rt.Bus.PublishNew(ctx, "names-1", events.BuildStarted, events.Source("test"), bustest.SampleSubject, bustest.Sample(events.BuildStarted))
	require.NoError(t, err)
	_, err = rt.Bus.Next(ctx, cons, 10*time.Second, func(context.Context, *bus.Delivery) bus.Outcome { return bus.Ack() })
	require.NoError(t, err)
	fams, err := apptest.Scrape(ctx, base+app.PathMetrics)
	require.NoError(t, err)

	tests := []struct {
		otel, prom, typ string
	}{
		{"lowbarena.events.published {event}", "lowbarena_events_published_total", "COUNTER"},
		{"lowbarena.events.consumed {event}", "lowbarena_events_consumed_total", "COUNTER"},
		{"lowbarena.events.handler.duration s", "lowbarena_events_handler_duration_seconds", "HISTOGRAM"},
	}
	for _, tt := range tests {
		t.Run(tt.otel, func(t *testing.T) {
			f, ok := fams[tt.prom]
			require.True(t, ok, "%s is not %s among %v", tt.otel, tt.prom, fams.Names())
			require.Equal(t, tt.typ, f.GetType().String())
		})
	}
	h := fams["lowbarena_events_handler_duration_seconds"].GetMetric()[0].GetHistogram()
	var bounds []float64
	for _, b := range h.GetBucket() {
		bounds = append(bounds, b.GetUpperBound())
	}
	// The text format ends every histogram with its +Inf bucket.
	require.Equal(t, append(append([]float64{}, observability.DurationBuckets...), math.Inf(1)), bounds)
}

func TestReadyz(t *testing.T) {
	t.Run("not ready before the streams are provisioned, ready after", func(t *testing.T) {
		srv := bustest.Server(t, "")
		b, err := bus.New(bustest.Connect(t, srv))
		require.NoError(t, err)
		rt := &app.Runtime{Config: app.DefaultConfig("svc"), NC: b.Conn(), Bus: b}
		m, err := app.NewMetrics()
		require.NoError(t, err)
		hs := httptest.NewServer(m.Handler(rt.Ready))
		t.Cleanup(hs.Close)

		code, body := get(t, hs.URL+app.PathReadyz)
		require.Equal(t, http.StatusServiceUnavailable, code)
		require.Contains(t, body, "not provisioned")
		code, _ = get(t, hs.URL+app.PathHealthz)
		require.Equal(t, http.StatusOK, code, "alive while not ready")

		require.NoError(t, bus.Provision(tctx(t), b.JetStream(), bus.Topology{}))
		code, body = get(t, hs.URL+app.PathReadyz)
		require.Equal(t, http.StatusOK, code, body)

		// A component's own check (the quality stage's sandbox) turns
		// the process unready with its reason, and ready once it passes.
		var broken atomic.Bool
		broken.Store(true)
		rt.AddReadyCheck(func(context.Context) error {
			if broken.Load() {
				return errors.New("bubblewrap cannot create namespaces")
			}
			return nil
		})
		code, body = get(t, hs.URL+app.PathReadyz)
		require.Equal(t, http.StatusServiceUnavailable, code)
		require.Equal(t, "not ready: bubblewrap cannot create namespaces\n", body)
		broken.Store(false)
		code, body = get(t, hs.URL+app.PathReadyz)
		require.Equal(t, http.StatusOK, code, body)
	})
	t.Run("not ready once NATS goes away, alive still", func(t *testing.T) {
		srv := bustest.Server(t, "")
		_, base := startWithMetrics(t, srv.ClientURL())
		code, body := get(t, base+app.PathReadyz)
		require.Equal(t, http.StatusOK, code, body)
		srv.Shutdown()
		srv.WaitForShutdown()
		code, body = get(t, base+app.PathReadyz)
		require.Equal(t, http.StatusServiceUnavailable, code)
		require.Contains(t, body, "not ready: ")
		// Until the client notices the server is gone the stream look-up
		// fails instead; once it has, the probe says so.
		require.Eventually(t, func() bool {
			code, body = get(t, base+app.PathReadyz)
			return code == http.StatusServiceUnavailable && strings.Contains(body, "NATS connection is")
		}, 20*time.Second, 100*time.Millisecond, "last: %d %s", code, body)
		code, _ = get(t, base+app.PathHealthz)
		require.Equal(t, http.StatusOK, code)
	})
}

func TestMetricsAddrErrors(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { held.Close() })
	tests := []struct {
		name  string
		addr  string
		opts  []app.Option
		wants []string
	}{
		{"no port", "9464", nil, []string{`metrics address "9464" is not host:port`}},
		{"port out of range", "127.0.0.1:70000", nil, []string{`port "70000" is not a number from 0 to 65535`}},
		{"port in use", held.Addr().String(), nil, []string{"address already in use", "--metrics-addr", app.EnvMetricsAddr}},
		{"runtime without telemetry", "127.0.0.1:0", []app.Option{app.WithoutTelemetry()}, []string{"without its own telemetry", "arena up --metrics-addr"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := app.DefaultConfig("svc")
			cfg.NATSURL = "nats://127.0.0.1:1" // never reached: the address is refused first
			cfg.MetricsAddr = tt.addr
			_, err := app.Start(context.Background(), cfg, append(tt.opts, app.WithLogOutput(io.Discard))...)
			require.ErrorIs(t, err, app.ErrConfig)
			require.NotErrorIs(t, err, app.ErrNATSUnreachable)
			for _, w := range tt.wants {
				require.ErrorContains(t, err, w)
			}
		})
	}
}

func ExampleMetrics() {
	m, err := app.NewMetrics()
	if err != nil {
		panic(err)
	}
	hs := httptest.NewServer(m.Handler(func(context.Context) error { return nil }))
	defer hs.Close()
	resp, err := http.Get(hs.URL + app.PathReadyz)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Print(resp.StatusCode, " ", string(body))
	// Output: 200 ready
}
