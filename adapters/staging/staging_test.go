package staging_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/adapters/hub"

	"github.com/lowbarena/lowbarena/adapters/hub/hubtest"
	"github.com/lowbarena/lowbarena/adapters/staging"
	"github.com/lowbarena/lowbarena/domain/modelrepo"
	"github.com/lowbarena/lowbarena/events/reason"
)

// shards writes n files of size random bytes named shard-<i>.safetensors
// and returns them (path in the repository -> file on disk) and their
// declarations.
func shards(t testing.TB, n int, size int) (map[string]string, []modelrepo.File) {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{}
	var decl []modelrepo.File
	for i := range n {
		name := fmt.Sprintf("shard-%d.safetensors", i)
		data := make([]byte, size)
		_, _ = rand.Read(data)
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, data, 0o644))
		sum, err := hubtest.Digest(p)
		require.NoError(t, err)
		files[name] = p
		decl = append(decl, modelrepo.File{Path: name, Size: int64(size), SHA256: sum})
	}
	return files, decl
}

func open(t testing.TB, dir string, srv *hubtest.Server, max int64, attempts int) (*staging.Cache, modelrepo.Repo) {
	t.Helper()
	c, err := staging.Open(staging.Options{Dir: dir, MaxBytes: max, Attempts: attempts,
		Hub: hub.New(hub.Options{Hosts: []string{srv.Host()}, Attempts: 1})})
	require.NoError(t, err)
	repo, err := modelrepo.Parse(srv.Repository(), hubtest.Revision)
	require.NoError(t, err)
	return c, repo
}

