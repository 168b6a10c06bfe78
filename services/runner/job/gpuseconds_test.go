package job_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/suite"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/services/runner/job"
)

// startsCounted wires r's progress to count the engine runs it begins
// (its "starting_engine RUN" phases), in order.
func startsCounted(r *job.Runner) func() []string {
	var mu sync.Mutex
	var runs []string
	r.Progress = func(phase string, _, _ int) {
		if run, ok := strings.CutPrefix(phase, "starting_engine "); ok {
			mu.Lock()
			runs = append(runs, run)
			mu.Unlock()
		}
	}
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), runs...)
	}
}

// checkGPUTime holds a job's GPU time to its invariants: one start per
// engine run the job began (runs, in order), each at least the engine's
// simulated start-up long and split so that loading, graph capture and
// the rest sum to it, and a GPU held at least as long as the starts and
// the serving together.
func checkGPUTime(t *testing.T, g events.JobGPUTime, runs []string, startup float64) {
	t.Helper()
	var paid []events.EngineStart
	for _, s := range g.Starts {
		if !s.Cached {
			paid = append(paid, s)
		}
	}
	require.Len(t, paid, len(runs), "one start per engine run the job made")
	sum := 0.0
	for i, s := range paid {
		require.Equal(t, runs[i], s.Run)
		require.GreaterOrEqual(t, s.Seconds, startup, "%s: launch to health is at least the engine's start-up", s.Run)
		require.GreaterOrEqual(t, s.OtherSeconds, 0.0)
		require.InDelta(t, s.Seconds, s.LoadSeconds+s.GraphSeconds+s.OtherSeconds, 0.002, "%s: the phases sum to the start", s.Run)
		sum += s.Seconds
	}
	require.Positive(t, g.ServingSeconds)
	require.GreaterOrEqual(t, g.HeldSeconds, sum+g.ServingSeconds, "the GPU is held through every start and all the serving")
	p := g.Phases()
	require.Equal(t, len(runs), p.Starts)
	require.InDelta(t, sum, p.EngineStart, 0.01)
	require.InDelta(t, p.EngineStart, p.Loading+p.GraphCapture+p.OtherStart, 0.01)
}

