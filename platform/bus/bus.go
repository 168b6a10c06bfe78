package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/observability"
	"github.com/lowbarena/lowbarena/platform/ce"
	"github.com/lowbarena/lowbarena/schemas"
)

const instrumentation = "github.com/lowbarena/lowbarena/platform/bus"

// Bus publishes and consumes the arena's events on one NATS connection.
type Bus struct {
	nc        *nats.Conn
	js        jetstream.JetStream
	validator *schemas.Validator
	log       *slog.Logger
	tracer    trace.Tracer
	tp        trace.TracerProvider
	prop      propagation.TextMapPropagator

	published    metric.Int64Counter
	consumed     metric.Int64Counter
	deadLettered metric.Int64Counter
	handlerTime  metric.Float64Histogram
	// refusedFull counts publishes refused because their stream is at
	// its limit (ErrStoreFull), by stream.
	refusedFull metric.Int64Counter

	// denials turns the server's refusals into errors of the operations
	// that wait on them (see Guard).
	denials *denials

	// attrs caches metric attribute sets by attrKey (see consumedAttrs).
	attrs sync.Map
}

// Option configures a Bus.
type Option func(*options)

type options struct {
	log *slog.Logger
	mp  metric.MeterProvider
	tp  trace.TracerProvider
}

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithMeterProvider sets the meter provider (default the otel global).
func WithMeterProvider(mp metric.MeterProvider) Option { return func(o *options) { o.mp = mp } }

// WithTracerProvider sets the tracer provider (default the otel global).
func WithTracerProvider(tp trace.TracerProvider) Option { return func(o *options) { o.tp = tp } }

// New returns a Bus over nc. It compiles the event schemas once.
func New(nc *nats.Conn, opts ...Option) (*Bus, error) {
	if nc == nil {
		return nil, errors.New("bus: nil NATS connection")
	}
	o := options{log: slog.Default(), mp: otel.GetMeterProvider(), tp: otel.GetTracerProvider()}
	for _, opt := range opts {
		opt(&o)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("bus: jetstream: %w", err)
	}
	v, err := schemas.Default()
	if err != nil {
		return nil, err
	}
	m := o.mp.Meter(instrumentation)
	b := &Bus{nc: nc, js: js, validator: v, log: o.log, tracer: o.tp.Tracer(instrumentation), tp: o.tp, prop: observability.Propagator()}
	if b.published, err = m.Int64Counter("lowbarena.events.published", metric.WithUnit("{event}"),
		metric.WithDescription("Events published, by type.")); err != nil {
		return nil, err
	}
	if b.refusedFull, err = m.Int64Counter("lowbarena.events.refused_full", metric.WithUnit("{event}"),
		metric.WithDescription("Events JetStream refused because their stream is at its limit, by stream.")); err != nil {
		return nil, err
	}
	if b.consumed, err = m.Int64Counter("lowbarena.events.consumed", metric.WithUnit("{event}"),
		metric.WithDescription("Messages handled, by consumer, type and outcome.")); err != nil {
		return nil, err
	}
	if b.deadLettered, err = m.Int64Counter("lowbarena.events.dead_lettered", metric.WithUnit("{event}"),
		metric.WithDescription("Messages sent to the dead-letter stream, by consumer and reason.")); err != nil {
		return nil, err
	}
	if b.handlerTime, err = m.Float64Histogram("lowbarena.events.handler.duration", metric.WithUnit("s"),
		metric.WithDescription("Time handlers took, by consumer and outcome."),
		metric.WithExplicitBucketBoundaries(observability.DurationBuckets...)); err != nil {
		return nil, err
	}
	denied, err := m.Int64Counter("lowbarena.nats.denied", metric.WithUnit("{refusal}"),
		metric.WithDescription("Publishes and subscriptions the NATS server refused this connection, by op."))
	if err != nil {
		return nil, err
	}
	b.denials = watchDenials(nc, denied)
	return b, nil
}

// JetStream returns the JetStream context of the bus.
func (b *Bus) JetStream() jetstream.JetStream { return b.js }

// Conn returns the NATS connection of the bus.
func (b *Bus) Conn() *nats.Conn { return b.nc }

// Validator returns the schema validator the bus uses.
func (b *Bus) Validator() *schemas.Validator { return b.validator }

