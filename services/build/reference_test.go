package build_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/adapters/hub"
	"github.com/lowbarena/lowbarena/adapters/hub/hubtest"
	"github.com/lowbarena/lowbarena/domain/bundle"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/artifact"
	"github.com/lowbarena/lowbarena/platform/artifact/artifacttest"
	"github.com/lowbarena/lowbarena/platform/stage"
	"github.com/lowbarena/lowbarena/services/build"
)

// token is the operator's token in these tests: it must never show.
const token = "hf_build_NeverShow_31337"

// repository writes a checkpoint's files into a folder served like a
// model hub and returns the server and checkpoint.json's files.
func repository(t *testing.T) (*hubtest.Server, map[string]string, []bundle.ReferencedFile) {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"config.json":                      `{"architectures":["Qwen3ForCausalLM"],"model_type":"qwen3"}`,
		"model.safetensors.index.json":     `{"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}}`,
		"tokenizer.json":                   `{"model":{}}`,
		"model-00001-of-00002.safetensors": strings.Repeat("shard one, never read by the build. ", 1000),
		"model-00002-of-00002.safetensors": strings.Repeat("shard two, never read by the build. ", 1000),
	}
	local := map[string]string{}
	var decl []bundle.ReferencedFile
	for name, body := range files {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
		local[name] = p
		decl = append(decl, bundle.ReferencedFile{Path: name, Size: int64(len(body)), SHA256: sha([]byte(body))})
	}
	srv := hubtest.New(local)
	t.Cleanup(srv.Close)
	return srv, files, decl
}

// byReference is a bundle folder: submission.json and checkpoint.json
// naming srv's repository.
func byReference(t *testing.T, srv *hubtest.Server, decl []bundle.ReferencedFile, extra map[string]string) string {
	t.Helper()
	files := map[string]string{"submission.json": goodFiles()["submission.json"]}
	for k, v := range extra {
		files[k] = v
	}
	dir := folder(t, files)
	require.NoError(t, bundle.WriteReference(dir, bundle.Reference{Repository: srv.Repository(), Revision: hubtest.Revision, Files: decl}))
	return dir
}

func summary(srv *hubtest.Server, decl []bundle.ReferencedFile) *events.CheckpointReference {
	var n int64
	for _, f := range decl {
		n += f.Size
	}
	return &events.CheckpointReference{Repository: srv.Repository(), Revision: hubtest.Revision, Files: len(decl), Bytes: n, Commit: hubtest.Revision}
}

