// Package hub reads checkpoints submitted by reference: files of a model
// repository laid out like a model hub (<base>/resolve/<revision>/<path>),
// each declared with its size and sha256 in the submission's
// checkpoint.json.
//
// A Client reads in three ways, each bounded:
//
//   - Fetch reads a small file whole (config.json, the index, tokenizer
//     files), at most its declared size plus one byte, and checks its
//     sha256: the build stage's reads.
//   - HeaderReader reads a file from its start with one HTTP Range request
//     per read, for exactly the bytes asked: safetensors.ReadHeaderStream
//     through it costs two requests per shard, 8 bytes then the header
//     length it checked against its limit. The contract stage's reads.
//   - Open streams a file from an offset, resuming a broken download: the
//     runner's staging (package staging).
//
// Resolve asks which commit a revision is (the hub's X-Repo-Commit), so
// that every stage reads the files of one commit however the branch moves.
//
// Transient failures are retried in place, within bounds: a server error
// or a broken connection Attempts times; a rate limit (429) for as long as
// its Retry-After or RateLimit header asks, up to MaxWait in all, beyond
// which the read fails with reason.ReferenceRateLimited and the wait
// (Error.RetryAfter) for the caller to wait out; a 416 to a range inside
// the declared size (a CDN answers one now and then, naming a total that
// is not the file's) RangeAttempts times before the file is taken to be
// shorter than declared.
//
// Untrusted input everywhere: every answer's status and Content-Range are
// checked before its body is read (a server that answers a Range request
// with the whole file is refused, its body unread), redirects are bounded
// and keep to https (or http from http), every request has a connect, a
// response and an idle deadline, and a file that is not the one declared
// (another size, or a digest the server names that differs) is refused.
//
// Credentials: the operator configures a token per host (Options.Tokens);
// it is added to requests to that host only, by the transport, and never
// appears in an error, a log line or anything else this package returns.
// A host that refuses the token itself (401 without a repository error
// code: invalid or expired, which a hub answers even for a public
// repository) is counted (lowbarena.hub.token_refused, by host) and
// logged, and the request is sent again without it: a public repository
// still reads, and any other is refused as the operator's doing
// (reason.ReferenceTokenRefused), not as the participant's.
// Participants' URLs with credentials in them are refused. A refusal is an
// *modelrepo.Error with a stable Code and a sentence.
package hub

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/lowbarena/lowbarena/domain/modelrepo"
	"github.com/lowbarena/lowbarena/events/reason"
)

// Defaults of Options.
const (
	DefaultConnectTimeout = 10 * time.Second
	DefaultHeaderTimeout  = 30 * time.Second
	DefaultIdleTimeout    = 30 * time.Second
	DefaultRequestTimeout = 2 * time.Minute
	DefaultMaxRedirects   = 5
	DefaultAttempts       = 3
	DefaultRetryBackoff   = 500 * time.Millisecond
	DefaultMaxWait        = 30 * time.Second
	DefaultRangeAttempts  = 4
	// DefaultRateLimitWait is the wait asked of the caller when a host
	// keeps rate-limiting without saying for how long (the Hugging Face
	// hub counts requests over 5-minute windows).
	DefaultRateLimitWait = time.Minute
	// MaxRetryAfter caps the wait a host may ask for.
	MaxRetryAfter = time.Hour
	// maxBackoff caps the pause between two attempts.
	maxBackoff = 8 * time.Second
	// DefaultHost is the host participants may name when the operator
	// lists none: the Hugging Face hub.
	DefaultHost = "huggingface.co"
)

