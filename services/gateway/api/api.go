// Package api is the gateway's HTTP API: the submission records and the
// round views to read (each record only to the viewers allowed to read
// it), the live stream and page, the leaderboard, and submissions over
// HTTP with a participant's token, within its quotas.
package api

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/lowbarena/lowbarena/domain/participant"
	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/store"
	"github.com/lowbarena/lowbarena/schemas"
	"github.com/lowbarena/lowbarena/services/gateway/pages"
	"github.com/lowbarena/lowbarena/services/gateway/participants"
	"github.com/lowbarena/lowbarena/services/gateway/rounds"
	"github.com/lowbarena/lowbarena/services/gateway/timeline"
	"github.com/lowbarena/lowbarena/services/gateway/usage"
)

// Options configure the API. Records, Registry and Ledger are required.
type Options struct {
	// Records is the submissions bucket, Views the round views (nil: no
	// rounds).
	Records jetstream.KeyValue
	Views   jetstream.KeyValue
	// Registry authenticates tokens; Ledger keeps the quotas.
	Registry *participants.Registry
	Ledger   *usage.Ledger
	// Bus puts uploads in the uploads object store and publishes
	// submission.received (nil: submissions are refused as unavailable).
	Bus *bus.Bus
	// NC asks the score service for the leaderboard (nil: unavailable).
	NC *nats.Conn
	// Store holds the figures behind a record (GPU samples, request
	// latencies) that the submission page draws (nil: not shown).
	Store store.Store
	// Defaults are the quotas of a participant without overrides; every
	// field positive.
	Defaults participant.Limits
	// MaxUploadBytes is the arena's largest upload, whatever a
	// participant's quota (default 2 GiB, the build stage's limit).
	MaxUploadBytes int64
	// UploadsPerParticipant bounds one participant's uploads at once
	// (default 2); Uploads all uploads at once (default 8), and
	// LiveStreams the live streams at once (default 256). Each is per
	// gateway process.
	UploadsPerParticipant int
	Uploads               int
	LiveStreams           int
	// An upload body must keep UploadMinRate bytes a second on average
	// after UploadGrace, and never stall longer than UploadIdle
	// (defaults 64 KiB/s, 10 s, 30 s): a slow-loris body is cut off with
	// upload_too_slow.
	UploadMinRate int64
	UploadGrace   time.Duration
	UploadIdle    time.Duration
	// WriteTimeout bounds writing an answer (default 30 s); the live
	// stream renews it per event.
	WriteTimeout time.Duration
	// Spool is the folder uploads are written to while they are checked
	// (default the system's temporary folder).
	Spool string
	// Tracer makes the server span of each request (default the otel
	// global): an upload's span is the root of its submission's trace.
	Tracer trace.TracerProvider
	// TLS says the API is served over TLS (it then sends HSTS).
	TLS bool
	// Now is the quotas' clock (default time.Now).
	Now func() time.Time
	// Log gets what is never shown to clients (default slog.Default()).
	Log *slog.Logger
	// Refusals counts refusals (nil: not counted).
	Refusals *Refusals
	// Index keeps the records in list order, for GET /v1/submissions to
	// read a page without reading the bucket (nil, or not ready yet: the
	// list reads every record, linear in the bucket). Its Run is the
	// caller's to start.
	Index *timeline.Index
	// IndexWait bounds how long a list waits for the index to hold the
	// writes the bucket had when the list was asked (default 2 s; then
	// the page is at most that stale).
	IndexWait time.Duration
}

