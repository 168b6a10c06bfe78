package hub

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/lowbarena/lowbarena/domain/modelrepo"
	"github.com/lowbarena/lowbarena/events/reason"
)

// HeaderReader reads f from its start through HTTP Range requests: each
// Read that finds no range open asks for exactly the bytes it wants (up
// to the end of the declared size), and the next Reads take the rest of
// that range. So safetensors.ReadHeaderStream, which reads 8 bytes and
// then the header length it checked against its limit, costs two requests
// and 8+N bytes per shard, and a header length past the limit costs one
// request of 8 bytes. The reader never asks for a byte it was not asked
// for, and never reads an answer that is not the range asked for.
//
// Its errors are *modelrepo.Error values (wrapped by the safetensors reader when it
// reads through it). Close it when done.
func (c *Client) HeaderReader(ctx context.Context, repo modelrepo.Repo, f modelrepo.File) *RangeReader {
	return &RangeReader{c: c, ctx: ctx, repo: repo, f: f}
}

// RangeReader is HeaderReader's reader.
type RangeReader struct {
	c    *Client
	ctx  context.Context
	repo modelrepo.Repo
	f    modelrepo.File

	pos, end int64
	body     io.ReadCloser
	cancel   context.CancelCauseFunc
	rctx     context.Context
	read     int64
	requests int
}

// Read implements io.Reader.
func (r *RangeReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if r.pos >= r.f.Size {
		return 0, io.EOF
	}
	if r.body == nil {
		n := min(int64(len(p)), r.f.Size-r.pos)
		if err := r.open(r.pos, r.pos+n-1); err != nil {
			return 0, err
		}
	}
	want := min(int64(len(p)), r.end-r.pos)
	n, err := r.body.Read(p[:want])
	r.pos += int64(n)
	r.read += int64(n)
	if r.pos == r.end {
		r.closeBody()
		return n, nil
	}
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		err = r.c.bodyError(r.rctx, r.repo, r.f, err)
		r.closeBody()
	}
	return n, err
}

// open sends Range: bytes=first-last and checks the answer before its body
// is read: 206, a Content-Range of exactly that range over the declared
// size, a Content-Length (when given) of the range's length.
func (r *RangeReader) open(first, last int64) error {
	rctx, cancel := r.c.bounded(r.ctx)
	r.requests++
	resp, h, err := r.c.request(rctx, http.MethodGet, r.repo, r.f, fmt.Sprintf("bytes=%d-%d", first, last), http.StatusOK, http.StatusPartialContent)
	if err != nil {
		cancel(nil)
		return err
	}
	fail := func(err error) error {
		closeUnread(resp)
		cancel(nil)
		return err
	}
	if err := h.check(r.repo, r.f); err != nil {
		return fail(err)
	}
	if resp.StatusCode != http.StatusPartialContent {
		what := "the whole file"
		if resp.ContentLength >= 0 {
			what = fmt.Sprintf("the whole file (%d bytes)", resp.ContentLength)
		}
		return fail(modelrepo.Refuse(reason.ReferenceRangeIgnored, r.f.Path, "%s at %s answered a request for bytes %d-%d with %s (HTTP %d); the arena reads checkpoints by reference only from repositories that answer Range requests, and did not read the answer",
			r.f.Path, r.repo, first, last, what, resp.StatusCode))
	}
	cr, err := parseContentRange(resp.Header.Get("Content-Range"))
	if err != nil || cr.first != first || cr.last != last {
		return fail(modelrepo.Refuse(reason.ReferenceRangeIgnored, r.f.Path, "%s at %s answered a request for bytes %d-%d with the range %q; the arena did not read it",
			r.f.Path, r.repo, first, last, modelrepo.Clip(resp.Header.Get("Content-Range"), 80)))
	}
	if cr.total != r.f.Size {
		return fail(changed(r.repo, r.f, fmt.Sprintf("the repository says it is %d bytes", cr.total)))
	}
	if resp.ContentLength >= 0 && resp.ContentLength != last-first+1 {
		return fail(modelrepo.Refuse(reason.ReferenceRangeIgnored, r.f.Path, "%s at %s announced %d bytes for the %d of bytes %d-%d; the arena did not read them",
			r.f.Path, r.repo, resp.ContentLength, last-first+1, first, last))
	}
	r.rctx, r.cancel = rctx, cancel
	r.body = newIdleBody(resp.Body, r.c.opts.IdleTimeout, cancel)
	r.end = last + 1
	return nil
}

func (r *RangeReader) closeBody() {
	if r.body != nil {
		_ = r.body.Close()
		r.body = nil
	}
}

// Close ends the range in progress, if any.
func (r *RangeReader) Close() error {
	r.closeBody()
	return nil
}

// BytesRead is how many bytes of the file's answers were read.
func (r *RangeReader) BytesRead() int64 { return r.read }

// Requests is how many Range requests were sent.
func (r *RangeReader) Requests() int { return r.requests }

// contentRange is a parsed "bytes first-last/total".
type contentRange struct{ first, last, total int64 }

func parseContentRange(s string) (contentRange, error) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(s), "bytes ")
	if !ok {
		return contentRange{}, errors.New("not a bytes range")
	}
	span, total, ok := strings.Cut(rest, "/")
	if !ok {
		return contentRange{}, errors.New("no total")
	}
	a, b, ok := strings.Cut(span, "-")
	if !ok {
		return contentRange{}, errors.New("no span")
	}
	var cr contentRange
	var err error
	if cr.first, err = strconv.ParseInt(a, 10, 64); err != nil {
		return contentRange{}, err
	}
	if cr.last, err = strconv.ParseInt(b, 10, 64); err != nil {
		return contentRange{}, err
	}
	if cr.total, err = strconv.ParseInt(total, 10, 64); err != nil {
		return contentRange{}, err // "*": an unknown total is not the declared size
	}
	if cr.first < 0 || cr.last < cr.first || cr.total <= cr.last {
		return contentRange{}, errors.New("inconsistent")
	}
	return cr, nil
}

// decodeSF decodes an RFC 8941 byte sequence, ":<base64>:".
func decodeSF(v string) ([]byte, error) {
	v = strings.TrimSpace(v)
	if len(v) < 2 || v[0] != ':' || v[len(v)-1] != ':' {
		return nil, errors.New("not a byte sequence")
	}
	return base64.StdEncoding.DecodeString(v[1 : len(v)-1])
}

func sortStrings(s []string) { slices.Sort(s) }
