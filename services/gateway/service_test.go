package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/app"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
	"github.com/lowbarena/lowbarena/services/gateway"
	"github.com/lowbarena/lowbarena/services/gateway/rounds"
)

// build starts a runtime on url and builds the component c with its
// flags set from values.
func build(t testing.TB, ctx context.Context, c app.Component, url string, values map[string]string) ([]app.Actor, error) {
	t.Helper()
	cfg := app.DefaultConfig(c.Name)
	fs := c.FlagSet(&cfg)
	require.NoError(t, app.Set(fs, values))
	cfg.NATSURL, cfg.Store = url, ""
	rt, err := app.Start(ctx, cfg, app.WithoutTelemetry(), app.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	require.NoError(t, err)
	t.Cleanup(rt.Close)
	return c.Build(ctx, rt)
}

// TestComponentServesRoundViews: the gateway component binds its listener
// in Build and says where; the round events it is sent come back as the
// round's view over HTTP; a second gateway on the same port fails at
// start.
func TestComponentServesRoundViews(t *testing.T) {
	b, srv := bustest.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	t.Setenv("LOWBARENA_HTTP", "")
	c := gateway.Component()
	require.Equal(t, gateway.Name, c.Name)
	require.True(t, c.Store)
	require.Empty(t, c.Stages)
	require.Equal(t, "127.0.0.1:8080", c.FlagSet(new(app.Config)).Lookup("http").DefValue)

	var addr net.Addr
	actors, err := build(t, ctx, gateway.Component(gateway.WithListening(func(a net.Addr) { addr = a })), srv.ClientURL(), map[string]string{"http": "127.0.0.1:0"})
	require.NoError(t, err)
	require.NotNil(t, addr, "told the address before the actors run")
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- app.RunActors(runCtx, slog.New(slog.NewTextHandler(io.Discard, nil)), actors...) }()

	_, err = build(t, ctx, gateway.Component(), srv.ClientURL(), map[string]string{"http": addr.String()})
	require.ErrorContains(t, err, "listen on "+addr.String())

	const id = "round-c"
	_, err = bus.Emit(ctx, b, events.Source("round"), events.Round.Started, id,
		events.RoundStartedData{RoundID: id, Campaign: "tiny", Pod: "pod-a", Candidates: []string{"sub-1"}, Steps: 2}, bus.WithID("ev-started"))
	require.NoError(t, err)
	_, err = bus.Emit(ctx, b, events.Source("round"), events.Round.Failed, id,
		events.RoundFailedData{RoundID: id, Reason: "interrupted", Message: "the round service stopped"}, bus.WithID("ev-failed"))
	require.NoError(t, err)

	var v rounds.View
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + addr.String() + "/v1/rounds/" + id)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&v) == nil && v.Status == rounds.StatusFailed
	}, 30*time.Second, 50*time.Millisecond)
	require.Equal(t, "tiny", v.Campaign)
	require.Equal(t, "interrupted", v.Reason)
	require.Len(t, v.Steps, 2)

	stop()
	require.NoError(t, <-done)
}
