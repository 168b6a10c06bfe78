package hub_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/adapters/hub"

	"github.com/lowbarena/lowbarena/adapters/hub/hubtest"
	"github.com/lowbarena/lowbarena/domain/modelrepo"
	"github.com/lowbarena/lowbarena/domain/safetensors"
	"github.com/lowbarena/lowbarena/events/reason"
)

// checkpoint writes a sharded checkpoint of three shards and its index
// into dir and returns every file of it.
func checkpoint(t *testing.T, dir string) map[string]string {
	t.Helper()
	weightMap := map[string]string{}
	for i, tensors := range [][]string{{"model.embed_tokens.weight", "model.norm.weight"}, {"model.layers.0.mlp.down_proj.weight"}, {"lm_head.weight"}} {
		name := fmt.Sprintf("model-%05d-of-00003.safetensors", i+1)
		var w safetensors.Writer
		w.Metadata = map[string]string{"format": "pt"}
		for j, tn := range tensors {
			data := bytes.Repeat([]byte{byte(i*16 + j + 1)}, 2*64*32)
			w.MustAdd(tn, safetensors.BF16, []int64{64, 32}, data)
			weightMap[tn] = name
		}
		_, err := w.WriteFile(filepath.Join(dir, name))
		require.NoError(t, err)
	}
	idx, err := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": 4 * 2 * 64 * 32}, "weight_map": weightMap})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, safetensors.IndexFile), idx, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"architectures":["Qwen3ForCausalLM"],"model_type":"qwen3"}`), 0o644))
	files := map[string]string{}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		files[e.Name()] = filepath.Join(dir, e.Name())
	}
	return files
}

// declared is the modelrepo.File checkpoint.json would declare for a file on disk.
func declared(t *testing.T, path, local string) modelrepo.File {
	t.Helper()
	st, err := os.Stat(local)
	require.NoError(t, err)
	sum, err := hubtest.Digest(local)
	require.NoError(t, err)
	return modelrepo.File{Path: path, Size: st.Size(), SHA256: sum}
}

func repoOf(t *testing.T, s *hubtest.Server) modelrepo.Repo {
	t.Helper()
	r, err := modelrepo.Parse(s.Repository(), hubtest.Revision)
	require.NoError(t, err)
	return r
}

// quick are short deadlines and one attempt, for tests of failures.
func quick(s *hubtest.Server) hub.Options {
	return hub.Options{Hosts: []string{s.Host()}, IdleTimeout: 200 * time.Millisecond, HeaderTimeout: 300 * time.Millisecond,
		RequestTimeout: 5 * time.Second, Attempts: 1, RetryBackoff: time.Millisecond}
}

// readHeaders reads the checkpoint's headers as the contract stage does:
// the index whole, each shard through a HeaderReader.
func readHeaders(ctx context.Context, c *hub.Client, repo modelrepo.Repo, decl map[string]modelrepo.File) (*safetensors.Checkpoint, error) {
	sizes := map[string]int64{}
	for p, f := range decl {
		sizes[p] = f.Size
	}
	return safetensors.ReadCheckpointFrom(sizes, func(name string) (io.ReadCloser, error) {
		f := decl[name]
		if strings.HasSuffix(name, ".safetensors") {
			return c.HeaderReader(ctx, repo, f), nil
		}
		data, err := c.Fetch(ctx, repo, f, 64<<20)
		if err != nil {
			return nil, err
		}
		return io.NopCloser(bytes.NewReader(data)), nil
	})
}

