package api

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events/bus"
	"github.com/lowbarena/lowbarena/events/bustest"
)

// TestLive: the stream starts with the stored records and round views and then
// carries every change; the page is served at /.
func TestLive(t *testing.T) {
	b, _ := bustest.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := b.JetStream().KeyValue(ctx, bus.BucketSubmissions)
	require.NoError(t, err)
	views, err := b.JetStream().KeyValue(ctx, bus.BucketRoundViews)
	require.NoError(t, err)
	_, err = kv.Put(ctx, "s1", []byte(`{"id":"s1","status":"running"}`))
	require.NoError(t, err)
	stored := `{"round_id":"round-a","status":"complete","steps":[]}`
	_, err = views.Put(ctx, "round-a", []byte(stored))
	require.NoError(t, err)
	srv := httptest.NewServer(New(kv, views))
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/")
	require.NoError(t, err)
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, "text/html; charset=utf-8", resp.Header.Get("Content-Type"))
	require.Contains(t, string(page), `new EventSource("/v1/live")`)

	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/v1/live", nil)
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	events := make(chan [2]string, 16)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		var kind string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				kind = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				events <- [2]string{kind, strings.TrimPrefix(line, "data: ")}
			}
		}
	}()
	next := func() [2]string {
		select {
		case e := <-events:
			return e
		case <-time.After(10 * time.Second):
			t.Fatal("no event on the live stream")
			return [2]string{}
		}
	}
	got := map[string]string{}
	for range 2 {
		e := next()
		got[e[0]] = e[1]
	}
	require.JSONEq(t, `{"id":"s1","status":"running"}`, got["record"])
	require.JSONEq(t, stored, got["round"], "the stream starts with the stored round views")

	_, err = kv.Put(ctx, "s1", []byte(`{"id":"s1","status":"done"}`))
	require.NoError(t, err)
	body, _ := json.Marshal(map[string]any{"round_id": "round-x", "status": "running", "steps": []any{}})
	_, err = views.Put(ctx, "round-x", body)
	require.NoError(t, err)
	got = map[string]string{}
	for range 2 {
		e := next()
		got[e[0]] = e[1]
	}
	require.JSONEq(t, `{"id":"s1","status":"done"}`, got["record"])
	require.JSONEq(t, string(body), got["round"])
}
