package job

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/lowbarena/lowbarena/domain/formula"
	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/events"
)

// The start-up lines vLLM writes (and simengine imitates). Each figure is
// optional: an engine that does not print one leaves it zero.
//   - "Model loading took %s GiB memory and %.6f seconds"
//     (vllm/v1/worker/gpu_model_runner.py, current), "Model loading took
//     15.0500 GiB and 13.1 seconds" (earlier), "Model loading took 0.2389 GB
//     and 0.977005 seconds" (0.7 and 0.8, whose "GB" is GiB: the figure is
//     bytes over 2^30).
//   - "GPU KV cache size: %s tokens" and "Maximum concurrency for %s tokens
//     per request: %.2fx", two lines or, in current vLLM, one
//     ("GPU KV cache size: %s tokens, Maximum concurrency for ...",
//     vllm/v1/core/kv_cache_utils.py), with thousands separators.
//   - "Graph capturing finished in %.0f secs, took %.2f GiB": the GiB are
//     free memory before less after, negative when the capture freed more
//     than it took ("took -0.74 GiB"), read as such.
var (
	reWeights  = regexp.MustCompile(`Model loading took (-?[0-9.]+) ?G(?:i)?B|Loading model weights took ([0-9.]+) ?GB`)
	reKVTokens = regexp.MustCompile(`GPU KV cache size: ([0-9,]+) tokens`)
	reKVGiB    = regexp.MustCompile(`Available KV cache memory: ([0-9.]+) ?GiB`)
	// With --kv-cache-memory-bytes vLLM skips its profiling and prints
	// the pool it was given instead (vllm/v1/worker/gpu_worker.py,
	// determine_available_memory).
	reKVReserved = regexp.MustCompile(`reserved ([0-9.]+) ?GiB memory for KV Cache as specified by kv_cache_memory_bytes`)
	reMaxConc    = regexp.MustCompile(`Maximum concurrency for ([0-9,]+) tokens per request: ([0-9.]+)x`)
	reGraph      = regexp.MustCompile(`Graph capturing finished in [0-9.]+ secs?, took (-?[0-9.]+) GiB`)
	reLoad       = regexp.MustCompile(`Loading weights took ([0-9.]+) seconds`)
	reVersion    = regexp.MustCompile(`vLLM API server version ([^\s]+)`)
	reKVDType    = regexp.MustCompile(`kv_cache_dtype=([A-Za-z0-9_]+)`)
	reSpec       = regexp.MustCompile(`speculative_config=([^,\s]+)`)
)

