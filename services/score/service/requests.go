package service

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/services/domain/policy"
)

// Request subjects (core NATS request-reply, outside every stream): the
// CLI asks, the score service answers from the store.
const (
	SubjectRescore     = "lowbarena.ctl.rescore"
	SubjectLeaderboard = "lowbarena.ctl.leaderboard"
	SubjectHistory     = "lowbarena.ctl.history"
)

// Query is a CLI request.
type Query struct {
	Policy      string    `json:"policy,omitempty"`
	Since       time.Time `json:"since,omitempty"`
	Campaign    string    `json:"campaign,omitempty"`
	Participant string    `json:"participant,omitempty"`
	Model       string    `json:"model,omitempty"`
}

// Row is one score as the CLI shows it.
type Row struct {
	TsMs         uint64  `ch:"ts_ms" json:"ts_ms"`
	SubmissionID string  `ch:"submission_id" json:"submission_id"`
	Policy       string  `ch:"policy" json:"policy"`
	Campaign     string  `ch:"campaign" json:"campaign"`
	Participant  string  `ch:"participant" json:"participant"`
	Method       string  `ch:"method" json:"method"`
	Split        string  `ch:"split" json:"split"`
	Score        float64 `ch:"score" json:"score"`
	Gain         float64 `ch:"efficiency_gain" json:"efficiency_gain"`
	Drift        float64 `ch:"drift" json:"drift"`
	Qualified    uint8   `ch:"qualified" json:"qualified"`
	Ranked       uint8   `ch:"ranked" json:"ranked"`
	Reason       string  `ch:"reason" json:"reason"`
}

// Reply is the answer to a Query: rows, or an error with its sentence.
type Reply struct {
	Rows  []Row  `json:"rows"`
	Error string `json:"error,omitempty"`
}

// The SQL the CLI's questions run; the README shows the same.
const (
	leaderboardSQL = `SELECT ts_ms, submission_id, policy, campaign, participant, method, split, score, efficiency_gain, drift, qualified, ranked, reason
FROM scores FINAL WHERE policy = ? AND (campaign = ? OR ? = '') ORDER BY qualified DESC, score DESC, ts_ms`
	historySQL = `SELECT ts_ms, submission_id, policy, campaign, participant, method, split, score, efficiency_gain, drift, qualified, ranked, reason
FROM scores FINAL WHERE (participant = ? OR ? = '') AND (campaign = ? OR ? = '') AND (method = ? OR ? = '') ORDER BY ts_ms, policy`
)

func (s *Service) serveRequests(ctx context.Context) error {
	nc := s.bus.Conn()
	handle := func(subject string, fn func(context.Context, Query) ([]Row, error)) (*nats.Subscription, error) {
		return nc.QueueSubscribe(subject, Name, func(m *nats.Msg) {
			var q Query
			var rep Reply
			if err := json.Unmarshal(m.Data, &q); err != nil {
				rep.Error = "the request is not a query: " + err.Error()
			} else {
				rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
				rows, err := fn(rctx, q)
				cancel()
				if err != nil {
					rep.Error = err.Error()
				}
				rep.Rows = rows
			}
			if rep.Rows == nil {
				rep.Rows = []Row{}
			}
			body, _ := json.Marshal(rep)
			_ = m.Respond(body)
		})
	}
	var subs []*nats.Subscription
	for subject, fn := range map[string]func(context.Context, Query) ([]Row, error){
		SubjectRescore: s.rescore, SubjectLeaderboard: s.leaderboard, SubjectHistory: s.history,
	} {
		sub, err := handle(subject, fn)
		if err != nil {
			return fmt.Errorf("score: subscribe %s: %w", subject, err)
		}
		subs = append(subs, sub)
	}
	<-ctx.Done()
	for _, sub := range subs {
		_ = sub.Drain()
	}
	return nil
}

func (s *Service) leaderboard(ctx context.Context, q Query) ([]Row, error) {
	p := q.Policy
	if p == "" {
		p = s.policy.Version
	}
	var rows []Row
	err := s.opts.Store.Select(ctx, &rows, leaderboardSQL, p, q.Campaign, q.Campaign)
	return rows, err
}

func (s *Service) history(ctx context.Context, q Query) ([]Row, error) {
	var rows []Row
	err := s.opts.Store.Select(ctx, &rows, historySQL, q.Participant, q.Participant, q.Campaign, q.Campaign, q.Model, q.Model)
	return rows, err
}

type stageRow struct {
	SubmissionID string `ch:"submission_id"`
	Stage        string `ch:"stage"`
	Payload      string `ch:"payload"`
	TsMs         uint64 `ch:"ts_ms"`
}

// rescore recomputes every score whose inputs finished since q.Since,
// under q.Policy, from the stage outcomes the store keeps (no GPU work),
// writes the new rows (the old ones, under other policies, stay) and
// publishes the new score events.
func (s *Service) rescore(ctx context.Context, q Query) ([]Row, error) {
	p, err := policy.Load(q.Policy)
	if err != nil {
		return nil, err
	}
	var rows []stageRow
	if err := s.opts.Store.Select(ctx, &rows, `SELECT submission_id, stage, payload, ts_ms FROM stage_results FINAL
WHERE status = 'done' AND stage IN ('contract', 'quality', 'efficiency') ORDER BY submission_id, ts_ms`); err != nil {
		return nil, err
	}
	since := uint64(q.Since.UnixMilli())
	if q.Since.IsZero() {
		since = 0
	}
	byID := map[string]*joined{}
	latest := map[string]uint64{}
	var order []string
	for _, r := range rows {
		j := byID[r.SubmissionID]
		if j == nil {
			j = &joined{}
			byID[r.SubmissionID] = j
			order = append(order, r.SubmissionID)
		}
		latest[r.SubmissionID] = max(latest[r.SubmissionID], r.TsMs)
		var err error
		switch r.Stage {
		case "contract":
			j.Contract = new(events.ContractCompletedData)
			err = json.Unmarshal([]byte(r.Payload), j.Contract)
		case "quality":
			j.Quality = new(events.QualityCompletedData)
			err = json.Unmarshal([]byte(r.Payload), j.Quality)
		case "efficiency":
			j.Efficiency = new(events.EfficiencyCompletedData)
			err = json.Unmarshal([]byte(r.Payload), j.Efficiency)
		}
		if err != nil {
			return nil, fmt.Errorf("score: stored %s outcome of %s: %w", r.Stage, r.SubmissionID, err)
		}
	}
	var out []Row
	for _, id := range order {
		j := byID[id]
		if !j.complete() || latest[id] < since {
			continue
		}
		if err := s.score(ctx, id, *j, p); err != nil {
			return out, fmt.Errorf("score: rescore %s did not finish (%w); run it again", id, err)
		}
	}
	var stored []Row
	if err := s.opts.Store.Select(ctx, &stored, leaderboardSQL, p.Version, "", ""); err != nil {
		return nil, err
	}
	for _, r := range stored {
		if _, ok := byID[r.SubmissionID]; ok && latest[r.SubmissionID] >= since {
			out = append(out, r)
		}
	}
	return out, nil
}
