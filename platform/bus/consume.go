package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/observability"
	"github.com/lowbarena/lowbarena/platform/ce"
	"github.com/lowbarena/lowbarena/schemas"
)

// Dead-letter headers, added to the original headers of a poison message.
const (
	HeaderDLQReason     = "Lowbarena-Dlq-Reason"
	HeaderDLQError      = "Lowbarena-Dlq-Error"
	HeaderDLQConsumer   = "Lowbarena-Dlq-Consumer"
	HeaderDLQStream     = "Lowbarena-Dlq-Stream"
	HeaderDLQSubject    = "Lowbarena-Dlq-Subject"
	HeaderDLQSequence   = "Lowbarena-Dlq-Sequence"
	HeaderDLQDeliveries = "Lowbarena-Dlq-Deliveries"
	HeaderDLQTime       = "Lowbarena-Dlq-Time"
)

type outcomeKind int

const (
	kindAck outcomeKind = iota
	kindRetry
	kindPoison
)

// Outcome is what a handler decided about a message.
type Outcome struct {
	kind   outcomeKind
	delay  time.Duration
	reason reason.Code
	err    error
}

// Ack means the message is handled: its outputs are published.
func Ack() Outcome { return Outcome{kind: kindAck} }

// Retry means the message could not be handled now (a dependency is down);
// it is redelivered after delay (zero: an exponential backoff by delivery
// count), and dead-lettered once it has been delivered MaxDeliver times.
func Retry(delay time.Duration, err error) Outcome {
	return Outcome{kind: kindRetry, delay: delay, err: err}
}

// Poison means the message can never be handled; it is dead-lettered at
// once with code, a stable snake_case code of the catalogue.
func Poison(code reason.Code, err error) Outcome {
	return Outcome{kind: kindPoison, reason: code, err: err}
}

// IsAck, IsRetry and IsPoison tell the outcome's kind.
func (o Outcome) IsAck() bool    { return o.kind == kindAck }
func (o Outcome) IsRetry() bool  { return o.kind == kindRetry }
func (o Outcome) IsPoison() bool { return o.kind == kindPoison }

// Delay is a retry's requested delay (zero: the backoff decides).
func (o Outcome) Delay() time.Duration { return o.delay }

// Reason is a poison outcome's reason code.
func (o Outcome) Reason() reason.Code { return o.reason }

// Err is the error a retry or poison outcome carries.
func (o Outcome) Err() error { return o.err }

func (o Outcome) String() string {
	switch o.kind {
	case kindAck:
		return "ack"
	case kindRetry:
		return "retry"
	default:
		return "poison"
	}
}

// Delivery is one decoded, schema-valid event handed to a handler.
type Delivery struct {
	// Event is the CloudEvent.
	Event event.Event
	// Subject is the NATS subject it arrived on.
	Subject string
	// NumDelivered counts deliveries of this message, 1 the first time.
	NumDelivered uint64
	// StreamSeq is the message's sequence in its stream.
	StreamSeq uint64
	// Stored is when its stream stored it (the server's clock).
	Stored time.Time

	msg jetstream.Msg
}

// Decode unmarshals the event data into v.
func (d *Delivery) Decode(v any) error {
	if err := json.Unmarshal(d.Event.Data(), v); err != nil {
		return fmt.Errorf("bus: decode %s data: %w", d.Event.Type(), err)
	}
	return nil
}

// InProgress tells the server the handler is still working, resetting the
// ack timer. The consume loop already sends it every AckWait/3 while the
// handler runs; long handlers may send more.
func (d *Delivery) InProgress() error { return d.msg.InProgress() }

// Handler handles one delivery. It must be idempotent: the same event may
// arrive twice (after a crash between publishing outputs and acking), and
// handling it twice must yield the same outputs (same event ids) and rows.
type Handler func(ctx context.Context, d *Delivery) Outcome

