package bus_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
)

// wait bounds every wait for something to arrive; it is never a speed
// assertion.
const wait = 15 * time.Second

func tctx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// consume runs b.Consume in the background until the end of the test and
// requires that it returned without error.
func consume(t *testing.T, b *bus.Bus, cfg bus.ConsumerConfig, h bus.Handler) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- b.Consume(ctx, cfg, h) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-errc:
			require.NoError(t, err)
		case <-time.After(wait):
			t.Error("Consume did not return after its context ended")
		}
	})
}

// publishSample publishes the sample payload of typ with the given id.
func publishSample(t *testing.T, b *bus.Bus, typ events.Type, id string) *jetstream.PubAck {
	t.Helper()
	ack, err := b.PublishNew(tctx(t), id, typ, events.Source("test"), bustest.SampleSubject, bustest.Sample(typ))
	require.NoError(t, err)
	return ack
}

// streamMsgs returns every message stored in a stream, in order.
func streamMsgs(t *testing.T, b *bus.Bus, name string) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx := tctx(t)
	s, err := b.JetStream().Stream(ctx, name)
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	var out []*jetstream.RawStreamMsg
	if info.State.Msgs == 0 {
		return nil
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			continue // deleted (work queue) messages leave gaps
		}
		out = append(out, m)
	}
	return out
}

func consumerInfo(t *testing.T, b *bus.Bus, stream, name string) *jetstream.ConsumerInfo {
	t.Helper()
	c, err := b.JetStream().Consumer(tctx(t), stream, name)
	require.NoError(t, err)
	info, err := c.Info(tctx(t))
	require.NoError(t, err)
	return info
}

// counterBy sums an int64 counter's data points by the value of one
// attribute.
func counterBy(t *testing.T, r *sdkmetric.ManualReader, name, key string) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, r.Collect(context.Background(), &rm))
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			sum, ok := m.Data.(metricdata.Sum[int64])
			require.True(t, ok, "%s is an int64 sum", name)
			for _, dp := range sum.DataPoints {
				v, _ := dp.Attributes.Value(attribute.Key(key))
				out[v.AsString()] += dp.Value
			}
		}
	}
	return out
}

// recorder collects deliveries a handler saw.
type recorder struct {
	mu   sync.Mutex
	seen []*bus.Delivery
	ch   chan *bus.Delivery
}

func newRecorder() *recorder { return &recorder{ch: make(chan *bus.Delivery, 1024)} }

func (r *recorder) add(d *bus.Delivery) {
	r.mu.Lock()
	r.seen = append(r.seen, d)
	r.mu.Unlock()
	r.ch <- d
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen)
}

func (r *recorder) next(t *testing.T) *bus.Delivery {
	t.Helper()
	select {
	case d := <-r.ch:
		return d
	case <-time.After(wait):
		t.Fatal("no delivery arrived")
		return nil
	}
}
