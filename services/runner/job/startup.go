package job

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/lowbarena/lowbarena/services/domain/formula"
	"github.com/lowbarena/lowbarena/services/domain/record"
)

// The start-up lines vLLM writes (and simengine imitates). Each figure is
// optional: an engine that does not print one leaves it zero.
var (
	reWeights  = regexp.MustCompile(`Model loading took ([0-9.]+) ?GiB`)
	reKVTokens = regexp.MustCompile(`GPU KV cache size: ([0-9,]+) tokens`)
	reKVGiB    = regexp.MustCompile(`Available KV cache memory: ([0-9.]+) ?GiB`)
	reMaxConc  = regexp.MustCompile(`Maximum concurrency for ([0-9,]+) tokens per request: ([0-9.]+)x`)
	reGraph    = regexp.MustCompile(`Graph capturing finished in [0-9.]+ secs?, took ([0-9.]+) GiB`)
	reLoad     = regexp.MustCompile(`Loading weights took ([0-9.]+) seconds`)
	reVersion  = regexp.MustCompile(`vLLM API server version ([^\s]+)`)
	reKVDType  = regexp.MustCompile(`kv_cache_dtype=([A-Za-z0-9_]+)`)
	reSpec     = regexp.MustCompile(`speculative_config=([^,\s]+)`)
)

// ParseStartup reads an engine's start-up report from its log: weights,
// KV cache pool and tokens, the concurrency the pool allows, CUDA graph
// memory, weight loading time, version, KV dtype. ok is false when the log
// holds neither the KV pool size nor its token count, the two figures the
// record cannot do without.
func ParseStartup(log string) (s record.Startup, ok bool) {
	num := func(re *regexp.Regexp, group int) (float64, bool) {
		m := re.FindStringSubmatch(log)
		if m == nil {
			return 0, false
		}
		v, err := strconv.ParseFloat(strings.ReplaceAll(m[group], ",", ""), 64)
		return v, err == nil
	}
	s.WeightsGiB, _ = num(reWeights, 1)
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
	s.SpeculativeConfig = "None"
	if m := reSpec.FindStringSubmatch(log); m != nil {
		s.SpeculativeConfig = m[1]
	}
	return s, okT && okP
}
