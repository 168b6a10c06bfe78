package job_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/services/runner/job"
)

// sglangPool is an MHA pool's line (python/sglang/srt/mem_cache/
// memory_pool.py, MHATokenToKVPool), which every SGLang log below needs to
// be read as SGLang's.
const sglangPool = "[2026-06-08 07:20:53] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 1106304, K size: 25.32 GB, V size: 25.32 GB\n"

// TestParseStartupSGLangGraphPhases: current SGLang prints one line per
// captured phase, "Capture {target|draft} {phase} CUDA graph end.
// elapsed=... s, mem usage=... GB, avail mem=... GB."; the graphs' memory
// is their sum, one rank's (every rank of a TP engine logs its own), and
// the earlier single line is still read. The lines are the boot-log lines
// SGLang's own CPU test of sglang.srt.planner.graphmem quotes verbatim
// (sgl-project/sglang, test of planner/graphmem.py, lines of 2026-07-21),
// and the earlier form SGLang's issue #7691 shows.
func TestParseStartupSGLangGraphPhases(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		log   string
		graph float64
	}{
		{"prefill and decode, one GPU", `[2026-07-21 10:36:54] Capture target prefill CUDA graph end. elapsed=3.83 s, mem usage=0.28 GB, avail mem=5.23 GB.
[2026-07-21 10:36:55] Capture target decode CUDA graph end. elapsed=0.80 s, mem usage=0.11 GB, avail mem=5.12 GB.`, 0.39},
		{"three ranks, rank 0's", `[2026-07-21 13:35:33 TP1] Capture target decode CUDA graph end. elapsed=4.81 s, mem usage=0.27 GB, avail mem=5.34 GB.
[2026-07-21 13:35:33 TP2] Capture target decode CUDA graph end. elapsed=4.82 s, mem usage=0.27 GB, avail mem=5.47 GB.
[2026-07-21 13:35:33 TP0] Capture target decode CUDA graph end. elapsed=4.83 s, mem usage=0.24 GB, avail mem=7.28 GB.`, 0.24},
		{"speculative: target verify and the draft's phases", `[2026-07-21 08:21:55 TP0] Capture target verify CUDA graph begin. backend=full, num_tokens_per_bs=6, bs=[1, 2, 3, 4, 5, 6], avail mem=7.77 GB
[2026-07-21 08:22:00 TP0] Capture target verify CUDA graph end. elapsed=4.56 s, mem usage=0.38 GB, avail mem=7.39 GB.
[2026-07-21 08:22:00 TP0] Capture draft decode CUDA graph begin. backend=full, num_tokens_per_bs=1, bs=[1, 2, 3, 4, 5, 6], avail mem=7.39 GB
[2026-07-21 08:22:01 TP0] Capture draft decode CUDA graph end. elapsed=1.56 s, mem usage=0.38 GB, avail mem=7.01 GB.
[2026-07-21 08:22:01 TP0] Capture draft extend CUDA graph begin. backend=full, num_tokens_per_bs=6, bs=[1, 2, 3, 4, 5, 6], avail mem=7.01 GB
[2026-07-21 08:22:02 TP0] Capture draft extend CUDA graph end. elapsed=0.74 s, mem usage=0.14 GB, avail mem=6.87 GB.
[2026-07-21 08:22:02 TP0] Capture draft decode CUDA graph begin. backend=full, num_tokens_per_bs=1, bs=[1, 2, 3, 4, 5, 6], avail mem=6.77 GB
[2026-07-21 08:22:03 TP0] Capture draft decode CUDA graph end. elapsed=0.85 s, mem usage=0.09 GB, avail mem=6.68 GB.
[2026-07-21 08:22:03 TP0] Capture draft extend CUDA graph begin. backend=full, num_tokens_per_bs=5, bs=[1, 2, 3, 4, 5, 6], avail mem=6.68 GB
[2026-07-21 08:22:04 TP0] Capture draft extend CUDA graph end. elapsed=0.74 s, mem usage=0.08 GB, avail mem=6.60 GB.`, 1.07},
		{"the earlier single line", `[2025-11-30 12:50:15] Capture cuda graph end. Time elapsed: 5.37 s. mem usage=1.44 GB. avail mem=38.05 GB.`, 1.44},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, ok := job.ParseStartup(sglangPool + tc.log)
			require.True(t, ok)
			require.InDelta(t, tc.graph, s.CUDAGraphGiB, 1e-9)
			require.Equal(t, 50.64, s.KVCacheGiB, "the pool is still read")
		})
	}
}

