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
	st := chdbStore(t, ctx)
	const sub = "sub-along"
	reqs, s := submissionJobs(t, ctx, b, sub)
	effID, qualID := reqs[0].JobID, reqs[1].JobID
	for _, req := range reqs {
		emit(t, ctx, b, req)
	}

	// One runner that keeps its engines, started once both are queued.
	began := time.Now()
	keepingRunner(t, ctx, b, st, "pod-k", 0)

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

// submissionJobs stores a submission's checkpoint, the campaign's
// reference and a suite, and returns the submission's efficiency job and
// quality job (its id the quality stage's, events.QualityJobID) on one
// engine spec, as the stages ask them, and the suite.
func submissionJobs(t *testing.T, ctx context.Context, b *bus.Bus, sub string) ([2]events.RunnerJobRequestedData, *suite.Suite) {
	t.Helper()
	cand := putCheckpoint(t, ctx, b, "U8", 1<<20)
	ref := putCheckpoint(t, ctx, b, "BF16", 4<<20)
	s := suite.Generate("t", "1", suite.SplitDev, suite.SeedDev, suite.Sizes{"math": 6, "commonsense": 4})
	suiteRef := putSuite(t, ctx, b, s)
	spec := events.EngineSpec{MaxNumSeqs: 256}
	ep, err := json.Marshal(events.EfficiencyJobParams{Campaign: "tiny", Engine: spec, Workload: small(), KVCacheDType: "fp8", Reference: ref, BudgetFactor: 1.02})
	require.NoError(t, err)
	qp, err := json.Marshal(events.QualityJobParams{Campaign: "tiny", Role: events.RoleCandidate, Suite: suiteRef, SuiteKey: s.Key(), Engine: spec,
		KVCacheDType: "fp8", Sampling: events.Sampling{Samples: 1, MaxTokens: 32, Concurrency: 4}})
	require.NoError(t, err)
	return [2]events.RunnerJobRequestedData{
		{JobID: "eff-" + sub, Kind: events.JobEfficiency, SubmissionID: sub, Engine: command(""), Checkpoint: cand, Params: ep},
		{JobID: events.QualityJobID(sub), Kind: events.JobQuality, SubmissionID: sub, Engine: command(""), Checkpoint: cand, Params: qp},
	}, s
}

// emit queues a job request as a stage does.
func emit(t *testing.T, ctx context.Context, b *bus.Bus, req events.RunnerJobRequestedData) {
	t.Helper()
	_, err := bus.Emit(ctx, b, events.Source("test"), events.Job.Requested, req.JobID, req, bus.WithID("job-"+req.JobID))
	require.NoError(t, err)
}

// keepingRunner starts a runner of pod that keeps its engines, named by
// its pod; qualityWait as Options.QualityWait.
func keepingRunner(t *testing.T, ctx context.Context, b *bus.Bus, st store.Store, pod string, qualityWait time.Duration) {
	t.Helper()
	svc, err := runner.New(ctx, b, slog.New(slog.NewTextHandler(io.Discard, nil)), runner.Options{Pod: pod, Runner: pod, WorkDir: t.TempDir(), AckWait: 3 * time.Second, Store: st,
		QualityWait: qualityWait,
		Job: job.Runner{SampleInterval: 20 * time.Millisecond, HealthTimeout: 20 * time.Second, IdleTimeout: 5 * time.Second, StopGrace: 2 * time.Second,
			Keep: job.NewKeeper(time.Minute)}})
	require.NoError(t, err)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- svc.Actors()[0].Run(rctx) }()
	t.Cleanup(func() { stop(); <-done })
}

// TestQualityJobPrefersThePodThatHoldsItsEngine: with two pods, one
// running a submission's efficiency job (its candidate's measured run not
// over yet), the other idle, the idle pod's runner holds the submission's
// quality job while the first says it will answer it, and the first
// answers it on the candidate's engine: no start of its own, completed by
// the first runner, and the holder acks it unrun.
func TestQualityJobPrefersThePodThatHoldsItsEngine(t *testing.T) {
	b, _ := bustest.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	st := chdbStore(t, ctx)
	reqs, _ := submissionJobs(t, ctx, b, "sub-pref")
	eff, qual := reqs[0], reqs[1]

	// Pod a takes the efficiency job; once its entry says it will answer
	// the quality job, the quality job is asked and pod b is idle.
	keepingRunner(t, ctx, b, st, "pod-a", 0)
	emit(t, ctx, b, eff)
	pods, err := b.JetStream().KeyValue(ctx, bus.BucketPods)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		e, err := pods.Get(ctx, runner.PodKey("pod-a", "pod-a"))
		if err != nil {
			return false
		}
		var entry events.PodEntry
		return json.Unmarshal(e.Value(), &entry) == nil && entry.Job != nil && entry.Job.JobID == eff.JobID && entry.Job.QualityAlongside
	}, time.Minute, 20*time.Millisecond, "pod a's entry says it answers the quality job")
	keepingRunner(t, ctx, b, st, "pod-b", 30*time.Second)
	emit(t, ctx, b, qual)

	qe := bustest.Await(t, b, outcomes(events.JobQuality, qual.JobID), events.RunnerJobCompleted, events.RunnerJobFailed)
	require.Equal(t, string(events.RunnerJobCompleted), qe.Type(), "%s", qe.Data())
	qd, err := events.Job.Completed.Decode(qe)
	require.NoError(t, err)
	require.Equal(t, "pod-a", qd.Runner, "answered on the pod that holds the candidate's engine")
	q, err := events.QualityJob.Result(qd)
	require.NoError(t, err)
	require.Equal(t, "candidate", q.Starts[0].KeptFrom)
	completed(t, b, eff.JobID)
}