// ConsumerConfig describes a durable pull consumer.
type ConsumerConfig struct {
	// Name is the durable name (one per service and role); instances of a
	// service bind to the same durable to share its work.
	Name string
	// Stream is the stream consumed; default ARENA.
	Stream string
	// Subjects filters the stream; empty means every subject.
	Subjects []string
	// AckWait is how long the server waits for an ack before redelivering;
	// default 30 s. The loop heartbeats with InProgress every AckWait/3.
	AckWait time.Duration
	// MaxDeliver is how many deliveries a message gets before it is
	// dead-lettered with max_deliver_exceeded; default 5.
	MaxDeliver int
	// Prefetch is how many messages are pulled ahead of the handler, in
	// batches (a pull for Prefetch, another when half are handled);
	// default 64, which keeps a fast handler busy at tens of thousands of
	// events a second (BenchmarkSustainedVsRaw). A message waits in the
	// buffer with its ack timer running and no heartbeat, so a handler
	// that takes seconds wants a few (the contract stage: 16), and a long
	// one (GPU jobs) 1.
	Prefetch int
	// Handlers is how many messages are handled at once; default 1, in
	// the order the server delivers them (projections rely on it). A
	// stage whose inputs are independent of each other (the build stage:
	// one bundle each) sets more to use more than one core; order is
	// then not kept, and Prefetch is raised to at least Handlers.
	Handlers int
	// DeliverNew starts a new durable at the end of the stream instead of
	// its beginning.
	DeliverNew bool
	// DeadLetterAs names the dead-letter subject (dlq.<DeadLetterAs>);
	// default Name. Durables named per instance (a runner's per pod)
	// dead-letter under their role's name, the one the operator reads and
	// the NATS permissions allow (access.Consumer.DeadLetterAs).
	DeadLetterAs string
	// DeadLetterPolicy, when set, is asked about every message about to
	// be dead-lettered whose event decoded and passed its schema, before
	// its dead-letter copy is stored, and may keep or settle it instead
	// (see DeadLetterVerdict). Package workqueue builds one from a hook
	// through which the owner of given-up work ends it.
	DeadLetterPolicy DeadLetterPolicy
}

// DeadLetterPolicy decides what becomes of a message the loop is about to
// dead-letter (see ConsumerConfig.DeadLetterPolicy). It must be
// idempotent (a dead letter repeated after a crash asks it again): derive
// what it publishes from the event's id. A policy that fails returns
// GiveUp with its error: the message is Nak'ed for another try, as a
// failed dead-letter publish is, comes back and is asked about again,
// however many deliveries that takes (see jsConfig).
type DeadLetterPolicy func(ctx context.Context, dl DeadLetter) (DeadLetterVerdict, error)

// DeadLetterVerdict is a DeadLetterPolicy's answer.
type DeadLetterVerdict int

const (
	// GiveUp dead-letters the message (its copy stored, then Term); with
	// an error, the policy failed and the message is Nak'ed to come back
	// in 5 s.
	GiveUp DeadLetterVerdict = iota
	// Keep does not give the message up yet (its work still runs under an
	// earlier delivery elsewhere): it is Nak'ed to come back in a third of
	// AckWait (at least a second) and asked about again; a live handler's
	// ack removes it meanwhile.
	Keep
	// Settled acks the message instead: its work has ended already, and
	// nothing is given up.
	Settled
)

// DeadLetter is a message about to be dead-lettered, as a
// DeadLetterPolicy sees it.
type DeadLetter struct {
	// Event is the message's event (decoded and schema-valid).
	Event event.Event
	// Consumer is the durable that gives it up.
	Consumer string
	// Reason is the dead-letter reason code (max_deliver_exceeded, or a
	// handler's Poison reason); Err the last error.
	Reason reason.Code
	Err    error
	// Deliveries counts the deliveries of the message, this one included.
	Deliveries uint64
	// Stored is when its stream stored it (the server's clock).
	Stored time.Time
}

func (c ConsumerConfig) withDefaults() ConsumerConfig {
	if c.Stream == "" {
		c.Stream = events.StreamArena
	}
	if c.AckWait <= 0 {
		c.AckWait = 30 * time.Second
	}
	if c.MaxDeliver <= 0 {
		c.MaxDeliver = 5
	}
	if c.Prefetch <= 0 {
		c.Prefetch = 64
	}
	if c.Handlers <= 0 {
		c.Handlers = 1
	}
	c.Prefetch = max(c.Prefetch, c.Handlers)
	return c
}