// TestHeadersOverRange reads a sharded checkpoint's headers from a
// loopback repository: the same checkpoint as read from its folder, two
// Range requests per shard (8 bytes, then the header), and the bytes the
// server sent for the shards are exactly the headers' 8+N.
func TestHeadersOverRange(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	files := checkpoint(t, dir)
	srv := hubtest.New(files)
	defer srv.Close()
	decl := map[string]modelrepo.File{}
	for p, local := range files {
		decl[p] = declared(t, p, local)
	}
	local, err := safetensors.ReadCheckpoint(dir)
	require.NoError(t, err)

	c := hub.New(hub.Options{Hosts: []string{srv.Host()}})
	ck, err := readHeaders(context.Background(), c, repoOf(t, srv), decl)
	require.NoError(t, err)
	require.Equal(t, local.Tensors(), ck.Tensors())
	require.Equal(t, local.FileBytes(), ck.FileBytes())

	var shardBytes int64
	for _, r := range srv.Requests() {
		if strings.HasSuffix(r.Path, ".safetensors") {
			require.Equal(t, http.StatusPartialContent, r.Status, r)
		}
	}
	for _, f := range local.Files {
		want := []string{"bytes=0-7", fmt.Sprintf("bytes=8-%d", 8+f.Header.HeaderLen-1)}
		var got []string
		for _, r := range srv.Requests() {
			if r.Path == f.Name {
				got = append(got, r.Range)
			}
		}
		require.Equal(t, want, got, f.Name)
		shardBytes += 8 + f.Header.HeaderLen
	}
	sent := srv.BytesSent() - decl[safetensors.IndexFile].Size
	require.Equal(t, shardBytes, sent, "the server sent the headers and nothing else of the shards")
	require.Equal(t, local.BytesRead(), ck.BytesRead())
}

// synth is a file of size bytes that starts with prefix and holds zeros
// after it, served without existing on disk.
type synth struct {
	prefix []byte
	size   int64
	off    int64
}

func (s *synth) Read(p []byte) (int, error) {
	if s.off >= s.size {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), s.size-s.off))
	clear(p[:n])
	if s.off < int64(len(s.prefix)) {
		copy(p[:n], s.prefix[s.off:])
	}
	s.off += int64(n)
	return n, nil
}

func (s *synth) Seek(off int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
		s.off = off
	case io.SeekCurrent:
		s.off += off
	case io.SeekEnd:
		s.off = s.size + off
	}
	return s.off, nil
}

