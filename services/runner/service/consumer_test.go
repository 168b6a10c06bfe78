package service_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/bus"
	"github.com/lowbarena/lowbarena/events/bustest"
	"github.com/lowbarena/lowbarena/services/runner/service"
)

// TestRunnerConsumerSettings: the runners' durable keeps prefetch 1 and the
// runner's own ack deadline (heartbeated every third of it by the consume
// loop), whatever the bus's default prefetch for short handlers is.
func TestRunnerConsumerSettings(t *testing.T) {
	b, _ := bustest.Bus(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		name    string
		ackWait time.Duration
		want    time.Duration
	}{
		{"default ack wait", 0, 30 * time.Second},
		{"configured ack wait", 5 * time.Minute, 5 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := service.New(context.Background(), b, log, service.Options{WorkDir: t.TempDir(), AckWait: tc.ackWait})
			require.NoError(t, err)
			c := s.Consumer()
			require.Equal(t, 1, c.Prefetch)
			require.Equal(t, tc.want, c.AckWait)
			require.Equal(t, events.StreamRunnerJobs, c.Stream)
			require.Equal(t, service.Name, c.Name)
		})
	}
}

// TestRunnerHoldsOneJobAtATime: a runner busy with a job holds no other;
// a job queued meanwhile goes to the next runner bound to the durable. With
// a prefetch above 1 the busy runner would have pulled the second job into
// its buffer, where it would wait behind the first with its ack timer
// running, and the idle runner would see it only once that timer ran out,
// as a redelivery.
func TestRunnerHoldsOneJobAtATime(t *testing.T) {
	b, _ := bustest.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := service.New(ctx, b, slog.New(slog.NewTextHandler(io.Discard, nil)), service.Options{WorkDir: t.TempDir()})
	require.NoError(t, err)

	type got struct {
		runner, job string
		delivery    uint64
	}
	seen := make(chan got, 8)
	release := make(chan struct{})
	run := func(name string) {
		rctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- b.Consume(rctx, s.Consumer(), func(hctx context.Context, d *bus.Delivery) bus.Outcome {
				seen <- got{name, d.Event.ID(), d.NumDelivered}
				if name == "busy" {
					select { // a long job
					case <-release:
					case <-hctx.Done():
						return bus.Retry(0, hctx.Err())
					}
				}
				return bus.Ack()
			})
		}()
		t.Cleanup(func() { stop(); require.NoError(t, <-done) })
	}
	next := func() got {
		select {
		case g := <-seen:
			return g
		case <-ctx.Done():
			t.Fatal("no job was handled")
			return got{}
		}
	}
	publish := func(id string) {
		_, err := b.PublishNew(ctx, id, events.RunnerJobRequested, events.Source("test"), id, bustest.Sample(events.RunnerJobRequested))
		require.NoError(t, err)
	}

	run("busy")
	publish("job-1")
	require.Equal(t, got{"busy", "job-1", 1}, next())
	publish("job-2") // queued while the only runner is busy
	run("idle")
	require.Equal(t, got{"idle", "job-2", 1}, next(), "the queued job goes to the idle runner on its first delivery")
	close(release)
}