// jsConfig is the server-side consumer configuration.
//
// The server's MaxDeliver is unlimited (-1); the loop counts deliveries
// itself. It dead-letters a message on the delivery numbered MaxDeliver
// when the handler still asks for a retry, and before calling the handler
// at all on a later delivery (a handler that crashes its process every
// time), so no handler runs more than MaxDeliver times. The dead letter
// itself (the dead-letter policy, then the copy, then Term) may fail or
// be cut short by a crash: the message is then Nak'ed or its ack deadline
// passes, it comes back, and the dead letter is tried again, for as long
// as it takes. A server-side limit would stop those returns and leave a
// given-up message on the stream, undelivered, with its owner never told
// (a job whose last runner died while it ended it, a policy that could not
// reach NATS on the last delivery). Nothing loops: a message past
// MaxDeliver only ever gets its dead letter retried, every few seconds.
func (c ConsumerConfig) jsConfig() jetstream.ConsumerConfig {
	cc := jetstream.ConsumerConfig{
		Durable:       c.Name,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       c.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: max(c.Prefetch*4, 64),
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
	if c.DeliverNew {
		cc.DeliverPolicy = jetstream.DeliverNewPolicy
	}
	switch len(c.Subjects) {
	case 0:
	case 1:
		cc.FilterSubject = c.Subjects[0]
	default:
		cc.FilterSubjects = c.Subjects
	}
	return cc
}

// EnsureConsumer creates the durable consumer, or updates its editable
// settings.
//
// A durable the server already holds is compared with cfg first (see
// ConsumerDrift): one whose ack policy or deliver policy differs, which
// the server cannot change in place, is refused with a
// *ConsumerMismatchError (code consumer_config_mismatch) and left as it
// is, instead of the server's bare refusal of the update; one whose
// filter subjects, ack wait or max deliver differ is updated in place,
// keeping its queue and position, and the change is logged with both
// values.
func (b *Bus) EnsureConsumer(ctx context.Context, cfg ConsumerConfig) (jetstream.Consumer, error) {
	cfg = cfg.withDefaults()
	if cfg.Name == "" {
		return nil, errors.New("bus: consumer needs a durable name")
	}
	// The create request's subject carries the durable's name (and its
	// filter when it has one); a user not allowed to create it is told
	// so at once (see Guard). A create of a durable that exists with the
	// same configuration returns it; one that differs is compared (see
	// checkDrift) before anything changes it.
	create := "$JS.API.CONSUMER.CREATE." + cfg.Stream + "." + cfg.Name
	var c jetstream.Consumer
	err := b.Guard(ctx, func(ctx context.Context) error {
		var err error
		c, err = b.js.CreateConsumer(ctx, cfg.Stream, cfg.jsConfig())
		return err
	}, create, create+".>")
	if consumerExists(err) {
		drift, derr := b.checkDrift(ctx, cfg)
		if derr != nil {
			return nil, derr
		}
		for _, f := range drift {
			b.log.Warn("durable consumer drifted from the code; updated in place", "consumer", cfg.Name, "stream", cfg.Stream,
				"field", f.Field, "server", f.Server, "code", f.Code)
		}
		err = b.Guard(ctx, func(ctx context.Context) error {
			var err error
			c, err = b.js.UpdateConsumer(ctx, cfg.Stream, cfg.jsConfig())
			return err
		}, create, create+".>")
	}
	if err != nil {
		return nil, fmt.Errorf("bus: consumer %s on %s: %w", cfg.Name, cfg.Stream, err)
	}
	return c, nil
}

// consumerExists reports the server's refusal to create a durable that
// exists with another configuration (JetStream API error 10148).
func consumerExists(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeConsumerExists
}

// Consume runs handler on every message of the durable consumer until ctx
// is cancelled, then drains: messages already pulled are handled (their
// handlers see the cancelled context and usually ask for a retry, which
// returns them to the server at once), the acks still on their way are
// flushed to the server, and Consume returns after the last.
//
// A message is a CloudEvent in binary or structured mode (see package ce);
// an event without a subject takes the one its data names
// (events.SubjectFromData), and the handler's context carries the event's
// mode, so Publish answers in it.
//
// Messages are handled one at a time, in the order the server delivers
// them (projections such as the gateway's records rely on it), unless
// cfg.Handlers allows more at once; up to Prefetch more wait in the
// client's buffer, pulled in batches.
//
// Ack semantics, per message:
//   - oversized data, a message that is not a valid CloudEvent, an unknown
//     type or data that fails its schema: dead-lettered at once (Term), the
//     handler never runs;
//   - handler Ack: acknowledged once the handler has returned, without
//     waiting for the server to confirm the ack (the next message is
//     handled meanwhile). An ack lost on the way (a crash, a broken
//     connection) leaves the message to be redelivered after AckWait: the
//     handler is idempotent, so the second run publishes nothing new. That
//     is at-least-once delivery: an ack never precedes the
//     handler's end, and a graceful stop flushes every ack it sent;
//   - handler Retry: NakWithDelay, until the delivery numbered MaxDeliver,
//     which is dead-lettered with max_deliver_exceeded and the last error;
//   - handler Poison: dead-lettered with the handler's reason;
//   - a handler panic counts as a Retry with the panic as the error.
//
// A message is Termed only after its dead-letter copy is stored; when the
// dead-letter publish fails, the message is Nak'ed instead, so nothing is
// lost.
//
// Heartbeats: while a handler runs, its message gets an InProgress each
// time a third of AckWait has passed since the handler started or since
// the last InProgress, so long work is not redelivered. One ticker per
// consumer sends them all (see heartbeat).
func (b *Bus) Consume(ctx context.Context, cfg ConsumerConfig, handler Handler) error {
	cfg = cfg.withDefaults()
	cons, err := b.EnsureConsumer(ctx, cfg)
	if err != nil {
		return err
	}
	log := b.log.With("consumer", cfg.Name)
	hb := newHeartbeat(cfg.AckWait/3, log)
	go hb.run()
	defer hb.stop()
	// Invariant: at most cfg.Handlers handlers run at once, each on its
	// own message, which it settles itself (handle); with one, they run
	// on the library's delivery goroutine, in delivery order. With more,
	// the delivery goroutine waits for a free slot before it hands a
	// message on, so no more than Handlers leave the client's buffer, and
	// the drain below waits for every handler to have settled its
	// message before the acks are flushed.
	var running sync.WaitGroup
	slots := make(chan struct{}, cfg.Handlers)
	deliver := func(m jetstream.Msg) { b.handle(ctx, cfg, m, handler, hb) }
	if cfg.Handlers > 1 {
		deliver = func(m jetstream.Msg) {
			slots <- struct{}{}
			running.Go(func() {
				defer func() { <-slots }()
				b.handle(ctx, cfg, m, handler, hb)
			})
		}
	}
	cc, err := cons.Consume(deliver, jetstream.PullMaxMessages(cfg.Prefetch), jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		// Missing heartbeats and reconnects are not terminal: the library
		// keeps pulling. Log them so an operator sees a sick consumer.
		if ctx.Err() == nil {
			log.Warn("consume error", "err", err)
		}
	}))
	if err != nil {
		return fmt.Errorf("bus: consume %s: %w", cfg.Name, err)
	}
	<-ctx.Done()
	cc.Drain()
	<-cc.Closed()
	running.Wait()
	// The acks sent without waiting are on the wire once the server has
	// answered a ping sent after them: a caller that closes the
	// connection next loses none of them.
	if err := b.FlushAcks(ctx); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		log.Warn("flushing acks at drain", "err", err)
	}
	return nil
}

