package runner_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/enginepatch"
	"github.com/lowbarena/lowbarena/domain/examples"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/artifact"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
	"github.com/lowbarena/lowbarena/platform/ce"
	"github.com/lowbarena/lowbarena/services/runner"
	"github.com/lowbarena/lowbarena/services/runner/engine"
	"github.com/lowbarena/lowbarena/services/runner/job"
)

// requireSandbox skips where bubblewrap cannot sandbox, unless
// LOWBARENA_REQUIRE_SANDBOX says this machine must. The sandbox's helper
// is the runner's binary: this test binary links chDB, whose loader runs
// before main and finds no libchdb.so inside the sandbox.
func requireSandbox(t *testing.T) {
	t.Helper()
	err := (&engine.Box{Helper: runnerBin}).Check(t.Context())
	if err == nil {
		return
	}
	if os.Getenv("LOWBARENA_REQUIRE_SANDBOX") != "" {
		t.Fatalf("LOWBARENA_REQUIRE_SANDBOX is set and the engine sandbox is unavailable: %v", err)
	}
	t.Skipf("engine sandbox unavailable: %v", err)
}

// loggingBwrap puts first on PATH a bwrap that writes each command line
// it sandboxes to the returned file, then runs the real bubblewrap. The
// test that calls it is not parallel: it sets PATH.
func loggingBwrap(t *testing.T) string {
	t.Helper()
	real, err := exec.LookPath("bwrap")
	require.NoError(t, err)
	dir := t.TempDir()
	log := filepath.Join(dir, "bwrap.log")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "bwrap"), []byte("#!/bin/sh\necho \"$*\" >> "+log+"\nexec "+real+" \"$@\"\n"), 0o755))
	t.Setenv("PATH", dir+string(filepath.ListSeparator)+os.Getenv("PATH"))
	return log
}

// putFiles stores files as one bundle in the artifact store.
func putFiles(t *testing.T, ctx context.Context, b *bus.Bus, files map[string][]byte) events.BundleRef {
	t.Helper()
	arts, err := artifact.NewJetStream(ctx, b.JetStream(), bus.ObjectArtifacts)
	require.NoError(t, err)
	var fds []events.FileDigest
	for name, data := range files {
		sum := sha256.Sum256(data)
		f := events.FileDigest{Path: name, Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:])}
		_, err := arts.PutFile(ctx, f.SHA256, f.Size, bytes.NewReader(data))
		require.NoError(t, err)
		fds = append(fds, f)
	}
	ref, err := arts.PutManifest(ctx, artifact.NewManifest(fds))
	require.NoError(t, err)
	return ref
}

// jobOutcome waits, up to wait, for the job's completed or failed event:
// one consumer for the whole wait, as a build takes minutes on a busy
// machine (bustest.Await bounds its polling to 30 s).
func jobOutcome(t *testing.T, b *bus.Bus, id string, wait time.Duration) event.Event {
	t.Helper()
	return jobOutcomeOf(t, b, events.JobEfficiency, id, wait)
}

// jobOutcomeOf is jobOutcome for a job of any kind.
func jobOutcomeOf(t *testing.T, b *bus.Bus, kind, id string, wait time.Duration) event.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	c, err := b.JetStream().OrderedConsumer(ctx, events.StreamArena, jetstream.OrderedConsumerConfig{FilterSubjects: []string{outcomes(kind, id)}})
	require.NoError(t, err)
	m, err := c.Next(jetstream.FetchMaxWait(wait))
	require.NoError(t, err, "no outcome of job %s within %v", id, wait)
	e, err := ce.Decode(m.Headers(), m.Data())
	require.NoError(t, err)
	return e
}

// result is a completed efficiency job's result.
func result(t *testing.T, e event.Event) events.EfficiencyJobResult {
	t.Helper()
	require.Equal(t, string(events.RunnerJobCompleted), e.Type(), "%s", e.Data())
	d, err := events.Job.Completed.Decode(e)
	require.NoError(t, err)
	var r events.EfficiencyJobResult
	require.NoError(t, json.Unmarshal(d.Result, &r))
	return r
}

// brokenPatch applies to the example tree and does not compile.
const brokenPatch = `diff --git a/tools/simengine/broken.go b/tools/simengine/broken.go
new file mode 100644
--- /dev/null
+++ b/tools/simengine/broken.go
@@ -0,0 +1,3 @@
+package main
+
+func broken() { undefinedName() }
`

// strayPatch does not apply to the example tree: its context is not
// there.
const strayPatch = `diff --git a/tools/simengine/model.go b/tools/simengine/model.go
--- a/tools/simengine/model.go
+++ b/tools/simengine/model.go
@@ -1,3 +1,3 @@
 no such line
-in the pinned
+source tree
`

