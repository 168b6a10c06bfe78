package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/ce"
	"github.com/lowbarena/lowbarena/schemas"
)

// Event is one event of the ARENA stream as the harness reads it.
type Event struct {
	Seq               uint64
	ID, Type, Subject string
	Data              json.RawMessage
	StoredAt          time.Time
}

// DeadLetter is one message of the dead-letter stream.
type DeadLetter struct {
	Seq                                  uint64
	Reason, Consumer, Subject, Error, ID string
}

func (d DeadLetter) String() string {
	return fmt.Sprintf("%s on %s (consumer %s, event %s): %s", d.Reason, d.Subject, d.Consumer, d.ID, d.Error)
}

// Ledger is everything the arena's event log and dead-letter stream hold.
type Ledger struct {
	Events []Event
	Dead   []DeadLetter
}

// ReadLedger reads every message of ARENA and ARENA_DLQ.
//
// A cluster that is electing a leader answers some requests with no
// responders; the read starts again then, a few times.
func (c *Cluster) ReadLedger(ctx context.Context) (l Ledger, err error) {
	for attempt := 0; ; attempt++ {
		l, err = c.readLedger(ctx)
		if err == nil || !errors.Is(err, nats.ErrNoResponders) || attempt == 5 {
			return l, err
		}
		time.Sleep(time.Second) // retry interval, not an assertion
	}
}

func (c *Cluster) readLedger(ctx context.Context) (Ledger, error) {
	var l Ledger
	err := readStream(ctx, c.JS, events.StreamArena, events.SubjectRootArena+".>", func(m jetstream.Msg, meta *jetstream.MsgMetadata) error {
		e, err := decodeEvent(m)
		if err != nil {
			return err
		}
		l.Events = append(l.Events, e)
		return nil
	})
	if err != nil {
		return l, err
	}
	err = readStream(ctx, c.JS, events.StreamDLQ, events.SubjectRootDLQ+".>", func(m jetstream.Msg, meta *jetstream.MsgMetadata) error {
		h := m.Headers()
		l.Dead = append(l.Dead, DeadLetter{Seq: meta.Sequence.Stream, Reason: h.Get(bus.HeaderDLQReason), Consumer: h.Get(bus.HeaderDLQConsumer),
			Subject: h.Get(bus.HeaderDLQSubject), Error: h.Get(bus.HeaderDLQError), ID: h.Get(ce.HeaderID)})
		return nil
	})
	return l, err
}

// readStream reads every message a stream holds now, in order, with an
// ordered consumer on filter (the stream's subjects).
func readStream(ctx context.Context, js jetstream.JetStream, stream, filter string, fn func(jetstream.Msg, *jetstream.MsgMetadata) error) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return fmt.Errorf("cluster: stream %s: %w", stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return fmt.Errorf("cluster: stream %s: %w", stream, err)
	}
	last := info.State.LastSeq
	if info.State.Msgs == 0 {
		return nil
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}})
	if err != nil {
		return fmt.Errorf("cluster: read %s: %w", stream, err)
	}
	var seen uint64
	for {
		m, err := nextMsg(cons)
		if err != nil {
			if errors.Is(err, nats.ErrTimeout) || errors.Is(err, jetstream.ErrNoMessages) {
				return fmt.Errorf("cluster: read %s: nothing after sequence %d of %d", stream, seen, last)
			}
			return fmt.Errorf("cluster: read %s: %w", stream, err)
		}
		meta, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("cluster: read %s: %w", stream, err)
		}
		seen = meta.Sequence.Stream
		if err := fn(m, meta); err != nil {
			return err
		}
		if meta.Sequence.Stream >= last {
			return nil
		}
	}
}

// nextMsg is the consumer's next message. A consumer just made on
// another node may answer no responders until that node's interest in
// its pull requests reaches ours: asked again then, for up to 5 s.
func nextMsg(cons jetstream.Consumer) (jetstream.Msg, error) {
	for quiet := 0; ; quiet++ {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if errors.Is(err, nats.ErrNoResponders) && quiet < 50 {
			time.Sleep(100 * time.Millisecond) // retry interval, not an assertion
			continue
		}
		return m, err
	}
}