// Options configure a Client.
type Options struct {
	// Hosts are the hosts participants may name, "host" or "host:port"
	// (case-insensitive; "host" matches any port). Requests use https,
	// except to a loopback host or to a host listed as "http://host":
	// there plain http is allowed too. Redirects from these hosts are
	// followed to any host (model hubs redirect to their CDN), under the
	// scheme rule of Client's redirect policy. Empty: no host at all.
	Hosts []string
	// Tokens maps a host ("host" or "host:port") to the bearer token sent
	// to that host only; a private repository is read with it. Tokens are
	// the operator's: never logged, never in an error.
	Tokens map[string]string
	// ConnectTimeout bounds dialling and the TLS handshake;
	// HeaderTimeout the wait for an answer's headers; IdleTimeout the
	// longest silence while a body streams (a stalled server).
	ConnectTimeout, HeaderTimeout, IdleTimeout time.Duration
	// RequestTimeout bounds a whole bounded read (a small file, one
	// header range), so that a server trickling a byte at a time cannot
	// hold a stage; staging a shard has only the idle deadline.
	RequestTimeout time.Duration
	// MaxRedirects is the most redirects one request follows.
	MaxRedirects int
	// Attempts is how often a request is sent when the server answers
	// 429 or 5xx or the connection fails before an answer; RetryBackoff
	// the first pause between attempts (doubled each time, up to 8 s).
	Attempts     int
	RetryBackoff time.Duration
	// MaxWait bounds the time one request waits in place for a host
	// that rate-limits it (429 with a Retry-After or RateLimit header, or
	// 503 with a Retry-After): a wait within it is waited, a longer one is
	// returned at once as reason.ReferenceRateLimited with the wait in
	// its RetryAfter, for the caller to wait out (a stage retries its
	// input with that delay).
	MaxWait time.Duration
	// RangeAttempts is how often a Range request inside the declared
	// size is sent while the answer is 416, before the file is taken to
	// be shorter than declared (reason.ReferenceDigestMismatch).
	RangeAttempts int
	// Meter makes the client's instruments (lowbarena.hub.token_refused);
	// nil: the global meter provider's.
	Meter metric.MeterProvider
	// RootCAs, when set, are the certificate authorities trusted for
	// https (a private mirror's; tests' servers); nil: the system's.
	RootCAs *x509.CertPool
	// Log receives a debug line per request (method, redacted URL,
	// status, bytes), and a warning, at most once a minute per host, when
	// a host refuses the operator's token; nil logs nothing.
	Log *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	if o.HeaderTimeout <= 0 {
		o.HeaderTimeout = DefaultHeaderTimeout
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	if o.MaxRedirects <= 0 {
		o.MaxRedirects = DefaultMaxRedirects
	}
	if o.Attempts <= 0 {
		o.Attempts = DefaultAttempts
	}
	if o.RetryBackoff <= 0 {
		o.RetryBackoff = DefaultRetryBackoff
	}
	if o.MaxWait <= 0 {
		o.MaxWait = DefaultMaxWait
	}
	if o.RangeAttempts <= 0 {
		o.RangeAttempts = DefaultRangeAttempts
	}
	if o.Meter == nil {
		o.Meter = otel.GetMeterProvider()
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return o
}

// Client reads files of model repositories. It is safe for concurrent use.
type Client struct {
	opts   Options
	http   *http.Client
	hosts  map[string]hostRule
	tokens map[string]string
	// refused counts the answers that refused the operator's token.
	refused metric.Int64Counter
	logMu   sync.Mutex
	logged  map[string]time.Time // host -> when its refused token was last logged
}

const instrumentation = "github.com/lowbarena/lowbarena/adapters/hub"

// hostRule is what one Options.Hosts entry allows.
type hostRule struct{ http bool }

// New returns a Client with o's policy, timeouts and tokens.
func New(o Options) *Client {
	o = o.withDefaults()
	c := &Client{opts: o, hosts: map[string]hostRule{}, tokens: map[string]string{}, logged: map[string]time.Time{}}
	// An instrument that cannot be made is a no-op, never a client that
	// cannot read.
	c.refused, _ = o.Meter.Meter(instrumentation).Int64Counter("lowbarena.hub.token_refused", metric.WithUnit("{response}"),
		metric.WithDescription("Answers of a repository host that refused the operator's own token for it (401 without a repository error code: invalid or expired), by host."))
	for _, h := range o.Hosts {
		h = strings.ToLower(strings.TrimSpace(h))
		rule := hostRule{}
		if rest, ok := strings.CutPrefix(h, "http://"); ok {
			h, rule.http = rest, true
		}
		h = strings.TrimPrefix(h, "https://")
		h = strings.TrimSuffix(h, "/")
		if h != "" {
			c.hosts[h] = rule
		}
	}
	for h, tok := range o.Tokens {
		if h = strings.ToLower(strings.TrimSpace(h)); h != "" && tok != "" {
			c.tokens[h] = tok
		}
	}
	base := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: o.ConnectTimeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   o.ConnectTimeout,
		ResponseHeaderTimeout: o.HeaderTimeout,
		ExpectContinueTimeout: time.Second,
		MaxIdleConnsPerHost:   8,
		IdleConnTimeout:       90 * time.Second,
		ForceAttemptHTTP2:     true,
		// Checkpoint bytes are not compressed, and a compressed answer
		// to a Range request would not be the range.
		DisableCompression: true,
	}
	if o.RootCAs != nil {
		base.TLSClientConfig = &tls.Config{RootCAs: o.RootCAs, MinVersion: tls.VersionTLS12}
	}
	c.http = &http.Client{Transport: &authTransport{base: base, tokens: c.tokens}, CheckRedirect: c.redirect}
	return c
}

// authTransport adds the operator's token for a request's host to that
// request only. net/http copies a request's headers onto the redirects
// it follows; the token is added here, per hop, instead, so it reaches
// exactly the hosts it was configured for.
type authTransport struct {
	base   http.RoundTripper
	tokens map[string]string
}

// anonymousKey marks, in a request's context, a request sent without the
// operator's token (the host refused it).
type anonymousKey struct{}

func (t *authTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Context().Value(anonymousKey{}) != nil {
		return t.base.RoundTrip(req)
	}
	if tok := tokenFor(t.tokens, req.URL); tok != "" {
		req = req.Clone(req.Context())
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	return t.base.RoundTrip(req)
}

func tokenFor(tokens map[string]string, u *url.URL) string {
	host := strings.ToLower(u.Host)
	if tok, ok := tokens[host]; ok {
		return tok
	}
	return tokens[strings.ToLower(u.Hostname())]
}

// Allowed checks that participants may name r's host, and its scheme for
// it: the operator's Hosts. Every read checks it first.
func (c *Client) Allowed(r modelrepo.Repo) error {
	if r.Base == nil {
		return modelrepo.Refuse(reason.ReferenceURLInvalid, "", "the reference names no repository")
	}
	host := strings.ToLower(r.Base.Host)
	rule, ok := c.hosts[host]
	if !ok {
		rule, ok = c.hosts[strings.ToLower(r.Base.Hostname())]
	}
	if !ok {
		return modelrepo.Refuse(reason.ReferenceHostNotAllowed, "", "this arena does not read repositories at %s; it reads %s", r.Base.Host, c.hostList())
	}
	if r.Base.Scheme == "http" && !rule.http && !modelrepo.Loopback(r.Base.Hostname()) {
		return modelrepo.Refuse(reason.ReferenceHostNotAllowed, "", "this arena reads %s over https only; give the repository's https address", r.Base.Host)
	}
	return nil
}

func (c *Client) hostList() string {
	if len(c.hosts) == 0 {
		return "no repository at all (its operator lists none)"
	}
	var hs []string
	for h := range c.hosts {
		hs = append(hs, h)
	}
	sortStrings(hs)
	return strings.Join(hs, ", ")
}

// hintsKey carries, through a request's context, what the redirects of
// that request said about the file (a hub names an LFS file's sha256 and
// size on the redirect to its CDN).
type hintsKey struct{}

// hints are the digests and sizes a request's answers named, and the
// commit the first that named one named.
type hints struct {
	shas   []string
	sizes  []string
	commit string
	// stop ends the request at the first answer that names a commit,
	// a redirect included (Resolve needs no more).
	stop bool
}

// redirect is the redirect policy: at most MaxRedirects hops, every hop to
// https, or to http when the request started on http (so https never
// downgrades, and no other scheme is ever followed), and no user
// information in a target.
func (c *Client) redirect(req *http.Request, via []*http.Request) error {
	if len(via) > c.opts.MaxRedirects {
		return modelrepo.Refuse(reason.ReferenceRedirectLoop, "", "the repository redirected %s more than %d times; it must answer within %d redirects", modelrepo.Redact(via[0].URL), c.opts.MaxRedirects, c.opts.MaxRedirects)
	}
	to := strings.ToLower(req.URL.Scheme)
	from := strings.ToLower(via[0].URL.Scheme)
	if to != "https" && !(to == "http" && from == "http") {
		return modelrepo.Refuse(reason.ReferenceRedirectScheme, "", "the repository redirected %s to a %s: address; the arena follows redirects to https only", modelrepo.Redact(via[0].URL), req.URL.Scheme)
	}
	if req.URL.User != nil {
		return modelrepo.Refuse(reason.ReferenceRedirectScheme, "", "the repository redirected %s to an address with credentials in it; the arena does not follow it", modelrepo.Redact(via[0].URL))
	}
	if h, ok := req.Context().Value(hintsKey{}).(*hints); ok && req.Response != nil {
		h.take(req.Response.Header)
		if h.stop && h.commit != "" {
			return http.ErrUseLastResponse
		}
	}
	return nil
}

// take keeps what a response's headers say of the file: Hugging Face's
// X-Linked-Etag (the sha256 of an LFS file) and X-Linked-Size, and an
// RFC 9530 Repr-Digest sha-256. Every hop's are kept: a hub's redirect
// and its CDN's answer must both agree with the declaration. The commit
// is the first hop's X-Repo-Commit (the hub's; a CDN names none).
func (h *hints) take(hd http.Header) {
	if v := strings.ToLower(strings.TrimSpace(hd.Get("X-Repo-Commit"))); h.commit == "" && modelrepo.IsCommit(v) {
		h.commit = v
	}
	if v := strings.Trim(strings.TrimPrefix(hd.Get("X-Linked-Etag"), "W/"), `"`); isSHA256(v) {
		h.shas = append(h.shas, strings.ToLower(v))
	}
	if v := hd.Get("X-Linked-Size"); v != "" {
		h.sizes = append(h.sizes, v)
	}
	for _, part := range strings.Split(hd.Get("Repr-Digest"), ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || !strings.EqualFold(k, "sha-256") {
			continue
		}
		if b, err := decodeSF(v); err == nil && len(b) == sha256.Size {
			h.shas = append(h.shas, hex.EncodeToString(b))
		}
	}
}

// check refuses an answer that names another file than f.
func (h *hints) check(repo modelrepo.Repo, f modelrepo.File) error {
	for _, sha := range h.shas {
		if sha != f.SHA256 {
			return changed(repo, f, fmt.Sprintf("the repository names its sha256 %s", short(sha)))
		}
	}
	for _, size := range h.sizes {
		if size != fmt.Sprint(f.Size) {
			return changed(repo, f, fmt.Sprintf("the repository says it is %s bytes", size))
		}
	}
	return nil
}

func changed(repo modelrepo.Repo, f modelrepo.File, what string) *modelrepo.Error {
	return modelrepo.Refuse(reason.ReferenceDigestMismatch, f.Path,
		"%s at %s is not the file checkpoint.json declares (%d bytes, sha256 %s): %s; the file changed since it was declared: pin the revision to a commit and declare the file's current size and sha256",
		f.Path, repo, f.Size, short(f.SHA256), what)
}

// request is one request of f (GET or HEAD), with Range rng ("" for
// none), sent again while the failure is transient: a server error or a
// connection that fails before an answer up to Attempts times, a rate
// limit for the wait its headers ask within MaxWait (a longer one is
// returned as reason.ReferenceRateLimited), a 416 to a range inside the
// declared size up to RangeAttempts times, and an answer that refuses the
// operator's token once more without it. The answer's status is mapped
// to an *modelrepo.Error unless it is one of ok; its body is then the
// caller's to close.
func (c *Client) request(ctx context.Context, method string, repo modelrepo.Repo, f modelrepo.File, rng string, ok ...int) (*http.Response, *hints, error) {
	if err := c.Allowed(repo); err != nil {
		return nil, nil, err
	}
	u := repo.FileURL(f.Path)
	t := &tries{backoff: c.opts.RetryBackoff}
	pause := func(d time.Duration) error {
		timer := time.NewTimer(d)
		defer timer.Stop()
		select {
		case <-ctx.Done():
			return c.bodyError(ctx, repo, f, ctx.Err())
		case <-timer.C:
			return nil
		}
	}
	for attempt := 1; ; attempt++ {
		h := &hints{stop: method == http.MethodHead}
		rctx := context.WithValue(ctx, hintsKey{}, h)
		if t.anonymous {
			rctx = context.WithValue(rctx, anonymousKey{}, true)
		}
		req, err := http.NewRequestWithContext(rctx, method, u.String(), nil)
		if err != nil {
			return nil, nil, modelrepo.Refuse(reason.ReferenceURLInvalid, f.Path, "%s: %v", f.Path, err)
		}
		if rng != "" {
			req.Header.Set("Range", rng)
		}
		req.Header.Set("Accept-Encoding", "identity")
		resp, err := c.http.Do(req)
		var wait time.Duration
		switch {
		case err != nil && ctx.Err() != nil:
			return nil, nil, c.bodyError(ctx, repo, f, ctx.Err())
		case err != nil:
			last := c.transportError(repo, f, err)
			c.opts.Log.Debug("hub request failed", "method", method, "url", modelrepo.Redact(u), "range", rng, "attempt", attempt, "err", last)
			if e := modelrepo.AsError(last); e == nil || e.Code != reason.ReferenceUnavailable {
				return nil, nil, last
			}
			if t.failures++; t.failures >= c.opts.Attempts {
				return nil, nil, last
			}
			wait = t.next()
		default:
			h.take(resp.Header)
			c.opts.Log.Debug("hub request", "method", method, "url", modelrepo.Redact(u), "final", modelrepo.Redact(resp.Request.URL), "range", rng, "status", resp.StatusCode, "attempt", attempt)
			if slices.Contains(ok, resp.StatusCode) {
				return resp, h, nil
			}
			closeUnread(resp)
			var again bool
			if wait, again, err = c.again(ctx, t, repo, f, rng, resp); !again {
				return nil, nil, err
			}
		}
		if err := pause(wait); err != nil {
			return nil, nil, err
		}
	}
}

// tries is what one request's attempts have met so far.
type tries struct {
	backoff        time.Duration
	failures, r416 int
	waited         time.Duration
	// anonymous: the host refused the operator's token; the request
	// goes without it.
	anonymous bool
}

// next is the next backoff pause.
func (t *tries) next() time.Duration {
	d := t.backoff
	t.backoff = min(t.backoff*2, maxBackoff)
	return d
}

// again decides what an unwanted answer means: send the request again
// after wait, or fail with err.
func (c *Client) again(ctx context.Context, t *tries, repo modelrepo.Repo, f modelrepo.File, rng string, resp *http.Response) (wait time.Duration, again bool, err error) {
	s := resp.StatusCode
	switch {
	case s == http.StatusUnauthorized && !t.anonymous && tokenFor(c.tokens, resp.Request.URL) != "" && resp.Header.Get("X-Error-Code") == "":
		// The host refused the token itself, not the repository: the
		// operator's to renew. Without it, a public repository still
		// reads.
		c.tokenRefused(ctx, resp.Request.URL)
		t.anonymous = true
		return 0, true, nil
	case s == http.StatusRequestedRangeNotSatisfiable && rangeInside(rng, f.Size):
		// A range inside the declared size: a CDN answers one 416 now
		// and then, whatever total its Content-Range names.
		cr := modelrepo.Clip(resp.Header.Get("Content-Range"), 80)
		if t.r416++; t.r416 < c.opts.RangeAttempts {
			c.opts.Log.Info("a range inside the declared size was refused (HTTP 416); asking again", "url", modelrepo.Redact(resp.Request.URL),
				"range", rng, "content_range", cr, "attempt", t.r416)
			return t.next(), true, nil
		}
		return 0, false, changed(repo, f, fmt.Sprintf("the repository refused a range inside the declared size %d times (HTTP 416, Content-Range %q), so the file is shorter", t.r416, cr))
	case s == http.StatusTooManyRequests || (s == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != ""):
		wait, known := rateLimitWait(resp.Header, time.Now())
		if !known {
			wait = t.next()
		}
		t.failures++
		if t.waited+wait > c.opts.MaxWait || t.failures >= c.opts.Attempts {
			if !known {
				wait = DefaultRateLimitWait
			}
			return 0, false, c.rateLimited(repo, f, s, wait)
		}
		c.opts.Log.Info("rate-limited; waiting", "host", repo.Base.Host, "status", s, "wait", wait)
		t.waited += wait
		return wait, true, nil
	case s >= 500:
		if t.failures++; t.failures < c.opts.Attempts {
			return t.next(), true, nil
		}
	}
	return 0, false, c.statusError(repo, f, resp, t.anonymous)
}

// rangeInside reports whether rng ("bytes=first-" or "bytes=first-last")
// starts inside a file of size bytes.
func rangeInside(rng string, size int64) bool {
	spec, ok := strings.CutPrefix(rng, "bytes=")
	if !ok {
		return false
	}
	a, _, ok := strings.Cut(spec, "-")
	first, err := strconv.ParseInt(a, 10, 64)
	return ok && err == nil && first >= 0 && first < size
}

// rateLimitWait is how long a rate-limited answer asks to wait: the reset
// of a RateLimit item with no request left (the IETF draft
// "RateLimit: "resolvers";r=0;t=55" that the Hugging Face hub sends, or
// the older RateLimit-Remaining: 0 with RateLimit-Reset), else its
// Retry-After (seconds or a date); known is false when it names none.
// A second is added to a reset in whole seconds, and no wait is over
// MaxRetryAfter.
func rateLimitWait(h http.Header, now time.Time) (wait time.Duration, known bool) {
	clamp := func(d time.Duration) time.Duration { return max(0, min(d, MaxRetryAfter)) }
	for _, v := range h.Values("RateLimit") {
		for _, item := range strings.Split(v, ",") {
			r, t := int64(-1), int64(-1)
			for _, p := range strings.Split(item, ";")[1:] {
				k, val, _ := strings.Cut(strings.TrimSpace(p), "=")
				n, err := strconv.ParseInt(strings.TrimSpace(val), 10, 64)
				if err != nil {
					continue
				}
				switch strings.TrimSpace(k) {
				case "r":
					r = n
				case "t":
					t = n
				}
			}
			if r == 0 && t >= 0 {
				wait, known = max(wait, clamp(time.Duration(min(t, int64(MaxRetryAfter/time.Second)))*time.Second+time.Second)), true
			}
		}
	}
	if known {
		return wait, true
	}
	if strings.TrimSpace(h.Get("RateLimit-Remaining")) == "0" {
		if n, err := strconv.ParseInt(strings.TrimSpace(h.Get("RateLimit-Reset")), 10, 64); err == nil && n >= 0 {
			return clamp(time.Duration(min(n, int64(MaxRetryAfter/time.Second)))*time.Second + time.Second), true
		}
	}
	if v := strings.TrimSpace(h.Get("Retry-After")); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
			return clamp(time.Duration(min(n, int64(MaxRetryAfter/time.Second))) * time.Second), true
		}
		if t, err := http.ParseTime(v); err == nil {
			return clamp(t.Sub(now)), true
		}
	}
	return 0, false
}

