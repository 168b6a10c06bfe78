package projector

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
	"github.com/lowbarena/lowbarena/platform/store"
	_ "github.com/lowbarena/lowbarena/platform/store/chdb"
)

func TestProjectorWritesRecordsAndStageResults(t *testing.T) {
	b, _ := bustest.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	kv, err := b.JetStream().KeyValue(ctx, bus.BucketSubmissions)
	require.NoError(t, err)
	st, err := store.Open(ctx, "chdb://"+filepath.ToSlash(t.TempDir()))
	require.NoError(t, err)
	defer st.Close()

	failed := ev(t, events.BuildFailed, 2, events.StageFailedData{SubmissionID: sub, Stage: "build", Reason: "bundle_missing_file", Message: "the bundle has no config.json"})
	// The stage event first in the stream, all four there before the
	// projector starts: it reads build.started first and folds it onto the
	// submission.received read back from the stream. The failure is
	// published twice (a retried publish with the same id is
	// deduplicated; a redelivery would fold to no change).
	for _, e := range []event.Event{started(t, "build", 1), received(t), failed, failed} {
		_, err := b.Publish(ctx, e)
		require.NoError(t, err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- New(b, kv, st, nil).Run(runCtx) }()
	var rec record.Submission
	require.Eventually(t, func() bool {
		e, err := kv.Get(ctx, sub)
		if err != nil || json.Unmarshal(e.Value(), &rec) != nil {
			return false
		}
		return rec.Status == record.StatusFailed
	}, 30*time.Second, 100*time.Millisecond)
	require.Equal(t, want("failed", "skipped", "build:failed"), statuses(&rec))
	require.Equal(t, "bundle_missing_file", rec.Error.Code)
	// received, started and failed, each folded once; the received's
	// own delivery, after the record exists, changes nothing.
	require.Equal(t, 3, rec.Events)
	require.NotNil(t, rec.Stages[0].StartedAt)

	var rows []store.StageResult
	require.Eventually(t, func() bool {
		rows = nil
		return st.Select(ctx, &rows, "SELECT * FROM stage_results FINAL WHERE submission_id = ?", sub) == nil && len(rows) > 0
	}, 30*time.Second, 100*time.Millisecond)
	require.Len(t, rows, 1)
	require.Equal(t, "build", rows[0].Stage)
	require.Equal(t, record.StatusFailed, rows[0].Status)
	require.Equal(t, "bundle_missing_file", rows[0].Reason)
	require.Equal(t, failed.ID(), rows[0].EventID)

	stop()
	require.NoError(t, <-done)
}

// TestStageEventOvertakesItsReceived hands the projector stage events
// whose submission.received it has not folded: the gateway that held the
// received died with it unsettled, so the received comes back only after
// its ack deadline, later than the stage events would spend their
// deliveries. A stage event whose received is in the stream is folded
// onto it at once; one whose received is nowhere waits for it.
func TestStageEventOvertakesItsReceived(t *testing.T) {
	b, _ := bustest.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	kv, err := b.JetStream().KeyValue(ctx, bus.BucketSubmissions)
	require.NoError(t, err)
	p := New(b, kv, nil, nil)

	failed := ev(t, events.BuildFailed, 2, events.StageFailedData{SubmissionID: sub, Stage: "build", Reason: "bundle_missing_file", Message: "the bundle has no config.json"})
	tests := []struct {
		name      string
		publish   []event.Event
		wantRetry bool
		wantState []string
	}{
		{name: "the received is not in the stream: wait for it", publish: nil, wantRetry: true},
		{name: "the received is in the stream, not folded: fold it first", publish: []event.Event{received(t)},
			wantState: want("failed", "skipped", "build:failed")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, e := range tc.publish {
				_, err := b.Publish(ctx, e)
				require.NoError(t, err)
			}
			out := p.Handle(ctx, &bus.Delivery{Event: failed, NumDelivered: 1})
			if tc.wantRetry {
				require.True(t, out.IsRetry(), "outcome %s", out)
				require.ErrorIs(t, out.Err(), ErrNoRecord)
				_, err := kv.Get(ctx, sub)
				require.ErrorIs(t, err, jetstream.ErrKeyNotFound, "no record made up without its received")
				return
			}
			require.True(t, out.IsAck(), "outcome %s", out)
			e, err := kv.Get(ctx, sub)
			require.NoError(t, err)
			var rec record.Submission
			require.NoError(t, json.Unmarshal(e.Value(), &rec))
			require.Equal(t, tc.wantState, statuses(&rec))
			require.Equal(t, "bundle_missing_file", rec.Error.Code)
			require.Equal(t, 2, rec.Events, "the received and the failure")
			// The received's own delivery, later, changes nothing.
			rev := e.Revision()
			require.True(t, p.Handle(ctx, &bus.Delivery{Event: received(t), NumDelivered: 2}).IsAck())
			e, err = kv.Get(ctx, sub)
			require.NoError(t, err)
			require.Equal(t, rev, e.Revision())
		})
	}
}