// ackTimeout bounds dead-letter publishes and the flush of acks at
// drain; they run on a context that outlives the consumer's, so a shutdown
// still settles the message in hand.
var ackTimeout = 10 * time.Second

// handle takes one message through the loop's three steps: admit decides
// whether the handler may see it, run runs the handler, settle acts on
// the handler's outcome. It returns the outcome the message was settled
// with: the handler's, or Poison for a message refused before the
// handler ran.
func (b *Bus) handle(ctx context.Context, cfg ConsumerConfig, m jetstream.Msg, handler Handler, hb *heartbeat) Outcome {
	start := time.Now()
	meta, err := m.Metadata()
	if err != nil {
		// Not a JetStream message; nothing to settle.
		b.log.Error("message without JetStream metadata", "consumer", cfg.Name, "subject", m.Subject(), "err", err)
		return Retry(0, err)
	}
	f := &inFlight{b: b, ctx: ctx, cfg: cfg, m: m, meta: meta, start: start, typ: "unknown"}
	f.startSpan()
	defer f.span.End()
	d, refused := f.admit()
	if d == nil {
		return refused
	}
	return f.settle(f.run(handler, d, hb), &d.Event)
}

// inFlight is one message in the loop's hands, from its arrival to its
// settlement.
type inFlight struct {
	b     *Bus
	ctx   context.Context // the consumer's: cancelled at shutdown
	cfg   ConsumerConfig
	m     jetstream.Msg
	meta  *jetstream.MsgMetadata
	start time.Time
	// typ is the metric's type label. It comes from an untrusted message,
	// so it stays "unknown" until the event decodes to a known type:
	// garbage cannot grow the metric's cardinality without bound.
	typ string
	// span is the process span; hctx, the handler's context, carries it.
	span trace.Span
	hctx context.Context
	// event is the event once it decoded and passed its schema: what a
	// dead-letter policy is asked about.
	event *event.Event
}

