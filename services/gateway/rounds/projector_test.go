package rounds

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
)

func readView(t *testing.T, ctx context.Context, kv jetstream.KeyValue, id string) (View, uint64) {
	t.Helper()
	e, err := kv.Get(ctx, id)
	require.NoError(t, err)
	var v View
	require.NoError(t, json.Unmarshal(e.Value(), &v))
	return v, e.Revision()
}

// TestProjectorWritesOnlyWhatChanges steps the projector's durable one
// event at a time, handling each delivery twice (a redelivery): the view
// is written once per event that changes it, and neither the redelivery
// nor a late step writes again.
func TestProjectorWritesOnlyWhatChanges(t *testing.T) {
	b, _ := bustest.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	kv, err := b.JetStream().KeyValue(ctx, bus.BucketRoundViews)
	require.NoError(t, err)
	p := New(b, kv, nil)

	late := stepEv(t, 1, events.StepRunning, at(t1), nil)
	late.SetID("ev-late-running")
	evs := []event.Event{startedEv(t), stepEv(t, 1, events.StepRunning, at(t1), nil), stepEv(t, 1, events.StepDone, at(t1), at(t2)), late, completedEv(t)}
	for _, e := range evs {
		_, err := b.Publish(ctx, e)
		require.NoError(t, err)
	}
	var revs, again []uint64
	for range evs {
		out, err := b.Next(ctx, Consumer(), 10*time.Second, func(ctx context.Context, d *bus.Delivery) bus.Outcome {
			first := p.Handle(ctx, d)
			e, err := kv.Get(ctx, rid)
			if err != nil {
				return bus.Retry(0, err)
			}
			revs = append(revs, e.Revision())
			if o := p.Handle(ctx, d); !o.IsAck() {
				return o
			}
			if e, err = kv.Get(ctx, rid); err != nil {
				return bus.Retry(0, err)
			}
			again = append(again, e.Revision())
			return first
		})
		require.NoError(t, err)
		require.True(t, out.IsAck(), "%s", out)
	}
	require.Equal(t, []uint64{1, 2, 3, 3, 4}, revs, "the late running step writes nothing")
	require.Equal(t, revs, again, "a redelivery writes nothing")

	v, _ := readView(t, ctx, kv, rid)
	require.Equal(t, StatusComplete, v.Status)
	require.Equal(t, "sub-1", v.Result.Leader)
	require.Equal(t, []Step{viewStep(1, events.StepDone, at(t1), at(t2)), pending(2), pending(3)}, v.Steps)
}

// TestProjectorsRaceOnOneView: two gateways share the durable, so both
// fold steps of the same round at once; compare-and-set loses no step.
func TestProjectorsRaceOnOneView(t *testing.T) {
	b, _ := bustest.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	kv, err := b.JetStream().KeyValue(ctx, bus.BucketRoundViews)
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { _ = New(b, kv, nil).Run(runCtx) })
	}
	const n = 24
	publish := func(e event.Event, err error) {
		t.Helper()
		require.NoError(t, err)
		_, err = b.Publish(ctx, e)
		require.NoError(t, err)
	}
	publish(events.Round.Started.Event("ev-started", events.Source("round"), rid,
		events.RoundStartedData{RoundID: rid, Campaign: "tiny", Pod: "pod-a", Candidates: []string{"sub-1"}, Steps: n}))
	for i := 1; i <= n; i++ {
		publish(events.Round.Step.Event(fmt.Sprintf("ev-step-%d", i), events.Source("round"), rid,
			events.RoundStepData{RoundID: rid, Step: i, Of: n, Group: "sla", Name: fmt.Sprintf("step %d", i), Phase: "serve", Status: events.StepDone}))
	}
	publish(events.Round.Completed.Event("ev-completed", events.Source("round"), rid, events.RoundCompletedData{RoundID: rid, Campaign: "tiny", Leader: "sub-1"}))

	require.Eventually(t, func() bool {
		e, err := kv.Get(ctx, rid)
		if err != nil {
			return false
		}
		var v View
		if json.Unmarshal(e.Value(), &v) != nil || v.Status != StatusComplete || len(v.Steps) != n {
			return false
		}
		for _, s := range v.Steps {
			if s.Status != events.StepDone {
				return false
			}
		}
		return true
	}, 30*time.Second, 50*time.Millisecond, "every step of the round is done in its view")
	stop()
	wg.Wait()
	v, _ := readView(t, ctx, kv, rid)
	require.Equal(t, "tiny", v.Campaign)
	require.Equal(t, fmt.Sprintf("step %d", n), v.Steps[n-1].Name)
}
