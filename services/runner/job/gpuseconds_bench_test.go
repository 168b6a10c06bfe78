package job_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lowbarena/lowbarena/domain/suite"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/services/runner/job"
)

// benchStartup is the engines' start-up in BenchmarkGPUSecondsPerVerdict:
// LOWBARENA_BENCH_STARTUP_SECONDS, else 6 s (a tenth of a real engine's
// minute, so that `make bench` stays short; the figure is taken
// with 60).
func benchStartup(b *testing.B) float64 {
	if v := os.Getenv("LOWBARENA_BENCH_STARTUP_SECONDS"); v != "" {
		s, err := strconv.ParseFloat(v, 64)
		if err != nil || s <= 0 {
			b.Fatalf("LOWBARENA_BENCH_STARTUP_SECONDS=%q is not a positive number of seconds", v)
		}
		return s
	}
	return 6
}

// BenchmarkGPUSecondsPerVerdict runs what one submission's verdict takes
// on a pod whose BF16 reference is measured already: its efficiency job
// (the candidate's run and a budget replay per workload) and its quality
// job, on simengine imitating vLLM with a start-up of benchStartup
// seconds, with the campaign's one engine spec for both (as the stages
// send it). It reports the GPU-seconds the jobs held beside the
// unavoidable: one engine start (the mean of the starts paid) plus the
// time the GPU served the measured work (the workloads, the replays the
// contract needs, the suite's answers), and their ratio (the goal is at
// most 1.3x). Run it with -benchtime 1x: each iteration is a verdict of
// several engine starts.
//
// Three cases: separate, every run on a start of its own (the runner
// before it kept engines: -keep-engine 0); quality_first and
// efficiency_first, the runner keeping its engines (job.Keeper) and the
// jobs taken in that order (a pod takes them in the order they reach its
// queue: either). Efficiency first, the quality job is answered on the
// candidate's engine right after its measured run (Runner.AfterCandidate,
// as the runner service does with a submission's queued quality job).
func BenchmarkGPUSecondsPerVerdict(b *testing.B) {
	startup := benchStartup(b)
	cand := writeCheckpoint(b, "U8", 1<<20)
	st := suite.Generate("t", "1", suite.SplitDev, suite.SeedDev, suite.Sizes{"math": 8, "commonsense": 8})
	cmd := strings.Replace(imitation("vllm", vllmTemplate), "--startup-seconds 0.3", fmt.Sprintf("--startup-seconds %g", startup), 1)
	spec := job.EngineSpec{Command: cmd, MaxNumSeqs: 256, MaxModelLen: 4096}
	p := job.EfficiencyParams{Campaign: "tiny", Engine: spec, Workload: small(), KVCacheDType: "fp8",
		Reference: events.BundleRef{SHA256: "ref1"}, BudgetFactor: 1.02}
	qp := qualityParams("")
	qp.Role, qp.Engine, qp.KVCacheDType = events.RoleCandidate, spec, "fp8"
	for _, bc := range []struct {
		name         string
		keep         bool
		qualityFirst bool
	}{{"separate", false, false}, {"quality_first", true, true}, {"efficiency_first", true, false}} {
		b.Run(bc.name, func(b *testing.B) {
			var held, unavoidable, starts, kept, startSum, verdicts float64
			for b.Loop() {
				verdicts++
				r, _, _ := runner(b)
				r.HealthTimeout = time.Duration(startup*3+60) * time.Second
				if bc.keep {
					r.Keep = job.NewKeeper(time.Minute)
				}
				// The pod's reference, measured by an earlier job: shown
				// in the starts, paid by none of this verdict's.
				cache := &memCache{m: map[string]job.Served{"tiny/ref1": {Start: &events.EngineStart{Run: "reference", Seconds: startup, OtherSeconds: startup}}}}
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(startup*20+600)*time.Second)
				var (
					eff job.Efficiency
					q   events.QualityJobResult
					err error
				)
				efficiency := func() error { eff, err = r.Efficiency(ctx, p, cand, cand, cache, nil); return err }
				quality := func() error { q, err = r.Quality(ctx, qp, cand, st, nil); return err }
				order := []func() error{efficiency, quality}
				switch {
				case bc.qualityFirst:
					order = []func() error{quality, efficiency}
				case bc.keep:
					// The runner service's hook: the quality job, queued
					// behind the efficiency job, answered on the candidate's
					// engine before the budget replays.
					var qerr error
					r.AfterCandidate = func(ctx context.Context) { q, qerr = r.Quality(ctx, qp, cand, st, nil) }
					order = []func() error{efficiency, func() error { return qerr }}
				}
				for _, run := range order {
					if err := run(); err != nil {
						cancel()
						r.Keep.Close()
						b.Fatal(err)
					}
				}
				cancel()
				r.Keep.Close()
				e, qq := eff.Phases(), q.Phases()
				n := float64(e.Starts + qq.Starts)
				held += e.Held + qq.Held
				starts += n
				kept += float64(e.Kept + qq.Kept)
				startSum += e.EngineStart + qq.EngineStart
				unavoidable += (e.EngineStart+qq.EngineStart)/n + e.Serving + qq.Serving
			}
			b.ReportMetric(startup, "startup-s")
			b.ReportMetric(starts/verdicts, "starts")
			b.ReportMetric(kept/verdicts, "kept")
			b.ReportMetric(startSum/starts, "start-s")
			b.ReportMetric(held/verdicts, "held-s")
			b.ReportMetric(unavoidable/verdicts, "unavoidable-s")
			b.ReportMetric(held/unavoidable, "ratio")
		})
	}
}
