package artifact_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/artifact"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
)

func shaOf(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestManifestDigest checks the digest against one computed by hand with
// sha256sum over the two manifest lines, and that order does not matter.
func TestManifestDigest(t *testing.T) {
	files := []events.FileDigest{
		{Path: "b/c.json", Size: 5, SHA256: shaOf([]byte("hello"))},
		{Path: "a.txt", Size: 0, SHA256: shaOf(nil)},
	}
	m := artifact.NewManifest(files)
	// printf '<sha(empty)> 0 a.txt\n<sha(hello)> 5 b/c.json\n' | sha256sum
	require.Equal(t, "d44e80d01a30a7877c5352623ba48869e65e06bbb2f75ef56ec249837775ab7c", m.Digest)
	require.Equal(t, int64(5), m.Bytes)
	require.Equal(t, "a.txt", m.Files[0].Path, "sorted by path")
	require.Equal(t, m.Digest, artifact.NewManifest([]events.FileDigest{files[1], files[0]}).Digest)

	changed := []events.FileDigest{files[0], {Path: "a.txt", Size: 0, SHA256: shaOf([]byte("x"))}}
	require.NotEqual(t, m.Digest, artifact.NewManifest(changed).Digest)
	renamed := []events.FileDigest{files[0], {Path: "A.txt", Size: 0, SHA256: shaOf(nil)}}
	require.NotEqual(t, m.Digest, artifact.NewManifest(renamed).Digest)

	f, ok := m.File("b/c.json")
	require.True(t, ok)
	require.Equal(t, int64(5), f.Size)
	_, ok = m.File("nope")
	require.False(t, ok)
}

func store(t *testing.T) *artifact.JetStream {
	b, _ := bustest.Bus(t)
	s, err := artifact.NewJetStream(context.Background(), b.JetStream(), bus.ObjectArtifacts)
	require.NoError(t, err)
	return s
}

func TestJetStreamFiles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := store(t)
	content := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB, several chunks
	sha := shaOf(content)

	stored, err := s.PutFile(ctx, sha, int64(len(content)), bytes.NewReader(content))
	require.NoError(t, err)
	require.True(t, stored)
	stored, err = s.PutFile(ctx, sha, int64(len(content)), bytes.NewReader(content))
	require.NoError(t, err)
	require.False(t, stored, "the same content is stored once")

	r, err := s.OpenFile(ctx, sha)
	require.NoError(t, err)
	prefix := make([]byte, 40)
	_, err = io.ReadFull(r, prefix)
	require.NoError(t, err)
	require.Equal(t, content[:40], prefix)
	require.NoError(t, r.Close())

	r, err = s.OpenFile(ctx, sha)
	require.NoError(t, err)
	all, err := io.ReadAll(r)
	require.NoError(t, err)
	require.NoError(t, r.Close())
	require.Equal(t, sha, shaOf(all))

	_, err = s.OpenFile(ctx, shaOf([]byte("absent")))
	require.ErrorIs(t, err, artifact.ErrNotFound)
}

func TestJetStreamRefusesCorruptFiles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := store(t)
	good := []byte("the declared content")
	_, err := s.PutFile(ctx, shaOf(good), int64(len(good)), bytes.NewReader([]byte("something else")))
	require.ErrorIs(t, err, artifact.ErrCorrupt)
	_, err = s.OpenFile(ctx, shaOf(good))
	require.ErrorIs(t, err, artifact.ErrNotFound, "a corrupt put leaves nothing behind")

	_, err = s.PutFile(ctx, "not-hex", 3, bytes.NewReader([]byte("abc")))
	require.Error(t, err)
}

func TestJetStreamManifest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := store(t)
	m := artifact.NewManifest([]events.FileDigest{
		{Path: "config.json", Size: 2, SHA256: shaOf([]byte("{}"))},
		{Path: "model.safetensors", Size: 9, SHA256: shaOf([]byte("123456789"))},
	})
	ref, err := s.PutManifest(ctx, m)
	require.NoError(t, err)
	require.Equal(t, events.BundleRef{Store: "jetstream", Bucket: bus.ObjectArtifacts, Object: artifact.ManifestObject(m.Digest),
		Size: 11, SHA256: m.Digest, Files: 2}, ref)

	got, err := s.Manifest(ctx, ref)
	require.NoError(t, err)
	require.Equal(t, m, got)

	wrong := ref
	wrong.SHA256 = shaOf([]byte("another bundle"))
	_, err = s.Manifest(ctx, wrong)
	require.ErrorIs(t, err, artifact.ErrCorrupt, "a manifest that is not the one the event names")

	missing := ref
	missing.Object = artifact.ManifestObject(wrong.SHA256)
	_, err = s.Manifest(ctx, missing)
	require.ErrorIs(t, err, artifact.ErrNotFound)
}

// TestConcurrentPutsOfOneFileStayReadable: many puts of the same files
// at once, as builds side by side of bundles that share files make them,
// leave every file whole and readable.
func TestConcurrentPutsOfOneFileStayReadable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := store(t)
	for round := range 40 {
		var contents [][]byte
		for f := range 3 {
			contents = append(contents, bytes.Repeat([]byte{byte(round), byte('0' + f)}, 1000))
		}
		var wg sync.WaitGroup
		for range 16 {
			for _, c := range contents {
				wg.Go(func() {
					_, err := s.PutFile(ctx, shaOf(c), int64(len(c)), bytes.NewReader(c))
					require.NoError(t, err)
				})
			}
		}
		wg.Wait()
		for _, c := range contents {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			r, err := s.OpenFile(rctx, shaOf(c))
			require.NoError(t, err)
			got, err := io.ReadAll(r)
			cancel()
			require.NoError(t, err, "round %d: the file is whole", round)
			require.NoError(t, r.Close())
			require.Equal(t, c, got)
		}
	}
}
