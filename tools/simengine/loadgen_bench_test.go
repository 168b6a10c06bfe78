package main

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/lowbarena/lowbarena/services/runner/loadgen"
)

// BenchmarkLoadgenDrivesSimengine runs the arena's load generator against
// the simulated engine in process, 32 requests at once, and reports the
// rate it measured beside the rate the engine's roofline allows for a full
// batch (about 32,000 tokens/s here, over ten times the fixtures' serve
// rates of 1,762 and 2,801 tokens/s). The gap between the two is the
// engine's own: its sleeps overshoot on a loaded machine and prefill steps
// are slower; the generator's own ceiling is BenchmarkClientTokens in
// services/runner/loadgen (about 200,000 tokens/s).
func BenchmarkLoadgenDrivesSimengine(b *testing.B) {
	p, err := NewPlan(PlanInput{
		GPU: GPUs["h200"], Config: ModelConfig{Layers: 2, KVHeads: 2, HeadDim: 16, MaxPos: 4096},
		Weights: Weights{Bytes: 1 << 20, Params: 1 << 19}, StepOverhead: time.Millisecond,
	})
	if err != nil {
		b.Fatal(err)
	}
	sched := NewScheduler(p, 64)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go sched.Run(ctx)
	s := &Server{Plan: p, Sched: sched, ModelID: "tiny", StartupSeconds: 0}
	s.SetReady()
	ts := newBenchServer(b, s)
	c := &loadgen.Client{BaseURL: ts, Model: "tiny"}
	w := loadgen.Workload{Name: "serve", Concurrency: 32, Requests: 64, PromptWords: 8, MaxTokens: 64}
	var measured float64
	for b.Loop() {
		r, err := c.Run(ctx, w)
		if err != nil {
			b.Fatal(err)
		}
		measured = r.Rate
	}
	allowed := 32 / p.StepTime(32, 32*40, 0).Seconds()
	b.ReportMetric(measured, "measured_tokens/s")
	b.ReportMetric(allowed, "roofline_tokens/s")
	b.ReportMetric(measured/allowed, "measured/roofline")
}

func newBenchServer(b *testing.B, s *Server) string {
	ts := httptest.NewServer(s.Handler())
	b.Cleanup(ts.Close)
	return ts.URL
}