// The start-up lines SGLang writes (python/sglang/srt/model_executor/
// model_runner.py and the memory pool and CUDA graph runner beside it),
// e.g. "Load weight end. type=Qwen3ForCausalLM, dtype=torch.bfloat16,
// avail mem=21.73 GB, mem usage=166.59 GB.", "KV Cache is allocated.
// #tokens: 2243474, K size: 59.91 GB, V size: 59.91 GB" (newer: "KV Cache
// is allocated. dtype: torch.bfloat16, #tokens: ..."; the MLA and hybrid
// pools of python/sglang/srt/mem_cache/memory_pool.py: "KV Cache is
// allocated. #tokens: {size}, KV size: {kv_size / GB:.2f} GB"), the CUDA
// graphs' "Capture cuda graph end. Time elapsed: 5.37 s. mem usage=1.44 GB.
// avail mem=38.05 GB." (newer: one line per captured phase, "Capture
// target decode CUDA graph end. elapsed=4.81 s, mem usage=0.27 GB, avail
// mem=5.34 GB.", target prefill, target verify, draft decode, draft
// extend, summed) and the scheduler's "max_total_num_tokens=..., ...,
// context_len=...". SGLang's "GB" are GiB (it divides by 1 << 30).
var (
	reSGWeights = regexp.MustCompile(`Load weight end\..*?mem usage=([0-9.]+) GB`)
	reSGKV      = regexp.MustCompile(`KV Cache is allocated\. (?:dtype: torch\.([A-Za-z0-9_]+), )?#tokens: ([0-9]+), K size: ([0-9.]+) GB, V size: ([0-9.]+) GB`)
	reSGKVOne   = regexp.MustCompile(`KV Cache is allocated\. (?:dtype: torch\.([A-Za-z0-9_]+), )?#tokens: ([0-9]+), KV size: ([0-9.]+) GB`)
	reSGGraph   = regexp.MustCompile(`Capture cuda graph end\. Time elapsed: [0-9.]+ s\. mem usage=(-?[0-9.]+) GB`)
	// reSGPhaseGraph is a line per captured phase; (1) is its log
	// prefix, where a rank's tag is ("[2026-07-21 13:35:33 TP1] ").
	reSGPhaseGraph = regexp.MustCompile(`(?m)^(.*?)Capture (?:target|draft) [a-z_]+ CUDA graph end\. elapsed=[0-9.]+ s, mem usage=(-?[0-9.]+) GB`)
	reSGRank       = regexp.MustCompile(`\b(?:TP|PP|DP|EP)([0-9]+)\b`)
	reSGContext    = regexp.MustCompile(`max_total_num_tokens=[0-9]+,.*?context_len=([0-9]+)`)
	reSGKVUsing    = regexp.MustCompile(`Using KV cache dtype: torch\.([A-Za-z0-9_]+)`)
	reSGKVArg      = regexp.MustCompile(`kv_cache_dtype='([A-Za-z0-9_]+)'`)
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
	if reSGKV.MatchString(log) || reSGKVOne.MatchString(log) {
		return parseSGLang(log, num), true
	}
	if v, okW := num(reWeights, 1); okW {
		s.WeightsGiB = v
	} else {
		s.WeightsGiB, _ = num(reWeights, 2)
	}
	tokens, okT := num(reKVTokens, 1)
	pool, okP := num(reKVGiB, 1)
	if !okP {
		pool, okP = num(reKVReserved, 1)
	}
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
	// The pool: K and V apart (MHA), or one KV size (MLA, hybrid), the
	// first the log holds.
	var dtype string
	m, one := reSGKV.FindStringSubmatchIndex(log), reSGKVOne.FindStringSubmatchIndex(log)
	if m != nil && (one == nil || m[0] < one[0]) {
		sub := reSGKV.FindStringSubmatch(log)
		tokens, _ := strconv.ParseFloat(sub[2], 64)
		k, _ := strconv.ParseFloat(sub[3], 64)
		v, _ := strconv.ParseFloat(sub[4], 64)
		s.KVCacheTokens, s.KVCacheGiB, dtype = tokens, formula.Round(k+v, 2), sub[1]
	} else {
		sub := reSGKVOne.FindStringSubmatch(log)
		tokens, _ := strconv.ParseFloat(sub[2], 64)
		kv, _ := strconv.ParseFloat(sub[3], 64)
		s.KVCacheTokens, s.KVCacheGiB, dtype = tokens, kv, sub[1]
	}
	tokens := s.KVCacheTokens
	if tokens > 0 && s.KVCacheGiB > 0 {
		s.KVBytesPerToken = formula.StartupKVBytesPerToken(s.KVCacheGiB, tokens)
	}
	s.CUDAGraphGiB = sglangGraphGiB(log, num)
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
	case dtype != "":
		s.KVCacheDType = torchName(dtype)
	default:
		if a := reSGKVArg.FindStringSubmatch(log); a != nil {
			s.KVCacheDType = a[1]
		}
	}
	return s
}

// sglangGraphGiB is the memory SGLang's CUDA graphs took: the sum of its
// per-phase capture lines (target decode, target prefill, draft decode,
// ...), one rank's (rank 0's, or the untagged lines of a single-GPU
// engine: every rank logs its own), else its single "Capture cuda graph
// end" line.
func sglangGraphGiB(log string, num func(*regexp.Regexp, int) (float64, bool)) float64 {
	sum, found := 0.0, false
	for _, m := range reSGPhaseGraph.FindAllStringSubmatch(log, -1) {
		rank0 := true
		for _, r := range reSGRank.FindAllStringSubmatch(m[1], -1) {
			if r[1] != "0" {
				rank0 = false
			}
		}
		v, err := strconv.ParseFloat(m[2], 64)
		if !rank0 || err != nil {
			continue
		}
		sum += v
		found = true
	}
	if found {
		return formula.Round(sum, 2)
	}
	v, _ := num(reSGGraph, 1)
	return v
}

