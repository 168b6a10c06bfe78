package job_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/examples"
	"github.com/lowbarena/lowbarena/domain/formula"
	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/services/runner/engine"
	"github.com/lowbarena/lowbarena/services/runner/job"
	"github.com/lowbarena/lowbarena/services/runner/loadgen"
	"github.com/lowbarena/lowbarena/services/runner/telemetry"
)

// simengine is the simulated engine binary, built once for the package.
var simengine string

// TestMain builds simengine once for the package. Started with relayArg
// first, the test binary is a relay instead (see relay): the engine
// process the runner starts in front of a test's proxy.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == relayArg {
		os.Exit(relay(os.Args[2:]))
	}
	dir, err := os.MkdirTemp("", "simengine-")
	if err != nil {
		panic(err)
	}
	simengine = filepath.Join(dir, "simengine")
	if out, err := exec.Command("go", "build", "-o", simengine, "../../../tools/simengine").CombinedOutput(); err != nil {
		panic(fmt.Sprintf("build simengine: %v\n%s", err, out))
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// writeCheckpoint writes a config.json and one safetensors file holding a
// single tensor of the given dtype and byte size.
func writeCheckpoint(t testing.TB, dtype string, bytes int) string {
	t.Helper()
	dir := t.TempDir()
	cfg := `{"architectures":["Qwen3ForCausalLM"],"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":64,"hidden_size":256,"max_position_embeddings":32768}`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfg), 0o644))
	elem := map[string]int{"BF16": 2, "U8": 1}[dtype]
	hdr := fmt.Sprintf(`{"w":{"dtype":%q,"shape":[%d],"data_offsets":[0,%d]}}`, dtype, bytes/elem, bytes)
	for len(hdr)%8 != 0 {
		hdr += " "
	}
	buf := make([]byte, 8, 8+len(hdr)+bytes)
	binary.LittleEndian.PutUint64(buf, uint64(len(hdr)))
	buf = append(buf, hdr...)
	buf = append(buf, make([]byte, bytes)...)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "model.safetensors"), buf, 0o644))
	return dir
}

// command is the simulated engine's template: 4 MiB of BF16 stands for a
// 32 GiB model (4-bit steps are a quarter as long, so load on the machine
// does not turn the order of the rates).
func command(extra string) string {
	return simengine + " --checkpoint {{.Checkpoint}} --port {{.Port}} --kv-cache-dtype {{.KVCacheDType}} --max-num-seqs {{.MaxNumSeqs}} --gpu-memory-gib {{.GPUMemoryGiB}} --scale 8192 --kv-scale 64 --startup-seconds 0.2 " + extra
}

func small() job.WorkloadSpec {
	return job.WorkloadSpec{RequestsPerSlot: 1, MaxTokens: 24, PromptWords: 32, LongPromptWords: 256}
}

type memCache struct {
	mu   sync.Mutex
	m    map[string]job.Served
	puts int
}

func (c *memCache) Get(_ context.Context, campaign, digest string) (*job.Served, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.m[campaign+"/"+digest]; ok {
		return &s, nil
	}
	return nil, nil
}

func (c *memCache) Put(_ context.Context, campaign, digest string, s job.Served) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]job.Served{}
	}
	c.m[campaign+"/"+digest] = s
	c.puts++
	return nil
}

func runner(t testing.TB) (*job.Runner, *[]telemetry.Sample, *[]loadgen.Result) {
	var mu sync.Mutex
	var samples []telemetry.Sample
	var results []loadgen.Result
	r := &job.Runner{SampleInterval: 20 * time.Millisecond, HealthTimeout: 20 * time.Second, IdleTimeout: 5 * time.Second, StopGrace: 2 * time.Second,
		Samples: func(_ context.Context, _ string, b []telemetry.Sample) error {
			mu.Lock()
			samples = append(samples, b...)
			mu.Unlock()
			return nil
		},
		Requests: func(_ context.Context, _ string, res loadgen.Result) error {
			mu.Lock()
			results = append(results, res)
			mu.Unlock()
			return nil
		}}
	return r, &samples, &results
}

