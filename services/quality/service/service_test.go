package service_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/bus"
	"github.com/lowbarena/lowbarena/events/bustest"
	"github.com/lowbarena/lowbarena/services/domain/record"
	"github.com/lowbarena/lowbarena/services/domain/campaign"
	"github.com/lowbarena/lowbarena/services/domain/examples"
	"github.com/lowbarena/lowbarena/services/quality/service"
	"github.com/lowbarena/lowbarena/services/domain/suite"
	"github.com/lowbarena/lowbarena/services/store"
	_ "github.com/lowbarena/lowbarena/services/store/chdb"
)

type harness struct {
	b     *bus.Bus
	st    store.Store
	ctx   context.Context
	suite *suite.Suite
}

func setup(t *testing.T) *harness {
	t.Helper()
	dir := t.TempDir()
	_, err := examples.Write(dir)
	require.NoError(t, err)
	s := suite.Generate("tiny", "1", suite.SplitDev, suite.SeedDev, suite.Sizes{"math": 60, "commonsense": 60, "expert": 10})
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
	svc, err := service.New(ctx, b, slog.New(slog.NewTextHandler(io.Discard, nil)), service.Options{Campaigns: set, Store: st})
	require.NoError(t, err)
	for _, a := range svc.Actors() {
		go func() { _ = a.Run(ctx) }()
	}
	return &harness{b: b, st: st, ctx: ctx, suite: s}
}

func (h *harness) contract(t *testing.T, id string) { h.contractSplit(t, id, "") }

func (h *harness) contractSplit(t *testing.T, id, split string) {
	t.Helper()
	art := &events.BundleRef{Store: "jetstream", Bucket: bus.ObjectArtifacts, Object: "bundles/x.json", SHA256: strings.Repeat("ab", 32), Files: 1}
	cc := events.ContractCompletedData{SubmissionID: id, Contract: record.Contract{OK: true}, DetectedPrecision: "W8A8KV8",
		TaskID: examples.TaskID, Split: split, Artifact: art, KVCacheDType: "fp8"}
	_, err := h.b.PublishNew(h.ctx, "cc-"+id, events.ContractCompleted, events.Source("contract"), id, cc)
	require.NoError(t, err)
}

// rows writes graded rows: score(item index, domain) for every item, one
// sample each.
func (h *harness) rows(t *testing.T, submission, role string, score func(i int, d string) float64) int {
	t.Helper()
	var rows []store.QualityItem
	for _, d := range h.suite.Domains {
		for i, it := range h.suite.Items[d] {
			rows = append(rows, store.QualityItem{Campaign: examples.TaskID, Suite: "tiny", SuiteVersion: h.suite.Key(), SubmissionID: submission,
				Role: role, Domain: d, ItemID: it.ID, Score: score(i, d), Formatted: 1, OutputTokens: uint32(10 + i%3)})
		}
	}
	require.NoError(t, store.Insert(h.ctx, h.st, rows))
	return len(rows)
}

func (h *harness) completed(t *testing.T, job, submission, role string, generations, empty int) {
	t.Helper()
	res, _ := json.Marshal(events.QualityJobResult{Role: role, SuiteKey: h.suite.Key(), Items: generations, Generations: generations, Empty: empty, Simulated: true})
	d := events.RunnerJobCompletedData{JobID: job, Kind: events.JobQuality, SubmissionID: submission, Runner: "r", Result: res}
	_, err := h.b.PublishNew(h.ctx, "done-"+job, events.RunnerJobCompleted, events.Source("runner"), job, d)
	require.NoError(t, err)
}

func jobs(t *testing.T, h *harness) uint64 {
	st, err := h.b.JetStream().Stream(h.ctx, events.StreamRunnerJobs)
	require.NoError(t, err)
	info, err := st.Info(h.ctx)
	require.NoError(t, err)
	return info.State.Msgs
}

