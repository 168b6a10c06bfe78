package policy_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/formula"
	"github.com/lowbarena/lowbarena/domain/policy"
	"github.com/lowbarena/lowbarena/domain/record"
)

func load(t *testing.T, name string) record.Submission {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "schemas", "testdata", "lowbarena", name))
	require.NoError(t, err)
	var r record.Submission
	require.NoError(t, json.Unmarshal(data, &r))
	return r
}

func v1(t *testing.T) policy.Policy {
	p, err := policy.Load(policy.Default)
	require.NoError(t, err)
	return p
}

// 002: from its recorded E and recorded drift D, v1 gives the recorded
// score; E itself comes back from the recorded speeds and memories.
func TestGolden002(t *testing.T) {
	r := load(t, "submission_qwen3-8b_b0c4e95f426f48e2.json")
	ds := r.Result.DevScore
	p := v1(t)
	require.Equal(t, 0.1661, p.Score(*ds.EfficiencyGain, *ds.Drift))
	speed, memory := formula.GeoMean(ds.Speeds), formula.GeoMean(ds.Memories)
	require.Equal(t, *ds.EfficiencyGain, formula.Round(formula.Gain(formula.Round(speed, 4), formula.Round(memory, 4)), 4))
	require.Equal(t, 0.1661, p.Score(formula.Gain(speed, memory), *ds.Drift))

	require.Equal(t, ds.Precision, policy.Precision(*r.Result.Contract, r.Solution.DetectedPrecision))

	// Its tier fails: the score is kept for display, not qualified, with
	// the record's reason.
	require.Equal(t, "fail", r.Result.DevQuality.Tier)
	in := policy.Inputs{Contract: *r.Result.Contract, Label: r.Solution.DetectedPrecision, Quality: *r.Result.DevQuality,
		MeanDrop: *ds.MeanDrop, Efficiency: efficiencyOf(r)}
	in.Contract.OK = true
	got, err := p.Compute(in)
	require.NoError(t, err)
	require.False(t, got.Qualified)
	require.Equal(t, *ds.Reason, *got.Reason)
	require.Equal(t, *ds.MeanDrop, *got.MeanDrop)
	require.Equal(t, "lowb-score/v1", got.Policy)
	// v1's own drift of 002's domains (100 x mean positive drop).
	require.Equal(t, 1.1403, *got.Drift)
}

// efficiencyOf rebuilds an efficiency payload from a record, with the
// anchor rates 002 does not record implied by its speeds.
func efficiencyOf(r record.Submission) policy.Efficiency {
	res := r.Result
	e := policy.Efficiency{Rate: res.Efficiency, BF16Rate: res.AnchorEfficiency,
		Peak: res.PeakMemory, BF16Peak: res.AnchorPeakMemory}
	if e.BF16Rate == nil && res.DevScore != nil {
		e.BF16Rate = map[string]float64{}
		e.Peak, e.BF16Peak = map[string]record.PeakMemory{}, map[string]record.PeakMemory{}
		for w, sp := range res.DevScore.Speeds {
			e.BF16Rate[w] = res.Efficiency[w] / sp
			e.Peak[w] = record.PeakMemory{PeakGiB: 10}
			e.BF16Peak[w] = record.PeakMemory{PeakGiB: 10 * res.DevScore.Memories[w]}
		}
	}
	return e
}

// 001: its interactive budget failed, so it is disqualified with the
// budget's sentence, score 0 and every efficiency field null.
func TestGolden001(t *testing.T) {
	r := load(t, "submission_qwen35-27b_4632bca02a3846d5.json")
	ds := r.Result.DevScore
	e := efficiencyOf(r)
	e.BudgetReason = *ds.Reason
	got, err := v1(t).Compute(policy.Inputs{Contract: *r.Result.Contract, Label: r.Solution.DetectedPrecision, Quality: *r.Result.DevQuality, Efficiency: e})
	require.NoError(t, err)
	require.False(t, got.Qualified)
	require.Equal(t, 0.0, got.Score)
	require.Equal(t, *ds.Reason, *got.Reason)
	require.Nil(t, got.Speed)
	require.Nil(t, got.EfficiencyGain)
	require.Nil(t, got.Speeds)
	require.Equal(t, ds.Precision, got.Precision)
}