// TestBadRepositories: each way a repository misbehaves is refused with
// its own code and a sentence, on a loopback server that misbehaves on
// purpose, and without reading what was not asked for.
func TestBadRepositories(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	files := checkpoint(t, dir)
	const shard = "model-00002-of-00003.safetensors"
	// changed is the shard as rewritten after it was declared: same
	// size, other bytes.
	changedShard := filepath.Join(t.TempDir(), shard)
	data, err := os.ReadFile(files[shard])
	require.NoError(t, err)
	data[len(data)-1] ^= 0xff
	require.NoError(t, os.WriteFile(changedShard, data, 0o644))
	grownShard := filepath.Join(t.TempDir(), shard)
	require.NoError(t, os.WriteFile(grownShard, append(data, 0), 0o644))

	const huge = int64(8) << 30
	bigHeader := make([]byte, 8)
	binary.LittleEndian.PutUint64(bigHeader, 200<<20)

	type check func(t *testing.T, srv *hubtest.Server, err error)
	cases := []struct {
		name string
		// file is the repository path read; its declaration comes
		// from files unless declare overrides it.
		file    string
		declare func(f modelrepo.File) modelrepo.File
		hook    hubtest.Hook
		setup   func(t *testing.T, srv *hubtest.Server)
		// read is headers (the contract's reads) or fetch (build's).
		fetch bool
		code  string
		check check
	}{
		{name: "a Range request answered with the whole file", file: shard,
			declare: func(f modelrepo.File) modelrepo.File { f.Size = huge; return f },
			hook: func(w http.ResponseWriter, r *http.Request, path string) bool {
				w.Header().Set("Content-Length", fmt.Sprint(huge))
				w.WriteHeader(http.StatusOK)
				chunk := make([]byte, 1<<20)
				for {
					if _, err := w.Write(chunk); err != nil {
						return true
					}
				}
			},
			code: string(reason.ReferenceRangeIgnored),
			check: func(t *testing.T, srv *hubtest.Server, err error) {
				require.Contains(t, err.Error(), "did not read the answer")
				// What the kernel's buffers took before the
				// connection was dropped, not the 8 GiB offered.
				require.Less(t, srv.BytesSent(), int64(64<<20))
			}},
		{name: "a Range request answered with other bytes", file: shard,
			hook: func(w http.ResponseWriter, r *http.Request, path string) bool {
				w.Header().Set("Content-Range", "bytes 0-1023/4096")
				w.WriteHeader(http.StatusPartialContent)
				_, _ = w.Write(make([]byte, 1024))
				return true
			},
			code: string(reason.ReferenceRangeIgnored)},
		{name: "redirects without end", file: shard,
			hook: func(w http.ResponseWriter, r *http.Request, path string) bool {
				http.Redirect(w, r, r.URL.Path, http.StatusFound)
				return true
			},
			code: string(reason.ReferenceRedirectLoop),
			check: func(t *testing.T, srv *hubtest.Server, err error) {
				require.Len(t, srv.Requests(), hub.DefaultMaxRedirects+1)
			}},
		{name: "a redirect to another scheme", file: shard,
			hook: func(w http.ResponseWriter, r *http.Request, path string) bool {
				http.Redirect(w, r, "file:///etc/passwd", http.StatusFound)
				return true
			},
			code: string(reason.ReferenceRedirectScheme),
			check: func(t *testing.T, srv *hubtest.Server, err error) {
				require.Contains(t, err.Error(), "a file: address")
			}},
		{name: "a file whose bytes changed since it was declared", file: shard,
			setup: func(t *testing.T, srv *hubtest.Server) { srv.SetFile(shard, changedShard) },
			code:  string(reason.ReferenceDigestMismatch),
			check: func(t *testing.T, srv *hubtest.Server, err error) {
				require.Contains(t, err.Error(), "pin the revision to a commit")
			}},
		{name: "a file whose size changed, from a server that names no digest", file: shard,
			setup: func(t *testing.T, srv *hubtest.Server) { srv.SetFile(shard, grownShard); srv.WithoutDigests() },
			code:  string(reason.ReferenceDigestMismatch)},
		{name: "a small file whose bytes changed", file: "config.json", fetch: true,
			setup: func(t *testing.T, srv *hubtest.Server) {
				p := filepath.Join(t.TempDir(), "config.json")
				require.NoError(t, os.WriteFile(p, []byte(`{"architectures":["Qwen3ForCausalLM"],"model_type":"qwen9"}`), 0o644))
				srv.SetFile("config.json", p)
				srv.WithoutDigests()
			},
			code: string(reason.ReferenceDigestMismatch)},
		{name: "a header length past the limit", file: "big.safetensors",
			declare: func(modelrepo.File) modelrepo.File {
				return modelrepo.File{Path: "big.safetensors", Size: 1 << 30, SHA256: strings.Repeat("ab", 32)}
			},
			hook: func(w http.ResponseWriter, r *http.Request, path string) bool {
				if path != "big.safetensors" {
					return false
				}
				http.ServeContent(w, r, path, time.Time{}, &synth{prefix: bigHeader, size: 1 << 30})
				return true
			},
			code: string(reason.HeaderTooLarge),
			check: func(t *testing.T, srv *hubtest.Server, err error) {
				reqs := srv.Requests()
				require.Len(t, reqs, 1, "the length prefix only")
				require.Equal(t, "bytes=0-7", reqs[0].Range)
				require.Equal(t, int64(8), srv.BytesSent())
			}},
		{name: "a server that stalls after its headers", file: shard,
			hook: func(w http.ResponseWriter, r *http.Request, path string) bool {
				w.Header().Set("Content-Range", "bytes 0-7/"+fmt.Sprint(mustSize(t, files[shard])))
				w.Header().Set("Content-Length", "8")
				w.WriteHeader(http.StatusPartialContent)
				w.(http.Flusher).Flush()
				<-r.Context().Done()
				return true
			},
			code: string(reason.ReferenceTimeout),
			check: func(t *testing.T, srv *hubtest.Server, err error) {
				require.Contains(t, err.Error(), "stopped sending")
			}},
		{name: "a server that never answers", file: shard,
			hook: func(w http.ResponseWriter, r *http.Request, path string) bool {
				<-r.Context().Done()
				return true
			},
			code: string(reason.ReferenceTimeout)},
		{name: "a 404 for one shard", file: shard,
			hook: func(w http.ResponseWriter, r *http.Request, path string) bool {
				if path == shard {
					http.NotFound(w, r)
					return true
				}
				return false
			},
			code: string(reason.ReferenceNotFound),
			check: func(t *testing.T, srv *hubtest.Server, err error) {
				require.Contains(t, err.Error(), shard+" is not in "+srv.Repository()+"@"+hubtest.Revision)
			}},
		{name: "a private repository and no token", file: shard,
			hook: func(w http.ResponseWriter, r *http.Request, path string) bool {
				w.WriteHeader(http.StatusUnauthorized)
				return true
			},
			code: string(reason.ReferenceUnauthorized),
			check: func(t *testing.T, srv *hubtest.Server, err error) {
				require.Contains(t, err.Error(), "holds no token for "+srv.Host())
			}},
		{name: "a server error that lasts", file: "config.json", fetch: true,
			hook: func(w http.ResponseWriter, r *http.Request, path string) bool {
				w.WriteHeader(http.StatusServiceUnavailable)
				return true
			},
			code: string(reason.ReferenceUnavailable)},
		{name: "a small file over the limit", file: "config.json", fetch: true,
			declare: func(f modelrepo.File) modelrepo.File { f.Size = 65 << 20; return f },
			code:    string(reason.ReferenceFileTooLarge),
			check: func(t *testing.T, srv *hubtest.Server, err error) {
				require.Empty(t, srv.Requests(), "refused before any request")
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := hubtest.New(files)
			t.Cleanup(srv.Close)
			f := modelrepo.File{Path: tc.file}
			if local, ok := files[tc.file]; ok {
				f = declared(t, tc.file, local)
			}
			if tc.declare != nil {
				f = tc.declare(f)
			}
			if tc.setup != nil {
				tc.setup(t, srv)
			}
			srv.SetHook(tc.hook)
			c := hub.New(quick(srv))
			var err error
			if tc.fetch {
				_, err = c.Fetch(context.Background(), repoOf(t, srv), f, 64<<20)
			} else {
				r := c.HeaderReader(context.Background(), repoOf(t, srv), f)
				_, err = safetensors.ReadHeaderStream(r, f.Size)
				_ = r.Close()
			}
			require.Error(t, err)
			got := string(modelrepo.CodeOf(err))
			if got == "" {
				got = string(safetensors.CodeOf(err))
			}
			require.Equal(t, tc.code, got, "%v", err)
			if tc.check != nil {
				tc.check(t, srv, err)
			}
		})
	}
}

