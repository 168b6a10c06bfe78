package score

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/lowbarena/lowbarena/domain/policy"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/ctl"
)

// requestTimeout bounds one request; a rescore reads every stored outcome.
const requestTimeout = 2 * time.Minute

// The SQL the CLI's questions run; docs/operators/sql.md shows the same.
const (
	leaderboardSQL = `SELECT ts_ms, submission_id, policy, campaign, participant, method, split, score, efficiency_gain, drift, qualified, ranked, reason
FROM scores FINAL WHERE policy = ? AND (campaign = ? OR ? = '') ORDER BY qualified DESC, score DESC, ts_ms`
	historySQL = `SELECT ts_ms, submission_id, policy, campaign, participant, method, split, score, efficiency_gain, drift, qualified, ranked, reason
FROM scores FINAL WHERE (participant = ? OR ? = '') AND (campaign = ? OR ? = '') AND (method = ? OR ? = '') ORDER BY ts_ms, policy`
)

// serveRequests runs the score's micro service until ctx ends, then stops
// it (its endpoints leave their queue group; a request in hand finishes).
func (s *Service) serveRequests(ctx context.Context) error {
	svc, err := micro.AddService(s.bus.Conn(), micro.Config{Name: ctl.ServiceScore, Version: "1.0.0",
		Description: "the arena's scores: leaderboard, history, rescore, and a submission's standing"})
	if err != nil {
		return fmt.Errorf("score: micro service: %w", err)
	}
	defer func() { _ = svc.Stop() }()
	err = errors.Join(
		// Rows past one message's max_payload go in chunks when asked
		// (ctl.RowsEndpoint): `arena leaderboard` of 100,000 scores.
		ctl.RowsEndpoint(ctx, svc, s.bus.Conn(), "leaderboard", ctl.SubjectLeaderboard, requestTimeout, s.opts.ReplyChunkBytes, s.leaderboard),
		ctl.RowsEndpoint(ctx, svc, s.bus.Conn(), "history", ctl.SubjectHistory, requestTimeout, s.opts.ReplyChunkBytes, s.history),
		ctl.RowsEndpoint(ctx, svc, s.bus.Conn(), "rescore", ctl.SubjectRescore, requestTimeout, s.opts.ReplyChunkBytes, s.rescore),
		ctl.Endpoint(ctx, svc, "standing", ctl.SubjectStanding, requestTimeout, s.standing),
	)
	if err != nil {
		return fmt.Errorf("score: %w", err)
	}
	<-ctx.Done()
	return nil
}

func (s *Service) leaderboard(ctx context.Context, q ctl.Query) ([]ctl.Row, error) {
	p := q.Policy
	if p == "" {
		p = s.policy.Version
	}
	var out []ctl.Row
	if err := s.opts.Store.Select(ctx, &out, leaderboardSQL, p, q.Campaign, q.Campaign); err != nil {
		return nil, fmt.Errorf("score: leaderboard: %w", err)
	}
	return out, nil
}

func (s *Service) history(ctx context.Context, q ctl.Query) ([]ctl.Row, error) {
	var out []ctl.Row
	if err := s.opts.Store.Select(ctx, &out, historySQL, q.Participant, q.Participant, q.Campaign, q.Campaign, q.Model, q.Model); err != nil {
		return nil, fmt.Errorf("score: history: %w", err)
	}
	return out, nil
}

type stageRow struct {
	SubmissionID string `ch:"submission_id"`
	Stage        string `ch:"stage"`
	Payload      string `ch:"payload"`
	TsMs         uint64 `ch:"ts_ms"`
}

