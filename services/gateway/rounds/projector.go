package rounds

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/bus"
)

// ConsumerName is the round views' durable consumer.
const ConsumerName = "gateway-rounds"

// Projector folds round events into the round views.
type Projector struct {
	b   *bus.Bus
	kv  jetstream.KeyValue
	log *slog.Logger
}

// New returns a projector that writes views to kv (bucket round_views).
func New(b *bus.Bus, kv jetstream.KeyValue, log *slog.Logger) *Projector {
	if log == nil {
		log = slog.Default()
	}
	return &Projector{b: b, kv: kv, log: log}
}

// Consumer is the projector's durable on every round event.
func Consumer() bus.ConsumerConfig {
	return bus.ConsumerConfig{Name: ConsumerName, Subjects: []string{events.SubjectRootArena + ".round.>"}}
}

// Run consumes the round events until ctx is cancelled.
func (p *Projector) Run(ctx context.Context) error {
	return p.b.Consume(ctx, Consumer(), p.Handle)
}

// maxCAS bounds the compare-and-set loop against concurrent writers.
const maxCAS = 8

// Handle folds one round event into its round's view.
//
// Invariants: the view is keyed by round id and written by
// compare-and-set on the revision read (Create for a new view), so two
// gateways never lose each other's updates: a lost race (bus.Conflict)
// reads again and refolds. Fold is idempotent and a step only moves
// forward, so a redelivery or a late step writes nothing; the message is
// acked only once its fold is stored (or needed no write).
func (p *Projector) Handle(ctx context.Context, d *bus.Delivery) bus.Outcome {
	e := d.Event
	id := e.Subject()
	if !events.ValidID(id) {
		return bus.Poison(reason.BadSubject, fmt.Errorf("subject %q is not a round id", id))
	}
	for range maxCAS {
		var cur *View
		var rev uint64
		entry, err := p.kv.Get(ctx, id)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return bus.Retry(0, fmt.Errorf("read round view %s: %w", id, err))
		default:
			cur = new(View)
			if err := json.Unmarshal(entry.Value(), cur); err != nil {
				return bus.Poison(reason.ViewCorrupt, fmt.Errorf("round view %s: %w", id, err))
			}
			rev = entry.Revision()
		}
		next, changed, err := Fold(cur, e)
		if err != nil {
			return bus.Poison(reason.FoldFailed, err)
		}
		if !changed {
			return bus.Ack()
		}
		body, err := json.Marshal(next)
		if err != nil {
			return bus.Poison(reason.FoldFailed, err)
		}
		if cur == nil {
			_, err = p.kv.Create(ctx, id, body)
		} else {
			_, err = p.kv.Update(ctx, id, body, rev)
		}
		if err == nil {
			return bus.Ack()
		}
		if !bus.Conflict(err) {
			return bus.Retry(0, fmt.Errorf("write round view %s: %w", id, err))
		}
		// Someone else wrote first: read again and refold.
	}
	return bus.Retry(0, fmt.Errorf("round view %s: still contended after %d tries", id, maxCAS))
}