// config writes the checkout's small file.
func config(dir string) error {
	return os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"model_type":"qwen3"}`), 0o644)
}

// requireFiles checks that the checkout holds each file with its digest,
// as a hard link to the cache's blob.
func requireFiles(t *testing.T, cacheDir, dir string, decl []modelrepo.File) {
	t.Helper()
	for _, f := range decl {
		sum, err := hubtest.Digest(filepath.Join(dir, f.Path))
		require.NoError(t, err)
		require.Equal(t, f.SHA256, sum, f.Path)
		a, err := os.Stat(filepath.Join(dir, f.Path))
		require.NoError(t, err)
		b, err := os.Stat(filepath.Join(cacheDir, "blobs", f.SHA256))
		require.NoError(t, err)
		require.True(t, os.SameFile(a, b), "%s is the cache's blob", f.Path)
	}
	_, err := os.Stat(filepath.Join(dir, "config.json"))
	require.NoError(t, err)
}

// TestCheckoutStagesOnce: a checkpoint is downloaded once per pod; a
// second job reuses its folder, and another checkpoint that shares a
// shard downloads only what it lacks. Progress ends at the total.
func TestCheckoutStagesOnce(t *testing.T) {
	t.Parallel()
	files, decl := shards(t, 3, 64<<10)
	srv := hubtest.New(files)
	defer srv.Close()
	cacheDir := t.TempDir()
	c, repo := open(t, cacheDir, srv, 1<<30, 1)

	var seen []int64
	lease, err := c.Checkout(context.Background(), "bundle-a", repo, decl[:2], config, func(done, total int64) {
		require.Equal(t, int64(2*64<<10), total)
		if len(seen) > 0 {
			require.GreaterOrEqual(t, done, seen[len(seen)-1], "progress never goes back")
		}
		seen = append(seen, done)
	})
	require.NoError(t, err)
	require.Equal(t, int64(2*64<<10), seen[len(seen)-1])
	requireFiles(t, cacheDir, lease.Dir, decl[:2])
	lease.Release()
	require.Len(t, srv.Requests(), 2)

	srv.Reset()
	again, err := c.Checkout(context.Background(), "bundle-a", repo, decl[:2], func(string) error {
		return fmt.Errorf("a whole checkout is not written again")
	}, nil)
	require.NoError(t, err)
	require.Equal(t, lease.Dir, again.Dir)
	again.Release()
	require.Empty(t, srv.Requests(), "the second job downloads nothing")

	other, err := c.Checkout(context.Background(), "bundle-b", repo, decl[1:], config, nil)
	require.NoError(t, err)
	defer other.Release()
	requireFiles(t, cacheDir, other.Dir, decl[1:])
	require.Equal(t, []string{decl[2].Path}, srv.Asked(), "only the shard the pod lacked")
	used, err := c.Usage()
	require.NoError(t, err)
	require.Equal(t, int64(3*64<<10), used)
}

// breakOnce makes the first answer for path stop after cut bytes.
func breakOnce(path string, cut int, whole []byte) hubtest.Hook {
	var once sync.Once
	return func(w http.ResponseWriter, r *http.Request, p string) bool {
		broke := false
		if p == path {
			once.Do(func() {
				w.Header().Set("Content-Length", fmt.Sprint(len(whole)))
				w.WriteHeader(http.StatusOK)
				_, _ = w.Write(whole[:cut])
				broke = true
			})
		}
		return broke
	}
}

// TestResumesABrokenDownload: a transfer that breaks leaves its bytes on
// disk; the next attempt (a later job, or a retry in the same one) asks
// for the rest with a Range request, so the repository sends each byte
// once, and the blob has its declared digest.
func TestResumesABrokenDownload(t *testing.T) {
	t.Parallel()
	files, decl := shards(t, 1, 1<<20)
	whole, err := os.ReadFile(files[decl[0].Path])
	require.NoError(t, err)
	const cut = 300_000
	for _, attempts := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d attempts per checkout", attempts), func(t *testing.T) {
			t.Parallel()
			srv := hubtest.New(files)
			defer srv.Close()
			srv.SetHook(breakOnce(decl[0].Path, cut, whole))
			cacheDir := t.TempDir()
			c, repo := open(t, cacheDir, srv, 1<<30, attempts)
			lease, err := c.Checkout(context.Background(), "b", repo, decl, config, nil)
			if attempts == 1 {
				require.Equal(t, reason.ReferenceUnavailable, modelrepo.CodeOf(err), "%v", err)
				part, serr := os.Stat(filepath.Join(cacheDir, "partial", fmt.Sprintf("%s.%d", decl[0].SHA256, decl[0].Size)))
				require.NoError(t, serr)
				require.Equal(t, int64(cut), part.Size(), "the bytes that came stay on disk")
				lease, err = c.Checkout(context.Background(), "b", repo, decl, config, nil)
			}
			require.NoError(t, err)
			defer lease.Release()
			requireFiles(t, cacheDir, lease.Dir, decl)
			reqs := srv.Requests()
			require.Len(t, reqs, 2)
			require.Equal(t, "", reqs[0].Range)
			require.Equal(t, fmt.Sprintf("bytes=%d-", cut), reqs[1].Range)
			require.Equal(t, decl[0].Size, srv.BytesSent(), "every byte sent once")
		})
	}
}

// TestResumeIgnored: a repository that answers the resume's Range with
// the whole file is written from the start, and the blob is right.
func TestResumeIgnored(t *testing.T) {
	t.Parallel()
	files, decl := shards(t, 1, 1<<20)
	whole, err := os.ReadFile(files[decl[0].Path])
	require.NoError(t, err)
	srv := hubtest.New(files)
	defer srv.Close()
	broke := breakOnce(decl[0].Path, 4096, whole)
	srv.SetHook(func(w http.ResponseWriter, r *http.Request, p string) bool {
		if broke(w, r, p) {
			return true
		}
		r.Header.Del("Range")
		return false
	})
	cacheDir := t.TempDir()
	c, repo := open(t, cacheDir, srv, 1<<30, 2)
	lease, err := c.Checkout(context.Background(), "b", repo, decl, config, nil)
	require.NoError(t, err)
	defer lease.Release()
	requireFiles(t, cacheDir, lease.Dir, decl)
	require.Equal(t, decl[0].Size+4096, srv.BytesSent())
}

// TestChangedFileIsRefused: a shard whose bytes changed since it was
// declared (same size, a server that names no digest) is caught by its
// sha256 once downloaded: refused, nothing kept.
func TestChangedFileIsRefused(t *testing.T) {
	t.Parallel()
	files, decl := shards(t, 1, 256<<10)
	changed := filepath.Join(t.TempDir(), "changed")
	data, err := os.ReadFile(files[decl[0].Path])
	require.NoError(t, err)
	data[1000] ^= 1
	require.NoError(t, os.WriteFile(changed, data, 0o644))
	srv := hubtest.New(map[string]string{decl[0].Path: changed})
	defer srv.Close()
	srv.WithoutDigests()
	cacheDir := t.TempDir()
	c, repo := open(t, cacheDir, srv, 1<<30, 3)
	_, err = c.Checkout(context.Background(), "b", repo, decl, config, nil)
	require.Equal(t, reason.ReferenceDigestMismatch, modelrepo.CodeOf(err), "%v", err)
	require.Contains(t, err.Error(), "pin the revision to a commit")
	for _, d := range []string{"blobs", "partial", "checkouts"} {
		entries, err := os.ReadDir(filepath.Join(cacheDir, d))
		require.NoError(t, err)
		require.Empty(t, entries, d)
	}
	used, err := c.Usage()
	require.NoError(t, err)
	require.Zero(t, used)
}

// TestEvictsLeastRecentlyUsedNeverInUse: two caches on one folder (two
// runners of a pod) share its cap; making room evicts the least recently
// used blob that no job holds, with its checkout's links, and refuses
// when what is held leaves no room.
func TestEvictsLeastRecentlyUsedNeverInUse(t *testing.T) {
	t.Parallel()
	const size = 100 << 10
	files, decl := shards(t, 4, size)
	srv := hubtest.New(files)
	defer srv.Close()
	cacheDir := t.TempDir()
	runner1, repo := open(t, cacheDir, srv, 2*size+size/2, 1)
	runner2, _ := open(t, cacheDir, srv, 2*size+size/2, 1)

	// b is used first (the oldest) and stays in use; a is used later and
	// released.
	b, err := runner1.Checkout(context.Background(), "b", repo, decl[1:2], config, nil)
	require.NoError(t, err)
	a, err := runner2.Checkout(context.Background(), "a", repo, decl[0:1], config, nil)
	require.NoError(t, err)
	aDir := a.Dir
	a.Release()

	// c needs room: b is older but held, so a goes.
	c, err := runner2.Checkout(context.Background(), "c", repo, decl[2:3], config, nil)
	require.NoError(t, err)
	requireFiles(t, cacheDir, c.Dir, decl[2:3])
	requireFiles(t, cacheDir, b.Dir, decl[1:2])
	_, err = os.Stat(filepath.Join(cacheDir, "blobs", decl[0].SHA256))
	require.ErrorIs(t, err, os.ErrNotExist, "a's blob was evicted")
	_, err = os.Stat(aDir)
	require.ErrorIs(t, err, os.ErrNotExist, "with the checkout that linked it, so the space is free")

	// With b and c both held, d cannot fit.
	_, err = runner1.Checkout(context.Background(), "d", repo, decl[3:4], config, nil)
	var se *staging.Error
	require.ErrorAs(t, err, &se)
	require.Equal(t, reason.StagingCacheFull, se.Code)
	require.Contains(t, se.Message, "--cache-bytes")

	// Once c is released, d takes its room; b, held all along, stays.
	c.Release()
	d, err := runner1.Checkout(context.Background(), "d", repo, decl[3:4], config, nil)
	require.NoError(t, err)
	requireFiles(t, cacheDir, d.Dir, decl[3:4])
	requireFiles(t, cacheDir, b.Dir, decl[1:2])
	d.Release()
	b.Release()

	// a again: evicted, so downloaded and assembled again.
	srv.Reset()
	a, err = runner2.Checkout(context.Background(), "a", repo, decl[0:1], config, nil)
	require.NoError(t, err)
	defer a.Release()
	requireFiles(t, cacheDir, a.Dir, decl[0:1])
	require.Equal(t, []string{decl[0].Path}, srv.Asked())
	used, err := runner1.Usage()
	require.NoError(t, err)
	require.LessOrEqual(t, used, int64(2*size+size/2))
}

// TestConcurrentCheckoutsDownloadOnce: runners of one pod that stage the
// same checkpoint at once download each shard once between them.
func TestConcurrentCheckoutsDownloadOnce(t *testing.T) {
	t.Parallel()
	files, decl := shards(t, 2, 512<<10)
	srv := hubtest.New(files)
	defer srv.Close()
	cacheDir := t.TempDir()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		c, repo := open(t, cacheDir, srv, 1<<30, 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.Checkout(context.Background(), "same", repo, decl, config, nil)
			if err == nil {
				defer l.Release()
				for _, f := range decl {
					if _, err = os.Stat(filepath.Join(l.Dir, f.Path)); err != nil {
						break
					}
				}
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.ElementsMatch(t, []string{decl[0].Path, decl[1].Path}, srv.Asked())
	require.False(t, strings.Contains(strings.Join(srv.Asked(), ","), "partial"))
}
