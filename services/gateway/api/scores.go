package api

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/lowbarena/lowbarena/domain/participant"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/ctl"
)

type scoreQuery int

const (
	leaderboard scoreQuery = iota
	history
)

// errScoresUnreachable says this gateway has no connection to the score
// service (it was started without NATS).
var errScoresUnreachable = errors.New("this gateway does not reach the score service")

// readableScores asks the score service for the rows of subject
// (leaderboard or history) and keeps those the viewer may read: the
// ranked split's to everyone, a participant's dev rows to it and the
// operators. Its errors are errScoresUnreachable and ctl.CallRows's
// (ctl.ErrNoService, a *ctl.Error); the JSON API and the pages each answer
// them in their own form.
func (a *API) readableScores(ctx context.Context, v participant.Viewer, subject string, q ctl.Query) ([]ctl.Row, error) {
	if a.o.NC == nil {
		return nil, errScoresUnreachable
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	// In chunks: a leaderboard past one message's max_payload (about
	// 8,000 rows under `arena up`) answers too.
	all, err := ctl.CallRows(ctx, a.o.NC, subject, q)
	if err != nil {
		return nil, err
	}
	rows := []ctl.Row{}
	for _, row := range all {
		if v.CanRead(row.Participant, row.Split) {
			rows = append(rows, row)
		}
	}
	return rows, nil
}

// scores answers the leaderboard or the history in JSON, the rows the
// viewer may read.
func (a *API) scores(kind scoreQuery) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		v, ok := a.viewer(w, r)
		if !ok {
			return
		}
		q := r.URL.Query()
		query := ctl.Query{Policy: q.Get("policy"), Campaign: q.Get("campaign"), Participant: q.Get("participant"), Model: q.Get("model")}
		subject := ctl.SubjectLeaderboard
		if kind == history {
			subject = ctl.SubjectHistory
		}
		rows, err := a.readableScores(r.Context(), v, subject, query)
		var ce *ctl.Error
		switch {
		case errors.Is(err, errScoresUnreachable):
			a.refuse(w, r, http.StatusServiceUnavailable, reason.ScoresUnavailable, err.Error())
			return
		case errors.Is(err, ctl.ErrNoService):
			a.refuse(w, r, http.StatusServiceUnavailable, reason.ScoresUnavailable, "no score service answers; try again when the arena's score stage is up")
			return
		case errors.As(err, &ce) && ce.Code == ctl.CodeBadRequest:
			a.refuse(w, r, http.StatusBadRequest, reason.InvalidQuery, ce.Message)
			return
		case err != nil:
			a.unavailable(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"rows": rows})
	}
}
