package formula_test

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/formula"
	"github.com/lowbarena/lowbarena/domain/record"
)

// The two records of a real arena of this kind (../../schemas/testdata).
const (
	rec8b  = "submission_qwen3-8b_b0c4e95f426f48e2.json"   // 002: dev_score present, no anchor figures
	rec27b = "submission_qwen35-27b_4632bca02a3846d5.json" // 001: anchor and peak figures, budget failed
)

func load(t *testing.T, name string) record.Submission {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "schemas", "testdata", "lowbarena", name))
	require.NoError(t, err)
	var r record.Submission
	require.NoError(t, json.Unmarshal(data, &r))
	return r
}

// TestGolden8B recomputes 002's dev_score efficiency fields from its raw
// serve figures and its recorded per-workload ratios (002 records no anchor
// rates for interactive and long_context, so those speeds are taken as
// recorded and only their means are recomputed).
func TestGolden8B(t *testing.T) {
	r := load(t, rec8b)
	res, ds := r.Result, r.Result.DevScore
	w := res.Workload

	speedServe := formula.Round(w.Submission.Rate/w.BF16.Rate, 4)
	require.Equal(t, ds.Speeds["serve"], speedServe)
	require.Equal(t, res.Efficiency["serve"], w.Submission.Rate, "the workload block is the serve workload")
	memServe := formula.Round(w.BF16.PeakGiB/w.Submission.PeakGiB, 4)
	require.Equal(t, ds.Memories["serve"], memServe)

	speed := formula.Round(formula.GeoMean(ds.Speeds), 4)
	memory := formula.Round(formula.GeoMean(ds.Memories), 4)
	require.Equal(t, *ds.Speed, speed)
	require.Equal(t, *ds.Memory, memory)
	require.Equal(t, *ds.EfficiencyGain, formula.Round(formula.Gain(speed, memory), 4))
	require.Equal(t, *ds.MemorySaved, formula.Round(formula.MemorySaved(w.Submission.PeakGiB, w.BF16.PeakGiB), 4))
	require.Equal(t, *ds.PeakGiB, w.Submission.PeakGiB)
	require.Equal(t, *ds.BF16PeakGiB, w.BF16.PeakGiB)

	// Budget: serve's peak is the workload block's; every verdict follows
	// the rule from running, full_running and the rate kept.
	b := formula.BudgetFor(w.Submission.PeakGiB, formula.BudgetFactor)
	require.Equal(t, res.Engine.Budget["serve@1.02"].BudgetGiB, b.BudgetGiB)
	require.Equal(t, res.Engine.Budget["serve@1.02"].CapGiB, b.CapGiB)
	checkVerdicts(t, r)
	require.Equal(t, res.Engine.StoredGiB, formula.StoredGiB(res.Contract.SafetensorBytes))
	st := res.Engine.Startup
	require.Equal(t, st.KVBytesPerToken, formula.StartupKVBytesPerToken(st.KVCacheGiB, st.KVCacheTokens))
	require.Equal(t, st.MaxConcurrency.Sequences, formula.MaxSequences(st.KVCacheTokens, float64(st.MaxConcurrency.TokensPerRequest)))
}

