package api

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/lowbarena/lowbarena/domain/bundle"
	"github.com/lowbarena/lowbarena/domain/participant"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/bus"
)

// HeaderSHA256 is the request header in which a client may state the
// sha256 of the body it uploads; the gateway checks it (arena submit
// --api sends it).
const HeaderSHA256 = "Lowbarena-Sha256"

// submit is POST /v1/submissions: the body is a packed bundle (the
// gzip'd tar arena submit packs; a checkpoint by reference is a small
// bundle holding checkpoint.json). In order, each refused before any
// later cost is paid:
//
//  1. the token: a participant's (401 token_*, 403 for an operator's);
//  2. the declared size against the participant's bytes quota and the
//     arena's largest upload (413), before a byte of the body is read, so
//     a client sending Expect: 100-continue sends nothing;
//  3. the participant's uploads at once and the gateway's (429, 503);
//  4. the day's submissions and the week's GPU-hours (429 with
//     Retry-After and the moment the next one is allowed);
//  5. the body, spooled to disk under a size cap and a least rate (413,
//     408 upload_too_slow, 400 upload_incomplete), its sha256 against
//     Lowbarena-Sha256 when sent;
//  6. the bundle's submission.json: readable (422 with the bundle's
//     code) and naming the token's participant (403
//     participant_mismatch);
//  7. the quota again, reserving the submission under compare-and-set
//     (two uploads racing for the last slot never both pass);
//
// then the archive goes to the uploads object store and
// submission.received is published, as `arena submit` does over NATS,
// with the token's participant: 202 with the new id.
func (a *API) submit(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	// An upload's connection is closed after its answer: a refused body
	// is never read on (net/http would otherwise read up to 256 KiB of
	// it after the handler, from a client that may have stalled).
	w.Header().Set("Connection", "close")
	v, ok := a.viewer(w, r)
	if !ok {
		return
	}
	switch v.Kind {
	case "":
		a.refuse(w, r, http.StatusUnauthorized, reason.TokenMissing,
			"submitting takes a participant's token: send Authorization: Bearer lbp_... (arena submit --api reads it from LOWBARENA_TOKEN)")
		return
	case participant.KindOperator:
		a.refuse(w, r, http.StatusForbidden, reason.TokenNotParticipant,
			"an operator's token reads everything and submits nothing over HTTP: submit with the token of the participant the bundle is for (operators submit over NATS with arena submit)")
		return
	}
	if a.o.Bus == nil {
		a.unavailable(w, r, errors.New("api: no bus to publish submissions on"))
		return
	}
	p, err := a.o.Registry.Get(ctx, v.Name)
	if err != nil {
		a.unavailable(w, r, err)
		return
	}
	lim := p.Limits.Or(a.o.Defaults)
	if r.ContentLength > 0 && a.tooLarge(w, r, v.Name, lim, r.ContentLength) {
		return
	}
	release, ok := a.slots.acquire(v.Name)
	if !ok {
		a.refuse(w, r, http.StatusTooManyRequests, reason.UploadsConcurrent, fmt.Sprintf(
			"%s has %d uploads in flight, the most at once; send this one when one of them has been answered", v.Name, a.o.UploadsPerParticipant))
		return
	}
	defer release()
	select {
	case a.uploads <- struct{}{}:
		defer func() { <-a.uploads }()
	default:
		w.Header().Set("Retry-After", "10")
		a.refuse(w, r, http.StatusServiceUnavailable, reason.GatewayBusy, "the gateway takes as many uploads as it can at once; send this one again in a few seconds")
		return
	}
	u, err := a.o.Ledger.Get(ctx, v.Name)
	if err != nil {
		a.unavailable(w, r, err)
		return
	}
	if q := u.Check(v.Name, lim, a.o.Now()); q != nil {
		a.quota(w, r, q)
		return
	}

	f, size, sum, ok := a.spool(w, r, v.Name, lim)
	if !ok {
		return
	}
	defer func() {
		f.Close()
		os.Remove(f.Name())
	}()
	if want := r.Header.Get(HeaderSHA256); want != "" && want != sum {
		a.refuse(w, r, http.StatusBadRequest, reason.UploadDigestMismatch, fmt.Sprintf(
			"the upload's %d bytes have sha256 %s, and its %s header says %s: it changed on the way; upload it again", size, short(sum), HeaderSHA256, short(want)))
		return
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		a.fail(w, r, err)
		return
	}
	// An honest archive inflates to about its size; the cap stops a gzip
	// bomb after a few times that.
	in, err := bundle.Inspect(bufio.NewReaderSize(f, 1<<20), 4*size+64<<20)
	if err != nil {
		var be *bundle.Error
		if errors.As(err, &be) {
			a.refuse(w, r, http.StatusUnprocessableEntity, be.Code, be.Message)
			return
		}
		a.fail(w, r, err)
		return
	}
	if in.Declaration.Participant != v.Name {
		a.refuse(w, r, http.StatusForbidden, reason.ParticipantMismatch, fmt.Sprintf(
			"submission.json names the participant %q, and this token is %s's: a token submits its own participant's bundles only; set \"participant\": %q in submission.json",
			in.Declaration.Participant, v.Name, v.Name))
		return
	}
	id := newSubmissionID()
	// The upload's span is the root of the submission's trace: it names
	// the submission and its participant.
	trace.SpanFromContext(ctx).SetAttributes(bus.AttrSubmission.String(id), attribute.String("lowbarena.participant", v.Name))
	if err := a.o.Ledger.Reserve(ctx, v.Name, lim, participant.Spent{ID: id, Bytes: size}); err != nil {
		var q *participant.Refusal
		if errors.As(err, &q) {
			a.quota(w, r, q)
			return
		}
		a.unavailable(w, r, err)
		return
	}
	// The upload is in hand: a client that hangs up now does not stop its
	// publication halfway.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Minute)
	defer cancel()
	data, err := a.publish(pctx, id, v.Name, in, f, size, sum)
	if err != nil {
		if rerr := a.o.Ledger.Release(pctx, v.Name, id); rerr != nil {
			a.o.Log.Warn("a failed submission stays counted", "participant", v.Name, "submission", id, "err", rerr)
		}
		a.unavailable(w, r, err)
		return
	}
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(a.o.WriteTimeout))
	w.Header().Set("Location", "/v1/submissions/"+id)
	out := map[string]any{"submission_id": id, "participant": data.Participant, "task_id": data.TaskID, "split": data.Split,
		"bundle": map[string]any{"size": size, "sha256": sum, "files": in.Files}, "record": "/v1/submissions/" + id}
	if data.Reference != nil {
		out["reference"] = data.Reference
	}
	writeJSON(w, http.StatusAccepted, out)
}

