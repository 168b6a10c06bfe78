package hub

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/lowbarena/lowbarena/domain/modelrepo"
	"github.com/lowbarena/lowbarena/events/reason"
)

// Limits of Tree.
const (
	// MaxTreePages bounds the pages of one listing the client follows.
	MaxTreePages = 100
	// MaxTreePageBytes bounds one page's body.
	MaxTreePageBytes = 32 << 20
	// MaxTreeEntries bounds the entries of one listing, all pages
	// together.
	MaxTreeEntries = 200_000
)

// TreeFile is one file of a repository as the hub's tree API lists it.
type TreeFile struct {
	// Path is the file's path in the repository, slash-separated.
	Path string
	// Size is its length in bytes.
	Size int64
	// SHA256 is the sha256 the hub names for a file it stores in LFS (its
	// lfs.oid), lowercase hex; "" for a file stored in git itself, whose
	// sha256 is known only by reading it (Digest).
	SHA256 string
}

// treeEntry is one entry of the Hugging Face hub's tree API answer
// (GET /api/models/{repo}/tree/{revision}?recursive=true, what
// huggingface_hub's HfApi.list_repo_tree reads): a file or a directory,
// a file stored in LFS with the sha256 of its content as lfs.oid.
type treeEntry struct {
	Type string `json:"type"`
	Path string `json:"path"`
	Size int64  `json:"size"`
	LFS  *struct {
		OID  string `json:"oid"`
		Size int64  `json:"size"`
	} `json:"lfs"`
}

// TreeURL is where a hub laid out like Hugging Face's lists repo's files
// at its revision, every folder included: <scheme>://<host>/api/models/
// <repository path>/tree/<revision>?recursive=true (the revision escaped
// as one segment, as FileURL does).
func TreeURL(repo modelrepo.Repo) *url.URL {
	u := *repo.Base
	raw := "/api/models" + strings.TrimSuffix(repo.Base.EscapedPath(), "/") + "/tree/" + url.PathEscape(repo.Revision)
	p, err := url.PathUnescape(raw)
	if err != nil {
		p = raw
	}
	u.Path, u.RawPath, u.RawQuery = p, raw, "recursive=true"
	return &u
}

// Tree lists the files of repo at its revision through the hub's tree
// API (TreeURL), following its pages (a Link header with rel="next", on
// the same host only), at most MaxTreePages pages of MaxTreePageBytes
// and MaxTreeEntries entries in all. Directories are left out; the files
// come in the order the hub lists them. Nothing of a file is read: an
// LFS file's sha256 is the hub's word for it (TreeFile.SHA256), which
// every later read of the file checks.
func (c *Client) Tree(ctx context.Context, repo modelrepo.Repo) ([]TreeFile, error) {
	if err := c.Allowed(repo); err != nil {
		return nil, err
	}
	next := TreeURL(repo)
	var files []TreeFile
	entries := 0
	for page := 1; next != nil; page++ {
		if page > MaxTreePages {
			return nil, modelrepo.Refuse(reason.ReferenceUnavailable, "", "the file list of %s runs past %d pages; the arena reads repositories of fewer files", repo, MaxTreePages)
		}
		var batch []treeEntry
		link, err := c.getTree(ctx, repo, next, &batch)
		if err != nil {
			return nil, err
		}
		entries += len(batch)
		if entries > MaxTreeEntries {
			return nil, modelrepo.Refuse(reason.ReferenceUnavailable, "", "the file list of %s holds more than %d entries; the arena reads repositories of fewer files", repo, MaxTreeEntries)
		}
		for _, e := range batch {
			if e.Type != "file" {
				continue
			}
			f := TreeFile{Path: e.Path, Size: e.Size}
			if e.LFS != nil {
				if !isSHA256(e.LFS.OID) {
					return nil, modelrepo.Refuse(reason.ReferenceUnavailable, e.Path, "the file list of %s names %s's LFS object %q, which is no sha256", repo, e.Path, modelrepo.Clip(e.LFS.OID, 80))
				}
				f.SHA256 = strings.ToLower(e.LFS.OID)
				if e.LFS.Size > 0 {
					f.Size = e.LFS.Size
				}
			}
			files = append(files, f)
		}
		if next, err = nextPage(next, link); err != nil {
			return nil, modelrepo.Refuse(reason.ReferenceUnavailable, "", "the file list of %s: %v", repo, err)
		}
	}
	return files, nil
}