func TestEfficiencyMeasuresCandidateBesideReference(t *testing.T) {
	ref := writeCheckpoint(t, "BF16", 4<<20)
	cand := writeCheckpoint(t, "U8", 1<<20) // packed 4-bit: a quarter of the bytes
	r, samples, results := runner(t)
	cache := &memCache{}
	p := job.EfficiencyParams{Campaign: "tiny", Engine: job.EngineSpec{Command: command(""), MaxNumSeqs: 256},
		Workload: small(), KVCacheDType: "fp8", Reference: events.BundleRef{SHA256: "ref1"}, BudgetFactor: 1.02}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := r.Efficiency(ctx, p, cand, ref, cache, nil)
	require.NoError(t, err)

	require.True(t, out.Simulated)
	require.Equal(t, "NVIDIA H200 (simulated)", out.GPU)
	require.False(t, out.Cached)
	require.Equal(t, 1, cache.puts)
	for _, w := range []string{"serve", "interactive", "long_context"} {
		c, b := out.Candidate.Workloads[w], out.Reference.Workloads[w]
		// A quarter of the weight bytes streams faster on decode, and
		// holds less memory.
		require.Greater(t, c.Rate, b.Rate, w)
		require.Less(t, c.Peak.PeakGiB, b.Peak.PeakGiB, w)
		require.InDelta(t, 8.0, c.Peak.WeightsGiB, 0.01, w)
		require.InDelta(t, 32.0, b.Peak.WeightsGiB, 0.01, w)
		require.Equal(t, c.Full, c.Running, "%s: the unconstrained engine holds every request", w)
		require.Greater(t, c.Peak.KVBytesPerToken, 0.0)
		require.Equal(t, record.MemoryFromEngineReport, c.Peak.Source, w)
		// Budget replay: under 1.02 x its peak the engine holds its
		// requests and keeps its rate.
		bud := out.Budget[w+"@1.02"]
		require.InDelta(t, 1.02*c.Peak.PeakGiB, bud.BudgetGiB, 0.0011, w)
		require.InDelta(t, bud.BudgetGiB+4, bud.CapGiB, 1e-9)
		require.NotNil(t, bud.Value, w)
		require.Equal(t, float64(c.Full), bud.Running, w)
	}
	// FP8 KV is half of BF16's per token (paged in 16-token blocks, so a
	// little above the exact figure).
	require.InDelta(t, out.Reference.Startup.KVBytesPerToken/2, out.Candidate.Startup.KVBytesPerToken, 1)
	require.Equal(t, "fp8", out.Candidate.Startup.KVCacheDType)
	require.True(t, out.HardCap)
	require.NotEmpty(t, *samples)
	for _, s := range *samples {
		require.True(t, s.Simulated)
	}
	// 3 workloads on the reference, 3 on the candidate, and each
	// workload's budget replays: one, or formula.KeepPairs interleaved
	// with as many runs of the unconstrained engine less one, when the
	// first held every request but lost rate on a loaded machine
	// (Attempts).
	runs := 0
	for w, bud := range out.Budget {
		require.Contains(t, []int{1, formula.KeepPairs}, bud.Attempts, w)
		runs += 2*bud.Attempts - 1
	}
	require.Len(t, *results, 6+runs)

	// The second job on this pod reuses the reference.
	out2, err := r.Efficiency(ctx, p, cand, ref, cache, nil)
	require.NoError(t, err)
	require.True(t, out2.Cached)
	require.Equal(t, 1, cache.puts)
	require.Equal(t, out.Reference.Workloads["serve"].Rate, out2.Reference.Workloads["serve"].Rate)
}