func (o *Options) defaults() {
	if o.MaxUploadBytes <= 0 {
		o.MaxUploadBytes = 2 << 30
	}
	if o.UploadsPerParticipant <= 0 {
		o.UploadsPerParticipant = 2
	}
	if o.Uploads <= 0 {
		o.Uploads = 8
	}
	if o.LiveStreams <= 0 {
		o.LiveStreams = 256
	}
	if o.UploadMinRate <= 0 {
		o.UploadMinRate = 64 << 10
	}
	if o.UploadGrace <= 0 {
		o.UploadGrace = 10 * time.Second
	}
	if o.UploadIdle <= 0 {
		o.UploadIdle = 30 * time.Second
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 30 * time.Second
	}
	if o.Spool == "" {
		o.Spool = os.TempDir()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Tracer == nil {
		o.Tracer = otel.GetTracerProvider()
	}
	if o.IndexWait <= 0 {
		o.IndexWait = 2 * time.Second
	}
}

// API serves the gateway's HTTP API.
type API struct {
	o       Options
	pages   *pages.Renderer
	handler http.Handler
	slots   *slots
	uploads chan struct{}
	live    chan struct{}
}

// New returns the API:
//
//	GET  /healthz                 200 when a submission can be taken (the records bucket, the ARENA stream, the uploads object store)
//	GET  /                        the live page (and /ui/*)
//	GET  /submissions/{id}        a submission's page (HTML; /rounds/{id}, /leaderboard, /participants/{name} too)
//	GET  /v1/live                 records and round views as they change (Server-Sent Events; ?recent=N: the newest N records first, not all)
//	GET  /v1/submissions/{id}     a record
//	GET  /v1/submissions          records, newest first (?limit, ?participant)
//	POST /v1/submissions          submit a packed bundle (a participant's token)
//	GET  /v1/me                   the token's participant, quotas and usage
//	GET  /v1/rounds/{id}          a round's view
//	GET  /v1/rounds               round views, newest first (?limit)
//	GET  /v1/leaderboard          scores, best first (?campaign, ?policy)
//	GET  /v1/history              scores over time (?participant, ?campaign, ?model)
//	POST /v1/sql                  read-only SQL on the store, as arena sql (an operator's token; ?format=json|csv|tsv)
//	GET  /v1/pods                 the pods, their runners and GPU-hours, as arena pods --json (an operator's token)
//	GET  /schemas/...             the JSON Schemas events name in dataschema (public, read-only)
//
// Every answer about records follows participant.Viewer.CanRead: ranked
// records and rounds are public; a dev record is read by its participant
// and the operators only, and is answered 404 to everyone else, as if it
// did not exist. Errors are JSON: {"error": {"code", "message"}}.
func New(o Options) (*API, error) {
	if o.Records == nil || o.Registry == nil || o.Ledger == nil {
		return nil, errors.New("api: Records, Registry and Ledger are required")
	}
	if err := o.Defaults.Validate(true); err != nil {
		return nil, err
	}
	o.defaults()
	rd, err := pages.NewRenderer()
	if err != nil {
		return nil, err
	}
	a := &API{o: o, pages: rd, slots: newSlots(o.UploadsPerParticipant), uploads: make(chan struct{}, o.Uploads), live: make(chan struct{}, o.LiveStreams)}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) { serveAsset(w, "index.html") })
	mux.HandleFunc("GET /ui/{name}", func(w http.ResponseWriter, r *http.Request) {
		if !serveAsset(w, r.PathValue("name")) {
			a.refuse(w, r, http.StatusNotFound, reason.NotFound, "no such file")
		}
	})
	mux.HandleFunc("GET /submissions/{id}", a.submissionPage)
	mux.HandleFunc("GET /rounds/{id}", a.roundPage)
	mux.HandleFunc("GET /leaderboard", a.leaderboardPage)
	mux.HandleFunc("GET /participants/{name}", a.historyPage)
	for _, p := range []string{"/submissions/", "/rounds/", "/participants/"} {
		mux.HandleFunc("GET "+p, a.unknownPage)
	}
	mux.HandleFunc("GET /healthz", a.health)
	mux.HandleFunc("GET /v1/live", a.liveStream)
	mux.HandleFunc("GET /v1/submissions/{id}", a.getSubmission)
	mux.HandleFunc("GET /v1/submissions/{id}/patch", a.getPatch)
	mux.HandleFunc("GET /v1/submissions", a.listSubmissions)
	mux.HandleFunc("POST /v1/submissions", a.submit)
	mux.HandleFunc("GET /v1/me", a.me)
	mux.HandleFunc("GET /v1/rounds/{id}", a.getRound)
	mux.HandleFunc("GET /v1/rounds", a.listRounds)
	mux.HandleFunc("GET /v1/leaderboard", a.scores(leaderboard))
	mux.HandleFunc("GET /v1/history", a.scores(history))
	mux.HandleFunc("POST /v1/sql", a.sql)
	mux.HandleFunc("GET /v1/pods", a.pods)
	mux.Handle("GET "+schemas.PathPrefix, schemas.Handler())
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		a.refuse(w, r, http.StatusNotFound, reason.NotFound, "no endpoint answers this method and path; docs/participants/http-api.md lists them")
	})
	a.handler = a.traced(mux, a.harden(mux))
	return a, nil
}

