package main

import (
	"context"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/lowbarena/lowbarena/services/runner/loadgen"
)

// benchPlan is an 8B-class model at BF16 on an H200: about 16.4 GB of
// weights and 144 KiB of KV per token, so a decode step takes about
// 3.4 ms of memory time plus 0.5 ms of overhead, the pace the arena's
// simulated serve runs at.
func benchPlan(tb testing.TB) Plan {
	p, err := NewPlan(PlanInput{
		GPU: GPUs["h200"], Config: ModelConfig{Layers: 36, KVHeads: 8, HeadDim: 128, MaxPos: 32768},
		Weights: Weights{Bytes: 16.4e9, Params: 8.2e9}, StepOverhead: time.Millisecond / 2,
	})
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// rooflineSeconds is the time the roofline allows a closed-loop workload
// of waves of c requests that start together, each with prompt tokens and
// maxTokens to generate: every wave's first step prefills all c prompts
// and yields one token each; step k then runs c sequences holding
// c*(prompt+k) tokens of context. It is computed from StepTime alone, not
// from what the scheduler ran.
func rooflineSeconds(p Plan, c, requests int, prompt, maxTokens int64) float64 {
	var wave time.Duration
	for k := int64(0); k < maxTokens; k++ {
		pre := int64(0)
		if k == 0 {
			pre = int64(c) * prompt
		}
		wave += p.StepTime(c, int64(c)*(prompt+k), pre)
	}
	return wave.Seconds() * float64(requests/c)
}

// BenchmarkLoadgenDrivesSimengine runs the arena's load generator against
// the simulated engine in process at concurrency 1, 32 and 64 and reports
// the rate it measured beside the rate the engine's roofline allows for
// the same workload (rooflineSeconds), and beside the roofline time of the
// steps the scheduler actually ran (measured/busy: pacing alone). Before
// the scheduler kept a virtual clock, every step's sleep overshoot added
// to the run and measured/roofline was about 0.58 at concurrency 32.
func BenchmarkLoadgenDrivesSimengine(b *testing.B) {
	for _, c := range []int{1, 32, 64} {
		b.Run(fmt.Sprintf("c=%d", c), func(b *testing.B) {
			p := benchPlan(b)
			sched := NewScheduler(p, 64)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go sched.Run(ctx)
			s := &Server{Plan: p, Sched: sched, ModelID: "tiny", StartupSeconds: 0}
			s.SetReady()
			ts := newBenchServer(b, s)
			cl := &loadgen.Client{BaseURL: ts, Model: "tiny"}
			requests := 2 * c
			if c == 1 {
				requests = 4
			}
			w := loadgen.Workload{Name: "serve", Concurrency: c, Requests: requests, PromptWords: 8, MaxTokens: 64}
			var r loadgen.Result
			var busy time.Duration
			for b.Loop() {
				before := sched.Busy()
				var err error
				if r, err = cl.Run(ctx, w); err != nil {
					b.Fatal(err)
				}
				busy = sched.Busy() - before
			}
			prompt := r.Samples[0].PromptTokens
			allowed := float64(r.OutputTokens) / rooflineSeconds(p, c, requests, int64(prompt), 64)
			b.ReportMetric(r.Rate, "measured_tokens/s")
			b.ReportMetric(allowed, "roofline_tokens/s")
			b.ReportMetric(r.Rate/allowed, "measured/roofline")
			b.ReportMetric(r.Rate/(float64(r.OutputTokens)/busy.Seconds()), "measured/busy")
		})
	}
}

func newBenchServer(b *testing.B, s *Server) string {
	ts := httptest.NewServer(s.Handler())
	b.Cleanup(ts.Close)
	return ts.URL
}
