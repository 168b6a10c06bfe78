package stage

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/bus"
)

// Job is one runner job a job stage asks for.
type Job struct {
	// Request is the job; its Kind is the stage's (filled in when empty).
	// The request event's id derives from its JobID (bus.CausedBy), and a
	// job's id derives from what it measures, so however often its cause
	// arrives one job is queued.
	Request events.RunnerJobRequestedData
}

// Outcome is the runner's outcome of one job: exactly one of Completed
// and Failed is set.
type Outcome struct {
	Completed *events.RunnerJobCompletedData
	Failed    *events.RunnerJobFailedData
}

// JobID is the job's id.
func (o Outcome) JobID() string {
	if o.Completed != nil {
		return o.Completed.JobID
	}
	return o.Failed.JobID
}

// Kind is the job's kind.
func (o Outcome) Kind() string {
	if o.Completed != nil {
		return o.Completed.Kind
	}
	return o.Failed.Kind
}

// SubmissionID is the submission the job measured, "" for a shared job.
func (o Outcome) SubmissionID() string {
	if o.Completed != nil {
		return o.Completed.SubmissionID
	}
	return o.Failed.SubmissionID
}

// DecodeOutcome decodes a runner.job.completed or runner.job.failed event.
func DecodeOutcome(d *bus.Delivery) (Outcome, error) {
	switch events.Type(d.Event.Type()) {
	case events.RunnerJobCompleted:
		c, err := events.Job.Completed.Decode(d.Event)
		return Outcome{Completed: &c}, err
	case events.RunnerJobFailed:
		f, err := events.Job.Failed.Decode(d.Event)
		return Outcome{Failed: &f}, err
	}
	return Outcome{}, fmt.Errorf("stage: %s is not a job outcome", d.Event.Type())
}

// JobStage is a GPU stage: each input becomes runner jobs of Kind, and the
// runner's outcome of each job becomes the stage's outcome.
//
// The stage has two durable consumers: Requests on Input, Results on the
// outcomes of Kind (their subjects carry the kind, so the stage receives
// only its own jobs' outcomes). Ids: started, and a failed of a refused
// input, derive from the input event; completed and failed from a job's
// outcome derive from the job id, so a job whose outcome arrives twice
// ends the stage once.
type JobStage[In, Out any] struct {
	// Input is the topic the stage consumes.
	Input events.Topic[In]
	// Output are the stage's own events; Output.Name is its name.
	Output events.StageTopics[Out]
	// Kind is the job kind the stage asks the runner for.
	Kind string
	// Requests and Results are the two consumers; Subjects and Name
	// default to Input's filter and the stage's name, and to Kind's
	// outcomes and "<name>-results".
	Requests, Results bus.ConsumerConfig
	// Source is the events' source; default events.Source(Output.Name).
	Source string
	// Jobs builds the jobs an input needs (a *Refusal fails the stage).
	Jobs func(ctx context.Context, in In) ([]Job, error)
	// Result turns a completed job of a submission into the stage's
	// output, or into an error (a *Refusal, a *Wait, a retry).
	Result func(ctx context.Context, c events.RunnerJobCompletedData) (Out, error)
	// Failure, when set, turns a failed job of a submission into the
	// stage's refusal; by default the runner's reason and message pass on,
	// with its log tail, pod and runner as the detail.
	Failure func(f events.RunnerJobFailedData) *Refusal
	// Shared keeps the outcome of a job that belongs to no submission (a
	// reference computed once for many); nil acks such outcomes.
	Shared func(ctx context.Context, o Outcome) error
	// Describe names what the log line of a completed submission says of
	// its output.
	Describe func(out Out) []any
}

// Name is the stage's name.
func (s JobStage[In, Out]) Name() string { return s.Output.Name }

func (s JobStage[In, Out]) source() string {
	if s.Source != "" {
		return s.Source
	}
	return events.Source(s.Output.Name)
}

// RequestsConfig is the request consumer with its defaults filled in.
func (s JobStage[In, Out]) RequestsConfig() bus.ConsumerConfig {
	c := s.Requests
	if c.Name == "" {
		c.Name = s.Output.Name
	}
	if len(c.Subjects) == 0 {
		c.Subjects = []string{s.Input.Filter()}
	}
	return c
}