// rateLimited is the failure of a read the host rate-limits for longer
// than the client waits in place.
func (c *Client) rateLimited(repo modelrepo.Repo, f modelrepo.File, status int, wait time.Duration) *modelrepo.Error {
	return &modelrepo.Error{Code: reason.ReferenceRateLimited, File: f.Path, RetryAfter: wait,
		Message: fmt.Sprintf("%s at %s: %s rate-limits the arena (HTTP %d) for %s; the arena waits that long and reads it again",
			f.Path, repo, repo.Base.Host, status, wait.Round(time.Second))}
}

// tokenRefused tells the operator that u's host refused their token: a
// count by host, and a warning at most once a minute per host.
func (c *Client) tokenRefused(ctx context.Context, u *url.URL) {
	host := strings.ToLower(u.Host)
	if c.refused != nil {
		c.refused.Add(context.WithoutCancel(ctx), 1, metric.WithAttributes(attribute.String("host", host)))
	}
	c.logMu.Lock()
	now := time.Now()
	log := now.Sub(c.logged[host]) >= time.Minute
	if log {
		c.logged[host] = now
	}
	c.logMu.Unlock()
	if log {
		c.opts.Log.Warn("the repository host refused the operator's token for it (HTTP 401 without a repository error): renew the token; the arena reads without it meanwhile, so only public repositories read",
			"host", host)
	}
}

