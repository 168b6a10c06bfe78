package runner_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
	"github.com/lowbarena/lowbarena/platform/ce"
	"github.com/lowbarena/lowbarena/platform/workqueue"
	"github.com/lowbarena/lowbarena/services/runner"
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
	const maxDeliver = 3 // runner.Consumer's
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
	require.Equal(t, string(reason.JobAbandoned), f.Reason)
	require.Equal(t, "sub-a1", f.SubmissionID)
	require.Equal(t, events.JobEfficiency, f.Kind)
	require.Contains(t, f.Message, "after 4 deliveries without an outcome")
	require.Contains(t, f.Message, reason.MaxDeliverExceeded)
	require.Contains(t, f.Message, "Submit the checkpoint again")
	require.Equal(t, maxDeliver, startedN(), "the job ran on three runners, not on the fourth")

	// The job is dead-lettered once, after its end was published.
	dlq, err := b.JetStream().Stream(ctx, events.StreamDLQ)
	require.NoError(t, err)
	m, err := dlq.GetLastMsgForSubject(ctx, events.SubjectRootDLQ+"."+runner.Name)
	require.NoError(t, err)
	require.Equal(t, uint64(1), m.Sequence, "one dead letter")
	require.Equal(t, "job-a1", m.Header.Get(ce.HeaderID))
	require.Equal(t, string(reason.MaxDeliverExceeded), m.Header.Get(bus.HeaderDLQReason))

	// Exactly once: the hook run again (a crash between the failed event
	// and the dead letter) stores nothing new.
	// (Its ack deadline is the killed runners': their entries in the pods
	// registry, which name the job, are long stale for it.)
	s, err := runner.New(ctx, b, slog.New(slog.NewTextHandler(io.Discard, nil)), runner.Options{Pod: "pod-d", WorkDir: t.TempDir(), AckWait: 2 * time.Second})
	require.NoError(t, err)
	req := events.RunnerJobRequestedData{JobID: "a1", Kind: events.JobEfficiency, SubmissionID: "sub-a1"}
	again, err := events.NewEvent("job-a1", events.RunnerJobRequested, events.Source("test"), "a1", req)
	require.NoError(t, err)
	require.NoError(t, s.Abandon(ctx, bus.DeadLetter{Event: again, Consumer: runner.Name, Reason: reason.MaxDeliverExceeded, Deliveries: 4}))
	stored := bustest.Stored(t, b, "arena.runner.job.failed.efficiency.a1")
	require.Len(t, stored, 1, "one runner.job.failed for the job")
	require.Equal(t, e.ID(), stored[0].ID())
}

// TestJobStillRunningElsewhereIsNotAbandoned: a job delivered past the
// runners' MaxDeliver while another runner's fresh entry in the pods
// registry says it runs it (its heartbeat lost while NATS elected the
// consumer's leader, seen in the chaos runs) is not given up: the hook
// says workqueue.ErrStillHeld and publishes nothing. Once that entry is
// older than two thirds of the ack deadline (its runner died), the job is
// given up; an entry naming another job holds nothing.
func TestJobStillRunningElsewhereIsNotAbandoned(t *testing.T) {
	b, _ := bustest.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ackWait = 900 * time.Millisecond
	s, err := runner.New(ctx, b, slog.New(slog.NewTextHandler(io.Discard, nil)), runner.Options{Pod: "pod-d", Runner: "here", WorkDir: t.TempDir(), AckWait: ackWait})
	require.NoError(t, err)
	pods, err := b.JetStream().KeyValue(ctx, bus.BucketPods)
	require.NoError(t, err)
	holds := func(holder, job string) {
		e := events.PodEntry{Pod: "pod-e", Runner: holder, Kinds: []string{events.JobEfficiency}, SeenAt: time.Now().UTC(),
			Job: &events.PodJob{JobID: job, Kind: events.JobEfficiency, SubmissionID: "sub-" + job, Since: time.Now().UTC(), Delivery: 3}}
		body, err := json.Marshal(e)
		require.NoError(t, err)
		_, err = pods.Put(ctx, runner.PodKey("pod-e", holder), body)
		require.NoError(t, err)
	}
	req := events.RunnerJobRequestedData{JobID: "a2", Kind: events.JobEfficiency, SubmissionID: "sub-a2"}
	ev, err := events.NewEvent("job-a2", events.RunnerJobRequested, events.Source("test"), "a2", req)
	require.NoError(t, err)
	dl := bus.DeadLetter{Event: ev, Consumer: runner.Name, Reason: reason.MaxDeliverExceeded, Deliveries: 4,
		Err: errors.New("delivered 4 times without an outcome")}
	failed := func() int { return len(bustest.Stored(t, b, "arena.runner.job.failed.efficiency.a2")) }

	holds("other-job", "b7")
	holds("there", "a2")
	err = s.Abandon(ctx, dl)
	require.ErrorIs(t, err, workqueue.ErrStillHeld)
	require.ErrorContains(t, err, runner.PodKey("pod-e", "there"))
	require.Zero(t, failed(), "nothing published while the job runs elsewhere")

	// The holder falls silent (its runner died): past two thirds of
	// the ack deadline its entry holds nothing.
	time.Sleep(2 * ackWait / 3)
	require.NoError(t, s.Abandon(ctx, dl))
	require.Equal(t, 1, failed(), "given up once its holder fell silent")

	// A poison verdict is the handler's own: the registry is not asked.
	holds("there", "a3")
	req.JobID, req.SubmissionID = "a3", "sub-a3"
	ev, err = events.NewEvent("job-a3", events.RunnerJobRequested, events.Source("test"), "a3", req)
	require.NoError(t, err)
	require.NoError(t, s.Abandon(ctx, bus.DeadLetter{Event: ev, Consumer: runner.Name, Reason: "bad_payload", Deliveries: 4}))
	require.Len(t, bustest.Stored(t, b, "arena.runner.job.failed.efficiency.a3"), 1)
}