func TestLoadRefuses(t *testing.T) {
	_, err := policy.Load("lowb-score/v0")
	require.ErrorIs(t, err, policy.ErrUnknown)
	require.ErrorContains(t, err, "lowb-score/v1")
}

func TestScoreShape(t *testing.T) {
	p := v1(t)
	require.Equal(t, 0.0, p.Score(1, 0), "baseline speed and no drift is 0")
	require.Equal(t, 0.0, p.Score(2, 3), "a drift of 3 points discounts everything")
	require.Equal(t, 0.301, p.Score(2, 0))
	require.Less(t, p.Score(2, 1), p.Score(2, 0))
}

// A failed engine audit disqualifies an entry that would qualify, with
// the audit's code and sentence, score 0 and every efficiency field
// null; the same entry without it qualifies (the control).
func TestFailedAuditDisqualifies(t *testing.T) {
	r := load(t, "submission_qwen3-8b_b0c4e95f426f48e2.json")
	q := *r.Result.DevQuality
	q.Tier = "A"
	in := policy.Inputs{Contract: *r.Result.Contract, Label: r.Solution.DetectedPrecision, Quality: q, Efficiency: efficiencyOf(r)}
	ok, err := v1(t).Compute(in)
	require.NoError(t, err)
	require.True(t, ok.Qualified)
	require.Positive(t, ok.Score)

	in.Efficiency.AuditReason = "audit answer_cache_suspected: repeated prompts were decoded in 0.01 ms a token"
	got, err := v1(t).Compute(in)
	require.NoError(t, err)
	require.False(t, got.Qualified)
	require.Equal(t, 0.0, got.Score)
	require.Equal(t, in.Efficiency.AuditReason, *got.Reason)
	require.Nil(t, got.EfficiencyGain)
	require.Nil(t, got.Speeds)
}

// Several failed verdicts: the reason names the integrity failure first
// (the contract, then the audit), and Also lists the others in order, the
// budget's and the tier's; one failure lists nothing else.
func TestIntegrityFailureFirst(t *testing.T) {
	r := load(t, "submission_qwen3-8b_b0c4e95f426f48e2.json")
	audit := "audit accuracy_differs_under_load: under load the engine answered 64 eval items with accuracy 0.500"
	budget := "contract: limited to a hard cap of its interactive peak plus 2% (22.653 GiB with room for its CUDA context), the engine did not keep 90% of its rate"
	in := policy.Inputs{Contract: *r.Result.Contract, Label: r.Solution.DetectedPrecision, Quality: *r.Result.DevQuality, Efficiency: efficiencyOf(r)}
	in.Contract.OK = true
	in.Quality.Tier = "A"
	in.Efficiency.AuditReason, in.Efficiency.BudgetReason = audit, budget
	got, err := v1(t).Compute(in)
	require.NoError(t, err)
	require.False(t, got.Qualified)
	require.Equal(t, audit, *got.Reason)
	require.Equal(t, []string{budget}, got.Also)
	require.Nil(t, got.EfficiencyGain)

	in.Quality.Tier = "fail"
	in.Contract.OK = false
	got, err = v1(t).Compute(in)
	require.NoError(t, err)
	require.Equal(t, "contract broken", *got.Reason)
	require.Equal(t, []string{audit, budget, "quality tier fail below B"}, got.Also)

	in.Contract.OK, in.Efficiency.AuditReason = true, ""
	in.Quality.Tier = "A"
	got, err = v1(t).Compute(in)
	require.NoError(t, err)
	require.Equal(t, budget, *got.Reason)
	require.Nil(t, got.Also)
}
