// Package hubtest serves files on a loopback HTTP server laid out like a
// model hub (<base>/resolve/<revision>/<path>), with Range requests,
// Hugging Face's X-Linked-Etag, X-Linked-Size and X-Repo-Commit, a
// repository of commits and a branch that can move, and hooks that make
// it misbehave on purpose, for the tests of every package that reads
// checkpoints by reference (hub, staging, build, contract, the runner) and
// for the end-to-end test.
//
// New serves every file itself. NewHF answers as the Hugging Face hub
// does, for the tests that need its real shape: an LFS file (a
// *.safetensors) is a 302 to a signed URL on a CDN that is another
// loopback server, the redirect naming the file's sha256, size and commit;
// errors carry X-Error-Code and X-Error-Message (RepoNotFound, GatedRepo,
// RevisionNotFound, EntryNotFound; an unknown token is refused 401 with no
// code, even for a public repository); a rate limit is a 429 with the
// IETF draft's RateLimit and RateLimit-Policy headers; and the CDN can
// answer a valid range 416 with a Content-Range total that is not the
// file's, as CloudFront sometimes does.
package hubtest

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
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
	// Revision is the repository's first commit, which New's files are.
	Revision = "0123456789abcdef0123456789abcdef01234567"
	// Branch is a branch at Revision until Push moves it.
	Branch = "main"
	// Bogus416Total is the total of the Content-Range of the CDN's
	// spurious 416 (bytes */177): not the file's size.
	Bogus416Total = 177
)

// Request is one request the server answered.
type Request struct {
	// Method is the request's method (GET or HEAD).
	Method string
	// Path is the repository path asked for (after resolve/<revision>/),
	// or the URL path when the request was not for a file. A CDN
	// request's is the path of the file its blob is.
	Path string
	// Revision is the revision asked for, as the URL names it
	// (unescaped); "" for a CDN request or a path that is not a file's.
	Revision string
	// Range is the request's Range header.
	Range string
	// Authorization is the request's Authorization header.
	Authorization string
	// Status is the answer's status.
	Status int
	// CDN says the CDN answered it (NewHF): the signed URL the hub
	// redirected to.
	CDN bool
}

// Hook may answer a request for path itself (misbehaving) and says
// whether it did; it is asked before the file is served (by the hub, not
// the CDN, under NewHF).
type Hook func(w http.ResponseWriter, r *http.Request, path string) bool

// Access is who may read a NewHF repository.
type Access int

// Accesses of a NewHF repository.
const (
	// Public: anyone, with no token or one the hub knows.
	Public Access = iota
	// Private: only the tokens Grant names; to anyone else the
	// repository does not exist (RepoNotFound: 401 without a token, 404
	// with one).
	Private
	// Gated: only the tokens Grant names (they accepted its
	// conditions); GatedRepo to anyone else (401 without a token, 403
	// with one).
	Gated
)

// Server is a model repository on a loopback server.
type Server struct {
	srv *httptest.Server
	cdn *httptest.Server // NewHF only
	hf  bool

	mu       sync.Mutex
	commits  map[string]map[string]string // commit -> path in the repository -> file on disk
	refs     map[string]string            // branch or tag -> commit
	pushes   int
	hook     Hook
	cdnHook  Hook
	noDigest bool
	requests []Request
	sent     int64

	// NewHF only.
	access   Access
	granted  map[string]bool // tokens that may read a private or gated repository
	known    map[string]bool // tokens the hub knows; nil: any
	limited  int             // the next hub answers that are 429
	limitFor time.Duration
	bad416   int // the next CDN range answers that are a spurious 416
}

func newServer(files map[string]string) *Server {
	first := map[string]string{}
	for p, f := range files {
		first[p] = f
	}
	return &Server{commits: map[string]map[string]string{Revision: first}, refs: map[string]string{Branch: Revision}}
}

