package job_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/examples"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/services/runner/job"
	"github.com/lowbarena/lowbarena/services/runner/loadgen"
)

// TestBudgetNoise measures how often the budget rule fails an honest
// engine: the example FP8 checkpoint's efficiency job, as the example
// campaign runs it (its engine command, its workloads), run
// LOWBARENA_BUDGET_NOISE times on simengine, with
// LOWBARENA_BUDGET_BUSY goroutines spinning beside it (CPU load on the
// machine, each locked to a thread of its own). It logs each job's
// budget verdicts and the count of failed ones; with
// LOWBARENA_BUDGET_NOISE_OUT it writes every run's requests there (JSON)
// to weigh a rule on. It is a measurement, not a check: it fails only
// on a job that fails.
//
//	LOWBARENA_BUDGET_NOISE=20 LOWBARENA_BUDGET_BUSY=2 go test ./services/runner/job -run TestBudgetNoise -v -timeout 30m
func TestBudgetNoise(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("LOWBARENA_BUDGET_NOISE"))
	if n <= 0 {
		t.Skip("a measurement: set LOWBARENA_BUDGET_NOISE to the number of jobs")
	}
	busy, _ := strconv.Atoi(os.Getenv("LOWBARENA_BUDGET_BUSY"))
	dir := t.TempDir()
	exs, err := examples.Write(dir)
	require.NoError(t, err)
	var ckpt string
	for _, ex := range exs {
		if ex.Name == "fp8-w8a8" {
			ckpt = ex.Dir
		}
	}
	require.NotEmpty(t, ckpt)
	reference := dir + "/" + examples.CampaignsDir + "/" + examples.TaskID + "/reference"
	// The example campaign's engine and workloads (examples.Write's
	// campaign.json).
	cmd := strings.Replace(examples.EngineCommand, "simengine", simengine, 1)
	p := job.EfficiencyParams{Campaign: examples.TaskID, Engine: job.EngineSpec{Command: cmd, MaxNumSeqs: 256},
		Workload: job.WorkloadSpec{RequestsPerSlot: 1, MaxTokens: 64, PromptWords: 128, LongPromptWords: 1024}, KVCacheDType: "fp8",
		Reference: events.BundleRef{SHA256: "example-reference"}, BudgetFactor: 1.02}

	var stop atomic.Bool
	var spin sync.WaitGroup
	for range busy {
		spin.Go(func() {
			runtime.LockOSThread()
			x := 0
			for !stop.Load() {
				x++
			}
			_ = x
		})
	}
	defer func() {
		stop.Store(true)
		spin.Wait()
	}()

	type run struct {
		Job    int            `json:"job"`
		Run    string         `json:"run"`
		Result loadgen.Result `json:"result"`
	}
	var (
		mu   sync.Mutex
		runs []run
		cur  int
	)
	r, _, _ := runner(t)
	r.Requests = func(_ context.Context, name string, res loadgen.Result) error {
		mu.Lock()
		defer mu.Unlock()
		runs = append(runs, run{Job: cur, Run: name, Result: res})
		return nil
	}
	cache := &memCache{}
	failed, firstFailed, budgets := 0, 0, 0
	perWorkload := map[string]int{}
	t0 := time.Now()
	for i := range n {
		mu.Lock()
		cur = i
		mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		out, err := r.Efficiency(ctx, p, ckpt, reference, cache, nil)
		cancel()
		require.NoError(t, err)
		var line []string
		for _, key := range slices.Sorted(maps.Keys(out.Budget)) {
			b := out.Budget[key]
			budgets++
			w, _, _ := strings.Cut(key, "@")
			ratio := 0.0
			if b.Value != nil {
				ratio = *b.Value / out.Candidate.Workloads[w].Rate
			}
			if !b.Healthy {
				failed++
				perWorkload[w]++
			}
			if b.Attempts > 1 {
				firstFailed++
			}
			line = append(line, fmt.Sprintf("%s healthy=%t attempts=%d ratio=%.3f held=%.0f kept=%.3f upper=%.3f",
				key, b.Healthy, b.Attempts, ratio, b.Running, b.KeptRatio, b.KeptUpper))
		}
		t.Logf("job %d: %s", i, strings.Join(line, "; "))
	}
	t.Logf("%d jobs (%d busy goroutines, %d CPUs) in %s: %d of %d budget verdicts failed %v; %d first replays fell below their rate",
		n, busy, runtime.NumCPU(), time.Since(t0).Round(time.Second), failed, budgets, perWorkload, firstFailed)
	if path := os.Getenv("LOWBARENA_BUDGET_NOISE_OUT"); path != "" {
		mu.Lock()
		b, err := json.Marshal(runs)
		mu.Unlock()
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(path, b, 0o644))
	}
}
