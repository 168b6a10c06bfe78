package quality_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/adapters/sandbox/sandboxtest"
	"github.com/lowbarena/lowbarena/domain/examples"
	"github.com/lowbarena/lowbarena/domain/grade"
	"github.com/lowbarena/lowbarena/domain/suite"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/app"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/store"
	"github.com/lowbarena/lowbarena/services/quality"
)

// codeSuite is tinySuite with a code domain of eight items.
func codeSuite() *suite.Suite {
	return suite.Generate("tiny", "1", suite.SplitDev, suite.SeedDev, suite.Sizes{"math": 60, "commonsense": 60, "expert": 10, "code": 8})
}

// answers writes one role's rows as a GPU runner does: the non-code
// items graded (quality_items, scored by score), the code items'
// answers only (quality_answers, score 0), right (suite.Solve's) where
// right(i) says so and wrong otherwise. It returns the generations and
// how many are ungraded.
func (h *harness) answers(t *testing.T, st *suite.Suite, submission, role string, score func(i int, d string) float64, right func(i int) bool) (int, int) {
	t.Helper()
	var (
		items   []store.QualityItem
		answers []store.QualityAnswer
	)
	ts := uint64(time.Now().UnixMilli())
	for _, d := range st.Domains {
		for i, it := range st.Items[d] {
			if it.Grader != suite.GraderCode {
				items = append(items, store.QualityItem{TsMs: ts, Campaign: examples.TaskID, Suite: "tiny", SuiteVersion: st.Key(), SubmissionID: submission,
					Role: role, Domain: d, ItemID: it.ID, Score: score(i, d), Formatted: 1, OutputTokens: uint32(10 + i%3)})
				continue
			}
			sol, ok := suite.Solve(it.Prompt)
			require.True(t, ok, "item %s", it.ID)
			text := sol.Wrong[0]
			if right(i) {
				text = sol.Right
			}
			answers = append(answers, store.QualityAnswer{TsMs: ts, Campaign: examples.TaskID, SuiteVersion: st.Key(), SubmissionID: submission,
				Role: role, ItemID: it.ID, OutputTokens: 20, Answer: text})
		}
	}
	require.NoError(t, store.Insert(h.ctx, h.st, answers))
	require.NoError(t, store.Insert(h.ctx, h.st, items))
	return len(items) + len(answers), len(answers)
}

// completedUngraded publishes a runner's completed quality job that left
// ungraded answers.
func (h *harness) completedUngraded(t *testing.T, job, submission, role string, st *suite.Suite, generations, ungraded int) {
	t.Helper()
	res, err := json.Marshal(events.QualityJobResult{Campaign: examples.TaskID, Role: role, SuiteKey: st.Key(), Items: generations,
		Generations: generations, Ungraded: ungraded, Simulated: true})
	require.NoError(t, err)
	d := events.RunnerJobCompletedData{JobID: job, Kind: events.JobQuality, SubmissionID: submission, Runner: "r", Result: res}
	_, err = bus.Emit(h.ctx, h.b, events.Source("runner"), events.Job.Completed, job, d, bus.WithID("done-"+job))
	require.NoError(t, err)
}

type codeRow struct {
	ItemID string  `ch:"item_id"`
	Domain string  `ch:"domain"`
	Score  float64 `ch:"score"`
}

// TestStageGradesCodeAnswers: the runners leave code answers ungraded;
// the stage grades both roles' in its own sandbox before it pairs them,
// each as grade.For grades it (a right program 1, a wrong one 0), writes
// their quality_items rows and the graded quality_answers, and the
// record has a code domain. The reference's are graded once, when its
// job completes: the candidate's pairing finds them graded and grades
// only its own.
func TestStageGradesCodeAnswers(t *testing.T) {
	h := setupSuite(t, codeSuite())
	h.start(t)
	h.contract(t, "sub1")
	require.Eventually(t, func() bool { return jobs(t, h) == 2 }, 10*time.Second, 20*time.Millisecond)

	// BF16 gets every code item right; the candidate the first half.
	n, un := h.answers(t, h.suite, quality.ReferenceSubmission, events.RoleBF16, bf16Score, func(int) bool { return true })
	nc, unc := h.answers(t, h.suite, "sub1", events.RoleCandidate, lossScore, func(i int) bool { return i < 4 })
	require.Equal(t, 8, un)
	require.Equal(t, un, unc)
	h.completedUngraded(t, referenceJob(t, h, h.suite.Key()), "", events.RoleBF16, h.suite, n, un)
	h.completedUngraded(t, quality.JobID("sub1"), "sub1", events.RoleCandidate, h.suite, nc, unc)

	q, f, ok := outcome(t, h, "sub1")
	require.True(t, ok, "%+v", f)
	code := q.DevQuality.Domains["code"]
	require.Equal(t, 8, code.Items)
	require.InDelta(t, 1.0, code.BF16, 1e-12)
	require.InDelta(t, 0.5, code.Quantized, 1e-12)

	items := map[string]suite.Item{}
	for _, it := range h.suite.Items["code"] {
		items[it.ID] = it
	}
	for _, role := range []struct{ sub, role string }{{quality.ReferenceSubmission, events.RoleBF16}, {"sub1", events.RoleCandidate}} {
		var graded []codeRow
		require.NoError(t, h.st.Select(h.ctx, &graded, "SELECT item_id, domain, score FROM quality_items FINAL "+
			"WHERE submission_id = ? AND role = ? AND domain = 'code' ORDER BY item_id", role.sub, role.role))
		require.Len(t, graded, 8, role.role)
		var answers []struct {
			ItemID string  `ch:"item_id"`
			Score  float64 `ch:"score"`
			Answer string  `ch:"answer"`
		}
		require.NoError(t, h.st.Select(h.ctx, &answers, "SELECT item_id, score, answer FROM quality_answers FINAL "+
			"WHERE submission_id = ? AND role = ? ORDER BY item_id", role.sub, role.role))
		require.Len(t, answers, 8, role.role)
		for i, a := range answers {
			it := items[a.ItemID]
			g, err := grade.For(it)
			require.NoError(t, err)
			want, err := g.Grade(h.ctx, it, a.Answer)
			require.NoError(t, err)
			require.Equal(t, want.Score, a.Score, "%s %s: the graded answer's score", role.role, a.ItemID)
			require.Equal(t, graded[i].ItemID, a.ItemID)
			require.Equal(t, want.Score, graded[i].Score, "%s %s: its quality_items row", role.role, a.ItemID)
		}
	}
	// Each code answer graded once: the reference's by its completion,
	// not again by the candidate's pairing (no duplicate rows before any
	// merge).
	var count []struct {
		N uint64 `ch:"n"`
	}
	require.NoError(t, h.st.Select(h.ctx, &count, "SELECT count() AS n FROM quality_items WHERE domain = 'code'"))
	require.Equal(t, uint64(16), count[0].N)
}

