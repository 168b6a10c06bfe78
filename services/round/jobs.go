package round

import (
	"context"
	"errors"
	"time"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/bus"
)

// Durable is the name of the service's durable consumer.
const Durable = "round-jobs"

// Consumer is the durable consumer of what the runner says about jobs:
// the outcomes of SLA jobs (on their kind's subjects) and the progress of
// every job (only SLA jobs of a round matter). The instances of the
// service share it. It starts at the end of the stream when first
// created: New creates it before this instance starts a round, so no
// round's job has an outcome stored before it.
func (s *Service) Consumer() bus.ConsumerConfig {
	return bus.ConsumerConfig{
		Name:       Durable,
		Subjects:   append(events.JobOutcomeFilters(events.JobSLA), events.Job.Progress.Filter()),
		DeliverNew: true,
	}
}

// Handle applies one runner event to its round.
//
// Ack semantics: the event is decoded through the codec and validated
// against its schema by the consume loop; a payload that still does not
// decode is poison. An event of another kind, of no round, of a round
// this arena does not hold or that has ended, or for an entry already
// ended, is acked and changes nothing (idempotent: a duplicate outcome
// is one). A change that cannot be written (KV down) is a retry. Once
// written, the round's outbox is flushed; a flush that fails is left to
// the ticker (the change is committed, its effects wait in the outbox).
func (s *Service) Handle(ctx context.Context, d *bus.Delivery) bus.Outcome {
	var (
		round, job string
		apply      func(r *Round, e *Entry, now time.Time) bool
	)
	switch events.Type(d.Event.Type()) {
	case events.RunnerJobProgress:
		p, err := events.Job.Progress.Decode(d.Event)
		if err != nil {
			return bus.Poison(reason.BadPayload, err)
		}
		if p.Kind != events.JobSLA || p.RoundID == "" {
			return bus.Ack()
		}
		round, job = p.RoundID, p.JobID
		apply = func(r *Round, e *Entry, now time.Time) bool { return engineHealthy(r, e, p.Phase, now) }
	case events.RunnerJobCompleted:
		c, err := events.Job.Completed.Decode(d.Event)
		if err != nil {
			return bus.Poison(reason.BadPayload, err)
		}
		if c.RoundID == "" {
			return bus.Ack()
		}
		run, runErr := events.SLAJob.Result(c)
		round, job = c.RoundID, c.JobID
		apply = func(r *Round, e *Entry, now time.Time) bool {
			if runErr != nil {
				return disqualify(r, e, "round_bad_result: its SLA result does not decode: "+runErr.Error(), c.GPUHours, now)
			}
			return measured(r, e, run, c.GPUHours, now)
		}
	case events.RunnerJobFailed:
		f, err := events.Job.Failed.Decode(d.Event)
		if err != nil {
			return bus.Poison(reason.BadPayload, err)
		}
		if f.RoundID == "" {
			return bus.Ack()
		}
		round, job = f.RoundID, f.JobID
		apply = func(r *Round, e *Entry, now time.Time) bool {
			return disqualify(r, e, f.Reason+": "+f.Message, f.GPUHours, now)
		}
	default:
		return bus.Ack()
	}
	if !events.ValidID(round) {
		return bus.Ack()
	}
	r, err := s.update(ctx, round, func(r *Round) bool {
		if r.Status != StatusRunning {
			return false
		}
		e := r.entryByJob(job)
		if e == nil {
			return false
		}
		now := time.Now().UTC()
		if !apply(r, e, now) {
			return false
		}
		// The plan moves on from here when this instance has the
		// round's campaign; otherwise its holder's tick moves it.
		if camp, ok := s.campaign(r.Campaign); ok && camp.Engine != nil {
			advance(r, camp, now, s.opts.EntryTimeout)
		}
		return true
	})
	switch {
	case errors.Is(err, errNoRound), errors.Is(err, errUndecodable):
		// Not a round of this arena, or one the ticker ends.
		return bus.Ack()
	case err != nil:
		return bus.Retry(0, err)
	}
	s.after(ctx, r)
	return bus.Ack()
}

// after carries out a changed round's effects and, when it waits at its
// teardown, ends it. Failures are logged: the change is committed, and
// the holder's tick tries again.
func (s *Service) after(ctx context.Context, r *Round) {
	if len(r.Outbox) > 0 {
		if err := s.flush(ctx, r.ID); err != nil && ctx.Err() == nil {
			s.log.Warn("round effects wait for the next tick", "round", r.ID, "err", err)
		}
	}
	if atTeardown(r) {
		if err := s.settle(ctx, r.ID); err != nil && ctx.Err() == nil {
			s.log.Info("round waits for its standings", "round", r.ID, "err", err)
		}
	}
}

// atTeardown says the round waits at its teardown step for its scores.
func atTeardown(r *Round) bool {
	i := r.next()
	return r.Status == StatusRunning && i >= 0 && r.Steps[i].Phase == events.PhaseTeardown && r.Steps[i].Status == events.StepRunning
}
