package runner_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
	"github.com/lowbarena/lowbarena/services/runner"
	"github.com/lowbarena/lowbarena/services/runner/job"
)

// TestEngineCrashOnStartFailsTheJobOnce: a job whose engine exits before
// it is healthy fails on its first delivery with engine_crashed, the
// engine's exit status and its log tail, though the runner's health
// deadline is an hour: one runner.job.started (no redelivery, no retry),
// one runner.job.failed. The wait for it is bounded by Await, far below
// the deadline; no time is asserted.
func TestEngineCrashOnStartFailsTheJobOnce(t *testing.T) {
	b, _ := bustest.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ref := putCheckpoint(t, ctx, b, "BF16", 1<<20)
	cand := putCheckpoint(t, ctx, b, "U8", 1<<20)
	s, err := runner.New(ctx, b, slog.New(slog.NewTextHandler(io.Discard, nil)), runner.Options{Pod: "pod-c", WorkDir: t.TempDir(), AckWait: 3 * time.Second,
		Job: job.Runner{SampleInterval: 20 * time.Millisecond, HealthTimeout: time.Hour, IdleTimeout: 5 * time.Second, StopGrace: 2 * time.Second}})
	require.NoError(t, err)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(rctx) }()
	defer func() { stop(); require.NoError(t, <-done) }()

	request(t, ctx, b, "c1", cand, ref, command("--fault crash-on-start"), small())
	e := bustest.Await(t, b, outcomes(events.JobEfficiency, "c1"), events.RunnerJobCompleted, events.RunnerJobFailed)
	f, err := events.Job.Failed.Decode(e)
	require.NoError(t, err)
	require.Equal(t, string(reason.EngineCrashed), f.Reason, f.Message)
	require.Equal(t, "exit status 1", f.Exit)
	require.Contains(t, f.Message, "engine died before becoming healthy")
	require.Contains(t, f.LogTail, "simulated fault crash-on-start")
	require.Len(t, bustest.Stored(t, b, "arena.runner.job.started.c1"), 1, "one delivery")
	require.Len(t, bustest.Stored(t, b, "arena.runner.job.failed.efficiency.c1"), 1)
}
