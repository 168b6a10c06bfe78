package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/adapters/hub/hubtest"
	"github.com/lowbarena/lowbarena/domain/bundle"
)

// TestReferenceWritesCheckpointJSON: `arena reference` lists a local
// checkpoint's files with their sizes and digests, skips what the arena
// does not read, and refuses a URL with credentials without echoing them.
func TestReferenceWritesCheckpointJSON(t *testing.T) {
	src := bundleDir("fp8-w8a8")
	ckpt := t.TempDir()
	require.NoError(t, os.CopyFS(ckpt, os.DirFS(src)))
	require.NoError(t, os.WriteFile(filepath.Join(ckpt, "LICENSE"), []byte("text"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(ckpt, "pytorch_model.bin"), []byte("a pickle"), 0o644))
	r := arena(t, "reference", ckpt, "--repository", "https://huggingface.co/example-org/qwen3-tiny-fp8", "--revision", hubtest.Revision)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stderr, "skipped LICENSE")
	require.Contains(t, r.stderr, "skipped pytorch_model.bin")
	ref, err := bundle.ParseReference([]byte(r.stdout))
	require.NoError(t, err)
	var paths []string
	for _, f := range ref.Files {
		paths = append(paths, f.Path)
		sum, err := hubtest.Digest(filepath.Join(src, f.Path))
		require.NoError(t, err)
		require.Equal(t, sum, f.SHA256, f.Path)
	}
	require.Equal(t, []string{"config.json", "generation_config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
		"model.safetensors.index.json", "tokenizer.json", "tokenizer_config.json"}, paths, "submission.json is the bundle's, not the checkpoint's")

	r = arena(t, "reference", ckpt, "--repository", "https://someone:Pa55w0rd@huggingface.co/o/m", "--revision", "main")
	require.Equal(t, exitFailed, r.code)
	require.Contains(t, r.stderr, "reference_url_credentials")
	require.NotContains(t, r.stderr, "Pa55w0rd")
}

// TestReferenceFromHubTree: without a local copy, `arena reference`
// writes checkpoint.json from the hub's tree API (a listing in pages):
// the shards' sha256 are the hub's LFS digests, never downloaded, and
// only the small files stored in git are fetched to hash them. What it
// writes is what the local-copy path writes for the same files.
func TestReferenceFromHubTree(t *testing.T) {
	src := bundleDir("fp8-w8a8")
	ckpt := t.TempDir()
	require.NoError(t, os.CopyFS(ckpt, os.DirFS(src)))
	require.NoError(t, os.WriteFile(filepath.Join(ckpt, "LICENSE"), []byte("text"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(ckpt, "pytorch_model.bin"), []byte("a pickle"), 0o644))
	srv, err := hubtest.Dir(ckpt)
	require.NoError(t, err)
	defer srv.Close()
	// A folder of the repository is not part of the checkpoint, as a
	// folder beside a local copy's files is not.
	srv.SetFile("onnx/config.json", filepath.Join(ckpt, "config.json"))
	srv.ServeTree(hubtest.TreeOptions{PageSize: 3})

	local := arena(t, "reference", ckpt, "--repository", srv.Repository(), "--revision", hubtest.Revision)
	require.Equal(t, 0, local.code, local.stderr)
	srv.Reset()
	out := filepath.Join(t.TempDir(), bundle.CheckpointFile)
	remote := arena(t, "reference", "--repository", srv.Repository(), "--revision", hubtest.Revision, "--out", out)
	require.Equal(t, 0, remote.code, remote.stderr)
	written, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Equal(t, local.stdout, string(written), "the same checkpoint.json as from the local copy")
	require.Contains(t, remote.stderr, "skipped LICENSE")
	require.Contains(t, remote.stderr, "skipped pytorch_model.bin")

	var pages, fetched []string
	for _, r := range srv.Requests() {
		require.Equal(t, 200, r.Status, r.Path)
		if r.Path == hubtest.TreePath() {
			pages = append(pages, r.Path)
			continue
		}
		require.False(t, strings.HasSuffix(r.Path, ".safetensors"), "shard %s downloaded", r.Path)
		fetched = append(fetched, r.Path)
	}
	require.Greater(t, len(pages), 1, "the listing came in pages")
	require.ElementsMatch(t, []string{"config.json", "generation_config.json", "model.safetensors.index.json", "tokenizer.json", "tokenizer_config.json"}, fetched,
		"only the small files the arena reads are fetched")

	r := arena(t, "reference", "--repository", srv.URL()+"/example-org/no-such-model", "--revision", hubtest.Revision)
	require.Equal(t, exitFailed, r.code, r.stderr)
	require.Contains(t, r.stderr, "reference_not_found")
}

// TestSubmitRefusesBeforeUploading: what the build would refuse of a
// bundle by reference, and an upload over the limit, are refused by
// `arena submit` before it asks the arena anything (no arena runs here).
func TestSubmitRefusesBeforeUploading(t *testing.T) {
	decl, err := os.ReadFile(filepath.Join(bundleDir("fp8-w8a8"), "submission.json"))
	require.NoError(t, err)
	good := bundle.Reference{Repository: "https://huggingface.co/example-org/m", Revision: "main", Files: []bundle.ReferencedFile{
		{Path: "config.json", Size: 10, SHA256: strings.Repeat("a", 64)},
		{Path: "model.safetensors", Size: 1000, SHA256: strings.Repeat("b", 64)},
	}}
	write := func(t *testing.T, ref bundle.Reference, extra map[string]string) string {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, "submission.json"), decl, 0o644))
		data, err := json.Marshal(ref)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, bundle.CheckpointFile), data, 0o644))
		for name, body := range extra {
			require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644))
		}
		return dir
	}
	creds := good
	creds.Repository = "https://me:S3cretPw@huggingface.co/example-org/m"
	cases := []struct {
		name   string
		dir    func(t *testing.T) string
		args   []string
		want   []string
		absent string
	}{
		{name: "credentials in the repository URL", dir: func(t *testing.T) string { return write(t, creds, nil) },
			want: []string{"reference_url_credentials"}, absent: "S3cretPw"},
		{name: "a shard beside checkpoint.json", dir: func(t *testing.T) string { return write(t, good, map[string]string{"model.safetensors": "w"}) },
			want: []string{"bundle_reference_conflict", "model.safetensors"}},
		{name: "an upload over the limit", dir: func(*testing.T) string { return bundleDir("fp8-w8a8") }, args: []string{"--max-upload", "4096"},
			want: []string{"bundle_upload_too_large", "by reference", "arena reference"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := arena(t, append([]string{"submit", tc.dir(t), "--nats", "nats://127.0.0.1:1"}, tc.args...)...)
			require.Equal(t, exitFailed, r.code, r.stderr)
			require.NotContains(t, r.stderr, "the arena is not running", "refused before the arena is asked")
			for _, w := range tc.want {
				require.Contains(t, r.stderr, w)
			}
			if tc.absent != "" {
				require.NotContains(t, r.stderr, tc.absent)
			}
		})
	}
}