// TestBudgetReplayCatchesAnEngineSlowerUnderItsCap: simengine told its
// memory (a budget replay: the template's {{.GPUMemoryGiB}} is set) takes
// 2.5 ms longer steps, as an engine that preempts under a smaller pool
// would: about 27% slower on serve, more on interactive's one-request
// steps; unconstrained it serves at its rate. Every workload holds its
// requests under the budget; serve and interactive fail on their rate,
// judged over formula.KeepPairs interleaved pairs (long_context, whose
// time is its prefill, slows by a few percent and may keep it).
func TestBudgetReplayCatchesAnEngineSlowerUnderItsCap(t *testing.T) {
	if testing.Short() {
		t.Skip("runs simengine twenty-one times")
	}
	ref := writeCheckpoint(t, "BF16", 4<<20)
	cand := writeCheckpoint(t, "U8", 1<<20)
	r, _, _ := runner(t)
	p := job.EfficiencyParams{Campaign: "tiny", Engine: job.EngineSpec{Command: command("{{if .GPUMemoryGiB}}--step-overhead-ms 3{{end}}"), MaxNumSeqs: 256},
		Workload: small(), KVCacheDType: "fp8", Reference: events.BundleRef{SHA256: "ref1"}, BudgetFactor: 1.02}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := r.Efficiency(ctx, p, cand, ref, &memCache{}, nil)
	require.NoError(t, err)
	for _, w := range []string{"serve", "interactive", "long_context"} {
		bud := out.Budget[w+"@1.02"]
		t.Logf("%s: rate %.0f, replay %.0f, pairs %d, kept %.3f (bound %.3f)", w, out.Candidate.Workloads[w].Rate, *bud.Value, bud.Attempts, bud.KeptRatio, bud.KeptUpper)
		require.Equal(t, bud.FullRunning, bud.Running, "%s: it holds its requests under the budget", w)
	}
	for _, w := range []string{"serve", "interactive"} {
		bud := out.Budget[w+"@1.02"]
		require.False(t, bud.Healthy, w)
		require.Equal(t, formula.KeepPairs, bud.Attempts, w)
		require.Less(t, bud.KeptUpper, formula.KeepRate, w)
		require.Less(t, bud.KeptRatio, 0.85, w)
		require.Contains(t, formula.Reason(w, formula.Budget{Factor: bud.Factor, BudgetGiB: bud.BudgetGiB, CapGiB: bud.CapGiB},
			formula.Replay{Running: bud.Running, Full: bud.FullRunning, Rate: bud.Value, Upper: bud.KeptUpper}, out.Candidate.Workloads[w].Rate),
			"the engine did not keep 90% of its rate")
	}
}

func TestServeFailuresAreClassified(t *testing.T) {
	ck := writeCheckpoint(t, "BF16", 1<<20)
	wl := []loadgen.Workload{{Name: "serve", Concurrency: 4, Requests: 8, PromptWords: 16, MaxTokens: 64}}
	cases := []struct {
		name, extra string
		gib, capGiB float64
		reason      reason.Code
	}{
		{"never healthy", "--fault never-healthy", 0, 0, reason.EngineHealthTimeout},
		{"crash on start", "--fault crash-on-start", 0, 0, reason.EngineCrashed},
		{"dies mid-workload", "--fault die-after-tokens=40", 0, 0, reason.EngineCrashed},
		{"malformed stream", "--fault malformed-sse", 0, 0, reason.EngineBadStream},
		{"zero tokens", "--fault zero-tokens", 0, 0, reason.EngineZeroTokens},
		{"lies about tokens", "--fault lie-tokens", 0, 0, reason.EngineTokenCountMismatch},
		{"hangs", "--fault hang-after-tokens=20", 0, 0, reason.EngineHang},
		{"out of memory", "", 2.0, 0, reason.EngineOOM},
		{"over its cap", "", 0, 3.0, reason.EngineOverMemoryCap},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, _, _ := runner(t)
			r.HealthTimeout, r.IdleTimeout = 3*time.Second, time.Second
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			t0 := time.Now()
			_, err := r.Serve(ctx, job.Launch{Run: "candidate", Command: command(tc.extra), Checkpoint: ck, KVCacheDType: "auto",
				MaxNumSeqs: 64, GPUMemoryGiB: tc.gib, CapGiB: tc.capGiB}, wl)
			require.Error(t, err)
			var code reason.Code
			if f := engine.AsFailure(err); f != nil {
				code = f.Reason
				require.Contains(t, f.Message, "log tail")
			} else if le := loadgen.AsError(err); le != nil {
				code = le.Code
			}
			require.Equal(t, tc.reason, code, "%v", err)
			require.Less(t, time.Since(t0), 30*time.Second, "ended within bounded time")
		})
	}
	// The runner is fine for the next job.
	r, _, _ := runner(t)
	_, err := r.Serve(context.Background(), job.Launch{Run: "after", Command: command(""), Checkpoint: ck, KVCacheDType: "auto", MaxNumSeqs: 64}, wl)
	require.NoError(t, err)
}

