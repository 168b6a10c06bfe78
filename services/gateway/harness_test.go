package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/lowbarena/lowbarena/domain/bundle"
	"github.com/lowbarena/lowbarena/domain/participant"
	"github.com/lowbarena/lowbarena/platform/app"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
	"github.com/lowbarena/lowbarena/platform/ctl"
	"github.com/lowbarena/lowbarena/services/gateway"
)

// cheap are argon2id parameters small enough for tests (the defaults are
// measured in the participant package's benchmark).
var cheap = participant.HashParams{Memory: 64, Time: 1, Threads: 1, KeyLen: 32}

// clock is the quotas' clock, moved by tests.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// testGateway is a running gateway component on an embedded NATS, its HTTP
// API on a loopback port: the arena as a participant meets it.
type testGateway struct {
	b       *bus.Bus
	url     string
	addr    string
	metrics *sdkmetric.ManualReader
	clock   *clock
	spool   string
}

// startGateway runs the gateway component with flags (over its defaults
// and "http": "127.0.0.1:0") until the test ends.
func startGateway(t testing.TB, flags map[string]string, adjust func(*gateway.Options)) *testGateway {
	t.Helper()
	b, srv := bustest.Bus(t)
	g := &testGateway{b: b, metrics: sdkmetric.NewManualReader(), clock: &clock{t: time.Now()}, spool: t.TempDir()}
	var addr net.Addr
	c := gateway.Component(gateway.WithListening(func(a net.Addr) { addr = a }), gateway.WithOptions(func(o *gateway.Options) {
		o.Hash, o.Now, o.Spool = cheap, g.clock.now, g.spool
		o.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(g.metrics))
		if adjust != nil {
			adjust(o)
		}
	}))
	values := map[string]string{"http": "127.0.0.1:0"}
	for k, v := range flags {
		values[k] = v
	}
	ctx, cancel := context.WithCancel(context.Background())
	actors, err := build(t, ctx, c, srv.ClientURL(), values)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- app.RunActors(ctx, slog.New(slog.NewTextHandler(io.Discard, nil)), actors...) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	g.addr = addr.String()
	g.url = "http://" + g.addr
	// The actors start on their own: wait until the participants'
	// endpoints answer (a bound on the wait, not a speed assertion).
	require.Eventually(t, func() bool {
		cctx, ccancel := context.WithTimeout(context.Background(), time.Second)
		defer ccancel()
		_, err := ctl.Call[ctl.Participants](cctx, b.Conn(), ctl.SubjectParticipantList, ctl.ListParticipants{})
		return err == nil
	}, 30*time.Second, 10*time.Millisecond)
	return g
}

// add creates a participant (or operator) through the gateway's
// endpoint, as `arena participant add` does, and returns its token.
func (g *testGateway) add(t testing.TB, name string, kind participant.Kind, lim participant.Limits) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rep, err := ctl.Call[ctl.NewToken](ctx, g.b.Conn(), ctl.SubjectParticipantAdd, ctl.AddParticipant{Name: name, Kind: kind, Limits: lim})
	require.NoError(t, err)
	return rep.Token
}

// refusals returns lowbarena.gateway.refusals by code.
func (g *testGateway) refusals(t *testing.T) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, g.metrics.Collect(context.Background(), &rm))
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "lowbarena.gateway.refusals" {
				continue
			}
			sum, ok := m.Data.(metricdata.Sum[int64])
			require.True(t, ok)
			for _, dp := range sum.DataPoints {
				v, _ := dp.Attributes.Value(attribute.Key("code"))
				out[v.AsString()] += dp.Value
			}
		}
	}
	return out
}

// answer is a decoded response.
type answer struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

func (a answer) code() string {
	e, _ := a.body["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

func (a answer) message() string {
	e, _ := a.body["error"].(map[string]any)
	m, _ := e["message"].(string)
	return m
}

func decode(t testing.TB, resp *http.Response) answer {
	t.Helper()
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, header: resp.Header, raw: string(raw)}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		require.NoError(t, json.Unmarshal(raw, &a.body), string(raw))
	}
	return a
}

func (g *testGateway) do(t testing.TB, method, path, token string, body []byte, hdr map[string]string) answer {
	t.Helper()
	req, err := http.NewRequest(method, g.url+path, bytes.NewReader(body))
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	return decode(t, resp)
}

func (g *testGateway) get(t *testing.T, path, token string) answer {
	return g.do(t, http.MethodGet, path, token, nil, nil)
}

func (g *testGateway) post(t testing.TB, token string, body []byte) answer {
	return g.do(t, http.MethodPost, "/v1/submissions", token, body, map[string]string{"Content-Type": "application/gzip"})
}

// raw sends a request written by hand on its own connection and returns
// the connection, for the clients net/http will not be: slow, stalled,
// cut short.
func (g *testGateway) raw(t *testing.T, head string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", g.addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	_, err = io.WriteString(c, head)
	require.NoError(t, err)
	return c
}

// readAnswer reads a response from c (a bound on the wait, not a speed
// assertion).
func readAnswer(t *testing.T, c net.Conn) answer {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(30*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	return decode(t, resp)
}

// packed packs a bundle of participant on split, with extra files (a
// name mapped to "" is left out), as arena submit packs it.
func packed(t testing.TB, participant, split string, extra map[string]string) []byte {
	t.Helper()
	dir := t.TempDir()
	decl := map[string]any{"task_id": "qwen3-tiny", "split": split, "participant": participant, "agent": "test-agent",
		"solution": map[string]any{"checkpoint": "tiny-fp8", "method": "FP8-W8A8", "precision": "W8A8KV8"}}
	d, _ := json.Marshal(decl)
	files := map[string]string{"submission.json": string(d), "config.json": `{"model_type":"qwen3"}`, "model.safetensors": "not really weights"}
	for k, v := range extra {
		files[k] = v
	}
	for name, body := range files {
		if body == "" {
			continue
		}
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644))
	}
	var buf bytes.Buffer
	_, err := bundle.Pack(dir, &buf)
	require.NoError(t, err)
	return buf.Bytes()
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// busServer starts an embedded NATS and returns its bus and URL.
func busServer(t *testing.T) (*bus.Bus, string) {
	t.Helper()
	b, srv := bustest.Bus(t)
	return b, srv.ClientURL()
}

// componentForTest is the gateway component with the tests' cheap
// hashes and a spool folder of the test's.
func componentForTest() app.Component {
	return gateway.Component(gateway.WithOptions(func(o *gateway.Options) { o.Hash = cheap }))
}
