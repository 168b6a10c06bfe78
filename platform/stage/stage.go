// Package stage is the stage kit: a pipeline stage is declared once (its
// input topic, its output topics, its consumer settings and what it does)
// and the kit owns the protocol every stage shares.
//
// For each input event the kit decodes the payload, publishes
// <stage>.started, runs the stage, and publishes <stage>.completed with
// the stage's output or <stage>.failed with a refusal's code, message and
// detail. Every output's id derives from the input event's id and the
// output's type (events.DeriveID), so a redelivered input republishes the
// same ids and JetStream keeps one of each: started is published once per
// input however often it is delivered.
//
// Ack semantics, per input:
//   - a payload that does not decode: Poison (dead-lettered, bad_payload);
//   - a *Refusal: <stage>.failed, then Ack (the participant must act, not
//     the arena);
//   - a *Wait (RetryAfter): Retry after its delay, a deliberate wait;
//   - any other error: Retry with backoff, dead-lettered after MaxDeliver;
//   - success: <stage>.completed, then Ack;
//   - a publish that fails: Retry (the ids make the next try safe);
//   - ErrSettled (the outcome was published before): Ack, nothing
//     published.
//
// Settled, when a stage sets it, runs after the outcome is published.
//
// GPU stages are job stages (see Job): their input becomes runner jobs and
// the runner's outcome of each becomes the stage's.
package stage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/observability"
	"github.com/lowbarena/lowbarena/platform/bus"
)

// Refusal is an input the stage will not take: it becomes <stage>.failed
// with Code (stable, snake_case, for machines), Message (a sentence the
// participant can act on) and Detail (structured context: the contract
// block of a refused contract, an engine's log tail), and the input is
// acked.
type Refusal struct {
	Code    reason.Code
	Message string
	Detail  json.RawMessage
}

func (r *Refusal) Error() string { return string(r.Code) + ": " + r.Message }

// Refuse returns a refusal with a code and a sentence.
func Refuse(code reason.Code, message string) *Refusal { return &Refusal{Code: code, Message: message} }

// Refusef returns a refusal with a code and a formatted sentence.
func Refusef(code reason.Code, format string, args ...any) *Refusal {
	return &Refusal{Code: code, Message: fmt.Sprintf(format, args...)}
}

// WithDetail returns r with v, marshalled, as its detail; a v that does
// not marshal leaves the detail empty.
func (r *Refusal) WithDetail(v any) *Refusal {
	out := *r
	if raw, err := json.Marshal(v); err == nil {
		out.Detail = raw
	}
	return &out
}

// AsRefusal returns the refusal in err's chain, or nil.
func AsRefusal(err error) *Refusal {
	var r *Refusal
	if errors.As(err, &r) {
		return r
	}
	return nil
}

// Wait is a deliberate wait: the input cannot be taken yet (a reference
// still being computed) and is redelivered after After.
type Wait struct {
	After time.Duration
	Err   error
}

func (w *Wait) Error() string { return fmt.Sprintf("waiting %s: %v", w.After, w.Err) }

func (w *Wait) Unwrap() error { return w.Err }

// RetryAfter returns a Wait of d for err.
func RetryAfter(d time.Duration, err error) error { return &Wait{After: d, Err: err} }

// outcome turns a stage's error into the consume loop's outcome when it is
// not a refusal.
func outcome(err error) bus.Outcome {
	var w *Wait
	if errors.As(err, &w) {
		return bus.Retry(w.After, w.Err)
	}
	return bus.Retry(0, err)
}

// Stage is a pipeline stage with one input: the kit consumes Input, runs
// Run and publishes Output's events.
type Stage[In, Out any] struct {
	// Input is the topic the stage consumes.
	Input events.Topic[In]
	// Output are the stage's own events; Output.Name is the stage's name.
	Output events.StageTopics[Out]
	// Consumer is the stage's durable consumer; its Subjects default to
	// Input's filter and its Name to the stage's name.
	Consumer bus.ConsumerConfig
	// Source is the CloudEvents source of the stage's events; default
	// events.Source(Output.Name).
	Source string
	// Run takes one input to the stage's output, or to an error: a
	// *Refusal, a *Wait, or anything else (a retry).
	Run func(ctx context.Context, in In) (Out, error)
	// Describe, when set, names what the log line of a completed input
	// says of its output (slog key-value pairs).
	Describe func(out Out) []any
	// Settled, when set, runs once the input's outcome is published
	// (completed or failed), or Run found it published before
	// (ErrSettled), and before the input is acked: it lets go of what
	// only this input needed (the build deletes the upload). Its
	// failure is the hook's to log; the input is acked all the same.
	Settled func(ctx context.Context, in In)
}

