package main

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// qwen3Config is Qwen3-8B's shapes as the imitations see them.
var qwen3Config = ModelConfig{Layers: 36, KVHeads: 8, Heads: 32, HeadDim: 128, Hidden: 4096, MaxPos: 40960, Architectures: []string{"Qwen3ForCausalLM"}}

// qwen3Weights is a BF16 8B model's weights.
var qwen3Weights = Weights{Bytes: 16.38e9, Params: 8.19e9}

// imitate plans an engine command line on a GPU for Qwen3-8B.
func imitate(t *testing.T, gpu, engine string, argv ...string) Imitation {
	t.Helper()
	ea, err := ParseEngineArgv(engine, argv)
	require.NoError(t, err)
	return Imitate(ImitateInput{GPU: GPUs[gpu], Config: qwen3Config, Weights: qwen3Weights, Args: ea, Startup: 1})
}

func vllmArgv(args ...string) []string { return append([]string{"vllm", "serve", "/ck"}, args...) }

func sglangArgv(args ...string) []string {
	return append([]string{"python3", "-m", "sglang.launch_server", "--model-path", "/ck"}, args...)
}

// text joins an imitation's lines as the log shows them, without prefixes.
func text(im Imitation) string {
	var b strings.Builder
	for _, l := range im.Lines() {
		b.WriteString(l.Text + "\n")
	}
	return b.String()
}

// TestVLLMMemoryPlan checks vLLM's KV budget: total x
// gpu_memory_utilization (0.9 by default) less weights, the profiled
// activation peak and non-torch memory, in whole 16-token blocks; exactly
// --kv-cache-memory-bytes when given; and max_model_len defaulting to
// max_position_embeddings.
func TestVLLMMemoryPlan(t *testing.T) {
	kvpt := 2.0 * 36 * 8 * 128 // FP8: 73,728 bytes per token
	for _, tc := range []struct {
		name      string
		args      []string
		wantAvail float64
		wantLen   int
	}{
		{"default utilization", []string{"--kv-cache-dtype", "fp8"},
			81559*MiB*0.9 - qwen3Weights.Bytes - activationBytes(8192, 4096) - NonTorchBytes, 40960},
		{"utilization 0.5", []string{"--kv-cache-dtype", "fp8", "--gpu-memory-utilization", "0.5", "--max-model-len", "4096"},
			81559*MiB*0.5 - qwen3Weights.Bytes - activationBytes(8192, 4096) - NonTorchBytes, 4096},
		{"kv-cache-memory-bytes ignores utilization", []string{"--kv-cache-dtype", "fp8", "--gpu-memory-utilization", "0.5", "--kv-cache-memory-bytes", "3000000000", "--max-model-len", "4096"},
			3e9, 4096},
	} {
		t.Run(tc.name, func(t *testing.T) {
			im := imitate(t, "h100", "vllm", vllmArgv(tc.args...)...)
			require.False(t, im.Failed(), text(im))
			wantTokens := int64(tc.wantAvail/(16*kvpt)) * 16
			require.Equal(t, wantTokens, im.Plan.KVTokens())
			require.InDelta(t, float64(wantTokens)*kvpt, im.Plan.KVPoolBytes, 1)
			require.Equal(t, tc.wantLen, im.Plan.MaxModelLen)
			require.Contains(t, text(im), "GPU KV cache size: "+thousands(wantTokens)+" tokens\n")
			// Serving, the device holds the context, weights, non-torch
			// memory, the whole pool, the graphs and the activations.
			require.InDelta(t, CUDAContextBytes+qwen3Weights.Bytes+NonTorchBytes+im.Plan.KVPoolBytes+im.GraphBytes+im.ActivationBytes, im.ServingBytes(), 1)
		})
	}
}

