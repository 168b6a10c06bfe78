package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/services/gateway/timeline"
)

// liveEvents opens the live stream as token ("" for the public) and
// returns its events, kind and data, as they come.
func liveEvents(t *testing.T, ctx context.Context, url, token string) <-chan [2]string {
	t.Helper()
	return liveAt(t, ctx, url+"/v1/live", token)
}

// liveAt opens the live stream at a full address (with a filter).
func liveAt(t *testing.T, ctx context.Context, url, token string) <-chan [2]string {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	out := make(chan [2]string, 64)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		var kind string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				kind = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				out <- [2]string{kind, strings.TrimPrefix(line, "data: ")}
			}
		}
	}()
	return out
}

// TestLive: the stream starts with the stored records and round views and
// then carries every change, each record only to a viewer who may read
// it: the public's stream never carries a dev record, not even its id;
// its participant's does, and an operator's carries everything.
func TestLive(t *testing.T) {
	f := newFixture(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f.putRecord(t, "a-dev", "alice", "dev", time.Unix(100, 0))
	f.putRecord(t, "b-ranked", "bob", "ranked", time.Unix(200, 0))
	stored := `{"round_id":"round-a","status":"complete","steps":[]}`
	_, err := f.views.Put(ctx, "round-a", []byte(stored))
	require.NoError(t, err)

	public := liveEvents(t, ctx, f.srv.URL, "")
	alice := liveEvents(t, ctx, f.srv.URL, f.alice)
	bob := liveEvents(t, ctx, f.srv.URL, f.bob)
	ops := liveEvents(t, ctx, f.srv.URL, f.op)
	// next gathers the next n events of a stream by kind and id.
	next := func(ch <-chan [2]string, n int) map[string]string {
		got := map[string]string{}
		for range n {
			select {
			case e := <-ch:
				var v struct {
					ID      string `json:"id"`
					RoundID string `json:"round_id"`
				}
				require.NoError(t, json.Unmarshal([]byte(e[1]), &v))
				got[e[0]+":"+v.ID+v.RoundID] = e[1]
			case <-time.After(10 * time.Second):
				t.Fatalf("no event on the live stream; so far %v", got)
			}
		}
		return got
	}
	keys := func(m map[string]string) []string {
		var out []string
		for k := range m {
			out = append(out, k)
		}
		return out
	}
	require.ElementsMatch(t, []string{"record:b-ranked", "round:round-a"}, keys(next(public, 2)))
	require.ElementsMatch(t, []string{"record:a-dev", "record:b-ranked", "round:round-a"}, keys(next(alice, 3)))
	require.ElementsMatch(t, []string{"record:b-ranked", "round:round-a"}, keys(next(bob, 2)))
	require.ElementsMatch(t, []string{"record:a-dev", "record:b-ranked", "round:round-a"}, keys(next(ops, 3)))

	// Changes: alice's dev record moves, then a ranked one and a round
	// appear. Every stream gets the last two in order; only alice's and
	// the operator's get the first.
	f.putRecord(t, "a-dev", "alice", "dev", time.Unix(150, 0))
	f.putRecord(t, "a-ranked", "alice", "ranked", time.Unix(300, 0))
	round := `{"round_id":"round-x","status":"running","steps":[]}`
	_, err = f.views.Put(ctx, "round-x", []byte(round))
	require.NoError(t, err)
	for name, ch := range map[string]<-chan [2]string{"alice": alice, "ops": ops} {
		got := next(ch, 3)
		require.ElementsMatch(t, []string{"record:a-dev", "record:a-ranked", "round:round-x"}, keys(got), name)
		require.Contains(t, got["record:a-dev"], `"created_at":"1970-01-01T00:02:30Z"`, name)
	}
	for name, ch := range map[string]<-chan [2]string{"public": public, "bob": bob} {
		got := next(ch, 2)
		require.ElementsMatch(t, []string{"record:a-ranked", "round:round-x"}, keys(got), name)
		require.JSONEq(t, round, got["round:round-x"])
		select {
		case e := <-ch:
			t.Fatalf("%s's stream carried %v", name, e)
		default:
		}
	}
}

// TestLiveBound: live streams beyond the gateway's bound are refused,
// and a refused token never opens one.
func TestLiveBound(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.LiveStreams = 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	liveEvents(t, ctx, f.srv.URL, "")
	status, m, _ := f.get(t, "/v1/live", "")
	require.Equal(t, http.StatusServiceUnavailable, status)
	require.Equal(t, string(reason.GatewayBusy), code(m))
	status, m, _ = f.get(t, "/v1/live", "lbp_nope")
	require.Equal(t, http.StatusUnauthorized, status)
	require.Equal(t, string(reason.TokenMalformed), code(m))
}

// TestLiveRecent: with ?recent=N the stream starts with the newest N
// records the viewer may read, the very page GET /v1/submissions?limit=N
// answers it (through the index), not every record; then it carries
// every change, of an old record too. A bad N is refused.
func TestLiveRecent(t *testing.T) {
	var idx *timeline.Index
	f := newFixture(t, func(o *Options) { idx = timeline.New(o.Records); o.Index = idx })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go func() { _ = idx.Run(ctx) }()
	for i := range 30 {
		split := []string{"ranked", "dev"}[i%2]
		f.putRecord(t, fmt.Sprintf("r%02d", i), []string{"alice", "bob"}[i%3%2], split, time.Unix(int64(1000+i), 0))
	}
	for _, tc := range []struct {
		name, token, query string
		n                  int
	}{
		{"public", "", "", 5},
		{"alice", f.alice, "", 7},
		{"operator", f.op, "", 12},
		{"operator, bob's", f.op, "&participant=bob", 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, m, _ := f.get(t, fmt.Sprintf("/v1/submissions?limit=%d%s", tc.n, tc.query), tc.token)
			require.Equal(t, http.StatusOK, status)
			var want []string
			for _, s := range m["submissions"].([]any) {
				want = append(want, s.(map[string]any)["id"].(string))
			}
			require.Len(t, want, tc.n)
			sctx, stop := context.WithCancel(ctx)
			defer stop()
			ch := liveAt(t, sctx, fmt.Sprintf("%s/v1/live?only=records&recent=%d%s", f.srv.URL, tc.n, tc.query), tc.token)
			var got []string
			for range tc.n {
				select {
				case e := <-ch:
					var v struct{ ID string }
					require.NoError(t, json.Unmarshal([]byte(e[1]), &v))
					got = append(got, v.ID)
				case <-time.After(10 * time.Second):
					t.Fatalf("only %v on the stream", got)
				}
			}
			slices.Reverse(got) // sent oldest first
			require.Equal(t, want, got)
			// Nothing more until a change: then the change, of the
			// oldest readable record of all.
			select {
			case e := <-ch:
				t.Fatalf("the stream sent more than %d records first: %v", tc.n, e)
			case <-time.After(300 * time.Millisecond):
			}
			f.putRecord(t, "r00", "bob", "ranked", time.Unix(1000, 0))
			select {
			case e := <-ch:
				require.Contains(t, e[1], `"id":"r00"`)
			case <-time.After(10 * time.Second):
				t.Fatal("the change of r00 did not come")
			}
		})
	}
	status, m, _ := f.get(t, "/v1/live?recent=0", "")
	require.Equal(t, http.StatusBadRequest, status)
	require.Equal(t, string(reason.InvalidQuery), code(m))
}