// getTree GETs one page of a listing into v and returns its Link header,
// sending the request again (up to Attempts) while the hub answers 429 or
// 5xx or the connection fails before an answer.
func (c *Client) getTree(ctx context.Context, repo modelrepo.Repo, u *url.URL, v any) (string, error) {
	resp, cancel, err := c.getRetried(ctx, repo, u, "the file list")
	if err != nil {
		return "", err
	}
	defer cancel()
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxTreePageBytes+1))
	if err != nil {
		return "", c.readError(ctx, repo, "the file list", err)
	}
	if len(data) > MaxTreePageBytes {
		return "", modelrepo.Refuse(reason.ReferenceUnavailable, "", "a page of the file list of %s is over %d bytes", repo, MaxTreePageBytes)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return "", modelrepo.Refuse(reason.ReferenceUnavailable, "", "the file list of %s (%s) is not the hub's tree API answer (a JSON array of files): %s; does the host serve Hugging Face's API?", repo, modelrepo.Redact(u), modelrepo.Clip(err.Error(), 200))
	}
	return resp.Header.Get("Link"), nil
}

// Digest reads the file at path of repo whole, checking that it is size
// bytes, and returns its sha256 (lowercase hex): for a file the hub
// stores in git, whose sha256 its tree API does not name. A sha256 the
// hub names in its answer (X-Linked-Etag) must agree.
func (c *Client) Digest(ctx context.Context, repo modelrepo.Repo, path string, size int64) (string, error) {
	if err := c.Allowed(repo); err != nil {
		return "", err
	}
	resp, cancel, err := c.getRetried(ctx, repo, repo.FileURL(path), path)
	if err != nil {
		return "", err
	}
	defer cancel()
	defer resp.Body.Close()
	if resp.ContentLength >= 0 && resp.ContentLength != size {
		return "", modelrepo.Refuse(reason.ReferenceDigestMismatch, path, "%s at %s is %d bytes, not the %d its file list says", path, repo, resp.ContentLength, size)
	}
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(resp.Body, size+1))
	if err != nil {
		return "", c.readError(ctx, repo, path, err)
	}
	if n != size {
		return "", modelrepo.Refuse(reason.ReferenceDigestMismatch, path, "%s at %s sent %d bytes, not the %d its file list says", path, repo, n, size)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if named := strings.ToLower(strings.Trim(strings.TrimPrefix(resp.Header.Get("X-Linked-Etag"), "W/"), `"`)); isSHA256(named) && named != sum {
		return "", modelrepo.Refuse(reason.ReferenceDigestMismatch, path, "%s at %s names its sha256 %s, but its bytes hash to %s", path, repo, short(named), short(sum))
	}
	return sum, nil
}

// getRetried GETs u (what names what is asked, for sentences) under
// RequestTimeout, sending it again while the failure is transient, and
// returns a 200 answer whose body the caller reads, then closes, then
// calls cancel.
func (c *Client) getRetried(ctx context.Context, repo modelrepo.Repo, u *url.URL, what string) (*http.Response, context.CancelFunc, error) {
	rctx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
	backoff := c.opts.RetryBackoff
	var last error
	for attempt := 1; attempt <= c.opts.Attempts; attempt++ {
		if attempt > 1 {
			select {
			case <-rctx.Done():
				cancel()
				return nil, nil, c.readError(ctx, repo, what, rctx.Err())
			case <-time.After(backoff):
			}
			backoff *= 2
		}
		req, err := http.NewRequestWithContext(rctx, http.MethodGet, u.String(), nil)
		if err != nil {
			cancel()
			return nil, nil, modelrepo.Refuse(reason.ReferenceURLInvalid, "", "%s of %s: %v", what, repo, err)
		}
		req.Header.Set("Accept-Encoding", "identity")
		resp, err := c.http.Do(req)
		if err != nil {
			if e := modelrepo.AsError(err); e != nil { // the redirect policy's refusal
				cancel()
				return nil, nil, e
			}
			if ctx.Err() != nil || rctx.Err() != nil {
				cancel()
				return nil, nil, c.readError(ctx, repo, what, err)
			}
			last = c.readError(ctx, repo, what, err)
			c.opts.Log.Debug("hub request failed", "url", modelrepo.Redact(u), "attempt", attempt, "err", last)
			continue
		}
		c.opts.Log.Debug("hub request", "url", modelrepo.Redact(u), "final", modelrepo.Redact(resp.Request.URL), "status", resp.StatusCode, "attempt", attempt)
		if resp.StatusCode == http.StatusOK {
			return resp, cancel, nil
		}
		_ = resp.Body.Close()
		last = c.listStatusError(repo, what, resp.StatusCode)
		if resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode < 500 {
			break
		}
	}
	cancel()
	return nil, nil, last
}

