// Package loadgen drives an OpenAI-compatible engine with streaming
// completions and measures it: output tokens per second, time to first
// token, inter-token latency, and how many requests the engine held at
// once. It counts tokens itself from the stream and checks the engine's
// usage report against that count, so an engine cannot inflate its rate.
//
// Every way an engine can misbehave ends a run with an *Error whose Code is
// stable: engine_bad_stream (malformed server-sent events), engine_zero_tokens,
// engine_token_count_mismatch, engine_hang (no byte within the idle
// timeout), engine_disconnected (the stream ended before [DONE]) and
// engine_http_error.
package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lowbarena/lowbarena/domain/stats"
	"github.com/lowbarena/lowbarena/domain/suite"
	"github.com/lowbarena/lowbarena/events/reason"
)

// Error is a request the engine failed.
type Error struct {
	Code    reason.Code
	Message string
	Err     error
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Workload is a load shape.
type Workload struct {
	Name string
	// Concurrency is how many requests are kept in flight.
	Concurrency int
	// Requests is how many are measured; Warmup how many run before, not
	// measured.
	Requests, Warmup int
	// PromptWords and MaxTokens size each request.
	PromptWords, MaxTokens int
	// Seed seeds the load's prompts (suite.LoadPrompt): a run seeded
	// afresh never repeats a prompt of another run.
	Seed uint64
	// Prompts, when set, are the measured requests' prompts in order
	// (Requests is then their count): the load and the audit items mixed
	// into it. The warm-up's prompts are always drawn from Seed.
	Prompts []Prompt
	// StopAtEOS sends the requests without ignore_eos, so each answer
	// ends where the model ends it: for reference answers only (the
	// unpatched engine's, which the audits compare with), never for a
	// measured workload.
	StopAtEOS bool
}

// Prompt is one request's prompt. Item names the eval item it is when the
// accuracy-under-load audit mixed one into the load, "" for the load's
// own. Every request is sent alike (see Client.one): the engine cannot
// tell an item by its form.
type Prompt struct {
	Text string
	Item string
	// Source names the suite item a load request was built from (the
	// item's prompt at the workload's length): the load's own request,
	// whose failure ends the run like any load request's, but one the
	// audits may grade.
	Source string
}

// LoadPrompts returns n prompts of the load drawn from the workload's seed,
// after skip.
func (w Workload) LoadPrompts(skip, n int) []Prompt {
	r := rand.New(rand.NewPCG(w.Seed, fnv64(w.Name)))
	out := make([]Prompt, 0, n)
	for i := range skip + n {
		p := suite.LoadPrompt(r, w.PromptWords)
		if i >= skip {
			out = append(out, Prompt{Text: p})
		}
	}
	return out
}

func fnv64(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// Standard returns the arena's three workloads with the given request
// count per concurrent slot (at least one request per slot).
func Standard(perSlot, maxTokens int) []Workload {
	if perSlot < 1 {
		perSlot = 1
	}
	return []Workload{
		{Name: "serve", Concurrency: 32, Requests: 32 * perSlot, Warmup: 4, PromptWords: 256, MaxTokens: maxTokens},
		{Name: "interactive", Concurrency: 1, Requests: 4 * perSlot, Warmup: 1, PromptWords: 256, MaxTokens: maxTokens},
		{Name: "long_context", Concurrency: 64, Requests: 64 * perSlot, Warmup: 4, PromptWords: 4096, MaxTokens: maxTokens},
	}
}

// Sample is one measured request.
type Sample struct {
	Seq          int
	Start        time.Time
	PromptTokens int
	OutputTokens int
	TTFT, E2E    time.Duration
	ITL          []time.Duration
	// First and Last are when its first and last tokens arrived.
	First, Last time.Time
	// Item is the eval item the request asked ("" for the load); Source
	// the suite item a load request was built from.
	Item, Source string
	// Chunks are the streamed texts in order, one per token the engine
	// streamed; Text is their concatenation.
	Chunks []string
	Text   string
	// Claimed is the completion tokens the engine's usage reported (-1:
	// none); Finish its last finish_reason.
	Claimed int
	Finish  string
	// Err is the code of an audit item's request that failed (the load's
	// failures end the run instead); the sample then holds no timing.
	Err string
	// ErrMessage says how it failed.
	ErrMessage string
}

// Result is one workload's measurement.
type Result struct {
	Workload string
	// Rate is output tokens per second over the measured phase.
	Rate float64
	// Held is the most requests the engine was decoding at once, as seen
	// from here: the largest number of requests whose first-to-last-token
	// spans overlap. An engine that queues requests holds fewer than the
	// workload offers. (The engine's own running count, where it reports
	// one, is the finer figure.)
	Held int
	// TTFT, TPOT and ITL percentiles in milliseconds.
	TTFTP50, TTFTP99, TPOTP50, TPOTP99, ITLP50, ITLP90, ITLP99 float64
	OutputTokens                                               int
	Elapsed                                                    time.Duration
	Samples                                                    []Sample
	// MaxPromptTokens is the longest prompt of the workload's requests,
	// warm-up included, as the engine counted it (0 when it counted
	// none).
	MaxPromptTokens int
}

// Client talks to one engine.
type Client struct {
	// BaseURL is the engine's root, e.g. http://127.0.0.1:8000.
	BaseURL string
	// Model is the model name sent.
	Model string
	// IdleTimeout bounds the wait for each byte of a stream; default 30 s.
	IdleTimeout time.Duration
	// HTTP is the client used; default one with keep-alives sized for the
	// largest concurrency.
	HTTP *http.Client
}

func (c *Client) httpClient() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 128, MaxConnsPerHost: 0}}
}

