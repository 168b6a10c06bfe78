// Package modelrepo is what a checkpoint submitted by reference names: a
// model repository at one revision (Repo, from Parse), the files of it
// that checkpoint.json declares with their sizes and digests (File), and
// the stable codes of a reference the arena could not read (Error). It is
// pure: adapters/hub reads the files over HTTP, and the build and
// contract stages and the runner check and fetch what it describes.
package modelrepo

import (
	"net"
	"net/url"
	"regexp"
	"strings"

	"github.com/lowbarena/lowbarena/events/reason"
)

// Limits of a reference.
const (
	// MaxURLBytes bounds a repository URL.
	MaxURLBytes = 2048
	// MaxRevisionBytes bounds a revision.
	MaxRevisionBytes = 255
)

// Repo is a model repository at one revision, laid out like a model hub:
// the file at path is served at <Base>/resolve/<Revision>/<path>.
type Repo struct {
	// Base is the repository's URL: http(s), a host, a path, and never a
	// user, a password, a query or a fragment (Parse refuses them).
	Base *url.URL
	// Revision is a branch, a tag or a commit (a commit pins the files;
	// the declared sha256 of each file pins them either way).
	Revision string
}

// File is one file of a repository, as checkpoint.json declares it.
type File struct {
	// Path is the file's path in the repository, slash-separated.
	Path string
	// Size is its length in bytes; SHA256 its digest, lowercase hex.
	Size   int64
	SHA256 string
}

// commitHash is a full git commit id: sha1 (40 hex digits) or sha256 (64).
var commitHash = regexp.MustCompile(`^(?:[0-9a-f]{40}|[0-9a-f]{64})$`)

// IsCommit reports whether rev is a full commit id, lowercase hex: a
// revision that pins a repository's files, as a branch or a tag does not.
func IsCommit(rev string) bool { return commitHash.MatchString(rev) }

// At is r at another revision (a commit the revision resolved to).
func (r Repo) At(rev string) Repo {
	r.Revision = rev
	return r
}

// revision is a branch, tag or commit name as git allows them, kept to the
// plain characters model hubs use (refs/pr/1 included).
var revision = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]*$`)

// Parse checks a repository URL and a revision as a participant wrote
// them. A refusal is an *Error; its sentence never repeats what could be a
// credential (the user information, the query).
func Parse(base, rev string) (Repo, error) {
	if base == "" {
		return Repo{}, Refuse(reason.ReferenceURLInvalid, "", "the repository URL is empty; give the repository's https address, e.g. https://huggingface.co/ORG/NAME")
	}
	if len(base) > MaxURLBytes {
		return Repo{}, Refuse(reason.ReferenceURLInvalid, "", "the repository URL is %d bytes; the limit is %d", len(base), MaxURLBytes)
	}
	u, err := url.Parse(base)
	if err != nil {
		// url.Parse's error quotes the whole URL, credentials included:
		// it is not passed on.
		if strings.Contains(base, "@") {
			return Repo{}, Refuse(reason.ReferenceURLCredentials, "", "the repository URL carries a user name or password (user:password@); remove them: the arena reads private repositories with the token its operator configures")
		}
		return Repo{}, Refuse(reason.ReferenceURLInvalid, "", "the repository URL does not parse as a URL; give the repository's https address, e.g. https://huggingface.co/ORG/NAME")
	}
	if u.User != nil {
		return Repo{}, Refuse(reason.ReferenceURLCredentials, "", "the repository URL carries a user name or password (user:password@); remove them: the arena reads private repositories with the token its operator configures")
	}
	scheme := strings.ToLower(u.Scheme)
	if scheme != "https" && scheme != "http" {
		return Repo{}, Refuse(reason.ReferenceURLInvalid, "", "the repository URL's scheme is %q; it must be https", u.Scheme)
	}
	if u.Opaque != "" || u.Host == "" {
		return Repo{}, Refuse(reason.ReferenceURLInvalid, "", "the repository URL has no host; give the repository's https address, e.g. https://huggingface.co/ORG/NAME")
	}
	if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.ContainsAny(base, "?#") {
		return Repo{}, Refuse(reason.ReferenceURLInvalid, "", "the repository URL must have no query (?...) or fragment (#...); give the repository's base address only")
	}
	path := strings.TrimSuffix(u.Path, "/")
	for _, seg := range strings.Split(strings.TrimPrefix(path, "/"), "/") {
		if seg == "." || seg == ".." {
			return Repo{}, Refuse(reason.ReferenceURLInvalid, "", "the repository URL's path holds %q; give the repository's plain address", seg)
		}
	}
	if path == "" {
		return Repo{}, Refuse(reason.ReferenceURLInvalid, "", "the repository URL %s has no path; give the repository's address, e.g. https://huggingface.co/ORG/NAME", scheme+"://"+u.Host)
	}
	if rev == "" || len(rev) > MaxRevisionBytes || !revision.MatchString(rev) || strings.Contains(rev, "..") || strings.Contains(rev, "//") || strings.HasSuffix(rev, "/") {
		return Repo{}, Refuse(reason.ReferenceRevisionInvalid, "", "the revision %q is not a branch, tag or commit name (letters, digits and ._/- only); a commit hash pins it", Clip(rev, 80))
	}
	clean := &url.URL{Scheme: scheme, Host: strings.ToLower(u.Host), Path: path, RawPath: strings.TrimSuffix(u.RawPath, "/")}
	return Repo{Base: clean, Revision: rev}, nil
}

// String is the repository and its revision, "<base>@<revision>": safe to
// log, since Parse keeps no credential in Base.
func (r Repo) String() string {
	if r.Base == nil {
		return "@" + r.Revision
	}
	return r.Base.String() + "@" + r.Revision
}

// FileURL is where the repository serves path at its revision:
// <base>/resolve/<revision>/<path>, the revision escaped as one segment
// (refs/pr/1 becomes refs%2Fpr%2F1, as model hubs expect) and each
// segment of path escaped.
func (r Repo) FileURL(path string) *url.URL {
	segs := strings.Split(path, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	raw := strings.TrimSuffix(r.Base.EscapedPath(), "/") + "/resolve/" + url.PathEscape(r.Revision) + "/" + strings.Join(segs, "/")
	u := *r.Base
	p, err := url.PathUnescape(raw)
	if err != nil {
		p = raw
	}
	u.Path, u.RawPath = p, raw
	return &u
}

// redact is u without user information, query or fragment: what an error
// or a log line may show of a URL (a CDN's signed query is a credential).
func Redact(u *url.URL) string {
	if u == nil {
		return ""
	}
	c := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, RawPath: u.RawPath}
	return c.String()
}

// loopback reports whether host (without port) is this machine.
func Loopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

func Clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
