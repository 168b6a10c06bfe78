package job

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/formula"
	"github.com/lowbarena/lowbarena/domain/record"
)

// replayOf is a budget replay of a workload of 32 requests against an
// unconstrained rate.
func replayOf(rate, running float64, value *float64) record.Budget {
	v := record.Budget{BudgetGiB: 10, CapGiB: 14, Factor: 1.02, FullRunning: 32, Running: running, Value: value}
	v.Healthy = formula.Replay{Running: running, Full: 32, Rate: value}.Healthy(rate)
	return v
}

// A budget replay that held its requests and kept its rate runs once; one
// that did not hold them, or failed, runs once and fails; one that held
// them but lost rate is judged over interleaved pairs (the unconstrained
// engine again, then the replay again): kept when the pairs say its rate
// was the noise's, failed when every pair says the engine slows.
func TestReplayBudget(t *testing.T) {
	const rate = 100.0 // the candidate's unconstrained rate
	r := func(x float64) *float64 { return &x }
	boom := errors.New("the store does not answer")
	for _, tc := range []struct {
		name    string
		replays []record.Budget
		bases   []float64 // the unconstrained rates of the later pairs
		errs    []error   // the replays'
		baseErr error
		runs    int // replays
		healthy bool
		value   float64
		err     error
	}{
		{name: "held at its rate: once", replays: []record.Budget{replayOf(rate, 32, r(95))}, runs: 1, healthy: true, value: 95},
		{name: "not held: once, failed", replays: []record.Budget{replayOf(rate, 20, r(95))}, runs: 1, healthy: false, value: 95},
		{name: "the engine died under its budget: once, failed", replays: []record.Budget{replayOf(rate, 0, nil)}, runs: 1, healthy: false},
		{name: "held, slow once, then at the pairs' rates: healthy", replays: []record.Budget{replayOf(rate, 32, r(85)), replayOf(rate, 32, r(98)),
			replayOf(rate, 32, r(101)), replayOf(rate, 32, r(97)), replayOf(rate, 32, r(99))}, bases: []float64{100, 99, 102, 98}, runs: 5, healthy: true, value: 85},
		// The candidate's run came at a fast moment of the pod: every
		// later replay is below 90% of it (the rule of one ratio failed
		// this engine twice over), and each at the rate of the
		// unconstrained run beside it.
		{name: "a fast candidate run: the replays keep their pairs' rates, healthy", replays: []record.Budget{replayOf(rate, 32, r(85)),
			replayOf(rate, 32, r(87)), replayOf(rate, 32, r(88)), replayOf(rate, 32, r(86)), replayOf(rate, 32, r(89))}, bases: []float64{88, 86, 90, 87},
			runs: 5, healthy: true, value: 85},
		{name: "an engine 30% slower under its cap: failed", replays: []record.Budget{replayOf(rate, 32, r(70)), replayOf(rate, 32, r(72)),
			replayOf(rate, 32, r(69)), replayOf(rate, 32, r(71)), replayOf(rate, 32, r(70))}, bases: []float64{101, 99, 100, 100}, runs: 5, healthy: false, value: 70},
		{name: "an engine 30% slower under its cap, on a noisy pod: failed", replays: []record.Budget{replayOf(rate, 32, r(64)), replayOf(rate, 32, r(78)),
			replayOf(rate, 32, r(66)), replayOf(rate, 32, r(75)), replayOf(rate, 32, r(68))}, bases: []float64{108, 94, 103, 96}, runs: 5, healthy: false, value: 64},
		{name: "held, slow, then not held: failed, the first kept", replays: []record.Budget{replayOf(rate, 32, r(80)), replayOf(rate, 10, nil)},
			bases: []float64{100}, runs: 2, healthy: false, value: 80},
		{name: "an error that is not the engine's is the job's", replays: []record.Budget{{}}, errs: []error{boom}, runs: 1, err: boom},
		{name: "an error on a later replay is the job's", replays: []record.Budget{replayOf(rate, 32, r(70)), {}}, bases: []float64{100},
			errs: []error{nil, boom}, runs: 2, err: boom},
		{name: "an error of the unconstrained engine again is the job's", replays: []record.Budget{replayOf(rate, 32, r(70))}, bases: []float64{0},
			baseErr: boom, runs: 1, err: boom},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runs, agains := 0, 0
			v, err := replayBudget(func() (record.Budget, error) {
				i := runs
				runs++
				var err error
				if i < len(tc.errs) {
					err = tc.errs[i]
				}
				return tc.replays[i], err
			}, func() (float64, error) {
				i := agains
				agains++
				return tc.bases[i], tc.baseErr
			}, rate)
			require.Equal(t, tc.runs, runs)
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.healthy, v.Healthy)
			require.Equal(t, tc.runs, v.Attempts)
			require.Equal(t, max(tc.runs-1, 0), agains, "one unconstrained run before each later replay")
			if tc.value > 0 {
				require.NotNil(t, v.Value)
				require.InDelta(t, tc.value, *v.Value, 1e-9, "the first replay's rate")
			}
			if tc.runs < formula.KeepPairs {
				require.Zero(t, v.KeptRatio)
				require.Zero(t, v.KeptUpper)
				return
			}
			// The pairs: the first replay against the candidate's run,
			// each later one against the unconstrained run before it.
			ratios := []float64{*tc.replays[0].Value / rate}
			for i, b := range tc.bases {
				ratios = append(ratios, *tc.replays[i+1].Value/b)
			}
			ratio, upper, ok := formula.KeptBound(ratios)
			require.True(t, ok)
			require.InDelta(t, ratio, v.KeptRatio, 1e-4)
			require.InDelta(t, upper, v.KeptUpper, 1e-4)
			require.Equal(t, v.Healthy, v.KeptUpper >= formula.KeepRate, "the pairs' bound decides")
			t.Logf("kept %.4f, bound %.4f", v.KeptRatio, v.KeptUpper)
		})
	}
}