// Run runs a workload: warm-up, then Concurrency connections opened (see
// OpenConnections), then the measured requests, Concurrency at a time.
// The first failed request ends the run with its *Error.
func (c *Client) Run(ctx context.Context, w Workload) (Result, error) {
	if w.Concurrency < 1 || (w.Requests < 1 && len(w.Prompts) == 0) {
		return Result{}, fmt.Errorf("loadgen: workload %s needs concurrency and requests", w.Name)
	}
	hc := c.httpClient()
	if c.HTTP == nil {
		// The run's own connections end with it (they stayed open
		// until the engine closed them).
		defer hc.CloseIdleConnections()
	}
	measured := w.Prompts
	if measured == nil {
		measured = w.LoadPrompts(w.Warmup, w.Requests)
	}
	// The warm-up is not measured, but its prompts are the workload's
	// too: the longest prompt counts them (a budget replay serves them
	// again, and its context must hold them).
	var warmMu sync.Mutex
	warmPrompt := 0
	warm := func(s Sample) {
		warmMu.Lock()
		warmPrompt = max(warmPrompt, s.PromptTokens)
		warmMu.Unlock()
	}
	if err := c.batch(ctx, hc, w, w.LoadPrompts(0, w.Warmup), warm); err != nil {
		return Result{}, err
	}
	OpenConnections(ctx, hc, c.BaseURL, w.Concurrency, c.idle())
	var (
		mu      sync.Mutex
		samples []Sample
	)
	observe := func(s Sample) {
		mu.Lock()
		samples = append(samples, s)
		mu.Unlock()
	}
	t0 := time.Now()
	err := c.batch(ctx, hc, w, measured, observe)
	elapsed := time.Since(t0)
	if err != nil {
		return Result{}, err
	}
	res := summarize(w.Name, samples, elapsed)
	res.MaxPromptTokens = max(res.MaxPromptTokens, warmPrompt)
	return res, nil
}

func (c *Client) idle() time.Duration {
	if c.IdleTimeout > 0 {
		return c.IdleTimeout
	}
	return 30 * time.Second
}

