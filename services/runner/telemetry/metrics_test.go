package telemetry_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/services/runner/telemetry"
)

// vllmPage is a vLLM /metrics page in its own layout (HELP and TYPE as in
// vllm/v1/metrics/loggers.py, labels engine and model_name, the
// histograms and counters beside the gauges), the KV usage at 0.4235.
const vllmPage = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="qwen3-8b-fp8"} 32.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="qwen3-8b-fp8"} 3.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="qwen3-8b-fp8"} 0.4235
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="qwen3-8b-fp8"} 8.128902e+06
# HELP vllm:iteration_tokens_total Histogram of number of tokens per engine_step.
# TYPE vllm:iteration_tokens_total histogram
vllm:iteration_tokens_total_sum{engine="0",model_name="qwen3-8b-fp8"} 0.0
vllm:iteration_tokens_total_bucket{engine="0",le="1.0",model_name="qwen3-8b-fp8"} 3.0
vllm:iteration_tokens_total_bucket{engine="0",le="+Inf",model_name="qwen3-8b-fp8"} 3.0
vllm:iteration_tokens_total_count{engine="0",model_name="qwen3-8b-fp8"} 3.0
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="fp8",engine="0",gpu_memory_utilization="0.9",num_gpu_blocks="272570"} 1.0
`

// vllmLegacyPage is an older vLLM's page: the usage under its earlier
// name, two engine cores.
const vllmLegacyPage = `# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:gpu_cache_usage_perc{engine="1",model_name="m"} 0.5
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 4.0
vllm:num_requests_running{engine="1",model_name="m"} 6.0
`

// sglangPage is SGLang's page as its docs show it
// (docs/references/production_metrics.md), with the running, queue and
// used-token gauges of its scheduler collector.
const sglangPage = `# HELP sglang:prompt_tokens_total Number of prefill tokens processed.
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="meta-llama/Llama-3.1-8B-Instruct"} 8.128902e+06
# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{model_name="meta-llama/Llama-3.1-8B-Instruct"} 7.557572e+06
# HELP sglang:token_usage The token usage
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.28
# HELP sglang:cache_hit_rate The cache hit rate
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.007507552643049313
# HELP sglang:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_sum{model_name="meta-llama/Llama-3.1-8B-Instruct"} 2.3518979474117756e+06
sglang:time_to_first_token_seconds_bucket{le="0.001",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
sglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.0
sglang:time_to_first_token_seconds_count{model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.0
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="meta-llama/Llama-3.1-8B-Instruct"} 64.0
# HELP sglang:num_used_tokens The number of used tokens.
# TYPE sglang:num_used_tokens gauge
sglang:num_used_tokens{model_name="meta-llama/Llama-3.1-8B-Instruct"} 627958.0
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="meta-llama/Llama-3.1-8B-Instruct"} 2.0
`

// TestScrapeMetrics serves each page on loopback, as the engines do, and
// reads it through the runner's scraper.
func TestScrapeMetrics(t *testing.T) {
	t.Parallel()
	pages := map[string]string{"/vllm": vllmPage, "/vllm-legacy": vllmLegacyPage, "/sglang": sglangPage,
		"/other": "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 12.5\n", "/broken": "vllm:kv_cache_usage_perc{engine=\"0\" 0.4\n"}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		page, ok := pages[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_, _ = w.Write([]byte(page))
	}))
	t.Cleanup(srv.Close)
	hc := &http.Client{Timeout: 5 * time.Second}
	cases := []struct {
		path string
		want telemetry.EngineMetrics
		err  error
	}{
		{"/vllm", telemetry.EngineMetrics{Engine: "vllm", KVUsage: 0.4235, UsedTokens: -1, Running: 32, Waiting: 3}, nil},
		{"/vllm-legacy", telemetry.EngineMetrics{Engine: "vllm", KVUsage: 0.5, UsedTokens: -1, Running: 10}, nil},
		{"/sglang", telemetry.EngineMetrics{Engine: "sglang", KVUsage: 0.28, UsedTokens: 627958, Running: 64, Waiting: 2}, nil},
		{"/other", telemetry.EngineMetrics{}, telemetry.ErrNoEngineMetrics},
		{"/absent", telemetry.EngineMetrics{}, telemetry.ErrNoMetricsEndpoint},
	}
	for _, tc := range cases {
		got, err := telemetry.ScrapeMetrics(context.Background(), hc, srv.URL+tc.path)
		if tc.err != nil {
			require.ErrorIs(t, err, tc.err, tc.path)
			continue
		}
		require.NoError(t, err, tc.path)
		require.Equal(t, tc.want, got, tc.path)
	}
	_, err := telemetry.ScrapeMetrics(context.Background(), hc, srv.URL+"/broken")
	require.Error(t, err)
	require.NotErrorIs(t, err, telemetry.ErrNoEngineMetrics)
}

// TestSamplerReadsActivityOncePerSecond: memory is read at every tick,
// utilisation and power (which NVML averages over about a second) once
// per ActivityInterval and carried in the samples between; the engine's
// memory is the device's over the baseline, and the peak is that.
func TestSamplerReadsActivityOncePerSecond(t *testing.T) {
	var memCalls, utilCalls, powerCalls atomic.Int64
	dev := &mock.Device{
		GetMemoryInfo_v2Func: func() (nvml.Memory_v2, nvml.Return) {
			memCalls.Add(1)
			return nvml.Memory_v2{Total: 141 << 30, Used: 100 << 30, Reserved: 300 << 20}, nvml.SUCCESS
		},
		GetUtilizationRatesFunc: func() (nvml.Utilization, nvml.Return) {
			utilCalls.Add(1)
			return nvml.Utilization{Gpu: 87}, nvml.SUCCESS
		},
		GetPowerUsageFunc: func() (uint32, nvml.Return) { powerCalls.Add(1); return 612000, nvml.SUCCESS },
	}
	src, err := telemetry.FromNVML(oneDevice(dev), false, 0)
	require.NoError(t, err)
	defer src.Close()
	var mu sync.Mutex
	var got []telemetry.Sample
	sm := &telemetry.Sampler{Source: src, Interval: 2 * time.Millisecond, ActivityInterval: time.Hour, Baseline: 4 << 30, BatchSize: 1,
		Sink: func(_ context.Context, b []telemetry.Sample) error {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, b...)
			return nil
		}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sm.Run(ctx) }()
	require.Eventually(t, func() bool { return sm.Count() >= 20 }, 10*time.Second, 2*time.Millisecond)
	cancel()
	require.NoError(t, <-done)
	require.Equal(t, int64(1), utilCalls.Load(), "utilisation read once in the interval")
	require.Equal(t, int64(1), powerCalls.Load())
	require.GreaterOrEqual(t, memCalls.Load(), int64(20), "memory at every tick")
	require.Equal(t, uint64(96<<30), sm.Peak())
	mu.Lock()
	defer mu.Unlock()
	for _, smp := range got {
		require.InDelta(t, 0.87, smp.Util, 1e-9, "carried between readings")
		require.InDelta(t, 612.0, smp.PowerW, 1e-9)
		require.Equal(t, uint64(96<<30), smp.EngineMem)
	}
}
