// Package loadgentest holds the floor the load generator is measured
// against: a minimal streaming client (what any program that reads an
// OpenAI-compatible stream must do, and nothing more), and an engine that
// streams as fast as it can, run in a process of its own so that client
// and server do not share a scheduler.
package loadgentest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lowbarena/lowbarena/services/runner/loadgen"
)

// Minimal is the least a client does to measure a streaming engine: it
// sends each request, reads the stream line by line, counts the data
// events that carry text (a token each), and notes when the first and the
// last arrived. It checks nothing else: not that the events are JSON, not
// the engine's own count. The load generator does all that; the ratio of
// the two is what it costs. Like the load generator, it opens its
// connections before it starts the clock (loadgen.OpenConnections), so
// that both measure the engine and not their dials.
type Minimal struct {
	BaseURL, Model string
	HTTP           *http.Client
}

// MinimalResult is one run of Minimal.
type MinimalResult struct {
	Tokens  int
	Elapsed time.Duration
	// TTFT and TPOT of each request, in the order they ended.
	TTFT, TPOT []time.Duration
}

// Run sends requests requests, concurrency at a time, each prompt with
// maxTokens tokens asked.
func (m *Minimal) Run(ctx context.Context, concurrency, requests int, prompt string, maxTokens int) (MinimalResult, error) {
	hc := m.HTTP
	if hc == nil {
		hc = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 128}}
	}
	body := fmt.Appendf(nil, `{"model":%q,"prompt":%q,"max_tokens":%d,"stream":true,"temperature":0,"seed":0,"ignore_eos":true}`,
		m.Model, prompt, maxTokens)
	url := strings.TrimRight(m.BaseURL, "/") + "/v1/completions"
	loadgen.OpenConnections(ctx, hc, m.BaseURL, concurrency, 30*time.Second)
	var (
		mu  sync.Mutex
		res MinimalResult
		wg  sync.WaitGroup
	)
	jobs := make(chan struct{})
	errc := make(chan error, concurrency)
	t0 := time.Now()
	for range concurrency {
		wg.Go(func() {
			for range jobs {
				n, ttft, tpot, err := m.one(ctx, hc, url, body)
				if err != nil {
					// The first error is the run's; the worker drains
					// the rest, so the feed never blocks.
					select {
					case errc <- err:
					default:
					}
					continue
				}
				mu.Lock()
				res.Tokens += n
				res.TTFT, res.TPOT = append(res.TTFT, ttft), append(res.TPOT, tpot)
				mu.Unlock()
			}
		})
	}
	for range requests {
		jobs <- struct{}{}
	}
	close(jobs)
	wg.Wait()
	res.Elapsed = time.Since(t0)
	select {
	case err := <-errc:
		return res, err
	default:
	}
	return res, nil
}

var textKey = []byte(`"text":"`)

func (m *Minimal) one(ctx context.Context, hc *http.Client, url string, body []byte) (int, time.Duration, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, 0, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		return 0, 0, 0, err
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	var first, last time.Time
	n := 0
	for {
		line, err := rd.ReadSlice('\n')
		if err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return 0, 0, 0, err
		}
		data, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok {
			continue
		}
		if bytes.HasPrefix(data, []byte("[DONE]")) {
			// Read on to the body's end, so that the connection
			// is reused (a body closed before its end closes it).
			_, _ = io.Copy(io.Discard, rd)
			break
		}
		// A token is an event whose text is not empty.
		if i := bytes.Index(data, textKey); i >= 0 && i+len(textKey) < len(data) && data[i+len(textKey)] != '"' {
			last = time.Now()
			if n == 0 {
				first = last
			}
			n++
		}
	}
	if n == 0 {
		return 0, 0, 0, errors.New("loadgentest: no token")
	}
	tpot := time.Duration(0)
	if n > 1 {
		tpot = last.Sub(first) / time.Duration(n-1)
	}
	return n, first.Sub(start), tpot, nil
}

// Stream writes one completion's stream of n tokens as vLLM does (its
// chunk fields, a finish_reason on the last token, a usage event, then
// [DONE]), flushing every event, as fast as the connection takes it.
func Stream(w http.ResponseWriter, n int) { Paced(w, n, 0, 0) }

