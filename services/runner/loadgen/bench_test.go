package loadgen_test

import (
	"context"
	"testing"

	"github.com/lowbarena/lowbarena/services/runner/loadgen"
)

// BenchmarkClientTokens measures the load generator's own ceiling: an
// in-process engine that streams as fast as it can, 32 requests at once,
// 128 tokens each. Its tokens/s must be far above the rates it is asked to
// measure (the fixtures' serve rates are 1,762 to 2,801 tokens/s).
func BenchmarkClientTokens(b *testing.B) {
	e := &engine{}
	c := start(b, e)
	w := loadgen.Workload{Name: "serve", Concurrency: 32, Requests: 64, PromptWords: 16, MaxTokens: 128}
	b.ReportAllocs()
	var tokens int
	for b.Loop() {
		r, err := c.Run(context.Background(), w)
		if err != nil {
			b.Fatal(err)
		}
		tokens += r.OutputTokens
	}
	b.ReportMetric(float64(tokens)/b.Elapsed().Seconds(), "tokens/s")
}