// ErrSettled is what Run returns, wrapped, for an input whose outcome was
// published before (a redelivery after the outcome was published and what
// the input needed was let go of): the kit acks it, publishes nothing and
// runs Settled again.
var ErrSettled = errors.New("stage: the input's outcome was published before")

// Name is the stage's name.
func (s Stage[In, Out]) Name() string { return s.Output.Name }

// ConsumerConfig is the stage's consumer with its defaults filled in.
func (s Stage[In, Out]) ConsumerConfig() bus.ConsumerConfig {
	c := s.Consumer
	if c.Name == "" {
		c.Name = s.Output.Name
	}
	if len(c.Subjects) == 0 {
		c.Subjects = []string{s.Input.Filter()}
	}
	return c
}

func (s Stage[In, Out]) source() string {
	if s.Source != "" {
		return s.Source
	}
	return events.Source(s.Output.Name)
}

// Bind binds the stage to a bus, ready to run.
func (s Stage[In, Out]) Bind(b *bus.Bus, log *slog.Logger) *Bound {
	k := newKit(b, log, s.Output.Name, s.source())
	h := func(ctx context.Context, d *bus.Delivery) bus.Outcome { return handleStage(ctx, k, s, d) }
	return &Bound{name: s.Output.Name, bus: b, consumers: []Consumer{{Config: s.ConsumerConfig(), Handle: h}}}
}

func handleStage[In, Out any](ctx context.Context, k *kit, s Stage[In, Out], d *bus.Delivery) bus.Outcome {
	trace.SpanFromContext(ctx).SetAttributes(bus.AttrStage.String(k.name))
	in, err := s.Input.Decode(d.Event)
	if err != nil {
		return bus.Poison(reason.BadPayload, err)
	}
	id, cause := d.Event.Subject(), d.Event.ID()
	if err := started(ctx, k, s.Output, cause, id, d.NumDelivered); err != nil {
		return bus.Retry(0, err)
	}
	t0 := time.Now()
	out, err := s.Run(ctx, in)
	if errors.Is(err, ErrSettled) {
		k.record(ctx, "settled", t0)
		k.log.Info("settled before: acked", "submission", id, "attempt", d.NumDelivered)
		s.settled(ctx, in)
		return bus.Ack()
	}
	if err != nil {
		o := settle(ctx, k, s.Output, cause, id, t0, err)
		// Invariant: Settled runs only after the outcome (here the
		// refusal's failed) is stored; a refusal whose publish failed
		// is retried, and keeps what it needs.
		if AsRefusal(err) != nil && o.IsAck() {
			s.settled(ctx, in)
		}
		return o
	}
	if _, err := bus.Emit(ctx, k.bus, k.source, s.Output.Completed, id, out, bus.CausedBy(cause)); err != nil {
		return bus.Retry(0, err)
	}
	var attrs []any
	if s.Describe != nil {
		attrs = s.Describe(out)
	}
	k.done(ctx, id, t0, attrs)
	s.settled(ctx, in)
	return bus.Ack()
}

func (s Stage[In, Out]) settled(ctx context.Context, in In) {
	if s.Settled != nil {
		s.Settled(ctx, in)
	}
}

// Consumer is one consumer loop of a bound stage.
type Consumer struct {
	Config bus.ConsumerConfig
	Handle bus.Handler
}

// Bound is a stage bound to a bus: its consumers, ready to run.
type Bound struct {
	name      string
	bus       *bus.Bus
	consumers []Consumer
}

// Name is the stage's name.
func (b *Bound) Name() string { return b.name }

// Consumers are the stage's consumer loops: the one of a stage, the input
// and result loops of a job stage.
func (b *Bound) Consumers() []Consumer { return b.consumers }

