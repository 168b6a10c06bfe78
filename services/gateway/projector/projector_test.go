package projector

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/bus"
	"github.com/lowbarena/lowbarena/events/bustest"
	"github.com/lowbarena/lowbarena/services/domain/record"
	"github.com/lowbarena/lowbarena/services/store"
	_ "github.com/lowbarena/lowbarena/services/store/chdb"
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

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- New(b, kv, st, nil).Run(runCtx) }()

	failed := ev(t, events.BuildFailed, 2, events.StageFailedData{SubmissionID: sub, Stage: "build", Reason: "bundle_missing_file", Message: "the bundle has no config.json"})
	// The stage event first: the projector retries it until the record
	// exists. The failure is published twice (a retried publish with the
	// same id is deduplicated; a redelivery would fold to no change).
	for _, e := range []event.Event{started(t, "build", 1), received(t), failed, failed} {
		_, err := b.Publish(ctx, e)
		require.NoError(t, err)
	}
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
	// build.started arrived before its record and is retried; by then the
	// stage has ended, and a late start never moves it back.
	require.Equal(t, 2, rec.Events)
	require.Nil(t, rec.Stages[0].StartedAt)

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
