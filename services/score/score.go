package score

import (
	"context"
	"encoding/json"
	"time"

	"github.com/lowbarena/lowbarena/domain/policy"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/stage"
	"github.com/lowbarena/lowbarena/platform/store"
)

// score decides a complete entry under p, then stores and publishes the
// outcome: a scores row and score.completed, or score.failed with its
// refusal. An error is a store or NATS failure, worth a retry.
//
// Ids: score.completed and score.failed derive from (submission, output
// type, policy), as they always have, so a rescore under the same policy
// republishes the same ids and JetStream keeps one.
func (s *Service) score(ctx context.Context, id string, j joined, p policy.Policy) error {
	out, r := decide(id, j, p)
	if r != nil {
		return s.refuse(ctx, id, p, r)
	}
	if err := s.insert(ctx, id, *j.Submission, out); err != nil {
		return err
	}
	if _, err := bus.Emit(ctx, s.bus, events.Source(Name), events.Score.Completed, id, out, bus.CausedBy(id, p.Version)); err != nil {
		return err
	}
	ds, reason := out.DevScore, ""
	if ds.Reason != nil {
		reason = *ds.Reason
	}
	s.log.Info("scored", "submission", id, "policy", p.Version, "score", ds.Score, "qualified", ds.Qualified, "ranked", out.Ranked, "reason", reason)
	return nil
}

// refuse publishes score.failed with r.
func (s *Service) refuse(ctx context.Context, id string, p policy.Policy, r *stage.Refusal) error {
	data := events.StageFailedData{SubmissionID: id, Stage: Name, Reason: string(r.Code), Message: r.Message, Detail: r.Detail}
	if _, err := bus.Emit(ctx, s.bus, events.Source(Name), events.Score.Failed, id, data, bus.CausedBy(id, p.Version)); err != nil {
		return err
	}
	s.log.Info("not scored", "submission", id, "policy", p.Version, "reason", r.Code, "message", r.Message)
	return nil
}

// insert writes a score's row; its key is (submission, policy), so a
// score written again replaces the row.
func (s *Service) insert(ctx context.Context, id string, sub submitted, out events.ScoreCompletedData) error {
	ds := out.DevScore
	payload, _ := json.Marshal(ds)
	row := store.Score{TsMs: uint64(time.Now().UnixMilli()), SubmissionID: id, Policy: ds.Policy, Campaign: sub.TaskID,
		TaskID: sub.TaskID, Participant: sub.Participant, Method: sub.Method, Split: sub.Split, Score: ds.Score,
		Payload: string(payload)}
	if ds.EfficiencyGain != nil {
		row.EfficiencyGain = *ds.EfficiencyGain
	}
	if ds.Drift != nil {
		row.Drift = *ds.Drift
	}
	if ds.Qualified {
		row.Qualified = 1
	}
	if out.Ranked {
		row.Ranked = 1
	}
	if ds.Reason != nil {
		row.Reason = *ds.Reason
	}
	return store.Insert(ctx, s.opts.Store, []store.Score{row})
}
