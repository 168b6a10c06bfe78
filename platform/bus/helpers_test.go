package bus_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/lowbarena/lowbarena/platform/bus"
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
