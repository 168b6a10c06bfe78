package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// tinyPlan is a plan whose steps cost about the overhead only.
func tinyPlan(t *testing.T, capBytes float64) Plan {
	t.Helper()
	p, err := NewPlan(PlanInput{
		GPU: GPUs["h200"], CapBytes: capBytes,
		Config:       ModelConfig{Layers: 2, KVHeads: 2, HeadDim: 16, MaxPos: 4096},
		Weights:      Weights{Bytes: 1 << 20, Params: 1 << 19},
		StepOverhead: time.Millisecond,
	})
	require.NoError(t, err)
	return p
}

func newTestServer(t *testing.T, fault string) (*httptest.Server, *Server) {
	t.Helper()
	f, err := ParseFault(fault)
	require.NoError(t, err)
	p := tinyPlan(t, 0)
	sched := NewScheduler(p, 8)
	if f.Kind == "hang-after-tokens" {
		sched.Hang, sched.HangAfter = true, f.N
	}
	ctx, cancel := context.WithCancel(context.Background())
	go sched.Run(ctx)
	s := &Server{Plan: p, Sched: sched, Fault: f, ModelID: "tiny", StartupSeconds: 0.1}
	s.SetReady()
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() { ts.Close(); cancel() })
	return ts, s
}

type streamResult struct {
	content   []string
	usage     *Usage
	done      bool
	malformed int
}

