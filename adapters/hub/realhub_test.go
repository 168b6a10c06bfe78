package hub_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/lowbarena/lowbarena/adapters/hub"
	"github.com/lowbarena/lowbarena/adapters/hub/hubtest"
	"github.com/lowbarena/lowbarena/domain/modelrepo"
	"github.com/lowbarena/lowbarena/domain/safetensors"
	"github.com/lowbarena/lowbarena/events/reason"
)

// realHub serves a sharded checkpoint as the Hugging Face hub does
// (hubtest.NewHF) and returns it with every file's declaration.
func realHub(t *testing.T) (*hubtest.Server, map[string]modelrepo.File, map[string]string) {
	t.Helper()
	files := checkpoint(t, t.TempDir())
	srv := hubtest.NewHF(files)
	t.Cleanup(srv.Close)
	decl := map[string]modelrepo.File{}
	for p, local := range files {
		decl[p] = declared(t, p, local)
	}
	return srv, decl, files
}

// TestRealHubShape: through the hub's 302 to a signed URL on its CDN, the
// headers of a checkpoint read as from a plain server; the operator's
// token reaches the hub only, and the CDN's answers are the ranges.
func TestRealHubShape(t *testing.T) {
	t.Parallel()
	srv, decl, _ := realHub(t)
	const tok = "hf_real_shape_token"
	c := hub.New(hub.Options{Hosts: []string{srv.Host()}, Tokens: map[string]string{srv.Host(): tok}})
	_, err := readHeaders(context.Background(), c, repoOf(t, srv), decl)
	require.NoError(t, err)
	var cdn int
	for _, r := range srv.Requests() {
		if r.CDN {
			cdn++
			require.Empty(t, r.Authorization, "the CDN never gets the token")
			require.Equal(t, http.StatusPartialContent, r.Status)
			continue
		}
		require.Equal(t, "Bearer "+tok, r.Authorization)
		if strings.HasSuffix(r.Path, ".safetensors") {
			require.Equal(t, http.StatusFound, r.Status, "an LFS file is a redirect to the CDN")
		}
	}
	require.Equal(t, 6, cdn, "two ranges for each of three shards")
}

// TestSpurious416IsRetried: a CDN that answers a valid range 416 with a
// Content-Range total that is not the file's (bytes */177) is asked again
// instead of the file being declared changed, for a header read and for
// a resumed download; one that keeps doing it is, after RangeAttempts.
func TestSpurious416IsRetried(t *testing.T) {
	t.Parallel()
	const shard = "model-00002-of-00003.safetensors"
	t.Run("a header read", func(t *testing.T) {
		t.Parallel()
		srv, decl, _ := realHub(t)
		srv.Spurious416(2)
		c := hub.New(hub.Options{Hosts: []string{srv.Host()}, RetryBackoff: time.Millisecond})
		r := c.HeaderReader(context.Background(), repoOf(t, srv), decl[shard])
		_, err := safetensors.ReadHeaderStream(r, decl[shard].Size)
		require.NoError(t, err)
		_ = r.Close()
		var bad int
		for _, q := range srv.Requests() {
			if q.Status == http.StatusRequestedRangeNotSatisfiable {
				bad++
			}
		}
		require.Equal(t, 2, bad)
	})
	t.Run("a resumed download", func(t *testing.T) {
		t.Parallel()
		srv, decl, files := realHub(t)
		whole, err := os.ReadFile(files[shard])
		require.NoError(t, err)
		srv.Spurious416(3)
		c := hub.New(hub.Options{Hosts: []string{srv.Host()}, RetryBackoff: time.Millisecond})
		b, err := c.Open(context.Background(), repoOf(t, srv), decl[shard], 100)
		require.NoError(t, err)
		got, err := io.ReadAll(b)
		require.NoError(t, err)
		require.NoError(t, b.Close())
		require.Equal(t, whole[100:], got)
	})
	t.Run("one that persists", func(t *testing.T) {
		t.Parallel()
		srv, decl, _ := realHub(t)
		srv.Spurious416(100)
		c := hub.New(hub.Options{Hosts: []string{srv.Host()}, RetryBackoff: time.Millisecond, RangeAttempts: 3})
		_, err := c.Open(context.Background(), repoOf(t, srv), decl[shard], 100)
		require.Equal(t, reason.ReferenceDigestMismatch, modelrepo.CodeOf(err), "%v", err)
		require.Contains(t, err.Error(), "3 times (HTTP 416")
	})
}

