package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/events"
)

func ev(t *testing.T, typ events.Type, subject string, data any) event.Event {
	t.Helper()
	e, err := events.NewEvent("id-"+subject+string(typ), typ, events.Source("test"), subject, data)
	require.NoError(t, err)
	e.SetTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.Local))
	return e
}

// TestFollowerLines: the lines `arena up` prints for the events a person
// follows, one per event (runner progress once per tenth off a terminal),
// and nothing for the events that are not theirs.
func TestFollowerLines(t *testing.T) {
	var b bytes.Buffer
	f := newFollower("nats://unused", []string{"build", "contract"}, &b)
	const id = "b0c4e95f426f48e2"
	ctx := context.Background()
	f.event(ctx, ev(t, events.BuildStarted, id, events.StageStartedData{SubmissionID: id, Stage: "build", Attempt: 1}))
	f.event(ctx, ev(t, events.ContractCompleted, id, events.ContractCompletedData{SubmissionID: id, DetectedPrecision: "W8A8KV8"}))
	f.event(ctx, ev(t, events.ContractFailed, id, events.StageFailedData{SubmissionID: id, Stage: "contract", Reason: "rope_changed", Message: "rope_theta differs"}))
	for _, done := range []int{0, 5, 50, 100} {
		f.event(ctx, ev(t, events.RunnerJobProgress, "job1", events.RunnerJobProgressData{JobID: "job1", Kind: "efficiency", SubmissionID: id,
			Phase: "staging", Done: done, Total: 100, Unit: events.UnitBytes}))
	}
	f.event(ctx, ev(t, events.RunnerJobCompleted, "job1", map[string]any{"job_id": "job1", "kind": "efficiency", "submission_id": id, "gpu_hours": 0.25}))
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	require.Equal(t, []string{
		"03:04:05  " + id + "  build      started",
		"03:04:05  " + id + "  contract   completed · reads W8A8KV8",
		"03:04:05  " + id + "  contract   FAILED rope_changed: rope_theta differs",
		"03:04:05  " + id + "  runner     efficiency job staging [....................] 0 B of 100 B (0%)",
		"03:04:05  " + id + "  runner     efficiency job staging [##########..........] 50 B of 100 B (50%)",
		"03:04:05  " + id + "  runner     efficiency job staging [####################] 100 B of 100 B (100%)",
		"03:04:05  " + id + "  runner     efficiency job completed (0.2500 GPU-hours)",
	}, lines)
}

// TestFollowerPrintsARecordOnceWhenSettled: a record is printed when every
// stage the arena serves has ended, and only once.
func TestFollowerPrintsARecordOnceWhenSettled(t *testing.T) {
	var b bytes.Buffer
	f := newFollower("nats://unused", []string{"build", "contract"}, &b)
	r := &record.Submission{ID: "abc", Status: record.StatusRunning, Stages: []record.Stage{
		{Name: "build", Status: record.StatusDone}, {Name: "contract", Status: record.StatusRunning}, {Name: "quality", Status: record.StatusPending}}}
	f.record(r)
	require.Empty(t, b.String(), "contract still runs")
	r.Stages[1].Status = record.StatusDone
	f.record(r)
	f.record(r)
	require.Equal(t, 1, strings.Count(b.String(), "submission abc  RUNNING"), b.String())
	require.Contains(t, b.String(), "stages      build done · contract done · quality pending")
}
