package api

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/lowbarena/lowbarena/events/ctl"
)

type scoreQuery int

const (
	leaderboard scoreQuery = iota
	history
)

// scores asks the score service for the leaderboard or the history and
// answers the rows the viewer may read: the ranked split's to everyone,
// a participant's dev rows to it and the operators.
func (a *API) scores(kind scoreQuery) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		v, ok := a.viewer(w, r)
		if !ok {
			return
		}
		if a.o.NC == nil {
			a.refuse(w, r, http.StatusServiceUnavailable, CodeScoresUnavailable, "this gateway does not reach the score service")
			return
		}
		q := r.URL.Query()
		query := ctl.Query{Policy: q.Get("policy"), Campaign: q.Get("campaign"), Participant: q.Get("participant"), Model: q.Get("model")}
		subject := ctl.SubjectLeaderboard
		if kind == history {
			subject = ctl.SubjectHistory
		}
		ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
		defer cancel()
		rep, err := ctl.Call[ctl.Rows](ctx, a.o.NC, subject, query)
		var ce *ctl.Error
		switch {
		case errors.Is(err, ctl.ErrNoService):
			a.refuse(w, r, http.StatusServiceUnavailable, CodeScoresUnavailable, "no score service answers; try again when the arena's score stage is up")
			return
		case errors.As(err, &ce) && ce.Code == ctl.CodeBadRequest:
			a.refuse(w, r, http.StatusBadRequest, CodeInvalidQuery, ce.Message)
			return
		case err != nil:
			a.unavailable(w, r, err)
			return
		}
		rows := []ctl.Row{}
		for _, row := range rep.Rows {
			if v.CanRead(row.Participant, row.Split) {
				rows = append(rows, row)
			}
		}
		writeJSON(w, http.StatusOK, map[string]any{"rows": rows})
	}
}