func mustSize(t *testing.T, path string) int64 {
	st, err := os.Stat(path)
	require.NoError(t, err)
	return st.Size()
}

// TestRedirectPolicy: a hub that redirects to its CDN is followed (and
// the digest it names on the redirect is checked); https never
// downgrades to http.
func TestRedirectPolicy(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	files := checkpoint(t, dir)
	cdn := hubtest.New(files)
	t.Cleanup(cdn.Close)
	f := declared(t, "config.json", files["config.json"])

	t.Run("to a CDN, naming the file's digest on the way", func(t *testing.T) {
		t.Parallel()
		hubSrv := hubtest.New(nil)
		defer hubSrv.Close()
		for _, sha := range []string{f.SHA256, strings.Repeat("0", 64)} {
			hubSrv.SetHook(func(w http.ResponseWriter, r *http.Request, path string) bool {
				w.Header().Set("X-Linked-Etag", `"`+sha+`"`)
				http.Redirect(w, r, cdn.URL()+hubtest.FileURL(path)+"?X-Amz-Signature=abc", http.StatusFound)
				return true
			})
			data, err := hub.New(hub.Options{Hosts: []string{hubSrv.Host()}}).Fetch(context.Background(), repoOf(t, hubSrv), f, 1<<20)
			if sha == f.SHA256 {
				require.NoError(t, err)
				require.Len(t, data, int(f.Size))
				continue
			}
			require.Equal(t, reason.ReferenceDigestMismatch, modelrepo.CodeOf(err), "%v", err)
		}
	})
	t.Run("from https to http", func(t *testing.T) {
		t.Parallel()
		tlsSrv := hubtest.NewTLS(nil)
		defer tlsSrv.Close()
		cdn := hubtest.New(files)
		defer cdn.Close()
		tlsSrv.SetHook(func(w http.ResponseWriter, r *http.Request, path string) bool {
			http.Redirect(w, r, cdn.URL()+hubtest.FileURL(path), http.StatusFound)
			return true
		})
		pool := x509.NewCertPool()
		pool.AddCert(tlsSrv.Server().Certificate())
		c := hub.New(hub.Options{Hosts: []string{tlsSrv.Host()}, RootCAs: pool})
		_, err := c.Fetch(context.Background(), repoOf(t, tlsSrv), f, 1<<20)
		require.Equal(t, reason.ReferenceRedirectScheme, modelrepo.CodeOf(err), "%v", err)
		require.Contains(t, err.Error(), "to a http: address")
		require.Empty(t, cdn.Asked(), "the http address was never asked")
	})
}