// ResultsConfig is the result consumer with its defaults filled in.
func (s JobStage[In, Out]) ResultsConfig() bus.ConsumerConfig {
	c := s.Results
	if c.Name == "" {
		c.Name = s.Output.Name + "-results"
	}
	if len(c.Subjects) == 0 {
		c.Subjects = events.JobOutcomeFilters(s.Kind)
	}
	return c
}

// Bind binds the stage to a bus, ready to run.
func (s JobStage[In, Out]) Bind(b *bus.Bus, log *slog.Logger) *Bound {
	k := newKit(b, log, s.Output.Name, s.source())
	return &Bound{name: s.Output.Name, bus: b, consumers: []Consumer{
		{Config: s.RequestsConfig(), Handle: func(ctx context.Context, d *bus.Delivery) bus.Outcome { return handleRequest(ctx, k, s, d) }},
		{Config: s.ResultsConfig(), Handle: func(ctx context.Context, d *bus.Delivery) bus.Outcome { return handleResult(ctx, k, s, d) }},
	}}
}

func handleRequest[In, Out any](ctx context.Context, k *kit, s JobStage[In, Out], d *bus.Delivery) bus.Outcome {
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
	jobs, err := s.Jobs(ctx, in)
	if err != nil {
		return settle(ctx, k, s.Output, cause, id, t0, err)
	}
	for _, j := range jobs {
		req := j.Request
		if req.Kind == "" {
			req.Kind = s.Kind
		}
		if req.Kind != s.Kind {
			// A stage that asks for another kind would never see the
			// outcome: a programming error, never a retry loop.
			return bus.Poison(reason.JobKindMismatch, fmt.Errorf("stage %s (kind %s) built a %s job", s.Output.Name, s.Kind, req.Kind))
		}
		if _, err := bus.Emit(ctx, k.bus, k.source, events.Job.Requested, req.JobID, req, bus.CausedBy(req.JobID)); err != nil {
			return bus.Retry(0, err)
		}
		k.log.Info("job requested", "submission", id, "job", req.JobID, "kind", req.Kind)
	}
	return bus.Ack()
}

func handleResult[In, Out any](ctx context.Context, k *kit, s JobStage[In, Out], d *bus.Delivery) bus.Outcome {
	trace.SpanFromContext(ctx).SetAttributes(bus.AttrStage.String(k.name))
	o, err := DecodeOutcome(d)
	if err != nil {
		return bus.Poison(reason.BadPayload, err)
	}
	id, job := o.SubmissionID(), o.JobID()
	t0 := time.Now()
	if id == "" {
		if s.Shared == nil {
			return bus.Ack()
		}
		if err := s.Shared(ctx, o); err != nil {
			return outcome(err)
		}
		return bus.Ack()
	}
	if !events.ValidID(id) {
		return bus.Poison(reason.BadSubject, fmt.Errorf("job %s names submission %q", job, id))
	}
	if o.Failed != nil {
		r := defaultFailure(*o.Failed)
		if s.Failure != nil {
			r = s.Failure(*o.Failed)
		}
		return refuse(ctx, k, s.Output, job, id, t0, r)
	}
	out, err := s.Result(ctx, *o.Completed)
	if err != nil {
		return settle(ctx, k, s.Output, job, id, t0, err)
	}
	if _, err := bus.Emit(ctx, k.bus, k.source, s.Output.Completed, id, out, bus.CausedBy(job)); err != nil {
		return bus.Retry(0, err)
	}
	var attrs []any
	if s.Describe != nil {
		attrs = s.Describe(out)
	}
	k.done(ctx, id, t0, append([]any{"job", job}, attrs...))
	return bus.Ack()
}

// defaultFailure passes a runner's failure on: its reason and message,
// with the engine's log tail, the pod, the runner and the GPU-hours spent
// as the detail.
func defaultFailure(f events.RunnerJobFailedData) *Refusal {
	r := Refuse(reason.Code(f.Reason), f.Message)
	if f.LogTail != "" {
		if raw, err := json.Marshal(map[string]any{"log_tail": f.LogTail, "pod": f.Pod, "runner": f.Runner, "gpu_hours": f.GPUHours}); err == nil {
			r.Detail = raw
		}
	}
	return r
}
