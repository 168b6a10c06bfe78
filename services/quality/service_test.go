package quality_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/campaign"
	"github.com/lowbarena/lowbarena/domain/examples"
	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/domain/suite"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/app"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
	"github.com/lowbarena/lowbarena/platform/stage/stagetest"
	"github.com/lowbarena/lowbarena/platform/store"
	_ "github.com/lowbarena/lowbarena/platform/store/chdb"
	"github.com/lowbarena/lowbarena/services/quality"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

type harness struct {
	dir    string // the campaigns folder
	b      *bus.Bus
	st     store.Store
	ctx    context.Context
	set    campaign.Set
	suite  *suite.Suite
	ranked *suite.Suite
}

// setup writes the example campaign with a tiny dev and ranked suite and
// opens a bus and a store; the stage is not running yet (see start).
func setup(t *testing.T) *harness { return setupSuite(t, tinySuite()) }

// setupSuite is setup with s as the dev suite.
func setupSuite(t *testing.T, s *suite.Suite) *harness {
	t.Helper()
	dir := t.TempDir()
	_, err := examples.Write(dir)
	require.NoError(t, err)
	require.NoError(t, suite.Write(filepath.Join(dir, examples.CampaignsDir, examples.TaskID, "suite-dev"), s))
	ranked := suite.Generate("tiny", "1", suite.SplitRanked, suite.SeedRanked, suite.Sizes{"math": 60, "commonsense": 60, "expert": 10})
	require.NoError(t, suite.Write(filepath.Join(dir, examples.CampaignsDir, examples.TaskID, "suite-ranked"), ranked))
	set, err := campaign.LoadDir(filepath.Join(dir, examples.CampaignsDir))
	require.NoError(t, err)
	b, _ := bustest.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	st, err := store.Open(ctx, "chdb://"+t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	return &harness{dir: filepath.Join(dir, examples.CampaignsDir), b: b, st: st, ctx: ctx, set: set, suite: s, ranked: ranked}
}

// start runs a new Service (nothing in memory) on the harness's bus and
// store; the returned stop ends it and waits until its consumers drained.
func (h *harness) start(t *testing.T) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(h.ctx)
	svc, err := quality.New(ctx, h.b, quiet(), quality.Options{Campaigns: h.set, Store: h.st})
	require.NoError(t, err)
	done := make(chan struct{})
	actors := svc.Actors()
	for _, a := range actors {
		go func() { _ = a.Run(ctx); done <- struct{}{} }()
	}
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		for range actors {
			<-done
		}
	}
	t.Cleanup(stop)
	return stop
}

// setupRunning is setup with the stage running.
func setupRunning(t *testing.T) *harness {
	h := setup(t)
	h.start(t)
	return h
}

func (h *harness) contract(t *testing.T, id string) { h.contractSplit(t, id, "") }

func (h *harness) contractSplit(t *testing.T, id, split string) {
	t.Helper()
	art := &events.BundleRef{Store: "jetstream", Bucket: bus.ObjectArtifacts, Object: "bundles/x.json", SHA256: strings.Repeat("ab", 32), Files: 1}
	cc := events.ContractCompletedData{SubmissionID: id, Contract: record.Contract{OK: true}, DetectedPrecision: "W8A8KV8",
		TaskID: examples.TaskID, Split: split, Artifact: art, KVCacheDType: "fp8"}
	_, err := bus.Emit(h.ctx, h.b, events.Source("contract"), events.Contract.Completed, id, cc, bus.WithID("cc-"+id))
	require.NoError(t, err)
}

// rows writes graded rows of st: score(item index, domain) for every
// item, one sample each.
func (h *harness) rows(t *testing.T, st *suite.Suite, submission, role string, score func(i int, d string) float64) int {
	t.Helper()
	var rows []store.QualityItem
	for _, r := range rowsOf(st, score) {
		rows = append(rows, store.QualityItem{Campaign: examples.TaskID, Suite: "tiny", SuiteVersion: st.Key(), SubmissionID: submission,
			Role: role, Domain: r.Domain, ItemID: r.ItemID, Score: r.Score, Formatted: r.Formatted, OutputTokens: r.OutputTokens})
	}
	require.NoError(t, store.Insert(h.ctx, h.st, rows))
	return len(rows)
}

// completed publishes a runner's completed quality job; campaign is what
// the runner puts in the result.
func (h *harness) completed(t *testing.T, job, submission, role, campaign string, st *suite.Suite, generations, empty int) {
	t.Helper()
	res, err := json.Marshal(events.QualityJobResult{Campaign: campaign, Role: role, SuiteKey: st.Key(), Items: generations, Generations: generations, Empty: empty, Simulated: true})
	require.NoError(t, err)
	d := events.RunnerJobCompletedData{JobID: job, Kind: events.JobQuality, SubmissionID: submission, Runner: "r", Result: res}
	_, err = bus.Emit(h.ctx, h.b, events.Source("runner"), events.Job.Completed, job, d, bus.WithID("done-"+job))
	require.NoError(t, err)
}