// startSpan starts the process span before the message is decoded, as a
// child of the producer's span (W3C trace context in the headers), so a
// message dead-lettered for its form still shows in its trace, with an
// error status; run renames it once the type is known.
func (f *inFlight) startSpan() {
	hctx := f.b.prop.Extract(f.ctx, observability.HeaderCarrier(f.m.Headers()))
	if !trace.SpanContextFromContext(hctx).IsValid() {
		hctx = untracedParent(hctx, f.m.Headers())
	}
	f.hctx, f.span = f.b.tracer.Start(hctx, "process "+f.cfg.Name, trace.WithSpanKind(trace.SpanKindConsumer))
	if f.span.IsRecording() {
		f.span.SetAttributes(semconv.MessagingSystemKey.String("nats"), semconv.MessagingDestinationName(f.m.Subject()),
			semconv.MessagingConsumerGroupName(f.cfg.Name), attribute.Int64("lowbarena.deliveries", int64(f.meta.NumDelivered)))
	}
}

// admit decides whether the handler may see the message, and returns the
// delivery it may see, or nil and the outcome the message was refused
// with.
//
// Invariant: a message is admitted only if its data is within
// MaxEventBytes, it is a CloudEvent of a type the arena knows, its data
// passes that type's schema, and it has been delivered at most MaxDeliver
// times; its event then has a subject whenever its data names one. A
// refused message is settled here (dead-lettered, see poison) and its
// handler never runs; an admitted one is not settled yet.
//
// A message delivered more than MaxDeliver times is the one refusal a
// dead-letter policy may overrule: it then stays on the server (Keep, or
// a failure) or is acked (Settled), and its handler does not run either.
func (f *inFlight) admit() (*Delivery, Outcome) {
	m, meta := f.m, f.meta
	if n := len(m.Data()); n > MaxEventBytes {
		return nil, f.poison(reason.Oversized, fmt.Errorf("data is %d bytes, the limit is %d", n, MaxEventBytes))
	}
	ev, mode, err := ce.DecodeMode(m.Headers(), m.Data())
	if err != nil {
		var de *ce.DecodeError
		code := reason.MalformedEvent
		if errors.As(err, &de) {
			code = de.Reason
		}
		return nil, f.poison(code, err)
	}
	if _, ok := events.Lookup(events.Type(ev.Type())); !ok {
		return nil, f.poison(reason.UnknownType, fmt.Errorf("the arena has no event type %q", ev.Type()))
	}
	f.typ = ev.Type()
	// Validation is done once per payload in this process: an event
	// published here, or consumed here by another consumer, passed
	// already (schemas.Validator remembers the exact bytes).
	if err := f.b.validator.Validate(ev.Type(), ev.Data()); err != nil {
		if errors.Is(err, schemas.ErrUnknownType) {
			return nil, f.poison(reason.UnknownType, err)
		}
		return nil, f.poison(reason.SchemaInvalid, err)
	}
	// subject is OPTIONAL in CloudEvents: an event published without it
	// (by a client outside the arena) gets the id its data names, the
	// subject the arena's own publishers set, so every handler sees one.
	if ev.Subject() == "" {
		if s, ok := events.SubjectFromData(events.Type(ev.Type()), ev.Data()); ok {
			ev.SetSubject(s)
		}
	}
	f.event = &ev
	if meta.NumDelivered > uint64(f.cfg.MaxDeliver) {
		return nil, f.poison(reason.MaxDeliverExceeded, fmt.Errorf("delivered %d times without an outcome (the handler's process died each time?)", meta.NumDelivered))
	}
	// What the handler publishes answers in the mode this event came in:
	// a client that speaks structured mode only reads what follows.
	f.hctx = ce.WithMode(f.hctx, mode)
	return &Delivery{Event: ev, Subject: m.Subject(), NumDelivered: meta.NumDelivered, StreamSeq: meta.Sequence.Stream, Stored: meta.Timestamp, msg: m}, Outcome{}
}

