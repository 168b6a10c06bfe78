package workqueue_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
	"github.com/lowbarena/lowbarena/platform/workqueue"
)

// TestConsumeFirstPrefersEarlierDurables: with messages waiting on two
// durables, ConsumeFirst handles every message of the first before any of
// the second, one at a time (never two handlers at once), settles each,
// and returns nil once its context ends.
func TestConsumeFirstPrefersEarlierDurables(t *testing.T) {
	b, srv := bustest.Bus(t)
	other, err := bus.New(bustest.Connect(t, srv))
	require.NoError(t, err)
	first := bus.ConsumerConfig{Name: "first", Subjects: []string{events.FilterFor(events.BuildStarted)}, Prefetch: 1}
	second := bus.ConsumerConfig{Name: "second", Subjects: []string{events.FilterFor(events.ContractStarted)}, Prefetch: 1}
	for i := range 3 {
		bustest.PublishSample(t, b, events.ContractStarted, "c-"+strconv.Itoa(i))
		bustest.PublishSample(t, b, events.BuildStarted, "b-"+strconv.Itoa(i))
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	seen := make(chan string, 16)
	running := make(chan struct{}, 1) // holds a token while a handler runs
	errc := make(chan error, 1)
	go func() {
		errc <- workqueue.ConsumeFirst(ctx, b, []bus.ConsumerConfig{first, second}, 100*time.Millisecond, func(_ context.Context, d *bus.Delivery) bus.Outcome {
			select {
			case running <- struct{}{}:
			default:
				t.Error("two handlers at once")
			}
			defer func() { <-running }()
			seen <- d.Event.ID()
			return bus.Ack()
		})
	}()
	var got []string
	for len(got) < 6 {
		select {
		case id := <-seen:
			got = append(got, id)
		case <-time.After(wait):
			t.Fatalf("handled only %v", got)
		}
	}
	require.Equal(t, []string{"b-0", "b-1", "b-2", "c-0", "c-1", "c-2"}, got)
	cancel()
	select {
	case err := <-errc:
		require.NoError(t, err)
	case <-time.After(wait):
		t.Fatal("ConsumeFirst did not return after its context ended")
	}
	// Every message was acked (the server applies an ack a moment after
	// it reads it: a bounded wait, not a speed assertion).
	for _, name := range []string{"first", "second"} {
		require.Eventually(t, func() bool {
			info := bustest.ConsumerInfo(t, other, events.StreamArena, name)
			return info.NumAckPending == 0 && info.NumPending == 0 && info.AckFloor.Consumer == 3
		}, wait, 50*time.Millisecond, name)
	}
}
