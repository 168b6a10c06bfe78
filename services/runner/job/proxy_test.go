package job_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/audit"
	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/services/runner/engine"
	"github.com/lowbarena/lowbarena/services/runner/job"
)

// relayArg, first on the test binary's command line, makes it a relay
// (see TestMain).
const relayArg = "lowbarena-test-relay"

// relay listens on --port and copies every connection to the address
// --to and back until it is killed: the engine process the runner
// starts (it starts engines from a command template), in front of a
// proxy the test serves in its own process. It returns the exit status.
func relay(args []string) int {
	fs := flag.NewFlagSet("relay", flag.ContinueOnError)
	port := fs.Int("port", 0, "the port to listen on")
	to := fs.String("to", "", "the address to copy connections to")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(*port)))
	if err != nil {
		fmt.Fprintf(os.Stderr, "relay: %v\n", err)
		return 1
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			fmt.Fprintf(os.Stderr, "relay: %v\n", err)
			return 1
		}
		go func() {
			defer c.Close()
			u, err := net.Dial("tcp", *to)
			if err != nil {
				return
			}
			defer u.Close()
			go func() {
				_, _ = io.Copy(u, c)
				_ = u.(*net.TCPConn).CloseWrite()
			}()
			_, _ = io.Copy(c, u)
		}()
	}
}

