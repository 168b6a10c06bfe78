package main

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// overshootClock is a clock whose every sleep returns a fixed time after
// its deadline, as a timer on a loaded machine does, and returns at once
// for a deadline already past, as the wall clock does; it never really
// sleeps, so the test asserts the scheduler's accounting, not a time.
type overshootClock struct {
	mu        sync.Mutex
	now       time.Time
	overshoot time.Duration
	sleeps    int
}

func (c *overshootClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *overshootClock) SleepUntil(ctx context.Context, t time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sleeps++
	if !t.After(c.now) {
		return ctx.Err() == nil
	}
	c.now = t.Add(c.overshoot)
	return ctx.Err() == nil
}

// TestVirtualClockPacing runs one wave of sequences under a clock that
// overshoots every sleep, and checks that the run takes the roofline time
// of its steps (computed from StepTime, independently of the scheduler)
// plus one overshoot, not one per step; and that an overshoot past MaxLag
// restarts the virtual clock each step instead of racing a backlog.
func TestVirtualClockPacing(t *testing.T) {
	const seqs, prompt, maxTokens = 8, 100, 64
	p := benchPlan(t)
	roofline := time.Duration(rooflineSeconds(p, seqs, seqs, prompt, maxTokens) * float64(time.Second))
	for _, tc := range []struct {
		name      string
		overshoot time.Duration
		want      time.Duration // elapsed on the clock
	}{
		{"exact timers", 0, roofline},
		{"overshoot 300us of a 4ms step", 300 * time.Microsecond, roofline + 300*time.Microsecond},
		{"overshoot half a step", 2 * time.Millisecond, roofline + 2*time.Millisecond},
		{"overshoot past MaxLag", MaxLag + time.Millisecond, roofline + maxTokens*(MaxLag+time.Millisecond)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Unix(1e9, 0)
			clock := &overshootClock{now: start, overshoot: tc.overshoot}
			sched := NewScheduler(p, seqs)
			sched.Clock = clock
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var reqs []*Request
			for range seqs {
				r, err := sched.Submit(ctx, prompt, maxTokens)
				require.NoError(t, err)
				reqs = append(reqs, r)
			}
			go sched.Run(ctx)
			var got int64
			for _, r := range reqs {
				for range r.Tokens {
					got++
				}
			}
			require.Equal(t, int64(seqs*maxTokens), got)
			require.Equal(t, roofline, sched.Busy())
			clock.mu.Lock()
			defer clock.mu.Unlock()
			require.Equal(t, maxTokens, clock.sleeps)
			require.Equal(t, tc.want, clock.now.Sub(start))
		})
	}
}