// New serves files (path in the repository -> file on disk) over http.
func New(files map[string]string) *Server {
	s := newServer(files)
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// NewTLS is New over https; Certificate's pool makes a client trust it.
func NewTLS(files map[string]string) *Server {
	s := newServer(files)
	s.srv = httptest.NewTLSServer(http.HandlerFunc(s.serve))
	return s
}

// NewHF serves files as the Hugging Face hub does (see the package
// comment): a hub on one loopback server, its CDN on another.
func NewHF(files map[string]string) *Server {
	s := newServer(files)
	s.hf = true
	s.cdn = httptest.NewServer(http.HandlerFunc(s.serveCDN))
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
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

// Close stops the server (and its CDN).
func (s *Server) Close() {
	s.srv.Close()
	if s.cdn != nil {
		s.cdn.Close()
	}
}

// Server is the underlying test server.
func (s *Server) Server() *httptest.Server { return s.srv }

// URL is the server's root, scheme://127.0.0.1:port.
func (s *Server) URL() string { return s.srv.URL }

// Host is the server's host:port.
func (s *Server) Host() string { return hostOf(s.srv.URL) }

// CDNHost is the CDN's host:port (NewHF), "" without one.
func (s *Server) CDNHost() string {
	if s.cdn == nil {
		return ""
	}
	return hostOf(s.cdn.URL)
}

func hostOf(u string) string {
	return strings.TrimPrefix(strings.TrimPrefix(u, "http://"), "https://")
}

// Repository is the repository's base URL.
func (s *Server) Repository() string { return s.srv.URL + "/" + Org + "/" + Name }

// FileURL is the URL path the server serves path at, at Revision.
func FileURL(path string) string {
	return "/" + Org + "/" + Name + "/resolve/" + Revision + "/" + path
}

// SetHook installs h (nil removes it).
func (s *Server) SetHook(h Hook) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hook = h
}

// SetCDNHook installs h (nil removes it) on a NewHF server's CDN: asked,
// with the path of the file the blob is, for every signed request.
func (s *Server) SetCDNHook(h Hook) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cdnHook = h
}

// SetFile serves path at Revision from the file on disk (a changed file,
// a new one): the first commit itself changes, as no real repository's
// does.
func (s *Server) SetFile(path, file string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.commits[Revision][path] = file
}

// Push commits changes (path in the repository -> file on disk; "" removes
// the path) on top of Branch's commit, moves Branch to the new commit and
// returns its id.
func (s *Server) Push(changes map[string]string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	parent := s.refs[Branch]
	files := map[string]string{}
	for p, f := range s.commits[parent] {
		files[p] = f
	}
	s.pushes++
	h := sha1.New()
	fmt.Fprintf(h, "%s %d", parent, s.pushes)
	for p, f := range changes {
		fmt.Fprintf(h, " %s=%s", p, f)
		if f == "" {
			delete(files, p)
			continue
		}
		files[p] = f
	}
	id := hex.EncodeToString(h.Sum(nil))
	s.commits[id] = files
	s.refs[Branch] = id
	return id
}

// Head is Branch's commit.
func (s *Server) Head() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refs[Branch]
}

// WithoutDigests stops naming each file's sha256 and size in the
// answers' headers (a server that does not, or a benchmark whose sparse
// shards of gigabytes are not worth hashing).
func (s *Server) WithoutDigests() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.noDigest = true
}

// SetAccess makes a NewHF repository public, private or gated; granted
// are the tokens that may read a private or gated one.
func (s *Server) SetAccess(a Access, granted ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.access = a
	s.granted = map[string]bool{}
	for _, t := range granted {
		s.granted[t] = true
	}
}

// KnownTokens are the tokens a NewHF hub knows: any other is refused 401
// ("Invalid credentials in Authorization header", no X-Error-Code), even
// for a public repository. Without a call, the hub knows every token.
func (s *Server) KnownTokens(tokens ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.known = map[string]bool{}
	for _, t := range tokens {
		s.known[t] = true
	}
}

// RateLimit makes the next n answers of a NewHF hub a 429 whose RateLimit
// header says no request is left for reset (rounded up to seconds).
func (s *Server) RateLimit(n int, reset time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limited, s.limitFor = n, reset
}