// TestEfficiencyRecordsEngineStarts: an efficiency job on the imitations
// of vLLM and SGLang, each started with a 1 s start-up, records every
// engine start it made (the reference, the candidate, each budget
// replay), split by the weight loading and graph capture the imitation's
// log reports (0.4 and 0.25 of its start-up), and a reference reused
// from the cache as a start shown but not paid.
func TestEfficiencyRecordsEngineStarts(t *testing.T) {
	const startup = 1.0
	ref := writeCheckpoint(t, "BF16", 4<<20)
	cand := writeCheckpoint(t, "U8", 1<<20)
	for _, tc := range []struct {
		engine, template string
		cached           bool
	}{{"vllm", vllmTemplate, false}, {"sglang", sglangTemplate, true}} {
		t.Run(tc.engine, func(t *testing.T) {
			r, _, _ := runner(t)
			runs := startsCounted(r)
			cmd := strings.Replace(imitation(tc.engine, tc.template), "--startup-seconds 0.3", "--startup-seconds 1", 1)
			p := job.EfficiencyParams{Campaign: "tiny", Engine: job.EngineSpec{Command: cmd, MaxNumSeqs: 256, MaxModelLen: 4096},
				Workload: small(), KVCacheDType: "fp8", Reference: events.BundleRef{SHA256: "ref1"}, BudgetFactor: 1.02}
			cache := &memCache{}
			if tc.cached {
				// A reference an earlier job measured, its start with it.
				cache.m = map[string]job.Served{"tiny/ref1": {Start: &events.EngineStart{Run: "reference", Seconds: 93, OtherSeconds: 93}}}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			out, err := r.Efficiency(ctx, p, cand, ref, cache, nil)
			require.NoError(t, err)
			got := runs()
			require.Contains(t, got, "candidate")
			require.Len(t, got, len(out.Budget)+2-map[bool]int{true: 1}[tc.cached]+extraPairs(out), "reference (unless cached), candidate, one replay per workload (and pairs)")
			checkGPUTime(t, out.JobGPUTime, got, startup)
			if tc.cached {
				require.True(t, out.Starts[0].Cached, "the reused reference's start is shown first, cached")
				require.InDelta(t, 93.0, out.Starts[0].Seconds, 1e-9)
				require.Less(t, out.Phases().EngineStart, 93.0, "and not paid again")
			}
			for _, s := range out.Starts {
				if s.Cached {
					continue
				}
				require.True(t, s.LoadLogged && s.GraphLogged, "%s: the imitation logs its loading and its graph capture", s.Run)
				require.InDelta(t, 0.4*startup, s.LoadSeconds, 0.01, "%s: the weights' time from the log", s.Run)
			}
		})
	}
}

// extraPairs counts the interleaved pairs a judged replay ran beyond its
// first replay: each one more unconstrained run and one more replay.
func extraPairs(out job.Efficiency) int {
	n := 0
	for _, b := range out.Budget {
		n += 2 * max(b.Attempts-1, 0)
	}
	return n
}

// TestQualityRecordsItsEngineStart: a quality job records its one start
// (plain simengine logs half its start-up as the weights' loading and a
// graph capture of 0 s), the time it answered and the time it held the
// GPU.
func TestQualityRecordsItsEngineStart(t *testing.T) {
	const startup = 1.0
	s := suite.Generate("t", "1", suite.SplitDev, suite.SeedDev, suite.Sizes{"math": 4, "commonsense": 4})
	ck := writeCheckpoint(t, "BF16", 1<<20)
	r, _, _ := runner(t)
	runs := startsCounted(r)
	p := qualityParams("")
	p.Engine.Command = strings.Replace(p.Engine.Command, "--startup-seconds 0.2", "--startup-seconds 1", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := r.Quality(ctx, p, ck, s, nil)
	require.NoError(t, err)
	require.Equal(t, []string{events.RoleBF16}, runs())
	checkGPUTime(t, res.JobGPUTime, runs(), startup)
	st := res.Starts[0]
	require.True(t, st.LoadLogged && st.GraphLogged)
	require.InDelta(t, startup/2, st.LoadSeconds, 0.01)
	require.Zero(t, st.GraphSeconds)
}

// TestStartTimes reads the loading and graph-capture times of the
// engines' own start-up lines, each form the runner meets.
func TestStartTimes(t *testing.T) {
	tests := []struct {
		name            string
		log             string
		load, graph     float64
		loadOK, graphOK bool
	}{
		{"vllm current", "(EngineCore_DP0 pid=1) INFO [default_loader.py:308] Loading weights took 11.52 seconds\n" +
			"(EngineCore_DP0 pid=1) INFO [gpu_model_runner.py:3435] Model loading took 15.2683 GiB memory and 12.800000 seconds\n" +
			"(EngineCore_DP0 pid=1) INFO [gpu_model_runner.py:4316] Graph capturing finished in 8 secs, took 0.53 GiB", 12.8, 8, true, true},
		{"vllm 0.8", "INFO Model loading took 0.2389 GB and 0.977005 seconds\nINFO Graph capturing finished in 1 secs, took -0.74 GiB", 0.977005, 1, true, true},
		{"vllm loader only, eager", "INFO Loading weights took 3.10 seconds", 3.1, 0, true, false},
		{"sglang one graph line", "[2026-01-01 10:00:00] Load weight end. elapsed=24.00 s, type=Qwen3ForCausalLM, avail mem=21.73 GB, mem usage=166.59 GB.\n" +
			"[2026-01-01 10:00:30] Capture cuda graph end. Time elapsed: 5.37 s. mem usage=1.44 GB. avail mem=38.05 GB.", 24, 5.37, true, true},
		{"sglang phases, two ranks", "[2026-07-21 13:35:33 TP0] Capture target decode CUDA graph end. elapsed=4.81 s, mem usage=0.27 GB, avail mem=5.34 GB.\n" +
			"[2026-07-21 13:35:33 TP1] Capture target decode CUDA graph end. elapsed=4.90 s, mem usage=0.27 GB, avail mem=5.34 GB.\n" +
			"[2026-07-21 13:35:40 TP0] Capture draft decode CUDA graph end. elapsed=1.19 s, mem usage=0.10 GB, avail mem=5.20 GB.", 0, 6.0, false, true},
		{"sglang without elapsed", "Load weight end. type=Qwen3ForCausalLM, dtype=torch.bfloat16, avail mem=21.73 GB, mem usage=166.59 GB.", 0, 0, false, false},
		{"no log", "", 0, 0, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			load, graph, loadOK, graphOK := job.StartTimes(tt.log)
			require.InDelta(t, tt.load, load, 1e-9)
			require.InDelta(t, tt.graph, graph, 1e-9)
			require.Equal(t, tt.loadOK, loadOK)
			require.Equal(t, tt.graphOK, graphOK)
		})
	}
}

// TestStartOfSplitsTheStart: the rest of a start is what its log does
// not account for, never negative.
func TestStartOfSplitsTheStart(t *testing.T) {
	log := "Model loading took 15.2 GiB memory and 40.000000 seconds\nGraph capturing finished in 15 secs, took 0.53 GiB"
	s := job.StartOf("candidate", 60, log)
	require.Equal(t, events.EngineStart{Run: "candidate", Seconds: 60, LoadSeconds: 40, GraphSeconds: 15, OtherSeconds: 5, LoadLogged: true, GraphLogged: true}, s)
	short := job.StartOf("candidate", 50, log)
	require.Zero(t, short.OtherSeconds, "a log that accounts for more than the start leaves no rest")
	none := job.StartOf("quality", 7.5, "")
	require.InDelta(t, 7.5, none.OtherSeconds, 1e-9)
	require.False(t, none.LoadLogged || none.GraphLogged)
}
