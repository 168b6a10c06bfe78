package app_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/lowbarena/lowbarena/observability"
	"github.com/lowbarena/lowbarena/platform/app"
)

// BenchmarkScrape measures one Prometheus scrape of a service's /metrics
// over loopback HTTP, with series as a busy service has them: a
// counter and a seconds histogram for 8 consumers × 16 event types × 3
// outcomes (384 series each), beside the Go and process collectors.
func BenchmarkScrape(b *testing.B) {
	m, err := app.NewMetrics()
	require.NoError(b, err)
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(m.Reader()))
	b.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	meter := mp.Meter("bench")
	c, err := meter.Int64Counter("lowbarena.events.consumed", metric.WithUnit("{event}"))
	require.NoError(b, err)
	h, err := meter.Float64Histogram("lowbarena.events.handler.duration", metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(observability.DurationBuckets...))
	require.NoError(b, err)
	ctx := context.Background()
	for i := range 8 {
		for j := range 16 {
			for _, o := range []string{"ack", "retry", "dead_lettered"} {
				attrs := metric.WithAttributes(attribute.String("consumer", fmt.Sprintf("c%d", i)),
					attribute.String("type", fmt.Sprintf("t%d", j)), attribute.String("outcome", o))
				c.Add(ctx, 1, attrs)
				h.Record(ctx, 0.01, attrs)
			}
		}
	}
	hs := httptest.NewServer(m.Handler(func(context.Context) error { return nil }))
	b.Cleanup(hs.Close)
	var size int
	b.ReportAllocs()
	for b.Loop() {
		resp, err := http.Get(hs.URL + app.PathMetrics)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		size = int(n)
	}
	b.ReportMetric(float64(size), "bytes/scrape")
}
