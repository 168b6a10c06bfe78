package api

import (
	"context"
	"net/http"
	"time"

	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/ctl"
)

// podsWait is how long GET /v1/pods waits for a query service to answer
// before it answers without GPU-hours.
const podsWait = 2 * time.Second

// pods answers GET /v1/pods: the arena's pods as `arena pods --json`
// prints them (ctl.PodsView). For operators: a runner's entry names the
// job it runs, whose submission may be a participant's dev submission.
func (a *API) pods(w http.ResponseWriter, r *http.Request) {
	v, ok := a.viewer(w, r)
	if !ok {
		return
	}
	switch {
	case v.Kind == "":
		a.refuse(w, r, http.StatusUnauthorized, reason.TokenMissing,
			"the pods take an operator's token: send Authorization: Bearer <token>")
		return
	case !v.Operator():
		a.refuse(w, r, http.StatusForbidden, reason.TokenNotOperator,
			"the pods are for operators: their runners name the submissions they run, a participant's dev ones included")
		return
	}
	if a.o.NC == nil || a.o.Bus == nil {
		a.refuse(w, r, http.StatusServiceUnavailable, reason.QueryUnavailable, "this gateway does not reach the arena's NATS")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	view, err := ctl.Pods(ctx, a.o.Bus.JetStream(), a.o.NC, podsWait, time.Now())
	if err != nil {
		a.unavailable(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, view)
}
