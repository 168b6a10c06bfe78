package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The engines' Prometheus gauges the runner reads, by their names in the
// engines' sources. vLLM (vllm/v1/metrics/loggers.py):
// vllm:kv_cache_usage_perc, "KV-cache usage. 1 means 100 percent usage."
// (vllm:gpu_cache_usage_perc before it, still read), vllm:num_requests_running
// and vllm:num_requests_waiting, one series per engine core. SGLang
// (python/sglang/srt/metrics/collector.py, served with --enable-metrics):
// sglang:token_usage (the KV pool's used share), sglang:num_used_tokens,
// sglang:num_running_reqs and sglang:num_queue_reqs.
const (
	VLLMKVUsage       = "vllm:kv_cache_usage_perc"
	VLLMKVUsageLegacy = "vllm:gpu_cache_usage_perc"
	VLLMRunning       = "vllm:num_requests_running"
	VLLMWaiting       = "vllm:num_requests_waiting"
	SGLangTokenUsage  = "sglang:token_usage"
	SGLangUsedTokens  = "sglang:num_used_tokens"
	SGLangRunning     = "sglang:num_running_reqs"
	SGLangQueue       = "sglang:num_queue_reqs"
)

// ErrNoEngineMetrics is returned when a /metrics page holds none of the
// engines' gauges above.
var ErrNoEngineMetrics = errors.New("telemetry: the metrics hold no vLLM or SGLang KV cache gauge")

// EngineMetrics is one reading of an engine's /metrics.
type EngineMetrics struct {
	// Engine is "vllm" or "sglang": whose gauges these are.
	Engine string
	// KVUsage is the share of the KV cache pool in use, 0 to 1 (the
	// largest over the engine's cores).
	KVUsage float64
	// UsedTokens is the tokens the KV pool holds, where the engine says
	// (SGLang); -1 when it does not.
	UsedTokens float64
	// Running and Waiting are requests, summed over the engine's cores.
	Running, Waiting float64
}

// ParseMetrics reads Prometheus text exposition (format 0.0.4, what vLLM
// and SGLang serve) and returns the engine's KV cache and request gauges.
// A page that does not parse is an error; one without either engine's KV
// gauge is ErrNoEngineMetrics.
func ParseMetrics(r io.Reader) (EngineMetrics, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return EngineMetrics{}, fmt.Errorf("telemetry: metrics: %w", err)
	}
	maxOf := func(name string) (float64, bool) {
		f, ok := fams[name]
		if !ok || len(f.GetMetric()) == 0 {
			return 0, false
		}
		v := 0.0
		for _, m := range f.GetMetric() {
			v = max(v, value(m))
		}
		return v, true
	}
	sumOf := func(name string) float64 {
		v := 0.0
		for _, m := range fams[name].GetMetric() {
			v += value(m)
		}
		return v
	}
	if u, ok := maxOf(VLLMKVUsage); ok {
		return EngineMetrics{Engine: "vllm", KVUsage: u, UsedTokens: -1, Running: sumOf(VLLMRunning), Waiting: sumOf(VLLMWaiting)}, nil
	}
	if u, ok := maxOf(VLLMKVUsageLegacy); ok {
		return EngineMetrics{Engine: "vllm", KVUsage: u, UsedTokens: -1, Running: sumOf(VLLMRunning), Waiting: sumOf(VLLMWaiting)}, nil
	}
	if u, ok := maxOf(SGLangTokenUsage); ok {
		used := -1.0
		if _, ok := fams[SGLangUsedTokens]; ok {
			used = sumOf(SGLangUsedTokens)
		}
		return EngineMetrics{Engine: "sglang", KVUsage: u, UsedTokens: used, Running: sumOf(SGLangRunning), Waiting: sumOf(SGLangQueue)}, nil
	}
	return EngineMetrics{}, ErrNoEngineMetrics
}

// value is a gauge's or untyped sample's value (a counter's where the
// page says counter).
func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Untyped != nil:
		return m.GetUntyped().GetValue()
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	}
	return 0
}

// ErrNoMetricsEndpoint is returned by ScrapeMetrics when the engine serves
// no metrics page (404).
var ErrNoMetricsEndpoint = errors.New("telemetry: the engine serves no metrics")

// ScrapeMetrics GETs an engine's metrics page and parses it. The body is
// bounded (8 MiB: a vLLM page with every histogram is about 100 KiB).
func ScrapeMetrics(ctx context.Context, hc *http.Client, url string) (EngineMetrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return EngineMetrics{}, fmt.Errorf("telemetry: %w", err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return EngineMetrics{}, fmt.Errorf("telemetry: GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return EngineMetrics{}, ErrNoMetricsEndpoint
	}
	if resp.StatusCode != http.StatusOK {
		return EngineMetrics{}, fmt.Errorf("telemetry: GET %s: %s", url, resp.Status)
	}
	return ParseMetrics(io.LimitReader(resp.Body, 8<<20))
}
