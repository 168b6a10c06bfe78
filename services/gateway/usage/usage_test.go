package usage_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/participant"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
	"github.com/lowbarena/lowbarena/services/gateway/usage"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func buckets(t *testing.T) (*bus.Bus, jetstream.KeyValue, jetstream.KeyValue) {
	t.Helper()
	b, _ := bustest.Bus(t)
	ctx := context.Background()
	u, err := b.JetStream().KeyValue(ctx, bus.BucketUsage)
	require.NoError(t, err)
	recs, err := b.JetStream().KeyValue(ctx, bus.BucketSubmissions)
	require.NoError(t, err)
	return b, u, recs
}

// TestReserveRace: twelve uploads race for the last three of a day's
// submissions; the compare-and-set lets exactly three through, and every
// other is refused with the moment the next is allowed.
func TestReserveRace(t *testing.T) {
	_, kv, _ := buckets(t)
	t0 := time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)
	l := usage.New(kv, func() time.Time { return t0 })
	ctx := context.Background()
	lim := participant.Limits{SubmissionsPerDay: 5, BytesPerSubmission: 1 << 30, GPUHoursPerWeek: 10}
	for _, id := range []string{"s0", "s1"} {
		require.NoError(t, l.Reserve(ctx, "team-a", lim, participant.Spent{ID: id, Bytes: 10}))
	}
	var wg sync.WaitGroup
	errs := make(chan error, 12)
	for i := range 12 {
		wg.Go(func() {
			errs <- l.Reserve(ctx, "team-a", lim, participant.Spent{ID: "r" + string(rune('a'+i)), Bytes: 10})
		})
	}
	wg.Wait()
	close(errs)
	ok, refused := 0, 0
	for err := range errs {
		var r *participant.Refusal
		switch {
		case err == nil:
			ok++
		case errors.As(err, &r):
			refused++
			require.Equal(t, reason.QuotaSubmissionsPerDay, r.Code)
			require.Equal(t, t0.Add(participant.Day), r.RetryAt)
		default:
			t.Fatalf("unexpected error: %v", err)
		}
	}
	require.Equal(t, 3, ok)
	require.Equal(t, 9, refused)
	u, err := l.Get(ctx, "team-a")
	require.NoError(t, err)
	require.Equal(t, 5, u.SubmissionsAt(t0))

	// A reservation released (its publish failed) frees its slot.
	require.NoError(t, l.Release(ctx, "team-a", "s0"))
	require.NoError(t, l.Reserve(ctx, "team-a", lim, participant.Spent{ID: "s9"}))
	// Reserving the same id again changes nothing.
	require.NoError(t, l.Release(ctx, "team-a", "s9"))
	require.NoError(t, l.Reserve(ctx, "team-a", lim, participant.Spent{ID: "s9"}))
	var r *participant.Refusal
	require.ErrorAs(t, l.Reserve(ctx, "team-a", lim, participant.Spent{ID: "s10"}), &r)

	other, err := l.Get(ctx, "team-b")
	require.NoError(t, err)
	require.Zero(t, other.SubmissionsAt(t0), "ledgers are per participant")
}

func completed(t *testing.T, job, submission string, hours float64) events.RunnerJobCompletedData {
	t.Helper()
	return events.RunnerJobCompletedData{JobID: job, Kind: events.JobQuality, SubmissionID: submission, Runner: "pod-0/runner-0", GPUHours: hours, Result: json.RawMessage(`{}`)}
}

