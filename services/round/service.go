// Package service runs rounds: on one pod, the in-round BF16 baseline, the
// reigning leader (the incumbent), up to five candidates, the shared
// scorer and a drift baseline are served one after another through the
// GPU runner, in the plan of the arena's round pages (23 steps for five
// candidates), each step with its real start and end as a round.step
// event and a round_steps row. Speeds are relative to the in-round
// baseline ("0 is baseline speed"); an entry whose engine dies is
// disqualified with its reason and the round goes on; the best scored
// entry leads the campaign.
//
// The service is a process manager, not a goroutine per round: a round's
// state lives in the rounds bucket and every change is a compare-and-set
// from one of three actors, on any instance: the durable consumer of the
// runner's SLA job outcomes and progress, a ticker (lease renewal,
// deadlines, recovery of rounds whose instance died), and the micro
// endpoints (start, list). The pod is held by a lease that expires, so a
// crash leaves nothing behind forever: the next instance resumes the
// round, or ends it as interrupted with the steps it reached.
package round

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/lowbarena/lowbarena/domain/campaign"
	"github.com/lowbarena/lowbarena/domain/policy"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/observability"
	"github.com/lowbarena/lowbarena/platform/app"
	"github.com/lowbarena/lowbarena/platform/artifact"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/store"
)

// Name is the round service's name and event source.
const Name = "round"

// MaxCandidates is how many candidates a round takes.
const MaxCandidates = 5

// Defaults of the options.
const (
	DefaultDrift        = 0.05
	DefaultLeaseTTL     = 30 * time.Second
	DefaultEntryTimeout = 30 * time.Minute
)

// Options configure the round service.
type Options struct {
	// Campaigns are the tasks rounds may run, looked up when a round
	// starts and at each of its steps (nil: none).
	Campaigns campaign.Source
	// Store receives round_steps rows; may be nil.
	Store store.Store
	// DriftThreshold marks a round whose drift baseline moved more than
	// this share of the baseline's rate; default 0.05.
	DriftThreshold float64
	// Policy scores entries; default policy.Default.
	Policy string
	// LeaseTTL is how long a pod's lease lasts unless renewed (every
	// third of it); a dead instance's round is taken over after it.
	// Default 30 s.
	LeaseTTL time.Duration
	// EntryTimeout bounds one entry's SLA job, queue time included, and
	// the wait for the entries' standings at the end; default 30 min.
	EntryTimeout time.Duration
	// Instance names this instance in the leases it holds; default a
	// fresh unique id.
	Instance string
}

// Service runs rounds.
type Service struct {
	bus    *bus.Bus
	rounds jetstream.KeyValue
	// pods is the runners' registry (bus.BucketPods), read at each start:
	// a round runs only on a pod a live runner serves (see choosePod).
	pods      jetstream.KeyValue
	artifacts artifact.Store
	policy    policy.Policy
	opts      Options
	log       *slog.Logger
	id        string
}

// New opens the buckets the service needs and its durable consumer (so
// that the consumer's position precedes every round this instance
// starts).
func New(ctx context.Context, b *bus.Bus, log *slog.Logger, o Options) (*Service, error) {
	if o.Campaigns == nil {
		o.Campaigns = campaign.Set{}
	}
	if o.DriftThreshold <= 0 {
		o.DriftThreshold = DefaultDrift
	}
	if o.Policy == "" {
		o.Policy = policy.Default
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = DefaultLeaseTTL
	}
	if o.EntryTimeout <= 0 {
		o.EntryTimeout = DefaultEntryTimeout
	}
	if o.Instance == "" {
		o.Instance = Name + "-" + nuid.Next()
	}
	p, err := policy.Load(o.Policy)
	if err != nil {
		return nil, fmt.Errorf("round: %w", err)
	}
	js := b.JetStream()
	rounds, err := js.KeyValue(ctx, bus.BucketRounds)
	if err != nil {
		return nil, fmt.Errorf("round: %w", err)
	}
	pods, err := js.KeyValue(ctx, bus.BucketPods)
	if err != nil {
		return nil, fmt.Errorf("round: %w", err)
	}
	arts, err := artifact.NewJetStream(ctx, js, bus.ObjectArtifacts)
	if err != nil {
		return nil, fmt.Errorf("round: %w", err)
	}
	s := &Service{bus: b, rounds: rounds, pods: pods, artifacts: arts, policy: p, opts: o, log: log, id: o.Instance}
	if _, err := b.EnsureConsumer(ctx, s.Consumer()); err != nil {
		return nil, fmt.Errorf("round: %w", err)
	}
	return s, nil
}

