package job

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/record"
)

// TestPeakWithoutReport: the breakdown of an engine without a memory
// report, from each source the runner may have, against figures worked
// out by hand (an 8B model: 15.05 GiB of weights, a 100 GiB pool of
// 1,000,000 tokens; at the peak 42.35% of the pool in use).
func TestPeakWithoutReport(t *testing.T) {
	t.Parallel()
	st := record.Startup{WeightsGiB: 15.05, KVCacheGiB: 100, KVCacheTokens: 1e6, CUDAGraphGiB: 0.29}
	const gib = 1 << 30
	cases := []struct {
		name      string
		seen      bool
		usage     float64
		tokens    float64
		procBytes uint64
		want      record.PeakMemory
		ok        bool
	}{
		// NVML saw 117.5 GiB: other = 117.5 - 15.05 - 100 = 2.45.
		{"metrics and nvml", true, 0.4235, -1, 117.5 * gib,
			record.PeakMemory{WeightsGiB: 15.05, KVGiB: 42.35, OtherGiB: 2.45, PeakGiB: 59.85, KVUsage: 0.4235,
				KVBytesPerToken: 107374, Source: record.MemoryFromMetricsNVML}, true},
		// SGLang counts its tokens: 400,000 of them in 42.35 GiB.
		{"metrics with tokens, no nvml", true, 0.4235, 400000, 0,
			record.PeakMemory{WeightsGiB: 15.05, KVGiB: 42.35, OtherGiB: 0.29, PeakGiB: 57.69, KVUsage: 0.4235,
				KVBytesPerToken: 113682, Source: record.MemoryFromMetrics}, true},
		// No metrics: the whole pool, and the rest of what NVML saw.
		{"nvml only", false, 0, -1, 117.5 * gib,
			record.PeakMemory{WeightsGiB: 15.05, KVGiB: 100, OtherGiB: 2.45, PeakGiB: 117.5, KVUsage: 1,
				Source: record.MemoryFromNVML}, true},
		{"nothing", false, 0, -1, 0, record.PeakMemory{}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := &metricsProbe{}
			p.reset()
			p.seen, p.usage, p.tokens, p.running = tc.seen, tc.usage, tc.tokens, 7
			got, running, ok := p.peakWithoutReport(st, tc.procBytes)
			require.Equal(t, tc.ok, ok)
			require.Equal(t, tc.want, got)
			if ok {
				require.Equal(t, 7, running)
			}
		})
	}
}