// closeUnread closes an answer whose body is not wanted. The transport
// then drops the connection rather than read the rest: a server that sends
// gigabytes nobody asked for costs what is already in flight, no more.
func closeUnread(resp *http.Response) { _ = resp.Body.Close() }

// transportError maps a failed request to an *modelrepo.Error. Its sentence names
// the redacted URL and the network's complaint, never a header.
func (c *Client) transportError(repo modelrepo.Repo, f modelrepo.File, err error) error {
	if e := modelrepo.AsError(err); e != nil { // the redirect policy's refusal
		e.File = f.Path
		return e
	}
	cause := err
	var ue *url.Error
	if errors.As(err, &ue) {
		cause = ue.Err // ue.URL may hold a CDN's signed query
	}
	var ne net.Error
	if errors.As(cause, &ne) && ne.Timeout() {
		return &modelrepo.Error{Code: reason.ReferenceTimeout, File: f.Path, Err: cause,
			Message: fmt.Sprintf("%s at %s did not answer within %s; try again when the repository answers", f.Path, repo, c.opts.HeaderTimeout)}
	}
	return &modelrepo.Error{Code: reason.ReferenceUnavailable, File: f.Path, Err: cause,
		Message: fmt.Sprintf("%s at %s could not be reached (%s); try again when the repository answers", f.Path, repo, oneLine(cause))}
}

