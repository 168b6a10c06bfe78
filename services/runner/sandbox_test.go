package runner_test

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/adapters/sandbox/sandboxtest"
	"github.com/lowbarena/lowbarena/domain/grade"
	"github.com/lowbarena/lowbarena/domain/suite"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
)

// TestQualityJobWithoutSandbox: on a machine whose bubblewrap cannot
// create namespaces, a quality job whose suite has code items completes:
// the GPU runner grades the other items and writes the code answers to
// quality_answers ungraded (score 0, no quality_items row), counted in
// the result's Ungraded, for the quality stage to grade. Every answer is
// in quality_answers, and quality_items holds exactly the graded ones,
// scored as grade.For scores their stored answers.
func TestQualityJobWithoutSandbox(t *testing.T) {
	sandboxtest.FailingBwrap(t)

	b, _ := bustest.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st := chdbStore(t, ctx)
	cand := putCheckpoint(t, ctx, b, "U8", 1<<20)
	s := suite.Generate("t", "1", suite.SplitDev, suite.SeedDev, suite.Sizes{"math": 3, "code": 2})
	ref := putSuite(t, ctx, b, s)
	params, err := json.Marshal(events.QualityJobParams{Campaign: "tiny", Role: events.RoleCandidate, Suite: ref, SuiteKey: "t@1/dev",
		Engine: events.EngineSpec{MaxNumSeqs: 16}, Sampling: events.Sampling{Samples: 2, MaxTokens: 64, Concurrency: 2}})
	require.NoError(t, err)
	startRunner(t, ctx, b, st, "pod-s")

	req := events.RunnerJobRequestedData{JobID: "s1", Kind: events.JobQuality, SubmissionID: "sub-s1", Engine: command(""), Checkpoint: cand, Params: params}
	_, err = bus.Emit(ctx, b, events.Source("test"), events.Job.Requested, "s1", req, bus.WithID("job-s1"))
	require.NoError(t, err)

	e := bustest.Await(t, b, outcomes(events.JobQuality, "s1"), events.RunnerJobCompleted, events.RunnerJobFailed)
	require.Equal(t, string(events.RunnerJobCompleted), e.Type(), "%s", e.Data())
	d, err := events.Job.Completed.Decode(e)
	require.NoError(t, err)
	res, err := events.QualityJob.Result(d)
	require.NoError(t, err)
	require.Equal(t, 5, res.Items)
	require.Equal(t, 10, res.Generations, "every generation, graded or not")
	require.Equal(t, 4, res.Ungraded, "two code items, two samples each")

	items := map[string]suite.Item{}
	for _, its := range s.Items {
		for _, it := range its {
			items[it.ID] = it
		}
	}
	var answers []struct {
		ItemID string  `ch:"item_id"`
		Sample uint32  `ch:"sample"`
		Score  float64 `ch:"score"`
		Answer string  `ch:"answer"`
	}
	require.NoError(t, st.Select(ctx, &answers, "SELECT item_id, sample, score, answer FROM quality_answers FINAL WHERE submission_id = ? ORDER BY item_id, sample", "sub-s1"))
	require.Len(t, answers, res.Generations, "every answer kept, code ones included")
	var graded []struct {
		ItemID string  `ch:"item_id"`
		Sample uint32  `ch:"sample"`
		Score  float64 `ch:"score"`
	}
	require.NoError(t, st.Select(ctx, &graded, "SELECT item_id, sample, score FROM quality_items FINAL WHERE submission_id = ? ORDER BY item_id, sample", "sub-s1"))
	require.Len(t, graded, res.Generations-res.Ungraded, "quality_items holds the graded answers only")
	type key struct {
		item   string
		sample uint32
	}
	scores := map[key]float64{}
	for _, g := range graded {
		require.NotEqual(t, suite.GraderCode, items[g.ItemID].Grader, "no code item is graded on the GPU runner")
		scores[key{g.ItemID, g.Sample}] = g.Score
	}
	code := 0
	for _, a := range answers {
		it := items[a.ItemID]
		if it.Grader == suite.GraderCode {
			code++
			require.Zero(t, a.Score, "an ungraded code answer keeps score 0 until the quality stage grades it")
			require.NotEmpty(t, a.Answer, "the code answer's text is kept for the stage")
			continue
		}
		want, err := grade.Grade(ctx, it, a.Answer)
		require.NoError(t, err)
		require.Equal(t, want.Score, a.Score, "item %s", a.ItemID)
		require.Equal(t, want.Score, scores[key{a.ItemID, a.Sample}], "item %s", a.ItemID)
	}
	require.Equal(t, res.Ungraded, code)
}

// TestRunnerHasNoSandbox: the runner's binary does not link the code
// grader's sandbox (adapters/sandbox), so a GPU pod needs neither
// bubblewrap nor user namespaces; the quality stage grades code answers.
func TestRunnerHasNoSandbox(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "./cmd/runner").CombinedOutput()
	require.NoError(t, err, "%s", out)
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "github.com/lowbarena/lowbarena/services/runner/job", "the listing is the runner's")
	require.NotContains(t, deps, "github.com/lowbarena/lowbarena/adapters/sandbox")
}
