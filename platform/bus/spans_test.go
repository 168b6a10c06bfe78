package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/observability"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
)

func spanAttrs(s sdktrace.ReadOnlySpan) map[attribute.Key]string {
	m := map[attribute.Key]string{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value.String()
	}
	return m
}

// processSpans returns the ended process spans of consumer name.
func processSpans(rec *tracetest.SpanRecorder, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.SpanKind() == trace.SpanKindConsumer && spanAttrs(s)["messaging.consumer.group.name"] == name {
			out = append(out, s)
		}
	}
	return out
}

// What the process spans say of the message they handled and how it
// ended, for an event published with trace context, one published
// without (its consumers share a trace derived from its id), and one
// dead-lettered for its type (its span is in the publisher's trace, with
// an error status).
func TestProcessSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	b, _ := bustest.Bus(t, bus.WithTracerProvider(tp))
	ack := func(context.Context, *bus.Delivery) bus.Outcome { return bus.Ack() }
	bustest.Consume(t, b, bus.ConsumerConfig{Name: "one", Subjects: []string{"arena.build.started.>"}, AckWait: 2 * time.Second}, ack)
	bustest.Consume(t, b, bus.ConsumerConfig{Name: "two", Subjects: []string{"arena.build.started.>"}, AckWait: 2 * time.Second}, ack)
	good := `{"submission_id":"` + bustest.SampleSubject + `","stage":"build","attempt":1}`

	ctx, root := tp.Tracer("test").Start(tctx(t), "root")
	rootTrace := root.SpanContext().TraceID()
	traced := func(id string) nats.Header {
		h := rawHeader(id)
		observability.Propagator().Inject(ctx, observability.HeaderCarrier(h))
		return h
	}
	cases := []struct {
		name    string
		id      string
		header  func(id string) nats.Header
		trace   trace.TraceID
		outcome string
		reason  string
	}{
		{"traced", "traced-1", traced, rootTrace, "ack", ""},
		{"untraced", "untraced-1", rawHeader, bus.UntracedTraceID("untraced-1"), "ack", ""},
		{"dead-lettered", "unknown-1", func(id string) nats.Header {
			h := traced(id)
			h.Set("ce-type", "dev.lowbarena.nope.v1")
			return h
		}, rootTrace, "dead_lettered", string(reason.UnknownType)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			msg := &nats.Msg{Subject: "arena.build.started." + tc.id, Header: tc.header(tc.id), Data: []byte(good)}
			_, err := b.JetStream().PublishMsg(tctx(t), msg)
			require.NoError(t, err)
			of := func(name string) []sdktrace.ReadOnlySpan {
				var out []sdktrace.ReadOnlySpan
				for _, s := range processSpans(rec, name) {
					if spanAttrs(s)["messaging.destination.name"] == msg.Subject {
						out = append(out, s)
					}
				}
				return out
			}
			require.Eventually(t, func() bool { return len(of("one")) == 1 && len(of("two")) == 1 }, wait, 10*time.Millisecond)
			one, two := of("one")[0], of("two")[0]
			for _, s := range []sdktrace.ReadOnlySpan{one, two} {
				a := spanAttrs(s)
				require.Equal(t, tc.trace, s.SpanContext().TraceID(), "the trace of %s", tc.name)
				require.True(t, s.Parent().IsRemote(), "the parent came in the message")
				require.Equal(t, tc.outcome, a[bus.AttrOutcome])
				require.Equal(t, tc.reason, a[bus.AttrReason])
				if tc.outcome == "dead_lettered" {
					require.Equal(t, codes.Error, s.Status().Code)
					require.Equal(t, "process "+a["messaging.consumer.group.name"], s.Name(), "named by its consumer: the type is not one of the arena's")
					continue
				}
				require.Equal(t, codes.Unset, s.Status().Code)
				require.Equal(t, "process "+string(events.BuildStarted), s.Name())
				require.Equal(t, string(events.BuildStarted), a[bus.AttrEventType])
				require.Equal(t, bustest.SampleSubject, a[bus.AttrSubmission])
				require.Equal(t, "build", a[bus.AttrStage])
			}
			require.Equal(t, one.Parent().SpanID(), two.Parent().SpanID(), "both consumers are children of the same publish")
		})
	}
	root.End()
}