// rescore recomputes every score whose inputs finished since q.Since,
// under q.Policy, from the stage outcomes the store keeps (no GPU work)
// and each submission's submission.received (from its join, else the
// ARENA stream), writes the new rows (the old ones, under other
// policies, stay) and publishes the new score events. An unknown policy
// is a 400.
func (s *Service) rescore(ctx context.Context, q ctl.Query) ([]ctl.Row, error) {
	p, err := policy.Load(q.Policy)
	if errors.Is(err, policy.ErrUnknown) {
		return nil, ctl.Refuse(ctl.CodeBadRequest, "%s", err.Error())
	} else if err != nil {
		return nil, err
	}
	var srs []stageRow
	if err := s.opts.Store.Select(ctx, &srs, `SELECT submission_id, stage, payload, ts_ms FROM stage_results FINAL
WHERE status = 'done' AND stage IN ('contract', 'quality', 'efficiency') ORDER BY submission_id, ts_ms`); err != nil {
		return nil, fmt.Errorf("score: rescore: %w", err)
	}
	since := uint64(q.Since.UnixMilli())
	if q.Since.IsZero() {
		since = 0
	}
	byID := map[string]*joined{}
	latest := map[string]uint64{}
	var order []string
	for _, r := range srs {
		j := byID[r.SubmissionID]
		if j == nil {
			j = &joined{}
			byID[r.SubmissionID] = j
			order = append(order, r.SubmissionID)
		}
		latest[r.SubmissionID] = max(latest[r.SubmissionID], r.TsMs)
		var err error
		switch r.Stage {
		case events.Contract.Name:
			j.Contract = new(events.ContractCompletedData)
			err = json.Unmarshal([]byte(r.Payload), j.Contract)
		case events.Quality.Name:
			j.Quality = new(events.QualityCompletedData)
			err = json.Unmarshal([]byte(r.Payload), j.Quality)
		case events.Efficiency.Name:
			j.Efficiency = new(events.EfficiencyCompletedData)
			err = json.Unmarshal([]byte(r.Payload), j.Efficiency)
		}
		if err != nil {
			return nil, fmt.Errorf("score: stored %s outcome of %s: %w", r.Stage, r.SubmissionID, err)
		}
	}
	for _, id := range order {
		j := byID[id]
		if !j.complete() || latest[id] < since {
			continue
		}
		if err := s.submissionOf(ctx, id, j); err != nil {
			return nil, fmt.Errorf("score: rescore %s did not finish (%w); run it again", id, err)
		}
		if err := s.score(ctx, id, *j, p); err != nil {
			return nil, fmt.Errorf("score: rescore %s did not finish (%w); run it again", id, err)
		}
	}
	var stored []ctl.Row
	if err := s.opts.Store.Select(ctx, &stored, leaderboardSQL, p.Version, "", ""); err != nil {
		return nil, fmt.Errorf("score: rescore: %w", err)
	}
	var out []ctl.Row
	for _, r := range stored {
		if _, ok := byID[r.SubmissionID]; ok && latest[r.SubmissionID] >= since {
			out = append(out, r)
		}
	}
	return out, nil
}

// submissionOf fills in j's submission from the submission's join, else
// from the ARENA stream.
func (s *Service) submissionOf(ctx context.Context, id string, j *joined) error {
	kept, _, err := s.load(ctx, id)
	if err != nil {
		return err
	}
	j.Submission = kept.Submission
	return s.withSubmission(ctx, id, j)
}

// standing answers what the stage knows of a submission, from its join
// (and its submission.received in the ARENA stream when the join lacks
// it): never from the gateway's record. Its score is the decision under
// the service's policy once the three outcomes are in; nothing is
// published or stored. A submission neither the join nor the stream
// knows is a 404.
func (s *Service) standing(ctx context.Context, req ctl.StandingRequest) (ctl.Standing, error) {
	id := req.SubmissionID
	if !events.ValidID(id) {
		return ctl.Standing{}, ctl.Refuse(ctl.CodeBadRequest, "%q is not a submission id", id)
	}
	j, rev, err := s.load(ctx, id)
	if err != nil {
		return ctl.Standing{}, err
	}
	if err := s.withSubmission(ctx, id, &j); err != nil {
		return ctl.Standing{}, err
	}
	if rev == 0 && j.Submission == nil {
		return ctl.Standing{}, ctl.Refuse(ctl.CodeNotFound, "the arena has no submission %s", id)
	}
	return standingOf(id, j, s.policy), nil
}

// standingOf is a submission's standing from its entry under p.
func standingOf(id string, j joined, p policy.Policy) ctl.Standing {
	st := ctl.Standing{SubmissionID: id, Pending: j.pending()}
	if sub := j.Submission; sub != nil {
		st.Participant, st.Method, st.Split, st.Campaign = sub.Participant, sub.Method, sub.Split, sub.TaskID
	}
	if c := j.Contract; c != nil {
		st.ContractKept, st.Artifact, st.BundleDigest, st.KVCacheDType = true, c.Artifact, c.BundleDigest, c.KVCacheDType
		st.Patch = c.Patch
		if st.Campaign == "" {
			st.Campaign = c.TaskID
		}
		if st.Split == "" {
			st.Split = c.Split
		}
	}
	if e := j.Efficiency; e != nil && e.Engine.Startup.KVCacheDType != "" {
		st.KVCacheDType = e.Engine.Startup.KVCacheDType
	}
	if e := j.Efficiency; e != nil && e.Engine.Audit != nil {
		st.AuditVerdict, st.AuditReason = e.Engine.Audit.Verdict, e.Engine.Audit.Reason
	}
	if j.complete() {
		out, r := decide(id, j, p)
		if r != nil {
			st.Failed = string(r.Code)
		} else {
			st.Score = &out.DevScore
		}
	}
	return st
}