// statusError maps an unwanted status to an *modelrepo.Error, reading
// the hub's own reason (X-Error-Code, X-Error-Message) where it gives one:
// a missing or private repository (RepoNotFound: a hub answers both alike,
// 401 without a token), a gated one (GatedRepo), a revision or a file that
// is not there. anonymous says the request went without the operator's
// token because the host refused it.
func (c *Client) statusError(repo modelrepo.Repo, f modelrepo.File, resp *http.Response, anonymous bool) error {
	s := resp.StatusCode
	code := resp.Header.Get("X-Error-Code")
	says := c.hubSays(resp.Header)
	host := repo.Base.Host
	hasToken := tokenFor(c.tokens, repo.Base) != ""
	switch {
	case anonymous && (s == http.StatusUnauthorized || s == http.StatusForbidden || code == "RepoNotFound" || code == "GatedRepo"):
		return modelrepo.Refuse(reason.ReferenceTokenRefused, f.Path,
			"%s at %s could not be read: %s refused the token the arena's operator configured for it (HTTP 401: invalid or expired), and without a token the repository answers HTTP %d%s. This is the arena's doing, not the repository's: its operator is told; submit again once the token is renewed, or make the repository public",
			f.Path, repo, host, s, says)
	case code == "GatedRepo":
		who := "the arena holds no token for " + host + ", so it reads as no account"
		if hasToken {
			who = "the account of the token the arena's operator configured for " + host + " has not been granted access"
		}
		return modelrepo.Refuse(reason.ReferenceGated, f.Path, "%s is gated (HTTP %d, GatedRepo%s): %s; ask the arena's operator to request access with the arena's account, or lift the gate",
			repo, s, says, who)
	case code == "RepoNotFound":
		why := "it does not exist, or it is private and the arena holds no token for " + host + " (the hub answers both alike)"
		if hasToken {
			why = "it does not exist, or it is private and the token the arena's operator configured for " + host + " may not read it"
		}
		return modelrepo.Refuse(reason.ReferenceNotFound, f.Path, "%s is not a repository the arena can read (HTTP %d, RepoNotFound): %s; check the repository URL in checkpoint.json, or make the repository readable to the arena",
			modelrepo.Redact(repo.Base), s, why)
	case code == "RevisionNotFound":
		return modelrepo.Refuse(reason.ReferenceNotFound, f.Path, "the revision %q is not in %s (HTTP %d, RevisionNotFound); check the revision in checkpoint.json",
			modelrepo.Clip(repo.Revision, 80), modelrepo.Redact(repo.Base), s)
	case s == http.StatusNotFound || s == http.StatusGone:
		return modelrepo.Refuse(reason.ReferenceNotFound, f.Path, "%s is not in %s (HTTP %d); check the repository, the revision and the path in checkpoint.json", f.Path, repo, s)
	case s == http.StatusForbidden && strings.Contains(strings.ToLower(resp.Header.Get("X-Error-Message")), "disabled"):
		return modelrepo.Refuse(reason.ReferenceUnauthorized, f.Path, "%s is disabled (HTTP %d%s): its owner or the hub turned it off; submit a repository that can be read", repo, s, says)
	case s == http.StatusUnauthorized || s == http.StatusForbidden:
		who := "the arena holds no token for " + host
		if hasToken {
			who = "the token the arena's operator configured for " + host + " may not read it"
		}
		return modelrepo.Refuse(reason.ReferenceUnauthorized, f.Path, "%s at %s is private or gated (HTTP %d%s) and %s; make the repository readable to the arena, or ask its operator", f.Path, repo, s, says, who)
	case s == http.StatusRequestedRangeNotSatisfiable:
		return changed(repo, f, "the repository refuses a range inside the declared size (HTTP 416), so the file is shorter")
	case s >= 300 && s < 400:
		return modelrepo.Refuse(reason.ReferenceUnavailable, f.Path, "%s at %s answered a redirect (HTTP %d) without a usable Location", f.Path, repo, s)
	case s >= 500:
		return modelrepo.Refuse(reason.ReferenceUnavailable, f.Path, "%s at %s kept answering HTTP %d after %d attempts; try again when the repository answers", f.Path, repo, s, c.opts.Attempts)
	}
	return modelrepo.Refuse(reason.ReferenceUnavailable, f.Path, "%s at %s answered HTTP %d%s", f.Path, repo, s, says)
}

