package projector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/ce"
	"github.com/lowbarena/lowbarena/platform/store"
)

// ConsumerName is the projector's durable consumer.
const ConsumerName = "gateway-records"

// Projector folds pipeline events into records.
type Projector struct {
	b   *bus.Bus
	kv  jetstream.KeyValue
	st  store.Store
	log *slog.Logger
	// arena is the ARENA stream, looked up on first need (foldReceived).
	arenaMu sync.Mutex
	arena   jetstream.Stream
}

// New returns a projector that writes records to kv and, when st is not
// nil, stage results to st.
func New(b *bus.Bus, kv jetstream.KeyValue, st store.Store, log *slog.Logger) *Projector {
	if log == nil {
		log = slog.Default()
	}
	return &Projector{b: b, kv: kv, st: st, log: log}
}

// Run consumes every ARENA event until ctx is cancelled.
func (p *Projector) Run(ctx context.Context) error {
	return p.b.Consume(ctx, bus.ConsumerConfig{Name: ConsumerName, Subjects: []string{events.SubjectRootArena + ".>"}}, p.Handle)
}

// maxCAS bounds the compare-and-set loop against concurrent writers.
const maxCAS = 8

// Handle folds one delivery into its record.
//
// Invariants: the KV write is a compare-and-set on the revision read, so two
// projectors never lose each other's updates; the stage_results row is
// written before the ack and is keyed by the event id, so a redelivery
// writes the same row again and ReplacingMergeTree keeps one.
func (p *Projector) Handle(ctx context.Context, d *bus.Delivery) bus.Outcome {
	e := d.Event
	spec, _ := events.Lookup(events.Type(e.Type()))
	if spec.Stage == "" && spec.Type != events.SubmissionReceived {
		return bus.Ack()
	}
	id := e.Subject()
	if !events.ValidID(id) {
		return bus.Poison(reason.BadSubject, fmt.Errorf("subject %q is not a submission id", id))
	}
	for range maxCAS {
		var cur *record.Submission
		var rev uint64
		entry, err := p.kv.Get(ctx, id)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return bus.Retry(0, fmt.Errorf("read record %s: %w", id, err))
		default:
			cur = new(record.Submission)
			if err := json.Unmarshal(entry.Value(), cur); err != nil {
				return bus.Poison(reason.RecordCorrupt, fmt.Errorf("record %s: %w", id, err))
			}
			rev = entry.Revision()
		}
		next, changed, err := Fold(cur, e)
		if errors.Is(err, ErrNoRecord) {
			// The stage event overtook its submission.received: that
			// event is in the stream (a stage only acts on a received
			// submission) but is not folded yet, because the projector
			// that held it died with it unsettled and it comes back only
			// after its ack deadline, by when this event would have
			// spent its deliveries and been dead-lettered. Fold the
			// received read back from the stream first; its own
			// redelivery then finds the record and changes nothing.
			if next, changed, err = p.foldReceived(ctx, id, e); errors.Is(err, ErrNoRecord) {
				// Not in the stream either: it may still be on its way.
				return bus.Retry(time.Second, err)
			}
		}
		if err != nil {
			return bus.Poison(reason.FoldFailed, err)
		}
		if !changed {
			break
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
			break
		}
		if bus.Conflict(err) {
			continue // someone else wrote first: read again and refold
		}
		return bus.Retry(0, fmt.Errorf("write record %s: %w", id, err))
	}
	if err := p.writeStageResult(ctx, spec, d); err != nil {
		return bus.Retry(0, err)
	}
	return bus.Ack()
}

// foldReceived folds the submission's submission.received, read back
// from the ARENA stream, and then e onto it. It returns ErrNoRecord when
// the stream holds no submission.received for id.
func (p *Projector) foldReceived(ctx context.Context, id string, e event.Event) (*record.Submission, bool, error) {
	subject, err := events.Subject(events.SubmissionReceived, id)
	if err != nil {
		return nil, false, fmt.Errorf("%w: %w", ErrBadEvent, err)
	}
	arena, err := p.arenaStream(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("read %s: %w", subject, err)
	}
	m, err := arena.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, false, ErrNoRecord
	} else if err != nil {
		return nil, false, fmt.Errorf("read %s: %w", subject, err)
	}
	received, err := ce.Decode(m.Header, m.Data)
	if err != nil {
		return nil, false, fmt.Errorf("%w: %s: %w", ErrBadEvent, subject, err)
	}
	rec, _, err := Fold(nil, received)
	if err != nil {
		return nil, false, err
	}
	next, changed, err := Fold(rec, e)
	return next, changed || err == nil, err
}

func (p *Projector) arenaStream(ctx context.Context) (jetstream.Stream, error) {
	p.arenaMu.Lock()
	defer p.arenaMu.Unlock()
	if p.arena == nil {
		s, err := p.b.JetStream().Stream(ctx, events.StreamArena)
		if err != nil {
			return nil, err
		}
		p.arena = s
	}
	return p.arena, nil
}

func (p *Projector) writeStageResult(ctx context.Context, spec events.Spec, d *bus.Delivery) error {
	if p.st == nil || spec.Stage == "" || spec.Verb == "started" {
		return nil
	}
	e := d.Event
	row := store.StageResult{
		TsMs: uint64(e.Time().UnixMilli()), SubmissionID: e.Subject(), Stage: spec.Stage,
		Status:  verbStatus[spec.Verb],
		EventID: e.ID(), FinishedMs: uint64(e.Time().UnixMilli()), Payload: string(e.Data()),
	}
	var why struct{ Reason, Message string }
	_ = json.Unmarshal(e.Data(), &why)
	row.Reason, row.Message = why.Reason, why.Message
	if err := store.Insert(ctx, p.st, []store.StageResult{row}); err != nil {
		return fmt.Errorf("write stage result %s/%s: %w", e.Subject(), spec.Stage, err)
	}
	return nil
}