// TestGolden27B recomputes 001's figures: peaks from their parts, kv usage,
// budgets from peaks, the verdicts, the disqualifying sentence, and the
// speeds and memories the record leaves null (seed formulas §3, last
// column).
func TestGolden27B(t *testing.T) {
	r := load(t, rec27b)
	res := r.Result
	st := res.Engine.Startup
	for _, w := range formula.Workloads {
		pm := res.PeakMemory[w.Name]
		p := formula.Peak{WeightsGiB: pm.WeightsGiB, KVGiB: pm.KVGiB, OtherGiB: pm.OtherGiB, PoolGiB: st.KVCacheGiB}
		require.InDelta(t, pm.PeakGiB, p.PeakGiB(), 0.0015, w.Name)
		require.Equal(t, pm.KVUsage, p.KVUsage(), w.Name)
		require.Equal(t, pm.WeightsGiB, st.WeightsGiB)
		ap := res.AnchorPeakMemory[w.Name]
		require.InDelta(t, ap.PeakGiB, formula.Peak{WeightsGiB: ap.WeightsGiB, KVGiB: ap.KVGiB, OtherGiB: ap.OtherGiB}.PeakGiB(), 0.0015, w.Name)

		b := formula.BudgetFor(pm.PeakGiB, formula.BudgetFactor)
		got := res.Engine.Budget[w.Name+"@1.02"]
		require.Equal(t, got.BudgetGiB, b.BudgetGiB, w.Name)
		require.Equal(t, got.CapGiB, b.CapGiB, w.Name)
		require.Equal(t, float64(w.Concurrency), got.FullRunning, w.Name)
	}
	checkVerdicts(t, r)

	ib := res.Engine.Budget["interactive@1.02"]
	reason := formula.Reason("interactive", formula.Budget{Factor: ib.Factor, BudgetGiB: ib.BudgetGiB, CapGiB: ib.CapGiB},
		formula.Replay{Running: ib.Running, Full: ib.FullRunning, Rate: ib.Value}, res.Efficiency["interactive"])
	require.Equal(t, *res.DevScore.Reason, reason)

	peaks, anchorPeaks := map[string]float64{}, map[string]float64{}
	for k, v := range res.PeakMemory {
		peaks[k] = v.PeakGiB
	}
	for k, v := range res.AnchorPeakMemory {
		anchorPeaks[k] = v.PeakGiB
	}
	s, err := formula.Summarize(res.Efficiency, res.AnchorEfficiency, peaks, anchorPeaks)
	require.NoError(t, err)
	require.Equal(t, map[string]float64{"interactive": 1.6993, "long_context": 2.1648, "serve": 2.0715}, s.Speeds)
	require.Equal(t, map[string]float64{"interactive": 3.0084, "long_context": 2.3046, "serve": 2.6715}, s.Memories)
	require.Equal(t, 1.9679, s.Speed)
	require.Equal(t, 2.6458, s.Memory)
	require.Equal(t, 2.2818, s.Gain)
	require.Equal(t, 0.6257, s.Saved)
	require.Equal(t, res.Workload.Submission.PeakGiB, s.PeakGiB)
	require.Equal(t, res.Workload.BF16.PeakGiB, s.BF16PeakGiB)
	require.Equal(t, res.Engine.StoredGiB, formula.StoredGiB(res.Contract.SafetensorBytes))
	require.Equal(t, st.KVBytesPerToken, formula.StartupKVBytesPerToken(st.KVCacheGiB, st.KVCacheTokens))
	require.Equal(t, st.MaxConcurrency.Sequences, formula.MaxSequences(st.KVCacheTokens, float64(st.MaxConcurrency.TokensPerRequest)))
}

// checkVerdicts recomputes every budget entry's healthy flag from its
// running, full_running and rate against the unconstrained rate.
func checkVerdicts(t *testing.T, r record.Submission) {
	t.Helper()
	for _, w := range formula.Workloads {
		b := r.Result.Engine.Budget[w.Name+"@1.02"]
		rp := formula.Replay{Running: b.Running, Full: b.FullRunning, Rate: b.Value}
		require.Equal(t, b.Healthy, rp.Healthy(r.Result.Efficiency[w.Name]), w.Name)
	}
}

func TestReasonForms(t *testing.T) {
	b := formula.BudgetFor(10, formula.BudgetFactor)
	rate := 100.0
	low, ok := 80.0, 95.0
	cases := []struct {
		r    formula.Replay
		want string
	}{
		{formula.Replay{Running: 1, Full: 1, Rate: &ok}, ""},
		{formula.Replay{Running: 0, Full: 1}, "neither held its requests at once nor kept 90% of its rate"},
		{formula.Replay{Running: 20, Full: 32, Rate: &ok}, "did not hold its requests at once"},
		{formula.Replay{Running: 32, Full: 32, Rate: &low}, "did not keep 90% of its rate"},
	}
	for _, tc := range cases {
		got := formula.Reason("serve", b, tc.r, rate)
		if tc.want == "" {
			require.Empty(t, got)
			continue
		}
		require.Contains(t, got, "contract: limited to a hard cap of its serve peak plus 2% (14.200 GiB with room for its CUDA context), ")
		require.Contains(t, got, tc.want)
	}
	_, err := formula.Speeds(map[string]float64{"serve": 1}, map[string]float64{"serve": 1})
	require.ErrorIs(t, err, formula.ErrMissing)
}

