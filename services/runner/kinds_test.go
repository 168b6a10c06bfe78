package runner_test

import (
	"context"
	"encoding/json"
	"flag"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/app"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
	"github.com/lowbarena/lowbarena/services/runner"
)

// TestJobsTheRunnerRefuses: a job of a kind the runner does not run, or
// whose params do not decode, or whose suite is not in the artifact
// store, fails with its reason on its own kind's outcome subject, and a
// job refused before it starts publishes no started.
func TestJobsTheRunnerRefuses(t *testing.T) {
	b, _ := bustest.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cand := putCheckpoint(t, ctx, b, "U8", 1<<20)
	missing := events.BundleRef{Store: "jetstream", Bucket: bus.ObjectArtifacts, Object: "bundles/none.json", SHA256: strings.Repeat("0", 64)}
	suiteParams, err := json.Marshal(events.QualityJobParams{Campaign: "tiny", Role: events.RoleCandidate, Suite: missing, SuiteKey: "tiny@1/dev"})
	require.NoError(t, err)
	startRunner(t, ctx, b, nil, "pod-u")

	for _, tc := range []struct {
		id, kind string
		params   json.RawMessage
		reason   string
		message  []string
		started  bool
	}{
		{id: "u1", kind: "bogus", params: json.RawMessage(`{}`), reason: string(reason.JobUnknownKind),
			message: []string{"efficiency, quality and sla", `"bogus"`}},
		{id: "p1", kind: events.JobEfficiency, params: json.RawMessage(`{"engine":"not an object"}`), reason: string(reason.JobBadParams),
			message: []string{"params do not decode"}},
		{id: "q1", kind: events.JobQuality, params: suiteParams, reason: string(reason.ArtifactMissing),
			message: []string{"the campaign's eval suite is not in the artifact store"}, started: true},
	} {
		t.Run(tc.id, func(t *testing.T) {
			req := events.RunnerJobRequestedData{JobID: tc.id, Kind: tc.kind, SubmissionID: "sub-" + tc.id, Engine: command(""), Checkpoint: cand, Params: tc.params}
			_, err := bus.Emit(ctx, b, events.Source("test"), events.Job.Requested, tc.id, req, bus.WithID("job-"+tc.id))
			require.NoError(t, err)

			e := bustest.Await(t, b, "arena.runner.job.failed."+tc.kind+"."+tc.id, events.RunnerJobFailed)
			f, err := events.Job.Failed.Decode(e)
			require.NoError(t, err)
			require.Equal(t, tc.reason, f.Reason)
			require.Equal(t, tc.kind, f.Kind)
			require.Equal(t, "pod-u", f.Pod)
			for _, m := range tc.message {
				require.Contains(t, f.Message, m)
			}
			require.Empty(t, bustest.Stored(t, b, "arena.runner.job.completed.*."+tc.id))
			require.Len(t, bustest.Stored(t, b, "arena.runner.job.started."+tc.id), map[bool]int{false: 0, true: 1}[tc.started])
		})
	}
}

// TestRegisteredKinds: the runner runs the three kinds of the arena, in
// the order they were registered.
func TestRegisteredKinds(t *testing.T) {
	b, _ := bustest.Bus(t)
	s, err := runner.New(context.Background(), b, slog.New(slog.NewTextHandler(io.Discard, nil)), runner.Options{WorkDir: t.TempDir()})
	require.NoError(t, err)
	require.Equal(t, []string{events.JobEfficiency, events.JobQuality, events.JobSLA}, s.Kinds())
}

// TestComponentDefaults: the runner has one set of defaults, the same for
// its binary and `arena up`, and arena up's settings reach its flags.
func TestComponentDefaults(t *testing.T) {
	t.Setenv("LOWBARENA_POD", "")
	t.Setenv("LOWBARENA_RUNNER_WORK", "")
	c := runner.Component()
	require.Equal(t, runner.Name, c.Name)
	require.True(t, c.Store)
	require.Empty(t, c.Stages)
	cfg := app.DefaultConfig(c.Name)
	fs := c.FlagSet(&cfg)
	for name, def := range map[string]string{
		"pod": "pod-0", "name": "", "ack-wait": "30s", "health-timeout": "10m0s", "idle-timeout": "1m0s",
		"sample-interval": "100ms", "stop-grace": "10s",
	} {
		f := fs.Lookup(name)
		require.NotNil(t, f, "--%s", name)
		require.Equal(t, def, f.DefValue, "--%s", name)
	}
	require.NotNil(t, fs.Lookup("work"))
	require.NoError(t, app.Set(fs, map[string]string{"name": "pod-0/runner-1", "ack-wait": "5s", "http": "ignored"}))
	got := map[string]string{}
	fs.Visit(func(f *flag.Flag) { got[f.Name] = f.Value.String() })
	require.Equal(t, map[string]string{"name": "pod-0/runner-1", "ack-wait": "5s"}, got)
}