// OpenConnections opens n connections to the engine at baseURL and leaves
// them idle in hc's pool, so that the first n measured requests do not
// each wait on a connection's set-up (the dial, the engine's accept):
// without it the first wave of a run's requests measured a TTFT of its
// own, slower and far more variable than the next waves', and a run of
// two requests per slot put its median on the edge between the two
// (BenchmarkMediansAtConcurrency64). It sends n requests for GET
// /v1/models at once (served by vLLM, SGLang and the simulated engine;
// any answer will do) and holds each answer until all n have theirs,
// since a connection goes back to the pool only when its answer is read.
// Nothing here fails a run: a request that fails, or is not answered
// within timeout, leaves its connection to be opened by a measured
// request.
func OpenConnections(ctx context.Context, hc *http.Client, baseURL string, n int, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	url := strings.TrimRight(baseURL, "/") + "/v1/models"
	var answered, done sync.WaitGroup
	answered.Add(n)
	for range n {
		done.Go(func() {
			var resp *http.Response
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err == nil {
				resp, err = hc.Do(req)
			}
			answered.Done()
			answered.Wait()
			if err == nil {
				_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
				resp.Body.Close()
			}
		})
	}
	done.Wait()
}

// batch sends the prompts, Concurrency at a time, handing each finished
// one to observe (nil for the warm-up, which is not measured). An audit
// item's failure is observed with its code and the run goes on (the
// audit judges it); any other failure ends the batch.
func (c *Client) batch(ctx context.Context, hc *http.Client, w Workload, prompts []Prompt, observe func(Sample)) error {
	n := len(prompts)
	if n <= 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	jobs := make(chan int)
	errc := make(chan error, w.Concurrency)
	var wg sync.WaitGroup
	for range w.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := range jobs {
				p := prompts[seq]
				s, err := c.one(ctx, hc, seq, p.Text, w.MaxTokens, !w.StopAtEOS)
				s.Item, s.Source = p.Item, p.Source
				if e := AsError(err); e != nil && p.Item != "" && observe != nil && ctx.Err() == nil {
					s.Err, s.ErrMessage = string(e.Code), e.Message
					observe(s)
					continue
				}
				if err != nil {
					errc <- err
					cancel()
					return
				}
				if observe != nil {
					observe(s)
				}
			}
		}()
	}