// TestPatchedEngineIsBuiltOnceAndRunSandboxed runs efficiency jobs of
// candidates whose bundles carry an engine patch against the example
// campaign's pinned simengine source: the runner fetches the source
// tree, builds the patched engine once for the pod (a second job re-uses
// the same program, untouched), runs the candidate's runs on it inside
// the sandbox and the BF16 reference's on the campaign's own simengine
// outside it, and completes. A patch that does not compile, or does not
// apply, fails its job with engine_build_failed and the build's words.
func TestPatchedEngineIsBuiltOnceAndRunSandboxed(t *testing.T) {
	requireSandbox(t)
	bwrapLog := loggingBwrap(t)
	b, _ := bustest.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), 9*time.Minute)
	defer cancel()

	src, err := examples.EngineSource()
	require.NoError(t, err)
	files, err := examples.EngineSourceFiles()
	require.NoError(t, err)
	tree := map[string][]byte{}
	for _, f := range files {
		tree[f.Path] = f.Data
	}
	sourceRef := putFiles(t, ctx, b, tree)
	patches, err := examples.EnginePatches()
	require.NoError(t, err)
	var honest []byte
	for _, p := range patches {
		if p.Honest {
			honest = p.Diff
		}
	}
	require.NotEmpty(t, honest, "the examples hold an honest patch")

	ref := putCheckpoint(t, ctx, b, "BF16", 4<<20)
	withPatch := func(patch []byte) events.BundleRef {
		cand := putCheckpoint(t, ctx, b, "U8", 1<<20)
		arts, err := artifact.NewJetStream(ctx, b.JetStream(), bus.ObjectArtifacts)
		require.NoError(t, err)
		m, err := arts.Manifest(ctx, cand)
		require.NoError(t, err)
		all := map[string][]byte{"engine.patch": patch}
		for _, f := range m.Files {
			r, err := arts.OpenFile(ctx, f.SHA256)
			require.NoError(t, err)
			all[f.Path], err = io.ReadAll(r)
			r.Close()
			require.NoError(t, err)
		}
		return putFiles(t, ctx, b, all)
	}

	work := t.TempDir()
	s, err := runner.New(ctx, b, slog.New(slog.NewTextHandler(io.Discard, nil)), runner.Options{Pod: "pod-p", WorkDir: work, AckWait: 5 * time.Second,
		Job: job.Runner{SampleInterval: 20 * time.Millisecond, HealthTimeout: 20 * time.Second, IdleTimeout: 5 * time.Second, StopGrace: 2 * time.Second,
			Box: engine.Box{Helper: runnerBin}}})
	require.NoError(t, err)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Actors()[0].Run(rctx) }()
	t.Cleanup(func() { stop(); <-done })

	cmd := "{{if .Engine}}{{.Engine}}{{else}}" + simengine + "{{end}} --checkpoint {{.Checkpoint}} --port {{.Port}} --kv-cache-dtype {{.KVCacheDType}} " +
		"--max-num-seqs {{.MaxNumSeqs}} --gpu-memory-gib {{.GPUMemoryGiB}} --scale 8192 --kv-scale 64 --startup-seconds 0.2"
	// The patched tree's digest, as the build stage checks it and the
	// record names it.
	onDisk := t.TempDir()
	for _, f := range files {
		p := filepath.Join(onDisk, filepath.FromSlash(f.Path))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, f.Data, 0o644))
	}
	checked, err := enginepatch.Open(&src, onDisk)
	require.NoError(t, err)
	sum, err := checked.Check(honest)
	require.NoError(t, err)
	digest := sum.EngineDigest
	ask := func(id string, cand events.BundleRef, budget float64) {
		p, err := json.Marshal(events.EfficiencyJobParams{Campaign: "tiny", Engine: events.EngineSpec{MaxNumSeqs: 256, Source: &src}, Workload: small(),
			KVCacheDType: "fp8", Reference: ref, BudgetFactor: budget, EngineBundle: &sourceRef, Patch: "engine.patch", EngineDigest: digest})
		require.NoError(t, err)
		req := events.RunnerJobRequestedData{JobID: id, Kind: events.JobEfficiency, SubmissionID: "sub-" + id, Engine: cmd, Checkpoint: cand, Params: p}
		_, err = bus.Emit(ctx, b, events.Source("test"), events.Job.Requested, id, req, bus.WithID("job-"+id))
		require.NoError(t, err)
	}
	built := func() []string {
		entries, err := os.ReadDir(filepath.Join(work, "engines"))
		require.NoError(t, err)
		var out []string
		for _, e := range entries {
			if e.IsDir() {
				out = append(out, filepath.Join(work, "engines", e.Name()))
			}
		}
		return out
	}

	// The first job builds the engine and runs the candidate, its budget
	// replays included, on it in the sandbox.
	ask("p1", withPatch(honest), 1.02)
	r := result(t, jobOutcome(t, b, "p1", 6*time.Minute))
	require.Greater(t, r.Candidate.Workloads["serve"].Rate, 0.0)
	require.Len(t, r.Budget, 3)
	engines := built()
	require.Len(t, engines, 1, "one engine built")
	program := filepath.Join(engines[0], "bin", filepath.Base(examples.EngineSourceDir))
	before, err := os.Stat(program)
	require.NoError(t, err)
	logged, err := os.ReadFile(bwrapLog)
	require.NoError(t, err)
	var runs, plain int
	for line := range strings.Lines(string(logged)) {
		if strings.Contains(line, program+" --checkpoint") {
			runs++
		}
		if strings.Contains(line, simengine+" --checkpoint") {
			plain++
		}
	}
	require.GreaterOrEqual(t, runs, 4, "the candidate's run and its three budget replays run the patched engine sandboxed")
	require.Zero(t, plain, "the BF16 reference runs the campaign's own engine, unsandboxed")

	// A second candidate with the same patch re-uses the engine.
	ask("p2", withPatch(honest), 0)
	result(t, jobOutcome(t, b, "p2", time.Minute))
	require.Equal(t, engines, built(), "no second engine")
	after, err := os.Stat(program)
	require.NoError(t, err)
	require.True(t, os.SameFile(before, after), "the program is the first job's")
	require.Equal(t, before.ModTime(), after.ModTime())

	// A round serves the candidate on the engine it was measured with:
	// its SLA job runs the same patched program in the sandbox; the
	// round's BF16 baseline runs the campaign's own engine outside it.
	sla := func(id, entry string, cand events.BundleRef, patch string) events.EngineRun {
		sp := events.SLAJobParams{Engine: events.EngineSpec{MaxNumSeqs: 256, Source: &src}, Workload: small(), KVCacheDType: "fp8", Entry: entry}
		if patch != "" {
			sp.EngineBundle, sp.Patch, sp.EngineDigest = &sourceRef, patch, digest
		}
		p, err := json.Marshal(sp)
		require.NoError(t, err)
		req := events.RunnerJobRequestedData{JobID: id, Kind: events.JobSLA, SubmissionID: "sub-" + id, RoundID: "round-p", Engine: cmd, Checkpoint: cand, Params: p}
		_, err = bus.Emit(ctx, b, events.Source("test"), events.Job.Requested, id, req, bus.WithID("job-"+id))
		require.NoError(t, err)
		e := jobOutcomeOf(t, b, events.JobSLA, id, 2*time.Minute)
		require.Equal(t, string(events.RunnerJobCompleted), e.Type(), "%s", e.Data())
		d, err := events.Job.Completed.Decode(e)
		require.NoError(t, err)
		var run events.EngineRun
		require.NoError(t, json.Unmarshal(d.Result, &run))
		return run
	}
	count := func(what string) int {
		logged, err := os.ReadFile(bwrapLog)
		require.NoError(t, err)
		return strings.Count(string(logged), what+" --checkpoint")
	}
	runsBefore := count(program)
	run := sla("s1", "candidate-1", withPatch(honest), "engine.patch")
	require.Greater(t, run.Workloads["serve"].Rate, 0.0)
	require.Equal(t, runsBefore+1, count(program), "the round's candidate ran the patched engine, sandboxed")
	require.Equal(t, engines, built(), "the round re-uses the pod's engine")
	run = sla("s2", "baseline", ref, "")
	require.Greater(t, run.Workloads["serve"].Rate, 0.0)
	require.Equal(t, runsBefore+1, count(program), "the baseline did not run the patched engine")
	require.Zero(t, count(simengine), "the baseline ran the campaign's own engine, unsandboxed")

	// A source changed between the stages: the tree the runner would
	// build is not the one the record names, and the pod's engine of
	// that source and patch is not run.
	checkedDigest := digest
	digest = strings.Repeat("0", 64)
	ask("p5", withPatch(honest), 0)
	e := jobOutcome(t, b, "p5", time.Minute)
	require.Equal(t, string(events.RunnerJobFailed), e.Type())
	var changed events.RunnerJobFailedData
	require.NoError(t, json.Unmarshal(e.Data(), &changed))
	require.Equal(t, string(reason.EngineSourceChanged), changed.Reason, changed.Message)
	require.Contains(t, changed.Message, checkedDigest[:12], "it names the tree it would have built")
	digest = ""

	for _, tc := range []struct {
		id, patch, words string
	}{
		{id: "p3", patch: brokenPatch, words: "undefinedName"},
		{id: "p4", patch: strayPatch, words: "does not apply"},
	} {
		ask(tc.id, withPatch([]byte(tc.patch)), 0)
		e := jobOutcome(t, b, tc.id, 6*time.Minute)
		require.Equal(t, string(events.RunnerJobFailed), e.Type(), tc.id)
		var f events.RunnerJobFailedData
		require.NoError(t, json.Unmarshal(e.Data(), &f))
		require.Equal(t, string(reason.EngineBuildFailed), f.Reason, f.Message)
		require.Contains(t, f.Message+f.LogTail, tc.words, tc.id)
	}
	require.Len(t, built(), 1, "a failed build leaves no engine")
}