func (h *harness) failed(t *testing.T, job, submission, reason string) {
	t.Helper()
	fd := events.RunnerJobFailedData{JobID: job, Kind: events.JobQuality, SubmissionID: submission, Runner: "r", Pod: "pod-0",
		Reason: reason, Message: "engine died while serving", LogTail: "CUDA error"}
	_, err := bus.Emit(h.ctx, h.b, events.Source("runner"), events.Job.Failed, job, fd, bus.WithID("failed-"+job))
	require.NoError(t, err)
}

func jobs(t *testing.T, h *harness) uint64 {
	st, err := h.b.JetStream().Stream(h.ctx, events.StreamRunnerJobs)
	require.NoError(t, err)
	info, err := st.Info(h.ctx)
	require.NoError(t, err)
	return info.State.Msgs
}

// queued are the job requests on the work queue, in order.
func queued(t *testing.T, h *harness) []events.RunnerJobRequestedData {
	t.Helper()
	st, err := h.b.JetStream().Stream(h.ctx, events.StreamRunnerJobs)
	require.NoError(t, err)
	var out []events.RunnerJobRequestedData
	for seq := uint64(1); seq <= jobs(t, h); seq++ {
		m, err := st.GetMsg(h.ctx, seq)
		require.NoError(t, err)
		var req events.RunnerJobRequestedData
		require.NoError(t, json.Unmarshal(m.Data, &req))
		out = append(out, req)
	}
	return out
}

// referenceJob is the queued BF16 reference job of a suite.
func referenceJob(t *testing.T, h *harness, suiteKey string) string {
	t.Helper()
	for _, req := range queued(t, h) {
		var p events.QualityJobParams
		require.NoError(t, json.Unmarshal(req.Params, &p))
		if req.SubmissionID == "" && p.SuiteKey == suiteKey {
			require.Equal(t, events.RoleBF16, p.Role)
			return req.JobID
		}
	}
	require.FailNow(t, "no reference job", "suite %s", suiteKey)
	return ""
}

func outcome(t *testing.T, h *harness, id string) (events.QualityCompletedData, events.StageFailedData, bool) {
	t.Helper()
	e := bustest.Await(t, h.b, "arena.quality.*."+id, events.QualityCompleted, events.QualityFailed)
	if events.Type(e.Type()) == events.QualityFailed {
		f, err := events.Quality.Failed.Decode(e)
		require.NoError(t, err)
		return events.QualityCompletedData{}, f, false
	}
	q, err := events.Quality.Completed.Decode(e)
	require.NoError(t, err)
	return q, events.StageFailedData{}, true
}

// TestStageContract runs the stage kit's contract against the stage's own
// declaration.
func TestStageContract(t *testing.T) {
	h := setup(t)
	svc, err := quality.New(h.ctx, h.b, quiet(), quality.Options{Campaigns: h.set, Store: h.st})
	require.NoError(t, err)
	st := svc.Stage()
	require.Equal(t, quality.Name, st.Name())
	require.Equal(t, "quality", st.RequestsConfig().Name)
	require.Equal(t, "quality-results", st.ResultsConfig().Name)
	require.Equal(t, 120, st.ResultsConfig().MaxDeliver)
	require.Equal(t, events.JobOutcomeFilters(events.JobQuality), st.ResultsConfig().Subjects)
	in := *bustest.Sample(events.ContractCompleted).(*events.ContractCompletedData)
	out := *bustest.Sample(events.QualityCompleted).(*events.QualityCompletedData)
	stagetest.JobContract(t, st, in, out)
}