// hubSays is what a hub's X-Error-Message says, as ", the hub says "..."",
// or "": one line, clipped, and with no token of the operator's in it
// (a server may echo what it was sent).
func (c *Client) hubSays(h http.Header) string {
	msg := strings.TrimSpace(h.Get("X-Error-Message"))
	if msg == "" {
		return ""
	}
	msg = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, msg)
	for _, tok := range c.tokens {
		msg = strings.ReplaceAll(msg, tok, "[token]")
	}
	return fmt.Sprintf(", the hub says %q", modelrepo.Clip(msg, 200))
}

// bodyError maps a failure while a request is sent or its body streams.
// A cancelled context of the caller's own (the service stops) passes
// through as it is: that is not the repository's doing.
func (c *Client) bodyError(ctx context.Context, repo modelrepo.Repo, f modelrepo.File, err error) error {
	if e := modelrepo.AsError(err); e != nil {
		return e
	}
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errStalled):
		return &modelrepo.Error{Code: reason.ReferenceTimeout, File: f.Path, Err: err,
			Message: fmt.Sprintf("%s at %s stopped sending for %s; try again when the repository answers", f.Path, repo, c.opts.IdleTimeout)}
	case errors.Is(cause, errTooSlow):
		return &modelrepo.Error{Code: reason.ReferenceTimeout, File: f.Path, Err: err,
			Message: fmt.Sprintf("%s at %s did not send what was asked within %s; try again when the repository answers", f.Path, repo, c.opts.RequestTimeout)}
	case ctx.Err() != nil:
		return ctx.Err()
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return &modelrepo.Error{Code: reason.ReferenceTimeout, File: f.Path, Err: err,
			Message: fmt.Sprintf("%s at %s stopped sending; try again when the repository answers", f.Path, repo)}
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return &modelrepo.Error{Code: reason.ReferenceUnavailable, File: f.Path, Err: err,
			Message: fmt.Sprintf("%s at %s: the connection ended before the bytes its answer announced", f.Path, repo)}
	}
	return &modelrepo.Error{Code: reason.ReferenceUnavailable, File: f.Path, Err: err,
		Message: fmt.Sprintf("%s at %s: the transfer broke (%s)", f.Path, repo, oneLine(err))}
}

