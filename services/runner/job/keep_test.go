package job_test

import (
	"context"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/formula"
	"github.com/lowbarena/lowbarena/domain/suite"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/services/runner/job"
	"github.com/lowbarena/lowbarena/services/runner/loadgen"
)

// alive reports whether process pid exists.
func alive(pid int) bool { return pid > 0 && syscall.Kill(pid, 0) == nil }

// verdict is what a submission's quality and efficiency jobs decide, for
// comparing runs: each workload's budget verdict and figures the record
// judges, the KV dtype and per-token size the engine reported, and every
// graded answer's score.
type verdict struct {
	healthy               map[string]bool
	running, fullRunning  map[string]float64
	kvDType               string
	kvBytesPerToken       float64
	held                  map[string]int
	scores                map[string]float64
	items, generations, e int
}

// submissionJobs runs one submission's quality job, then its efficiency
// job (the pod's reference cached), as a runner takes them when the
// quality job came first, on the imitation of vLLM, with the campaign's
// one engine spec for both (as the stages send it).
func submissionJobs(ctx context.Context, t *testing.T, r *job.Runner, cand string) (verdict, events.QualityJobResult, job.Efficiency) {
	t.Helper()
	spec := job.EngineSpec{Command: imitation("vllm", vllmTemplate), MaxNumSeqs: 64, MaxModelLen: 4096}
	st := suite.Generate("t", "1", suite.SplitDev, suite.SeedDev, suite.Sizes{"math": 6, "commonsense": 6})
	qp := qualityParams("")
	qp.Role, qp.Engine, qp.KVCacheDType = events.RoleCandidate, spec, "fp8"
	v := verdict{healthy: map[string]bool{}, running: map[string]float64{}, fullRunning: map[string]float64{}, held: map[string]int{}, scores: map[string]float64{}}
	var mu sync.Mutex
	q, err := r.Quality(ctx, qp, cand, st, func(_ context.Context, b []job.Graded) error {
		mu.Lock()
		defer mu.Unlock()
		for _, g := range b {
			v.scores[g.Item.ID+"#"+string(rune('0'+g.Sample))] = g.Score
		}
		return nil
	})
	require.NoError(t, err)
	cache := &memCache{m: map[string]job.Served{"tiny/ref1": {Start: &events.EngineStart{Run: "reference", Seconds: 1, OtherSeconds: 1}}}}
	p := job.EfficiencyParams{Campaign: "tiny", Engine: spec, Workload: small(), KVCacheDType: "fp8",
		Reference: events.BundleRef{SHA256: "ref1"}, BudgetFactor: 1.02}
	e, err := r.Efficiency(ctx, p, cand, cand, cache, nil)
	require.NoError(t, err)
	for k, b := range e.Budget {
		v.healthy[k], v.running[k], v.fullRunning[k] = b.Healthy, b.Running, b.FullRunning
	}
	for name, w := range e.Candidate.Workloads {
		v.held[name] = w.Running
	}
	v.kvDType, v.kvBytesPerToken = e.Candidate.Startup.KVCacheDType, e.Candidate.Startup.KVBytesPerToken
	v.items, v.generations, v.e = q.Items, q.Generations, q.Empty
	return v, q, e
}

// TestKeptEngineServesTheNextJob: a runner that keeps its engines serves
// a submission's efficiency job on the engine its quality job started
// (the same checkpoint, engine and settings): the candidate's run pays
// no start, names the run whose start it used, and reports that start's
// figures; the verdicts (each workload's budget verdict, the requests it
// held, the KV the engine reported, every graded answer) are those of
// the same jobs with a start each. The budget replays, sized engines of
// their own, are not kept, and neither is the last one.
func TestKeptEngineServesTheNextJob(t *testing.T) {
	cand := writeCheckpoint(t, "U8", 1<<20)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	separate, _, _ := runner(t)
	sepStarts := startsCounted(separate)
	want, _, sepE := submissionJobs(ctx, t, separate, cand)

	kept, _, _ := runner(t)
	kept.Keep = job.NewKeeper(time.Minute)
	defer kept.Keep.Close()
	keptStarts := startsCounted(kept)
	got, q, e := submissionJobs(ctx, t, kept, cand)

	require.Equal(t, want, got, "the same verdicts as with a start each")
	require.Equal(t, len(sepStarts())-1, len(keptStarts()), "one start fewer: the candidate's run (%v against %v)", keptStarts(), sepStarts())
	require.NotContains(t, keptStarts()[1:], "candidate")

	require.Equal(t, "candidate", e.Candidate.Start.KeptFrom, "the efficiency job's candidate run was served by the quality job's engine")
	require.Zero(t, e.Candidate.Start.Seconds)
	require.Equal(t, q.Starts[0].KeptFrom, "", "the quality job paid its start")
	qp, ep := q.Phases(), e.Phases()
	require.Equal(t, 1, qp.Starts)
	require.Equal(t, 1, ep.Kept)
	require.Equal(t, sepE.Phases().Starts-1, ep.Starts)
	require.Positive(t, e.Candidate.StartupPeakGiB, "the start's figures, as the start measured them")
	require.Positive(t, e.Candidate.Startup.KVCacheGiB)
	require.Empty(t, kept.Keep.Kept(), "a budget replay's engine is not kept")
}