// tooLarge refuses an upload of n bytes over the participant's bytes
// quota (413 quota_bytes_per_submission) or the arena's largest upload
// (413 bundle_upload_too_large), whichever is smaller.
func (a *API) tooLarge(w http.ResponseWriter, r *http.Request, name string, lim participant.Limits, n int64) bool {
	if lim.BytesPerSubmission <= a.o.MaxUploadBytes {
		if q := lim.CheckBytes(name, n); q != nil {
			a.quota(w, r, q)
			return true
		}
		return false
	}
	if n > a.o.MaxUploadBytes {
		a.refuse(w, r, http.StatusRequestEntityTooLarge, reason.BundleUploadTooLarge, fmt.Sprintf(
			"the upload is %s; the arena takes uploads of at most %s. Submit a checkpoint this large by reference: publish it in a model repository, "+
				"write checkpoint.json beside submission.json (arena reference), and submit that folder", bundle.HumanSize(n), bundle.HumanSize(a.o.MaxUploadBytes)))
		return true
	}
	return false
}

// errTooSlow is a body that stalled or fell below the least rate.
var errTooSlow = errors.New("api: the upload is too slow")

// spool writes the body to a temporary file under the size cap, hashing
// it, and answers the refusal itself when it fails.
func (a *API) spool(w http.ResponseWriter, r *http.Request, name string, lim participant.Limits) (*os.File, int64, string, bool) {
	maxBytes := min(lim.BytesPerSubmission, a.o.MaxUploadBytes)
	f, err := os.CreateTemp(a.o.Spool, "upload-*.tar.gz")
	if err != nil {
		a.fail(w, r, err)
		return nil, 0, "", false
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	rc := http.NewResponseController(w)
	br := &bodyReader{r: r.Body, rc: rc, start: time.Now(), minRate: a.o.UploadMinRate, grace: a.o.UploadGrace, idle: a.o.UploadIdle}
	h := sha256.New()
	n, readErr, writeErr := copyBody(io.MultiWriter(f, h), br, maxBytes+1)
	// Reading is over. The read deadline is lifted: net/http's background
	// read (which watches for the client going away) would otherwise
	// cancel the request when it passes. Nothing more of the body is read
	// after the answer (the connection closes). The answer gets its own
	// time from now, however long the upload took.
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Now().Add(a.o.WriteTimeout))
	switch {
	case writeErr != nil:
		a.fail(w, r, writeErr)
	case n > maxBytes:
		a.tooLarge(w, r, name, lim, n)
	case errors.Is(readErr, errTooSlow):
		a.refuse(w, r, http.StatusRequestTimeout, reason.UploadTooSlow, fmt.Sprintf(
			"the upload stalled or came slower than %s/s after %d bytes; upload it again over a steadier connection", bundle.HumanSize(a.o.UploadMinRate), n))
	case readErr != nil:
		a.refuse(w, r, http.StatusBadRequest, reason.UploadIncomplete, fmt.Sprintf(
			"the upload ended after %d bytes, before its end (the connection dropped, or the body is shorter than its Content-Length); upload it again", n))
	case n == 0:
		a.refuse(w, r, http.StatusBadRequest, reason.UploadIncomplete, "the upload is empty: the body is the packed bundle (arena submit --api packs and sends it)")
	default:
		ok = true
		return f, n, hex.EncodeToString(h.Sum(nil)), true
	}
	return nil, 0, "", false
}

