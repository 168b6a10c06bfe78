package job

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/formula"
	"github.com/lowbarena/lowbarena/domain/record"
)

// A budget replay that held its requests but lost rate runs once more and
// the better is kept; one that did not hold them, or held them at its
// rate, runs once.
func TestReplayBudget(t *testing.T) {
	const rate = 100.0 // the candidate's unconstrained rate
	replayOf := func(running float64, value *float64) record.Budget {
		v := record.Budget{BudgetGiB: 10, CapGiB: 14, Factor: 1.02, FullRunning: 32, Running: running, Value: value}
		v.Healthy = formula.Replay{Running: running, Full: 32, Rate: value}.Healthy(rate)
		return v
	}
	r := func(x float64) *float64 { return &x }
	boom := errors.New("the store does not answer")
	for _, tc := range []struct {
		name     string
		replays  []record.Budget
		errs     []error
		runs     int
		healthy  bool
		value    float64
		attempts int
		err      error
	}{
		{name: "held at its rate: once", replays: []record.Budget{replayOf(32, r(95))}, runs: 1, healthy: true, value: 95, attempts: 1},
		{name: "not held: once, failed", replays: []record.Budget{replayOf(20, r(95))}, runs: 1, healthy: false, value: 95, attempts: 1},
		{name: "the engine died under its budget: once, failed", replays: []record.Budget{replayOf(0, nil)}, runs: 1, healthy: false, attempts: 1},
		{name: "held, slow, then at its rate: healthy", replays: []record.Budget{replayOf(32, r(70)), replayOf(32, r(93))}, runs: 2, healthy: true, value: 93, attempts: 2},
		{name: "held, slow twice: failed, the better rate kept", replays: []record.Budget{replayOf(32, r(70)), replayOf(32, r(80))}, runs: 2, healthy: false, value: 80, attempts: 2},
		{name: "held, slow, then slower: failed, the first kept", replays: []record.Budget{replayOf(32, r(80)), replayOf(32, r(60))}, runs: 2, healthy: false, value: 80, attempts: 2},
		{name: "held, slow, then not held: failed, the first kept", replays: []record.Budget{replayOf(32, r(80)), replayOf(10, nil)}, runs: 2, healthy: false, value: 80, attempts: 2},
		{name: "an error that is not the engine's is the job's", replays: []record.Budget{{}}, errs: []error{boom}, runs: 1, err: boom},
		{name: "an error on the second run is the job's", replays: []record.Budget{replayOf(32, r(70)), {}}, errs: []error{nil, boom}, runs: 2, err: boom},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runs := 0
			v, err := replayBudget(func() (record.Budget, error) {
				i := runs
				runs++
				var err error
				if i < len(tc.errs) {
					err = tc.errs[i]
				}
				return tc.replays[i], err
			}, rate)
			require.Equal(t, tc.runs, runs)
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.healthy, v.Healthy)
			require.Equal(t, tc.attempts, v.Attempts)
			if tc.value > 0 {
				require.NotNil(t, v.Value)
				require.InDelta(t, tc.value, *v.Value, 1e-9)
			}
		})
	}
}
