package runner_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/suite"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
	"github.com/lowbarena/lowbarena/platform/store"
	"github.com/lowbarena/lowbarena/services/runner"
	"github.com/lowbarena/lowbarena/services/runner/job"
)

// TestQualityJobAnsweredOnTheEfficiencyJobsEngine: a pod that takes a
// submission's efficiency job before its quality job (both queued, the
// efficiency job first) answers the quality job on the candidate's
// engine right after the candidate's measured run, before the budget
// replays restart it: the quality job pays no start (its engine_start is
// kept from the candidate's run), the efficiency job's held time leaves
// the quality job's out, the quality job runs once (one started event,
// one outcome) and its queued message is acked unrun when it is
// delivered, and both jobs' results are whole.
func TestQualityJobAnsweredOnTheEfficiencyJobsEngine(t *testing.T) {
	b, _ := bustest.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	st, err := store.Open(ctx, "chdb://"+t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	cand := putCheckpoint(t, ctx, b, "U8", 1<<20)
	ref := putCheckpoint(t, ctx, b, "BF16", 4<<20)
	s := suite.Generate("t", "1", suite.SplitDev, suite.SeedDev, suite.Sizes{"math": 6, "commonsense": 4})
	suiteRef := putSuite(t, ctx, b, s)

	const sub = "sub-along"
	effID, qualID := "eff-along", events.QualityJobID(sub)
	spec := events.EngineSpec{MaxNumSeqs: 256}
	ep, err := json.Marshal(events.EfficiencyJobParams{Campaign: "tiny", Engine: spec, Workload: small(), KVCacheDType: "fp8", Reference: ref, BudgetFactor: 1.02})
	require.NoError(t, err)
	qp, err := json.Marshal(events.QualityJobParams{Campaign: "tiny", Role: events.RoleCandidate, Suite: suiteRef, SuiteKey: s.Key(), Engine: spec,
		KVCacheDType: "fp8", Sampling: events.Sampling{Samples: 1, MaxTokens: 32, Concurrency: 4}})
	require.NoError(t, err)
	for _, req := range []events.RunnerJobRequestedData{
		{JobID: effID, Kind: events.JobEfficiency, SubmissionID: sub, Engine: command(""), Checkpoint: cand, Params: ep},
		{JobID: qualID, Kind: events.JobQuality, SubmissionID: sub, Engine: command(""), Checkpoint: cand, Params: qp},
	} {
		_, err = bus.Emit(ctx, b, events.Source("test"), events.Job.Requested, req.JobID, req, bus.WithID("job-"+req.JobID))
		require.NoError(t, err)
	}

	// One runner that keeps its engines, started once both are queued.
	began := time.Now()
	svc, err := runner.New(ctx, b, slog.New(slog.NewTextHandler(io.Discard, nil)), runner.Options{Pod: "pod-k", WorkDir: t.TempDir(), AckWait: 3 * time.Second, Store: st,
		Job: job.Runner{SampleInterval: 20 * time.Millisecond, HealthTimeout: 20 * time.Second, IdleTimeout: 5 * time.Second, StopGrace: 2 * time.Second,
			Keep: job.NewKeeper(time.Minute)}})
	require.NoError(t, err)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- svc.Actors()[0].Run(rctx) }()
	t.Cleanup(func() { stop(); <-done })

	_, eff := completed(t, b, effID)
	qe := bustest.Await(t, b, outcomes(events.JobQuality, qualID), events.RunnerJobCompleted, events.RunnerJobFailed)
	require.Equal(t, string(events.RunnerJobCompleted), qe.Type(), "%s", qe.Data())
	elapsed := time.Since(began).Seconds()
	qd, err := events.Job.Completed.Decode(qe)
	require.NoError(t, err)
	q, err := events.QualityJob.Result(qd)
	require.NoError(t, err)

	// The quality job on the candidate's engine.
	require.Len(t, q.Starts, 1)
	require.Equal(t, "candidate", q.Starts[0].KeptFrom, "answered on the efficiency job's candidate engine")
	require.Equal(t, 0, q.Phases().Starts)
	require.Equal(t, 1, q.Phases().Kept)
	require.Equal(t, s.Count(), q.Items)
	require.Equal(t, s.Count(), q.Generations)
	// The efficiency job paid the candidate's start, and its budget
	// replays ran after.
	require.Empty(t, eff.Candidate.Start.KeptFrom)
	require.Len(t, eff.Budget, 3)
	for k, bud := range eff.Budget {
		require.NotNil(t, bud.Value, k)
	}
	ph := eff.Phases()
	require.Equal(t, 2+len(eff.Budget)+extraPairs(eff), ph.Starts, "reference, candidate, a replay per workload")
	require.Less(t, ph.Held+q.HeldSeconds, elapsed+1, "the quality job's time is not the efficiency job's too")
	require.GreaterOrEqual(t, ph.Held, ph.EngineStart+ph.Serving-0.01)

	// Once: one started event for the quality job, and its queued request
	// acked unrun once delivered.
	arena, err := b.JetStream().Stream(ctx, events.StreamArena)
	require.NoError(t, err)
	startedSubject, err := events.Subject(events.RunnerJobStarted, qualID)
	require.NoError(t, err)
	info, err := arena.Info(ctx, jetstream.WithSubjectFilter(startedSubject))
	require.NoError(t, err)
	require.Equal(t, uint64(1), info.State.Subjects[startedSubject], "the quality job started once")
	jobs, err := b.JetStream().Stream(ctx, events.StreamRunnerJobs)
	require.NoError(t, err)
	queued, err := events.JobSubject(events.JobQuality, qualID)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := jobs.GetLastMsgForSubject(ctx, queued)
		return err != nil
	}, 30*time.Second, 100*time.Millisecond, "the quality job's request acked once delivered")
}

// extraPairs counts the interleaved pairs a judged replay ran beyond its
// first replay.
func extraPairs(out events.EfficiencyJobResult) int {
	n := 0
	for _, b := range out.Budget {
		n += 2 * max(b.Attempts-1, 0)
	}
	return n
}
