package bus_test

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
)

// TestLast: the newest event of a topic about an id, decoded; none for an
// id the stream holds nothing of, or one that names no subject.
func TestLast(t *testing.T) {
	b, _ := bustest.Bus(t)
	ctx := tctx(t)
	stream, err := b.JetStream().Stream(ctx, events.StreamArena)
	require.NoError(t, err)

	_, ok, err := bus.Last(ctx, stream, events.Build.Started, bustest.SampleSubject)
	require.NoError(t, err)
	require.False(t, ok, "nothing stored yet")

	for attempt := 1; attempt <= 2; attempt++ {
		_, err := bus.Emit(ctx, b, events.Source("test"), events.Build.Started, bustest.SampleSubject,
			events.StageStartedData{SubmissionID: bustest.SampleSubject, Stage: "build", Attempt: attempt}, bus.WithID("started-"+strconv.Itoa(attempt)))
		require.NoError(t, err)
	}
	got, ok, err := bus.Last(ctx, stream, events.Build.Started, bustest.SampleSubject)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, 2, got.Attempt, "the newest")
	require.Equal(t, bustest.SampleSubject, got.SubmissionID)

	_, ok, err = bus.Last(ctx, stream, events.Build.Completed, bustest.SampleSubject)
	require.NoError(t, err)
	require.False(t, ok, "another topic about the same id")
	_, ok, err = bus.Last(ctx, stream, events.Build.Started, "not an id")
	require.NoError(t, err)
	require.False(t, ok)
}
