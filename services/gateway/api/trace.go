package api

import (
	"net/http"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/lowbarena/lowbarena/observability"
)

const instrumentation = "github.com/lowbarena/lowbarena/services/gateway/api"

// traced starts a server span for every request: a child of the caller's
// W3C trace context when the request carries one (traceparent), else the
// root of a new trace. An upload's span is the first hop of its
// submission's trace: submission.received is published under it. The span
// is named by the route that serves the request ("POST /v1/submissions"),
// never by a path with its ids; a 5xx answer sets its status to Error (a
// 4xx is the client's: it shows in http.response.status_code and, with
// its code, in lowbarena.reason).
func (a *API) traced(mux *http.ServeMux, next http.Handler) http.Handler {
	tr := a.o.Tracer.Tracer(instrumentation)
	prop := observability.Propagator()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		name := r.Method
		_, route := mux.Handler(r)
		if route != "" && route != "/" {
			name = route
		}
		ctx, span := tr.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(semconv.HTTPRequestMethodKey.String(r.Method), semconv.URLPath(r.URL.Path)))
		defer span.End()
		if route != "" {
			span.SetAttributes(semconv.HTTPRoute(route))
		}
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r.WithContext(ctx))
		status := sw.status
		if status == 0 {
			status = http.StatusOK
		}
		span.SetAttributes(semconv.HTTPResponseStatusCode(status))
		if status >= 500 {
			span.SetStatus(codes.Error, http.StatusText(status))
		}
	})
}

// statusWriter remembers the status code of an answer. It passes Flush
// on (the live stream flushes each event) and unwraps for
// http.ResponseController (write deadlines, the upload's full duplex).
type statusWriter struct {
	http.ResponseWriter
	status int
}

// WriteHeader remembers the first status code written.
func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write writes body bytes; without a WriteHeader first the status is 200.
func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush flushes the answer when the underlying writer can.
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap returns the underlying writer, for http.ResponseController.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