feed:
	for i := range n {
		select {
		case jobs <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	select {
	case err := <-errc:
		return err
	default:
		return ctx.Err()
	}
}

// streamReader is what reads one stream: its buffered reader (64 KiB: an
// event with logprobs can be long) and its events' reader with its
// template.
type streamReader struct {
	rd *bufio.Reader
	cr chunkReader
}

// readers are the streams' readers, reused from request to request.
var readers = sync.Pool{New: func() any { return &streamReader{rd: bufio.NewReaderSize(nil, 64<<10)} }}

// completionRequest is the body of every request.
type completionRequest struct {
	Model         string        `json:"model"`
	Prompt        string        `json:"prompt"`
	MaxTokens     int           `json:"max_tokens"`
	Stream        bool          `json:"stream"`
	Temperature   int           `json:"temperature"`
	Seed          int           `json:"seed"`
	IgnoreEOS     bool          `json:"ignore_eos"`
	StreamOptions streamOptions `json:"stream_options"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// one sends one streaming completion and reads it to [DONE].
func (c *Client) one(ctx context.Context, hc *http.Client, seq int, prompt string, maxTokens int, ignoreEOS bool) (s Sample, err error) {
	// Every request alike, load and audit items: greedy (temperature 0,
	// seed 0, so an item's answer is comparable with the quality job's
	// first sample), max_tokens tokens whatever the model would end with
	// (ignore_eos), usage in the stream.
	body, _ := json.Marshal(completionRequest{Model: c.Model, Prompt: prompt, MaxTokens: maxTokens, Stream: true,
		IgnoreEOS: ignoreEOS, StreamOptions: streamOptions{IncludeUsage: true}})
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, strings.TrimRight(c.BaseURL, "/")+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		return Sample{}, fmt.Errorf("loadgen: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	idle := c.idle()
	// The idle watch cancels the request when no byte arrived for idle:
	// each line read notes its time, and the timer, when it fires, ends
	// the request or waits out the rest of the idle time from the last
	// line (no timer reset per token).
	var lastByte atomic.Int64
	lastByte.Store(time.Now().UnixNano())
	var timer *time.Timer
	timer = time.AfterFunc(idle, func() {
		if quiet := time.Since(time.Unix(0, lastByte.Load())); quiet < idle {
			timer.Reset(idle - quiet)
			return
		}
		cancel()
	})
	defer timer.Stop()
	hung := func() bool { return rctx.Err() != nil && ctx.Err() == nil }

	s = Sample{Seq: seq, Start: time.Now(), Claimed: -1}
	// The streamed texts go into one buffer, each chunk's end noted:
	// Text and Chunks are made from it once the stream ends, however it
	// ends.
	var text []byte
	var ends []int
	defer func() {
		s.Text = string(text)
		s.Chunks = make([]string, len(ends))
		from := 0
		for i, e := range ends {
			s.Chunks[i], from = s.Text[from:e], e
		}
	}()
	resp, err := hc.Do(req)
	if err != nil {
		if hung() {
			return s, &Error{Code: reason.EngineHang, Message: fmt.Sprintf("no response within %s", idle), Err: err}
		}
		if ctx.Err() != nil {
			return s, ctx.Err()
		}
		return s, &Error{Code: reason.EngineDisconnected, Message: "the engine closed the connection", Err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return s, &Error{Code: reason.EngineHTTPError, Message: fmt.Sprintf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(msg)))}
	}
	sr := readers.Get().(*streamReader)
	rd, cr := sr.rd, &sr.cr
	rd.Reset(resp.Body)
	cr.reset()
	defer func() {
		rd.Reset(nil)
		readers.Put(sr)
	}()
	s.ITL = make([]time.Duration, 0, maxTokens)
	text = make([]byte, 0, 8*maxTokens)
	ends = make([]int, 0, maxTokens)
	var last time.Time
	reported := -1
	ch := &cr.c
	var now time.Time
	for {
		// A line's time is read when its bytes came from the
		// connection during this read; a line that was already
		// buffered arrived no later than the last time read, so the
		// idle watch loses nothing, and the blank line after each
		// event costs no clock read.
		buffered := rd.Buffered()
		line, err := rd.ReadSlice('\n')
		if len(line) > buffered || err != nil || len(line) > 2 {
			now = time.Now()
			lastByte.Store(now.UnixNano())
		}
		if err != nil {
			switch {
			case hung():
				return s, &Error{Code: reason.EngineHang, Message: fmt.Sprintf("the stream stalled for %s after %d tokens", idle, s.OutputTokens), Err: err}
			case ctx.Err() != nil:
				return s, ctx.Err()
			case errors.Is(err, bufio.ErrBufferFull):
				return s, &Error{Code: reason.EngineBadStream, Message: fmt.Sprintf("a server-sent event line is longer than %d bytes", rd.Size()), Err: err}
			default:
				return s, &Error{Code: reason.EngineDisconnected, Message: fmt.Sprintf("the stream ended after %d tokens without [DONE]", s.OutputTokens), Err: err}
			}
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 || line[0] == ':' {
			continue
		}
		data, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue // event:, id:, retry: fields
		}
		data = bytes.TrimSpace(data)
		if string(data) == "[DONE]" {
			break
		}
		if err := cr.read(data); err != nil {
			return s, &Error{Code: reason.EngineBadStream, Message: fmt.Sprintf("a server-sent event is not JSON: %.80q", data), Err: err}
		}
		for i, t := range ch.texts {
			if f := ch.finishes[i]; f != "" {
				s.Finish = f
			}
			if len(t) == 0 {
				continue
			}
			text = append(text, t...)
			ends = append(ends, len(text))
			if s.OutputTokens == 0 {
				s.TTFT = now.Sub(s.Start)
				s.First = now
			} else {
				s.ITL = append(s.ITL, now.Sub(last))
			}
			last = now
			s.OutputTokens++
		}
		if ch.hasUsage {
			reported = ch.completionTokens
			s.PromptTokens = ch.promptTokens
		}
	}
	s.E2E, s.Last = time.Since(s.Start), last
	drain(rd, cancel)
	s.Claimed = reported
	if s.OutputTokens == 0 {
		return s, &Error{Code: reason.EngineZeroTokens, Message: "the engine streamed no token"}
	}
	if reported >= 0 && reported != s.OutputTokens {
		return s, &Error{Code: reason.EngineTokenCountMismatch, Message: fmt.Sprintf("the engine reported %d completion tokens and streamed %d", reported, s.OutputTokens)}
	}
	return s, nil
}

// drainLimit and drainWait bound what is read of a stream after its
// [DONE].
const (
	drainLimit = 4 << 10
	drainWait  = time.Second
)

// drain reads what follows a stream's [DONE] to the body's end (the
// chunked encoding's last chunk, which comes right after), so that the
// connection goes back to the pool: a body closed before its end closes
// its connection, and the next request on the slot paid a new dial inside
// its TTFT. An engine that sends more than drainLimit bytes after [DONE],
// or does not end the body within drainWait, has the request cancelled
// (its connection closed) instead; the sample is whole already.
func drain(rd *bufio.Reader, cancel context.CancelFunc) {
	t := time.AfterFunc(drainWait, cancel)
	defer t.Stop()
	_, _ = io.Copy(io.Discard, io.LimitReader(rd, drainLimit))
}

// held is the largest number of overlapping [First, Last] spans.
func held(samples []Sample) int {
	type edge struct {
		t time.Time
		d int
	}
	edges := make([]edge, 0, 2*len(samples))
	for _, s := range samples {
		edges = append(edges, edge{s.First, 1}, edge{s.Last, -1})
	}
	// At equal times an end comes before a start: touching spans do not
	// overlap.
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.t.Compare(b.t); c != 0 {
			return c
		}
		return a.d - b.d
	})
	n, most := 0, 0
	for _, e := range edges {
		n += e.d
		most = max(most, n)
	}
	return most
}

func summarize(name string, samples []Sample, elapsed time.Duration) Result {
	var ok []Sample
	for _, s := range samples {
		if s.Err == "" {
			ok = append(ok, s)
		}
	}
	r := Result{Workload: name, Held: held(ok), Elapsed: elapsed, Samples: samples}
	var ttft, tpot, itl []float64
	for _, s := range ok {
		r.MaxPromptTokens = max(r.MaxPromptTokens, s.PromptTokens)
		r.OutputTokens += s.OutputTokens
		ttft = append(ttft, ms(s.TTFT))
		if s.OutputTokens > 1 {
			tpot = append(tpot, ms(s.E2E-s.TTFT)/float64(s.OutputTokens-1))
		}
		for _, d := range s.ITL {
			itl = append(itl, ms(d))
		}
	}
	if elapsed > 0 {
		r.Rate = float64(r.OutputTokens) / elapsed.Seconds()
	}
	// Sorted once here, each percentile's own sort of its copy is one
	// pass (a run at the ceiling has 32k ITLs, three percentiles).
	slices.Sort(ttft)
	slices.Sort(tpot)
	slices.Sort(itl)
	r.TTFTP50, r.TTFTP99 = stats.Percentile(ttft, 50), stats.Percentile(ttft, 99)
	r.TPOTP50, r.TPOTP99 = stats.Percentile(tpot, 50), stats.Percentile(tpot, 99)
	r.ITLP50, r.ITLP90, r.ITLP99 = stats.Percentile(itl, 50), stats.Percentile(itl, 90), stats.Percentile(itl, 99)
	return r
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// AsError returns the *Error in err's chain, or nil.
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return nil
}