// run hands an admitted delivery to the handler and returns the
// handler's outcome.
//
// Invariant: run settles nothing (no ack, no nak), so the handler's
// outcome is acted on only after the handler has returned. While the
// handler runs, the consumer's heartbeat keeps the message from being
// redelivered (see heartbeat); a handler that panics is logged with its
// stack and counts as a Retry with the panic as its error.
func (f *inFlight) run(handler Handler, d *Delivery, hb *heartbeat) (out Outcome) {
	if f.span.IsRecording() {
		f.span.SetName("process " + d.Event.Type())
		f.span.SetAttributes(semconv.MessagingMessageID(d.Event.ID()))
		f.span.SetAttributes(eventAttrs(d.Event.Type(), d.Event.Subject(), d.Event.Data())...)
	}
	hb.add(f.m)
	defer hb.remove(f.m)
	defer func() {
		if r := recover(); r != nil {
			f.b.log.Error("handler panicked", "id", d.Event.ID(), "type", d.Event.Type(), "panic", r, "stack", string(debug.Stack()))
			out = Retry(0, fmt.Errorf("handler panicked: %v", r))
		}
	}()
	return handler(f.hctx, d)
}

// settle acts on the outcome of the handler of ev and returns it.
//
// Invariant: the message is settled once, after its handler returned.
// Ack: acknowledged, without waiting for the server's confirmation. Retry:
// handed back at once when the consumer is stopping, dead-lettered with
// max_deliver_exceeded on the delivery numbered MaxDeliver, otherwise
// Nak'ed with the handler's delay or the backoff. Poison: dead-lettered
// with the handler's reason. Each settlement is counted in the metrics
// and recorded on the span.
func (f *inFlight) settle(out Outcome, ev *event.Event) Outcome {
	m, cfg, span := f.m, f.cfg, f.span
	switch out.kind {
	case kindAck:
		// The ack is sent, not waited for (see Consume): should it be
		// lost, the server redelivers after AckWait and the idempotent
		// handler publishes nothing new.
		if err := m.Ack(); err != nil {
			f.b.log.Warn("ack failed", "consumer", cfg.Name, "id", ev.ID(), "err", err)
		}
		f.settled("ack")
		return out
	case kindRetry:
		if out.err != nil {
			span.RecordError(out.err)
			if out.delay <= 0 {
				// A failure of this attempt; a deliberate wait
				// (a delay the handler chose) is not an error.
				span.SetStatus(codes.Error, out.err.Error())
			}
		}
		if f.ctx.Err() != nil {
			// Shutting down: hand the message back at once.
			_ = m.Nak()
			f.settled("shutdown")
			return out
		}
		n := f.meta.NumDelivered
		if n >= uint64(cfg.MaxDeliver) {
			return f.poison(reason.MaxDeliverExceeded, fmt.Errorf("gave up after %d deliveries: %w", n, out.err))
		}
		delay := out.delay
		if delay <= 0 {
			delay = backoff(n)
		}
		f.b.log.Info("retry", "consumer", cfg.Name, "id", ev.ID(), "type", ev.Type(), "delivery", n, "delay", delay, "err", out.err)
		if err := m.NakWithDelay(delay); err != nil {
			f.b.log.Warn("nak failed", "consumer", cfg.Name, "id", ev.ID(), "err", err)
		}
		f.settled("retry")
		return out
	default:
		return f.poison(out.reason, out.err)
	}
}

// poison dead-letters the message with code and cause (see deadLetter:
// the consumer's dead-letter policy may keep or settle it instead, and a
// copy that cannot be stored leaves it Nak'ed), records it in the metrics
// and on the span as dead_lettered, and returns the Poison outcome. The
// dead-letter publish runs on a context of its own (see ackTimeout), made
// only when one is needed.
func (f *inFlight) poison(code reason.Code, cause error) Outcome {
	settle, cancel := settleContext(f.ctx)
	defer cancel()
	f.b.deadLetter(settle, f.cfg, f.m, f.meta, code, cause, f.event)
	f.record("dead_lettered")
	f.span.SetAttributes(AttrOutcome.String("dead_lettered"), AttrReason.String(string(code)))
	f.span.SetStatus(codes.Error, string(code))
	if cause != nil {
		f.span.RecordError(cause)
	}
	return Poison(code, cause)
}

// settled records a settlement other than a dead letter in the metrics
// and on the span.
func (f *inFlight) settled(outcome string) {
	f.record(outcome)
	f.span.SetAttributes(AttrOutcome.String(outcome))
}