// TestRetriesAServerError: a 503 that passes is retried; one that stays
// is refused after Attempts requests.
func TestRetriesAServerError(t *testing.T) {
	t.Parallel()
	files := checkpoint(t, t.TempDir())
	f := declared(t, "config.json", files["config.json"])
	for _, fails := range []int{1, 3} {
		srv := hubtest.New(files)
		defer srv.Close()
		var mu sync.Mutex
		n := 0
		srv.SetHook(func(w http.ResponseWriter, r *http.Request, path string) bool {
			mu.Lock()
			defer mu.Unlock()
			if n++; n <= fails {
				w.WriteHeader(http.StatusServiceUnavailable)
				return true
			}
			return false
		})
		_, err := hub.New(hub.Options{Hosts: []string{srv.Host()}, Attempts: 3, RetryBackoff: time.Millisecond}).Fetch(context.Background(), repoOf(t, srv), f, 1<<20)
		if fails < 3 {
			require.NoError(t, err)
			require.Len(t, srv.Requests(), fails+1)
			continue
		}
		require.Equal(t, reason.ReferenceUnavailable, modelrepo.CodeOf(err))
		require.Contains(t, err.Error(), "kept answering HTTP 503 after 3 attempts")
		require.Len(t, srv.Requests(), 3)
	}
}

// TestAllowedHosts: the operator's hosts, and https except for loopback
// or a host listed with http://.
func TestAllowedHosts(t *testing.T) {
	t.Parallel()
	c := hub.New(hub.Options{Hosts: []string{"huggingface.co", "http://mirror.internal:8080", "127.0.0.1:9"}})
	for base, code := range map[string]modelrepo.Code{
		"https://huggingface.co/o/m":      "",
		"https://huggingface.co:443/o/m":  "",
		"http://huggingface.co/o/m":       reason.ReferenceHostNotAllowed,
		"https://example.com/o/m":         reason.ReferenceHostNotAllowed,
		"http://mirror.internal:8080/o/m": "",
		"http://127.0.0.1:9/o/m":          "",
		"http://127.0.0.1:10/o/m":         reason.ReferenceHostNotAllowed,
	} {
		r, err := modelrepo.Parse(base, "main")
		require.NoError(t, err)
		require.Equal(t, code, modelrepo.CodeOf(c.Allowed(r)), base)
	}
	r, err := modelrepo.Parse("https://huggingface.co/o/m", "main")
	require.NoError(t, err)
	require.Equal(t, reason.ReferenceHostNotAllowed, modelrepo.CodeOf(hub.New(hub.Options{}).Allowed(r)), "no hosts, no references")
}

// TestTokenGoesToItsHostOnly: the operator's token reaches the host it
// is configured for, not the CDN that host redirects to.
func TestTokenGoesToItsHostOnly(t *testing.T) {
	t.Parallel()
	files := checkpoint(t, t.TempDir())
	cdn := hubtest.New(files)
	defer cdn.Close()
	hubSrv := hubtest.New(nil)
	defer hubSrv.Close()
	hubSrv.SetHook(func(w http.ResponseWriter, r *http.Request, path string) bool {
		if r.Header.Get("Authorization") != "Bearer hf_secret_token_123" {
			w.WriteHeader(http.StatusUnauthorized)
			return true
		}
		http.Redirect(w, r, cdn.URL()+hubtest.FileURL(path), http.StatusFound)
		return true
	})
	c := hub.New(hub.Options{Hosts: []string{hubSrv.Host()}, Tokens: map[string]string{hubSrv.Host(): "hf_secret_token_123"}})
	f := declared(t, "config.json", files["config.json"])
	_, err := c.Fetch(context.Background(), repoOf(t, hubSrv), f, 1<<20)
	require.NoError(t, err)
	require.Equal(t, "Bearer hf_secret_token_123", hubSrv.Requests()[0].Authorization)
	require.Len(t, cdn.Requests(), 1)
	require.Empty(t, cdn.Requests()[0].Authorization, "the CDN on another host:port gets no token")
}