// TestBuildByReference: a bundle by reference is built from its small
// files, fetched from the repository and checked, never a shard; every
// way it can go wrong is refused with its code, nothing stored, and no
// sentence holds the operator's token.
func TestBuildByReference(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		// edit changes what checkpoint.json declares.
		edit func(decl []bundle.ReferencedFile) []bundle.ReferencedFile
		// extra files of the bundle besides its declarations.
		extra map[string]string
		// repo changes the repository URL written in checkpoint.json.
		repo string
		// announce changes what the submission event says.
		announce func(in *events.SubmissionReceivedData, srv *hubtest.Server, decl []bundle.ReferencedFile)
		hook     hubtest.Hook
		hosts    []string
		limit    int64
		code     reason.Code // "" for a built bundle
		// asked: the repository was asked nothing (the refusal came
		// before any request).
		askedNothing bool
	}{
		{name: "built from its small files"},
		{name: "built, the event naming the same reference", announce: func(in *events.SubmissionReceivedData, srv *hubtest.Server, decl []bundle.ReferencedFile) {
			in.Reference = summary(srv, decl)
		}},
		{name: "built, with an engine patch in the bundle", extra: map[string]string{"engine.patch": "--- a\n+++ b\n"}},
		{name: "the event names another revision", askedNothing: true, code: reason.BundleDeclarationMismatch,
			announce: func(in *events.SubmissionReceivedData, srv *hubtest.Server, decl []bundle.ReferencedFile) {
				in.Reference = summary(srv, decl)
				in.Reference.Revision = "main"
			}},
		{name: "the event names a reference the bundle lacks", askedNothing: true, code: reason.BundleDeclarationMismatch,
			announce: func(in *events.SubmissionReceivedData, srv *hubtest.Server, decl []bundle.ReferencedFile) {
				in.Reference = summary(srv, decl)
			}},
		{name: "a small file changed since it was declared", code: reason.ReferenceDigestMismatch,
			edit: func(decl []bundle.ReferencedFile) []bundle.ReferencedFile {
				i := slices.IndexFunc(decl, func(f bundle.ReferencedFile) bool { return f.Path == "tokenizer.json" })
				decl[i].SHA256 = strings.Repeat("0", 64)
				return decl
			}},
		{name: "a 404 for the config", code: reason.ReferenceNotFound,
			hook: func(w http.ResponseWriter, r *http.Request, path string) bool {
				if path == "config.json" {
					http.NotFound(w, r)
					return true
				}
				return false
			}},
		{name: "a private repository the token may not read", code: reason.ReferenceUnauthorized,
			hook: func(w http.ResponseWriter, r *http.Request, path string) bool {
				w.WriteHeader(http.StatusForbidden)
				_, _ = w.Write([]byte("forbidden for " + r.Header.Get("Authorization")))
				return true
			}},
		{name: "a repository that keeps failing", code: reason.ReferenceUnavailable,
			hook: func(w http.ResponseWriter, r *http.Request, path string) bool {
				w.WriteHeader(http.StatusBadGateway)
				return true
			}},
		{name: "a host the operator does not list", hosts: []string{"huggingface.co"}, code: reason.ReferenceHostNotAllowed, askedNothing: true},
		{name: "credentials in the URL", repo: "http://someone:pa55word@127.0.0.1:1/org/model", code: reason.ReferenceURLCredentials, askedNothing: true},
		{name: "a shard in the bundle too", extra: map[string]string{"model-00001-of-00002.safetensors": "x"}, code: reason.BundleReferenceConflict, askedNothing: true},
		{name: "a listed file in the bundle too", extra: map[string]string{"tokenizer.json": "{}"}, code: reason.BundleReferenceConflict, askedNothing: true},
		{name: "pickled weights listed", code: reason.BundleUnsafeFile, askedNothing: true,
			edit: func(decl []bundle.ReferencedFile) []bundle.ReferencedFile {
				return append(decl, bundle.ReferencedFile{Path: "pytorch_model.bin", Size: 10, SHA256: strings.Repeat("1", 64)})
			}},
		{name: "an upload over the limit", limit: 100, code: reason.BundleUploadTooLarge, askedNothing: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv, files, decl := repository(t)
			if tc.edit != nil {
				decl = tc.edit(decl)
			}
			dir := byReference(t, srv, decl, tc.extra)
			if tc.repo != "" {
				data, err := os.ReadFile(filepath.Join(dir, bundle.CheckpointFile))
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(filepath.Join(dir, bundle.CheckpointFile), []byte(strings.Replace(string(data), srv.Repository(), tc.repo, 1)), 0o644))
			}
			if tc.name == "the event names a reference the bundle lacks" {
				require.NoError(t, os.Remove(filepath.Join(dir, bundle.CheckpointFile)))
				require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), []byte(files["config.json"]), 0o644))
				require.NoError(t, os.WriteFile(filepath.Join(dir, "model.safetensors"), []byte("w"), 0o644))
			}
			srv.SetHook(tc.hook)
			archive := pack(t, dir)
			in := received("sub", archive)
			if tc.announce != nil {
				tc.announce(&in, srv, decl)
			}
			uploads := &memUploads{}
			uploads.put(in.Bundle.Bucket, in.Bundle.Object, archive)
			hosts := tc.hosts
			if hosts == nil {
				hosts = []string{srv.Host()}
			}
			arts := artifacttest.NewMemory()
			b := &build.Builder{Uploads: uploads, Artifacts: arts, Bundles: &memBundles{}, WorkDir: t.TempDir(), MaxUploadBytes: tc.limit,
				Hub: hub.New(hub.Options{Hosts: hosts, Tokens: map[string]string{srv.Host(): token}, Attempts: 2, RetryBackoff: time.Millisecond})}
			out, err := b.Build(context.Background(), in)
			for _, p := range srv.Asked() {
				require.False(t, bundle.Remote(p), "the build never asks for a shard (%s)", p)
			}
			if tc.askedNothing {
				require.Empty(t, srv.Requests())
			}
			if tc.code != "" {
				r := stage.AsRefusal(err)
				require.NotNil(t, r, "a refusal, not a retry: %v", err)
				require.Equal(t, tc.code, r.Code, r.Message)
				require.NotContains(t, r.Message, token)
				require.NotContains(t, r.Message, "pa55word")
				require.True(t, arts.Empty(), "nothing refused reaches the artifact store")
				if tc.code == reason.BundleUploadTooLarge {
					require.Contains(t, r.Message, "by reference")
					require.Contains(t, r.Message, "arena reference")
				}
				return
			}
			require.NoError(t, err)
			require.ElementsMatch(t, []string{"config.json", "model.safetensors.index.json", "tokenizer.json"}, srv.Asked())
			require.Equal(t, summary(srv, decl), out.Reference)

			// The manifest lists every file; the store holds all but
			// the shards.
			m := artifact.NewManifest(out.Files)
			require.Equal(t, m.Digest, out.BundleDigest)
			var want []string
			for _, f := range decl {
				want = append(want, f.Path)
			}
			want = append(want, "submission.json", bundle.CheckpointFile)
			for name := range tc.extra {
				want = append(want, name)
			}
			var got []string
			for _, f := range out.Files {
				got = append(got, f.Path)
				_, err := arts.OpenFile(context.Background(), f.SHA256)
				if bundle.Remote(f.Path) {
					require.ErrorIs(t, err, artifact.ErrNotFound, "%s stays in its repository", f.Path)
					continue
				}
				require.NoError(t, err, f.Path)
				if body, ok := files[f.Path]; ok {
					require.Equal(t, sha([]byte(body)), f.SHA256, f.Path)
				}
			}
			require.ElementsMatch(t, want, got)
			require.Equal(t, summary(srv, decl).Bytes+int64(len(goodFiles()["submission.json"]))+fileSize(t, dir, bundle.CheckpointFile)+extraBytes(tc.extra), out.Bytes)
		})
	}
}

