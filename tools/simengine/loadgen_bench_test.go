package main

import (
	"context"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/lowbarena/lowbarena/domain/examples"
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

// BenchmarkFullSizeServe serves the example BF16, FP8, INT4 and NVFP4
// checkpoints as full-size Qwen3-8B (the example campaign's
// --source-config) with the KV dtype each declares, drives each with the
// load generator's serve workload (32 at once, 128-word prompts, 64
// tokens), and reports each quantized rate over BF16's, measured in the
// same iteration, beside the same ratio of the workload's roofline
// (rooflineSeconds, prefill included).
func BenchmarkFullSizeServe(b *testing.B) {
	dir := b.TempDir()
	if _, err := examples.Write(dir); err != nil {
		b.Fatal(err)
	}
	full, err := ReadSourceArch(examples.SourceShapes)
	if err != nil {
		b.Fatal(err)
	}
	names := []string{"bf16-reference", "fp8-w8a8", "int4-w4a16-g32", "nvfp4-w4a4"}
	kv := map[string]string{"bf16-reference": "auto", "fp8-w8a8": "fp8", "int4-w4a16-g32": "fp8", "nvfp4-w4a4": "fp8"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clients := map[string]*loadgen.Client{}
	plans := map[string]Plan{}
	for _, name := range names {
		ck := filepath.Join(dir, examples.SubmissionsDir, name)
		m, err := LoadCheckpoint(ck)
		if err != nil {
			b.Fatal(err)
		}
		fs, err := FullSizeOf(ck, m, full)
		if err != nil {
			b.Fatal(err)
		}
		p, err := NewPlan(PlanInput{GPU: GPUs["h200"], Config: ModelConfig{Layers: full.Layers, KVHeads: full.KVHeads, HeadDim: full.HeadDim, MaxPos: full.MaxPos},
			Weights: fs.Weights, KVDType: kv[name], StepOverhead: time.Millisecond / 2})
		if err != nil {
			b.Fatal(err)
		}
		plans[name] = p
		sched := NewScheduler(p, 256)
		go sched.Run(ctx)
		s := &Server{Plan: p, Sched: sched, ModelID: name}
		s.SetReady()
		clients[name] = &loadgen.Client{BaseURL: newBenchServer(b, s), Model: name}
	}
	w := loadgen.Workload{Name: "serve", Concurrency: 32, Requests: 64, PromptWords: 128, MaxTokens: 64}
	rates, roofline := map[string]float64{}, map[string]float64{}
	for b.Loop() {
		for _, name := range names {
			r, err := clients[name].Run(ctx, w)
			if err != nil {
				b.Fatal(err)
			}
			rates[name] = r.Rate
			prompt := int64(r.Samples[0].PromptTokens)
			roofline[name] = float64(r.OutputTokens) / rooflineSeconds(plans[name], w.Concurrency, w.Requests, prompt, int64(w.MaxTokens))
		}
	}
	// The workload's roofline ratio counts its prefill steps, compute
	// bound and the same for every format (one BF16 FLOP rate), so it is
	// narrower than a decode step's ratio.
	b.ReportMetric(roofline["fp8-w8a8"]/roofline["bf16-reference"], "fp8/bf16_roofline")
	b.ReportMetric(roofline["int4-w4a16-g32"]/roofline["bf16-reference"], "int4/bf16_roofline")
	b.ReportMetric(roofline["nvfp4-w4a4"]/roofline["bf16-reference"], "nvfp4/bf16_roofline")
	b.ReportMetric(rates["bf16-reference"], "bf16_tokens/s")
	b.ReportMetric(rates["fp8-w8a8"]/rates["bf16-reference"], "fp8/bf16")
	b.ReportMetric(rates["int4-w4a16-g32"]/rates["bf16-reference"], "int4/bf16")
	b.ReportMetric(rates["nvfp4-w4a4"]/rates["bf16-reference"], "nvfp4/bf16")
}
