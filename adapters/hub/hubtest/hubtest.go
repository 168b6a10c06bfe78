// Package hubtest serves files on a loopback HTTP server laid out like a
// model hub (<base>/resolve/<revision>/<path>), with Range requests,
// Hugging Face's X-Linked-Etag and X-Linked-Size, and hooks that make it
// misbehave on purpose, for the tests of every package that reads
// checkpoints by reference (hub, staging, build, contract, the runner) and
// for the end-to-end test.
package hubtest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Org and Name make up the repository's path on the server.
const (
	Org  = "example-org"
	Name = "example-model"
	// Revision is the revision the server serves.
	Revision = "0123456789abcdef0123456789abcdef01234567"
)

// Request is one request the server answered.
type Request struct {
	// Path is the repository path asked for (after resolve/<revision>/),
	// or the URL path when the request was not for a file.
	Path string
	// Range is the request's Range header.
	Range string
	// Authorization is the request's Authorization header.
	Authorization string
	// Status is the answer's status.
	Status int
}

// Hook may answer a request for path itself (misbehaving) and says
// whether it did; it is asked before the file is served.
type Hook func(w http.ResponseWriter, r *http.Request, path string) bool

// Server is a model repository on a loopback server.
type Server struct {
	srv *httptest.Server

	mu       sync.Mutex
	files    map[string]string // path in the repository -> file on disk
	hook     Hook
	noDigest bool
	requests []Request
	sent     int64
}

// New serves files (path in the repository -> file on disk) over http.
func New(files map[string]string) *Server {
	s := &Server{files: map[string]string{}}
	for p, f := range files {
		s.files[p] = f
	}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// NewTLS is New over https; Certificate's pool makes a client trust it.
func NewTLS(files map[string]string) *Server {
	s := &Server{files: map[string]string{}}
	for p, f := range files {
		s.files[p] = f
	}
	s.srv = httptest.NewTLSServer(http.HandlerFunc(s.serve))
	return s
}

// Dir serves every regular file at the top of dir under its name.
func Dir(dir string) (*Server, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	files := map[string]string{}
	for _, e := range entries {
		if e.Type().IsRegular() {
			files[e.Name()] = filepath.Join(dir, e.Name())
		}
	}
	return New(files), nil
}

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// Server is the underlying test server.
func (s *Server) Server() *httptest.Server { return s.srv }

// URL is the server's root, scheme://127.0.0.1:port.
func (s *Server) URL() string { return s.srv.URL }

// Host is the server's host:port.
func (s *Server) Host() string {
	return strings.TrimPrefix(strings.TrimPrefix(s.srv.URL, "http://"), "https://")
}

// Repository is the repository's base URL.
func (s *Server) Repository() string { return s.srv.URL + "/" + Org + "/" + Name }

// FileURL is the URL path the server serves path at.
func FileURL(path string) string {
	return "/" + Org + "/" + Name + "/resolve/" + Revision + "/" + path
}

// SetHook installs h (nil removes it).
func (s *Server) SetHook(h Hook) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hook = h
}

// SetFile serves path from the file on disk (a changed file, a new one).
func (s *Server) SetFile(path, file string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.files[path] = file
}

// WithoutDigests stops naming each file's sha256 and size in the
// answers' headers (a server that does not, or a benchmark whose sparse
// shards of gigabytes are not worth hashing).
func (s *Server) WithoutDigests() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.noDigest = true
}

// Requests returns the requests answered so far, in order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// Asked returns the repository paths asked for, in order.
func (s *Server) Asked() []string {
	var out []string
	for _, r := range s.Requests() {
		out = append(out, r.Path)
	}
	return out
}

// BytesSent is how many body bytes the server wrote, over every answer.
func (s *Server) BytesSent() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sent
}

// Reset forgets the requests and bytes counted so far.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests, s.sent = nil, 0
}

// counting counts the body bytes written and the status.
type counting struct {
	http.ResponseWriter
	s      *Server
	status int
}

func (c *counting) WriteHeader(code int) {
	if c.status == 0 {
		c.status = code
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *counting) Write(p []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	n, err := c.ResponseWriter.Write(p)
	c.s.mu.Lock()
	c.s.sent += int64(n)
	c.s.mu.Unlock()
	return n, err
}

// Flush passes a flush on.
func (c *counting) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	cw := &counting{ResponseWriter: w, s: s}
	prefix := "/" + Org + "/" + Name + "/resolve/" + Revision + "/"
	path, isFile := strings.CutPrefix(r.URL.Path, prefix)
	if !isFile {
		path = r.URL.Path
	}
	defer func() {
		s.mu.Lock()
		s.requests = append(s.requests, Request{Path: path, Range: r.Header.Get("Range"), Authorization: r.Header.Get("Authorization"), Status: cw.status})
		s.mu.Unlock()
	}()
	s.mu.Lock()
	hook, file, ok, noDigest := s.hook, s.files[path], s.files[path] != "", s.noDigest
	s.mu.Unlock()
	if hook != nil && hook(cw, r, path) {
		return
	}
	if !isFile || !ok {
		http.NotFound(cw, r)
		return
	}
	f, err := os.Open(file)
	if err != nil {
		http.Error(cw, err.Error(), http.StatusInternalServerError)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		http.Error(cw, err.Error(), http.StatusInternalServerError)
		return
	}
	// The hub names an LFS file's sha256 and size; here for every file
	// (a test that wants none removes them in a hook).
	if !noDigest {
		if sum, err := Digest(file); err == nil {
			cw.Header().Set("X-Linked-Etag", `"`+sum+`"`)
			cw.Header().Set("X-Linked-Size", fmt.Sprint(st.Size()))
			cw.Header().Set("ETag", `"`+sum+`"`)
		}
	}
	http.ServeContent(cw, r, path, time.Time{}, f)
}

// digests caches Digest by path, size and modification time: a sparse
// shard of gigabytes is hashed once.
var digests sync.Map

type digestKey struct {
	path string
	size int64
	mod  time.Time
}

// Digest is the sha256 of the file at path, lowercase hex.
func Digest(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	key := digestKey{path, st.Size(), st.ModTime()}
	if v, ok := digests.Load(key); ok {
		return v.(string), nil
	}
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	sum := hex.EncodeToString(h.Sum(nil))
	digests.Store(key, sum)
	return sum, nil
}
