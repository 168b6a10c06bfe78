package bus_test

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
)

// BenchmarkPublishConsumeOneHop measures one hop of the pipeline: Publish
// (schema validation, encoding, a JetStream publish acknowledged by the
// server) and a consumer receiving, decoding, validating and acking it
// (DoubleAck, confirmed by the server). Each op waits for its event to be
// handled, so ns/op is the hop's latency and events/s its serial rate.
func BenchmarkPublishConsumeOneHop(b *testing.B) {
	bs, _ := bustest.Bus(b, bus.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	handled := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- bs.Consume(ctx, bus.ConsumerConfig{Name: "bench", Subjects: []string{events.FilterFor(events.BuildStarted)}},
			func(context.Context, *bus.Delivery) bus.Outcome {
				handled <- struct{}{}
				return bus.Ack()
			})
	}()
	b.Cleanup(func() {
		cancel()
		require.NoError(b, <-done)
	})
	data := bustest.Sample(events.BuildStarted)
	pctx := context.Background()
	publish := func(i int) {
		if _, err := bs.PublishNew(pctx, "bench-"+strconv.Itoa(i), events.BuildStarted, events.Source("bench"), bustest.SampleSubject, data); err != nil {
			b.Fatal(err)
		}
		select {
		case <-handled:
		case <-time.After(wait):
			b.Fatal("event not handled")
		}
	}
	publish(-1) // warm up: the consumer exists and is pulling
	start := time.Now()
	for i := 0; b.Loop(); i++ {
		publish(i)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
}

// BenchmarkGuard measures what watching for a refusal adds to every
// publish (Publish runs under Guard): registering the waiter, a context
// with a cause, and removing it.
func BenchmarkGuard(b *testing.B) {
	bs, _ := bustest.Bus(b)
	ctx := context.Background()
	noop := func(context.Context) error { return nil }
	for b.Loop() {
		if err := bs.Guard(ctx, noop, "arena.build.started."+bustest.SampleSubject); err != nil {
			b.Fatal(err)
		}
	}
}
