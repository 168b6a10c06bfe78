package staging_test

import (
	"context"
	"crypto/sha256"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/adapters/hub/hubtest"
)

// BenchmarkStaging stages one 256 MiB shard from a model hub on loopback
// into an empty cache (download, sha256, rename, hard link, flocks) beside
// a plain io.Copy of the same bytes from the same server into a file, and
// the same copy hashing as it goes, in one run: the first two differ by
// what staging adds, the last two by everything but the digest.
func BenchmarkStaging(b *testing.B) {
	const size = 256 << 20
	files, decl := shards(b, 1, size)
	srv := hubtest.New(files)
	defer srv.Close()
	srv.WithoutDigests()
	url := srv.URL() + hubtest.FileURL(decl[0].Path)
	copyTo := func(b *testing.B, w io.Writer) {
		resp, err := http.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		n, err := io.Copy(w, resp.Body)
		if err != nil || n != size {
			b.Fatalf("copied %d: %v", n, err)
		}
	}

	b.Run("io.Copy", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			f, err := os.Create(filepath.Join(b.TempDir(), "copy"))
			require.NoError(b, err)
			copyTo(b, f)
			require.NoError(b, f.Close())
			require.NoError(b, os.Remove(f.Name()))
		}
	})
	b.Run("io.Copy+sha256", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			f, err := os.Create(filepath.Join(b.TempDir(), "copy"))
			require.NoError(b, err)
			h := sha256.New()
			copyTo(b, io.MultiWriter(f, h))
			require.NoError(b, f.Close())
			require.NoError(b, os.Remove(f.Name()))
		}
	})
	b.Run("staging", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			dir := b.TempDir()
			c, repo := open(b, dir, srv, 1<<40, 1)
			lease, err := c.Checkout(context.Background(), "bench", repo, decl, config, nil)
			if err != nil {
				b.Fatal(err)
			}
			lease.Release()
			require.NoError(b, os.RemoveAll(dir))
		}
	})
}