// TestStageWithoutSandbox: on a machine whose bubblewrap cannot create
// namespaces, a submission whose suite has code answers to grade fails
// with sandbox_unavailable and the sandbox's message for the operator
// (not a wait or an endless retry), and the stage's readiness says why.
func TestStageWithoutSandbox(t *testing.T) {
	sandboxtest.FailingBwrap(t)
	h := setupSuite(t, codeSuite())
	h.start(t)
	h.contract(t, "sub1")
	require.Eventually(t, func() bool { return jobs(t, h) == 2 }, 10*time.Second, 20*time.Millisecond)
	n, un := h.answers(t, h.suite, quality.ReferenceSubmission, events.RoleBF16, bf16Score, func(int) bool { return true })
	nc, unc := h.answers(t, h.suite, "sub1", events.RoleCandidate, lossScore, func(int) bool { return true })
	h.completedUngraded(t, referenceJob(t, h, h.suite.Key()), "", events.RoleBF16, h.suite, n, un)
	h.completedUngraded(t, quality.JobID("sub1"), "sub1", events.RoleCandidate, h.suite, nc, unc)

	_, f, ok := outcome(t, h, "sub1")
	require.False(t, ok)
	require.Equal(t, string(reason.SandboxUnavailable), f.Reason)
	require.Contains(t, f.Message, "cannot create the sandbox")
	require.Contains(t, f.Message, "enable unprivileged user namespaces")
	var graded []codeRow
	require.NoError(t, h.st.Select(h.ctx, &graded, "SELECT item_id, domain, score FROM quality_items FINAL WHERE domain = 'code'"))
	require.Empty(t, graded, "nothing graded without the sandbox")

	// Readiness: the campaign's suite has code items and the sandbox
	// does not work here.
	c := quality.Component()
	cfg := app.DefaultConfig(c.Name)
	require.NoError(t, c.FlagSet(&cfg).Parse([]string{"--campaigns", h.dir, "--grade-concurrency", "1"}))
	rt := &app.Runtime{Config: cfg, NC: h.b.Conn(), Bus: h.b, Log: quiet(), Store: h.st}
	_, err := c.Build(h.ctx, rt)
	require.NoError(t, err)
	err = rt.Ready(context.Background())
	require.ErrorIs(t, err, app.ErrNotReady)
	require.ErrorContains(t, err, "suite "+h.suite.Key()+" has code items")
	require.ErrorContains(t, err, "sandbox unavailable")
}

// TestReadyWithSandbox: with a working sandbox the stage is ready, and
// so it is without one when no campaign's suite has code items.
func TestReadyWithSandbox(t *testing.T) {
	for _, tc := range []struct {
		name    string
		suite   *suite.Suite
		sandbox bool
	}{{"code items, sandbox", codeSuite(), true}, {"no code items, no sandbox", tinySuite(), false}} {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.sandbox {
				sandboxtest.FailingBwrap(t)
			}
			h := setupSuite(t, tc.suite)
			c := quality.Component()
			cfg := app.DefaultConfig(c.Name)
			require.NoError(t, c.FlagSet(&cfg).Parse([]string{"--campaigns", h.dir}))
			rt := &app.Runtime{Config: cfg, NC: h.b.Conn(), Bus: h.b, Log: quiet(), Store: h.st}
			_, err := c.Build(h.ctx, rt)
			require.NoError(t, err)
			require.NoError(t, rt.Ready(context.Background()))
		})
	}
}
