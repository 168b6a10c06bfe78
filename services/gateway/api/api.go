// Package api serves the submission records over HTTP.
package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"sort"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/services/domain/record"
)

// New returns the API's handler over the submissions bucket:
//
//	GET /healthz                  200 when the bucket answers
//	GET /v1/submissions/{id}      the record, as stored
//	GET /v1/submissions?limit=N   records, newest first
//	GET /v1/live                  every record and round as it changes (Server-Sent Events)
//	GET /                         the live web page over /v1/live
//
// Errors are JSON: {"error": {"code": "...", "message": "..."}}. rounds
// may be nil (no rounds on the live stream).
func New(kv, rounds jetstream.KeyValue) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/live", live(kv, rounds))
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
		limit := 50
		if s := r.URL.Query().Get("limit"); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 || n > 1000 {
				writeError(w, http.StatusBadRequest, "invalid_limit", "limit is a number from 1 to 1000")
				return
			}
			limit = n
		}
		keys, err := kv.ListKeys(r.Context())
		if err != nil {
			writeError(w, http.StatusServiceUnavailable, "nats_unavailable", err.Error())
			return
		}
		out := []record.Submission{}
		for k := range keys.Keys() {
			e, err := kv.Get(r.Context(), k)
			if err != nil {
				continue // deleted meanwhile
			}
			var rec record.Submission
			if json.Unmarshal(e.Value(), &rec) == nil {
				out = append(out, rec)
			}
		}
		sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.After(out[j].CreatedAt) })
		if len(out) > limit {
			out = out[:limit]
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"submissions": out})
	})
	return mux
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": code, "message": msg}})
}