// TestTallyChargesOwners: the GPU-hours of each outcome go to the
// participant whose submission the job served, once per outcome, from a
// consumer that resumes where it stopped after a restart.
func TestTallyChargesOwners(t *testing.T) {
	b, kv, recs := buckets(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for id, who := range map[string]string{"sub-a": "team-a", "sub-b": "team-b", "sub-x": "Not A Name"} {
		body, _ := json.Marshal(map[string]any{"id": id, "participant": who, "split": "dev"})
		_, err := recs.Put(ctx, id, body)
		require.NoError(t, err)
	}
	l := usage.New(kv, nil)
	run := func() (stop func()) {
		rctx, rcancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- usage.NewTally(b, l, recs, quiet).Run(rctx) }()
		return func() { rcancel(); require.NoError(t, <-done) }
	}
	gpu := func(name string) float64 {
		u, err := l.Get(ctx, name)
		require.NoError(t, err)
		return u.GPUHoursAt(time.Now())
	}

	stop := run()
	_, err := bus.Emit(ctx, b, events.Source("runner"), events.Job.Completed, "qual-a", completed(t, "qual-a", "sub-a", 0.5), bus.WithID("out-1"))
	require.NoError(t, err)
	_, err = bus.Emit(ctx, b, events.Source("runner"), events.Job.Completed, "qref-1", completed(t, "qref-1", "", 3), bus.WithID("out-ref"))
	require.NoError(t, err)
	_, err = bus.Emit(ctx, b, events.Source("runner"), events.Job.Failed, "eff-b", events.RunnerJobFailedData{
		JobID: "eff-b", Kind: events.JobEfficiency, SubmissionID: "sub-b", Runner: "r", Reason: "engine_oom", Message: "out of memory", GPUHours: 0.25}, bus.WithID("out-2"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return gpu("team-a") == 0.5 && gpu("team-b") == 0.25 }, 30*time.Second, 20*time.Millisecond)
	stop()

	// Restarted: the next outcome is charged, the first ones not again.
	stop = run()
	_, err = bus.Emit(ctx, b, events.Source("runner"), events.Job.Completed, "eff-a", completed(t, "eff-a", "sub-a", 0.125), bus.WithID("out-3"))
	require.NoError(t, err)
	_, err = bus.Emit(ctx, b, events.Source("runner"), events.Job.Completed, "eff-x", completed(t, "eff-x", "sub-x", 1), bus.WithID("out-x"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return gpu("team-a") == 0.625 }, 30*time.Second, 20*time.Millisecond)
	stop()
	require.Equal(t, 0.25, gpu("team-b"))
	u, err := l.Get(ctx, "team-a")
	require.NoError(t, err)
	require.Len(t, u.GPU, 2)
	require.ElementsMatch(t, []string{"sub-a", "sub-a"}, []string{u.GPU[0].Submission, u.GPU[1].Submission})
}

// TestTallyHandle: the decisions of one delivery.
func TestTallyHandle(t *testing.T) {
	b, kv, recs := buckets(t)
	ctx := context.Background()
	body, _ := json.Marshal(map[string]any{"id": "sub-a", "participant": "team-a"})
	_, err := recs.Put(ctx, "sub-a", body)
	require.NoError(t, err)
	l := usage.New(kv, nil)
	tally := usage.NewTally(b, l, recs, quiet)
	delivery := func(id, submission string, hours float64) *bus.Delivery {
		e, err := events.Job.Completed.Event(id, events.Source("runner"), "job-1", completed(t, "job-1", submission, hours))
		require.NoError(t, err)
		return &bus.Delivery{Event: e}
	}
	tests := []struct {
		name    string
		d       *bus.Delivery
		outcome string
		hours   float64
	}{
		{"charged", delivery("e1", "sub-a", 0.5), "ack", 0.5},
		{"the same outcome again: charged once", delivery("e1", "sub-a", 0.5), "ack", 0.5},
		{"another outcome", delivery("e2", "sub-a", 0.25), "ack", 0.75},
		{"no GPU time", delivery("e3", "sub-a", 0), "ack", 0.75},
		{"a submission not recorded yet: retried", delivery("e4", "sub-late", 1), "retry", 0.75},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.outcome, tally.Handle(ctx, tt.d).String())
			u, err := l.Get(ctx, "team-a")
			require.NoError(t, err)
			require.InDelta(t, tt.hours, u.GPUHoursAt(time.Now()), 1e-12)
		})
	}
}
