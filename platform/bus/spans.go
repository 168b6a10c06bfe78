package bus

import (
	"context"
	"crypto/sha256"
	"encoding/json"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/ce"
)

// Span attributes a cluster operator queries the arena's traces by. They
// are set on every publish and process span whose event names them, so
// "every span of submission X" or "the failed stages on pod Y" is one
// filter in a trace backend.
const (
	// AttrEventType is the CloudEvents type of the event published or
	// processed (submission.received, runner.job.completed, ...).
	AttrEventType = attribute.Key("lowbarena.event_type")
	// AttrSubmission is the submission the event is about (its subject,
	// or the submission_id of a runner job's event).
	AttrSubmission = attribute.Key("lowbarena.submission_id")
	// AttrStage is the stage of a stage event, or the stage a kit's
	// consumer runs (set by platform/stage).
	AttrStage = attribute.Key("lowbarena.stage")
	// AttrJob is a runner job's id.
	AttrJob = attribute.Key("lowbarena.job_id")
	// AttrJobKind is a runner job's kind.
	AttrJobKind = attribute.Key("lowbarena.job_kind")
	// AttrRound is the round an event belongs to.
	AttrRound = attribute.Key("lowbarena.round_id")
	// AttrPod is the pod a runner job ran on (or is pinned to).
	AttrPod = attribute.Key("lowbarena.pod")
	// AttrOutcome is how the consume loop settled a message: ack, retry,
	// dead_lettered or shutdown; a stage's own outcome (completed,
	// failed, retry) is AttrStageOutcome.
	AttrOutcome = attribute.Key("lowbarena.outcome")
	// AttrStageOutcome is what a stage made of its input: completed,
	// failed (a refusal, with AttrReason) or retry.
	AttrStageOutcome = attribute.Key("lowbarena.stage_outcome")
	// AttrReason is a refusal's or a dead-letter's stable code.
	AttrReason = attribute.Key("lowbarena.reason")
)

// jobFields are the payload fields of a runner job's events that name
// what the job is about.
type jobFields struct {
	SubmissionID string `json:"submission_id"`
	Kind         string `json:"kind"`
	Pod          string `json:"pod"`
	RoundID      string `json:"round_id"`
}

// eventAttrs returns the span attributes of an event of type typ with
// subject subject and payload data. A stage's event and submission.
// received name their submission by their subject and their stage by
// their type, a round's event its round by its subject: nothing is
// decoded. A runner job's event (subject: the job) names its submission,
// kind and pod in its payload, which is decoded once more (see
// BenchmarkEventAttrs); it is called only for a span that records.
func eventAttrs(typ, subject string, data []byte) []attribute.KeyValue {
	attrs := []attribute.KeyValue{AttrEventType.String(typ)}
	spec, ok := events.Lookup(events.Type(typ))
	if !ok || subject == "" {
		return attrs
	}
	switch {
	case spec.Stage != "":
		return append(attrs, AttrSubmission.String(subject), AttrStage.String(spec.Stage))
	case spec.Noun == "submission":
		return append(attrs, AttrSubmission.String(subject))
	case spec.Noun == "round":
		return append(attrs, AttrRound.String(subject))
	case spec.Noun == "runner.job":
		attrs = append(attrs, AttrJob.String(subject))
		var f jobFields
		_ = json.Unmarshal(data, &f) // a payload that does not decode names nothing more
		for _, kv := range []struct {
			k attribute.Key
			v string
		}{{AttrSubmission, f.SubmissionID}, {AttrJobKind, f.Kind}, {AttrPod, f.Pod}, {AttrRound, f.RoundID}} {
			if kv.v != "" {
				attrs = append(attrs, kv.k.String(kv.v))
			}
		}
	}
	return attrs
}

// untracedParent gives the consumers of a message published without trace
// context (by `arena submit` over NATS, or a client outside the arena
// with no tracer) one trace all the same: a remote parent whose trace and
// span ids derive from the message's id (Nats-Msg-Id, the event's id), so
// every consumer of the event, in any process, and everything they
// publish after it, land in the same trace under the same parent. That
// parent was never recorded: a trace backend shows it as the trace's
// missing root. A message without an id is left a root of its own.
func untracedParent(ctx context.Context, h nats.Header) context.Context {
	id := h.Get(ce.HeaderMsgID)
	if id == "" {
		return ctx
	}
	sum := sha256.Sum256([]byte("lowbarena untraced event " + id))
	var tid trace.TraceID
	var sid trace.SpanID
	copy(tid[:], sum[:16])
	copy(sid[:], sum[16:24])
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true})
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

// UntracedTraceID is the trace id the consumers of an event published
// without trace context share (see untracedParent): its id is the
// event's.
func UntracedTraceID(eventID string) trace.TraceID {
	sc := trace.SpanContextFromContext(untracedParent(context.Background(), nats.Header{ce.HeaderMsgID: {eventID}}))
	return sc.TraceID()
}