// ServeHTTP serves a request.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.handler.ServeHTTP(w, r) }

// health answers 200 when the arena can take a submission: the records
// bucket answers, and the ARENA stream that submission.received goes to
// and the uploads object store that bundles go to exist. A gateway that
// does not provision (a cluster's, whose operator provisions beside it)
// starts once the ARENA stream is there, while the operator's
// provisioning may still be creating the object stores: until they
// exist it answers 503, so that a client that waits for /healthz never
// meets "bucket not found".
func (a *API) health(w http.ResponseWriter, r *http.Request) {
	if _, err := a.o.Records.Status(r.Context()); err != nil {
		a.unavailable(w, r, err)
		return
	}
	if a.o.Bus != nil {
		js := a.o.Bus.JetStream()
		missing := ""
		err := bus.CheckProvisioned(r.Context(), js)
		if errors.Is(err, bus.ErrNotProvisioned) {
			missing = "event stream " + events.StreamArena
		} else if err == nil {
			_, err = js.ObjectStore(r.Context(), bus.ObjectUploads)
			if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
				missing = "object store " + bus.ObjectUploads
			}
		}
		if missing != "" {
			a.o.Refusals.Add(r.Context(), reason.Unavailable)
			w.Header().Set("Retry-After", "1")
			writeError(w, http.StatusServiceUnavailable, errorBody{Code: reason.Unavailable,
				Message: "the arena cannot take a submission yet: its " + missing + " does not exist (its provisioning has not finished); try again in a moment"})
			return
		}
		if err != nil {
			a.unavailable(w, r, err)
			return
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("ok\n"))
}

// owner is what a record's visibility depends on.
type owner struct {
	Participant string `json:"participant"`
	Split       string `json:"split"`
}

// submissionEntry reads the record the path's {id} names, answering a
// bad id (400), a missing record (404 with code and notFound, the id
// appended) or a store that does not answer (503) itself; ok false then.
func (a *API) submissionEntry(w http.ResponseWriter, r *http.Request, code reason.Code, notFound func(id string) string) (string, jetstream.KeyValueEntry, bool) {
	id := r.PathValue("id")
	if !events.ValidID(id) {
		a.refuse(w, r, http.StatusBadRequest, reason.InvalidID, "a submission id is 1 to 128 letters, digits, '-' or '_'")
		return "", nil, false
	}
	e, err := a.o.Records.Get(r.Context(), id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		a.refuse(w, r, http.StatusNotFound, code, notFound(id))
		return "", nil, false
	}
	if err != nil {
		a.unavailable(w, r, err)
		return "", nil, false
	}
	return id, e, true
}