// The start-up times the engines log (and simengine imitates):
//   - vLLM's "Model loading took %s GiB memory and %.6f seconds" (the
//     weights, read and placed; earlier releases "... GiB and %s
//     seconds", 0.7's and 0.8's "... GB and %s seconds"), else its
//     loader's "Loading weights took %.2f seconds", and "Graph capturing
//     finished in %.0f secs, took %.2f GiB";
//   - SGLang's "Load weight end. elapsed=%.2f s, ..." and its CUDA
//     graphs' "Capture cuda graph end. Time elapsed: %.2f s." (earlier)
//     or one "Capture target decode CUDA graph end. elapsed=%.2f s, ..."
//     per captured phase, rank 0's summed.
var (
	reLoadTime         = regexp.MustCompile(`Model loading took -?[0-9.]+ ?Gi?B(?: memory)? and ([0-9.]+) seconds`)
	reWeightsTime      = regexp.MustCompile(`Loading weights took ([0-9.]+) seconds`)
	reGraphTime        = regexp.MustCompile(`Graph capturing finished in ([0-9.]+) secs?`)
	reSGLoadTime       = regexp.MustCompile(`Load weight end\. elapsed=([0-9.]+) s`)
	reSGGraphTime      = regexp.MustCompile(`Capture cuda graph end\. Time elapsed: ([0-9.]+) s`)
	reSGPhaseGraphTime = regexp.MustCompile(`(?m)^(.*?)Capture (?:target|draft) [a-z_]+ CUDA graph end\. elapsed=([0-9.]+) s`)
)

// StartTimes reads the weight loading and CUDA-graph capture times an
// engine's start-up log reports, vLLM's lines or SGLang's; loadOK and
// graphOK say whether it reported each (a figure it did not report is
// 0).
func StartTimes(log string) (load, graph float64, loadOK, graphOK bool) {
	first := func(res ...*regexp.Regexp) (float64, bool) {
		for _, re := range res {
			if m := re.FindStringSubmatch(log); m != nil {
				if v, err := strconv.ParseFloat(m[1], 64); err == nil {
					return v, true
				}
			}
		}
		return 0, false
	}
	load, loadOK = first(reLoadTime, reWeightsTime, reSGLoadTime)
	graph, graphOK = first(reGraphTime, reSGGraphTime)
	if !graphOK {
		for _, m := range reSGPhaseGraphTime.FindAllStringSubmatch(log, -1) {
			rank0 := true
			for _, r := range reSGRank.FindAllStringSubmatch(m[1], -1) {
				rank0 = rank0 && r[1] == "0"
			}
			if v, err := strconv.ParseFloat(m[2], 64); err == nil && rank0 {
				graph += v
				graphOK = true
			}
		}
	}
	return load, graph, loadOK, graphOK
}

// StartOf is the start of the engine run named run that took seconds
// from its launch to its health (or its failure to start), split by its
// start-up log: the loading and graph capture it reports, and the rest.
// A log whose figures sum past seconds (an engine's clock that started
// before the launch was timed) keeps them as told and the rest at 0;
// the rest is never negative.
func StartOf(run string, seconds float64, log string) events.EngineStart {
	load, graph, loadOK, graphOK := StartTimes(log)
	s := events.EngineStart{Run: run, Seconds: formula.Round(seconds, 3), LoadSeconds: load, GraphSeconds: graph,
		LoadLogged: loadOK, GraphLogged: graphOK}
	s.OtherSeconds = formula.Round(max(s.Seconds-load-graph, 0), 3)
	return s
}