// TestRateLimits: a 429 is waited out for as long as its RateLimit or
// Retry-After header asks, within MaxWait; a longer wait is returned at
// once as reference_rate_limited with the wait, for the stage to wait.
func TestRateLimits(t *testing.T) {
	t.Parallel()
	t.Run("RateLimit's reset, waited in place", func(t *testing.T) {
		t.Parallel()
		srv, decl, _ := realHub(t)
		srv.RateLimit(1, 0) // "resolvers";r=0;t=0: a second, rounding included
		c := hub.New(hub.Options{Hosts: []string{srv.Host()}, RetryBackoff: time.Millisecond})
		t0 := time.Now()
		_, err := c.Fetch(context.Background(), repoOf(t, srv), decl["config.json"], 1<<20)
		require.NoError(t, err)
		require.GreaterOrEqual(t, time.Since(t0), time.Second, "the wait the header asked, not the backoff")
		require.Len(t, srv.Requests(), 2)
	})
	t.Run("Retry-After, waited in place", func(t *testing.T) {
		t.Parallel()
		files := checkpoint(t, t.TempDir())
		srv := hubtest.New(files)
		defer srv.Close()
		var once sync.Once
		srv.SetHook(func(w http.ResponseWriter, r *http.Request, path string) bool {
			limited := false
			once.Do(func() {
				w.Header().Set("Retry-After", "1")
				w.WriteHeader(http.StatusTooManyRequests)
				limited = true
			})
			return limited
		})
		c := hub.New(hub.Options{Hosts: []string{srv.Host()}, RetryBackoff: time.Millisecond})
		t0 := time.Now()
		_, err := c.Fetch(context.Background(), repoOf(t, srv), declared(t, "config.json", files["config.json"]), 1<<20)
		require.NoError(t, err)
		require.GreaterOrEqual(t, time.Since(t0), time.Second)
	})
	t.Run("a window longer than MaxWait", func(t *testing.T) {
		t.Parallel()
		srv, decl, _ := realHub(t)
		srv.RateLimit(1, 120*time.Second)
		c := hub.New(hub.Options{Hosts: []string{srv.Host()}, RetryBackoff: time.Millisecond})
		t0 := time.Now()
		_, err := c.Fetch(context.Background(), repoOf(t, srv), decl["config.json"], 1<<20)
		require.Less(t, time.Since(t0), 5*time.Second, "returned at once, not waited")
		require.Equal(t, reason.ReferenceRateLimited, modelrepo.CodeOf(err), "%v", err)
		wait, ok := modelrepo.Wait(err)
		require.True(t, ok)
		require.Equal(t, 121*time.Second, wait)
		require.True(t, modelrepo.AsError(err).Transient())
		require.Len(t, srv.Requests(), 1)
	})
}