func (a *API) getSubmission(w http.ResponseWriter, r *http.Request) {
	v, ok := a.viewer(w, r)
	if !ok {
		return
	}
	msg := func(id string) string { return "the arena has no submission " + id + " that this token may read" }
	id, e, ok := a.submissionEntry(w, r, reason.SubmissionNotFound, msg)
	if !ok {
		return
	}
	notFound := msg(id)
	var o owner
	if json.Unmarshal(e.Value(), &o) != nil || !v.CanRead(o.Participant, o.Split) {
		// The same answer as a submission that does not exist, so that
		// another participant's ids are not confirmed; the metric tells
		// the operators which it was.
		a.o.Refusals.Add(r.Context(), reason.RecordHidden)
		writeError(w, http.StatusNotFound, errorBody{Code: reason.SubmissionNotFound, Message: notFound})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(e.Value())
}

func (a *API) listSubmissions(w http.ResponseWriter, r *http.Request) {
	v, ok := a.viewer(w, r)
	if !ok {
		return
	}
	limit, ok := a.limit(w, r)
	if !ok {
		return
	}
	out, err := a.newest(r.Context(), timeline.Filter{Viewer: v, Participant: r.URL.Query().Get("participant")}, limit)
	if err != nil {
		a.unavailable(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"submissions": out})
}

// newest is the newest limit records f keeps: through the index when there
// is one and it is ready, else by scanning the bucket.
func (a *API) newest(ctx context.Context, f timeline.Filter, limit int) ([]record.Submission, error) {
	if a.o.Index != nil {
		out, err := a.pageFromIndex(ctx, f, limit)
		if !errors.Is(err, timeline.ErrNotReady) {
			return out, err
		}
	}
	return scanPage(ctx, a.o.Records, f, limit)
}

// pageFromIndex is a page of the list read through the index: the ids of
// the page, newest first, then those records from the bucket, limit at
// a time at most (O(limit + log n) in the bucket's n records). A record
// deleted, or become unreadable, between the two is left out and the
// next one taken, so the page is the linear scan's page of the same
// moment.
func (a *API) pageFromIndex(ctx context.Context, f timeline.Filter, limit int) ([]record.Submission, error) {
	if err := a.o.Index.Sync(ctx, a.o.IndexWait); err != nil {
		return nil, err
	}
	out := []record.Submission{}
	skip := 0
	for len(out) < limit {
		need := limit - len(out)
		var ids []string
		n := 0
		err := a.o.Index.Walk(f, func(h timeline.Head) bool {
			if n++; n > skip {
				ids = append(ids, h.ID)
			}
			return len(ids) < need
		})
		if err != nil {
			return nil, err
		}
		skip += len(ids)
		recs, err := getRecords(ctx, a.o.Records, ids)
		if err != nil {
			return nil, err
		}
		for _, s := range recs {
			if s != nil && f.Match(timeline.Head{ID: s.ID, CreatedAt: s.CreatedAt, Participant: s.Participant, Split: s.Split}) {
				out = append(out, *s)
			}
		}
		if len(ids) < need {
			break // the index has no more
		}
	}
	return out, nil
}

// getRecords reads ids from kv, recordGets at once; a key that is gone
// or a value that does not decode is nil.
func getRecords(ctx context.Context, kv jetstream.KeyValue, ids []string) ([]*record.Submission, error) {
	out := make([]*record.Submission, len(ids))
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	slots := make(chan struct{}, recordGets)
	for i, id := range ids {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			e, err := kv.Get(ctx, id)
			switch {
			case errors.Is(err, jetstream.ErrKeyNotFound):
			case err != nil:
				errs[i] = err
			default:
				var s record.Submission
				if json.Unmarshal(e.Value(), &s) == nil {
					out[i] = &s
				}
			}
		}()
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// recordGets is how many records a page reads at once: each is a round
// trip to NATS.
const recordGets = 16

// scanPage is a page of the list read from every record of kv, linear
// in the bucket: the list before the index, and while the index is not
// ready. Every record is read for the fields that choose and order the
// page, and only the page's records are decoded whole.
func scanPage(ctx context.Context, kv jetstream.KeyValue, f timeline.Filter, limit int) ([]record.Submission, error) {
	raws, err := listRaw(ctx, kv)
	if err != nil {
		return nil, err
	}
	type head struct {
		timeline.Head
		raw []byte
	}
	heads := make([]head, 0, len(raws))
	for _, raw := range raws {
		h := head{raw: raw}
		if json.Unmarshal(raw, &h.Head) == nil && f.Match(h.Head) {
			heads = append(heads, h)
		}
	}
	sort.Slice(heads, func(i, j int) bool { return heads[i].Newer(heads[j].Head) })
	out := []record.Submission{}
	for _, h := range heads {
		if len(out) == limit {
			break
		}
		var s record.Submission
		if json.Unmarshal(h.raw, &s) == nil {
			out = append(out, s)
		}
	}
	return out, nil
}

// me answers who the token is, its quotas and what counts against them.
func (a *API) me(w http.ResponseWriter, r *http.Request) {
	v, ok := a.viewer(w, r)
	if !ok {
		return
	}
	if v.Kind == "" {
		a.refuse(w, r, http.StatusUnauthorized, reason.TokenMissing, "this asks who the token is: send Authorization: Bearer <token>")
		return
	}
	out := map[string]any{"kind": v.Kind, "name": v.Name}
	if v.Kind == participant.KindParticipant {
		p, err := a.o.Registry.Get(r.Context(), v.Name)
		if err != nil {
			a.unavailable(w, r, err)
			return
		}
		lim := p.Limits.Or(a.o.Defaults)
		lim.BytesPerSubmission = min(lim.BytesPerSubmission, a.o.MaxUploadBytes)
		u, err := a.o.Ledger.Get(r.Context(), v.Name)
		if err != nil {
			a.unavailable(w, r, err)
			return
		}
		now := a.o.Now()
		out["limits"] = lim
		use := map[string]any{"submissions_last_day": u.SubmissionsAt(now), "gpu_hours_last_week": u.GPUHoursAt(now)}
		if q := u.Check(v.Name, lim, now); q != nil {
			use["next_submission_at"] = q.RetryAt.UTC()
			use["refused"] = string(q.Code) + ": " + q.Message
		}
		out["usage"] = use
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *API) getRound(w http.ResponseWriter, r *http.Request) {
	if _, ok := a.viewer(w, r); !ok {
		return
	}
	id := r.PathValue("id")
	if !events.ValidID(id) {
		a.refuse(w, r, http.StatusBadRequest, reason.InvalidID, "a round id is 1 to 128 letters, digits, '-' or '_'")
		return
	}
	if a.o.Views == nil {
		a.refuse(w, r, http.StatusNotFound, reason.RoundNotFound, "the arena has no round "+id)
		return
	}
	e, err := a.o.Views.Get(r.Context(), id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		a.refuse(w, r, http.StatusNotFound, reason.RoundNotFound, "the arena has no round "+id)
		return
	}
	if err != nil {
		a.unavailable(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(e.Value())
}

func (a *API) listRounds(w http.ResponseWriter, r *http.Request) {
	if _, ok := a.viewer(w, r); !ok {
		return
	}
	limit, ok := a.limit(w, r)
	if !ok {
		return
	}
	out := []rounds.View{}
	if a.o.Views != nil {
		var err error
		if out, err = list[rounds.View](r.Context(), a.o.Views); err != nil {
			a.unavailable(w, r, err)
			return
		}
	}
	// Newest first; a view whose round.started has not come yet (no
	// start time) last, by id.
	sort.Slice(out, func(i, j int) bool {
		x, y := out[i].StartedAt, out[j].StartedAt
		switch {
		case x != nil && y != nil && !x.Equal(*y):
			return x.After(*y)
		case (x == nil) != (y == nil):
			return x != nil
		}
		return out[i].RoundID < out[j].RoundID
	})
	if len(out) > limit {
		out = out[:limit]
	}
	writeJSON(w, http.StatusOK, map[string]any{"rounds": out})
}

// limit reads ?limit= (default 50, 1 to 1000), answering 400 itself when
// it is bad.
func (a *API) limit(w http.ResponseWriter, r *http.Request) (int, bool) {
	limit := 50
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 1000 {
			a.refuse(w, r, http.StatusBadRequest, reason.InvalidQuery, "limit is a number from 1 to 1000")
			return 0, false
		}
		limit = n
	}
	return limit, true
}

// list reads every value of kv as a T; a deleted key or a value that does
// not decode is left out.
//
// The values come in one pass of a watcher (an ordered consumer that
// streams the bucket's latest value of every key, then says it is done),
// not one request per key: at 10,000 records that is the difference
// between one stream and 10,000 round trips
// (BenchmarkListSubmissionsScale). It uses the same JetStream API
// subjects as ListKeys, which is a watcher too. A request that ends
// meanwhile gets its context's error, not a partial list.
func list[T any](ctx context.Context, kv jetstream.KeyValue) ([]T, error) {
	raws, err := listRaw(ctx, kv)
	if err != nil {
		return nil, err
	}
	out := []T{}
	for _, raw := range raws {
		var v T
		if json.Unmarshal(raw, &v) == nil {
			out = append(out, v)
		}
	}
	return out, nil
}

// listRaw is list's pass over the bucket: every key's latest value, as
// stored.
func listRaw(ctx context.Context, kv jetstream.KeyValue) ([][]byte, error) {
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, err
	}
	defer func() { _ = w.Stop() }()
	out := [][]byte{}
	for {
		select {
		case e := <-w.Updates():
			if e == nil {
				return out, nil
			}
			out = append(out, e.Value())
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