// TestParseStartupSGLangOneKVSize: SGLang's MLA pools (DeepSeek, Kimi,
// GLM-MLA) and its hybrid pools give the pool as one size:
// f"KV Cache is allocated. #tokens: {size}, KV size: {kv_size / GB:.2f} GB"
// (python/sglang/srt/mem_cache/memory_pool.py, MLATokenToKVPool), current
// builds with the dtype first ("KV Cache is allocated. dtype:
// torch.bfloat16, #tokens: 1226984, KV size: 9.21 GB", a boot log of
// SGLang main of 2026-10-10).
func TestParseStartupSGLangOneKVSize(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		log    string
		tokens float64
		pool   float64
		dtype  string
	}{
		{`[2025-07-02 07:41:58 DP0 TP0] Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, avail mem=21.73 GB, mem usage=166.59 GB.
[2025-07-02 07:42:03 DP0 TP0] KV Cache is allocated. #tokens: 343040, KV size: 22.45 GB
[2025-07-02 07:42:03 DP0 TP0] Memory pool end. avail mem=12.05 GB`, 343040, 22.45, ""},
		{`[2026-10-10 11:59:31] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 1226984, KV size: 9.21 GB
[2026-10-10 11:59:51] Capture target decode CUDA graph end. elapsed=10.10 s, mem usage=0.79 GB, avail mem=10.39 GB.
[2026-10-10 11:59:51] max_total_num_tokens=1226984, chunked_prefill_size=8192, context_len=262144, available_gpu_mem=10.39 GB`, 1226984, 9.21, "bf16"},
	} {
		s, ok := job.ParseStartup(tc.log)
		require.True(t, ok, "the pool's line is SGLang's report")
		require.Equal(t, tc.tokens, s.KVCacheTokens)
		require.Equal(t, tc.pool, s.KVCacheGiB)
		require.InDelta(t, tc.pool*(1<<30)/tc.tokens, s.KVBytesPerToken, 1e-6)
		require.Equal(t, tc.dtype, s.KVCacheDType)
	}
	s, _ := job.ParseStartup(`[2026-10-10 11:59:31] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 1226984, KV size: 9.21 GB
[2026-10-10 11:59:51] Capture target decode CUDA graph end. elapsed=10.10 s, mem usage=0.79 GB, avail mem=10.39 GB.
[2026-10-10 11:59:51] max_total_num_tokens=1226984, chunked_prefill_size=8192, context_len=262144, available_gpu_mem=10.39 GB`)
	require.Equal(t, 0.79, s.CUDAGraphGiB)
	require.Equal(t, 262144, s.MaxConcurrency.TokensPerRequest)
}

