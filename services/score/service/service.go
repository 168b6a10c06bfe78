// Package service is the score stage: it joins each submission's
// contract, quality and efficiency outcomes as they arrive, in any order
// (the join lives in the score_inputs KV bucket, so it survives restarts
// and duplicates), computes the dev_score under the scoring policy, writes
// it to the scores table and publishes score.completed. It also answers
// the CLI's rescore, leaderboard and history requests from stored data.
package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/bus"
	"github.com/lowbarena/lowbarena/services/domain/record"
	"github.com/lowbarena/lowbarena/services/runtime"
	"github.com/lowbarena/lowbarena/services/domain/policy"
	"github.com/lowbarena/lowbarena/services/store"
)

// Name is the score service's name: its event source and durable.
const Name = "score"

// Reasons the stage fails.
const (
	ReasonUnknownSubmission = "submission_unknown"
	ReasonBadInputs         = "score_bad_inputs"
	ReasonDigestMismatch    = "score_digest_mismatch"
)

// Options configure the stage.
type Options struct {
	// Policy is the version new scores use; default policy.Default.
	Policy string
	// Store receives scores rows and answers queries (required).
	Store store.Store
}

// Service is the score stage.
type Service struct {
	bus     *bus.Bus
	inputs  jetstream.KeyValue
	records jetstream.KeyValue
	policy  policy.Policy
	opts    Options
	log     *slog.Logger
}

// New opens the buckets the stage needs and loads its policy.
func New(ctx context.Context, b *bus.Bus, log *slog.Logger, o Options) (*Service, error) {
	if o.Store == nil {
		return nil, errors.New("score: a store is required (the scores table)")
	}
	if o.Policy == "" {
		o.Policy = policy.Default
	}
	p, err := policy.Load(o.Policy)
	if err != nil {
		return nil, fmt.Errorf("score: %w", err)
	}
	js := b.JetStream()
	in, err := js.KeyValue(ctx, bus.BucketScoreInputs)
	if err != nil {
		return nil, fmt.Errorf("score: open bucket %s: %w", bus.BucketScoreInputs, err)
	}
	recs, err := js.KeyValue(ctx, bus.BucketSubmissions)
	if err != nil {
		return nil, fmt.Errorf("score: open bucket %s: %w", bus.BucketSubmissions, err)
	}
	return &Service{bus: b, inputs: in, records: recs, policy: p, opts: o, log: log}, nil
}

// Consumer is the stage's durable on the three outcomes it joins.
var Consumer = bus.ConsumerConfig{
	Name: "score",
	Subjects: []string{events.FilterFor(events.ContractCompleted), events.FilterFor(events.QualityCompleted),
		events.FilterFor(events.EfficiencyCompleted)},
	Prefetch: 8,
}

// Actors returns the stage's consumer and its request handlers.
func (s *Service) Actors() []runtime.Actor {
	return []runtime.Actor{
		{Name: "score", Run: func(ctx context.Context) error { return s.bus.Consume(ctx, Consumer, s.Handle) }},
		{Name: "score-requests", Run: s.serveRequests},
	}
}

// joined is a submission's entry in score_inputs.
type joined struct {
	Contract   *events.ContractCompletedData   `json:"contract,omitempty"`
	Quality    *events.QualityCompletedData    `json:"quality,omitempty"`
	Efficiency *events.EfficiencyCompletedData `json:"efficiency,omitempty"`
}

func (j joined) complete() bool { return j.Contract != nil && j.Quality != nil && j.Efficiency != nil }

// Handle adds one outcome to its submission's join, and scores the
// submission once all three are there.
//
// Idempotency: the join is a compare-and-set update of one key, and
// setting an outcome twice changes nothing; the score's event id derives
// from the submission and the policy, and its row's key is (submission,
// policy), so however often the last outcome arrives (a restart, a
// redelivery) one score is published and one row kept. Ack semantics:
// a KV, store or NATS error is a Retry.
func (s *Service) Handle(ctx context.Context, d *bus.Delivery) bus.Outcome {
	id := d.Event.Subject()
	var j joined
	for attempt := 0; ; attempt++ {
		e, err := s.inputs.Get(ctx, id)
		var rev uint64
		j = joined{}
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return bus.Retry(0, err)
		default:
			rev = e.Revision()
			if err := json.Unmarshal(e.Value(), &j); err != nil {
				j = joined{}
			}
		}
		switch events.Type(d.Event.Type()) {
		case events.ContractCompleted:
			j.Contract = new(events.ContractCompletedData)
			err = d.Decode(j.Contract)
		case events.QualityCompleted:
			j.Quality = new(events.QualityCompletedData)
			err = d.Decode(j.Quality)
		case events.EfficiencyCompleted:
			j.Efficiency = new(events.EfficiencyCompletedData)
			err = d.Decode(j.Efficiency)
		default:
			return bus.Ack()
		}
		if err != nil {
			return bus.Poison("bad_payload", err)
		}
		body, _ := json.Marshal(j)
		if rev == 0 {
			_, err = s.inputs.Create(ctx, id, body)
		} else {
			_, err = s.inputs.Update(ctx, id, body, rev)
		}
		if err == nil {
			break
		}
		if attempt < 10 && bus.Conflict(err) {
			continue // another outcome of this submission landed first
		}
		return bus.Retry(0, err)
	}
	if !j.complete() {
		return bus.Ack()
	}
	if err := s.score(ctx, id, j, s.policy); err != nil {
		return bus.Retry(0, err)
	}
	return bus.Ack()
}

