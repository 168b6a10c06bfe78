package api

import (
	_ "embed"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

//go:embed ui/index.html
var indexHTML []byte

// live streams every change of the records (event "record") and of the
// round views (event "round", every key of round_views) as Server-Sent
// Events, starting with their current values, until the client goes
// away. The web page at / draws them.
func live(kv, views jetstream.KeyValue) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		fl, ok := w.(http.Flusher)
		if !ok {
			writeError(w, http.StatusInternalServerError, "no_streaming", "this server cannot stream")
			return
		}
		ctx := r.Context()
		type update struct {
			kind string
			data []byte
		}
		ch := make(chan update, 64)
		watch := func(b jetstream.KeyValue, kind string) error {
			wt, err := b.WatchAll(ctx)
			if err != nil {
				return err
			}
			go func() {
				defer func() { _ = wt.Stop() }()
				for e := range wt.Updates() {
					if e == nil || e.Operation() != jetstream.KeyValuePut {
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
		if err := watch(kv, "record"); err != nil {
			writeError(w, http.StatusServiceUnavailable, "nats_unavailable", err.Error())
			return
		}
		if views != nil {
			if err := watch(views, "round"); err != nil {
				writeError(w, http.StatusServiceUnavailable, "nats_unavailable", err.Error())
				return
			}
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		w.WriteHeader(http.StatusOK)
		fl.Flush()
		ping := time.NewTicker(15 * time.Second)
		defer ping.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-ping.C:
				fmt.Fprint(w, ": ping\n\n")
				fl.Flush()
			case u := <-ch:
				// One line of JSON per event: the values hold no newline
				// (they are compact JSON), but guard anyway.
				data := strings.ReplaceAll(string(u.data), "\n", " ")
				fmt.Fprintf(w, "event: %s\ndata: %s\n\n", u.kind, data)
				fl.Flush()
			}
		}
	}
}