// TestParseStartupVLLMForms reads vLLM's start-up lines in the forms its
// versions print:
//   - "Model loading took %.4f GB and %.6f seconds" (0.7, 0.8; the line of
//     vllm-project/vllm#14574, testdata of the engine package), whose GB
//     are GiB;
//   - "Model loading took %s GiB memory and %.6f seconds"
//     (vllm/v1/worker/gpu_model_runner.py, current);
//   - "Graph capturing finished in %.0f secs, took %.2f GiB"
//     (gpu_model_runner.py, capture_model: free memory before less after,
//     negative when the capture ends with more free memory than it began);
//   - "GPU KV cache size: %s tokens, Maximum concurrency for %s tokens per
//     request: %.2fx", one line with thousands separators
//     (vllm/v1/core/kv_cache_utils.py, update_kv_cache_capacity, current),
//     and "Available KV cache memory: %.2f GiB" (vllm/v1/worker/
//     gpu_worker.py@35d5cda, determine_available_memory).
func TestParseStartupVLLMForms(t *testing.T) {
	t.Parallel()
	const pool = "INFO 10-02 09:00:20 [gpu_worker.py:298] Available KV cache memory: 4.27 GiB\n"
	for _, tc := range []struct {
		name            string
		log             string
		weights, graph  float64
		tokens, seqs    float64
		tokensPerRecord int
	}{
		{"0.7's GB", `[2025-03-10T15:07:20Z] INFO 03-10 08:07:20 [gpu_model_runner.py:1067] Model loading took 0.2389 GB and 0.977005 seconds
INFO 03-10 08:07:25 [kv_cache_utils.py:537] GPU KV cache size: 34,952 tokens
INFO 03-10 08:07:25 [kv_cache_utils.py:540] Maximum concurrency for 8,192 tokens per request: 4.27x`, 0.2389, 0, 34952, 4.27, 8192},
		{"current lines, a negative graph figure", `(EngineCore_DP0 pid=77) INFO 10-02 09:00:11 [gpu_model_runner.py:3015] Model loading took 15.05 GiB memory and 13.104355 seconds
(EngineCore_DP0 pid=77) INFO 10-02 09:00:25 [kv_cache_utils.py:1291] GPU KV cache size: 34,952 tokens, Maximum concurrency for 8,192 tokens per request: 4.27x
(EngineCore_DP0 pid=77) INFO 10-02 09:00:41 [gpu_model_runner.py:3868] Graph capturing finished in 16 secs, took -0.74 GiB`, 15.05, -0.74, 34952, 4.27, 8192},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, ok := job.ParseStartup(pool + tc.log)
			require.True(t, ok)
			require.Equal(t, tc.weights, s.WeightsGiB)
			require.Equal(t, tc.graph, s.CUDAGraphGiB)
			require.Equal(t, tc.tokens, s.KVCacheTokens)
			require.Equal(t, 4.27, s.KVCacheGiB)
			require.Equal(t, tc.seqs, s.MaxConcurrency.Sequences)
			require.Equal(t, tc.tokensPerRecord, s.MaxConcurrency.TokensPerRequest)
		})
	}
}

// TestParseStartupKVCacheMemoryBytes: a budget replay starts vLLM with
// --kv-cache-memory-bytes, and vLLM then skips its profiling and prints
// the pool it was given instead of "Available KV cache memory"
// (vllm/v1/worker/gpu_worker.py, determine_available_memory): the
// runner reads the pool from that line.
func TestParseStartupKVCacheMemoryBytes(t *testing.T) {
	log := `(EngineCore_DP0 pid=7) INFO 12-06 09:00:01 [gpu_model_runner.py:3435] Model loading took 15.2551 GiB memory and 0.400000 seconds
(EngineCore_DP0 pid=7) INFO 12-06 09:00:01 [gpu_worker.py:298] Initial free memory 78.50 GiB, reserved 2.07 GiB memory for KV Cache as specified by kv_cache_memory_bytes config and skipped memory profiling. This does not respect the gpu_memory_utilization config. Only use kv_cache_memory_bytes config when you want manual control of KV cache memory size. If OOM'ed, check the difference of initial free memory between the current run and the previous run where kv_cache_memory_bytes is suggested and update it correspondingly.
(EngineCore_DP0 pid=7) INFO 12-06 09:00:01 [kv_cache_utils.py:1229] GPU KV cache size: 15,072 tokens`
	s, ok := job.ParseStartup(log)
	require.True(t, ok)
	require.Equal(t, 2.07, s.KVCacheGiB)
	require.Equal(t, 15072.0, s.KVCacheTokens)
	require.Equal(t, 15.2551, s.WeightsGiB)
}