// listStatusError maps the status of an answer to Tree or Digest.
func (c *Client) listStatusError(repo modelrepo.Repo, what string, s int) error {
	switch {
	case s == http.StatusNotFound || s == http.StatusGone:
		return modelrepo.Refuse(reason.ReferenceNotFound, "", "%s of %s is not there (HTTP %d); check the repository and the revision (a private repository also answers 404 without a token: set HF_TOKEN)", what, repo, s)
	case s == http.StatusUnauthorized || s == http.StatusForbidden:
		who := "no token for " + repo.Base.Host + " was given (HF_TOKEN)"
		if tokenFor(c.tokens, repo.Base) != "" {
			who = "the token for " + repo.Base.Host + " may not read it"
		}
		return modelrepo.Refuse(reason.ReferenceUnauthorized, "", "%s of %s is private or gated (HTTP %d) and %s", what, repo, s, who)
	case s == http.StatusTooManyRequests || s >= 500:
		return modelrepo.Refuse(reason.ReferenceUnavailable, "", "%s of %s kept answering HTTP %d after %d attempts; try again when the repository answers", what, repo, s, c.opts.Attempts)
	}
	return modelrepo.Refuse(reason.ReferenceUnavailable, "", "%s of %s answered HTTP %d", what, repo, s)
}

// readError maps a failed request or body to an *modelrepo.Error; the
// caller's own cancelled context passes through. Its sentence names the
// network's complaint, never a URL's query or a header.
func (c *Client) readError(ctx context.Context, repo modelrepo.Repo, what string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // ue.URL may hold a CDN's signed query
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return &modelrepo.Error{Code: reason.ReferenceTimeout, Err: err,
			Message: fmt.Sprintf("%s of %s did not arrive within %s; try again when the repository answers", what, repo, c.opts.RequestTimeout)}
	}
	msg := err.Error()
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	return &modelrepo.Error{Code: reason.ReferenceUnavailable, Err: err,
		Message: fmt.Sprintf("%s of %s could not be read (%s); try again when the repository answers", what, repo, modelrepo.Clip(msg, 200))}
}

// nextPage is the URL a Link header's rel="next" names (RFC 8288),
// resolved against the page it came with; nil when there is none. A next
// page on another scheme or host is refused: a listing stays on its hub.
func nextPage(page *url.URL, link string) (*url.URL, error) {
	for _, part := range strings.Split(link, ",") {
		target, params, ok := strings.Cut(strings.TrimSpace(part), ";")
		target = strings.TrimSpace(target)
		if !ok || !strings.HasPrefix(target, "<") || !strings.HasSuffix(target, ">") {
			continue
		}
		next := false
		for _, p := range strings.Split(params, ";") {
			k, v, _ := strings.Cut(strings.TrimSpace(p), "=")
			if strings.EqualFold(strings.TrimSpace(k), "rel") && strings.EqualFold(strings.Trim(strings.TrimSpace(v), `"`), "next") {
				next = true
			}
		}
		if !next {
			continue
		}
		u, err := page.Parse(strings.TrimSuffix(strings.TrimPrefix(target, "<"), ">"))
		if err != nil {
			return nil, errors.New("its next page's address does not parse")
		}
		if !strings.EqualFold(u.Scheme, page.Scheme) || !strings.EqualFold(u.Host, page.Host) || u.User != nil {
			return nil, fmt.Errorf("its next page is on another host (%s)", u.Host)
		}
		if u.String() == page.String() {
			return nil, errors.New("its next page is the same page")
		}
		return u, nil
	}
	return nil, nil
}