// TestSGLangMemoryPlan checks SGLang's pool: free-before-load x
// mem_fraction_static - weights in tokens of the KV cell, the
// mem_fraction_static it picks for each GPU's memory, and the cap of
// --max-total-tokens.
func TestSGLangMemoryPlan(t *testing.T) {
	for _, tc := range []struct {
		gpu     string
		wantMFS float64
	}{{"h100", 0.835}, {"h200", 0.907}, {"b200", 0.857}} {
		mfs, _, _ := SGLangMemFractionStatic(GPUs[tc.gpu].NVMLBytes)
		require.InDelta(t, tc.wantMFS, mfs, 1e-9, tc.gpu)
		im := imitate(t, tc.gpu, "sglang", sglangArgv("--kv-cache-dtype", "fp8_e4m3")...)
		require.False(t, im.Failed(), text(im))
		free := GPUs[tc.gpu].NVMLBytes - CUDAContextBytes
		cell := 2.0 * 36 * 8 * 128
		require.Equal(t, int64((free*tc.wantMFS-qwen3Weights.Bytes)/cell), im.Plan.KVTokens(), tc.gpu)
		require.Equal(t, 40960, im.Plan.MaxModelLen, "context_len is the model's")
	}
	im := imitate(t, "h200", "sglang", sglangArgv("--mem-fraction-static", "0.5", "--max-total-tokens", "100000")...)
	require.Equal(t, int64(100000), im.Plan.KVTokens())
	im = imitate(t, "h200", "sglang", sglangArgv("--max-total-tokens", "1000000000")...)
	require.Contains(t, text(im), "max_total_tokens=1000000000 is larger than the profiled value")
}

// TestRefusals checks that each refusal is the engine's own text, the last
// lines of the start-up, and that the engine does not start.
func TestRefusals(t *testing.T) {
	for _, tc := range []struct {
		name, gpu, engine string
		argv              []string
		want              string
	}{
		{"vllm context longer than the model's", "h100", "vllm", vllmArgv("--max-model-len", "65536"),
			"Value error, User-specified max_model_len (65536) is greater than the derived max_model_len (max_position_embeddings=40960 or model_max_length=None in model's config.json). To allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1."},
		{"vllm free memory below the utilization", "h100", "vllm", vllmArgv("--gpu-memory-utilization", "0.999"),
			"ValueError: Free memory on device (79.15/79.65 GiB) on startup is less than desired GPU memory utilization (0.999, 79.57 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes."},
		{"vllm no memory for the cache", "h100", "vllm", vllmArgv("--gpu-memory-utilization", "0.2"),
			"ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine. See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."},
		{"vllm one max-length request does not fit", "h100", "vllm", vllmArgv("--kv-cache-memory-bytes", "1000000000"),
			"ValueError: To serve at least one request with the models's max seq len (40960), (5.62 GiB KV cache is needed, which is larger than the available KV cache memory (0.93 GiB). Based on the available memory, the estimated maximum model length is 6768. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."},
		{"sglang context longer than the model's", "h100", "sglang", sglangArgv("--context-length", "65536"),
			"ValueError: Warning: User-specified context_length (65536) is greater than the derived context_length (40960). This may lead to incorrect model outputs or CUDA errors. Note that the derived context_length may differ from max_position_embeddings in the model's config. To allow overriding this maximum, set the env var SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"},
		{"sglang not enough memory", "h100", "sglang", sglangArgv("--mem-fraction-static", "0.1"),
			"RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: mem_fraction_static=0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			im := imitate(t, tc.gpu, tc.engine, tc.argv...)
			require.True(t, im.Failed())
			lines := im.Lines()
			var last []string
			for _, l := range lines[max(len(lines)-3, 0):] {
				last = append(last, l.Text)
			}
			require.Contains(t, strings.Join(last, "\n"), tc.want)
			require.NotContains(t, text(im), "Application startup complete")
		})
	}
}

