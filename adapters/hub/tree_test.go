package hub_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/adapters/hub"
	"github.com/lowbarena/lowbarena/adapters/hub/hubtest"
	"github.com/lowbarena/lowbarena/domain/modelrepo"
	"github.com/lowbarena/lowbarena/events/reason"
)

// TestTree: the hub's tree API is read page after page: every file of
// the repository, folders left out, each LFS file with the sha256 the
// hub names and the others without one, and no file read. A next page
// on another host, and the hub's refusals, are refusals with their code.
// Digest reads a git file whole and refuses one that is not what the
// listing says.
func TestTree(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	files := checkpoint(t, dir)
	files["docs/notes.txt"] = files["config.json"]
	s := hubtest.New(files)
	defer s.Close()
	s.ServeTree(hubtest.TreeOptions{PageSize: 2})
	repo := repoOf(t, s)
	c := hub.New(quick(s))

	tree, err := c.Tree(ctx, repo)
	require.NoError(t, err)
	var paths []string
	for _, f := range tree {
		paths = append(paths, f.Path)
		want := declared(t, f.Path, files[f.Path])
		require.Equal(t, want.Size, f.Size, f.Path)
		if strings.HasSuffix(f.Path, ".safetensors") {
			require.Equal(t, want.SHA256, f.SHA256, f.Path)
		} else {
			require.Empty(t, f.SHA256, "%s is stored in git: its sha256 is read, not listed", f.Path)
		}
	}
	var want []string
	for p := range files {
		want = append(want, p)
	}
	slices.Sort(want)
	require.Equal(t, want, paths)
	pages := 0
	for _, r := range s.Requests() {
		require.Equal(t, hubtest.TreePath(), r.Path, "nothing but the listing is asked for")
		pages++
	}
	require.Equal(t, 4, pages, "7 entries (a folder among them), 2 a page")

	sum, err := c.Digest(ctx, repo, "config.json", declared(t, "config.json", files["config.json"]).Size)
	require.NoError(t, err)
	require.Equal(t, declared(t, "config.json", files["config.json"]).SHA256, sum)
	_, err = c.Digest(ctx, repo, "config.json", 3)
	require.Equal(t, reason.ReferenceDigestMismatch, modelrepo.CodeOf(err), "%v", err)
	other := filepath.Join(t.TempDir(), "config.json")
	require.NoError(t, os.WriteFile(other, []byte(`{"model_type":"llama"}`), 0o644))
	st, err := os.Stat(other)
	require.NoError(t, err)
	s.SetHook(func(w http.ResponseWriter, r *http.Request, path string) bool {
		if path != "config.json" {
			return false
		}
		w.Header().Set("X-Linked-Etag", `"`+strings.Repeat("0", 64)+`"`)
		http.ServeFile(w, r, other)
		return true
	})
	_, err = c.Digest(ctx, repo, "config.json", st.Size())
	require.Equal(t, reason.ReferenceDigestMismatch, modelrepo.CodeOf(err), "%v", err)

	for _, tc := range []struct {
		name string
		hook hubtest.Hook
		code reason.Code
		want string
	}{
		{"a next page on another host", func(w http.ResponseWriter, _ *http.Request, _ string) bool {
			w.Header().Set("Link", `<https://elsewhere.example/api/models/x/tree/main?cursor=2>; rel="next"`)
			_, _ = w.Write([]byte(`[]`))
			return true
		}, reason.ReferenceUnavailable, "another host"},
		{"not found", func(w http.ResponseWriter, _ *http.Request, _ string) bool {
			http.NotFound(w, nil)
			return true
		}, reason.ReferenceNotFound, "HTTP 404"},
		{"private", func(w http.ResponseWriter, _ *http.Request, _ string) bool {
			w.WriteHeader(http.StatusUnauthorized)
			return true
		}, reason.ReferenceUnauthorized, "HTTP 401"},
		{"not the tree API", func(w http.ResponseWriter, _ *http.Request, _ string) bool {
			_, _ = w.Write([]byte(`<html>a mirror</html>`))
			return true
		}, reason.ReferenceUnavailable, "tree API"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s.SetHook(tc.hook)
			_, err := c.Tree(ctx, repo)
			require.Equal(t, tc.code, modelrepo.CodeOf(err), "%v", err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}
