package api

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/bus"
)

// Every request is a server span: the child of the caller's traceparent
// when it sends one, named by its route (never a path with ids), with its
// status code and refusal code; only a 5xx is an error.
func TestServerSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	f := newFixture(t, func(o *Options) { o.Tracer = tp })
	f.putRecord(t, "alice-dev", "alice", "dev", time.Unix(100, 0))
	ctx, caller := tp.Tracer("test").Start(context.Background(), "caller")
	defer caller.End()

	cases := []struct {
		name, path, token string
		traced            bool
		status            int
		span, code        string
		failed            bool
		before            func()
	}{
		{"a record, traced", "/v1/submissions/alice-dev", f.alice, true, http.StatusOK, "GET /v1/submissions/{id}", "", false, nil},
		// The client is told submission_not_found; the operator's span
		// says why.
		{"a record another may not read", "/v1/submissions/alice-dev", f.bob, false, http.StatusNotFound, "GET /v1/submissions/{id}", string(reason.RecordHidden), false, nil},
		{"no route", "/v1/nothing/here", "", false, http.StatusNotFound, "GET", string(reason.NotFound), false, nil},
		{"the records bucket gone", "/healthz", "", true, http.StatusServiceUnavailable, "GET /healthz", string(reason.Unavailable), true, func() {
			require.NoError(t, f.b.JetStream().DeleteKeyValue(context.Background(), bus.BucketSubmissions))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.before != nil {
				tc.before()
			}
			rec.Reset()
			req, err := http.NewRequest(http.MethodGet, f.srv.URL+tc.path, nil)
			require.NoError(t, err)
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			if tc.traced {
				propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, tc.status, resp.StatusCode)

			spans := rec.Ended()
			require.Len(t, spans, 1)
			s := spans[0]
			require.Equal(t, tc.span, s.Name())
			require.Equal(t, trace.SpanKindServer, s.SpanKind())
			attrs := map[string]string{}
			for _, kv := range s.Attributes() {
				attrs[string(kv.Key)] = kv.Value.String()
			}
			require.Equal(t, strconv.Itoa(tc.status), attrs["http.response.status_code"])
			require.Equal(t, tc.code, attrs[string(bus.AttrReason)])
			if tc.traced {
				require.Equal(t, caller.SpanContext().TraceID(), s.SpanContext().TraceID())
				require.Equal(t, caller.SpanContext().SpanID(), s.Parent().SpanID())
			} else {
				require.False(t, s.Parent().IsValid(), "a request without traceparent starts a trace")
			}
			if tc.failed {
				require.Equal(t, codes.Error, s.Status().Code)
			} else {
				require.Equal(t, codes.Unset, s.Status().Code)
			}
		})
	}
}
