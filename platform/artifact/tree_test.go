package artifact_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/examples"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/artifact"
	"github.com/lowbarena/lowbarena/platform/artifact/artifacttest"
)

// writeTree writes files (slash paths to contents) under dir.
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, c := range files {
		path := filepath.Join(dir, filepath.FromSlash(p))
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(c), 0o644))
	}
}

// TestTreeRoundTrip stores a folder with sub-folders and reads it back
// elsewhere: every file comes back at its path with its content, the
// digest names the content (the same tree elsewhere gives it again, a
// changed file another), and the folder read back exists only complete.
func TestTreeRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := store(t)
	files := map[string]string{"campaign.json": `{"task_id":"t"}`, "suite/dev/items.jsonl": "{}\n", "reference/config.json": "{}"}
	src := t.TempDir()
	writeTree(t, src, files)
	require.NoError(t, os.Symlink(filepath.Join(src, "campaign.json"), filepath.Join(src, "linked.json")))

	ref, err := artifact.PutTree(ctx, s, src)
	require.NoError(t, err)
	require.Equal(t, len(files)+1, ref.Files, "the link is stored as the file it names")

	again := t.TempDir()
	writeTree(t, again, files)
	require.NoError(t, os.WriteFile(filepath.Join(again, "linked.json"), []byte(files["campaign.json"]), 0o644))
	ref2, err := artifact.PutTree(ctx, s, again)
	require.NoError(t, err)
	require.Equal(t, ref.SHA256, ref2.SHA256, "the same content gives the same digest wherever it lies")

	dst := filepath.Join(t.TempDir(), "out")
	require.NoError(t, artifact.GetTree(ctx, s, ref, dst))
	for p, c := range files {
		got, err := os.ReadFile(filepath.Join(dst, filepath.FromSlash(p)))
		require.NoError(t, err)
		require.Equal(t, c, string(got), p)
	}
	ents, err := os.ReadDir(filepath.Dir(dst))
	require.NoError(t, err)
	require.Len(t, ents, 1, "no temporary folder is left beside the tree")

	writeTree(t, again, map[string]string{"suite/dev/items.jsonl": "changed\n"})
	ref3, err := artifact.PutTree(ctx, s, again)
	require.NoError(t, err)
	require.NotEqual(t, ref.SHA256, ref3.SHA256)

	_, err = artifact.PutTree(ctx, s, t.TempDir())
	require.ErrorIs(t, err, os.ErrNotExist, "an empty folder is no bundle")
}

// TestGetTreeRefusesMissingFiles reads back a tree whose store lost a
// file: GetTree fails and leaves no folder behind, so a later reader
// never takes a partial tree for a complete one.
func TestGetTreeRefusesMissingFiles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := artifacttest.NewMemory()
	src := t.TempDir()
	writeTree(t, src, map[string]string{"a.json": "a", "sub/b.json": "bb"})
	ref, err := artifact.PutTree(ctx, s, src)
	require.NoError(t, err)
	m, err := s.Manifest(ctx, ref)
	require.NoError(t, err)
	f, ok := m.File("sub/b.json")
	require.True(t, ok)
	s.DeleteFile(f.SHA256)

	dst := filepath.Join(t.TempDir(), "out")
	require.ErrorIs(t, artifact.GetTree(ctx, s, ref, dst), artifact.ErrNotFound)
	_, err = os.Stat(dst)
	require.ErrorIs(t, err, os.ErrNotExist)
	ents, err := os.ReadDir(filepath.Dir(dst))
	require.NoError(t, err)
	require.Empty(t, ents)
}

// TestEngineSourceDigestIsTheBundleDigest: the example campaign's pinned
// engine source is named by the digest its folder has as an artifact
// bundle (examples.SourceDigest is the manifest digest of its files).
func TestEngineSourceDigestIsTheBundleDigest(t *testing.T) {
	files, err := examples.EngineSourceFiles()
	require.NoError(t, err)
	require.NotEmpty(t, files)
	var fds []events.FileDigest
	for _, f := range files {
		sum := sha256.Sum256(f.Data)
		fds = append(fds, events.FileDigest{Path: f.Path, Size: int64(len(f.Data)), SHA256: hex.EncodeToString(sum[:])})
	}
	require.Equal(t, artifact.NewManifest(fds).Digest, examples.SourceDigest(files))
}
