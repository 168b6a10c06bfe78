package telemetry_test

import (
	"strings"
	"testing"

	"github.com/lowbarena/lowbarena/services/runner/telemetry"
)

// BenchmarkParseMetricsVLLM parses a vLLM /metrics page, the work of one
// scrape (the runner scrapes at 10 Hz).
func BenchmarkParseMetricsVLLM(b *testing.B) {
	b.SetBytes(int64(len(vllmPage)))
	for b.Loop() {
		if _, err := telemetry.ParseMetrics(strings.NewReader(vllmPage)); err != nil {
			b.Fatal(err)
		}
	}
}
