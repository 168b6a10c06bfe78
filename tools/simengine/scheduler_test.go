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

// TestSGLangGaugeCadence runs one sequence through the scheduler with
// SGLang's gauges observing every step: with --decode-log-interval 40 they
// update on the prefill batch and every 40th decode step and are stale in
// between (their used tokens lag the scheduler's); with 1 they match the
// scheduler after every step.
func TestSGLangGaugeCadence(t *testing.T) {
	for _, tc := range []struct {
		interval  int64
		wantStale bool
	}{{40, true}, {1, false}} {
		p := tinyPlan(t, 0)
		sched := NewScheduler(p, 8)
		sched.Clock = &overshootClock{now: time.Unix(1e9, 0)}
		var lines []string
		g := &CadenceGauges{Interval: tc.interval, PoolTokens: p.KVTokens(), Log: func(s string) { lines = append(lines, s) }}
		type obs struct {
			step    StepInfo
			updated bool
			gauge   Stats
		}
		var seen []obs
		sched.OnStep = func(si StepInfo) {
			up := g.Observe(si)
			st, _, _ := g.Snapshot()
			seen = append(seen, obs{si, up, st})
		}
		ctx, cancel := context.WithCancel(context.Background())
		r, err := sched.Submit(ctx, 10, 100)
		require.NoError(t, err)
		go sched.Run(ctx)
		for range r.Tokens {
		}
		cancel()
		require.Len(t, seen, 100, "one step per generated token")
		stale := 0
		for i, o := range seen {
			wantUpdate := o.step.Prefill() || o.step.Stats.DecodeSteps%tc.interval == 0
			require.Equal(t, wantUpdate, o.updated, "step %d", i+1)
			if o.updated {
				require.Equal(t, o.step.Stats, o.gauge, "step %d", i+1)
				continue
			}
			stale++
			require.NotEqual(t, o.step.Stats.ResidentTokens, o.gauge.ResidentTokens, "a stale gauge holds an older count, step %d", i+1)
		}
		require.Equal(t, tc.wantStale, stale > 0, "interval %d", tc.interval)
		require.True(t, seen[0].step.Prefill())
		require.Contains(t, lines[0], "Prefill batch, #new-seq: 1, #new-token: 10, #cached-token: 0,")
		if tc.interval == 40 {
			// The prefill batch, then decode steps 40 and 80 of 99.
			require.Len(t, lines, 3)
			require.Regexp(t, `^Decode batch, #running-req: 1, #token: 51, token usage: 0\.00, cuda graph: True, gen throughput \(token/s\): [0-9.]+, #queue-req: 0$`, lines[1])
		} else {
			require.Len(t, lines, 100)
		}
	}
}