// readSSE parses an OpenAI SSE stream until [DONE] or EOF.
func readSSE(t *testing.T, body io.Reader, chat bool) streamResult {
	t.Helper()
	var res streamResult
	sc := bufio.NewScanner(body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		require.True(t, ok, "line %q", line)
		if data == "[DONE]" {
			res.done = true
			break
		}
		var chunk struct {
			Choices []struct {
				Text  *string `json:"text"`
				Delta struct {
					Content *string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *Usage `json:"usage"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			res.malformed++
			continue
		}
		if chunk.Usage != nil {
			res.usage = chunk.Usage
		}
		for _, c := range chunk.Choices {
			txt := c.Text
			if chat {
				txt = c.Delta.Content
			}
			if txt != nil && *txt != "" {
				res.content = append(res.content, *txt)
			}
		}
	}
	return res
}

func post(t *testing.T, ctx context.Context, url string, body any) *http.Response {
	t.Helper()
	b, err := json.Marshal(body)
	require.NoError(t, err)
	req, err := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(b))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

const testPrompt = "The quick brown fox jumps over the lazy dog" // 43 bytes → 11 tokens

func TestStreaming(t *testing.T) {
	for _, tc := range []struct {
		fault         string
		chat          bool
		wantTokens    int
		wantUsage     int64
		wantMalformed int
	}{
		{"none", false, 7, 7, 0},
		{"none", true, 7, 7, 0},
		{"malformed-sse", false, 7, 7, 1},
		{"zero-tokens", false, 0, 0, 0},
		{"zero-tokens", true, 0, 0, 0},
		{"lie-tokens", false, 7, 14, 0},
		{"lie-tokens", true, 7, 14, 0},
	} {
		name := tc.fault
		if tc.chat {
			name += "/chat"
		}
		t.Run(name, func(t *testing.T) {
			ts, _ := newTestServer(t, tc.fault)
			path, body := "/v1/completions", map[string]any{"model": "tiny", "prompt": testPrompt, "max_tokens": 7, "stream": true, "ignore_eos": true}
			if tc.chat {
				path = "/v1/chat/completions"
				body = map[string]any{"model": "tiny", "messages": []any{map[string]any{"role": "user", "content": testPrompt}}, "max_tokens": 7, "stream": true}
			}
			resp := post(t, context.Background(), ts.URL+path, body)
			require.Equal(t, 200, resp.StatusCode)
			require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
			res := readSSE(t, resp.Body, tc.chat)
			require.True(t, res.done)
			require.Len(t, res.content, tc.wantTokens)
			for _, c := range res.content {
				require.Regexp(t, `^tok\d+ $`, c)
			}
			require.Equal(t, tc.wantMalformed, res.malformed)
			require.NotNil(t, res.usage)
			require.Equal(t, Usage{PromptTokens: 11, CompletionTokens: tc.wantUsage, TotalTokens: 11 + tc.wantUsage}, *res.usage)
		})
	}
}

func TestNonStreaming(t *testing.T) {
	for _, chat := range []bool{false, true} {
		ts, _ := newTestServer(t, "none")
		path, body := "/v1/completions", map[string]any{"prompt": testPrompt, "max_tokens": 5}
		if chat {
			path = "/v1/chat/completions"
			body = map[string]any{"messages": []any{map[string]any{"role": "user", "content": testPrompt}}, "max_tokens": 5}
		}
		resp := post(t, context.Background(), ts.URL+path, body)
		require.Equal(t, 200, resp.StatusCode)
		var out struct {
			Choices []struct {
				Text    string `json:"text"`
				Message struct {
					Content string `json:"content"`
				} `json:"message"`
				FinishReason string `json:"finish_reason"`
			} `json:"choices"`
			Usage Usage `json:"usage"`
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
		require.Equal(t, Usage{PromptTokens: 11, CompletionTokens: 5, TotalTokens: 16}, out.Usage)
		text := out.Choices[0].Text
		if chat {
			text = out.Choices[0].Message.Content
		}
		require.Len(t, strings.Fields(text), 5)
		require.Equal(t, "length", out.Choices[0].FinishReason)
	}
}

func TestBadRequests(t *testing.T) {
	ts, _ := newTestServer(t, "none")
	for _, tc := range []struct {
		body any
		code int
	}{
		{map[string]any{"model": "other", "prompt": "x"}, 404},
		{map[string]any{"max_tokens": 3}, 400},
		{map[string]any{"prompt": "x", "max_tokens": 0}, 400},
		{map[string]any{"prompt": "x", "max_tokens": 5000}, 400},
	} {
		resp := post(t, context.Background(), ts.URL+"/v1/completions", tc.body)
		require.Equal(t, tc.code, resp.StatusCode, "%v", tc.body)
	}
}

func TestHangAfterTokens(t *testing.T) {
	ts, _ := newTestServer(t, "hang-after-tokens=3")
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	resp := post(t, ctx, ts.URL+"/v1/completions", map[string]any{"prompt": testPrompt, "max_tokens": 10, "stream": true})
	require.Equal(t, 200, resp.StatusCode)
	start := time.Now()
	res := readSSE(t, resp.Body, false)
	require.False(t, res.done)
	require.Len(t, res.content, 3)
	require.Nil(t, res.usage)
	require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond, "connection stayed open until the client gave up")
}

func TestDieAfterTokensHook(t *testing.T) {
	p := tinyPlan(t, 0)
	sched := NewScheduler(p, 8)
	var died atomic.Int64
	sched.DieAfter = 4
	sched.OnDie = func() { died.Add(1) }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go sched.Run(ctx)
	r, err := sched.Submit(context.Background(), 10, 6)
	require.NoError(t, err)
	n := 0
	for range r.Tokens {
		n++
	}
	require.Equal(t, 6, n)
	require.Equal(t, int64(1), died.Load())
}

func TestHealthAndModels(t *testing.T) {
	for _, tc := range []struct {
		fault string
		ready bool
		want  int
	}{
		{"none", false, 503}, {"none", true, 200}, {"never-healthy", true, 503},
	} {
		f, _ := ParseFault(tc.fault)
		p := tinyPlan(t, 0)
		s := &Server{Plan: p, Sched: NewScheduler(p, 1), Fault: f, ModelID: "tiny"}
		if tc.ready {
			s.SetReady()
		}
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/health", nil))
		require.Equal(t, tc.want, rec.Code, "%+v", tc)
	}
	ts, _ := newTestServer(t, "none")
	resp, err := http.Get(ts.URL + "/v1/models")
	require.NoError(t, err)
	defer resp.Body.Close()
	var out map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	require.Equal(t, map[string]any{"object": "list", "data": []any{map[string]any{"id": "tiny", "object": "model", "owned_by": "simengine"}}}, out)
}

func TestReports(t *testing.T) {
	ts, s := newTestServer(t, "none")
	resp, err := http.Get(ts.URL + "/v1/lowbarena/startup")
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(raw), `{"cuda_graph_gib":0.17,"engine_init_seconds":0.1,"kv_bytes_per_token":256,"kv_cache_dtype":"bf16",`), string(raw))
	var st StartupReport
	require.NoError(t, json.Unmarshal(raw, &st))
	require.True(t, st.Simulated)
	require.Equal(t, "NVIDIA H200 (simulated)", st.GPU)
	require.Equal(t, s.Plan.KVTokens(), st.KVCacheTokens)
	require.Equal(t, round2(float64(st.KVCacheTokens)/32768), st.MaxConcurrency.Sequences)
	require.Equal(t, "simengine", st.VLLMVersion)

	mem := s.Memory()
	require.True(t, mem.Simulated)
	require.Equal(t, int64(141*GiB), mem.TotalBytes)
	require.Equal(t, mem.WeightsBytes+mem.OtherBytes+mem.KVUsedBytes, mem.UsedBytes)
	require.Equal(t, 0, mem.Running)
}

// A tight KV pool limits how many requests run at once; the rest wait.
func TestSchedulerAdmissionUnderTightCap(t *testing.T) {
	p := tinyPlan(t, 0)
	p.StepOverhead = 20 * time.Millisecond
	// Room for exactly two sequences of 100 prompt + 100 generated tokens.
	p.KVPoolBytes = 2 * 200 * p.KVBytesPerToken
	sched := NewScheduler(p, 256)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go sched.Run(ctx)
	var reqs []*Request
	for range 4 {
		r, err := sched.Submit(context.Background(), 100, 100)
		require.NoError(t, err)
		reqs = append(reqs, r)
	}
	require.Eventually(t, func() bool { st := sched.Stats(); return st.Running == 2 && st.Waiting == 2 }, time.Second, 5*time.Millisecond)
	st := sched.Stats()
	require.Greater(t, st.KVUsedBytes, 0.0)
	require.LessOrEqual(t, st.KVUsedBytes, p.KVPoolBytes)
	// max-num-seqs caps the batch too.
	s2 := NewScheduler(tinyPlan(t, 0), 1)
	go s2.Run(ctx)
	for range 3 {
		_, err := s2.Submit(context.Background(), 10, 50)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { st := s2.Stats(); return st.Running == 1 && st.Waiting == 2 }, time.Second, 5*time.Millisecond)
	_ = reqs
}