func TestQualityPairsCandidateWithReference(t *testing.T) {
	h := setupRunning(t)
	h.contract(t, "sub1")
	require.Eventually(t, func() bool { return jobs(t, h) == 2 }, 10*time.Second, 20*time.Millisecond, "a reference job and a candidate job")
	h.contract(t, "sub2")
	require.Eventually(t, func() bool { return jobs(t, h) == 3 }, 10*time.Second, 20*time.Millisecond, "the reference job is not asked twice")

	n := h.rows(t, h.suite, quality.ReferenceSubmission, events.RoleBF16, bf16Score)
	h.rows(t, h.suite, "sub1", events.RoleCandidate, lossScore)
	// The candidate finishes before its reference: the stage waits.
	h.completed(t, quality.JobID("sub1"), "sub1", events.RoleCandidate, examples.TaskID, h.suite, n, 0)
	time.Sleep(time.Second)
	require.Empty(t, bustest.Stored(t, h.b, "arena.quality.completed.sub1"))
	// The reference job is on the work queue beside the candidates'.
	h.completed(t, referenceJob(t, h, h.suite.Key()), "", events.RoleBF16, examples.TaskID, h.suite, n, 0)

	q, f, ok := outcome(t, h, "sub1")
	require.True(t, ok, "%+v", f)
	math := q.DevQuality.Domains["math"]
	require.InDelta(t, 0.75, math.BF16, 1e-12)
	require.InDelta(t, 0.65, math.Quantized, 1e-12)
	require.InDelta(t, 0.1, math.Drop, 1e-12)
	require.Equal(t, 60, math.Items)
	require.Equal(t, "valid", math.Status)
	cs := q.DevQuality.Domains["commonsense"]
	require.Equal(t, 0.0, cs.Drop)
	require.Equal(t, 1.0, cs.Recovery)
	require.NotNil(t, cs.FormatContract, "multiple choice keeps its format contract")
	require.Equal(t, "R5_diagnostic", q.DevQuality.Domains["expert"].Status)
	require.Equal(t, "math", q.DevQuality.WorstDomain)
	require.Equal(t, "fail", q.DevQuality.Tier)
	require.Equal(t, "quality tier fail below B", q.TierReason)
	require.Equal(t, 2, q.DevQuality.ValidDomains)
	require.InDelta(t, 0.05, q.MeanDrop, 1e-9)
	require.True(t, q.Simulated)
	require.Equal(t, events.DeriveID(quality.JobID("sub1"), string(events.QualityCompleted)),
		bustest.Stored(t, h.b, "arena.quality.completed.sub1")[0].ID())

	// sub2's job reports more generations than its rows: refused, never
	// called complete.
	h.rows(t, h.suite, "sub2", events.RoleCandidate, func(i int, d string) float64 { return 1 })
	h.completed(t, quality.JobID("sub2"), "sub2", events.RoleCandidate, examples.TaskID, h.suite, n+5, 0)
	_, f, ok = outcome(t, h, "sub2")
	require.False(t, ok)
	require.Equal(t, string(reason.QualityRowsIncomplete), f.Reason)

	// An engine that answered mostly nothing.
	h.contract(t, "sub3")
	h.completed(t, quality.JobID("sub3"), "sub3", events.RoleCandidate, examples.TaskID, h.suite, n, n-1)
	_, f, ok = outcome(t, h, "sub3")
	require.False(t, ok)
	require.Equal(t, string(reason.EngineEmptyAnswers), f.Reason)
}

// TestRunnerFailureFailsTheStage: a runner's failure of a candidate's job
// fails the stage with the runner's reason and message, whatever the
// reason: an engine's, or a job the runners gave up (job_abandoned, which
// has no log tail), so the submission's record says why.
func TestRunnerFailureFailsTheStage(t *testing.T) {
	h := setupRunning(t)
	for _, tc := range []struct {
		sub, reason, message, tail string
		detail                     string
	}{
		{"sub9", "engine_crashed", "engine died while serving", "CUDA error", `{"log_tail":"CUDA error","pod":"pod-0","runner":"r"}`},
		{"sub8", string(reason.JobAbandoned), "the runners gave the quality job up after 4 deliveries without an outcome", "", `{"log_tail":"","pod":"pod-0","runner":"r"}`},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			job := quality.JobID(tc.sub)
			fd := events.RunnerJobFailedData{JobID: job, Kind: events.JobQuality, SubmissionID: tc.sub, Runner: "r", Pod: "pod-0",
				Reason: tc.reason, Message: tc.message, LogTail: tc.tail}
			_, err := bus.Emit(h.ctx, h.b, events.Source("runner"), events.Job.Failed, job, fd, bus.WithID("failed-"+job))
			require.NoError(t, err)
			e := bustest.Await(t, h.b, "arena.quality.failed."+tc.sub, events.QualityFailed)
			f, err := events.Quality.Failed.Decode(e)
			require.NoError(t, err)
			require.Equal(t, events.DeriveID(job, string(events.QualityFailed)), e.ID())
			require.Equal(t, tc.reason, f.Reason)
			require.Equal(t, tc.message, f.Message)
			require.JSONEq(t, tc.detail, string(f.Detail), "the failure's detail: log tail, pod and runner")
		})
	}
}

