package runner_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
)

// TestPinnedJobWaitsForItsPod runs two runner processes on two pods. A job
// pinned to pod-a runs there; while pod-a's runner is busy, and then
// stopped (SIGSTOP) for longer than three ack deadlines, pod-b's idle
// runner serves the shared job queued meanwhile and never takes pod-a's
// jobs; once pod-a's runner resumes (SIGCONT), it serves both of its jobs,
// each completed once. Before jobs were pinned, pod-b's runner took the
// stopped runner's job after its ack deadline.
func TestPinnedJobWaitsForItsPod(t *testing.T) {
	b, srv := bustest.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ref := putCheckpoint(t, ctx, b, "BF16", 4<<20)
	cand := putCheckpoint(t, ctx, b, "U8", 1<<20)

	const ackWait = 2 * time.Second
	runner := func(pod string) *exec.Cmd {
		p := exec.Command(runnerBin, "--nats", srv.ClientURL(), "--pod", pod, "--work", t.TempDir(), "--ack-wait", ackWait.String(), "--health-timeout", "20s")
		var logs bytes.Buffer
		p.Stdout, p.Stderr = &logs, &logs
		require.NoError(t, p.Start())
		t.Cleanup(func() {
			_ = p.Process.Signal(syscall.SIGCONT)
			_ = p.Process.Kill()
			_ = p.Wait()
			if t.Failed() {
				t.Logf("%s:\n%s", pod, logs.String())
			}
		})
		return p
	}
	a := runner("pod-a")
	runner("pod-b")

	slow := events.WorkloadSpec{RequestsPerSlot: 1, MaxTokens: 32, PromptWords: 32, LongPromptWords: 64}
	pinned(t, ctx, b, "p1", "pod-a", cand, ref, command("--step-overhead-ms 5"), slow)
	bustest.Await(t, b, "arena.runner.job.progress.p1", events.RunnerJobProgress)
	// Busy with p1: its second job and a shared one are queued.
	pinned(t, ctx, b, "p2", "pod-a", cand, ref, command(""), small())
	pinned(t, ctx, b, "u1", "", cand, ref, command(""), small())
	require.NoError(t, a.Process.Signal(syscall.SIGSTOP))
	// The shared job goes to the idle runner of the other pod.
	d, _ := ended(t, b, "u1")
	require.Equal(t, "pod-b", d.Pod)
	// Three ack deadlines pass with pod-a's runner stopped mid-job: its
	// jobs wait for it (before, pod-b's runner took p1 here).
	time.Sleep(3 * ackWait)
	for _, id := range []string{"p1", "p2"} {
		for _, e := range bustest.Stored(t, b, "arena.runner.job.started."+id) {
			var s events.RunnerJobStartedData
			require.NoError(t, json.Unmarshal(e.Data(), &s))
			require.Equal(t, "pod-a", s.Pod, "%s started on %s", id, s.Pod)
		}
	}
	require.NoError(t, a.Process.Signal(syscall.SIGCONT))

	for _, id := range []string{"p1", "p2"} {
		d, r := ended(t, b, id)
		require.Equal(t, "pod-a", d.Pod, id)
		require.Greater(t, r.Candidate.Workloads["serve"].Rate, 0.0, id)
		require.Len(t, bustest.Stored(t, b, outcomes(events.JobEfficiency, id)), 1, "%s ends once", id)
		for _, e := range bustest.Stored(t, b, "arena.runner.job.started."+id) {
			var s events.RunnerJobStartedData
			require.NoError(t, json.Unmarshal(e.Data(), &s))
			require.Equal(t, "pod-a", s.Pod, "%s started on %s", id, s.Pod)
		}
	}
	require.Len(t, bustest.Stored(t, b, "arena.runner.job.started.u1"), 1, "the shared job started once")
	// The work queue is empty once every job is acked.
	st, err := b.JetStream().Stream(ctx, events.StreamRunnerJobs)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		si, err := st.Info(ctx)
		return err == nil && si.State.Msgs == 0
	}, 20*time.Second, 100*time.Millisecond)
}

// pinned queues an efficiency job, pinned to pod unless pod is "".
func pinned(t *testing.T, ctx context.Context, b *bus.Bus, id, pod string, cand, ref events.BundleRef, cmd string, wl events.WorkloadSpec) {
	t.Helper()
	p, err := json.Marshal(events.EfficiencyJobParams{Campaign: "tiny", Engine: events.EngineSpec{MaxNumSeqs: 256}, Workload: wl,
		KVCacheDType: "fp8", Reference: ref, BudgetFactor: 1.02})
	require.NoError(t, err)
	req := events.RunnerJobRequestedData{JobID: id, Kind: events.JobEfficiency, SubmissionID: "sub-" + id, Pod: pod, Engine: cmd, Checkpoint: cand, Params: p}
	_, err = bus.Emit(ctx, b, events.Source("test"), events.Job.Requested, id, req, bus.WithID("job-"+id))
	require.NoError(t, err)
}

// ended waits (up to 2 min, a bound, not a speed assertion) for an
// efficiency job's outcome and returns it, which must be a completion. It
// polls slowly: each look is a consumer on the test's server, and a job
// here runs for many seconds on a loaded machine.
func ended(t *testing.T, b *bus.Bus, id string) (events.RunnerJobCompletedData, events.EfficiencyJobResult) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for len(bustest.Stored(t, b, outcomes(events.JobEfficiency, id))) == 0 {
		require.False(t, time.Now().After(deadline), "no outcome of %s within 2 min", id)
		time.Sleep(500 * time.Millisecond)
	}
	return completed(t, b, id)
}