// TestReplayBudgetUnderNoise runs the rule on simulated pods: each run's
// rate is the engine's, times the pod's noise (log-normal, 5% and 9% a
// run: the example FP8 job's spread of the rates of one workload's runs
// on a 2-core machine with two and four threads spinning beside it).
// An honest engine (its rate the same under its cap) is failed far less
// often than by the ratio of two runs with one replay more (the rule
// before interleaving), and an engine 30% slower under its cap is
// failed all but always.
func TestReplayBudgetUnderNoise(t *testing.T) {
	const trials = 4000
	for _, sigma := range []float64{0.05, 0.09} {
		rng := rand.New(rand.NewPCG(1, uint64(sigma*1000)))
		run := func(rate float64) float64 { return rate * math.Exp(sigma*rng.NormFloat64()) }
		judge := func(slow float64) (failed, failedBefore int) {
			for range trials {
				rate := run(100) // the candidate's run
				replay := func() (record.Budget, error) {
					x := run(100 * slow)
					return replayOf(rate, 32, &x), nil
				}
				again := func() (float64, error) { return run(100), nil }
				v, err := replayBudget(replay, again, rate)
				require.NoError(t, err)
				if !v.Healthy {
					failed++
				}
				// Before: one replay, and a second against the same
				// candidate run when the first lost rate.
				if a, b := run(100*slow), run(100*slow); a < formula.KeepRate*rate && b < formula.KeepRate*rate {
					failedBefore++
				}
			}
			return failed, failedBefore
		}
		honest, honestBefore := judge(1)
		slow, slowBefore := judge(0.7)
		t.Logf("noise %.0f%% a run, %d jobs: honest failed %d (before %d); 30%% slower failed %d (before %d)",
			100*sigma, trials, honest, honestBefore, slow, slowBefore)
		require.Less(t, honest, max(honestBefore/5, 1)+1, "an honest engine under noise")
		require.LessOrEqual(t, honest, trials/200, "an honest engine under noise fails under 0.5% of jobs")
		require.GreaterOrEqual(t, slow, trials*9/10, "an engine 30% slower under its cap still fails")
	}
}
