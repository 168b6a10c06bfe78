package bus_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
)

// TestHandlersRunAtOnceAndAllSettleAtDrain: a consumer with Handlers n
// runs n handlers at once and never more, each message handled once;
// a stop while handlers run returns once every one has returned, and
// the server then holds every ack.
func TestHandlersRunAtOnceAndAllSettleAtDrain(t *testing.T) {
	for _, tc := range []struct {
		name     string
		handlers int
		// want is the most handlers seen running at once.
		want int
	}{
		{"default, one at a time", 0, 1},
		{"three at once", 3, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, srv := bustest.Bus(t)
			b, err := bus.New(bustest.Connect(t, srv))
			require.NoError(t, err)
			const n = 12
			for i := range n {
				bustest.PublishSample(t, b, events.BuildStarted, "handlers-"+strconv.Itoa(i))
			}
			cfg := bus.ConsumerConfig{Name: "handlers", Subjects: []string{events.FilterFor(events.BuildStarted)}, AckWait: 5 * time.Second, Prefetch: 1, Handlers: tc.handlers}
			var running, most atomic.Int64
			var mu sync.Mutex
			seen := map[string]int{}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				done <- b.Consume(ctx, cfg, func(_ context.Context, d *bus.Delivery) bus.Outcome {
					now := running.Add(1)
					defer running.Add(-1)
					for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
					}
					mu.Lock()
					seen[d.Event.ID()]++
					if len(seen) == n {
						// The last one has started: the stop must
						// wait for the handlers still running.
						cancel()
					}
					mu.Unlock()
					// Long enough for the others to start, when allowed.
					time.Sleep(100 * time.Millisecond)
					return bus.Ack()
				})
			}()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(wait):
				t.Fatal("Consume did not return")
			}
			require.Zero(t, running.Load(), "no handler runs once Consume returned")
			require.Equal(t, int64(tc.want), most.Load())
			require.Len(t, seen, n)
			for s, k := range seen {
				require.Equal(t, 1, k, "%s handled once", s)
			}
			require.Eventually(t, func() bool {
				info := bustest.ConsumerInfo(t, b, events.StreamArena, "handlers")
				return info.NumAckPending == 0 && info.AckFloor.Stream == uint64(n)
			}, wait, 10*time.Millisecond, "every ack reached the server")
		})
	}
}