// TestStartupLines checks each imitation writes the start-up lines of its
// release, with the figures of its plan, in the forms the runner reads.
func TestStartupLines(t *testing.T) {
	v := imitate(t, "h100", "vllm", vllmArgv("--kv-cache-dtype", "fp8", "--max-num-seqs", "64", "--max-model-len", "4096")...)
	vt := text(v)
	for _, re := range []string{
		`(?m)^vLLM API server version 0\.13\.0$`,
		`kv_cache_dtype=fp8,`,
		`(?m)^Model loading took 15\.2551 GiB memory and 0\.400000 seconds$`,
		`(?m)^Available KV cache memory: [0-9]+\.[0-9]{2} GiB$`,
		`(?m)^GPU KV cache size: [0-9]{3},[0-9]{3} tokens$`,
		`(?m)^Maximum concurrency for 4,096 tokens per request: [0-9]+\.[0-9]{2}x$`,
		`(?m)^Graph capturing finished in 0 secs, took 0\.25 GiB$`,
	} {
		require.Regexp(t, re, vt)
	}
	require.Equal(t, 0.1*GiB+19*GraphPerSizeBytes, v.GraphBytes, "19 capture sizes at --max-num-seqs 64")

	s := imitate(t, "h100", "sglang", sglangArgv("--kv-cache-dtype", "fp8_e4m3", "--max-running-requests", "64", "--context-length", "4096")...)
	st := text(s)
	tokens := s.Plan.KVTokens()
	for _, re := range []string{
		`'kv_cache_dtype': 'fp8_e4m3'`,
		`(?m)^Using KV cache dtype: torch\.float8_e4m3fn$`,
		`(?m)^Load weight end\. elapsed=0\.40 s, type=Qwen3ForCausalLM, avail mem=[0-9.]+ GB, mem usage=15\.26 GB\.$`,
		`(?m)^KV Cache is allocated\. dtype: torch\.float8_e4m3fn, #tokens: ` + regexp.QuoteMeta(itoa(tokens)) + `, K size: [0-9.]+ GB, V size: [0-9.]+ GB$`,
		`(?m)^Capture target decode CUDA graph end\. elapsed=0\.25 s, mem usage=0\.19 GB, avail mem=[0-9.]+ GB\.$`,
		`(?m)^max_total_num_tokens=` + itoa(tokens) + `, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=64, context_len=4096, available_gpu_mem=[0-9.]+ GB$`,
	} {
		require.Regexp(t, re, st)
	}
	mla := qwen3Config
	mla.KVLoraRank, mla.QKRopeHeadDim = 512, 64
	ea, err := ParseEngineArgv("sglang", sglangArgv())
	require.NoError(t, err)
	m := Imitate(ImitateInput{GPU: GPUs["h200"], Config: mla, Weights: qwen3Weights, Args: ea, Startup: 1})
	require.Regexp(t, `(?m)^KV Cache is allocated\. dtype: torch\.bfloat16, #tokens: [0-9]+, KV size: [0-9.]+ GB$`, text(m), "MLA's one latent")
	require.InDelta(t, 36*576*2, m.Plan.KVBytesPerToken, 0)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestEngineLoggerPrefixes checks the loggers' prefixes: vLLM's process,
// level, MM-DD time and file:line; SGLang's bracketed date and time.
func TestEngineLoggerPrefixes(t *testing.T) {
	at := func() time.Time { return time.Date(2026, 3, 4, 5, 6, 7, 0, time.Local) }
	v := EngineLogger{Engine: "vllm", Pid: 100, Now: at}
	require.Equal(t, "(EngineCore_DP0 pid=101) INFO 03-04 05:06:07 [gpu_worker.py:359] Available KV cache memory: 1.00 GiB",
		v.Format(EngineLine{Proc: "core", Level: "INFO", Src: "gpu_worker.py:359", Text: "Available KV cache memory: 1.00 GiB"}))
	require.Equal(t, "(APIServer pid=100) INFO:     Started server process [100]", v.Format(EngineLine{Proc: "api", Raw: true, Text: "INFO:     Started server process [{pid}]"}))
	s := EngineLogger{Engine: "sglang", Pid: 100, Now: at}
	require.Equal(t, "[2026-03-04 05:06:07] Memory pool end. avail mem=1.00 GB", s.Format(EngineLine{Level: "INFO", Text: "Memory pool end. avail mem=1.00 GB"}))
}

// TestFP4KVOnHopper checks what each pinned release does with an FP4 KV
// cache: vLLM 0.13 has no FP4 KV dtype, so argparse refuses nvfp4 on any
// GPU; SGLang accepts fp4_e2m1/nvfp4/fp4_mx_block16, warns of the accuracy
// drop and runs with a half-byte cache on Hopper and Blackwell alike (no
// refusal was found in the code read).
func TestFP4KVOnHopper(t *testing.T) {
	for _, gpu := range []string{"h100", "h200", "b200"} {
		_, err := ParseEngineArgv("vllm", vllmArgv("--kv-cache-dtype", "nvfp4"))
		var ae *ArgError
		require.ErrorAs(t, err, &ae, gpu)
		require.Contains(t, ae.Msg, "invalid choice: 'nvfp4'")
		for _, kvd := range []string{"fp4_e2m1", "nvfp4", "fp4_mx_block16"} {
			im := imitate(t, gpu, "sglang", sglangArgv("--kv-cache-dtype", kvd)...)
			require.False(t, im.Failed(), "%s %s", gpu, kvd)
			require.Contains(t, text(im), "FP4 (E2M1) KV Cache might lead to a accuracy drop!\nUsing KV cache dtype: torch.float4_e2m1fn_x2\n")
			require.InDelta(t, 2*36*8*128*0.5625, im.Plan.KVBytesPerToken, 0)
			require.Equal(t, "nvfp4", im.DamageKV)
		}
	}
}

// TestDevicePhases checks the simulated device through a start-up: it
// rises with the CUDA context, the weights, the profile peak (vLLM), the
// pool allocated whole, the graphs and the warm-up's activations, and the
// engines' own "avail mem" figures are the device's free memory.
func TestDevicePhases(t *testing.T) {
	v := imitate(t, "h100", "vllm", vllmArgv("--kv-cache-dtype", "fp8", "--max-model-len", "4096")...)
	var used []float64
	for _, p := range v.Phases {
		used = append(used, p.Used)
	}
	w, pool, act := qwen3Weights.Bytes, v.Plan.KVPoolBytes, v.ActivationBytes
	require.Equal(t, []float64{0, CUDAContextBytes, CUDAContextBytes + w, CUDAContextBytes + w + NonTorchBytes + act,
		CUDAContextBytes + w + NonTorchBytes + pool, CUDAContextBytes + w + NonTorchBytes + pool + v.GraphBytes,
		CUDAContextBytes + w + NonTorchBytes + pool + v.GraphBytes + act}, used)
	// vLLM's budget is total x utilization; the context and graphs lie
	// outside it.
	require.InDelta(t, 81559*MiB*0.9+CUDAContextBytes+v.GraphBytes, v.ServingBytes(), 16*73728)

	s := imitate(t, "h200", "sglang", sglangArgv()...)
	total := GPUs["h200"].NVMLBytes
	seen := false
	for _, p := range s.Phases {
		for _, l := range p.Lines {
			if m := regexp.MustCompile(`^Memory pool end\. avail mem=([0-9.]+) GB$`).FindStringSubmatch(l.Text); m != nil {
				require.Equal(t, fmt.Sprintf("%.2f", (total-p.Used)/GiB), m[1])
				seen = true
			}
		}
	}
	require.True(t, seen)
	require.InDelta(t, CUDAContextBytes+qwen3Weights.Bytes+s.Plan.KVPoolBytes+s.GraphBytes+s.ActivationBytes, s.ServingBytes(), 1)
}