// TestReplayTerms: the budget in the engines' own terms. Qwen3-8B's
// shapes in BF16 (144 KiB of KV a token): a serve peak of 15.26 GiB of
// weights, 1.7 GiB of KV in use and 1.5 GiB other gets a pool of the
// budget less weights and other (≥ 1.02 × the KV in use), and SGLang's
// fraction of a 79.1 GiB free H100 that holds weights and that pool; an
// interactive peak whose pool would not hold one request of its context
// is raised to one.
func TestReplayTerms(t *testing.T) {
	const kvTok = 147456.0 // 36 layers × 8 heads × 128 × 2 (K, V) × 2 bytes
	for _, tc := range []struct {
		name    string
		in      formula.ReplayInput
		pool    float64 // GiB
		mfs     float64
		floored bool
	}{
		{"serve", formula.ReplayInput{BudgetGiB: formula.BudgetFor(15.26+1.7+1.5, 1.02).BudgetGiB, WeightsGiB: 15.26, OtherGiB: 1.5,
			KVBytesPerToken: kvTok, ContextTokens: 404, FreeGiB: 79.1}, 2.069, 0.2191, false},
		{"interactive", formula.ReplayInput{BudgetGiB: formula.BudgetFor(15.26+0.01+1.5, 1.02).BudgetGiB, WeightsGiB: 15.26, OtherGiB: 1.5,
			KVBytesPerToken: kvTok, ContextTokens: 8192, FreeGiB: 79.1}, 8192 * kvTok / formula.GiB, 0.2072, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := formula.SizeReplay(tc.in)
			require.Equal(t, tc.in.ContextTokens, got.MaxModelLen)
			require.InDelta(t, tc.pool, float64(got.KVCacheBytes)/formula.GiB, 1e-4)
			require.Equal(t, tc.floored, got.Floored)
			require.InDelta(t, tc.mfs, got.MemFractionStatic, 1e-9)
			if !tc.floored {
				kvPeak := (tc.in.BudgetGiB/1.02 - tc.in.WeightsGiB - tc.in.OtherGiB) * formula.GiB
				require.GreaterOrEqual(t, float64(got.KVCacheBytes), 1.02*kvPeak, "at least the KV in use plus 2%")
			}
			// SGLang's own arithmetic gives back the pool.
			sgPool := got.MemFractionStatic*tc.in.FreeGiB - tc.in.WeightsGiB
			require.GreaterOrEqual(t, sgPool*formula.GiB, float64(got.KVCacheBytes)-1)
		})
	}
	require.Zero(t, formula.SizeReplay(formula.ReplayInput{BudgetGiB: 10, WeightsGiB: 12}).KVCacheBytes, "no pool when nothing is left and no context to floor it")
}

// TestKeptBound: over interleaved pairs, an engine whose replays keep its
// rate beside each unconstrained run keeps it, however its first pair
// went; one 30% slower in every pair does not, noisy or not; a bound of
// pairs decides Kept over the totals, which still decide without one.
func TestKeptBound(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ratios []float64
		kept   bool
		ok     bool
	}{
		{"honest, a fast first pair", []float64{0.85, 1.01, 1.02, 0.96, 1.02}, true, true},
		{"honest, noisy pairs", []float64{0.83, 1.12, 0.91, 1.05, 0.94}, true, true},
		{"30% slower in every pair", []float64{0.70, 0.72, 0.69, 0.71, 0.70}, false, true},
		{"30% slower, noisy", []float64{0.61, 0.83, 0.64, 0.78, 0.71}, false, true},
		{"one pair decides nothing", []float64{0.7}, false, false},
		{"a rate that is not a number", []float64{0.9, math.NaN()}, false, false},
		{"a zero rate", []float64{0.9, 0}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ratio, upper, ok := formula.KeptBound(tc.ratios)
			require.Equal(t, tc.ok, ok)
			if !ok {
				return
			}
			require.LessOrEqual(t, ratio, upper)
			low := 80.0
			r := formula.Replay{Running: 32, Full: 32, Rate: &low, Upper: upper}
			require.Equal(t, tc.kept, r.Kept(100), "upper %.3f", upper)
			require.Equal(t, tc.kept, r.Healthy(100))
		})
	}
	// Without a bound the totals decide, as the records' verdicts do.
	low, ok := 80.0, 95.0
	require.False(t, formula.Replay{Running: 1, Full: 1, Rate: &low}.Kept(100))
	require.True(t, formula.Replay{Running: 1, Full: 1, Rate: &ok}.Kept(100))
	require.False(t, formula.Replay{Running: 1, Full: 1, Upper: 1.2}.Kept(100), "a replay that did not finish keeps nothing")
}