// freeTestPort asks the kernel for a free loopback port.
func freeTestPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startSimengine starts simengine (command's template and flags) on a
// checkpoint with an FP8 KV cache, outside any runner, and returns its
// base URL; it is stopped when the test ends.
func startSimengine(t *testing.T, ckpt, flags string) string {
	t.Helper()
	port := freeTestPort(t)
	argv, err := engine.Render(command(flags), engine.Params{Checkpoint: ckpt, Port: port, KVCacheDType: "fp8", MaxNumSeqs: 256})
	require.NoError(t, err)
	e, err := engine.Start(context.Background(), engine.Options{Command: argv, Port: port, HealthTimeout: 20 * time.Second, StopGrace: 2 * time.Second})
	require.NoError(t, err)
	t.Cleanup(e.Stop)
	return "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// upstream is an engine behind a proxy. seed is added to the seed of
// every completion it is asked: simengine's answer model draws whether
// an item is answered right, and which wrong answer, from the prompt
// and the request's seed, the same draws for every checkpoint of the
// model (a quantized checkpoint's errors pair with BF16's); asked under
// another seed, it answers as a damaged model or another model would,
// right and wrong on other items.
type upstream struct {
	name string
	base string
	seed int
}

// proxy is what a participant's patched engine may do with the
// requests: it serves the engines' endpoints from meta and sends each
// completion to the engine pick chooses from its prompt. With pace set,
// it holds each answer until it is whole and then streams its chunks
// pace apart (a replay of recorded answers, faster than any device). It
// counts where the suite's items and the other requests went.
type proxy struct {
	meta  upstream
	pick  func(prompt string) upstream
	pace  time.Duration
	items map[string]bool // the suite's prompts, which a cheat knows

	mu   sync.Mutex
	sent map[string]int // "item→name" and "other→name"
}

// serve starts the proxy and returns the command template of an engine
// that is the proxy: the relay to it on the port the runner gives.
func (p *proxy) serve(t *testing.T) string {
	t.Helper()
	p.sent = map[string]int{}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	exe, err := os.Executable()
	require.NoError(t, err)
	return exe + " " + relayArg + " --port {{.Port}} --to " + srv.Listener.Addr().String()
}

// count returns how many requests of a kind ("item" or "other") went to
// the named engine.
func (p *proxy) count(kind, name string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sent[kind+"→"+name]
}

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	to, body := p.meta, []byte(nil)
	if r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/v1/") {
		var req map[string]any
		b, err := io.ReadAll(r.Body)
		if err == nil {
			err = json.Unmarshal(b, &req)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		prompt, _ := req["prompt"].(string)
		to = p.pick(prompt)
		kind := "other"
		if p.items[prompt] {
			kind = "item"
		}
		p.mu.Lock()
		p.sent[kind+"→"+to.name]++
		p.mu.Unlock()
		seed, _ := req["seed"].(float64)
		req["seed"] = int(seed) + to.seed
		if body, err = json.Marshal(req); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
	}
	out, err := http.NewRequestWithContext(r.Context(), r.Method, to.base+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	out.Header = r.Header.Clone()
	resp, err := http.DefaultClient.Do(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.Header().Del("Content-Length")
	if p.pace > 0 && body != nil {
		p.replay(w, resp)
		return
	}
	w.WriteHeader(resp.StatusCode)
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			_, _ = w.Write(buf[:n])
			w.(http.Flusher).Flush()
		}
		if err != nil {
			return
		}
	}
}

// replay streams a whole answer's events pace apart.
func (p *proxy) replay(w http.ResponseWriter, resp *http.Response) {
	all, err := io.ReadAll(resp.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	w.WriteHeader(resp.StatusCode)
	for ev := range strings.SplitSeq(strings.TrimSpace(string(all)), "\n\n") {
		_, _ = io.WriteString(w, ev+"\n\n")
		w.(http.Flusher).Flush()
		time.Sleep(p.pace)
	}
}

// TestAuditsCatchProxiedCheats puts a proxy in front of honest simengine
// processes, as a patched engine may route its requests, and judges each
// run as the efficiency stage judges a patched submission's (the
// campaign's unpatched engine answers the probes and a sample of the
// load again):
//   - the honest engine behind a proxy that passes everything through
//     passes every audit, its probes and sampled load the unpatched
//     engine's;
//   - a router by prompt length (a prompt of 60 to 999 words, the
//     load's lengths, to a damaged path; the items, shorter questions
//     and longer documents, honest) and a router by content (a prompt
//     that is one of the published suite's items honest; anything else
//     damaged), rules read off the load before it was built from items,
//     serve every item honestly, so the items' audits pass, and are
//     caught by the load's own requests (each built from an item)
//     answered unlike the unpatched engine: accuracy_differs_under_load;
//   - another model for every request, the quality job included (the
//     campaign's BF16 reference checkpoint on its own engine, named as
//     the candidate in /v1/models), agrees with itself across the jobs,
//     so it passes every audit when it is not compared with the
//     unpatched engine, and is caught as served_model_mismatch when it
//     is;
//   - the honest answers replayed at 0.05 ms a token, faster than the
//     simulated H200's memory bandwidth allows, are caught as
//     faster_than_device.
func TestAuditsCatchProxiedCheats(t *testing.T) {
	if testing.Short() {
		t.Skip("runs simengine seven times, behind proxies")
	}
	rig := newAuditRig(t)
	flags := "--scale 3000 --kv-scale 144"
	name := filepath.Base(rig.ckpt) // the id the candidate's engine serves
	honest := upstream{name: "honest", base: startSimengine(t, rig.ckpt, flags)}
	damaged := upstream{name: "damaged", base: honest.base, seed: 7919}
	other := upstream{name: "other", base: startSimengine(t, rig.reference, flags+" --served-model-name "+name), seed: 7919}
	items := map[string]bool{}
	for _, it := range rig.byID {
		items[it.Prompt] = true
	}
	always := func(u upstream) func(string) upstream { return func(string) upstream { return u } }
	// The published suite's items are questions of at most 51 words or
	// documents of at least 1278; the load's prompts lay between (97 and
	// 289 words before the load was built from items, 64 and 256 now).
	byLength := func(prompt string) upstream {
		if n := len(strings.Fields(prompt)); n >= 60 && n < 1000 {
			return damaged
		}
		return honest
	}
	byContent := func(prompt string) upstream {
		if items[prompt] {
			return honest
		}
		return damaged
	}
	unpatched := &job.EngineSpec{Command: command(flags), MaxNumSeqs: 256}
	cases := []struct {
		name      string
		proxy     *proxy
		unpatched *job.EngineSpec
		reason    string // "" passes
		routed    bool   // every item honest, the load damaged
	}{
		{"honest behind a proxy", &proxy{meta: honest, pick: always(honest)}, unpatched, "", false},
		{"router by prompt length", &proxy{meta: honest, pick: byLength}, unpatched, string(reason.AccuracyDiffersUnderLoad), true},
		{"router by content", &proxy{meta: honest, pick: byContent}, unpatched, string(reason.AccuracyDiffersUnderLoad), true},
		{"another model for every request", &proxy{meta: other, pick: always(other)}, unpatched, string(reason.ServedModelMismatch), false},
		{"another model for every request, no unpatched engine", &proxy{meta: other, pick: always(other)}, nil, "", false},
		{"replayed faster than the device", &proxy{meta: honest, pick: always(honest), pace: 50 * time.Microsecond}, unpatched,
			string(reason.FasterThanDevice), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			r, _, _ := runner(t)
			c.proxy.items = items
			a, _ := rig.judge(ctx, t, r, job.EngineSpec{Command: c.proxy.serve(t), MaxNumSeqs: 256}, c.unpatched)
			t.Logf("%s: %s %s %s", c.name, a.Verdict, a.Reason, a.Message)
			if c.routed {
				require.Positive(t, c.proxy.count("item", "honest"))
				require.Zero(t, c.proxy.count("item", "damaged"), "every item is served honestly")
				require.Positive(t, c.proxy.count("other", "damaged"), "the load is served another way")
			}
			if c.reason == "" {
				require.Equal(t, record.VerdictPass, a.Verdict, a.Message)
				for _, ch := range []record.Check{a.ServedModel.Check, a.TokenHonesty.Check, a.AnswerCache.Check, a.AccuracyUnderLoad.Check, a.Device.Check} {
					require.Equal(t, record.VerdictPass, ch.Verdict, ch.Message)
				}
				require.Equal(t, a.ServedModel.Probes, a.ServedModel.Agreed, "the probes are the quality job's answers")
				require.Equal(t, 1.0, a.AccuracyUnderLoad.Agreement, "the items under load are the quality job's answers")
				if c.unpatched != nil {
					require.Equal(t, job.AuditProbes, a.ServedModel.UnpatchedProbes)
					require.Equal(t, a.ServedModel.UnpatchedProbes, a.ServedModel.UnpatchedAgreed)
					require.Equal(t, job.LoadSample, a.AccuracyUnderLoad.LoadCompared)
					require.Equal(t, 1.0, a.AccuracyUnderLoad.LoadAgreement)
				}
				return
			}
			require.Equal(t, record.VerdictFail, a.Verdict)
			require.Equal(t, c.reason, a.Reason, a.Message)
			switch reason.Code(c.reason) {
			case reason.AccuracyDiffersUnderLoad:
				// The items and probes are the honest engine's: only the
				// load's own requests tell.
				require.Equal(t, record.VerdictPass, a.ServedModel.Verdict, a.ServedModel.Message)
				require.Equal(t, a.ServedModel.UnpatchedProbes, a.ServedModel.UnpatchedAgreed)
				require.Equal(t, 1.0, a.AccuracyUnderLoad.Agreement, "the items under load are the quality job's answers")
				require.Equal(t, job.LoadSample, a.AccuracyUnderLoad.LoadCompared)
				require.Less(t, a.AccuracyUnderLoad.LoadAgreement, audit.MinLoadAgreement)
			case reason.ServedModelMismatch:
				require.Equal(t, c.reason, a.ServedModel.Reason)
				require.Less(t, float64(a.ServedModel.UnpatchedAgreed), audit.MinProbeAgreement*float64(a.ServedModel.UnpatchedProbes))
			case reason.FasterThanDevice:
				require.Equal(t, c.reason, a.Device.Reason, a.Device.Message)
			}
		})
	}
}
