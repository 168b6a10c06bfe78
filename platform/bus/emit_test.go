package bus_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
)

// TestEmitIDs: CausedBy derives the event's id from the cause, the
// topic's type and the parts, in that order (events.DeriveID); WithID
// gives it as is; an Emit without an id publishes nothing. Emitting the
// same cause again is a duplicate.
func TestEmitIDs(t *testing.T) {
	b, _ := bustest.Bus(t)
	ctx := tctx(t)
	started := func(attempt int) events.StageStartedData {
		return events.StageStartedData{SubmissionID: bustest.SampleSubject, Stage: "build", Attempt: attempt}
	}
	for _, tc := range []struct {
		name string
		id   bus.ID
		want string
	}{
		{"caused by", bus.CausedBy("cause-1"), events.DeriveID("cause-1", string(events.BuildStarted))},
		{"caused by, with parts", bus.CausedBy("cause-1", "2", "x"), events.DeriveID("cause-1", string(events.BuildStarted), "2", "x")},
		{"given", bus.WithID("given-1"), "given-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ack, err := bus.Emit(ctx, b, events.Source("test"), events.Build.Started, bustest.SampleSubject, started(1), tc.id)
			require.NoError(t, err)
			require.False(t, ack.Duplicate)
			msgs := bustest.StreamMsgs(t, b, events.StreamArena)
			require.Equal(t, tc.want, msgs[len(msgs)-1].Header.Get("Nats-Msg-Id"))

			again, err := bus.Emit(ctx, b, events.Source("test"), events.Build.Started, bustest.SampleSubject, started(2), tc.id)
			require.NoError(t, err)
			require.True(t, again.Duplicate, "the same id is stored once")
		})
	}
	before := len(bustest.StreamMsgs(t, b, events.StreamArena))
	_, err := bus.Emit(ctx, b, events.Source("test"), events.Build.Started, bustest.SampleSubject, started(1), bus.ID{})
	require.ErrorContains(t, err, "without an id")
	require.Len(t, bustest.StreamMsgs(t, b, events.StreamArena), before, "nothing published")
}