// Spurious416 makes the next n Range requests to a NewHF CDN answer 416
// with Content-Range: bytes */177 (Bogus416Total), however valid the
// range, as CloudFront sometimes does.
func (s *Server) Spurious416(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bad416 = n
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

// route splits a request's URL into the revision and the repository path
// it asks for; ok is false for a URL that is not a file of the repository.
func route(r *http.Request) (rev, path string, ok bool) {
	rest, ok := strings.CutPrefix(r.URL.EscapedPath(), "/"+Org+"/"+Name+"/resolve/")
	if !ok {
		return "", r.URL.Path, false
	}
	seg, p, ok := strings.Cut(rest, "/")
	if !ok {
		return "", r.URL.Path, false
	}
	rev, err := url.PathUnescape(seg)
	if err != nil {
		return "", r.URL.Path, false
	}
	if path, err = url.PathUnescape(p); err != nil {
		return "", r.URL.Path, false
	}
	return rev, path, true
}

// commitOf is the commit rev names (a branch, or a commit itself), "" for
// none. s.mu must be held.
func (s *Server) commitOf(rev string) string {
	if c, ok := s.refs[rev]; ok {
		return c
	}
	if _, ok := s.commits[rev]; ok {
		return rev
	}
	return ""
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	cw := &counting{ResponseWriter: w, s: s}
	rev, path, isFile := route(r)
	defer func() {
		s.mu.Lock()
		s.requests = append(s.requests, Request{Method: r.Method, Path: path, Revision: rev, Range: r.Header.Get("Range"),
			Authorization: r.Header.Get("Authorization"), Status: cw.status})
		s.mu.Unlock()
	}()
	s.mu.Lock()
	hook, noDigest, hf := s.hook, s.noDigest, s.hf
	commit := s.commitOf(rev)
	file := s.commits[commit][path]
	s.mu.Unlock()
	if hook != nil && hook(cw, r, path) {
		return
	}
	if hf {
		s.serveHF(cw, r, isFile, commit, path, file)
		return
	}
	if !isFile || file == "" {
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
	cw.Header().Set("X-Repo-Commit", commit)
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

// hfError answers as the hub answers an error: its code and message in
// X-Error-Code and X-Error-Message, and the message in a JSON body.
func hfError(w http.ResponseWriter, status int, code, message string) {
	if code != "" {
		w.Header().Set("X-Error-Code", code)
	}
	w.Header().Set("X-Error-Message", message)
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_, _ = fmt.Fprintf(w, "{\"error\":%q}\n", message)
}

// serveHF answers a hub request as the Hugging Face hub does.
func (s *Server) serveHF(w http.ResponseWriter, r *http.Request, isFile bool, commit, path, file string) {
	repoID := Org + "/" + Name
	s.mu.Lock()
	limited, reset := s.limited > 0, s.limitFor
	if limited {
		s.limited--
	}
	access, noDigest := s.access, s.noDigest
	tok, hasTok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	knownTok := !hasTok || s.known == nil || s.known[tok]
	granted := hasTok && s.granted[tok]
	s.mu.Unlock()
	if limited {
		secs := int((reset + time.Second - 1) / time.Second)
		w.Header().Set("RateLimit", fmt.Sprintf(`"resolvers";r=0;t=%d`, secs))
		w.Header().Set("RateLimit-Policy", `"fixed window";"resolvers";q=3000;w=300`)
		hfError(w, http.StatusTooManyRequests, "", "You have exceeded our hourly quotas for action 'resolve'. We invite you to retry later or on a paid plan.")
		return
	}
	if !knownTok {
		hfError(w, http.StatusUnauthorized, "", "Invalid credentials in Authorization header")
		return
	}
	notFound := func() {
		status := http.StatusUnauthorized
		if hasTok {
			status = http.StatusNotFound
		}
		hfError(w, status, "RepoNotFound", "Repository not found")
	}
	if !isFile {
		notFound()
		return
	}
	switch {
	case access == Private && !granted:
		notFound()
		return
	case access == Gated && !granted && !hasTok:
		hfError(w, http.StatusUnauthorized, "GatedRepo", "Access to model "+repoID+" is restricted. You must have access to it and be authenticated to access it. Please log in.")
		return
	case access == Gated && !granted:
		hfError(w, http.StatusForbidden, "GatedRepo", "Access to model "+repoID+" is restricted and you are not in the authorized list. Visit https://huggingface.co/"+repoID+" to ask for access.")
		return
	}
	if commit == "" {
		hfError(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+clip(r.URL.Path))
		return
	}
	if file == "" {
		hfError(w, http.StatusNotFound, "EntryNotFound", "Entry not found")
		return
	}
	st, err := os.Stat(file)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("X-Repo-Commit", commit)
	w.Header().Set("RateLimit", `"resolvers";r=2999;t=300`)
	w.Header().Set("RateLimit-Policy", `"fixed window";"resolvers";q=3000;w=300`)
	if !strings.HasSuffix(path, ".safetensors") {
		// A small file lives in git: served by the hub itself, its
		// ETag the git blob's id.
		f, err := os.Open(file)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		defer f.Close()
		w.Header().Set("ETag", `"`+gitBlobID(file)+`"`)
		http.ServeContent(w, r, path, time.Time{}, f)
		return
	}
	// An LFS file: a redirect to a signed URL on the CDN, naming the
	// file's sha256 and size.
	sum, err := Digest(file)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if !noDigest {
		w.Header().Set("X-Linked-Etag", `"`+sum+`"`)
		w.Header().Set("X-Linked-Size", fmt.Sprint(st.Size()))
		w.Header().Set("ETag", `"`+sum+`"`)
	}
	sig := sha256.Sum256([]byte(sum + "signing-key"))
	q := url.Values{"X-Amz-Algorithm": {"AWS4-HMAC-SHA256"}, "X-Amz-Expires": {"3600"}, "X-Amz-Signature": {hex.EncodeToString(sig[:])},
		"response-content-disposition": {`inline; filename="` + path + `"`}}
	w.Header().Set("Location", s.cdn.URL+"/repos/"+sum[:2]+"/"+sum+"?"+q.Encode())
	w.WriteHeader(http.StatusFound)
	if r.Method != http.MethodHead {
		_, _ = fmt.Fprintf(w, "Found. Redirecting to %s/repos/%s/%s\n", s.cdn.URL, sum[:2], sum)
	}
}

// serveCDN answers a request to the CDN: a blob by its sha256, on a
// signed URL only.
func (s *Server) serveCDN(w http.ResponseWriter, r *http.Request) {
	cw := &counting{ResponseWriter: w, s: s}
	sum := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
	s.mu.Lock()
	path, file := s.blob(sum)
	hook := s.cdnHook
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.requests = append(s.requests, Request{Method: r.Method, Path: path, Range: r.Header.Get("Range"),
			Authorization: r.Header.Get("Authorization"), Status: cw.status, CDN: true})
		s.mu.Unlock()
	}()
	if r.URL.Query().Get("X-Amz-Signature") == "" || file == "" {
		cw.Header().Set("Content-Type", "application/xml")
		cw.WriteHeader(http.StatusForbidden)
		_, _ = io.WriteString(cw, "<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>\n")
		return
	}
	if hook != nil && hook(cw, r, path) {
		return
	}
	s.mu.Lock()
	bad := s.bad416 > 0 && r.Header.Get("Range") != ""
	if bad {
		s.bad416--
	}
	s.mu.Unlock()
	if bad {
		cw.Header().Set("Content-Range", fmt.Sprintf("bytes */%d", Bogus416Total))
		cw.Header().Set("Content-Type", "application/xml")
		cw.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
		_, _ = io.WriteString(cw, "<Error><Code>InvalidRange</Code><Message>The requested range is not satisfiable</Message></Error>\n")
		return
	}
	f, err := os.Open(file)
	if err != nil {
		http.Error(cw, err.Error(), http.StatusInternalServerError)
		return
	}
	defer f.Close()
	cw.Header().Set("ETag", `"`+sum+`"`)
	cw.Header().Set("X-Cache", "Hit from cloudfront")
	http.ServeContent(cw, r, path, time.Time{}, f)
}

// blob finds the file whose sha256 is sum in any commit, and its path
// there. s.mu must be held.
func (s *Server) blob(sum string) (path, file string) {
	for _, files := range s.commits {
		for p, f := range files {
			if strings.HasSuffix(p, ".safetensors") {
				if d, err := Digest(f); err == nil && d == sum {
					return p, f
				}
			}
		}
	}
	return "", ""
}

// gitBlobID is the git object id of the file's bytes, as git names a
// blob; "" when it cannot be read.
func gitBlobID(file string) string {
	data, err := os.ReadFile(file)
	if err != nil {
		return ""
	}
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(data))
	h.Write(data)
	return hex.EncodeToString(h.Sum(nil))
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80]
	}
	return s
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