// TestTokenNeverSurfaces: with a token configured, no error and no log
// line of any failure holds it, nor the signed query of a redirect.
func TestTokenNeverSurfaces(t *testing.T) {
	t.Parallel()
	const token = "hf_NeverShowThis_9f8e7d"
	const signed = "X-Amz-Signature=SignedSecret42"
	files := checkpoint(t, t.TempDir())
	srv := hubtest.New(files)
	defer srv.Close()
	other := hubtest.New(nil)
	defer other.Close()
	var logs bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	o := quick(srv)
	o.Tokens = map[string]string{srv.Host(): token}
	o.Log = log
	c := hub.New(o)
	f := declared(t, "model-00001-of-00003.safetensors", files["model-00001-of-00003.safetensors"])
	hooks := []hubtest.Hook{
		func(w http.ResponseWriter, r *http.Request, path string) bool { // echoes the token in its body
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte("bad token " + r.Header.Get("Authorization")))
			return true
		},
		func(w http.ResponseWriter, r *http.Request, path string) bool {
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(r.Header.Get("Authorization")))
			return true
		},
		func(w http.ResponseWriter, r *http.Request, path string) bool { // a signed redirect to a 404
			http.Redirect(w, r, other.URL()+"/missing?"+signed+"&t="+token, http.StatusFound)
			return true
		},
		func(w http.ResponseWriter, r *http.Request, path string) bool { // a signed redirect to nowhere
			http.Redirect(w, r, "http://127.0.0.1:1/x?"+signed, http.StatusFound)
			return true
		},
		func(w http.ResponseWriter, r *http.Request, path string) bool {
			http.Redirect(w, r, "file:///x?"+signed, http.StatusFound)
			return true
		},
		func(w http.ResponseWriter, r *http.Request, path string) bool {
			w.Header().Set("Content-Range", "bytes 0-7/1")
			w.WriteHeader(http.StatusPartialContent)
			return true
		},
		func(w http.ResponseWriter, r *http.Request, path string) bool { <-r.Context().Done(); return true },
	}
	for i, h := range hooks {
		srv.SetHook(h)
		for _, read := range []func() error{
			func() error { _, err := c.Fetch(context.Background(), repoOf(t, srv), f, 1<<30); return err },
			func() error {
				_, err := safetensors.ReadHeaderStream(c.HeaderReader(context.Background(), repoOf(t, srv), f), f.Size)
				return err
			},
			func() error {
				b, err := c.Open(context.Background(), repoOf(t, srv), f, 8)
				if err == nil {
					_, err = io.Copy(io.Discard, b)
					b.Close()
				}
				return err
			},
		} {
			err := read()
			require.Error(t, err, "hook %d", i)
			for _, s := range []string{err.Error(), fmt.Sprintf("%+v", err), fmt.Sprintf("%#v", modelrepo.AsError(err))} {
				require.NotContains(t, s, token, "hook %d", i)
				require.NotContains(t, s, "SignedSecret42", "hook %d", i)
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	require.Contains(t, logs.String(), "hub request", "the client logged its requests")
	require.NotContains(t, logs.String(), token)
	require.NotContains(t, logs.String(), "SignedSecret42")
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestOpenFromAnOffset: a resumed download asks for the rest; a server
// that ignores the Range sends the whole file, and Open says so.
func TestOpenFromAnOffset(t *testing.T) {
	t.Parallel()
	files := checkpoint(t, t.TempDir())
	srv := hubtest.New(files)
	defer srv.Close()
	name := "model-00003-of-00003.safetensors"
	f := declared(t, name, files[name])
	whole, err := os.ReadFile(files[name])
	require.NoError(t, err)
	c := hub.New(hub.Options{Hosts: []string{srv.Host()}})
	for _, ignore := range []bool{false, true} {
		srv.Reset()
		if ignore {
			srv.SetHook(func(w http.ResponseWriter, r *http.Request, path string) bool {
				r.Header.Del("Range")
				return false
			})
		}
		b, err := c.Open(context.Background(), repoOf(t, srv), f, 100)
		require.NoError(t, err)
		got, err := io.ReadAll(b)
		require.NoError(t, err)
		require.NoError(t, b.Close())
		if ignore {
			require.Equal(t, int64(0), b.Offset)
			require.Equal(t, whole, got)
			continue
		}
		require.Equal(t, int64(100), b.Offset)
		require.Equal(t, whole[100:], got)
		require.Equal(t, "bytes=100-", srv.Requests()[0].Range)
	}
}
