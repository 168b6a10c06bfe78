package workqueue_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
	"github.com/lowbarena/lowbarena/platform/workqueue"
)

// TestDeadLetterHookSeesGivenUpWork: an OnDeadLetter hook is told of a
// message the consumer gives up, with its event, reason, last error and
// deliveries, before the dead-letter copy is stored; a hook that fails
// keeps the message (it comes back, and the hook is asked again, on as
// many deliveries past MaxDeliver as it takes) rather than losing what the
// hook publishes.
func TestDeadLetterHookSeesGivenUpWork(t *testing.T) {
	for _, tc := range []struct {
		name string
		// failures is how many calls of the hook fail before one succeeds.
		failures int
		// calls and deliveries are what the hook sees in all and last.
		calls      int
		deliveries uint64
		lastErr    string
		// stillHeld makes the failing calls say workqueue.ErrStillHeld.
		stillHeld bool
	}{
		{"the hook publishes at once", 0, 1, 2, "store unreachable", false},
		// The failed call Naks the second delivery; the third is given up
		// before the handler runs (it had its MaxDeliver).
		{"a failing hook keeps the message", 1, 2, 3, "without an outcome", false},
		// Past MaxDeliver the message still comes back while its hook
		// fails (the server's limit is the loop's, not one delivery past
		// it), so the hook is asked until it succeeds; the handler does
		// not run again.
		{"a hook failing past the last delivery is asked again", 2, 3, 4, "without an outcome", false},
		// Work still held by a live handler elsewhere is not given up:
		// the message comes back (a third of AckWait later) and the hook
		// is asked again, until it lets it go.
		{"work still held elsewhere is asked about again", 2, 3, 4, "without an outcome", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, _ := bustest.Bus(t)
			var mu sync.Mutex
			var seen []bus.DeadLetter
			dlqAtCall := []int{}
			handled := 0
			bustest.Consume(t, b, bus.ConsumerConfig{Name: "hooked", MaxDeliver: 2, AckWait: 3 * time.Second, DeadLetterPolicy: workqueue.OnDeadLetter(func(_ context.Context, dl bus.DeadLetter) error {
				mu.Lock()
				defer mu.Unlock()
				seen = append(seen, dl)
				dlqAtCall = append(dlqAtCall, len(bustest.StreamMsgs(t, b, events.StreamDLQ)))
				if len(seen) <= tc.failures {
					if tc.stillHeld {
						return fmt.Errorf("%w: on another runner", workqueue.ErrStillHeld)
					}
					return errors.New("NATS away")
				}
				return nil
			})}, func(_ context.Context, d *bus.Delivery) bus.Outcome {
				mu.Lock()
				handled++
				mu.Unlock()
				return bus.Retry(10*time.Millisecond, errors.New("store unreachable"))
			})
			bustest.PublishSample(t, b, events.BuildStarted, "given-up-1")
			require.Eventually(t, func() bool { return len(bustest.StreamMsgs(t, b, events.StreamDLQ)) == 1 }, wait, 20*time.Millisecond)
			mu.Lock()
			defer mu.Unlock()
			require.Len(t, seen, tc.calls)
			last := seen[len(seen)-1]
			require.Equal(t, "given-up-1", last.Event.ID())
			require.Equal(t, string(events.BuildStarted), last.Event.Type())
			require.Equal(t, "hooked", last.Consumer)
			require.Equal(t, reason.MaxDeliverExceeded, last.Reason)
			require.Equal(t, tc.deliveries, last.Deliveries)
			require.ErrorContains(t, last.Err, tc.lastErr)
			require.Equal(t, make([]int, tc.calls), dlqAtCall, "the hook runs before the dead-letter copy is stored")
			require.Equal(t, 2, handled, "the handler ran MaxDeliver times")
		})
	}
}

// TestDeadLetterHookIsNotToldOfUndecodableMessages: a message that is not
// an event of the arena has no event to hand the hook; it is dead-lettered
// without it.
func TestDeadLetterHookIsNotToldOfUndecodableMessages(t *testing.T) {
	b, _ := bustest.Bus(t)
	called := make(chan bus.DeadLetter, 4)
	bustest.Consume(t, b, bus.ConsumerConfig{Name: "hooked-raw", DeadLetterPolicy: workqueue.OnDeadLetter(func(_ context.Context, dl bus.DeadLetter) error {
		called <- dl
		return nil
	})}, func(context.Context, *bus.Delivery) bus.Outcome { return bus.Ack() })
	_, err := b.JetStream().Publish(tctx(t), "arena.build.started.x", []byte("not an event"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(bustest.StreamMsgs(t, b, events.StreamDLQ)) == 1 }, wait, 20*time.Millisecond)
	require.Empty(t, called)
}

// TestDeadLetterHookSettlesEndedWork: a hook that says
// workqueue.ErrSettled (the message's work ended on an earlier delivery
// whose ack never reached the server) has the message acked: no
// dead-letter copy, nothing pending, the handler not run again.
func TestDeadLetterHookSettlesEndedWork(t *testing.T) {
	b, _ := bustest.Bus(t)
	var mu sync.Mutex
	calls, handled := 0, 0
	bustest.Consume(t, b, bus.ConsumerConfig{Name: "settled", MaxDeliver: 2, AckWait: 3 * time.Second, DeadLetterPolicy: workqueue.OnDeadLetter(func(_ context.Context, dl bus.DeadLetter) error {
		mu.Lock()
		defer mu.Unlock()
		calls++
		return fmt.Errorf("%w: its outcome is stored", workqueue.ErrSettled)
	})}, func(_ context.Context, d *bus.Delivery) bus.Outcome {
		mu.Lock()
		handled++
		mu.Unlock()
		return bus.Retry(10*time.Millisecond, errors.New("ack lost"))
	})
	ack := bustest.PublishSample(t, b, events.BuildStarted, "ended-1")
	require.Eventually(t, func() bool {
		return bustest.ConsumerInfo(t, b, events.StreamArena, "settled").AckFloor.Stream == ack.Sequence
	},
		wait, 20*time.Millisecond)
	info := bustest.ConsumerInfo(t, b, events.StreamArena, "settled")
	require.Zero(t, info.NumAckPending)
	require.Zero(t, info.NumPending)
	require.Empty(t, bustest.StreamMsgs(t, b, events.StreamDLQ), "nothing dead-lettered")
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 1, calls)
	require.Equal(t, 2, handled, "the handler ran MaxDeliver times, not after the hook")
}
