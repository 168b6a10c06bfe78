package service_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/bus"
	"github.com/lowbarena/lowbarena/events/bustest"
	"github.com/lowbarena/lowbarena/events/ce"
	"github.com/lowbarena/lowbarena/services/runner/service"
)

// TestJobWhoseRunnerDiesEveryTimeIsAbandoned: a job whose runner is
// SIGKILLed at every delivery (runner processes, killed once each has
// started the job) is given up after the runners' MaxDeliver, and ends as
// exactly one runner.job.failed with reason job_abandoned that says how
// often it was delivered and why it was given up, so the stage waiting on
// it hears. Without the dead-letter hook the job sat in dlq.runner and
// nothing ever ended it.
func TestJobWhoseRunnerDiesEveryTimeIsAbandoned(t *testing.T) {
	b, srv := bustest.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ref := putCheckpoint(t, ctx, b, "BF16", 1<<20)
	cand := putCheckpoint(t, ctx, b, "U8", 1<<20)
	// An engine that never becomes healthy holds each runner in the job
	// until it is killed (its health deadline is far away).
	request(t, ctx, b, "a1", cand, ref, command("--fault never-healthy"), small())

	startedN := func() int { return len(bustest.Stored(t, b, "arena.runner.job.started.a1")) }
	const maxDeliver = 3 // service.Consumer's
	for n := 1; n <= maxDeliver; n++ {
		proc := exec.Command(runnerBin, "--nats", srv.ClientURL(), "--pod", "pod-d", "--work", t.TempDir(), "--ack-wait", "2s", "--health-timeout", "10m")
		var logs bytes.Buffer
		proc.Stdout, proc.Stderr = &logs, &logs
		require.NoError(t, proc.Start())
		require.Eventually(t, func() bool { return startedN() >= n }, time.Minute, 50*time.Millisecond,
			"delivery %d starts on a runner; its log:\n%s", n, &logs)
		require.NoError(t, proc.Process.Signal(syscall.SIGKILL))
		_ = proc.Wait()
	}
	// The next runner receives the job a last time and gives it up
	// without running it.
	startRunner(t, ctx, b, nil, "pod-d")
	e := bustest.Await(t, b, outcomes(events.JobEfficiency, "a1"), events.RunnerJobCompleted, events.RunnerJobFailed)
	require.Equal(t, string(events.RunnerJobFailed), e.Type(), "%s", e.Data())
	f, err := events.Job.Failed.Decode(e)
	require.NoError(t, err)
	require.Equal(t, events.ReasonJobAbandoned, f.Reason)
	require.Equal(t, "sub-a1", f.SubmissionID)
	require.Equal(t, events.JobEfficiency, f.Kind)
	require.Contains(t, f.Message, "after 4 deliveries without an outcome")
	require.Contains(t, f.Message, bus.ReasonMaxDeliver)
	require.Contains(t, f.Message, "Submit the checkpoint again")
	require.Equal(t, maxDeliver, startedN(), "the job ran on three runners, not on the fourth")

	// The job is dead-lettered once, after its end was published.
	dlq, err := b.JetStream().Stream(ctx, events.StreamDLQ)
	require.NoError(t, err)
	m, err := dlq.GetLastMsgForSubject(ctx, events.SubjectRootDLQ+"."+service.Name)
	require.NoError(t, err)
	require.Equal(t, uint64(1), m.Sequence, "one dead letter")
	require.Equal(t, "job-a1", m.Header.Get(ce.HeaderID))
	require.Equal(t, bus.ReasonMaxDeliver, m.Header.Get(bus.HeaderDLQReason))

	// Exactly once: the hook run again (a crash between the failed event
	// and the dead letter) stores nothing new.
	s, err := service.New(ctx, b, slog.New(slog.NewTextHandler(io.Discard, nil)), service.Options{Pod: "pod-d", WorkDir: t.TempDir()})
	require.NoError(t, err)
	req := events.RunnerJobRequestedData{JobID: "a1", Kind: events.JobEfficiency, SubmissionID: "sub-a1"}
	again, err := events.NewEvent("job-a1", events.RunnerJobRequested, events.Source("test"), "a1", req)
	require.NoError(t, err)
	require.NoError(t, s.Abandon(ctx, bus.DeadLetter{Event: again, Consumer: service.Name, Reason: bus.ReasonMaxDeliver, Deliveries: 4}))
	stored := bustest.Stored(t, b, "arena.runner.job.failed.efficiency.a1")
	require.Len(t, stored, 1, "one runner.job.failed for the job")
	require.Equal(t, e.ID(), stored[0].ID())
}