// TestUnauthorizedSaysWhich: the hub's 401 means a missing or private
// repository, a gated one, or a token it does not know; each is told
// apart by X-Error-Code, and a refused operator token is counted, logged
// with its host and read around, never blamed on the participant.
func TestUnauthorizedSaysWhich(t *testing.T) {
	t.Parallel()
	const good, stale = "hf_granted_token", "hf_expired_token"
	cases := []struct {
		name   string
		access hubtest.Access
		token  string // the operator's token, "" for none
		// ok: read; else code and a phrase of the sentence.
		ok      bool
		code    reason.Code
		phrase  string
		refused bool // the token was refused, counted and logged
	}{
		{name: "a private repository, no token", access: hubtest.Private, code: reason.ReferenceNotFound,
			phrase: "it does not exist, or it is private and the arena holds no token"},
		{name: "a private repository the token may not read", access: hubtest.Private, token: "hf_other_known", code: reason.ReferenceNotFound,
			phrase: "may not read it"},
		{name: "a private repository the token reads", access: hubtest.Private, token: good, ok: true},
		{name: "a gated repository, no token", access: hubtest.Gated, code: reason.ReferenceGated, phrase: "holds no token"},
		{name: "a gated repository the account was not granted", access: hubtest.Gated, token: "hf_other_known", code: reason.ReferenceGated,
			phrase: "has not been granted access"},
		{name: "a public repository and an expired operator token", access: hubtest.Public, token: stale, ok: true, refused: true},
		{name: "a private repository and an expired operator token", access: hubtest.Private, token: stale, code: reason.ReferenceTokenRefused,
			phrase: "This is the arena's doing", refused: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv, decl, _ := realHub(t)
			srv.SetAccess(tc.access, good)
			srv.KnownTokens(good, "hf_other_known")
			reader := sdkmetric.NewManualReader()
			var logs bytes.Buffer
			var mu sync.Mutex
			o := hub.Options{Hosts: []string{srv.Host()}, RetryBackoff: time.Millisecond,
				Meter: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
				Log:   slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, nil))}
			if tc.token != "" {
				o.Tokens = map[string]string{srv.Host(): tc.token}
			}
			c := hub.New(o)
			_, err := c.Fetch(context.Background(), repoOf(t, srv), decl["config.json"], 1<<20)
			if tc.ok {
				require.NoError(t, err)
			} else {
				require.Equal(t, tc.code, modelrepo.CodeOf(err), "%v", err)
				require.Contains(t, err.Error(), tc.phrase)
				if tc.token != "" {
					require.NotContains(t, err.Error(), tc.token)
				}
			}
			var rm metricdata.ResourceMetrics
			require.NoError(t, reader.Collect(context.Background(), &rm))
			mu.Lock()
			defer mu.Unlock()
			if !tc.refused {
				require.Zero(t, refusedCount(rm, srv.Host()))
				require.NotContains(t, logs.String(), "refused the operator's token")
				return
			}
			require.Equal(t, int64(1), refusedCount(rm, srv.Host()), "counted once, by host")
			require.Contains(t, logs.String(), "refused the operator's token")
			require.Contains(t, logs.String(), "host="+srv.Host())
			require.NotContains(t, logs.String(), tc.token)
			reqs := srv.Requests()
			require.Len(t, reqs, 2, "once with the token, once without")
			require.Equal(t, "Bearer "+tc.token, reqs[0].Authorization)
			require.Empty(t, reqs[1].Authorization)
		})
	}
}

// refusedCount is lowbarena.hub.token_refused's count for host.
func refusedCount(rm metricdata.ResourceMetrics, host string) int64 {
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "lowbarena.hub.token_refused" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				if v, ok := dp.Attributes.Value(attribute.Key("host")); ok && v.AsString() == host {
					return dp.Value
				}
			}
		}
	}
	return 0
}

// TestResolve: a branch resolves to the commit the hub names, in one HEAD
// request that stops at the hub's answer (a shard's redirect to the CDN
// is not followed); a commit needs no request; a moved branch resolves
// to its new commit.
func TestResolve(t *testing.T) {
	t.Parallel()
	srv, decl, files := realHub(t)
	c := hub.New(hub.Options{Hosts: []string{srv.Host()}})
	branch, err := modelrepo.Parse(srv.Repository(), hubtest.Branch)
	require.NoError(t, err)
	for _, f := range []string{"config.json", "model-00001-of-00003.safetensors"} {
		srv.Reset()
		at, err := c.Resolve(context.Background(), branch, decl[f])
		require.NoError(t, err)
		require.Equal(t, hubtest.Revision, at.Revision, f)
		reqs := srv.Requests()
		require.Len(t, reqs, 1, f)
		require.Equal(t, http.MethodHead, reqs[0].Method)
		require.False(t, reqs[0].CDN)
	}
	srv.Reset()
	at, err := c.Resolve(context.Background(), repoOf(t, srv), decl["config.json"])
	require.NoError(t, err)
	require.Equal(t, hubtest.Revision, at.Revision)
	require.Empty(t, srv.Requests(), "a commit is asked nothing")

	moved := srv.Push(map[string]string{"README.md": files["config.json"]})
	at, err = c.Resolve(context.Background(), branch, decl["config.json"])
	require.NoError(t, err)
	require.Equal(t, moved, at.Revision)
	require.NotEqual(t, hubtest.Revision, moved)
}