// Paced is Stream with a pace: the first token after ttft, each next one
// itl after the one before (on a schedule from the request's start, so
// that a late wake-up does not delay every later token).
func Paced(w http.ResponseWriter, n int, ttft, itl time.Duration) {
	w.Header().Set("Content-Type", "text/event-stream")
	fl, _ := w.(http.Flusher)
	buf := make([]byte, 0, 256)
	start := time.Now()
	for i := range n {
		if ttft > 0 || itl > 0 {
			time.Sleep(time.Until(start.Add(ttft + time.Duration(i)*itl)))
		}
		finish := "null"
		if i == n-1 {
			finish = `"length"`
		}
		buf = append(buf[:0], `data: {"id":"cmpl-fast","object":"text_completion","created":1764849600,"model":"m","choices":[{"index":0,"text":" tok`...)
		buf = strconv.AppendInt(buf, int64(i), 10)
		buf = append(buf, `","logprobs":null,"finish_reason":`...)
		buf = append(buf, finish...)
		buf = append(buf, `,"stop_reason":null}],"usage":null}`+"\n\n"...)
		_, _ = w.Write(buf)
		if fl != nil {
			fl.Flush()
		}
	}
	buf = append(buf[:0], `data: {"id":"cmpl-fast","object":"text_completion","created":1764849600,"model":"m","choices":[],"usage":{"prompt_tokens":16,"total_tokens":`...)
	buf = strconv.AppendInt(buf, int64(16+n), 10)
	buf = append(buf, `,"completion_tokens":`...)
	buf = strconv.AppendInt(buf, int64(n), 10)
	buf = append(buf, "}}\n\ndata: [DONE]\n\n"...)
	_, _ = w.Write(buf)
	if fl != nil {
		fl.Flush()
	}
}

// FastHandler streams max_tokens tokens (read from the body without
// decoding it all) for every POST /v1/completions, and answers GET
// /v1/models as vLLM does.
func FastHandler() http.Handler { return PacedHandler(0, 0) }

// PacedHandler is FastHandler with Paced's pace.
func PacedHandler(ttft, itl time.Duration) http.Handler {
	key := []byte(`"max_tokens":`)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"m","object":"model","owned_by":"vllm"}]}`)
	})
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		n := 16
		if i := bytes.Index(body, key); i >= 0 {
			rest := body[i+len(key):]
			j := 0
			for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
				j++
			}
			if v, err := strconv.Atoi(string(rest[:j])); err == nil {
				n = v
			}
		}
		Paced(w, n, ttft, itl)
	})
	return mux
}

// EnvServe makes a test binary serve FastHandler instead of running its
// tests (see ServeIfAsked): the process started by StartFastServer. Its
// value is "fast", or "paced:<ttft>:<itl>" for PacedHandler.
const EnvServe = "LOWBARENA_LOADGENTEST_SERVE"

// ServeIfAsked serves FastHandler on loopback and never returns when the
// process was started by StartFastServer; call it first in TestMain.
func ServeIfAsked() {
	if os.Getenv(EnvServe) == "" {
		return
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	h := FastHandler()
	if pace, ok := strings.CutPrefix(os.Getenv(EnvServe), "paced:"); ok {
		a, b, _ := strings.Cut(pace, ":")
		ttft, err1 := time.ParseDuration(a)
		itl, err2 := time.ParseDuration(b)
		if err := errors.Join(err1, err2); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		h = PacedHandler(ttft, itl)
	}
	fmt.Println(ln.Addr().String())
	_ = http.Serve(ln, h)
	os.Exit(0)
}

// StartFastServer starts this test binary again as FastHandler's server,
// in a process of its own, and returns its base URL; the process is
// killed at the end of the test.
func StartFastServer(t testing.TB) string { return start(t, "fast") }

// StartPacedServer is StartFastServer for PacedHandler(ttft, itl).
func StartPacedServer(t testing.TB, ttft, itl time.Duration) string {
	return start(t, "paced:"+ttft.String()+":"+itl.String())
}

func start(t testing.TB, mode string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), EnvServe+"="+mode)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("loadgentest: the server process said nothing: %v", err)
	}
	return "http://" + strings.TrimSpace(addr)
}