func fileSize(t *testing.T, dir, name string) int64 {
	st, err := os.Stat(filepath.Join(dir, name))
	require.NoError(t, err)
	return st.Size()
}

func extraBytes(m map[string]string) int64 {
	var n int64
	for _, v := range m {
		n += int64(len(v))
	}
	return n
}

// TestBuildRecognisesTheSameReference: the same reference submitted twice
// is the same bundle; a redelivery is built the same.
func TestBuildRecognisesTheSameReference(t *testing.T) {
	t.Parallel()
	srv, _, decl := repository(t)
	archive := pack(t, byReference(t, srv, decl, nil))
	uploads := &memUploads{}
	b := &build.Builder{Uploads: uploads, Artifacts: artifacttest.NewMemory(), Bundles: &memBundles{}, WorkDir: t.TempDir(),
		Hub: hub.New(hub.Options{Hosts: []string{srv.Host()}})}
	build := func(id string) events.BuildCompletedData {
		in := received(id, archive)
		uploads.put(in.Bundle.Bucket, in.Bundle.Object, archive)
		out, err := b.Build(context.Background(), in)
		require.NoError(t, err)
		return out
	}
	one := build("one")
	require.Equal(t, one, build("one"))
	two := build("two")
	require.Equal(t, one.BundleDigest, two.BundleDigest)
	require.Equal(t, "one", two.DuplicateOf)
}

