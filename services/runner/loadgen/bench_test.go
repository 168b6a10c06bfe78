package loadgen_test

import (
	"context"
	"os"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lowbarena/lowbarena/domain/stats"
	"github.com/lowbarena/lowbarena/services/runner/loadgen"
	"github.com/lowbarena/lowbarena/services/runner/loadgen/loadgentest"
)

func TestMain(m *testing.M) {
	loadgentest.ServeIfAsked()
	os.Exit(m.Run())
}

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

// BenchmarkCeilingVsMinimal measures the load generator's ceiling against
// the floor's: an engine in another process streams as fast as it can
// (loadgentest.FastHandler, vLLM's chunks), and the load generator and
// loadgentest.Minimal take turns, 32 requests at once, 256 of 128 tokens
// each per run; each op is one run of each. It reports both rates in
// tokens/s, the load generator over the minimal client, its allocations
// per token, the process's CPU time per token during each client's runs
// (user and system, this process's alone: the engine is another; a
// figure a loaded machine changes far less than the rates), and requires
// both to count every token.
func BenchmarkCeilingVsMinimal(b *testing.B) {
	url := loadgentest.StartFastServer(b)
	const conc, requests, maxTokens = 32, 256, 128
	lg := &loadgen.Client{BaseURL: url, Model: "m"}
	w := loadgen.Workload{Name: "serve", Concurrency: conc, Requests: requests, PromptWords: 16, MaxTokens: maxTokens}
	mini := &loadgentest.Minimal{BaseURL: url, Model: "m"}
	prompt := strings.Repeat("word ", 16)
	ctx := context.Background()
	var lgCPU, minCPU time.Duration
	runLG := func() (float64, uint64) {
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		c0 := cpuTime(b)
		r, err := lg.Run(ctx, w)
		lgCPU += cpuTime(b) - c0
		runtime.ReadMemStats(&m1)
		if err != nil {
			b.Fatal(err)
		}
		if r.OutputTokens != requests*maxTokens {
			b.Fatalf("the load generator counted %d tokens of %d", r.OutputTokens, requests*maxTokens)
		}
		return r.Rate, m1.Mallocs - m0.Mallocs
	}
	runMin := func() float64 {
		c0 := cpuTime(b)
		r, err := mini.Run(ctx, conc, requests, prompt, maxTokens)
		minCPU += cpuTime(b) - c0
		if err != nil {
			b.Fatal(err)
		}
		if r.Tokens != requests*maxTokens {
			b.Fatalf("the minimal client counted %d tokens of %d", r.Tokens, requests*maxTokens)
		}
		return float64(r.Tokens) / r.Elapsed.Seconds()
	}
	runLG()
	runMin()
	lgCPU, minCPU = 0, 0
	var lgR, minR []float64
	var mallocs uint64
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 {
			minR = append(minR, runMin())
		}
		r, m := runLG()
		lgR, mallocs = append(lgR, r), mallocs+m
		if i%2 == 1 {
			minR = append(minR, runMin())
		}
	}
	if os.Getenv("LOADGEN_BENCH_VERBOSE") != "" {
		b.Logf("loadgen tokens/s by run %.0f\nminimal tokens/s by run %.0f", lgR, minR)
	}
	slices.Sort(lgR)
	slices.Sort(minR)
	l, m := lgR[len(lgR)/2], minR[len(minR)/2]
	b.ReportMetric(m, "minimal-tokens/s")
	b.ReportMetric(l, "loadgen-tokens/s")
	b.ReportMetric(l/m, "ratio")
	b.ReportMetric(float64(mallocs)/float64(len(lgR)*(requests+w.Warmup)*maxTokens), "loadgen-allocs/token")
	lgNs := float64(lgCPU) / float64(len(lgR)*requests*maxTokens)
	minNs := float64(minCPU) / float64(len(minR)*requests*maxTokens)
	b.ReportMetric(lgNs, "loadgen-cpu-ns/token")
	b.ReportMetric(minNs, "minimal-cpu-ns/token")
	b.ReportMetric(lgNs/minNs, "cpu-ratio")
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkMediansAtConcurrency64 measures how stable the load generator's
// medians are from run to run, beside the minimal client's: an engine in
// another process paces its streams (first token after 20 ms, one every
// 4 ms, 64 tokens), and each op is 12 runs of each client, alternating, at
// concurrency 64, 128 requests a run (two per slot, as a campaign's
// long_context workload with two requests per slot). It reports the
// spread of the TTFT and TPOT medians over the 12 runs, (max - min) /
// median, and how many runs' medians (TTFT and TPOT counted apart) are
// more than 20% off the median of the 12, for both.
func BenchmarkMediansAtConcurrency64(b *testing.B) {
	const ttft, itl = 20 * time.Millisecond, 4 * time.Millisecond
	url := loadgentest.StartPacedServer(b, ttft, itl)
	const conc, requests, maxTokens, runs = 64, 128, 64, 12
	lg := &loadgen.Client{BaseURL: url, Model: "m"}
	w := loadgen.Workload{Name: "long_context", Concurrency: conc, Requests: requests, Warmup: 4, PromptWords: 16, MaxTokens: maxTokens}
	mini := &loadgentest.Minimal{BaseURL: url, Model: "m"}
	prompt := strings.Repeat("word ", 16)
	ctx := context.Background()
	spread := func(v []float64) float64 {
		s := slices.Clone(v)
		slices.Sort(s)
		return (s[len(s)-1] - s[0]) / stats.Percentile(s, 50)
	}
	var lgTTFT, lgTPOT, minTTFT, minTPOT []float64
	for b.Loop() {
		lgTTFT, lgTPOT, minTTFT, minTPOT = lgTTFT[:0], lgTPOT[:0], minTTFT[:0], minTPOT[:0]
		for range runs {
			r, err := lg.Run(ctx, w)
			if err != nil {
				b.Fatal(err)
			}
			lgTTFT, lgTPOT = append(lgTTFT, r.TTFTP50), append(lgTPOT, r.TPOTP50)
			m, err := mini.Run(ctx, conc, requests, prompt, maxTokens)
			if err != nil {
				b.Fatal(err)
			}
			minTTFT, minTPOT = append(minTTFT, stats.Percentile(msOf(m.TTFT), 50)), append(minTPOT, stats.Percentile(msOf(m.TPOT), 50))
		}
	}
	// A run is off when its median is more than 20% from the median of
	// the 12: the two-mode flips the issue saw.
	off := func(v []float64) float64 {
		mid, n := stats.Percentile(v, 50), 0
		for _, x := range v {
			if x > 1.2*mid || x < 0.8*mid {
				n++
			}
		}
		return float64(n)
	}
	b.ReportMetric(off(lgTTFT)+off(lgTPOT), "loadgen-runs-off")
	b.ReportMetric(off(minTTFT)+off(minTPOT), "minimal-runs-off")
	b.ReportMetric(spread(lgTTFT), "loadgen-ttft-spread")
	b.ReportMetric(spread(minTTFT), "minimal-ttft-spread")
	b.ReportMetric(spread(lgTPOT), "loadgen-tpot-spread")
	b.ReportMetric(spread(minTPOT), "minimal-tpot-spread")
	b.ReportMetric(stats.Percentile(lgTTFT, 50), "loadgen-ttft-p50-ms")
	b.ReportMetric(stats.Percentile(minTTFT, 50), "minimal-ttft-p50-ms")
	b.ReportMetric(stats.Percentile(lgTPOT, 50), "loadgen-tpot-p50-ms")
	b.ReportMetric(stats.Percentile(minTPOT, 50), "minimal-tpot-p50-ms")
	if os.Getenv("LOADGEN_BENCH_VERBOSE") != "" {
		b.Logf("loadgen TTFT p50s %.1f\nminimal TTFT p50s %.1f\nloadgen TPOT p50s %.2f\nminimal TPOT p50s %.2f", lgTTFT, minTTFT, lgTPOT, minTPOT)
	}
}

func msOf(d []time.Duration) []float64 {
	out := make([]float64, len(d))
	for i, v := range d {
		out[i] = float64(v) / float64(time.Millisecond)
	}
	return out
}
