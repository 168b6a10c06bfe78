package runner_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
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

// TestJobThatEndedIsNotRunAgain: a job whose outcome is stored already
// (its runner published it and died, or lost its ack, before the ack
// reached the server, so the server delivers it again) is acked without
// running: no second start, no second outcome. A job given up already goes back to the dead letters without a
// second job_abandoned. An outcome of an earlier request of the same job
// (another request id), or one stored before the request was (the same
// request made again), ends nothing: the job runs.
func TestJobThatEndedIsNotRunAgain(t *testing.T) {
	b, _ := bustest.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ref := putCheckpoint(t, ctx, b, "BF16", 1<<20)
	cand := putCheckpoint(t, ctx, b, "U8", 1<<20)
	src := events.Source(runner.Name)
	completedBy := func(requestID, job string) {
		_, err := bus.Emit(ctx, b, src, events.Job.Completed, job,
			events.RunnerJobCompletedData{JobID: job, Kind: events.JobEfficiency, SubmissionID: "sub-" + job, Pod: "pod-x", Runner: "died",
				GPUHours: 0.5, Result: json.RawMessage(`{}`)}, bus.CausedBy(requestID))
		require.NoError(t, err)
	}
	failedBy := func(requestID, job, reason string) {
		_, err := bus.Emit(ctx, b, src, events.Job.Failed, job,
			events.RunnerJobFailedData{JobID: job, Kind: events.JobEfficiency, SubmissionID: "sub-" + job, Pod: "pod-x", Runner: "died",
				Reason: reason, Message: "as stored"}, bus.CausedBy(requestID))
		require.NoError(t, err)
	}
	// e5's request is made again under the same id after its outcome
	// (the duplicate window passed): stored before the request, the
	// outcome ends nothing.
	completedBy("job-e5", "e5")
	for _, id := range []string{"e1", "e2", "e3", "e4", "e5"} {
		request(t, ctx, b, id, cand, ref, command(""), small())
	}
	completedBy("job-e1", "e1")                           // completed, its ack lost
	failedBy("job-e2", "e2", "engine_crashed")            // failed by its runner, its ack lost
	failedBy("job-e3", "e3", string(reason.JobAbandoned)) // given up, its dead letter not stored
	completedBy("job-e4-earlier", "e4")                   // an earlier request of job e4
	startRunner(t, ctx, b, nil, "pod-e")

	// e4 runs: its stored outcome is another request's.
	e4 := func() []string {
		var ids []string
		for _, e := range bustest.Stored(t, b, "arena.runner.job.completed.efficiency.e4") {
			ids = append(ids, e.ID())
		}
		return ids
	}
	require.Eventually(t, func() bool { return len(e4()) == 2 }, time.Minute, 100*time.Millisecond, "e4 runs")
	require.Equal(t, events.DeriveID("job-e4", string(events.RunnerJobCompleted)), e4()[1])
	jobs, err := b.JetStream().Stream(ctx, events.StreamRunnerJobs)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := jobs.Info(ctx)
		return err == nil && info.State.Msgs == 0
	}, time.Minute, 50*time.Millisecond, "every job leaves the work queue")

	for _, tc := range []struct {
		job     string
		started int
		// outcomes are the outcome types stored for the job, in order.
		outcomes []string
	}{
		{"e1", 0, []string{string(events.RunnerJobCompleted)}},
		{"e2", 0, []string{string(events.RunnerJobFailed)}},
		{"e3", 0, []string{string(events.RunnerJobFailed)}},
		{"e4", 1, []string{string(events.RunnerJobCompleted), string(events.RunnerJobCompleted)}},
		// It ran; its outcome, of the same id, is inside the test
		// stream's duplicate window, so stored once.
		{"e5", 1, []string{string(events.RunnerJobCompleted)}},
	} {
		t.Run(tc.job, func(t *testing.T) {
			require.Len(t, bustest.Stored(t, b, "arena.runner.job.started."+tc.job), tc.started)
			var types []string
			for _, e := range bustest.Stored(t, b, outcomes(events.JobEfficiency, tc.job)) {
				types = append(types, e.Type())
			}
			require.Equal(t, tc.outcomes, types)
		})
	}

	// Only e3, given up already, is dead-lettered, once, with the reason.
	dlq, err := b.JetStream().Stream(ctx, events.StreamDLQ)
	require.NoError(t, err)
	info, err := dlq.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(1), info.State.Msgs)
	m, err := dlq.GetLastMsgForSubject(ctx, events.SubjectRootDLQ+"."+runner.Name)
	require.NoError(t, err)
	require.Equal(t, "job-e3", m.Header.Get(ce.HeaderID))
	require.Equal(t, string(reason.JobAbandoned), m.Header.Get(bus.HeaderDLQReason))

	// The dead-letter hook asked directly: a job that ended is not given
	// up (the loop acks it); one given up already is not given up twice.
	s, err := runner.New(ctx, b, slog.New(slog.NewTextHandler(io.Discard, nil)), runner.Options{Pod: "pod-e", WorkDir: t.TempDir(), AckWait: 3 * time.Second})
	require.NoError(t, err)
	giveUp := func(job string) error {
		req := events.RunnerJobRequestedData{JobID: job, Kind: events.JobEfficiency, SubmissionID: "sub-" + job}
		ev, err := events.NewEvent("job-"+job, events.RunnerJobRequested, events.Source("test"), job, req)
		require.NoError(t, err)
		return s.Abandon(ctx, bus.DeadLetter{Event: ev, Consumer: runner.Name, Reason: reason.MaxDeliverExceeded, Deliveries: 4})
	}
	require.ErrorIs(t, giveUp("e1"), workqueue.ErrSettled)
	require.ErrorIs(t, giveUp("e2"), workqueue.ErrSettled)
	require.NoError(t, giveUp("e3"))
	require.Len(t, bustest.Stored(t, b, outcomes(events.JobEfficiency, "e3")), 1, "no second job_abandoned")
}