// copyBody copies at most limit bytes of r to w, telling a read error
// from a write error.
func copyBody(w io.Writer, r io.Reader, limit int64) (n int64, readErr, writeErr error) {
	buf := make([]byte, 256<<10)
	for n < limit {
		chunk := buf[:min(int64(len(buf)), limit-n)]
		k, err := r.Read(chunk)
		if k > 0 {
			if _, werr := w.Write(chunk[:k]); werr != nil {
				return n, nil, werr
			}
			n += int64(k)
		}
		if errors.Is(err, io.EOF) {
			return n, nil, nil
		}
		if err != nil {
			return n, err, nil
		}
	}
	return n, nil, nil
}

// bodyReader reads a request body under a deadline renewed at every
// read: the next bytes are due within idle, and never later than the
// least rate allows (after grace, minRate bytes a second on average
// since the start). A body behind that schedule fails with errTooSlow at
// once; one that stalls fails when its deadline passes.
type bodyReader struct {
	r       io.Reader
	rc      *http.ResponseController
	start   time.Time
	n       int64
	minRate int64
	grace   time.Duration
	idle    time.Duration
}

func (b *bodyReader) Read(p []byte) (int, error) {
	now := time.Now()
	due := b.start.Add(b.grace + time.Duration(float64(b.n)/float64(b.minRate)*float64(time.Second)))
	if !due.After(now) {
		return 0, errTooSlow
	}
	deadline := now.Add(b.idle)
	if due.Before(deadline) {
		deadline = due
	}
	if err := b.rc.SetReadDeadline(deadline); err != nil {
		return 0, fmt.Errorf("api: set read deadline: %w", err)
	}
	k, err := b.r.Read(p)
	b.n += int64(k)
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		return k, errTooSlow
	}
	return k, err
}

// publish puts the archive in the uploads object store and publishes
// submission.received, the token's participant in it. The event id is
// derived from the submission id, so a publish retried after a lost ack
// is stored once.
func (a *API) publish(ctx context.Context, id, who string, in *bundle.Inspection, f *os.File, size int64, sum string) (events.SubmissionReceivedData, error) {
	var data events.SubmissionReceivedData
	obj := id + ".tar.gz"
	meta := jetstream.ObjectMeta{Name: obj, Description: "bundle of " + who + " over HTTP",
		Headers: map[string][]string{"Lowbarena-Sha256": {sum}}}
	// A put that a cluster electing the uploads stream's leader
	// interrupts starts again (bus.PutObject), so a participant's upload
	// outlives a node's restart as the arena's own publishes do.
	put := bus.PutRetry{Wrap: func(r io.Reader) io.Reader { return bufio.NewReaderSize(r, 1<<20) }}
	if _, err := bus.PutObject(ctx, a.o.Bus.JetStream(), bus.ObjectUploads, meta, f, put); err != nil {
		return data, fmt.Errorf("api: upload %s: %w", obj, err)
	}
	d := in.Declaration
	data = events.SubmissionReceivedData{
		SubmissionID: id, Participant: who, Agent: d.Agent, TaskID: d.TaskID, Split: d.Split, Track: d.Track, Solution: d.Solution,
		Bundle:      events.BundleRef{Store: "jetstream", Bucket: bus.ObjectUploads, Object: obj, Size: size, SHA256: sum, Files: in.Files},
		SubmittedAt: a.o.Now().UTC(),
	}
	if ref := in.Reference; ref != nil {
		repo, err := ref.Repo()
		if err != nil {
			return data, fmt.Errorf("api: %w", err) // Inspect parsed it: not reached
		}
		data.Reference = &events.CheckpointReference{Repository: repo.Base.String(), Revision: ref.Revision, Files: len(ref.Files), Bytes: ref.Bytes()}
	}
	if _, err := bus.Emit(ctx, a.o.Bus, events.Source("gateway"), events.Submission.Received, id, data, bus.CausedBy(id)); err != nil {
		return data, fmt.Errorf("api: publish submission %s: %w", id, err)
	}
	return data, nil
}

// newSubmissionID returns 16 hex digits, the form of the arena's ids.
func newSubmissionID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func short(digest string) string {
	if len(digest) > 12 {
		return digest[:12] + "…"
	}
	return digest
}

// slots bounds each participant's uploads at once.
type slots struct {
	max int
	mu  sync.Mutex
	in  map[string]int
}

func newSlots(max int) *slots { return &slots{max: max, in: map[string]int{}} }

// acquire takes one of name's slots, or reports false when all are in
// use; release gives it back.
func (s *slots) acquire(name string) (release func(), ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.in[name] >= s.max {
		return nil, false
	}
	s.in[name]++
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.in[name]--; s.in[name] == 0 {
			delete(s.in, name)
		}
	}, true
}
