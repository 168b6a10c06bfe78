package api

import (
	"embed"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/services/gateway/timeline"
)

//go:embed ui
var ui embed.FS

// serveAsset writes the page's file name (index.html, app.js, app.css);
// it reports false for a file the page does not have.
func serveAsset(w http.ResponseWriter, name string) bool {
	if strings.Contains(name, "/") {
		return false
	}
	b, err := ui.ReadFile("ui/" + name)
	if err != nil {
		return false
	}
	ct := mime.TypeByExtension(path.Ext(name))
	if ct == "" {
		ct = "application/octet-stream"
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(b)
	return true
}

// liveFilter is what a live stream follows: ?submission=ID (that
// record only), ?round=ID (that round only), ?participant=NAME (that
// participant's records), ?only=records or rounds; nothing: every record
// the viewer may read and every round. ?recent=N (1 to 1000) starts the
// records with the newest N only (the live page asks for its first
// paint: every record would be the whole bucket), then every change.
type liveFilter struct {
	submission, round, participant string
	records, rounds                bool
	// recent, when not 0, starts the records with the newest recent the
	// viewer may read (as GET /v1/submissions?limit= lists them, through
	// the index) instead of every record, then carries every change.
	recent int
}

// parseLive reads the filter, or says what is wrong with it.
func parseLive(r *http.Request) (liveFilter, string) {
	q := r.URL.Query()
	f := liveFilter{submission: q.Get("submission"), round: q.Get("round"), participant: q.Get("participant"), records: true, rounds: true}
	for name, v := range map[string]string{"submission": f.submission, "round": f.round, "participant": f.participant} {
		if v != "" && !events.ValidID(v) {
			return f, name + " is 1 to 128 letters, digits, '-' or '_'"
		}
	}
	if r := q.Get("recent"); r != "" {
		n, err := strconv.Atoi(r)
		if err != nil || n < 1 || n > 1000 {
			return f, "recent is a number from 1 to 1000"
		}
		f.recent = n
	}
	switch q.Get("only") {
	case "":
	case "records":
		f.rounds = false
	case "rounds":
		f.records = false
	default:
		return f, "only is records or rounds"
	}
	switch {
	case f.submission != "":
		f.rounds = false
	case f.round != "":
		f.records = false
	case f.participant != "":
		f.rounds = false
	}
	return f, ""
}

// liveStream streams every change of the records the viewer may read
// (event "record") and of the round views (event "round") as Server-Sent
// Events, starting with their current values, until the client goes
// away; a filter narrows it to one record, one round or one
// participant's records (the pages follow what they show). A record the
// viewer may not read is never sent, not even its id. The web page at /
// draws them.
func (a *API) liveStream(w http.ResponseWriter, r *http.Request) { //nolint:gocyclo // one Server-Sent Events loop: admission, filters and each kind of event it forwards, kept in one place
	v, ok := a.viewer(w, r)
	if !ok {
		return
	}
	f, bad := parseLive(r)
	if bad != "" {
		a.refuse(w, r, http.StatusBadRequest, reason.InvalidQuery, bad)
		return
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		a.fail(w, r, fmt.Errorf("api: the response writer cannot flush"))
		return
	}
	select {
	case a.live <- struct{}{}:
		defer func() { <-a.live }()
	default:
		w.Header().Set("Retry-After", "30")
		a.refuse(w, r, http.StatusServiceUnavailable, reason.GatewayBusy, "the gateway serves as many live streams as it can; try again shortly")
		return
	}
	ctx := r.Context()
	type update struct {
		kind string
		data []byte
	}
	ch := make(chan update, 64)
	watch := func(b jetstream.KeyValue, key, kind string, visible func([]byte) bool, opts ...jetstream.WatchOpt) error {
		var wt jetstream.KeyWatcher
		var err error
		if key == "" {
			wt, err = b.WatchAll(ctx, opts...)
		} else {
			wt, err = b.Watch(ctx, key, opts...)
		}
		if err != nil {
			return err
		}
		go func() {
			defer func() { _ = wt.Stop() }()
			for e := range wt.Updates() {
				if e == nil || e.Operation() != jetstream.KeyValuePut || !visible(e.Value()) {
					continue
				}
				select {
				case ch <- update{kind, e.Value()}:
				case <-ctx.Done():
					return
				}
			}
		}()
		return nil
	}
	readable := func(b []byte) bool {
		var o owner
		return json.Unmarshal(b, &o) == nil && v.CanRead(o.Participant, o.Split) && (f.participant == "" || o.Participant == f.participant)
	}
	// first are the records sent before the changes: with recent, the
	// newest the viewer may read. The watcher of changes starts before
	// they are read, so no change between the two is lost (one may come
	// twice: a later value of the same record, which the page keeps).
	var first []record.Submission
	if f.records && f.recent > 0 && f.submission == "" {
		if err := watch(a.o.Records, "", "record", readable, jetstream.UpdatesOnly()); err != nil {
			a.unavailable(w, r, err)
			return
		}
		var err error
		first, err = a.newest(ctx, timeline.Filter{Viewer: v, Participant: f.participant}, f.recent)
		if err != nil {
			a.unavailable(w, r, err)
			return
		}
	} else if f.records {
		if err := watch(a.o.Records, f.submission, "record", readable); err != nil {
			a.unavailable(w, r, err)
			return
		}
	}
	if a.o.Views != nil && f.rounds {
		if err := watch(a.o.Views, f.round, "round", func([]byte) bool { return true }); err != nil {
			a.unavailable(w, r, err)
			return
		}
	}
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	fl.Flush()
	ping := time.NewTicker(15 * time.Second)
	defer ping.Stop()
	// The newest last, as a page that draws them as they come would
	// have them in time.
	for i := len(first) - 1; i >= 0; i-- {
		body, err := json.Marshal(first[i])
		if err != nil {
			continue
		}
		_ = rc.SetWriteDeadline(time.Now().Add(a.o.WriteTimeout))
		if _, err := fmt.Fprintf(w, "event: record\ndata: %s\n\n", body); err != nil {
			return
		}
	}
	if len(first) > 0 {
		fl.Flush()
	}
	for {
		var out string
		select {
		case <-ctx.Done():
			return
		case <-ping.C:
			out = ": ping\n\n"
		case u := <-ch:
			// One line of JSON per event: the values hold no newline
			// (they are compact JSON), but guard anyway.
			out = fmt.Sprintf("event: %s\ndata: %s\n\n", u.kind, strings.ReplaceAll(string(u.data), "\n", " "))
		}
		// A viewer that stops reading is cut off after WriteTimeout.
		_ = rc.SetWriteDeadline(time.Now().Add(a.o.WriteTimeout))
		if _, err := fmt.Fprint(w, out); err != nil {
			return
		}
		fl.Flush()
	}
}