// A ranked submission is evaluated on the held-out ranked suite, with its
// own BF16 reference; never on the dev items.
func TestRankedUsesTheRankedSuite(t *testing.T) {
	h := setupRunning(t)
	h.contractSplit(t, "r1", "ranked")
	require.Eventually(t, func() bool { return jobs(t, h) == 2 }, 10*time.Second, 20*time.Millisecond)
	for _, req := range queued(t, h) {
		var p events.QualityJobParams
		require.NoError(t, json.Unmarshal(req.Params, &p))
		require.Equal(t, "tiny@1/ranked", p.SuiteKey, req.JobID)
	}
}

// TestRestartBetweenRequestAndResult: the stage requests the jobs of a
// dev and a ranked submission and restarts (a new Service on the same
// NATS and store, nothing in memory) before any result. The dev
// reference's result is kept from what it carries and the candidate,
// whose suite the new process loads itself, completes; the ranked
// reference fails, which its job's entry (kept at request time) names, so
// its candidate is refused with quality_no_reference instead of retrying
// into the dead-letter stream.
func TestRestartBetweenRequestAndResult(t *testing.T) {
	h := setup(t)
	stop := h.start(t)
	h.contract(t, "sub1")
	h.contractSplit(t, "r1", "ranked")
	require.Eventually(t, func() bool { return jobs(t, h) == 4 }, 10*time.Second, 20*time.Millisecond, "two references, two candidates")
	devRef, rankedRef := referenceJob(t, h, h.suite.Key()), referenceJob(t, h, h.ranked.Key())
	stop()

	h.start(t)
	n := h.rows(t, h.suite, quality.ReferenceSubmission, events.RoleBF16, bf16Score)
	h.rows(t, h.suite, "sub1", events.RoleCandidate, lossScore)
	h.completed(t, devRef, "", events.RoleBF16, examples.TaskID, h.suite, n, 0)
	h.failed(t, rankedRef, "", "engine_oom")
	h.completed(t, quality.JobID("sub1"), "sub1", events.RoleCandidate, examples.TaskID, h.suite, n, 0)
	h.rows(t, h.ranked, "r1", events.RoleCandidate, lossScore)
	h.completed(t, quality.JobID("r1"), "r1", events.RoleCandidate, examples.TaskID, h.ranked, n, 0)

	q, f, ok := outcome(t, h, "sub1")
	require.True(t, ok, "%+v", f)
	require.InDelta(t, 0.1, q.DevQuality.Domains["math"].Drop, 1e-12)
	_, f, ok = outcome(t, h, "r1")
	require.False(t, ok)
	require.Equal(t, string(reason.QualityNoReference), f.Reason)
	require.Contains(t, f.Message, "engine_oom")
}

// TestReferenceWithoutWeights: a campaign whose BF16 reference folder
// holds no *.safetensors is refused with campaign_no_reference, and
// nothing is stored or queued.
func TestReferenceWithoutWeights(t *testing.T) {
	h := setup(t)
	ref := h.set[examples.TaskID].ReferenceDir()
	weights, err := filepath.Glob(filepath.Join(ref, "*.safetensors"))
	require.NoError(t, err)
	require.NotEmpty(t, weights)
	for _, w := range weights {
		require.NoError(t, os.Remove(w))
	}
	h.start(t)
	h.contract(t, "sub1")
	_, f, ok := outcome(t, h, "sub1")
	require.False(t, ok)
	require.Equal(t, string(reason.CampaignNoReference), f.Reason)
	require.Contains(t, f.Message, "no *.safetensors")
	arts, err := h.b.JetStream().ObjectStore(h.ctx, bus.ObjectArtifacts)
	require.NoError(t, err)
	_, err = arts.List(h.ctx)
	require.ErrorIs(t, err, jetstream.ErrNoObjectsFound, "nothing stored")
	require.Zero(t, jobs(t, h), "nothing queued")
}

// TestComponent: the component serves the quality stage, takes its
// campaigns from --campaigns, and refuses to start without a store.
func TestComponent(t *testing.T) {
	c := quality.Component()
	require.Equal(t, quality.Name, c.Name)
	require.Equal(t, []string{"quality"}, c.Stages)
	require.True(t, c.Store)
	cfg := app.DefaultConfig(c.Name)
	fs := c.FlagSet(&cfg)
	require.NoError(t, fs.Parse([]string{"--campaigns", t.TempDir() + "/none"}))
	h := setup(t)
	_, err := c.Build(h.ctx, &app.Runtime{Bus: h.b, Log: quiet()})
	require.ErrorIs(t, err, app.ErrConfig, "no store")
	actors, err := c.Build(h.ctx, &app.Runtime{Bus: h.b, Log: quiet(), Store: h.st})
	require.NoError(t, err)
	require.Len(t, actors, 1)
	require.Equal(t, quality.Name, actors[0].Name)
}
