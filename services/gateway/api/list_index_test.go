package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/services/gateway/timeline"
)

// TestListThroughIndexIsTheScan: GET /v1/submissions through the
// timeline index answers, byte for byte, what the linear scan of every
// record answers, for every viewer, participant filter and limit, over
// random records (ties in time, every split, a value that does not
// decode), after random updates, deletes and purges, and from an index
// rebuilt from the bucket.
func TestListThroughIndexIsTheScan(t *testing.T) {
	var opts Options
	f := newFixture(t, func(o *Options) { opts = *o })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// serve is an API over the fixture's buckets, through idx (nil: the
	// scan of every record).
	serve := func(idx *timeline.Index) string {
		o := opts
		o.Index = idx
		a, err := New(o)
		require.NoError(t, err)
		srv := httptest.NewServer(a)
		t.Cleanup(srv.Close)
		return srv.URL
	}
	scan := serve(nil)
	idx := timeline.New(f.records)
	indexed := serve(idx)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- idx.Run(runCtx) }()

	rng := rand.New(rand.NewPCG(19, 1))
	people := []string{"alice", "bob", "carol"}
	splits := []string{"ranked", "dev", ""}
	t0 := time.Unix(1760000000, 0)
	put := func(id string) {
		f.putRecord(t, id, people[rng.IntN(len(people))], splits[rng.IntN(len(splits))], t0.Add(time.Duration(rng.IntN(30))*time.Second))
	}
	for i := range 250 {
		put(fmt.Sprintf("r%03d", i))
	}
	_, err := f.records.Put(ctx, "corrupt", []byte(`{"id": "corrupt", "created_at": `))
	require.NoError(t, err)

	body := func(base, path, token string) string {
		req, err := http.NewRequest(http.MethodGet, base+path, nil)
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(raw))
		return string(raw)
	}
	compare := func(phase, indexed string) {
		for _, token := range []string{"", f.alice, f.bob, f.op} {
			for _, who := range []string{"", "alice", "bob", "carol", "nobody"} {
				for _, limit := range []int{1, 9, 50, 1000} {
					path := fmt.Sprintf("/v1/submissions?limit=%d", limit)
					if who != "" {
						path += "&participant=" + who
					}
					want := body(scan, path, token)
					require.Equal(t, want, body(indexed, path, token), "%s: %s", phase, path)
					var m struct{ Submissions []json.RawMessage }
					require.NoError(t, json.Unmarshal([]byte(want), &m))
					require.LessOrEqual(t, len(m.Submissions), limit)
				}
			}
		}
	}
	compare("written", indexed)
	for i := range 120 {
		id := fmt.Sprintf("r%03d", rng.IntN(250))
		switch {
		case i%5 == 0:
			require.NoError(t, f.records.Delete(ctx, id))
		case i%7 == 0:
			require.NoError(t, f.records.Purge(ctx, id))
		default:
			put(id)
		}
	}
	compare("changed", indexed)
	stop()
	require.NoError(t, <-done)
	// A restart: the gateway's index is built again from the bucket.
	again := timeline.New(f.records)
	go func() { done <- again.Run(ctx) }()
	compare("rebuilt", serve(again))
}
