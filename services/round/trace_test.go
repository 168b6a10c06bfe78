package round_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/lowbarena/lowbarena/domain/examples"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/ctl"
	"github.com/lowbarena/lowbarena/services/round"
)

// One round is one trace: its start is a span, and every event of the
// round is published in that span's trace, those the start carries out
// and those the ticker carries out later from the round's stored state
// (here: no runner, so each entry's job times out on a tick and the round
// ends on one).
func TestRoundIsOneTrace(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	h := setup(t, "traced", nil, bus.WithTracerProvider(tp))
	h.register(h.pod, "stand-in", events.JobSLA)
	h.service(round.Options{EntryTimeout: 500 * time.Millisecond, LeaseTTL: 1500 * time.Millisecond})
	h.submit("c1", h.bundle("fp8-w8a8"), true, true, 1.4)
	rep, err := h.start(ctl.StartRequest{Campaign: examples.TaskID, Candidates: []string{"c1"}})
	require.NoError(t, err)
	h.awaitEnd(rep.RoundID)

	attr := func(s sdktrace.ReadOnlySpan, k string) string {
		for _, kv := range s.Attributes() {
			if string(kv.Key) == k {
				return kv.Value.String()
			}
		}
		return ""
	}
	var start sdktrace.ReadOnlySpan
	require.Eventually(t, func() bool {
		for _, s := range rec.Ended() {
			if s.Name() == "round start" && attr(s, string(bus.AttrRound)) == rep.RoundID {
				start = s
				return true
			}
		}
		return false
	}, 15*time.Second, 10*time.Millisecond)
	require.Equal(t, trace.SpanKindServer, start.SpanKind())
	st, _ := h.state(rep.RoundID)
	require.NotEmpty(t, st.Trace["traceparent"], "the round keeps its trace context")

	// The round.completed is stored (awaitEnd saw it) before its publish
	// span ends: wait for the span.
	var producers []sdktrace.ReadOnlySpan
	published := map[string]int{}
	require.Eventually(t, func() bool {
		producers, published = nil, map[string]int{}
		for _, s := range rec.Ended() {
			if s.SpanKind() == trace.SpanKindProducer && attr(s, string(bus.AttrRound)) == rep.RoundID {
				producers = append(producers, s)
				published[attr(s, string(bus.AttrEventType))]++
			}
		}
		return published[string(events.RoundCompleted)] > 0
	}, 15*time.Second, 10*time.Millisecond)
	for _, s := range producers {
		require.Equal(t, start.SpanContext().TraceID(), s.SpanContext().TraceID(), "%s is in the round's trace", attr(s, string(bus.AttrEventType)))
	}
	require.NotZero(t, published[string(events.RoundStarted)])
	require.NotZero(t, published[string(events.RoundCompleted)], "the end, carried out on a tick")
	require.Greater(t, published[string(events.RoundStep)], 2, "the steps, at the start and on ticks")
	require.NotZero(t, published[string(events.RunnerJobRequested)])
}
