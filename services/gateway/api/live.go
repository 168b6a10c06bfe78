package api

import (
	"embed"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
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

// liveStream streams every change of the records the viewer may read
// (event "record") and of the round views (event "round") as Server-Sent
// Events, starting with their current values, until the client goes
// away. A record the viewer may not read is never sent, not even its id.
// The web page at / draws them.
func (a *API) liveStream(w http.ResponseWriter, r *http.Request) {
	v, ok := a.viewer(w, r)
	if !ok {
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
		a.refuse(w, r, http.StatusServiceUnavailable, CodeGatewayBusy, "the gateway serves as many live streams as it can; try again shortly")
		return
	}
	ctx := r.Context()
	type update struct {
		kind string
		data []byte
	}
	ch := make(chan update, 64)
	watch := func(b jetstream.KeyValue, kind string, visible func([]byte) bool) error {
		wt, err := b.WatchAll(ctx)
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
		return json.Unmarshal(b, &o) == nil && v.CanRead(o.Participant, o.Split)
	}
	if err := watch(a.o.Records, "record", readable); err != nil {
		a.unavailable(w, r, err)
		return
	}
	if a.o.Views != nil {
		if err := watch(a.o.Views, "round", func([]byte) bool { return true }); err != nil {
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
