package runner_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/access"
	"github.com/lowbarena/lowbarena/platform/access/enforce"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
	"github.com/lowbarena/lowbarena/platform/workqueue"
	"github.com/lowbarena/lowbarena/services/runner"
)

// TestOutcomesReadUnderPermissions: with the permission table's users (as
// `arena up` and deploy/nats/auth.conf give them), the runner reads a
// job's stored outcome and does not give a completed job up. A runner
// user without that read (an auth.conf that does not grant it) is
// refused at once and gives the job up without knowing its outcome,
// instead of asking forever.
func TestOutcomesReadUnderPermissions(t *testing.T) {
	for _, tc := range []struct {
		name        string
		readsEvents bool
		// settled: the hook says the job ended; otherwise it gives the
		// job up (a job_abandoned beside the completed).
		settled bool
	}{
		{"the table's runner reads outcomes", true, true},
		{"a runner refused the read gives the job up", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			connect := permissioned(t, func(u *access.User) {
				if u.Name == access.Runner {
					u.ReadsEvents = tc.readsEvents
				}
			})
			op := connect(access.Operator)
			require.NoError(t, bus.Provision(ctx, op.JetStream(), bus.Topology{}))
			rb := connect(access.Runner)

			// The job completed on a runner whose ack was lost.
			_, err := bus.Emit(ctx, rb, events.Source(runner.Name), events.Job.Completed, "p1",
				events.RunnerJobCompletedData{JobID: "p1", Kind: events.JobEfficiency, SubmissionID: "sub-p1", Pod: "pod-p", Runner: "died", Result: json.RawMessage(`{}`)}, bus.CausedBy("job-p1"))
			require.NoError(t, err)

			svc, err := runner.New(ctx, rb, slog.New(slog.NewTextHandler(io.Discard, nil)), runner.Options{Pod: "pod-p", WorkDir: t.TempDir(), AckWait: 3 * time.Second})
			require.NoError(t, err)
			req := events.RunnerJobRequestedData{JobID: "p1", Kind: events.JobEfficiency, SubmissionID: "sub-p1"}
			ev, err := events.NewEvent("job-p1", events.RunnerJobRequested, events.Source("test"), "p1", req)
			require.NoError(t, err)
			asked := time.Now()
			err = svc.Abandon(ctx, bus.DeadLetter{Event: ev, Consumer: runner.Name, Reason: reason.MaxDeliverExceeded, Deliveries: 4})
			var types []string
			for _, e := range bustest.Stored(t, op, outcomes(events.JobEfficiency, "p1")) {
				types = append(types, e.Type())
			}
			if tc.settled {
				require.ErrorIs(t, err, workqueue.ErrSettled)
				require.Equal(t, []string{string(events.RunnerJobCompleted)}, types)
				return
			}
			require.NoError(t, err)
			require.Less(t, time.Since(asked), 10*time.Second, "refused at once, not after a timeout")
			require.Equal(t, []string{string(events.RunnerJobCompleted), string(events.RunnerJobFailed)}, types)
		})
	}
}

// permissioned starts a nats-server with JetStream whose users are the
// permission table's (as `arena up` and deploy/nats/auth.conf give
// them), each first changed by edit, and returns how to connect as one.
func permissioned(t *testing.T, edit func(*access.User)) func(user string) *bus.Bus {
	t.Helper()
	creds, err := access.LoadOrCreate(t.TempDir())
	require.NoError(t, err)
	opts := &server.Options{ServerName: "permissioned", Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true,
		StoreDir: t.TempDir(), NoLog: true, NoSigs: true}
	for _, u := range access.Users {
		edit(&u)
		opts.Nkeys = append(opts.Nkeys, &server.NkeyUser{Nkey: creds.Public(u.Name), Permissions: enforce.Permissions(u.Permissions())})
	}
	s, err := server.NewServer(opts)
	require.NoError(t, err)
	go s.Start()
	require.True(t, s.ReadyForConnections(10*time.Second))
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return func(user string) *bus.Bus {
		seed, err := nats.NkeyOptionFromSeed(creds.SeedFile(user))
		require.NoError(t, err)
		nc, err := nats.Connect(s.ClientURL(), seed, nats.CustomInboxPrefix(access.InboxPrefix(user)), nats.Name(user))
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		b, err := bus.New(nc, bus.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
		require.NoError(t, err)
		return b
	}
}

// TestQueuedJobsReadUnderPermissions: the table's runner reads a queued
// job's request on RUNNER_JOBS by its subject, as a runner looks up a
// submission's quality job to answer it on the engine its efficiency job
// holds; without ReadsJobs the read is refused.
func TestQueuedJobsReadUnderPermissions(t *testing.T) {
	for _, reads := range []bool{true, false} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		connect := permissioned(t, func(u *access.User) {
			if u.Name == access.Runner {
				u.ReadsJobs = reads
			}
		})
		op := connect(access.Operator)
		require.NoError(t, bus.Provision(ctx, op.JetStream(), bus.Topology{}))
		id := events.QualityJobID("sub-q")
		req := events.RunnerJobRequestedData{JobID: id, Kind: events.JobQuality, SubmissionID: "sub-q", Engine: "simengine",
			Checkpoint: events.BundleRef{Store: "jetstream", Bucket: bus.ObjectArtifacts, Object: "m", SHA256: strings.Repeat("a", 64)}, Params: json.RawMessage(`{}`)}
		_, err := bus.Emit(ctx, connect(access.Quality), events.Source("quality"), events.Job.Requested, id, req, bus.WithID("job-q"))
		require.NoError(t, err)
		subject, err := events.JobSubject(events.JobQuality, id)
		require.NoError(t, err)
		rb := connect(access.Runner)
		stream, err := rb.JetStream().Stream(ctx, events.StreamRunnerJobs)
		if !reads {
			require.Error(t, err, "the stream's info is refused")
			cancel()
			continue
		}
		require.NoError(t, err)
		m, err := stream.GetLastMsgForSubject(ctx, subject)
		require.NoError(t, err)
		require.Equal(t, subject, m.Subject)
		cancel()
	}
}