// Errors of Publish.
var (
	// ErrUnknownType is events.ErrUnknownType, so either matches a type
	// outside the catalogue whichever call refused it.
	ErrUnknownType = events.ErrUnknownType
	ErrTooLarge    = errors.New("bus: event data exceeds the size limit")
)

// SubjectOf returns the NATS subject an event is published to.
func SubjectOf(e event.Event) (string, error) {
	spec, ok := events.Lookup(events.Type(e.Type()))
	if !ok {
		return "", fmt.Errorf("%w %q", ErrUnknownType, e.Type())
	}
	if spec.Stream == events.StreamRunnerJobs || spec.KindInSubject {
		var job struct {
			Kind string `json:"kind"`
			Pod  string `json:"pod"`
		}
		if err := json.Unmarshal(e.Data(), &job); err != nil {
			return "", fmt.Errorf("bus: job kind of %s: %w", e.ID(), err)
		}
		if spec.KindInSubject {
			return events.JobOutcomeSubject(spec.Type, job.Kind, e.Subject())
		}
		// A job that names its pod runs on that pod only (a round's
		// jobs: they are compared with a baseline measured there).
		return events.PinnedJobSubject(job.Kind, e.Subject(), job.Pod)
	}
	return events.Subject(spec.Type, e.Subject())
}

// Publish validates e (CloudEvents attributes, size, and data against the
// type's JSON Schema), sets its dataschema to that schema's URI when it has
// none, injects the caller's trace context, and publishes it with
// Nats-Msg-Id = e.ID(), in binary mode unless ctx asks for structured
// (ce.WithMode; a handler's context carries the mode of its event). A publish of an id the stream has seen within
// its duplicate window is acknowledged with Duplicate set and stores
// nothing: that is what makes handler retries safe.
//
// Validation is done once per payload in the process: the validator
// remembers the bytes that passed (schemas.Validator), so the consumers of
// this process take the event without checking it again.
func (b *Bus) Publish(ctx context.Context, e event.Event) (*jetstream.PubAck, error) {
	spec, ok := events.Lookup(events.Type(e.Type()))
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownType, e.Type())
	}
	if n := len(e.Data()); n > MaxEventBytes {
		return nil, fmt.Errorf("%w: %s is %d bytes, the limit is %d", ErrTooLarge, e.Type(), n, MaxEventBytes)
	}
	if err := b.validator.Validate(e.Type(), e.Data()); err != nil {
		return nil, fmt.Errorf("bus: publish %s %s: %w", e.Type(), e.ID(), err)
	}
	subject, err := SubjectOf(e)
	if err != nil {
		return nil, err
	}
	ctx, span := b.tracer.Start(ctx, "publish "+e.Type(), trace.WithSpanKind(trace.SpanKindProducer))
	if span.IsRecording() {
		span.SetAttributes(semconv.MessagingSystemKey.String("nats"), semconv.MessagingDestinationName(subject),
			semconv.MessagingMessageID(e.ID()), attribute.String("cloudevents.event_subject", e.Subject()))
		span.SetAttributes(eventAttrs(e.Type(), e.Subject(), e.Data())...)
	}
	defer span.End()
	// dataschema names the JSON Schema the data was just validated
	// against; the gateway serves it at the same path (/schemas/...). In
	// binary mode it is written as its header, without parsing the URI
	// into the event first.
	mode := ce.ModeFrom(ctx)
	schemaHeader := ""
	if e.DataSchema() == "" {
		if mode == ce.Binary {
			schemaHeader = schemas.EventSchemaURI(e.Type())
		} else {
			e.SetDataSchema(schemas.EventSchemaURI(e.Type()))
		}
	}
	msg, err := ce.EncodeMode(e, mode)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		return nil, err
	}
	if schemaHeader != "" {
		ce.SetHeader(msg.Header, ce.HeaderDataSchema, schemaHeader)
	}
	msg.Subject = subject
	b.prop.Inject(ctx, observability.HeaderCarrier(msg.Header))
	// A subject this user may not publish to is refused by the server
	// with an async error, never a reply: the guard ends the wait at
	// once with a *DeniedError (code permission_denied).
	var ack *jetstream.PubAck
	err = b.Guard(ctx, func(ctx context.Context) error {
		var err error
		ack, err = b.js.PublishMsg(ctx, msg, jetstream.WithExpectStream(spec.Stream), leaderWaitWait, leaderWaitAttempts)
		return err
	}, subject)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		if Full(err) {
			b.refusedFull.Add(ctx, 1, metric.WithAttributes(attribute.String("stream", spec.Stream)))
			err = storeFull(err, "stream", spec.Stream)
		}
		return nil, fmt.Errorf("bus: publish %s to %s: %w", e.Type(), subject, err)
	}
	if span.IsRecording() {
		span.SetAttributes(attribute.Bool("lowbarena.duplicate", ack.Duplicate), attribute.Int64("lowbarena.stream_seq", int64(ack.Sequence)))
	}
	b.published.Add(ctx, 1, b.publishedAttrs(e.Type(), ack.Duplicate))
	return ack, nil
}

