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
	"github.com/lowbarena/lowbarena/platform/bus"
)

// Codes of the gateway's refusals, in the body of every error response
// ({"error": {"code", "message"}}) and in the metric
// lowbarena.gateway.refusals{code}. They are stable: participants'
// scripts match on them. Bundle refusals carry the bundle package's codes
// (bundle_corrupt, bundle_no_declaration, ...) and quota refusals the
// participant package's (quota_submissions_per_day, ...).
const (
	// CodeTokenMissing is a request that needs a token and has none.
	CodeTokenMissing = "token_missing"
	// CodeTokenMalformed is an Authorization header that is not
	// "Bearer <token>", or a token not of the arena's form.
	CodeTokenMalformed = "token_malformed"
	// CodeTokenInvalid is a token of the arena's form that is not one of
	// its tokens (unknown id or wrong secret: one code for both).
	CodeTokenInvalid = "token_invalid"
	// CodeTokenRevoked is a revoked token.
	CodeTokenRevoked = "token_revoked"
	// CodeTokenNotParticipant is an operator's token on a participant's
	// request (submitting).
	CodeTokenNotParticipant = "token_not_participant"
	// CodeTokenNotOperator is a participant's token on an operator's
	// request (SQL on the store).
	CodeTokenNotOperator = "token_not_operator"
	// CodeParticipantMismatch is a bundle whose submission.json names
	// another participant than the token's.
	CodeParticipantMismatch = "participant_mismatch"
	// CodeUploadsConcurrent is an upload beyond the participant's
	// uploads at once.
	CodeUploadsConcurrent = "uploads_concurrent"
	// CodeGatewayBusy is an upload or a live stream beyond the gateway's
	// own bound.
	CodeGatewayBusy = "gateway_busy"
	// CodeUploadTooLarge is an upload over the arena's largest upload
	// (the build stage's limit, the same code).
	CodeUploadTooLarge = "bundle_upload_too_large"
	// CodeUploadTooSlow is an upload body that stalled or came slower
	// than the least rate (a slow-loris client).
	CodeUploadTooSlow = "upload_too_slow"
	// CodeUploadIncomplete is an upload body that ended early.
	CodeUploadIncomplete = "upload_incomplete"
	// CodeUploadDigestMismatch is an upload whose Lowbarena-Sha256
	// header does not match its bytes.
	CodeUploadDigestMismatch = "upload_digest_mismatch"
	// CodeHeaderTimeout counts (in the metric only; nothing can be
	// answered) clients that stalled before their request's headers
	// ended, or mid TLS handshake: slow-loris clients.
	CodeHeaderTimeout = "header_timeout"
	// CodeSubmissionNotFound is a submission the arena does not have,
	// or that the viewer may not read: the same answer, so ids are not
	// confirmed. The metric tells the two apart (CodeRecordHidden).
	CodeSubmissionNotFound = "submission_not_found"
	// CodeRecordHidden is the metric's name for a record refused to its
	// viewer (answered as CodeSubmissionNotFound).
	CodeRecordHidden = "record_hidden"
	// CodeRoundNotFound is a round the arena does not have.
	CodeRoundNotFound = "round_not_found"
	// CodeParticipantNotFound is a participant's page with no scores
	// the viewer may read.
	CodeParticipantNotFound = "participant_not_found"
	// CodeInvalidID is an id that cannot be one.
	CodeInvalidID = "invalid_id"
	// CodeInvalidQuery is a query parameter out of its range.
	CodeInvalidQuery = "invalid_query"
	// CodeRequestMalformed is a body that cannot be the request (JSON
	// that does not decode, or holds unknown fields).
	CodeRequestMalformed = "request_malformed"
	// CodeQueryUnavailable is no query service answering SQL.
	CodeQueryUnavailable = "query_unavailable"
	// CodeNotFound is a path no endpoint serves.
	CodeNotFound = "not_found"
	// CodeUnavailable is a store (NATS) that does not answer.
	CodeUnavailable = "unavailable"
	// CodeScoresUnavailable is no score service answering.
	CodeScoresUnavailable = "scores_unavailable"
	// CodeInternal is a fault of the gateway's own; the body names the
	// request id under which the log has the details, never the details.
	CodeInternal = "internal_error"
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
func (r *Refusals) Add(ctx context.Context, code string) {
	// The request's server span names the code it was refused with.
	trace.SpanFromContext(ctx).SetAttributes(bus.AttrReason.String(code))
	if r != nil {
		r.c.Add(ctx, 1, metric.WithAttributes(attribute.String("code", code)))
	}
}

type errorBody struct {
	Code    string     `json:"code"`
	Message string     `json:"message"`
	RetryAt *time.Time `json:"retry_at,omitempty"`
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
func (a *API) refuse(w http.ResponseWriter, r *http.Request, status int, code, msg string) {
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
	a.o.Refusals.Add(r.Context(), CodeInternal)
	writeError(w, http.StatusInternalServerError, errorBody{Code: CodeInternal,
		Message: "the gateway failed on this request; its operators find the cause in the gateway's log under request id " + id})
}

// unavailable answers a store that does not answer, logging why.
func (a *API) unavailable(w http.ResponseWriter, r *http.Request, err error) {
	id := requestID(r.Context())
	a.o.Log.Warn("store unavailable", "request_id", id, "path", r.URL.Path, "err", err)
	a.o.Refusals.Add(r.Context(), CodeUnavailable)
	w.Header().Set("Retry-After", "5")
	writeError(w, http.StatusServiceUnavailable, errorBody{Code: CodeUnavailable,
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
