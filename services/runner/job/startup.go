package job

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/lowbarena/lowbarena/domain/formula"
	"github.com/lowbarena/lowbarena/domain/record"
)

// The start-up lines vLLM writes (and simengine imitates). Each figure is
// optional: an engine that does not print one leaves it zero.
var (
	reWeights  = regexp.MustCompile(`Model loading took ([0-9.]+) ?GiB|Loading model weights took ([0-9.]+) ?GB`)
	reKVTokens = regexp.MustCompile(`GPU KV cache size: ([0-9,]+) tokens`)
	reKVGiB    = regexp.MustCompile(`Available KV cache memory: ([0-9.]+) ?GiB`)
	reMaxConc  = regexp.MustCompile(`Maximum concurrency for ([0-9,]+) tokens per request: ([0-9.]+)x`)
	reGraph    = regexp.MustCompile(`Graph capturing finished in [0-9.]+ secs?, took ([0-9.]+) GiB`)
	reLoad     = regexp.MustCompile(`Loading weights took ([0-9.]+) seconds`)
	reVersion  = regexp.MustCompile(`vLLM API server version ([^\s]+)`)
	reKVDType  = regexp.MustCompile(`kv_cache_dtype=([A-Za-z0-9_]+)`)
	reSpec     = regexp.MustCompile(`speculative_config=([^,\s]+)`)
)

// The start-up lines SGLang writes (python/sglang/srt/model_executor/
// model_runner.py and the memory pool and CUDA graph runner beside it),
// e.g. "Load weight end. type=Qwen3ForCausalLM, dtype=torch.bfloat16,
// avail mem=21.73 GB, mem usage=166.59 GB.", "KV Cache is allocated.
// #tokens: 2243474, K size: 59.91 GB, V size: 59.91 GB" (newer: "KV Cache
// is allocated. dtype: torch.bfloat16, #tokens: ..."), "Capture cuda graph
// end. Time elapsed: 5.37 s. mem usage=1.44 GB. avail mem=38.05 GB." and
// the scheduler's "max_total_num_tokens=..., ..., context_len=...". SGLang's
// "GB" are GiB (it divides by 1 << 30).
var (
	reSGWeights = regexp.MustCompile(`Load weight end\..*?mem usage=([0-9.]+) GB`)
	reSGKV      = regexp.MustCompile(`KV Cache is allocated\. (?:dtype: torch\.([A-Za-z0-9_]+), )?#tokens: ([0-9]+), K size: ([0-9.]+) GB, V size: ([0-9.]+) GB`)
	reSGGraph   = regexp.MustCompile(`Capture cuda graph end\. Time elapsed: [0-9.]+ s\. mem usage=([0-9.]+) GB`)
	reSGContext = regexp.MustCompile(`max_total_num_tokens=[0-9]+,.*?context_len=([0-9]+)`)
	reSGKVUsing = regexp.MustCompile(`Using KV cache dtype: torch\.([A-Za-z0-9_]+)`)
	reSGKVArg   = regexp.MustCompile(`kv_cache_dtype='([A-Za-z0-9_]+)'`)
)

// torchKV names a torch dtype of SGLang's KV cache as the engines' flags
// do.
var torchKV = map[string]string{"bfloat16": "bf16", "float16": "fp16", "float8_e4m3fn": "fp8_e4m3",
	"float8_e5m2": "fp8_e5m2", "float4_e2m1fn_x2": "fp4_e2m1", "uint8": "fp8_e4m3"}

// ParseStartup reads an engine's start-up report from its log, vLLM's
// lines or SGLang's: weights, KV cache pool and tokens, the concurrency the
// pool allows, CUDA graph memory, weight loading time, version, KV dtype.
// ok is false when the log holds neither the KV pool size nor its token
// count, the two figures the record cannot do without.
func ParseStartup(log string) (s record.Startup, ok bool) {
	num := func(re *regexp.Regexp, group int) (float64, bool) {
		m := re.FindStringSubmatch(log)
		if m == nil || m[group] == "" {
			return 0, false
		}
		v, err := strconv.ParseFloat(strings.ReplaceAll(m[group], ",", ""), 64)
		return v, err == nil
	}
	s.SpeculativeConfig = "None"
	if m := reSGKV.FindStringSubmatch(log); m != nil {
		return parseSGLang(log, num), true
	}
	if v, okW := num(reWeights, 1); okW {
		s.WeightsGiB = v
	} else {
		s.WeightsGiB, _ = num(reWeights, 2)
	}
	tokens, okT := num(reKVTokens, 1)
	pool, okP := num(reKVGiB, 1)
	s.KVCacheTokens, s.KVCacheGiB = tokens, pool
	if per, okM := num(reMaxConc, 1); okM {
		s.MaxConcurrency.TokensPerRequest = int(per)
		s.MaxConcurrency.Sequences, _ = num(reMaxConc, 2)
	}
	s.CUDAGraphGiB, _ = num(reGraph, 1)
	if v, okL := num(reLoad, 1); okL {
		s.LoadSeconds = &v
	}
	if tokens > 0 && pool > 0 {
		s.KVBytesPerToken = formula.StartupKVBytesPerToken(pool, tokens)
	}
	if m := reVersion.FindStringSubmatch(log); m != nil {
		s.VLLMVersion = m[1]
	}
	if m := reKVDType.FindStringSubmatch(log); m != nil {
		s.KVCacheDType = m[1]
	}
	if m := reSpec.FindStringSubmatch(log); m != nil {
		s.SpeculativeConfig = m[1]
	}
	return s, okT && okP
}

// parseSGLang reads SGLang's start-up lines (the log holds its KV line).
func parseSGLang(log string, num func(*regexp.Regexp, int) (float64, bool)) record.Startup {
	s := record.Startup{SpeculativeConfig: "None"}
	s.WeightsGiB, _ = num(reSGWeights, 1)
	m := reSGKV.FindStringSubmatch(log)
	tokens, _ := strconv.ParseFloat(m[2], 64)
	k, _ := strconv.ParseFloat(m[3], 64)
	v, _ := strconv.ParseFloat(m[4], 64)
	s.KVCacheTokens, s.KVCacheGiB = tokens, formula.Round(k+v, 2)
	if tokens > 0 && s.KVCacheGiB > 0 {
		s.KVBytesPerToken = formula.StartupKVBytesPerToken(s.KVCacheGiB, tokens)
	}
	s.CUDAGraphGiB, _ = num(reSGGraph, 1)
	if ctx, ok := num(reSGContext, 1); ok && ctx > 0 {
		s.MaxConcurrency.TokensPerRequest = int(ctx)
		s.MaxConcurrency.Sequences = formula.MaxSequences(tokens, ctx)
	}
	// The dtype the pool runs (its log line) before the one asked for
	// (server_args' kv_cache_dtype, "auto" for the model's).
	torchName := func(d string) string {
		if name, ok := torchKV[d]; ok {
			return name
		}
		return d
	}
	switch u := reSGKVUsing.FindStringSubmatch(log); {
	case u != nil:
		s.KVCacheDType = torchName(u[1])
	case m[1] != "":
		s.KVCacheDType = torchName(m[1])
	default:
		if a := reSGKVArg.FindStringSubmatch(log); a != nil {
			s.KVCacheDType = a[1]
		}
	}
	return s
}