// TestKeeperStopsItsEngine: a kept engine is stopped when its time is up,
// before an engine of other settings starts, when it died it is not used
// (the run starts its own), and Close stops it; a run that does not ask
// for it (an SLA job's) neither uses nor leaves one.
func TestKeeperStopsItsEngine(t *testing.T) {
	ck := writeCheckpoint(t, "BF16", 1<<20)
	st := suite.Generate("t", "1", suite.SplitDev, suite.SeedDev, suite.Sizes{"math": 2})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	answer := func(r *job.Runner, seqs int) events.QualityJobResult {
		t.Helper()
		p := qualityParams("")
		p.Engine.MaxNumSeqs = seqs
		q, err := r.Quality(ctx, p, ck, st, nil)
		require.NoError(t, err)
		return q
	}

	r, _, _ := runner(t)
	r.Keep = job.NewKeeper(time.Minute)
	answer(r, 64)
	first := job.KeptPID(r.Keep)
	require.True(t, alive(first), "kept after its run")
	require.Equal(t, events.RoleBF16, r.Keep.Kept())

	// Other settings: the kept engine stops first, the run starts its own.
	q := answer(r, 32)
	require.Empty(t, q.Starts[0].KeptFrom)
	require.False(t, alive(first), "stopped before the other engine started")
	second := job.KeptPID(r.Keep)
	require.NotEqual(t, first, second)

	// The same settings again: served by the kept engine.
	q = answer(r, 32)
	require.Equal(t, events.RoleBF16, q.Starts[0].KeptFrom)
	require.Equal(t, second, job.KeptPID(r.Keep))

	// A run that does not ask (an SLA job's) is served by no kept engine,
	// whatever its settings, and its engine is not kept.
	sla, err := r.Serve(ctx, job.Launch{Run: "sla", Command: qualityParams("").Engine.Command, Checkpoint: ck, KVCacheDType: "auto", MaxNumSeqs: 32},
		job.Workloads(small())[:1])
	require.NoError(t, err)
	require.Empty(t, sla.Start.KeptFrom, "an SLA job starts its own engine")
	require.False(t, alive(second), "the kept engine stopped before it")
	require.Empty(t, r.Keep.Kept(), "and its engine is not kept")
	answer(r, 32)
	second = job.KeptPID(r.Keep)

	// A kept engine that died is not used.
	require.NoError(t, syscall.Kill(second, syscall.SIGKILL))
	q = answer(r, 32)
	require.Empty(t, q.Starts[0].KeptFrom, "a dead kept engine serves nothing")
	third := job.KeptPID(r.Keep)
	require.True(t, alive(third))

	// Close stops it.
	r.Keep.Close()
	require.False(t, alive(third))
	require.Empty(t, r.Keep.Kept())
	answer(r, 32)
	require.Zero(t, job.KeptPID(r.Keep), "a closed Keeper keeps nothing")

	// Its time up, the kept engine stops.
	r.Keep = job.NewKeeper(300 * time.Millisecond)
	answer(r, 32)
	pid := job.KeptPID(r.Keep)
	require.True(t, alive(pid))
	require.Eventually(t, func() bool { return !alive(pid) && r.Keep.Kept() == "" }, 20*time.Second, 50*time.Millisecond)
}

// TestReplaysOfOneSettingShareAStart: budget replays whose engines would
// start with the same settings are served by one start, each workload's
// run kept apart; a replay of settings of its own is left to run alone.
// Each shared replay holds its requests as the same replay on a start of
// its own does.
func TestReplaysOfOneSettingShareAStart(t *testing.T) {
	cand := writeCheckpoint(t, "U8", 1<<20)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, _, _ := runner(t)
	starts := startsCounted(r)
	wls := job.Workloads(small())
	require.GreaterOrEqual(t, len(wls), 3)
	launch := func(run string, gib float64) job.Launch {
		return job.Launch{Run: run, Command: command(""), Checkpoint: cand, KVCacheDType: "fp8", MaxNumSeqs: 256, GPUMemoryGiB: gib, CapGiB: gib + 4}
	}
	keys := []string{wls[0].Name + "@1.02", wls[1].Name + "@1.02", wls[2].Name + "@1.02"}
	ls := []job.Launch{launch(keys[0], 20), launch(keys[1], 20), launch(keys[2], 21)}
	got, out, err := job.ShareReplays(ctx, r, keys, ls, wls[:3])
	require.NoError(t, err)
	require.Equal(t, []string{keys[0] + "+" + keys[1]}, starts(), "one start for the two replays of one setting, none for the third")
	require.Len(t, out.Starts, 1)
	names := make([]string, 0, len(got))
	for k := range got {
		names = append(names, k)
	}
	sort.Strings(names)
	want := []string{keys[0], keys[1]}
	sort.Strings(want)
	require.Equal(t, want, names)
	for i, k := range keys[:2] {
		w := wls[i]
		require.Len(t, got[k].Workloads, 1, "each replay's own workload only")
		one := got[k].Workloads[w.Name]
		require.Equal(t, w.Concurrency, one.Running, "%s held its requests", k)
		// The same replay on a start of its own.
		alone, err := r.Serve(ctx, ls[i], []loadgen.Workload{w})
		require.NoError(t, err)
		require.Equal(t, alone.Workloads[w.Name].Running, one.Running)
		require.Equal(t, alone.Workloads[w.Name].Full, one.Full)
		rp := formula.Replay{Running: float64(one.Running), Full: float64(one.Full)}
		require.True(t, rp.Held())
	}
	require.True(t, strings.Contains(strings.Join(starts(), ","), keys[0]+"+"+keys[1]))
}