// decodeEvent reads an ARENA message as an Event.
func decodeEvent(m jetstream.Msg) (Event, error) {
	meta, err := m.Metadata()
	if err != nil {
		return Event{}, fmt.Errorf("cluster: %w", err)
	}
	ev, err := ce.Decode(m.Headers(), m.Data())
	if err != nil {
		return Event{}, fmt.Errorf("cluster: message %d of %s is not a CloudEvent: %w", meta.Sequence.Stream, meta.Stream, err)
	}
	subject := ev.Subject()
	if subject == "" {
		subject, _ = events.SubjectFromData(events.Type(ev.Type()), ev.Data())
	}
	return Event{Seq: meta.Sequence.Stream, ID: ev.ID(), Type: ev.Type(), Subject: subject,
		Data: append(json.RawMessage(nil), ev.Data()...), StoredAt: meta.Timestamp}, nil
}

// onceKey is what makes an event unique in a healthy arena, "" for
// events that may repeat (a job started again after its runner died,
// progress): a stage's facts once per submission, a job's outcome once
// per job, a round step once per step and status.
func (e Event) onceKey() string {
	spec, ok := events.Lookup(events.Type(e.Type))
	if !ok {
		return "unknown " + e.Type + " " + e.ID
	}
	switch events.Type(e.Type) {
	case events.RunnerJobStarted, events.RunnerJobProgress:
		return ""
	case events.RoundStep:
		var st events.RoundStepData
		_ = json.Unmarshal(e.Data, &st)
		return fmt.Sprintf("%s %s step %d %s", e.Type, e.Subject, st.Step, st.Status)
	}
	_ = spec
	return e.Type + " " + e.Subject
}

// Duplicates lists the facts the log holds more than once: the same
// stage fact of one submission, the same job outcome, the same round step
// (each with its ids), and any event id stored twice.
func (l Ledger) Duplicates() []string {
	byKey := map[string][]string{}
	byID := map[string]int{}
	for _, e := range l.Events {
		byID[e.ID]++
		if k := e.onceKey(); k != "" {
			byKey[k] = append(byKey[k], e.ID)
		}
	}
	var out []string
	for k, ids := range byKey {
		if len(ids) > 1 {
			out = append(out, fmt.Sprintf("%s %d times (ids %s)", k, len(ids), strings.Join(ids, ", ")))
		}
	}
	for id, n := range byID {
		if n > 1 {
			out = append(out, fmt.Sprintf("event id %s stored %d times", id, n))
		}
	}
	sort.Strings(out)
	return out
}

// Of lists the events about subject (a submission, a job or a round id),
// in stream order.
func (l Ledger) Of(subject string) []Event {
	var out []Event
	for _, e := range l.Events {
		if e.Subject == subject {
			out = append(out, e)
		}
	}
	return out
}

// OfType lists the events of type t, in stream order.
func (l Ledger) OfType(t events.Type) []Event {
	var out []Event
	for _, e := range l.Events {
		if e.Type == string(t) {
			out = append(out, e)
		}
	}
	return out
}

// Record reads a submission's record from the gateway's bucket and
// validates it against the record schema.
//
// Every harness read of NATS is bounded: a request sent while a node
// dies can lose its reply, and the jetstream client waits as long as its
// context lets it (the test's whole budget, else).
func (c *Cluster) Record(ctx context.Context, id string) (record.Submission, error) {
	var rec record.Submission
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	kv, err := c.JS.KeyValue(ctx, bus.BucketSubmissions)
	if err != nil {
		return rec, fmt.Errorf("cluster: %w", err)
	}
	e, err := kv.Get(ctx, id)
	if err != nil {
		return rec, fmt.Errorf("cluster: record %s: %w", id, err)
	}
	v, err := schemas.Default()
	if err != nil {
		return rec, err
	}
	if err := v.ValidateRecord(e.Value()); err != nil {
		return rec, fmt.Errorf("cluster: record %s: %w", id, err)
	}
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return rec, fmt.Errorf("cluster: record %s: %w", id, err)
	}
	return rec, nil
}

// Ended says whether every stage of rec has ended (none pending or
// running) and the record says done or failed.
func Ended(rec record.Submission) bool {
	if rec.Status != record.StatusDone && rec.Status != record.StatusFailed {
		return false
	}
	for _, st := range rec.Stages {
		if st.Status == record.StatusPending || st.Status == record.StatusRunning {
			return false
		}
	}
	return true
}

// StageStatus is the record's status of stage name, "" when it has none.
func StageStatus(rec record.Submission, name string) string {
	for _, st := range rec.Stages {
		if st.Name == name {
			return st.Status
		}
	}
	return ""
}
