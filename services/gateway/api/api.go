// Package api serves the submission records and the round views over
// HTTP.
package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sort"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/schemas"
	"github.com/lowbarena/lowbarena/services/domain/record"
	"github.com/lowbarena/lowbarena/services/gateway/rounds"
)

// New returns the API's handler over the submissions bucket and the
// gateway's round views (bucket round_views):
//
//	GET /healthz                  200 when the bucket answers
//	GET /v1/submissions/{id}      the record, as stored
//	GET /v1/submissions?limit=N   records, newest first
//	GET /v1/rounds/{id}           the round's view, as stored
//	GET /v1/rounds?limit=N        round views, newest first
//	GET /v1/live                  every record and round view as it changes (Server-Sent Events)
//	GET /                         the live web page over /v1/live
//	GET /schemas/...              the JSON Schemas events name in dataschema (public, read-only)
//
// Errors are JSON: {"error": {"code": "...", "message": "..."}}. views
// may be nil (no rounds: the round routes answer 404, the live stream
// carries records only).
func New(kv, views jetstream.KeyValue) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/live", live(kv, views))
	mux.Handle("GET "+schemas.PathPrefix, schemas.Handler())
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(indexHTML)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if _, err := kv.Status(r.Context()); err != nil {
			writeError(w, http.StatusServiceUnavailable, "nats_unavailable", "the submissions bucket does not answer: "+err.Error())
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /v1/submissions/{id}", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		if !events.ValidID(id) {
			writeError(w, http.StatusBadRequest, "invalid_id", "a submission id is 1-128 letters, digits, '-' or '_'")
			return
		}
		e, err := kv.Get(r.Context(), id)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			writeError(w, http.StatusNotFound, "submission_not_found", "the arena has no submission "+id)
			return
		}
		if err != nil {
			writeError(w, http.StatusServiceUnavailable, "nats_unavailable", err.Error())
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(e.Value())
	})
	mux.HandleFunc("GET /v1/submissions", func(w http.ResponseWriter, r *http.Request) {
		limit, ok := parseLimit(w, r)
		if !ok {
			return
		}
		out, err := list[record.Submission](r.Context(), kv)
		if err != nil {
			writeError(w, http.StatusServiceUnavailable, "nats_unavailable", err.Error())
			return
		}
		sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.After(out[j].CreatedAt) })
		if len(out) > limit {
			out = out[:limit]
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"submissions": out})
	})
	mux.HandleFunc("GET /v1/rounds/{id}", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		if !events.ValidID(id) {
			writeError(w, http.StatusBadRequest, "invalid_id", "a round id is 1-128 letters, digits, '-' or '_'")
			return
		}
		if views == nil {
			writeError(w, http.StatusNotFound, "round_not_found", "the arena has no round "+id)
			return
		}
		e, err := views.Get(r.Context(), id)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			writeError(w, http.StatusNotFound, "round_not_found", "the arena has no round "+id)
			return
		}
		if err != nil {
			writeError(w, http.StatusServiceUnavailable, "nats_unavailable", err.Error())
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(e.Value())
	})
	mux.HandleFunc("GET /v1/rounds", func(w http.ResponseWriter, r *http.Request) {
		limit, ok := parseLimit(w, r)
		if !ok {
			return
		}
		out := []rounds.View{}
		if views != nil {
			var err error
			if out, err = list[rounds.View](r.Context(), views); err != nil {
				writeError(w, http.StatusServiceUnavailable, "nats_unavailable", err.Error())
				return
			}
		}
		// Newest first; a view whose round.started has not come yet
		// (no start time) last, by id.
		sort.Slice(out, func(i, j int) bool {
			a, b := out[i].StartedAt, out[j].StartedAt
			switch {
			case a != nil && b != nil && !a.Equal(*b):
				return a.After(*b)
			case (a == nil) != (b == nil):
				return a != nil
			}
			return out[i].RoundID < out[j].RoundID
		})
		if len(out) > limit {
			out = out[:limit]
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"rounds": out})
	})
	return mux
}

// parseLimit reads ?limit= (default 50, 1 to 1000), answering 400 itself
// when it is bad.
func parseLimit(w http.ResponseWriter, r *http.Request) (int, bool) {
	limit := 50
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 1000 {
			writeError(w, http.StatusBadRequest, "invalid_limit", "limit is a number from 1 to 1000")
			return 0, false
		}
		limit = n
	}
	return limit, true
}

// list reads every value of kv as a T; a key deleted meanwhile or a value
// that does not decode is left out.
func list[T any](ctx context.Context, kv jetstream.KeyValue) ([]T, error) {
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	out := []T{}
	for k := range keys.Keys() {
		e, err := kv.Get(ctx, k)
		if err != nil {
			continue // deleted meanwhile
		}
		var v T
		if json.Unmarshal(e.Value(), &v) == nil {
			out = append(out, v)
		}
	}
	return out, nil
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": code, "message": msg}})
}
