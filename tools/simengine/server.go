package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Fault is an injected misbehaviour, from --fault: what the runner's
// tests need of a broken engine. The cheats an audit must catch are not
// faults: they are real patches against simengine's source (the example
// campaign's engine patches), built into engines of their own.
//
// Failures: never-healthy, crash-on-start, die-after-tokens=N,
// malformed-sse, zero-tokens, lie-tokens, hang-after-tokens=N.
//
// Bad inputs, on the items of the published dev suite it recognises
// (KnownItem) when they come streamed:
//   - error-audit-items: HTTP 500;
//   - slow-audit-items: 12 ms more for every token;
//   - stop-mid-item: the stream is cut without [DONE] half way.
type Fault struct {
	Kind string
	N    int64 // for die-after-tokens and hang-after-tokens
}

// answers reports whether the answer model replies to eval items under
// the fault (the failures stream filler only).
func (f Fault) answers() bool {
	switch f.Kind {
	case "", "none", "error-audit-items", "slow-audit-items", "stop-mid-item":
		return true
	}
	return false
}

// ParseFault parses a --fault value.
func ParseFault(s string) (Fault, error) {
	kind, arg, hasArg := strings.Cut(s, "=")
	switch kind {
	case "", "none":
		return Fault{Kind: "none"}, nil
	case "never-healthy", "crash-on-start", "malformed-sse", "zero-tokens", "lie-tokens",
		"error-audit-items", "slow-audit-items", "stop-mid-item":
		if hasArg {
			return Fault{}, fmt.Errorf("fault %q takes no argument", kind)
		}
		return Fault{Kind: kind}, nil
	case "die-after-tokens", "hang-after-tokens":
		n, err := strconv.ParseInt(arg, 10, 64)
		if err != nil || n < 0 {
			return Fault{}, fmt.Errorf("fault %s needs =N with N >= 0: %q", kind, arg)
		}
		return Fault{Kind: kind, N: n}, nil
	}
	return Fault{}, fmt.Errorf("unknown fault %q", s)
}

// Server serves the OpenAI-compatible API and the lowbarena reports.
type Server struct {
	Plan           Plan
	Sched          *Scheduler
	Fault          Fault
	ModelID        string
	StartupSeconds float64
	// Damage is the answer model's damage of this checkpoint (Damage).
	Damage float64
	Seed   int64
	// Imitate is whose health endpoints and metric names to serve:
	// "sglang", or vLLM's for "vllm" and plain simengine ("").
	Imitate string
	// Engine is the imitated engine's start-up (nil in plain mode): its
	// graphs and context length go into the start-up report.
	Engine *Imitation
	// Device is the imitated engine's simulated GPU; nil in plain mode,
	// where GET /simulated/device follows /v1/lowbarena/memory.
	Device *Device
	// Gauges are SGLang's cadence-bound gauges; nil serves the
	// scheduler's state at every scrape (vLLM's per-step gauges).
	Gauges *CadenceGauges
	// MetricsOff leaves /metrics out (SGLang without --enable-metrics).
	MetricsOff bool
	// NoArenaEndpoints leaves out /v1/lowbarena/memory and
	// /v1/lowbarena/startup, as a real engine has neither.
	NoArenaEndpoints bool
	// Tokens writes the output (the checkpoint's tokenizer, or pieces of
	// four bytes).
	Tokens Tokens
	// ServedName is the id /v1/models gives the model (vLLM's
	// --served-model-name); default ModelID.
	ServedName string

	ready atomic.Bool
	seq   atomic.Int64
}

// slowAuditToken is what slow-audit-items adds to every token of an item
// it recognises.
const slowAuditToken = 12 * time.Millisecond

// SetReady turns /health to 200 (except under fault never-healthy).
func (s *Server) SetReady() { s.ready.Store(true) }

