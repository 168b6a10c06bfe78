package loadgen_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/services/runner/loadgen"
)

// engine is a small OpenAI-style streaming server with misbehaviours.
type engine struct {
	mode     string
	limit    chan struct{}
	inflight atomic.Int64
	peak     atomic.Int64
	gap      time.Duration
	// models counts GET /v1/models.
	models atomic.Int64
}

func (e *engine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && r.URL.Path == "/v1/models" {
		e.models.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"object":"list","data":[{"id":"m","object":"model"}]}`))
		return
	}
	var req struct {
		MaxTokens int    `json:"max_tokens"`
		Prompt    string `json:"prompt"`
	}
	_ = json.NewDecoder(r.Body).Decode(&req)
	promptTokens := 7
	if e.mode == "count-prompt" {
		promptTokens = (len(req.Prompt) + 3) / 4
	}
	if e.mode == "http500" {
		http.Error(w, "model is warming up", http.StatusInternalServerError)
		return
	}
	if e.limit != nil {
		select {
		case e.limit <- struct{}{}:
			defer func() { <-e.limit }()
		case <-r.Context().Done():
			return
		}
	}
	n := e.inflight.Add(1)
	// A request stops counting before its last chunk is written: the
	// client may send its next request as soon as it reads [DONE], before
	// this handler returns, and that must not read as one more at once.
	leave := sync.OnceFunc(func() { e.inflight.Add(-1) })
	defer leave()
	for {
		p := e.peak.Load()
		if n <= p || e.peak.CompareAndSwap(p, n) {
			break
		}
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	count := req.MaxTokens
	if e.mode == "zero" {
		count = 0
	}
	for i := range count {
		if e.mode == "hang" && i == 2 {
			<-r.Context().Done()
			return
		}
		if e.mode == "disconnect" && i == 2 {
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.Close()
			return
		}
		fmt.Fprintf(w, "data: {\"choices\":[{\"text\":\" tok%d\"}]}\n\n", i)
		if e.mode == "malformed" && i == 1 {
			fmt.Fprint(w, "data: {not json\n\n")
		}
		fl.Flush()
		if e.gap > 0 {
			time.Sleep(e.gap)
		}
	}
	reported := count
	if e.mode == "lie" {
		reported = 2 * count
	}
	leave()
	fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d}}\n\ndata: [DONE]\n\n", promptTokens, reported)
	fl.Flush()
	switch e.mode {
	case "late-end":
		// The body's end (the last chunk) comes after [DONE].
		time.Sleep(20 * time.Millisecond)
	case "never-ends":
		<-r.Context().Done()
	}
}

func start(t testing.TB, e *engine) *loadgen.Client {
	t.Helper()
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return &loadgen.Client{BaseURL: srv.URL, Model: "m", IdleTimeout: 500 * time.Millisecond}
}

// TestMaxPromptTokensCountsTheWarmUp: the longest prompt of a workload,
// as the engine counted it, counts the warm-up's prompts too (a budget
// replay serves them again, and its context must hold them).
func TestMaxPromptTokensCountsTheWarmUp(t *testing.T) {
	t.Parallel()
	c := start(t, &engine{mode: "count-prompt"})
	for seed := range uint64(20) {
		w := loadgen.Workload{Name: "interactive", Concurrency: 1, Requests: 2, Warmup: 2, PromptWords: 40, MaxTokens: 3, Seed: seed}
		r, err := c.Run(context.Background(), w)
		require.NoError(t, err)
		want, measured := 0, 0
		for i, p := range w.LoadPrompts(0, w.Warmup+w.Requests) {
			want = max(want, (len(p.Text)+3)/4)
			if i >= w.Warmup {
				measured = max(measured, (len(p.Text)+3)/4)
			}
		}
		require.Equal(t, want, r.MaxPromptTokens, "seed %d", seed)
		require.GreaterOrEqual(t, r.MaxPromptTokens, measured)
	}
}

func TestRunMeasures(t *testing.T) {
	t.Parallel()
	e := &engine{gap: time.Millisecond}
	c := start(t, e)
	w := loadgen.Workload{Name: "serve", Concurrency: 8, Requests: 24, Warmup: 2, PromptWords: 10, MaxTokens: 5}
	r, err := c.Run(context.Background(), w)
	require.NoError(t, err)
	require.Equal(t, "serve", r.Workload)
	require.Len(t, r.Samples, 24, "warm-up requests are not measured")
	require.Equal(t, 24*5, r.OutputTokens)
	require.Equal(t, 8, r.Held, "all eight were streaming at once")
	require.LessOrEqual(t, e.peak.Load(), int64(8))
	for _, s := range r.Samples {
		require.Equal(t, 5, s.OutputTokens)
		require.Equal(t, 7, s.PromptTokens)
		require.Len(t, s.ITL, 4)
		require.Greater(t, s.E2E, s.TTFT)
		require.Equal(t, []string{" tok0", " tok1", " tok2", " tok3", " tok4"}, s.Chunks, "one chunk per token, as streamed")
		require.Equal(t, " tok0 tok1 tok2 tok3 tok4", s.Text)
		require.Equal(t, 5, s.Claimed)
	}
	require.Greater(t, r.Rate, 0.0)
	require.InDelta(t, float64(r.OutputTokens)/r.Elapsed.Seconds(), r.Rate, 1e-9)
	require.LessOrEqual(t, r.ITLP50, r.ITLP99)
	require.LessOrEqual(t, r.TTFTP50, r.TTFTP99)
}

// TestRunMeasuresOnOpenConnections: a run opens Concurrency connections
// (GET /v1/models, held until all are answered) before its measured
// requests, so that none of them waits on a dial, and closes its
// connections when it ends.
func TestRunMeasuresOnOpenConnections(t *testing.T) {
	t.Parallel()
	e := &engine{gap: time.Millisecond}
	var (
		mu    sync.Mutex
		seen  = map[string]bool{}
		fresh int // completions that came on a connection never used before
	)
	var open atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if r.URL.Path == "/v1/completions" && !seen[r.RemoteAddr] {
			fresh++
		}
		seen[r.RemoteAddr] = true
		mu.Unlock()
		e.ServeHTTP(w, r)
	}))
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			open.Add(1)
		case http.StateClosed, http.StateHijacked:
			open.Add(-1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	c := &loadgen.Client{BaseURL: srv.URL, Model: "m", IdleTimeout: 5 * time.Second}
	const conc, warmup = 8, 1
	r, err := c.Run(context.Background(), loadgen.Workload{Name: "serve", Concurrency: conc, Requests: 3 * conc, Warmup: warmup, MaxTokens: 4})
	require.NoError(t, err)
	require.Equal(t, 3*conc*4, r.OutputTokens)
	require.Equal(t, int64(conc), e.models.Load(), "one GET /v1/models per slot")
	mu.Lock()
	// Without the connections opened first, the first wave's seven
	// measured requests would each open one. (A connection goes back to
	// the pool a moment after its answer is read, so a request may
	// rarely race ahead and dial: hence not exactly none.)
	require.Less(t, fresh, conc/2, "the measured requests came on connections opened before them")
	require.LessOrEqual(t, len(seen), conc+warmup, "each slot's connection opened once, not once per request")
	mu.Unlock()
	require.Eventually(t, func() bool { return open.Load() == 0 }, 10*time.Second, 10*time.Millisecond,
		"the run closes its idle connections when it ends")
}

// connCounter counts the connections a server accepted.
func connCounter(srv *httptest.Server) *atomic.Int64 {
	var n atomic.Int64
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			n.Add(1)
		}
	}
	return &n
}

// TestRunReusesConnectionsWhoseBodyEndsLate: a stream's body ends (the
// chunked encoding's last chunk) a moment after its [DONE]; the load
// generator reads it, so that one slot's requests share one connection
// rather than each paying a dial in its TTFT; and an engine that never
// ends the body after [DONE] does not hold the run (the request is
// cancelled after drainWait, its sample whole).
func TestRunReusesConnectionsWhoseBodyEndsLate(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"late-end", "never-ends"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewUnstartedServer(&engine{mode: mode})
			conns := connCounter(srv)
			srv.Start()
			t.Cleanup(srv.Close)
			c := &loadgen.Client{BaseURL: srv.URL, Model: "m", IdleTimeout: 10 * time.Second}
			r, err := c.Run(context.Background(), loadgen.Workload{Name: "serve", Concurrency: 1, Requests: 3, MaxTokens: 3})
			require.NoError(t, err)
			require.Equal(t, 9, r.OutputTokens)
			if mode == "late-end" {
				require.Equal(t, int64(1), conns.Load(), "the slot's one connection served the GET and the three requests")
			} else {
				require.Equal(t, int64(3), conns.Load(), "each request's connection was closed when its body did not end")
			}
		})
	}
}

// TestRunHeldIsWhatTheEngineAdmits: an engine that serves two at a time
// holds two, whatever the workload offers.
func TestRunHeldIsWhatTheEngineAdmits(t *testing.T) {
	t.Parallel()
	c := start(t, &engine{limit: make(chan struct{}, 2), gap: 5 * time.Millisecond})
	r, err := c.Run(context.Background(), loadgen.Workload{Name: "serve", Concurrency: 6, Requests: 12, MaxTokens: 3})
	require.NoError(t, err)
	// Spans are timed here, not in the engine, so a release and the next
	// admission can seem to touch; what matters is far fewer than six.
	require.GreaterOrEqual(t, r.Held, 2)
	require.Less(t, r.Held, 6)
	require.Equal(t, 36, r.OutputTokens)
}

func TestRunClassifiesBadEngines(t *testing.T) {
	t.Parallel()
	cases := []struct {
		mode string
		code reason.Code
	}{
		{"malformed", reason.EngineBadStream},
		{"zero", reason.EngineZeroTokens},
		{"lie", reason.EngineTokenCountMismatch},
		{"hang", reason.EngineHang},
		{"disconnect", reason.EngineDisconnected},
		{"http500", reason.EngineHTTPError},
	}
	for _, tc := range cases {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			c := start(t, &engine{mode: tc.mode})
			done := make(chan struct{})
			var err error
			go func() {
				_, err = c.Run(context.Background(), loadgen.Workload{Name: "serve", Concurrency: 4, Requests: 8, MaxTokens: 6})
				close(done)
			}()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("the run did not end: a bad engine must end it in bounded time")
			}
			e := loadgen.AsError(err)
			require.NotNil(t, e, "%v", err)
			require.Equal(t, tc.code, e.Code, e.Message)
		})
	}
}

func TestRunStopsWithItsContext(t *testing.T) {
	t.Parallel()
	c := start(t, &engine{gap: 20 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := c.Run(ctx, loadgen.Workload{Name: "serve", Concurrency: 2, Requests: 100, MaxTokens: 50})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Nil(t, loadgen.AsError(err), "stopping is not an engine failure")
}

func TestStandardWorkloads(t *testing.T) {
	ws := loadgen.Standard(2, 64)
	got := map[string]int{}
	for _, w := range ws {
		got[w.Name] = w.Concurrency
		require.Equal(t, 2*w.Concurrency*map[string]int{"serve": 1, "interactive": 4, "long_context": 1}[w.Name], w.Requests)
	}
	require.Equal(t, map[string]int{"serve": 32, "interactive": 1, "long_context": 64}, got)
	require.Equal(t, "serve", ws[0].Name, "serve is the first workload")
}
