package runner_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/suite"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/artifact"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
)

// TestQualityJobWithoutSandbox: on a machine whose bubblewrap cannot
// create namespaces (a bwrap that fails, first on PATH), a quality job
// whose suite has code items fails with sandbox_unavailable and a message
// for the operator, before any engine starts (no GPU time), instead of
// going back to the queue for ever. It is not parallel: it sets PATH.
func TestQualityJobWithoutSandbox(t *testing.T) {
	fake, err := os.MkdirTemp("", "runner-fake-bwrap-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(fake) })
	require.NoError(t, os.Chmod(fake, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(fake, "bwrap"), []byte("#!/bin/sh\n"+
		`echo "bwrap: No permissions to create new namespace, likely because the kernel does not allow non-privileged user namespaces." >&2`+
		"\nexit 1\n"), 0o755))
	t.Setenv("PATH", fake+string(filepath.ListSeparator)+os.Getenv("PATH"))

	b, _ := bustest.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cand := putCheckpoint(t, ctx, b, "U8", 1<<20)
	dir := t.TempDir()
	require.NoError(t, suite.Write(dir, suite.Generate("t", "1", suite.SplitDev, suite.SeedDev, suite.Sizes{"math": 2, "code": 2})))
	arts, err := artifact.NewJetStream(ctx, b.JetStream(), bus.ObjectArtifacts)
	require.NoError(t, err)
	ref, err := artifact.PutDir(ctx, arts, dir)
	require.NoError(t, err)
	params, err := json.Marshal(events.QualityJobParams{Campaign: "tiny", Role: events.RoleCandidate, Suite: ref, SuiteKey: "t@1/dev",
		Engine: events.EngineSpec{MaxNumSeqs: 16}, Sampling: events.Sampling{Samples: 1, MaxTokens: 64, Concurrency: 2}})
	require.NoError(t, err)
	startRunner(t, ctx, b, nil, "pod-s")

	req := events.RunnerJobRequestedData{JobID: "s1", Kind: events.JobQuality, SubmissionID: "sub-s1", Engine: command(""), Checkpoint: cand, Params: params}
	_, err = bus.Emit(ctx, b, events.Source("test"), events.Job.Requested, "s1", req, bus.WithID("job-s1"))
	require.NoError(t, err)

	e := bustest.Await(t, b, outcomes(events.JobQuality, "s1"), events.RunnerJobCompleted, events.RunnerJobFailed)
	require.Equal(t, string(events.RunnerJobFailed), e.Type(), "%s", e.Data())
	f, err := events.Job.Failed.Decode(e)
	require.NoError(t, err)
	require.Equal(t, string(reason.SandboxUnavailable), f.Reason)
	require.Contains(t, f.Message, "cannot create the sandbox")
	require.Contains(t, f.Message, "enable unprivileged user namespaces")
	require.Zero(t, f.GPUHours, "no engine started")
	require.Len(t, bustest.Stored(t, b, "arena.runner.job.started.s1"), 1)
}
