// Package usage keeps each participant's ledger for its quotas in the KV
// bucket "participant_usage" (key "u.<name>"), which the gateway alone
// writes: the submissions it accepted over the last day, reserved before
// they are published, and the GPU-hours the runner's job outcomes
// charged to them over the last week (Tally).
package usage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/domain/participant"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/bus"
)

// Ledger reads and writes the participants' ledgers.
type Ledger struct {
	kv  jetstream.KeyValue
	now func() time.Time
}

// New returns a ledger over the usage bucket kv; now is the clock (nil:
// time.Now).
func New(kv jetstream.KeyValue, now func() time.Time) *Ledger {
	if kv == nil {
		panic("usage: nil bucket")
	}
	if now == nil {
		now = time.Now
	}
	return &Ledger{kv: kv, now: now}
}

func key(name string) string { return "u." + name }

// Get returns name's ledger (empty for a participant without one).
func (l *Ledger) Get(ctx context.Context, name string) (participant.Usage, error) {
	u, _, err := l.read(ctx, name)
	return u, err
}

func (l *Ledger) read(ctx context.Context, name string) (participant.Usage, uint64, error) {
	var u participant.Usage
	e, err := l.kv.Get(ctx, key(name))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return u, 0, nil
	}
	if err != nil {
		return u, 0, fmt.Errorf("usage: read %s: %w", name, err)
	}
	if err := json.Unmarshal(e.Value(), &u); err != nil {
		return u, 0, fmt.Errorf("usage: the ledger of %s does not decode: %w", name, err)
	}
	return u, e.Revision(), nil
}

// maxCAS bounds the compare-and-set loop against concurrent writers
// (other uploads of the participant, the tally, other gateways).
const maxCAS = 16

// update applies fn to name's ledger, pruned at now, by compare-and-set
// on the revision read, so concurrent writers never lose each other's
// entries. fn reports whether it changed the ledger, or an error that
// stops the update (a quota refusal).
func (l *Ledger) update(ctx context.Context, name string, fn func(u *participant.Usage, now time.Time) (bool, error)) error {
	for range maxCAS {
		u, rev, err := l.read(ctx, name)
		if err != nil {
			return err
		}
		now := l.now()
		changed, err := fn(&u, now)
		if err != nil || !changed {
			return err
		}
		u.Prune(now)
		body, err := json.Marshal(u)
		if err != nil {
			return fmt.Errorf("usage: %w", err)
		}
		if rev == 0 {
			_, err = l.kv.Create(ctx, key(name), body)
		} else {
			_, err = l.kv.Update(ctx, key(name), body, rev)
		}
		if err == nil {
			return nil
		}
		if !bus.Conflict(err) {
			return fmt.Errorf("usage: write %s: %w", name, err)
		}
	}
	return fmt.Errorf("usage: the ledger of %s kept changing", name)
}

// Reserve counts submission s against name's daily quota, checking the
// quotas lim under the same compare-and-set, so two uploads racing for
// the last slot never both pass. A quota reached is a
// *participant.Refusal. Reserving s again (a retry) changes nothing.
func (l *Ledger) Reserve(ctx context.Context, name string, lim participant.Limits, s participant.Spent) error {
	return l.update(ctx, name, func(u *participant.Usage, now time.Time) (bool, error) {
		if r := u.Check(name, lim, now); r != nil {
			return false, r
		}
		s.At = now.UTC()
		return u.Reserve(s), nil
	})
}

// Release uncounts submission id: it was reserved, then never published.
func (l *Ledger) Release(ctx context.Context, name, id string) error {
	return l.update(ctx, name, func(u *participant.Usage, _ time.Time) (bool, error) { return u.Release(id), nil })
}

// Charge counts a job outcome's GPU-hours against name; charging the same
// event again changes nothing.
func (l *Ledger) Charge(ctx context.Context, name string, c participant.Charge) error {
	return l.update(ctx, name, func(u *participant.Usage, now time.Time) (bool, error) {
		if !now.Before(c.At.Add(participant.Week)) {
			return false, nil // outside the window already (an old outcome replayed)
		}
		return u.Charge(c), nil
	})
}

// TallyConsumer is the tally's durable consumer.
const TallyConsumer = "gateway-usage"

// Tally charges the GPU-hours of every runner job outcome to the
// participant whose submission the job served. Jobs of no submission
// (the BF16 references, rounds) are the arena's own and charged to
// nobody.
type Tally struct {
	b       *bus.Bus
	ledger  *Ledger
	records jetstream.KeyValue
	log     *slog.Logger
}

// NewTally returns a tally that finds each submission's participant in
// the gateway's records (bucket submissions) and charges ledger.
func NewTally(b *bus.Bus, ledger *Ledger, records jetstream.KeyValue, log *slog.Logger) *Tally {
	if log == nil {
		log = slog.Default()
	}
	return &Tally{b: b, ledger: ledger, records: records, log: log}
}

// Run consumes job outcomes until ctx ends. On first start the consumer
// reads the stream from its beginning, so outcomes stored before the
// tally first ran are charged too.
func (t *Tally) Run(ctx context.Context) error {
	return t.b.Consume(ctx, bus.ConsumerConfig{Name: TallyConsumer,
		Subjects: []string{events.FilterFor(events.RunnerJobCompleted), events.FilterFor(events.RunnerJobFailed)}}, t.Handle)
}

// Handle charges one outcome.
//
// Idempotency: the charge is keyed by the outcome's event id, so a
// redelivery charges nothing more. A submission whose record is not
// there yet (the projector runs beside the tally) is retried.
func (t *Tally) Handle(ctx context.Context, d *bus.Delivery) bus.Outcome {
	var out struct {
		JobID        string  `json:"job_id"`
		SubmissionID string  `json:"submission_id"`
		GPUHours     float64 `json:"gpu_hours"`
	}
	if err := d.Decode(&out); err != nil {
		return bus.Poison(reason.BadOutcome, err)
	}
	if out.SubmissionID == "" || out.GPUHours <= 0 {
		return bus.Ack()
	}
	e, err := t.records.Get(ctx, out.SubmissionID)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return bus.Retry(time.Second, fmt.Errorf("usage: no record of submission %s yet", out.SubmissionID))
	}
	if err != nil {
		return bus.Retry(0, fmt.Errorf("usage: read record %s: %w", out.SubmissionID, err))
	}
	var rec struct {
		Participant string `json:"participant"`
	}
	if err := json.Unmarshal(e.Value(), &rec); err != nil || !participant.ValidName(rec.Participant) {
		// A record of a participant name outside the rules (submitted
		// over NATS by an operator): nobody's quota to charge.
		t.log.Warn("GPU-hours charged to nobody", "submission", out.SubmissionID, "participant", rec.Participant, "gpu_hours", out.GPUHours)
		return bus.Ack()
	}
	c := participant.Charge{Event: d.Event.ID(), Submission: out.SubmissionID, Job: out.JobID, At: d.Event.Time().UTC(), Hours: out.GPUHours}
	if err := t.ledger.Charge(ctx, rec.Participant, c); err != nil {
		return bus.Retry(0, err)
	}
	return bus.Ack()
}