// imitation is the template of an engine the runner knows as vLLM or
// SGLang, run by simengine imitating it (--imitate, then the engine's own
// argv after --): 4 MiB of BF16 stands for a 32 GiB model, as command's.
func imitation(engineName, template string) string {
	return simengine + " --imitate " + engineName + " --scale 8192 --kv-scale 64 --startup-seconds 0.3 -- " + template
}

// The real engines' templates, the ones the example campaign's
// engines/*.json carry, so the imitations run exactly what an operator
// switches to.
const (
	vllmTemplate   = examples.VLLMEngineCommand
	sglangTemplate = examples.SGLangEngineCommand
)

// TestServeWithoutArenaEndpoints runs a real engine process that serves
// what vLLM or SGLang serve and nothing of the arena's (simengine
// imitating each): the runner reads its start-up from its log, finds it
// healthy at the family's endpoint, and measures its peak from its
// /metrics and the device's count of its memory, naming that source.
func TestServeWithoutArenaEndpoints(t *testing.T) {
	ck := writeCheckpoint(t, "BF16", 4<<20)
	wl := []loadgen.Workload{{Name: "serve", Concurrency: 8, Requests: 16, PromptWords: 64, MaxTokens: 48}}
	r, _, _ := runner(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, tc := range []struct{ engine, template string }{{"vllm", vllmTemplate}, {"sglang", sglangTemplate}} {
		t.Run(tc.engine, func(t *testing.T) {
			out, err := r.Serve(ctx, job.Launch{Run: tc.engine, Command: imitation(tc.engine, tc.template),
				Checkpoint: ck, KVCacheDType: "fp8", MaxNumSeqs: 64, MaxModelLen: 4096}, wl)
			require.NoError(t, err)
			st := out.Startup
			require.Positive(t, st.KVCacheTokens, "the pool's tokens, from the start-up lines")
			require.Positive(t, st.KVCacheGiB)
			require.Contains(t, []string{"fp8", "fp8_e4m3"}, st.KVCacheDType)
			require.InDelta(t, 32.0, st.WeightsGiB, 0.01, "weights from the start-up lines")
			got := out.Workloads["serve"]
			require.Equal(t, record.MemoryFromMetricsNVML, got.Peak.Source)
			require.InDelta(t, 32.0, got.Peak.WeightsGiB, 0.01)
			// The device holds the whole pool (both engines allocate it at
			// start): other is its count less weights and pool.
			require.InDelta(t, out.DevicePeakGiB-st.WeightsGiB-st.KVCacheGiB, got.Peak.OtherGiB, 0.01)
			require.Positive(t, got.Peak.OtherGiB)
			require.GreaterOrEqual(t, out.StartupPeakGiB, st.WeightsGiB+st.KVCacheGiB, "the start-up is sampled: weights and the pool at least")
			require.Positive(t, got.Peak.KVGiB, "KV in use from /metrics")
			require.Less(t, got.Peak.KVGiB, st.KVCacheGiB)
			require.InDelta(t, got.Peak.KVGiB/st.KVCacheGiB, got.Peak.KVUsage, 0.001)
			require.InDelta(t, got.Peak.WeightsGiB+got.Peak.KVGiB+got.Peak.OtherGiB, got.Peak.PeakGiB, 0.002)
			require.Equal(t, got.Full, got.Running, "the engine's own running count, from /metrics")
			require.Positive(t, got.ContextTokens)
			require.True(t, out.Simulated)
			require.Contains(t, out.GPU, "(simulated)")
			require.Positive(t, out.Samples)
		})
	}
}

// TestEfficiencyUnderImitations: the budget replay, rendered in each
// engine's own terms (a KV pool in bytes for vLLM with the workload's own
// context; SGLang's static fraction of the free memory), starts and holds
// under the imitation of the pinned release: the runner's contract fits
// what the engines accept when the candidate's needs fit. With the old
// rendering (a fraction of the device, a 32K context) vLLM refused every
// replay at start.
func TestEfficiencyUnderImitations(t *testing.T) {
	ref := writeCheckpoint(t, "BF16", 4<<20)
	cand := writeCheckpoint(t, "U8", 1<<20)
	for _, tc := range []struct{ engine, template string }{{"vllm", vllmTemplate}, {"sglang", sglangTemplate}} {
		t.Run(tc.engine, func(t *testing.T) {
			r, _, _ := runner(t)
			var mu sync.Mutex
			peak := map[string]uint64{} // each run's most memory by the device's count
			r.Samples = func(_ context.Context, run string, b []telemetry.Sample) error {
				mu.Lock()
				defer mu.Unlock()
				for _, smp := range b {
					peak[run] = max(peak[run], smp.EngineMem)
				}
				return nil
			}
			p := job.EfficiencyParams{Campaign: "tiny", Engine: job.EngineSpec{Command: imitation(tc.engine, tc.template), MaxNumSeqs: 256, MaxModelLen: 4096},
				Workload: small(), KVCacheDType: "fp8", Reference: events.BundleRef{SHA256: "ref1"}, BudgetFactor: 1.02}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			out, err := r.Efficiency(ctx, p, cand, ref, &memCache{}, nil)
			require.NoError(t, err)
			for _, w := range []string{"serve", "interactive", "long_context"} {
				c := out.Candidate.Workloads[w]
				require.Equal(t, record.MemoryFromMetricsNVML, c.Peak.Source, w)
				bud := out.Budget[w+"@1.02"]
				require.True(t, bud.Healthy, "%s under the %s imitation: %+v", w, tc.engine, bud)
				require.Equal(t, bud.FullRunning, bud.Running, w)
				// The replay's engine was bounded: the unconstrained one
				// takes most of the device for its pool, the replay's holds
				// about its budget (and never its cap).
				mu.Lock()
				got, free := float64(peak[w+"@1.02"])/(1<<30), float64(peak["candidate"])/(1<<30)
				mu.Unlock()
				require.Greater(t, free, 2*bud.BudgetGiB, "%s: the unconstrained engine's pool is the device's", w)
				require.Less(t, got, bud.CapGiB, w)
				require.InDelta(t, bud.BudgetGiB, got, 0.1*bud.BudgetGiB, "%s: the replay's instance is about its budget", w)
			}
		})
	}
}

func TestParseStartupSGLang(t *testing.T) {
	// SGLang's lines as it prints them (sgl-project/sglang#7691,
	// #11830, #27537).
	for _, tc := range []struct {
		log                  string
		weights, pool, graph float64
		tokens               float64
		dtype                string
		perRequest           int
		sequences            float64
	}{
		{`[2025-07-02 07:41:58 DP0 TP0] Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, avail mem=21.73 GB, mem usage=166.59 GB.
[2025-11-30 12:50:10] Using KV cache dtype: torch.bfloat16
[2025-11-30 12:50:10] KV Cache is allocated. #tokens: 2243474, K size: 59.91 GB, V size: 59.91 GB
[2025-11-30 12:50:10] Memory pool end. avail mem=40.03 GB
[2025-11-30 12:50:15] Capture cuda graph end. Time elapsed: 5.37 s. mem usage=1.44 GB. avail mem=38.05 GB.`,
			166.59, 119.82, 1.44, 2243474, "bf16", 0, 0},
		{`[2026-06-08 07:20:53 TP0] KV Cache is allocated. dtype: torch.float8_e4m3fn, #tokens: 1106304, K size: 25.32 GB, V size: 25.32 GB
[2026-06-08 07:20:53 TP0] Memory pool end. avail mem=12.05 GB
[2026-06-08 07:20:55 TP0] max_total_num_tokens=1106304, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=4096, context_len=32768, available_gpu_mem=11.80 GB`,
			0, 50.64, 0, 1106304, "fp8_e4m3", 32768, 33.76},
	} {
		s, ok := job.ParseStartup(tc.log)
		require.True(t, ok)
		require.Equal(t, tc.weights, s.WeightsGiB)
		require.Equal(t, tc.pool, s.KVCacheGiB)
		require.Equal(t, tc.tokens, s.KVCacheTokens)
		require.InDelta(t, tc.pool*(1<<30)/tc.tokens, s.KVBytesPerToken, 1e-6)
		require.Equal(t, tc.graph, s.CUDAGraphGiB)
		require.Equal(t, tc.dtype, s.KVCacheDType)
		require.Equal(t, tc.perRequest, s.MaxConcurrency.TokensPerRequest)
		require.Equal(t, tc.sequences, s.MaxConcurrency.Sequences)
	}
}

func TestParseStartup(t *testing.T) {
	log := `INFO 11-02 10:00:01 [api_server.py:1000] vLLM API server version 0.11.0
INFO 11-02 10:00:02 [config.py:100] Initializing a V1 LLM engine with config: model='m', speculative_config=None, kv_cache_dtype=fp8, seed=0
INFO 11-02 10:00:30 [default_loader.py:262] Loading weights took 12.50 seconds
INFO 11-02 10:00:31 [gpu_model_runner.py:2000] Model loading took 15.0500 GiB and 13.1 seconds
INFO 11-02 10:01:00 [kv_cache_utils.py:800] GPU KV cache size: 4,361,122 tokens
INFO 11-02 10:01:00 [gpu_worker.py:300] Available KV cache memory: 142.99 GiB
INFO 11-02 10:01:00 [kv_cache_utils.py:804] Maximum concurrency for 32,768 tokens per request: 133.09x
INFO 11-02 10:01:20 [gpu_model_runner.py:2500] Graph capturing finished in 20 secs, took 0.29 GiB`
	s, ok := job.ParseStartup(log)
	require.True(t, ok)
	require.Equal(t, 15.05, s.WeightsGiB)
	require.Equal(t, 4361122.0, s.KVCacheTokens)
	require.Equal(t, 142.99, s.KVCacheGiB)
	// The fixture's figure: 142.99 GiB over 4,361,122 tokens.
	require.InDelta(t, 35205.23925122021, s.KVBytesPerToken, 1e-6)
	require.Equal(t, 133.09, s.MaxConcurrency.Sequences)
	require.Equal(t, 32768, s.MaxConcurrency.TokensPerRequest)
	require.Equal(t, 0.29, s.CUDAGraphGiB)
	require.Equal(t, 12.5, *s.LoadSeconds)
	require.Equal(t, "0.11.0", s.VLLMVersion)
	require.Equal(t, "fp8", s.KVCacheDType)
	require.Equal(t, "None", s.SpeculativeConfig)

	_, ok = job.ParseStartup("INFO Uvicorn running on http://127.0.0.1:8000")
	require.False(t, ok)
	b, _ := json.Marshal(s)
	require.Contains(t, string(b), `"kv_cache_dtype":"fp8"`)
}