// Run runs every consumer of the stage until ctx ends (then drains them)
// or one fails, which stops the others.
func (b *Bound) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	errs := make(chan error, len(b.consumers))
	for _, c := range b.consumers {
		go func() {
			err := b.bus.Consume(ctx, c.Config, c.Handle)
			if err != nil {
				err = fmt.Errorf("stage %s: consumer %s: %w", b.name, c.Config.Name, err)
				cancel(err)
			}
			errs <- err
		}()
	}
	var first error
	for range b.consumers {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// kit is what the stage protocol shares: the bus, the log and the
// stage's metrics.
type kit struct {
	bus      *bus.Bus
	log      *slog.Logger
	name     string
	source   string
	outcomes metric.Int64Counter
	duration metric.Float64Histogram
}

const instrumentation = "github.com/lowbarena/lowbarena/platform/stage"

func newKit(b *bus.Bus, log *slog.Logger, name, source string) *kit {
	if log == nil {
		log = slog.Default()
	}
	m := otel.GetMeterProvider().Meter(instrumentation)
	k := &kit{bus: b, log: log.With("stage", name), name: name, source: source}
	// The instruments are created once per meter and name; an error
	// leaves a no-op instrument, never a stage that cannot run.
	k.outcomes, _ = m.Int64Counter("lowbarena.stage.outcomes", metric.WithUnit("{input}"),
		metric.WithDescription("Inputs a stage ended, by stage and outcome (completed, failed, retry)."))
	k.duration, _ = m.Float64Histogram("lowbarena.stage.duration", metric.WithUnit("s"),
		metric.WithDescription("Time a stage took per input, by stage and outcome."),
		metric.WithExplicitBucketBoundaries(observability.DurationBuckets...))
	return k
}

func (k *kit) record(ctx context.Context, outcome string, t0 time.Time) {
	// The consumer's span (the bus's process span) says what the stage
	// made of its input, beside how the message was settled.
	trace.SpanFromContext(ctx).SetAttributes(bus.AttrStage.String(k.name), bus.AttrStageOutcome.String(outcome))
	attrs := metric.WithAttributes(attribute.String("stage", k.name), attribute.String("outcome", outcome))
	if k.outcomes != nil {
		k.outcomes.Add(ctx, 1, attrs)
	}
	if k.duration != nil {
		k.duration.Record(ctx, time.Since(t0).Seconds(), attrs)
	}
}

// started publishes <stage>.started for an input; its id derives from the
// input, so it is stored once however often the input is delivered.
func started[Out any](ctx context.Context, k *kit, out events.StageTopics[Out], cause, id string, attempt uint64) error {
	data := events.StageStartedData{SubmissionID: id, Stage: out.Name, Attempt: int(attempt)}
	_, err := bus.Emit(ctx, k.bus, k.source, out.Started, id, data, bus.CausedBy(cause))
	return err
}

func (k *kit) done(ctx context.Context, id string, t0 time.Time, attrs []any) {
	k.record(ctx, "completed", t0)
	k.log.Info("completed", append([]any{"submission", id, "took", time.Since(t0).Round(time.Millisecond)}, attrs...)...)
}

// refuse publishes <stage>.failed with the refusal, its id derived from
// cause.
func refuse[Out any](ctx context.Context, k *kit, out events.StageTopics[Out], cause, id string, t0 time.Time, r *Refusal) bus.Outcome {
	data := events.StageFailedData{SubmissionID: id, Stage: out.Name, Reason: string(r.Code), Message: r.Message, Detail: r.Detail}
	if _, err := bus.Emit(ctx, k.bus, k.source, out.Failed, id, data, bus.CausedBy(cause)); err != nil {
		return bus.Retry(0, err)
	}
	k.record(ctx, "failed", t0)
	// A refusal is the participant's to act on, not the arena's failure,
	// but the span says the stage failed and why.
	span := trace.SpanFromContext(ctx)
	span.SetAttributes(bus.AttrReason.String(string(r.Code)))
	span.SetStatus(codes.Error, string(r.Code))
	k.log.Info("refused", "submission", id, "reason", r.Code, "message", r.Message)
	return bus.Ack()
}

// settle turns a stage's error into its outcome: a refusal is published,
// anything else retried.
func settle[Out any](ctx context.Context, k *kit, out events.StageTopics[Out], cause, id string, t0 time.Time, err error) bus.Outcome {
	if r := AsRefusal(err); r != nil {
		return refuse(ctx, k, out, cause, id, t0, r)
	}
	k.record(ctx, "retry", t0)
	k.log.Debug("retry", "submission", id, "err", err)
	return outcome(err)
}
