package staging_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/adapters/hub"
	"github.com/lowbarena/lowbarena/adapters/hub/hubtest"
	"github.com/lowbarena/lowbarena/adapters/staging"
	"github.com/lowbarena/lowbarena/domain/bundle"
	"github.com/lowbarena/lowbarena/domain/modelrepo"
	"github.com/lowbarena/lowbarena/events/reason"
)

// TestSpurious416KeepsThePartial: on the real hub's shape (a 302 to its
// CDN), a resumed download that the CDN answers 416 with a bogus total
// (bytes */177) is asked again and finishes from the bytes on disk; one
// that keeps being refused fails as a changed file but keeps its partial
// download, for the next job to resume.
func TestSpurious416KeepsThePartial(t *testing.T) {
	t.Parallel()
	files, decl := shards(t, 1, 1<<20)
	whole, err := os.ReadFile(files[decl[0].Path])
	require.NoError(t, err)
	const cut = 300_000
	partial := func(cacheDir string) string {
		return filepath.Join(cacheDir, "partial", fmt.Sprintf("%s.%d", decl[0].SHA256, decl[0].Size))
	}
	for _, persists := range []bool{false, true} {
		t.Run(fmt.Sprintf("persists=%v", persists), func(t *testing.T) {
			t.Parallel()
			srv := hubtest.NewHF(files)
			defer srv.Close()
			var once sync.Once
			srv.SetCDNHook(func(w http.ResponseWriter, r *http.Request, p string) bool {
				broke := false
				once.Do(func() {
					w.Header().Set("Content-Length", fmt.Sprint(len(whole)))
					w.WriteHeader(http.StatusOK)
					_, _ = w.Write(whole[:cut])
					broke = true
				})
				return broke
			})
			cacheDir := t.TempDir()
			c, err := staging.Open(staging.Options{Dir: cacheDir, MaxBytes: 1 << 30, Attempts: 1,
				Hub: hub.New(hub.Options{Hosts: []string{srv.Host()}, Attempts: 1, RetryBackoff: time.Millisecond})})
			require.NoError(t, err)
			repo, err := modelrepo.Parse(srv.Repository(), hubtest.Revision)
			require.NoError(t, err)
			_, err = c.Checkout(context.Background(), "b", repo, decl, config, nil)
			require.Equal(t, reason.ReferenceUnavailable, modelrepo.CodeOf(err), "%v", err)

			if persists {
				srv.Spurious416(1000)
			} else {
				srv.Spurious416(2)
			}
			lease, err := c.Checkout(context.Background(), "b", repo, decl, config, nil)
			if persists {
				require.Equal(t, reason.ReferenceDigestMismatch, modelrepo.CodeOf(err), "%v", err)
				st, serr := os.Stat(partial(cacheDir))
				require.NoError(t, serr, "the partial download stays")
				require.Equal(t, int64(cut), st.Size())
				return
			}
			require.NoError(t, err)
			defer lease.Release()
			requireFiles(t, cacheDir, lease.Dir, decl)
			var sent int64
			for _, r := range srv.Requests() {
				if r.CDN && r.Status == http.StatusPartialContent {
					require.Equal(t, fmt.Sprintf("bytes=%d-", cut), r.Range)
					sent++
				}
			}
			require.Equal(t, int64(1), sent, "resumed once the 416s passed")
		})
	}
}

// TestRefusedBeforeItDownloads: a checkpoint that cannot fit in the
// pod's cache is refused before its first byte is asked for, with what
// it needs, the cap, and what other jobs hold.
func TestRefusedBeforeItDownloads(t *testing.T) {
	t.Parallel()
	const size = 100 << 10
	files, decl := shards(t, 3, size)
	srv := hubtest.New(files)
	defer srv.Close()
	const cacheCap = 2*size + size/2

	t.Run("over the cap by itself", func(t *testing.T) {
		t.Parallel()
		c, repo := open(t, t.TempDir(), srv, cacheCap, 1)
		_, err := c.Checkout(context.Background(), "all", repo, decl, config, nil)
		var se *staging.Error
		require.ErrorAs(t, err, &se)
		require.Equal(t, reason.StagingCacheFull, se.Code)
		require.Empty(t, srv.Requests(), "refused before any byte")
		require.Contains(t, se.Message, bundle.HumanSize(3*size))
		require.Contains(t, se.Message, bundle.HumanSize(cacheCap))
		require.Contains(t, se.Message, "--cache-bytes")
		require.Contains(t, se.Message, "can never be staged on this pod")
		require.NotContains(t, se.Message, "other running jobs")
	})
	t.Run("beside what other jobs hold", func(t *testing.T) {
		t.Parallel()
		cacheDir := t.TempDir()
		other := hubtest.New(files)
		defer other.Close()
		runner1, repo := open(t, cacheDir, other, cacheCap, 1)
		held, err := runner1.Checkout(context.Background(), "held", repo, decl[:1], config, nil)
		require.NoError(t, err)
		defer held.Release()
		other.Reset()
		runner2, _ := open(t, cacheDir, other, cacheCap, 1)
		_, err = runner2.Checkout(context.Background(), "two", repo, decl[1:], config, nil)
		var se *staging.Error
		require.ErrorAs(t, err, &se)
		require.Equal(t, reason.StagingCacheFull, se.Code)
		require.Empty(t, other.Requests(), "refused before any byte")
		require.Contains(t, se.Message, bundle.HumanSize(2*size))
		require.Contains(t, se.Message, "other running jobs hold "+bundle.HumanSize(size))
		require.Contains(t, se.Message, bundle.HumanSize(cacheCap))
	})
}