// TestBuildPinsTheCommit: a reference to a branch is resolved to the
// commit the hub names, once; every small file is read at that commit
// although the branch moves meanwhile (to a commit whose tokenizer is
// another), build.completed carries the commit, and the checkpoint.json
// stored with the bundle names it, so the contract stage and the runner
// read that commit too.
func TestBuildPinsTheCommit(t *testing.T) {
	t.Parallel()
	srv, _, decl := repository(t)
	dir := folder(t, map[string]string{"submission.json": goodFiles()["submission.json"]})
	require.NoError(t, bundle.WriteReference(dir, bundle.Reference{Repository: srv.Repository(), Revision: hubtest.Branch, Files: decl}))
	other := filepath.Join(t.TempDir(), "tokenizer.json")
	require.NoError(t, os.WriteFile(other, []byte(`{"model":{"moved":true}}`), 0o644))
	var once sync.Once
	srv.SetHook(func(w http.ResponseWriter, r *http.Request, path string) bool {
		if r.Method == http.MethodGet {
			// The branch moves once the build started reading.
			once.Do(func() { srv.Push(map[string]string{"tokenizer.json": other}) })
		}
		return false
	})
	archive := pack(t, dir)
	in := received("pinned", archive)
	uploads := &memUploads{}
	uploads.put(in.Bundle.Bucket, in.Bundle.Object, archive)
	arts := artifacttest.NewMemory()
	b := &build.Builder{Uploads: uploads, Artifacts: arts, Bundles: &memBundles{}, WorkDir: t.TempDir(),
		Hub: hub.New(hub.Options{Hosts: []string{srv.Host()}})}
	out, err := b.Build(context.Background(), in)
	require.NoError(t, err)
	require.NotEqual(t, hubtest.Revision, srv.Head(), "the branch moved")
	require.Equal(t, hubtest.Branch, out.Reference.Revision, "the participant's revision, as written")
	require.Equal(t, hubtest.Revision, out.Reference.Commit, "the commit it was when the build resolved it")

	reqs := srv.Requests()
	require.Equal(t, http.MethodHead, reqs[0].Method)
	require.Equal(t, hubtest.Branch, reqs[0].Revision, "resolved once")
	for _, r := range reqs[1:] {
		require.Equal(t, hubtest.Revision, r.Revision, "%s read at the commit", r.Path)
	}

	m := artifact.NewManifest(out.Files)
	require.Equal(t, m.Digest, out.BundleDigest)
	f, ok := m.File(bundle.CheckpointFile)
	require.True(t, ok)
	rc, err := arts.OpenFile(context.Background(), f.SHA256)
	require.NoError(t, err)
	data, err := io.ReadAll(rc)
	require.NoError(t, rc.Close())
	require.NoError(t, err)
	require.Equal(t, f.Size, int64(len(data)))
	stored, err := bundle.ParseReference(data)
	require.NoError(t, err)
	require.Equal(t, hubtest.Revision, stored.Revision, "the stored bundle is pinned")
	require.Equal(t, len(decl), len(stored.Files))
}

// TestBuildWaitsOutARateLimit: a hub that rate-limits the build for longer
// than the client waits in place (RateLimit: r=0;t=120) makes the stage
// wait that long (a *stage.Wait, retried then), never a refusal.
func TestBuildWaitsOutARateLimit(t *testing.T) {
	t.Parallel()
	srv, _, decl := repository(t)
	srv.SetHook(func(w http.ResponseWriter, r *http.Request, path string) bool {
		w.Header().Set("RateLimit", `"resolvers";r=0;t=120`)
		w.WriteHeader(http.StatusTooManyRequests)
		return true
	})
	archive := pack(t, byReference(t, srv, decl, nil))
	in := received("limited", archive)
	uploads := &memUploads{}
	uploads.put(in.Bundle.Bucket, in.Bundle.Object, archive)
	arts := artifacttest.NewMemory()
	b := &build.Builder{Uploads: uploads, Artifacts: arts, Bundles: &memBundles{}, WorkDir: t.TempDir(),
		Hub: hub.New(hub.Options{Hosts: []string{srv.Host()}})}
	_, err := b.Build(context.Background(), in)
	require.Nil(t, stage.AsRefusal(err), "not a refusal: %v", err)
	var w *stage.Wait
	require.ErrorAs(t, err, &w)
	require.Equal(t, 121*time.Second, w.After)
	require.Len(t, srv.Requests(), 1, "asked once, then left to the stage's wait")
	require.True(t, arts.Empty())
}
