package round_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/examples"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/ctl"
	"github.com/lowbarena/lowbarena/services/round"
)

// TestAbandonedJobEndsItsEntry: a candidate whose SLA job kills the runner
// that takes it (its engine wrapper SIGKILLs its parent, the runner
// process, at every start) is given up by the runners after their
// MaxDeliver, as runner.job.failed job_abandoned; the round holding the
// job disqualifies that entry with the reason and finishes the others on
// the runners started again meanwhile (a supervisor restarts each killed
// runner, as a Deployment would). Without the runner's dead-letter hook
// the entry waited for its SLA job until the entry deadline (30 min).
func TestAbandonedJobEndsItsEntry(t *testing.T) {
	h := setup(t, "pod-k", nil)
	digest := digestOf(t, h.bundle("int4-w4a16-g32"))
	script := fmt.Sprintf("#!/bin/sh\ncase \"$2\" in */%s) kill -9 $PPID; exit 1;; esac\nexec %s \"$@\"\n", digest, simengine)
	require.NoError(t, os.WriteFile(filepath.Join(h.dir, "engine.sh"), []byte(script), 0o755))
	starts := h.supervisedRunner()
	h.awaitRunner()
	h.service(round.Options{})
	h.submit("c1", h.bundle("fp8-w8a8"), true, true, 1.4)
	h.submit("killer", h.bundle("int4-w4a16-g32"), true, true, 1.66)

	rep, err := h.start(ctl.StartRequest{Campaign: examples.TaskID, Candidates: []string{"c1", "killer"}})
	require.NoError(t, err)
	res := h.awaitEnd(rep.RoundID)
	status := map[string]events.RoundEntry{}
	for _, en := range res.Entries {
		status[en.EntryID] = en
	}
	require.Equal(t, "disqualified", status["killer"].Status)
	require.Contains(t, status["killer"].Reason, reason.JobAbandoned+": ")
	require.Contains(t, status["killer"].Reason, "without an outcome")
	require.Equal(t, "scored", status["c1"].Status, status["c1"].Reason)
	require.Equal(t, "scored", status["baseline"].Status, status["baseline"].Reason)
	require.GreaterOrEqual(t, starts.Load(), int64(4), "the runner was killed at each of the job's three deliveries and started again")
}

// supervisedRunner runs the real runner as a process, and starts it again
// whenever it dies, until the end of the test; it returns the count of
// starts.
func (h *harness) supervisedRunner() *atomic.Int64 {
	t := h.t
	var starts atomic.Int64
	ctx, cancel := context.WithCancel(h.ctx)
	logf, err := os.Create(filepath.Join(t.TempDir(), "runner.log"))
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			cmd := exec.CommandContext(ctx, runnerBin, "--nats", h.url, "--pod", h.pod, "--work", t.TempDir(), "--ack-wait", "2s", "--name", fmt.Sprintf("%s/runner-%d", h.pod, starts.Load()))
			cmd.Stdout, cmd.Stderr = logf, logf
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			// The end of the test kills the runner and its engine (its
			// process group).
			cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
			if err := cmd.Start(); err != nil {
				return
			}
			starts.Add(1)
			_ = cmd.Wait()
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // its engine, if any
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		_ = logf.Close()
		if t.Failed() {
			if out, err := os.ReadFile(logf.Name()); err == nil {
				t.Logf("runner log:\n%s", tail(string(out), 8000))
			}
		}
	})
	return &starts
}