// errStalled is the cause of a request cancelled by its idle deadline,
// errTooSlow of one cancelled by RequestTimeout.
var (
	errStalled = errors.New("hub: no bytes within the idle deadline")
	errTooSlow = errors.New("hub: the request outlasted its deadline")
)

// idleBody reads a body under an idle deadline: each Read that returns
// bytes pushes the deadline back; when it passes, the request's context is
// cancelled with errStalled and the Read in progress fails.
type idleBody struct {
	body   io.ReadCloser
	timer  *time.Timer
	idle   time.Duration
	cancel context.CancelCauseFunc
}

func newIdleBody(body io.ReadCloser, idle time.Duration, cancel context.CancelCauseFunc) *idleBody {
	b := &idleBody{body: body, idle: idle, cancel: cancel}
	b.timer = time.AfterFunc(idle, func() { cancel(errStalled) })
	return b
}

func (b *idleBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	if n > 0 {
		b.timer.Reset(b.idle)
	}
	return n, err
}

func (b *idleBody) Close() error {
	b.timer.Stop()
	err := b.body.Close()
	b.cancel(nil)
	return err
}

// bounded is a request context under RequestTimeout, cancelled with
// errTooSlow when the deadline passes.
func (c *Client) bounded(ctx context.Context) (context.Context, context.CancelCauseFunc) {
	rctx, cancel := context.WithCancelCause(ctx)
	tctx, stop := context.WithTimeoutCause(rctx, c.opts.RequestTimeout, errTooSlow)
	return tctx, func(err error) { cancel(err); stop() }
}

// Resolve returns repo at the commit its revision is now, as the host
// names it (X-Repo-Commit) on a HEAD request for f (a file every
// checkpoint lists: config.json), so that every later read asks for that
// commit and a branch that moves cannot give two stages different files.
// The request ends at the first answer that names the commit (a hub's
// redirect to its CDN is not followed). A revision that is a commit
// already is returned as it is, without a request; so is one whose host
// names no commit (a plain mirror), whose reads stay on the revision.
func (c *Client) Resolve(ctx context.Context, repo modelrepo.Repo, f modelrepo.File) (modelrepo.Repo, error) {
	if err := c.Allowed(repo); err != nil {
		return repo, err
	}
	if modelrepo.IsCommit(repo.Revision) {
		return repo, nil
	}
	rctx, cancel := c.bounded(ctx)
	defer cancel(nil)
	resp, h, err := c.request(rctx, http.MethodHead, repo, f, "", http.StatusOK, http.StatusMovedPermanently, http.StatusFound,
		http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect, http.StatusMethodNotAllowed, http.StatusNotImplemented)
	if err != nil {
		return repo, err
	}
	closeUnread(resp)
	if resp.StatusCode == http.StatusMethodNotAllowed || resp.StatusCode == http.StatusNotImplemented {
		// A server that answers no HEAD names no commit either.
		return repo, nil
	}
	if err := h.check(repo, f); err != nil {
		return repo, err
	}
	if h.commit == "" {
		c.opts.Log.Debug("the repository names no commit; reading at the revision", "repository", repo.String())
		return repo, nil
	}
	return repo.At(h.commit), nil
}