// ID is this instance's id, the holder of the leases it takes.
func (s *Service) ID() string { return s.id }

// Actors returns the service's three actors: the micro endpoints, the
// job consumer and the ticker. None of them cleans up at a stop: a
// stopped instance leaves its rounds running and its leases to expire,
// and the next instance resumes them.
func (s *Service) Actors() []app.Actor {
	return []app.Actor{
		{Name: "round-ctl", Run: s.serve},
		{Name: "round-jobs", Run: func(ctx context.Context) error { return s.bus.Consume(ctx, s.Consumer(), s.Handle) }},
		{Name: "round-ticker", Run: s.tick},
	}
}

func roundKey(id string) string    { return "round." + id }
func leaderKey(camp string) string { return bus.Key("leader", camp) }

// Errors of load and update.
var (
	errNoRound = errors.New("round: no such round")
	// errUndecodable is a round state this service cannot read.
	errUndecodable = errors.New("round: the round's state does not decode")
)

// load reads a round's state and revision.
func (s *Service) load(ctx context.Context, id string) (*Round, uint64, error) {
	e, err := s.rounds.Get(ctx, roundKey(id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, fmt.Errorf("%w %s", errNoRound, id)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("round: read round %s: %w", id, err)
	}
	var r Round
	if err := json.Unmarshal(e.Value(), &r); err != nil || r.ID != id {
		if err == nil {
			err = fmt.Errorf("it names round %q", r.ID)
		}
		return nil, e.Revision(), fmt.Errorf("%w: %w", errUndecodable, err)
	}
	return &r, e.Revision(), nil
}

// update changes a round by compare-and-set: read, fn, Update with the
// revision read; on a lost race read again and run fn again, so fn must
// be a function of the state it is given (it is: the transitions are
// pure). fn says whether it changed anything; nothing is written when it
// did not. It returns the state as written (or as read).
func (s *Service) update(ctx context.Context, id string, fn func(r *Round) bool) (*Round, error) {
	for {
		r, rev, err := s.load(ctx, id)
		if err != nil {
			return nil, err
		}
		if !fn(r) {
			return r, nil
		}
		body, err := json.Marshal(r)
		if err != nil {
			return nil, fmt.Errorf("round: encode round %s: %w", id, err)
		}
		if _, err := s.rounds.Update(ctx, roundKey(id), body, rev); bus.Conflict(err) {
			continue
		} else if err != nil {
			return nil, fmt.Errorf("round: write round %s: %w", id, err)
		}
		return r, nil
	}
}

// flush carries out a round's outbox in order and drops what it did. It
// stops at the first effect that fails (the next flush, on a tick,
// starts there again). See Effect for why doing an effect twice is
// harmless.
func (s *Service) flush(ctx context.Context, id string) error {
	r, _, err := s.load(ctx, id)
	if err != nil {
		return err
	}
	if !trace.SpanContextFromContext(ctx).IsValid() && len(r.Trace) > 0 {
		// A tick or a recovery: the effects join the round's trace,
		// children of its start.
		ctx = observability.Propagator().Extract(ctx, propagation.MapCarrier(r.Trace))
	}
	done := 0
	var ferr error
	for _, ef := range r.Outbox {
		if ferr = s.do(ctx, r, ef); ferr != nil {
			break
		}
		done = ef.Seq
	}
	if done > 0 {
		if _, err := s.update(ctx, id, func(r *Round) bool { return r.dropDone(done) }); err != nil {
			return err
		}
	}
	return ferr
}

// do carries out one effect.
func (s *Service) do(ctx context.Context, r *Round, ef Effect) error {
	src := events.Source(Name)
	switch {
	case ef.Step != nil:
		st := *ef.Step
		// round.step ids derive from round, step and status (not the
		// type), as they always have: a repeated step event is dropped.
		if _, err := bus.Emit(ctx, s.bus, src, events.Round.Step, r.ID, st, bus.WithID(events.DeriveID(r.ID, fmt.Sprint(st.Step), string(st.Status)))); err != nil {
			return fmt.Errorf("round: publish step %d of %s: %w", st.Step, r.ID, err)
		}
		if st.Status != events.StepRunning && s.opts.Store != nil && st.FinishedAt != nil && st.StartedAt != nil {
			// round_steps is a ReplacingMergeTree on (round_id, step)
			// versioned by ts_ms, the step's end: a repeated row is one.
			end := uint64(st.FinishedAt.UnixMilli())
			row := store.RoundStep{TsMs: end, RoundID: r.ID, Step: uint32(st.Step), Name: st.Name, Phase: string(st.Phase),
				Role: st.Role, EntryID: st.EntryID, Status: string(st.Status), StartedMs: uint64(st.StartedAt.UnixMilli()), FinishedMs: end, Detail: st.Detail}
			if err := store.Insert(ctx, s.opts.Store, []store.RoundStep{row}); err != nil {
				// The event is the truth; the row is its copy for SQL.
				s.log.Warn("round step row not written", "round", r.ID, "step", st.Step, "err", err)
			}
		}
	case ef.Job != nil:
		// The job request's id derives from the job id, which derives
		// from round and entry: requesting it again is dropped.
		if _, err := bus.Emit(ctx, s.bus, src, events.Job.Requested, ef.Job.JobID, *ef.Job, bus.CausedBy(ef.Job.JobID)); err != nil {
			return fmt.Errorf("round: request job %s: %w", ef.Job.JobID, err)
		}
	case ef.Started != nil:
		if _, err := bus.Emit(ctx, s.bus, src, events.Round.Started, r.ID, *ef.Started, bus.CausedBy(r.ID)); err != nil {
			return fmt.Errorf("round: publish round.started of %s: %w", r.ID, err)
		}
	case ef.Completed != nil:
		if _, err := bus.Emit(ctx, s.bus, src, events.Round.Completed, r.ID, *ef.Completed, bus.CausedBy(r.ID)); err != nil {
			return fmt.Errorf("round: publish round.completed of %s: %w", r.ID, err)
		}
		s.log.Info("round completed", "round", r.ID, "leader", ef.Completed.Leader, "changed", ef.Completed.LeaderChanged)
	case ef.Failed != nil:
		if _, err := bus.Emit(ctx, s.bus, src, events.Round.Failed, r.ID, *ef.Failed, bus.CausedBy(r.ID)); err != nil {
			return fmt.Errorf("round: publish round.failed of %s: %w", r.ID, err)
		}
		s.log.Warn("round failed", "round", r.ID, "reason", ef.Failed.Reason, "message", ef.Failed.Message)
	case ef.Leader != nil:
		body, _ := json.Marshal(ef.Leader)
		if _, err := s.rounds.Put(ctx, leaderKey(r.Campaign), body); err != nil {
			return fmt.Errorf("round: keep the leader of %s: %w", r.Campaign, err)
		}
	case ef.Release:
		return s.release(ctx, r.Pod, r.ID)
	}
	return nil
}

// campaign returns the campaign a round runs, as its source holds it
// now; false when the arena no longer runs that task.
func (s *Service) campaign(task string) (*campaign.Campaign, bool) {
	c, err := s.opts.Campaigns.Lookup(task)
	return c, err == nil
}
