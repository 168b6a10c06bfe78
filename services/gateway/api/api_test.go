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
	srv := httptest.NewServer(New(kv, nil))
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
