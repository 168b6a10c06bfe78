package api

import (
	"context"
	"errors"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/lowbarena/lowbarena/events/reason"
)

// Content security policies: the page loads its script and style from
// the gateway and talks to the gateway only, runs no inline script, and
// may not be framed; API answers allow nothing at all.
const (
	pageCSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; " +
		"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
	apiCSP = "default-src 'none'; frame-ancestors 'none'"
)

// harden wraps every request: a request id, security headers, a write
// deadline, and a recovery that answers a panic with internal_error and
// the request id (the stack goes to the log, never to the client).
func (a *API) harden(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := newRequestID()
		r = r.WithContext(context.WithValue(r.Context(), requestIDKey, id))
		h := w.Header()
		h.Set("X-Request-Id", id)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		if page(r.URL.Path) {
			h.Set("Content-Security-Policy", pageCSP)
		} else {
			h.Set("Content-Security-Policy", apiCSP)
			// Answers depend on the token: never stored by a shared cache.
			h.Set("Cache-Control", "no-store")
			h.Set("Vary", "Authorization")
		}
		if a.o.TLS {
			h.Set("Strict-Transport-Security", "max-age=31536000")
		}
		// A slow reader of answers is cut off; the live stream and an
		// upload's answer extend it themselves.
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(a.o.WriteTimeout))
		defer func() {
			if v := recover(); v != nil {
				if err, ok := v.(error); ok && errors.Is(err, http.ErrAbortHandler) {
					panic(v)
				}
				a.o.Log.Error("handler panicked", "request_id", id, "method", r.Method, "path", r.URL.Path, "panic", v, "stack", string(debug.Stack()))
				a.o.Refusals.Add(r.Context(), reason.InternalError)
				writeError(w, http.StatusInternalServerError, errorBody{Code: reason.InternalError,
					Message: "the gateway failed on this request; its operators find the cause in the gateway's log under request id " + id})
			}
		}()
		next.ServeHTTP(w, r)
	})
}