// record counts the message under outcome and records the time since it
// arrived.
func (f *inFlight) record(outcome string) {
	attrs := f.b.consumedAttrs(f.cfg.Name, f.typ, outcome)
	f.b.consumed.Add(f.ctx, 1, attrs)
	f.b.handlerTime.Record(f.ctx, time.Since(f.start).Seconds(), attrs)
}

// settleContext bounds a dead-letter publish, or a flush of acks, by
// ackTimeout, on a context that outlives the consumer's. Its deadline
// starts when it is made, not when the message arrived: a handler may run
// far longer than ackTimeout (a GPU job), and what settles its message
// must not inherit a deadline that passed while it ran.
func settleContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), ackTimeout)
}

// consumedAttrs returns the metric attributes of a consumed message, made
// once per consumer, type and outcome (a bounded set: known types only).
func (b *Bus) consumedAttrs(consumer, typ, outcome string) metric.MeasurementOption {
	k := attrKey{"consumed", consumer, typ, outcome}
	if a, ok := b.attrs.Load(k); ok {
		return a.(metric.MeasurementOption)
	}
	a := metric.WithAttributeSet(attribute.NewSet(attribute.String("consumer", consumer), attribute.String("type", typ), attribute.String("outcome", outcome)))
	b.attrs.Store(k, a)
	return a
}

// attrKey names a cached set of metric attributes.
type attrKey struct{ metric, a, b, c string }

// backoff is 1 s, 2 s, 4 s ... capped at 1 min.
func backoff(delivered uint64) time.Duration {
	d := time.Second << min(delivered-1, 6)
	return min(d, time.Minute)
}

// deadLetter copies m with its headers to dlq.<consumer> with the reason,
// then Terms m. Its Nats-Msg-Id is derived from the stream and sequence, so
// a dead-letter repeated after a crash is stored once. ev, the decoded
// event (nil when it did not decode), goes to cfg.DeadLetterPolicy first:
// the copy is stored only once the policy has published what it
// publishes, so a crash between the two repeats the (idempotent) policy,
// never skips it.
func (b *Bus) deadLetter(ctx context.Context, cfg ConsumerConfig, m jetstream.Msg, meta *jetstream.MsgMetadata, code reason.Code, cause error, ev *event.Event) {
	if cfg.DeadLetterPolicy != nil && ev != nil && !b.askPolicy(ctx, cfg, m, meta, code, cause, ev) {
		return
	}
	name := cfg.Name
	if cfg.DeadLetterAs != "" {
		name = cfg.DeadLetterAs
	}
	msg := nats.NewMsg(events.SubjectRootDLQ + "." + name)
	for k, vs := range m.Headers() {
		if k == ce.HeaderMsgID {
			continue
		}
		msg.Header[k] = append([]string(nil), vs...)
	}
	errText := ""
	if cause != nil {
		errText = cause.Error()
		if len(errText) > 2048 {
			errText = errText[:2048] + "..."
		}
	}
	msg.Header.Set(HeaderDLQReason, string(code))
	msg.Header.Set(HeaderDLQError, errText)
	msg.Header.Set(HeaderDLQConsumer, cfg.Name)
	msg.Header.Set(HeaderDLQStream, meta.Stream)
	msg.Header.Set(HeaderDLQSubject, m.Subject())
	msg.Header.Set(HeaderDLQSequence, strconv.FormatUint(meta.Sequence.Stream, 10))
	msg.Header.Set(HeaderDLQDeliveries, strconv.FormatUint(meta.NumDelivered, 10))
	msg.Header.Set(HeaderDLQTime, time.Now().UTC().Format(time.RFC3339Nano))
	msg.Header.Set(ce.HeaderMsgID, "dlq:"+cfg.Name+":"+meta.Stream+":"+strconv.FormatUint(meta.Sequence.Stream, 10))
	msg.Data = m.Data()
	if err := b.Guard(ctx, func(ctx context.Context) error {
		_, err := b.js.PublishMsg(ctx, msg, jetstream.WithExpectStream(events.StreamDLQ), leaderWaitWait, leaderWaitAttempts)
		return err
	}, msg.Subject); err != nil {
		b.log.Error("dead-letter publish failed; message returned to the server", "consumer", cfg.Name, "reason", code, "err", err)
		_ = m.NakWithDelay(5 * time.Second)
		return
	}
	b.deadLettered.Add(ctx, 1, metric.WithAttributes(attribute.String("consumer", cfg.Name), attribute.String("reason", string(code))))
	b.log.Warn("dead-lettered", "consumer", cfg.Name, "reason", code, "subject", m.Subject(), "seq", meta.Sequence.Stream, "err", errText)
	if err := m.TermWithReason(string(code)); err != nil {
		b.log.Warn("term failed", "consumer", cfg.Name, "err", err)
	}
}