// Handler returns the HTTP routes.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", s.health)
	if s.Imitate == "sglang" {
		mux.HandleFunc("GET /health_generate", s.health)
	}
	if !s.MetricsOff {
		mux.HandleFunc("GET /metrics", s.metrics)
	}
	mux.HandleFunc("GET /simulated/device", s.device)
	mux.HandleFunc("GET /v1/models", s.models)
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { s.complete(w, r, false) })
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { s.complete(w, r, true) })
	if !s.NoArenaEndpoints {
		mux.HandleFunc("GET /v1/lowbarena/memory", s.memory)
		mux.HandleFunc("GET /v1/lowbarena/startup", s.startup)
	}
	return mux
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]any{"object": "error", "message": msg, "type": "BadRequestError", "code": code})
}

func (s *Server) health(w http.ResponseWriter, _ *http.Request) {
	if !s.ready.Load() || s.Fault.Kind == "never-healthy" {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (s *Server) served() string {
	if s.ServedName != "" {
		return s.ServedName
	}
	return s.ModelID
}

func (s *Server) models(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, 200, map[string]any{"object": "list", "data": []any{
		map[string]any{"id": s.served(), "object": "model", "owned_by": "simengine"},
	}})
}

// MemoryReport is the body of GET /v1/lowbarena/memory.
type MemoryReport struct {
	GPU           string `json:"gpu"`
	Simulated     bool   `json:"simulated"`
	TotalBytes    int64  `json:"total_bytes"`
	CapBytes      int64  `json:"cap_bytes"`
	UsedBytes     int64  `json:"used_bytes"`
	WeightsBytes  int64  `json:"weights_bytes"`
	KVPoolBytes   int64  `json:"kv_pool_bytes"`
	KVUsedBytes   int64  `json:"kv_used_bytes"`
	OtherBytes    int64  `json:"other_bytes"`
	Running       int    `json:"running"`
	Waiting       int    `json:"waiting"`
	PeakUsedBytes int64  `json:"peak_used_bytes"`
	// ResidentTokens is the context the running sequences hold.
	ResidentTokens int64 `json:"resident_tokens"`
}

// Memory returns the current memory report.
func (s *Server) Memory() MemoryReport {
	st := s.Sched.Stats()
	p := s.Plan
	return MemoryReport{
		GPU: p.GPU.Name, Simulated: true,
		TotalBytes: int64(p.GPU.TotalBytes), CapBytes: int64(p.CapBytes),
		UsedBytes:    int64(p.WeightsBytes + p.OtherBytes + st.KVUsedBytes),
		WeightsBytes: int64(p.WeightsBytes), KVPoolBytes: int64(p.KVPoolBytes),
		KVUsedBytes: int64(st.KVUsedBytes), OtherBytes: int64(p.OtherBytes),
		Running: st.Running, Waiting: st.Waiting, PeakUsedBytes: int64(st.PeakUsedBytes),
		ResidentTokens: st.ResidentTokens,
	}
}

func (s *Server) memory(w http.ResponseWriter, _ *http.Request) { writeJSON(w, 200, s.Memory()) }

// metrics serves Prometheus text exposition under the imitated engine's
// gauge names (vLLM: vllm:kv_cache_usage_perc, vllm:num_requests_running,
// vllm:num_requests_waiting; SGLang: sglang:token_usage,
// sglang:num_used_tokens, sglang:num_running_reqs, sglang:num_queue_reqs),
// with their HELP texts, labelled by the served model.
//
// vLLM's gauges follow every engine step (the scheduler's state at the
// scrape); SGLang's hold the values of their last update (Gauges).
func (s *Server) metrics(w http.ResponseWriter, _ *http.Request) {
	st := s.Sched.Stats()
	usage := 0.0
	if s.Plan.KVPoolBytes > 0 {
		usage = st.KVUsedBytes / s.Plan.KVPoolBytes
	}
	if s.Imitate == "sglang" && s.Gauges != nil {
		st, usage, _ = s.Gauges.Snapshot()
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	gauge := func(name, help, labels string, v float64) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s gauge\n%s{%s} %s\n", name, help, name, name, labels, strconv.FormatFloat(v, 'g', -1, 64))
	}
	if s.Imitate == "sglang" {
		labels := fmt.Sprintf("model_name=%q", s.ModelID)
		gauge("sglang:num_running_reqs", "The number of running requests.", labels, float64(st.Running))
		gauge("sglang:num_used_tokens", "The number of used tokens.", labels, float64(st.ResidentTokens))
		gauge("sglang:token_usage", "The token usage.", labels, usage)
		gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", labels, float64(st.Waiting))
		return
	}
	labels := fmt.Sprintf("engine=\"0\",model_name=%q", s.ModelID)
	gauge("vllm:num_requests_running", "Number of requests in model execution batches.", labels, float64(st.Running))
	gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", labels, float64(st.Waiting))
	gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", labels, usage)
}

// MaxConcurrency is part of StartupReport.
type MaxConcurrency struct {
	Sequences        float64 `json:"sequences"`
	TokensPerRequest int     `json:"tokens_per_request"`
}

// StartupReport is the body of GET /v1/lowbarena/startup, in the arena's
// record layout.
type StartupReport struct {
	CUDAGraphGiB      float64        `json:"cuda_graph_gib"`
	EngineInitSeconds float64        `json:"engine_init_seconds"`
	KVBytesPerToken   float64        `json:"kv_bytes_per_token"`
	KVCacheDType      string         `json:"kv_cache_dtype"`
	KVCacheGiB        float64        `json:"kv_cache_gib"`
	KVCacheTokens     int64          `json:"kv_cache_tokens"`
	LoadSeconds       float64        `json:"load_seconds"`
	MaxConcurrency    MaxConcurrency `json:"max_concurrency"`
	SpeculativeConfig string         `json:"speculative_config"`
	VLLMVersion       string         `json:"vllm_version"`
	WeightsGiB        float64        `json:"weights_gib"`
	Simulated         bool           `json:"simulated"`
	GPU               string         `json:"gpu"`
}

func round2(x float64) float64 { return math.Round(x*100) / 100 }

// Startup returns the startup report. load_seconds is simulated as half of
// the startup time.
func (s *Server) Startup() StartupReport {
	p := s.Plan
	toks := p.KVTokens()
	r := StartupReport{
		CUDAGraphGiB: 0.17, EngineInitSeconds: s.StartupSeconds,
		KVBytesPerToken: p.KVBytesPerToken, KVCacheDType: p.KVDType,
		KVCacheGiB: round2(p.KVPoolBytes / GiB), KVCacheTokens: toks,
		LoadSeconds:       s.StartupSeconds / 2,
		MaxConcurrency:    MaxConcurrency{Sequences: round2(float64(toks) / 32768), TokensPerRequest: 32768},
		SpeculativeConfig: "None", VLLMVersion: "simengine",
		WeightsGiB: round2(p.WeightsBytes / GiB), Simulated: true, GPU: p.GPU.Name,
	}
	if e := s.Engine; e != nil && p.MaxModelLen > 0 {
		r.CUDAGraphGiB = round2(e.GraphBytes / GiB)
		r.MaxConcurrency = MaxConcurrency{Sequences: round2(float64(toks) / float64(p.MaxModelLen)), TokensPerRequest: p.MaxModelLen}
		if e.Engine == "vllm" {
			r.VLLMVersion = VLLMVersion
		}
	}
	return r
}

func (s *Server) startup(w http.ResponseWriter, _ *http.Request) { writeJSON(w, 200, s.Startup()) }

type completionRequest struct {
	Model    string          `json:"model"`
	Prompt   json.RawMessage `json:"prompt"`
	Messages []struct {
		Role    string `json:"role"`
		Content any    `json:"content"`
	} `json:"messages"`
	MaxTokens   *int64   `json:"max_tokens"`
	Stream      bool     `json:"stream"`
	IgnoreEOS   bool     `json:"ignore_eos"`
	Temperature *float64 `json:"temperature"`
	// Seed picks the sample of an eval answer (the answer model is
	// deterministic under it).
	Seed *int64 `json:"seed"`
	// Logprobs is the completions API's top-k count, or the chat API's
	// flag with TopLogprobs the count.
	Logprobs    json.RawMessage `json:"logprobs"`
	TopLogprobs *int            `json:"top_logprobs"`
}

// topK is how many top logprobs the request asks for (0: none).
func (c *completionRequest) topK(chat bool) int {
	if chat {
		if string(c.Logprobs) == "true" && c.TopLogprobs != nil {
			return max(*c.TopLogprobs, 1)
		}
		if string(c.Logprobs) == "true" {
			return 1
		}
		return 0
	}
	var k int
	if json.Unmarshal(c.Logprobs, &k) == nil {
		return min(max(k, 0), 20)
	}
	return 0
}

// CountTokens is the deterministic prompt-token count: ceil(len(text)/4)
// bytes, at least 1.
func CountTokens(text string) int64 {
	n := int64(len(text)+3) / 4
	return max(n, 1)
}

func (c *completionRequest) text(chat bool) (string, error) {
	if chat {
		if len(c.Messages) == 0 {
			return "", errors.New("messages is required")
		}
		var parts []string
		for _, m := range c.Messages {
			switch v := m.Content.(type) {
			case string:
				parts = append(parts, v)
			default:
				b, _ := json.Marshal(v)
				parts = append(parts, string(b))
			}
		}
		return strings.Join(parts, "\n"), nil
	}
	if len(c.Prompt) == 0 {
		return "", errors.New("prompt is required")
	}
	var str string
	if err := json.Unmarshal(c.Prompt, &str); err == nil {
		return str, nil
	}
	var strs []string
	if err := json.Unmarshal(c.Prompt, &strs); err == nil {
		return strings.Join(strs, ""), nil
	}
	return string(c.Prompt), nil
}

// Usage is the OpenAI usage object.
type Usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

func (s *Server) complete(w http.ResponseWriter, r *http.Request, chat bool) { //nolint:gocyclo // the simulated engine's request path: each fault it can act out is a case of it, in request order
	if !s.ready.Load() {
		writeErr(w, http.StatusServiceUnavailable, "engine is starting")
		return
	}
	var req completionRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeErr(w, 400, fmt.Sprintf("invalid JSON: %v", err))
		return
	}
	if req.Model != "" && req.Model != s.ModelID && req.Model != s.served() {
		writeErr(w, 404, fmt.Sprintf("The model `%s` does not exist.", req.Model))
		return
	}
	text, err := req.text(chat)
	if err != nil {
		writeErr(w, 400, err.Error())
		return
	}
	maxTokens := int64(16)
	if req.MaxTokens != nil {
		maxTokens = *req.MaxTokens
	}
	if maxTokens < 1 {
		writeErr(w, 400, "max_tokens must be at least 1")
		return
	}
	prompt := s.Tokens.Count(text)
	fault := s.Fault.Kind
	// A bad input's fault acts on the streamed items of the published dev
	// suite it recognises.
	audit := req.Stream && (fault == "error-audit-items" || fault == "slow-audit-items" || fault == "stop-mid-item") && KnownItem(text)
	if audit && fault == "error-audit-items" {
		writeErr(w, http.StatusInternalServerError, "internal error")
		return
	}
	damage := s.Damage
	seed := int64(0)
	if req.Seed != nil {
		seed = *req.Seed
	}
	// An eval item gets the answer model's reply, ending where the reply
	// ends (finish "stop") or at max_tokens ("length"); with ignore_eos
	// the engine goes on past the reply's end to max_tokens, as vLLM does.
	var answer []string
	finish := "length"
	if reply, ok := Reply(text, seed, damage); ok && s.Fault.answers() {
		answer = s.Tokens.Pieces(reply)
		switch {
		case int64(len(answer)) > maxTokens:
			answer = answer[:maxTokens]
		case !req.IgnoreEOS:
			maxTokens, finish = int64(len(answer)), "stop"
		}
	}
	id := s.seq.Add(1)
	word := func(i int64) string {
		if answer != nil && i < int64(len(answer)) {
			return answer[i]
		}
		return s.Tokens.Filler(s.Seed, id, i)
	}
	topK := req.topK(chat)
	logprobs := func(i int64, tok string) any {
		if topK == 0 {
			return nil
		}
		top := TopLogprobs(text, int(i), tok, topK, damage)
		if chat {
			var tl []map[string]any
			for t, lp := range top {
				tl = append(tl, map[string]any{"token": t, "logprob": lp})
			}
			return map[string]any{"content": []any{map[string]any{"token": tok, "logprob": top[tok], "top_logprobs": tl}}}
		}
		return map[string]any{"tokens": []string{tok}, "token_logprobs": []float64{top[tok]}, "top_logprobs": []any{top}}
	}
	idStr := fmt.Sprintf("cmpl-sim-%d", id)
	obj, chunkObj := "text_completion", "text_completion"
	if chat {
		idStr = fmt.Sprintf("chatcmpl-sim-%d", id)
		obj, chunkObj = "chat.completion", "chat.completion.chunk"
	}
	created := time.Now().Unix()

	// tokens yields the index of each token as the scheduler generates
	// it.
	var tokens chan int64
	switch {
	case fault == "zero-tokens":
		tokens = make(chan int64)
		close(tokens)
	default:
		sr, err := s.Sched.Submit(r.Context(), prompt, maxTokens)
		if err != nil {
			writeErr(w, 400, err.Error())
			return
		}
		tokens = sr.Tokens
	}
	choice := func(content string, finish any) map[string]any {
		c := map[string]any{"index": 0, "finish_reason": finish}
		if chat {
			if content == "" && finish != nil {
				c["delta"] = map[string]any{}
			} else {
				c["delta"] = map[string]any{"content": content}
			}
		} else {
			c["text"] = content
			c["logprobs"] = nil
		}
		return c
	}
	withLogprobs := func(c map[string]any, i int64, tok string) map[string]any {
		if lp := logprobs(i, tok); lp != nil {
			c["logprobs"] = lp
		}
		return c
	}
	usage := func(n int64) Usage {
		if fault == "lie-tokens" {
			n *= 2
		}
		return Usage{PromptTokens: prompt, CompletionTokens: n, TotalTokens: prompt + n}
	}

	if !req.Stream {
		var sb strings.Builder
		var n int64
		var (
			lpTokens []string
			lpValues []float64
			lpTop    []map[string]float64
		)
		for {
			select {
			case <-r.Context().Done():
				return
			case i, ok := <-tokens:
				if !ok {
					goto done
				}
				w := word(i)
				sb.WriteString(w)
				if topK > 0 {
					top := TopLogprobs(text, int(i), w, topK, damage)
					lpTokens, lpValues, lpTop = append(lpTokens, w), append(lpValues, top[w]), append(lpTop, top)
				}
				n++
			}
		}
	done:
		c := choice(sb.String(), finish)
		if topK > 0 && !chat {
			c["logprobs"] = map[string]any{"tokens": lpTokens, "token_logprobs": lpValues, "top_logprobs": lpTop}
		}
		if chat {
			delete(c, "delta")
			c["message"] = map[string]any{"role": "assistant", "content": sb.String()}
		}
		writeJSON(w, 200, map[string]any{"id": idStr, "object": obj, "created": created, "model": s.served(),
			"choices": []any{c}, "usage": usage(n)})
		return
	}

	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(200)
	fl, _ := w.(http.Flusher)
	flush := func() {
		if fl != nil {
			fl.Flush()
		}
	}
	flush()
	send := func(v any) {
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "data: %s\n\n", b)
		flush()
	}
	var n int64
	emit := func(i int64, text string) {
		n++
		send(map[string]any{"id": idStr, "object": chunkObj, "created": created, "model": s.served(),
			"choices": []any{withLogprobs(choice(text, nil), i, text)}})
		if n == 1 && fault == "malformed-sse" {
			fmt.Fprint(w, "data: {not json\n\n")
			flush()
		}
	}
	end := func() {
		send(map[string]any{"id": idStr, "object": chunkObj, "created": created, "model": s.served(),
			"choices": []any{choice("", finish)}, "usage": usage(n)})
		fmt.Fprint(w, "data: [DONE]\n\n")
		flush()
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case i, ok := <-tokens:
			if !ok {
				end()
				return
			}
			if audit && fault == "stop-mid-item" && i >= maxTokens/2 {
				panic(http.ErrAbortHandler) // the connection is cut, no [DONE]
			}
			if audit && fault == "slow-audit-items" {
				time.Sleep(slowAuditToken)
			}
			emit(i, word(i))
		}
	}
}