// TracerProvider is the provider of the bus's spans: a service that
// starts a trace of its own (a round's, at its start) takes its tracer
// here, so its spans and the bus's go to the same place.
func (b *Bus) TracerProvider() trace.TracerProvider { return b.tp }

// Emit builds an event of topic t and publishes it. Its arguments come in
// CloudEvents' order: the source, the type (the topic), the subject, the
// data, and last how the id is made, which is most often CausedBy: the id
// derives from the event's cause and the topic's type, so a handler that
// runs again publishes the same id and JetStream drops the repeat. The
// payload's type is the topic's, so a wrong pairing does not compile.
func Emit[T any](ctx context.Context, b *Bus, source string, t events.Topic[T], subject string, data T, id ID) (*jetstream.PubAck, error) {
	eid, err := id.of(t.Type())
	if err != nil {
		return nil, err
	}
	e, err := t.Event(eid, source, subject, data)
	if err != nil {
		return nil, err
	}
	return b.Publish(ctx, e)
}

// ID is how Emit names its event: CausedBy or WithID. The zero ID names
// none, and Emit refuses it.
type ID struct {
	cause, id string
	parts     []string
	derive    bool
}

// CausedBy derives an event's id from its cause (the id of the event
// that caused it, or the id its chain is keyed on: a submission's, a
// round's, a job's), the type of the topic it is emitted on, then parts:
// events.DeriveID(cause, type, parts...).
func CausedBy(cause string, parts ...string) ID {
	return ID{cause: cause, parts: parts, derive: true}
}

// WithID gives an event's id as is: one derived otherwise than CausedBy
// derives it, or a test's.
func WithID(id string) ID { return ID{id: id} }

func (i ID) of(t events.Type) (string, error) {
	switch {
	case i.derive:
		return events.DeriveID(i.cause, append([]string{string(t)}, i.parts...)...), nil
	case i.id != "":
		return i.id, nil
	}
	return "", fmt.Errorf("bus: emit %s without an id (CausedBy or WithID)", t)
}

// PublishNew builds an event with events.NewEvent and publishes it, its
// payload untyped: for a caller that holds the event's type only at run
// time (a test over the catalogue's samples, bustest.Sample). Code that
// knows its topic uses Emit.
func (b *Bus) PublishNew(ctx context.Context, id string, t events.Type, source, subject string, data any) (*jetstream.PubAck, error) {
	e, err := events.NewEvent(id, t, source, subject, data)
	if err != nil {
		return nil, err
	}
	return b.Publish(ctx, e)
}

// A stream without a leader (a node of the cluster restarted, an
// election under way) answers no publish: the client asks again every
// 250 ms for up to 15 s (bounded by the caller's context) before it gives
// ErrNoStreamResponse, instead of nats.go's default of half a second.
// Asking again is safe: nobody received the message, and its Nats-Msg-Id
// would deduplicate it if anybody had. Without this, a runner's job
// burned its deliveries on "no response from stream" while the cluster
// elected a leader, and was dead-lettered (TestCluster).
var (
	leaderWaitWait     = jetstream.WithRetryWait(250 * time.Millisecond)
	leaderWaitAttempts = jetstream.WithRetryAttempts(60)
)

// publishedAttrs returns the metric attributes of a published event, made
// once per type and duplicate flag.
func (b *Bus) publishedAttrs(typ string, duplicate bool) metric.MeasurementOption {
	k := attrKey{"published", typ, strconv.FormatBool(duplicate), ""}
	if a, ok := b.attrs.Load(k); ok {
		return a.(metric.MeasurementOption)
	}
	a := metric.WithAttributeSet(attribute.NewSet(attribute.String("type", typ), attribute.Bool("duplicate", duplicate)))
	b.attrs.Store(k, a)
	return a
}
