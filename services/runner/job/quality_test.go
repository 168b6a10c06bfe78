package job_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/suite"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/services/runner/engine"
	"github.com/lowbarena/lowbarena/services/runner/job"
)

func qualityParams(extra string) events.QualityJobParams {
	return events.QualityJobParams{Campaign: "tiny", Role: events.RoleBF16, Engine: events.EngineSpec{Command: command(extra), MaxNumSeqs: 64},
		SuiteKey: "t@1/dev", Sampling: events.Sampling{Samples: 2, MaxTokens: 64, TopLogprobs: 5, KLSequences: 4, Concurrency: 8}}
}

func TestQualityAnswersAndGradesTheSuite(t *testing.T) {
	s := suite.Generate("t", "1", suite.SplitDev, suite.SeedDev, suite.Sizes{"math": 20, "commonsense": 20, "code": 3})
	ck := writeCheckpoint(t, "BF16", 1<<20)
	r, _, _ := runner(t)
	var mu sync.Mutex
	var rows []job.Graded
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := r.Quality(ctx, qualityParams(""), ck, s, func(_ context.Context, b []job.Graded) error {
		mu.Lock()
		rows = append(rows, b...)
		mu.Unlock()
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, 43, res.Items)
	require.Equal(t, 86, res.Generations)
	require.Len(t, rows, 86, "every generation handed over, graded or not")
	require.Equal(t, 6, res.Ungraded, "the code items' generations are left to the quality stage")
	require.Zero(t, res.Empty)
	require.True(t, res.Simulated)
	require.Len(t, res.Logprobs, 4)
	require.Len(t, res.KLItems, 4)
	for _, seq := range res.Logprobs {
		require.NotEmpty(t, seq)
		require.Len(t, seq[0], 5, "top-5 logprobs per token")
	}
	byDomain := map[string][]float64{}
	for _, g := range rows {
		byDomain[g.Item.Domain] = append(byDomain[g.Item.Domain], g.Score)
		require.Greater(t, g.OutputTokens, 0)
		// The runner never runs a model's program: a code answer is
		// handed over ungraded, with its text; every other one graded.
		require.Equal(t, g.Item.Grader == suite.GraderCode, g.Ungraded, "item %s", g.Item.ID)
		if g.Ungraded {
			require.Zero(t, g.Score)
			require.NotEmpty(t, g.Answer)
		}
	}
	mean := func(xs []float64) float64 {
		s := 0.0
		for _, x := range xs {
			s += x
		}
		return s / float64(len(xs))
	}
	// The simulated BF16 is right about as often as its reference
	// accuracy (0.78 math, 0.82 commonsense).
	require.InDelta(t, 0.78, mean(byDomain["math"]), 0.2)
	require.InDelta(t, 0.82, mean(byDomain["commonsense"]), 0.2)
	require.Len(t, byDomain["code"], 6)
}

func TestQualityFailures(t *testing.T) {
	s := suite.Generate("t", "1", suite.SplitDev, suite.SeedDev, suite.Sizes{"math": 30})
	ck := writeCheckpoint(t, "BF16", 1<<20)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// An engine that answers nothing: every generation is empty, none is
	// an error; the quality stage refuses the result.
	r, _, _ := runner(t)
	res, err := r.Quality(ctx, qualityParams("--fault zero-tokens"), ck, s, nil)
	require.NoError(t, err)
	require.Equal(t, res.Generations, res.Empty)

	// An engine that dies mid-suite fails the job with its reason.
	_, err = r.Quality(ctx, qualityParams("--fault die-after-tokens=30"), ck, s, nil)
	require.NotNil(t, engine.AsFailure(err), "%v", err)
	require.Equal(t, reason.EngineCrashed, engine.AsFailure(err).Reason)
}
