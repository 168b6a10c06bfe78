package api

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events/bus"
	"github.com/lowbarena/lowbarena/events/bustest"
	"github.com/lowbarena/lowbarena/services/gateway/rounds"
)

func TestAPI(t *testing.T) {
	b, _ := bustest.Bus(t)
	ctx := context.Background()
	kv, err := b.JetStream().KeyValue(ctx, bus.BucketSubmissions)
	require.NoError(t, err)
	for id, created := range map[string]time.Time{"old1": time.Unix(100, 0), "new2": time.Unix(200, 0)} {
		body, _ := json.Marshal(map[string]any{"id": id, "status": "running", "created_at": created.UTC()})
		_, err := kv.Put(ctx, id, body)
		require.NoError(t, err)
	}
	views, err := b.JetStream().KeyValue(ctx, bus.BucketRoundViews)
	require.NoError(t, err)
	for id, started := range map[string]*time.Time{"old-r": new(time.Unix(100, 0).UTC()), "new-r": new(time.Unix(200, 0).UTC()), "early": nil} {
		body, _ := json.Marshal(rounds.View{RoundID: id, Status: rounds.StatusRunning, StartedAt: started, Candidates: []string{}, Steps: []rounds.Step{}})
		_, err := views.Put(ctx, id, body)
		require.NoError(t, err)
	}
	srv := httptest.NewServer(New(kv, views))
	defer srv.Close()
	get := func(path string) (int, map[string]any) {
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var m map[string]any
		if resp.Header.Get("Content-Type") == "application/json" {
			require.NoError(t, json.Unmarshal(raw, &m), string(raw))
		}
		return resp.StatusCode, m
	}
	tests := []struct {
		path   string
		status int
		check  func(t *testing.T, m map[string]any)
	}{
		{"/healthz", 200, nil},
		{"/schemas/events/dev.lowbarena.submission.received.v1.json", 200, nil},
		{"/schemas/events/dev.lowbarena.nothing.v1.json", 404, nil},
		{"/v1/submissions/old1", 200, func(t *testing.T, m map[string]any) { require.Equal(t, "old1", m["id"]) }},
		{"/v1/submissions/nope", 404, func(t *testing.T, m map[string]any) {
			require.Equal(t, "submission_not_found", m["error"].(map[string]any)["code"])
		}},
		{"/v1/submissions/a.b", 400, func(t *testing.T, m map[string]any) {
			require.Equal(t, "invalid_id", m["error"].(map[string]any)["code"])
		}},
		{"/v1/submissions?limit=0", 400, nil},
		{"/v1/submissions", 200, func(t *testing.T, m map[string]any) {
			list := m["submissions"].([]any)
			require.Len(t, list, 2)
			require.Equal(t, "new2", list[0].(map[string]any)["id"], "newest first")
		}},
		{"/v1/submissions?limit=1", 200, func(t *testing.T, m map[string]any) { require.Len(t, m["submissions"].([]any), 1) }},
		{"/v1/rounds/new-r", 200, func(t *testing.T, m map[string]any) {
			require.Equal(t, "new-r", m["round_id"])
			require.Equal(t, "running", m["status"])
		}},
		{"/v1/rounds/nope", 404, func(t *testing.T, m map[string]any) {
			require.Equal(t, "round_not_found", m["error"].(map[string]any)["code"])
		}},
		{"/v1/rounds/a.b", 400, func(t *testing.T, m map[string]any) {
			require.Equal(t, "invalid_id", m["error"].(map[string]any)["code"])
		}},
		{"/v1/rounds?limit=1001", 400, nil},
		{"/v1/rounds", 200, func(t *testing.T, m map[string]any) {
			var ids []string
			for _, r := range m["rounds"].([]any) {
				ids = append(ids, r.(map[string]any)["round_id"].(string))
			}
			require.Equal(t, []string{"new-r", "old-r", "early"}, ids, "newest first, not yet started last")
		}},
		{"/v1/rounds?limit=2", 200, func(t *testing.T, m map[string]any) { require.Len(t, m["rounds"].([]any), 2) }},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			code, m := get(tt.path)
			require.Equal(t, tt.status, code)
			if tt.check != nil {
				tt.check(t, m)
			}
		})
	}
}
