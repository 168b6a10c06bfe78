package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/lowbarena/lowbarena/domain/participant"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/bus"
)

// Refusals counts refused requests by code
// (lowbarena.gateway.refusals{code}).
type Refusals struct {
	c metric.Int64Counter
}

// NewRefusals registers the counter on mp.
func NewRefusals(mp metric.MeterProvider) (*Refusals, error) {
	c, err := mp.Meter("github.com/lowbarena/lowbarena/services/gateway").Int64Counter("lowbarena.gateway.refusals",
		metric.WithUnit("{request}"), metric.WithDescription("Requests the gateway refused, by code."))
	if err != nil {
		return nil, fmt.Errorf("api: %w", err)
	}
	return &Refusals{c: c}, nil
}

// Add counts one refusal of code.
func (r *Refusals) Add(ctx context.Context, code reason.Code) {
	// The request's server span names the code it was refused with.
	trace.SpanFromContext(ctx).SetAttributes(bus.AttrReason.String(string(code)))
	if r != nil {
		r.c.Add(ctx, 1, metric.WithAttributes(attribute.String("code", string(code))))
	}
}

type errorBody struct {
	Code    reason.Code `json:"code"`
	Message string      `json:"message"`
	RetryAt *time.Time  `json:"retry_at,omitempty"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, e errorBody) {
	if status == http.StatusUnauthorized {
		// RFC 6750: say which scheme, and why.
		w.Header().Set("WWW-Authenticate", `Bearer realm="lowbarena", error="invalid_token"`)
	}
	writeJSON(w, status, map[string]any{"error": e})
}

// refuse answers status with code and a sentence, counted under code.
func (a *API) refuse(w http.ResponseWriter, r *http.Request, status int, code reason.Code, msg string) {
	a.o.Refusals.Add(r.Context(), code)
	writeError(w, status, errorBody{Code: code, Message: msg})
}

// quota answers a quota refusal: 429 with Retry-After and retry_at when
// it names a moment, 413 for the bytes of one submission.
func (a *API) quota(w http.ResponseWriter, r *http.Request, q *participant.Refusal) {
	a.o.Refusals.Add(r.Context(), q.Code)
	status := http.StatusTooManyRequests
	e := errorBody{Code: q.Code, Message: q.Message}
	if q.RetryAt.IsZero() {
		status = http.StatusRequestEntityTooLarge
	} else {
		at := q.RetryAt.UTC()
		e.RetryAt = &at
		secs := int64(at.Sub(a.o.Now()).Seconds() + 0.999)
		w.Header().Set("Retry-After", strconv.FormatInt(max(secs, 1), 10))
	}
	writeError(w, status, e)
}

// fail answers a fault of the gateway's own: the log gets the error
// under the request's id, the body only the id. No error text, stack or
// path of the gateway's ever reaches a client.
func (a *API) fail(w http.ResponseWriter, r *http.Request, err error) {
	id := requestID(r.Context())
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		return // the client went away
	}
	a.o.Log.Error("request failed", "request_id", id, "method", r.Method, "path", r.URL.Path, "err", err)
	a.o.Refusals.Add(r.Context(), reason.InternalError)
	writeError(w, http.StatusInternalServerError, errorBody{Code: reason.InternalError,
		Message: "the gateway failed on this request; its operators find the cause in the gateway's log under request id " + id})
}

// unavailable answers a store that does not answer, logging why.
func (a *API) unavailable(w http.ResponseWriter, r *http.Request, err error) {
	id := requestID(r.Context())
	a.o.Log.Warn("store unavailable", "request_id", id, "path", r.URL.Path, "err", err)
	a.o.Refusals.Add(r.Context(), reason.Unavailable)
	w.Header().Set("Retry-After", "5")
	writeError(w, http.StatusServiceUnavailable, errorBody{Code: reason.Unavailable,
		Message: "the arena's store does not answer; try again in a few seconds (request id " + id + ")"})
}

type ctxKey int

const requestIDKey ctxKey = 0

func requestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey).(string)
	return id
}

func newRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