// askPolicy asks cfg.DeadLetterPolicy about the message about to be
// dead-lettered, and reports whether the dead letter goes on. When it does
// not, the message is settled here: acked (Settled), or Nak'ed to come
// back and be asked about again (Keep, or a policy that failed).
func (b *Bus) askPolicy(ctx context.Context, cfg ConsumerConfig, m jetstream.Msg, meta *jetstream.MsgMetadata, code reason.Code, cause error, ev *event.Event) bool {
	dl := DeadLetter{Event: *ev, Consumer: cfg.Name, Reason: code, Err: cause, Deliveries: meta.NumDelivered, Stored: meta.Timestamp}
	verdict, err := cfg.DeadLetterPolicy(ctx, dl)
	switch {
	case verdict == Settled:
		// Its work has ended: nothing to give up or to keep.
		b.log.Info("not dead-lettered: its work has ended", "consumer", cfg.Name, "id", ev.ID(), "deliveries", meta.NumDelivered, "err", err)
		if err := m.Ack(); err != nil {
			b.log.Warn("ack failed", "consumer", cfg.Name, "id", ev.ID(), "err", err)
		}
		return false
	case verdict == Keep:
		// Not given up yet: asked again in a third of the ack deadline,
		// until its holder ends it (its ack removes the message) or the
		// policy lets it go.
		b.log.Info("not dead-lettered: still held elsewhere", "consumer", cfg.Name, "id", ev.ID(), "deliveries", meta.NumDelivered, "err", err)
		_ = m.NakWithDelay(max(cfg.AckWait/3, time.Second))
		return false
	case err != nil:
		b.log.Error("dead-letter policy failed; message returned to the server", "consumer", cfg.Name, "reason", code,
			"id", ev.ID(), "deliveries", meta.NumDelivered, "err", err)
		_ = m.NakWithDelay(5 * time.Second)
		return false
	}
	return true
}

// heartbeat tells the server, for every message whose handler is still
// running, that it is in progress: one ticker per consumer, whatever the
// number of messages in hand.
//
// The loop gives it a period of a third of the ack wait, and its ticker
// fires twice a period. At each tick, a message whose handler started, or
// had its last InProgress, at least a period ago gets an InProgress. Two
// of them are thus at most a period and a half apart (half the ack wait),
// so long work is never redelivered, and a handler that ends within a
// period sends none.
type heartbeat struct {
	every time.Duration // the period
	log   *slog.Logger
	done  chan struct{}
	ended chan struct{}

	mu       sync.Mutex
	inflight map[jetstream.Msg]time.Time // the last beat, or the handler's start
}

func newHeartbeat(every time.Duration, log *slog.Logger) *heartbeat {
	return &heartbeat{every: every, log: log, done: make(chan struct{}), ended: make(chan struct{}), inflight: map[jetstream.Msg]time.Time{}}
}

func (h *heartbeat) add(m jetstream.Msg) {
	h.mu.Lock()
	h.inflight[m] = time.Now()
	h.mu.Unlock()
}

func (h *heartbeat) remove(m jetstream.Msg) {
	h.mu.Lock()
	delete(h.inflight, m)
	h.mu.Unlock()
}

func (h *heartbeat) run() {
	defer close(h.ended)
	t := time.NewTicker(max(h.every/2, time.Millisecond))
	defer t.Stop()
	var due []jetstream.Msg
	for {
		select {
		case <-h.done:
			return
		case now := <-t.C:
			due = due[:0]
			h.mu.Lock()
			for m, last := range h.inflight {
				if now.Sub(last) >= h.every {
					h.inflight[m] = now
					due = append(due, m)
				}
			}
			h.mu.Unlock()
			for _, m := range due {
				// A message acked meanwhile refuses the beat; the server
				// would have ignored it anyway.
				if err := m.InProgress(); err != nil && !errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
					h.log.Warn("in-progress heartbeat failed", "err", err)
				}
			}
		}
	}
}

func (h *heartbeat) stop() {
	close(h.done)
	<-h.ended
}