// Fetch reads f whole, refusing a file declared over max bytes before any
// request, reading at most f.Size+1 bytes, and checking size and sha256.
// The build stage fetches the small files of a checkpoint this way.
func (c *Client) Fetch(ctx context.Context, repo modelrepo.Repo, f modelrepo.File, max int64) ([]byte, error) {
	if f.Size > max {
		return nil, modelrepo.Refuse(reason.ReferenceFileTooLarge, f.Path, "%s is declared %d bytes; the arena fetches files other than *.safetensors whole, and each may be at most %d bytes", f.Path, f.Size, max)
	}
	rctx, cancel := c.bounded(ctx)
	resp, h, err := c.request(rctx, http.MethodGet, repo, f, "", http.StatusOK)
	if err != nil {
		cancel(nil)
		return nil, err
	}
	body := newIdleBody(resp.Body, c.opts.IdleTimeout, cancel)
	defer body.Close()
	if err := h.check(repo, f); err != nil {
		return nil, err
	}
	if resp.ContentLength >= 0 && resp.ContentLength != f.Size {
		return nil, changed(repo, f, fmt.Sprintf("the repository serves %d bytes", resp.ContentLength))
	}
	data, err := io.ReadAll(io.LimitReader(body, f.Size+1))
	if err != nil {
		return nil, c.bodyError(rctx, repo, f, err)
	}
	if int64(len(data)) != f.Size {
		return nil, changed(repo, f, fmt.Sprintf("the repository serves %d bytes", len(data)))
	}
	if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != f.SHA256 {
		return nil, changed(repo, f, "its sha256 is "+short(hex.EncodeToString(sum[:])))
	}
	return data, nil
}

// Body is a file's bytes from Offset to its end, as Open returns them.
type Body struct {
	io.ReadCloser
	// Offset is where the bytes start: the offset asked for, or 0 when
	// the server ignored the Range request of a resumed download and
	// sent the whole file (the caller then starts over).
	Offset int64
}

// Open streams f from offset (a resumed download) to its end under the
// idle deadline. For offset > 0 it sends Range: bytes=offset-; an answer
// with the whole file (200) is accepted as a restart (Body.Offset 0),
// since the caller wants every byte anyway. Sizes the server states
// (Content-Range, Content-Length, X-Linked-Size) must agree with f.Size,
// and a sha256 it names with f.SHA256; the caller checks the digest of
// what it wrote.
func (c *Client) Open(ctx context.Context, repo modelrepo.Repo, f modelrepo.File, offset int64) (*Body, error) {
	if offset < 0 || offset > f.Size {
		return nil, fmt.Errorf("hub: offset %d outside %s's %d bytes", offset, f.Path, f.Size)
	}
	rctx, cancel := context.WithCancelCause(ctx)
	rng := ""
	if offset > 0 {
		rng = fmt.Sprintf("bytes=%d-", offset)
	}
	resp, h, err := c.request(rctx, http.MethodGet, repo, f, rng, http.StatusOK, http.StatusPartialContent)
	if err != nil {
		cancel(nil)
		return nil, err
	}
	fail := func(err error) (*Body, error) {
		closeUnread(resp)
		cancel(nil)
		return nil, err
	}
	if err := h.check(repo, f); err != nil {
		return fail(err)
	}
	start := int64(0)
	if resp.StatusCode == http.StatusPartialContent {
		if offset == 0 {
			return fail(modelrepo.Refuse(reason.ReferenceRangeIgnored, f.Path, "%s at %s answered a plain request with a part of the file (HTTP 206)", f.Path, repo))
		}
		cr, err := parseContentRange(resp.Header.Get("Content-Range"))
		if err != nil || cr.first != offset || cr.last != f.Size-1 {
			return fail(modelrepo.Refuse(reason.ReferenceRangeIgnored, f.Path, "%s at %s answered the range from byte %d with %q", f.Path, repo, offset, modelrepo.Clip(resp.Header.Get("Content-Range"), 80)))
		}
		if cr.total != f.Size {
			return fail(changed(repo, f, fmt.Sprintf("the repository says it is %d bytes", cr.total)))
		}
		start = offset
	}
	if resp.ContentLength >= 0 && resp.ContentLength != f.Size-start {
		return fail(changed(repo, f, fmt.Sprintf("the repository serves %d bytes from byte %d", resp.ContentLength, start)))
	}
	body := &errBody{c: c, ctx: rctx, repo: repo, f: f, body: newIdleBody(resp.Body, c.opts.IdleTimeout, cancel)}
	return &Body{ReadCloser: struct {
		io.Reader
		io.Closer
	}{io.LimitReader(body, f.Size-start), body}, Offset: start}, nil
}

// errBody maps a streaming body's errors to *modelrepo.Error.
type errBody struct {
	c    *Client
	ctx  context.Context
	repo modelrepo.Repo
	f    modelrepo.File
	body io.ReadCloser
}

func (b *errBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	if err != nil && err != io.EOF {
		return n, b.c.bodyError(b.ctx, b.repo, b.f, err)
	}
	return n, err
}

func (b *errBody) Close() error { return b.body.Close() }

func oneLine(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return modelrepo.Clip(s, 200)
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}

func isSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}