// score computes, stores and publishes a submission's score under p. A
// submission that cannot be scored (no record, outcomes of different
// bundles, inputs the policy refuses) gets a score.failed with its reason
// and no error; an error is a store or NATS failure, worth a retry.
func (s *Service) score(ctx context.Context, id string, j joined, p policy.Policy) error {
	src := events.Source(Name)
	refuse := func(reason, msg string) error {
		data := events.StageFailedData{SubmissionID: id, Stage: Name, Reason: reason, Message: msg}
		_, err := s.bus.PublishNew(ctx, events.DeriveID(id, string(events.ScoreFailed), p.Version), events.ScoreFailed, src, id, data)
		return err
	}
	e, err := s.records.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return refuse(ReasonUnknownSubmission, "outcomes arrived for a submission the arena has no record of; nothing is scored")
	} else if err != nil {
		return err
	}
	var rec record.Submission
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return fmt.Errorf("score: record %s: %w", id, err)
	}
	// The three outcomes must be of one bundle: a quality or efficiency
	// figure of another checkpoint is never scored.
	if d := j.Contract.BundleDigest; d != "" {
		for stage, got := range map[string]string{"quality": j.Quality.BundleDigest, "efficiency": j.Efficiency.BundleDigest} {
			if got != "" && got != d {
				return refuse(ReasonDigestMismatch, fmt.Sprintf("the %s outcome is of bundle %.12s, the contract of %.12s; nothing is scored", stage, got, d))
			}
		}
	}
	ds, err := p.Compute(inputsOf(j))
	if err != nil {
		return refuse(ReasonBadInputs, err.Error())
	}
	// The dev split is never ranked.
	ranked := ds.Qualified && rec.Split == "ranked"
	if err := s.insert(ctx, rec, ds, ranked); err != nil {
		return err
	}
	out := events.ScoreCompletedData{SubmissionID: id, Policy: p.Version, DevScore: ds, Ranked: ranked}
	if _, err := s.bus.PublishNew(ctx, events.DeriveID(id, string(events.ScoreCompleted), p.Version), events.ScoreCompleted, src, id, out); err != nil {
		return err
	}
	reason := ""
	if ds.Reason != nil {
		reason = *ds.Reason
	}
	s.log.Info("scored", "submission", id, "policy", p.Version, "score", ds.Score, "qualified", ds.Qualified, "ranked", ranked, "reason", reason)
	return nil
}

func (s *Service) insert(ctx context.Context, rec record.Submission, ds record.Score, ranked bool) error {
	payload, _ := json.Marshal(ds)
	row := store.Score{TsMs: uint64(time.Now().UnixMilli()), SubmissionID: rec.ID, Policy: ds.Policy, Campaign: rec.TaskID,
		TaskID: rec.TaskID, Participant: rec.Participant, Method: rec.Solution.Method, Split: rec.Split, Score: ds.Score,
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
	if ranked {
		row.Ranked = 1
	}
	if ds.Reason != nil {
		row.Reason = *ds.Reason
	}
	return store.Insert(ctx, s.opts.Store, []store.Score{row})
}

// inputsOf is what the policy reads of a submission's three outcomes.
func inputsOf(j joined) policy.Inputs {
	return policy.Inputs{Contract: j.Contract.Contract, Label: j.Contract.DetectedPrecision,
		Quality: j.Quality.DevQuality, MeanDrop: j.Quality.MeanDrop,
		Efficiency: policy.Efficiency{Rate: j.Efficiency.Efficiency, BF16Rate: j.Efficiency.AnchorEfficiency,
			Peak: j.Efficiency.PeakMemory, BF16Peak: j.Efficiency.AnchorPeakMemory, BudgetReason: j.Efficiency.BudgetReason}}
}