func TestQualityPairsCandidateWithReference(t *testing.T) {
	h := setup(t)
	h.contract(t, "sub1")
	require.Eventually(t, func() bool { return jobs(t, h) == 2 }, 10*time.Second, 20*time.Millisecond, "a reference job and a candidate job")
	h.contract(t, "sub2")
	require.Eventually(t, func() bool { return jobs(t, h) == 3 }, 10*time.Second, 20*time.Millisecond, "the reference job is not asked twice")

	// BF16: right on the first 45 of 60 math items, 48 of 60 commonsense.
	n := h.rows(t, service.ReferenceSubmission, events.RoleBF16, func(i int, d string) float64 {
		if d == "math" && i < 45 || d == "commonsense" && i < 48 || d == "expert" && i < 5 {
			return 1
		}
		return 0
	})
	// The candidate loses 6 math items and nothing else.
	h.rows(t, "sub1", events.RoleCandidate, func(i int, d string) float64 {
		if d == "math" && i < 39 || d == "commonsense" && i < 48 || d == "expert" && i < 5 {
			return 1
		}
		return 0
	})
	// The candidate finishes before its reference: the stage waits.
	h.completed(t, service.JobID("sub1"), "sub1", events.RoleCandidate, n, 0)
	time.Sleep(time.Second)
	require.Empty(t, bustest.Stored(t, h.b, "arena.quality.completed.sub1"))
	// The reference job is on the work queue beside the candidates'.
	st, err := h.b.JetStream().Stream(h.ctx, events.StreamRunnerJobs)
	require.NoError(t, err)
	var refJob string
	for seq := uint64(1); seq <= 3; seq++ {
		m, err := st.GetMsg(h.ctx, seq)
		require.NoError(t, err)
		var req events.RunnerJobRequestedData
		require.NoError(t, json.Unmarshal(m.Data, &req))
		if req.SubmissionID == "" {
			refJob = req.JobID
			var p events.QualityJobParams
			require.NoError(t, json.Unmarshal(req.Params, &p))
			require.Equal(t, events.RoleBF16, p.Role)
			require.Equal(t, h.suite.Key(), p.SuiteKey)
		}
	}
	require.NotEmpty(t, refJob)
	h.completed(t, refJob, "", events.RoleBF16, n, 0)

	e := bustest.Await(t, h.b, "arena.quality.*.sub1", events.QualityCompleted, events.QualityFailed)
	require.Equal(t, string(events.QualityCompleted), e.Type(), "%s", e.Data())
	var q events.QualityCompletedData
	require.NoError(t, json.Unmarshal(e.Data(), &q))
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

	// sub2's job reports more generations than its rows: refused, never
	// called complete.
	h.rows(t, "sub2", events.RoleCandidate, func(i int, d string) float64 { return 1 })
	h.completed(t, service.JobID("sub2"), "sub2", events.RoleCandidate, n+5, 0)
	e = bustest.Await(t, h.b, "arena.quality.*.sub2", events.QualityCompleted, events.QualityFailed)
	var f events.StageFailedData
	require.NoError(t, json.Unmarshal(e.Data(), &f))
	require.Equal(t, service.ReasonIncomplete, f.Reason)

	// An engine that answered mostly nothing.
	h.contract(t, "sub3")
	h.completed(t, service.JobID("sub3"), "sub3", events.RoleCandidate, n, n-1)
	e = bustest.Await(t, h.b, "arena.quality.*.sub3", events.QualityCompleted, events.QualityFailed)
	require.NoError(t, json.Unmarshal(e.Data(), &f))
	require.Equal(t, service.ReasonEmptyAnswers, f.Reason)
}

func TestRunnerFailureFailsTheStage(t *testing.T) {
	h := setup(t)
	fd := events.RunnerJobFailedData{JobID: service.JobID("sub9"), Kind: events.JobQuality, SubmissionID: "sub9", Runner: "r",
		Reason: "engine_crashed", Message: "engine died while serving", LogTail: "CUDA error"}
	_, err := h.b.PublishNew(h.ctx, "rf", events.RunnerJobFailed, events.Source("runner"), fd.JobID, fd)
	require.NoError(t, err)
	e := bustest.Await(t, h.b, "arena.quality.failed.sub9", events.QualityFailed)
	var f events.StageFailedData
	require.NoError(t, json.Unmarshal(e.Data(), &f))
	require.Equal(t, "engine_crashed", f.Reason)
	require.Contains(t, string(f.Detail), "CUDA error")
}

// A ranked submission is evaluated on the held-out ranked suite, with its
// own BF16 reference; never on the dev items.
func TestRankedUsesTheRankedSuite(t *testing.T) {
	h := setup(t)
	h.contractSplit(t, "r1", "ranked")
	require.Eventually(t, func() bool { return jobs(t, h) == 2 }, 10*time.Second, 20*time.Millisecond)
	st, err := h.b.JetStream().Stream(h.ctx, events.StreamRunnerJobs)
	require.NoError(t, err)
	for seq := uint64(1); seq <= 2; seq++ {
		m, err := st.GetMsg(h.ctx, seq)
		require.NoError(t, err)
		var req events.RunnerJobRequestedData
		require.NoError(t, json.Unmarshal(m.Data, &req))
		var p events.QualityJobParams
		require.NoError(t, json.Unmarshal(req.Params, &p))
		require.Equal(t, "tiny@1/ranked", p.SuiteKey, req.JobID)
	}
}
