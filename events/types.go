// Package events is the arena's event vocabulary: the CloudEvents types and
// NATS subjects of every pipeline fact, their typed payloads, and the
// deterministic ids that make retries safe.
//
// Every event is a CloudEvents 1.0 event in binary mode on NATS JetStream
// (see package ce for the header codec and package bus for streams,
// publishing and the consume loop). The type is dev.lowbarena.<noun>.<verb>.v1,
// the source names the service, the subject is the submission or round id,
// and the id is derived from the input that caused the event, so a retried
// publish carries the same id and JetStream's Nats-Msg-Id deduplication drops
// it.
package events

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/lowbarena/lowbarena/domain/record"
)

// Type is a CloudEvents type of the arena.
type Type string

// The event types. One constant per event; Catalogue lists them all.
const (
	SubmissionReceived Type = "dev.lowbarena.submission.received.v1"

	BuildStarted   Type = "dev.lowbarena.build.started.v1"
	BuildCompleted Type = "dev.lowbarena.build.completed.v1"
	BuildFailed    Type = "dev.lowbarena.build.failed.v1"

	ContractStarted   Type = "dev.lowbarena.contract.started.v1"
	ContractCompleted Type = "dev.lowbarena.contract.completed.v1"
	ContractFailed    Type = "dev.lowbarena.contract.failed.v1"

	QualityStarted   Type = "dev.lowbarena.quality.started.v1"
	QualityCompleted Type = "dev.lowbarena.quality.completed.v1"
	QualityFailed    Type = "dev.lowbarena.quality.failed.v1"

	EfficiencyStarted   Type = "dev.lowbarena.efficiency.started.v1"
	EfficiencyCompleted Type = "dev.lowbarena.efficiency.completed.v1"
	EfficiencyFailed    Type = "dev.lowbarena.efficiency.failed.v1"

	ScoreStarted   Type = "dev.lowbarena.score.started.v1"
	ScoreCompleted Type = "dev.lowbarena.score.completed.v1"
	ScoreFailed    Type = "dev.lowbarena.score.failed.v1"
	ScoreSkipped   Type = "dev.lowbarena.score.skipped.v1"

	RunnerJobRequested Type = "dev.lowbarena.runner.job.requested.v1"
	RunnerJobStarted   Type = "dev.lowbarena.runner.job.started.v1"
	RunnerJobProgress  Type = "dev.lowbarena.runner.job.progress.v1"
	RunnerJobCompleted Type = "dev.lowbarena.runner.job.completed.v1"
	RunnerJobFailed    Type = "dev.lowbarena.runner.job.failed.v1"

	RoundStarted   Type = "dev.lowbarena.round.started.v1"
	RoundStep      Type = "dev.lowbarena.round.step.v1"
	RoundCompleted Type = "dev.lowbarena.round.completed.v1"
	RoundFailed    Type = "dev.lowbarena.round.failed.v1"
)

// Stream names.
const (
	// StreamArena holds the pipeline facts (limits retention): the event log
	// and source of truth, replayable.
	StreamArena = "ARENA"
	// StreamRunnerJobs holds GPU jobs (work-queue retention): a job is
	// removed when a runner acks it.
	StreamRunnerJobs = "RUNNER_JOBS"
	// StreamDLQ holds poison messages with their reason.
	StreamDLQ = "ARENA_DLQ"
)

// Subject roots of the streams.
const (
	// SubjectRootArena is the first token of every ARENA subject.
	SubjectRootArena = "arena"
	// SubjectRootJobs is the first token of every RUNNER_JOBS subject.
	SubjectRootJobs = "jobs"
	// SubjectRootDLQ is the first token of every ARENA_DLQ subject.
	SubjectRootDLQ = "dlq"
)

// Stages of a submission, in pipeline order. The record lists them in this
// order.
var Stages = []string{"build", "contract", "quality", "efficiency", "score"}

// Spec describes one event type: its stream, the payload's Go type and the
// schema that validates it.
type Spec struct {
	// Type is the CloudEvents type.
	Type Type
	// Noun and Verb are the parts of the type between the prefix and the
	// version: "runner.job" and "requested".
	Noun, Verb string
	// Stream is where events of this type are stored.
	Stream string
	// Stage is the pipeline stage the event belongs to, or "".
	Stage string
	// KindInSubject says the event's subject carries the job kind of its
	// payload (arena.runner.job.completed.<kind>.<id>), so a stage
	// consumes the outcomes of its own jobs only.
	KindInSubject bool
	// New returns a pointer to a zero payload of this type.
	New func() any
}

// Schema is the file name of the payload's JSON Schema in schemas/events.
func (s Spec) Schema() string { return string(s.Type) + ".json" }

// Topic binds an event type to its payload type once: publishing (see
// bus.Emit) takes a T and decoding returns one, so a wrong pairing of
// type and payload fails to compile instead of at schema validation. The
// catalogue's Spec.New comes from the same binding.
type Topic[T any] struct {
	t     Type
	stage string
}

func topic[T any](t Type, stage string) Topic[T] { return Topic[T]{t: t, stage: stage} }

// Type is the topic's CloudEvents type.
func (t Topic[T]) Type() Type { return t.t }

// String is the CloudEvents type.
func (t Topic[T]) String() string { return string(t.t) }

// Spec is the topic's catalogue entry.
func (t Topic[T]) Spec() Spec { return spec(t.t, t.stage, func() any { return new(T) }) }

// Filter is the subject filter that matches every event of the topic.
func (t Topic[T]) Filter() string { return FilterFor(t.t) }

// Event builds an event of the topic (see NewEvent).
func (t Topic[T]) Event(id, source, subject string, data T) (event.Event, error) {
	return NewEvent(id, t.t, source, subject, data)
}

// Decode unmarshals the data of e, which must be of the topic's type.
func (t Topic[T]) Decode(e event.Event) (T, error) {
	var v T
	if Type(e.Type()) != t.t {
		return v, fmt.Errorf("events: decode %s as %s", e.Type(), t.t)
	}
	if err := json.Unmarshal(e.Data(), &v); err != nil {
		return v, fmt.Errorf("events: decode %s data: %w", e.Type(), err)
	}
	return v, nil
}

// StageTopics are the events of one pipeline stage: started, then
// completed with the stage's own payload, or failed with a reason.
type StageTopics[Out any] struct {
	// Name is the stage's name in the record ("build").
	Name      string
	Started   Topic[StageStartedData]
	Completed Topic[Out]
	Failed    Topic[StageFailedData]
}

func stageTopics[Out any](name string, started, completed, failed Type) StageTopics[Out] {
	return StageTopics[Out]{Name: name, Started: topic[StageStartedData](started, name),
		Completed: topic[Out](completed, name), Failed: topic[StageFailedData](failed, name)}
}

// The topics of the arena, one per event type.
var (
	// Submission is what a participant's upload starts.
	Submission = struct{ Received Topic[SubmissionReceivedData] }{topic[SubmissionReceivedData](SubmissionReceived, "")}

	Build      = stageTopics[BuildCompletedData]("build", BuildStarted, BuildCompleted, BuildFailed)
	Contract   = stageTopics[ContractCompletedData]("contract", ContractStarted, ContractCompleted, ContractFailed)
	Quality    = stageTopics[QualityCompletedData]("quality", QualityStarted, QualityCompleted, QualityFailed)
	Efficiency = stageTopics[EfficiencyCompletedData]("efficiency", EfficiencyStarted, EfficiencyCompleted, EfficiencyFailed)
	Score      = stageTopics[ScoreCompletedData]("score", ScoreStarted, ScoreCompleted, ScoreFailed)
	// ScoreSkippedTopic is the score stage's fourth end.
	ScoreSkippedTopic = topic[StageSkippedData](ScoreSkipped, "score")

	// Job are the GPU jobs' events: requested on RUNNER_JOBS, the rest on
	// ARENA.
	Job = struct {
		Requested Topic[RunnerJobRequestedData]
		Started   Topic[RunnerJobStartedData]
		Progress  Topic[RunnerJobProgressData]
		Completed Topic[RunnerJobCompletedData]
		Failed    Topic[RunnerJobFailedData]
	}{
		topic[RunnerJobRequestedData](RunnerJobRequested, ""), topic[RunnerJobStartedData](RunnerJobStarted, ""),
		topic[RunnerJobProgressData](RunnerJobProgress, ""), topic[RunnerJobCompletedData](RunnerJobCompleted, ""),
		topic[RunnerJobFailedData](RunnerJobFailed, ""),
	}

	// Round are a round's events.
	Round = struct {
		Started   Topic[RoundStartedData]
		Step      Topic[RoundStepData]
		Completed Topic[RoundCompletedData]
		Failed    Topic[RoundFailedData]
	}{
		topic[RoundStartedData](RoundStarted, ""), topic[RoundStepData](RoundStep, ""),
		topic[RoundCompletedData](RoundCompleted, ""), topic[RoundFailedData](RoundFailed, ""),
	}
)

// Catalogue lists every event type of the arena, built from the topics.
var Catalogue = []Spec{
	Submission.Received.Spec(),
	Build.Started.Spec(), Build.Completed.Spec(), Build.Failed.Spec(),
	Contract.Started.Spec(), Contract.Completed.Spec(), Contract.Failed.Spec(),
	Quality.Started.Spec(), Quality.Completed.Spec(), Quality.Failed.Spec(),
	Efficiency.Started.Spec(), Efficiency.Completed.Spec(), Efficiency.Failed.Spec(),
	Score.Started.Spec(), Score.Completed.Spec(), Score.Failed.Spec(), ScoreSkippedTopic.Spec(),
	Job.Requested.Spec(), Job.Started.Spec(), Job.Progress.Spec(), Job.Completed.Spec(), Job.Failed.Spec(),
	Round.Started.Spec(), Round.Step.Spec(), Round.Completed.Spec(), Round.Failed.Spec(),
}

var byType = func() map[Type]Spec {
	m := make(map[Type]Spec, len(Catalogue))
	for _, s := range Catalogue {
		m[s.Type] = s
	}
	return m
}()

// ErrUnknownType is returned for an event type outside the catalogue.
var ErrUnknownType = errors.New("events: unknown event type")

// Lookup returns the spec of a type, and false for a type the arena does not
// know.
func Lookup(t Type) (Spec, bool) {
	s, ok := byType[t]
	return s, ok
}

const typePrefix = "dev.lowbarena."

func spec(t Type, stage string, newFn func() any) Spec {
	body := strings.TrimSuffix(strings.TrimPrefix(string(t), typePrefix), ".v1")
	i := strings.LastIndexByte(body, '.')
	s := Spec{Type: t, Noun: body[:i], Verb: body[i+1:], Stream: StreamArena, Stage: stage, New: newFn}
	switch t {
	case RunnerJobRequested:
		s.Stream = StreamRunnerJobs
	case RunnerJobCompleted, RunnerJobFailed:
		s.KindInSubject = true
	}
	return s
}

// ValidID reports whether id can be a submission, round or job id (and so a
// NATS subject token); see record.ValidID.
func ValidID(id string) bool { return record.ValidID(id) }

// Subject returns the NATS subject of an event of type t about subject id
// (the CloudEvents subject). ARENA subjects are arena.<noun>.<verb>.<id>;
// runner jobs go to jobs.<kind>.<id> so that runners can filter by kind.
func Subject(t Type, id string) (string, error) {
	s, ok := byType[t]
	if !ok {
		return "", fmt.Errorf("%w %q", ErrUnknownType, t)
	}
	if !ValidID(id) {
		return "", fmt.Errorf("events: subject id %q is not a valid subject token", id)
	}
	if s.Stream == StreamRunnerJobs {
		return "", fmt.Errorf("events: %s goes to a job subject; use JobSubject", t)
	}
	if s.KindInSubject {
		return "", fmt.Errorf("events: %s carries its job kind in the subject; use JobOutcomeSubject", t)
	}
	return SubjectRootArena + "." + s.Noun + "." + s.Verb + "." + id, nil
}

// JobOutcomeSubject returns the ARENA subject of a job outcome (completed
// or failed) of the given kind: arena.runner.job.<verb>.<kind>.<id>.
func JobOutcomeSubject(t Type, kind, id string) (string, error) {
	s, ok := byType[t]
	if !ok {
		return "", fmt.Errorf("%w %q", ErrUnknownType, t)
	}
	if !s.KindInSubject {
		return "", fmt.Errorf("events: %s carries no job kind in its subject; use Subject", t)
	}
	if !ValidID(kind) || !ValidID(id) {
		return "", fmt.Errorf("events: job kind %q or id %q is not a valid subject token", kind, id)
	}
	return SubjectRootArena + "." + s.Noun + "." + s.Verb + "." + kind + "." + id, nil
}

// JobOutcomeFilters returns the subject filters of the outcomes (completed
// and failed) of one job kind: arena.runner.job.<verb>.<kind>.*, so a
// stage's consumer sees its own kind's outcomes and no other's.
func JobOutcomeFilters(kind string) []string {
	var out []string
	for _, t := range []Type{RunnerJobCompleted, RunnerJobFailed} {
		s := byType[t]
		out = append(out, SubjectRootArena+"."+s.Noun+"."+s.Verb+"."+kind+".*")
	}
	return out
}

// JobSubject returns the RUNNER_JOBS subject of a job of the given kind
// ("quality", "efficiency", ...) for a submission or round id.
func JobSubject(kind, id string) (string, error) {
	if !ValidID(kind) || !ValidID(id) {
		return "", fmt.Errorf("events: job kind %q or id %q is not a valid subject token", kind, id)
	}
	return SubjectRootJobs + "." + kind + "." + id, nil
}

// PinnedJobSubject returns the RUNNER_JOBS subject of a job that must run
// on one pod: jobs.<kind>.<id>.<pod>. Only a runner of that pod consumes it
// (its durable filters on JobPodFilter(pod)); a job without a pod goes to
// JobSubject's three tokens, which every runner shares (JobSharedFilter).
// An empty pod gives JobSubject's subject.
func PinnedJobSubject(kind, id, pod string) (string, error) {
	s, err := JobSubject(kind, id)
	if err != nil || pod == "" {
		return s, err
	}
	if !ValidPod(pod) {
		return "", fmt.Errorf("events: pod %q is not a valid subject token (letters, digits, - and _)", pod)
	}
	return s + "." + pod, nil
}

// ValidPod reports whether pod can name a pod in a job's subject and in
// its runners' durable name: the same alphabet as an id.
func ValidPod(pod string) bool { return ValidID(pod) }

// JobSharedFilter matches the jobs any runner may take (three tokens:
// jobs.<kind>.<id>). RUNNER_JOBS is a work queue, whose consumers' filters
// may not overlap: this one and JobPodFilter's differ in their number of
// tokens, so they never do.
const JobSharedFilter = SubjectRootJobs + ".*.*"

// JobPodFilter matches the jobs pinned to pod (jobs.<kind>.<id>.<pod>);
// the filters of two pods never overlap.
func JobPodFilter(pod string) string { return SubjectRootJobs + ".*.*." + pod }

// FilterFor returns the subject filter that matches every event of type t.
// It panics on a type outside the catalogue: types are constants, so that is
// a programming error, and a filter built from an empty spec ("arena...*")
// is not a valid subject.
func FilterFor(t Type) string {
	s, ok := byType[t]
	if !ok {
		panic(fmt.Sprintf("events: FilterFor of unknown type %q", t))
	}
	if s.Stream == StreamRunnerJobs {
		return SubjectRootJobs + ".>"
	}
	if s.KindInSubject {
		// Every kind: arena.runner.job.<verb>.<kind>.<id>.
		return SubjectRootArena + "." + s.Noun + "." + s.Verb + ".>"
	}
	return SubjectRootArena + "." + s.Noun + "." + s.Verb + ".*"
}

// DeriveID returns the deterministic id of an event caused by another event:
// a hash of the cause's id and a discriminator (usually the output type, and
// for fan-out the item). The same input always yields the same id, so a
// handler that runs twice publishes the same event twice and JetStream keeps
// one (the id is the Nats-Msg-Id).
func DeriveID(causeID string, parts ...string) string {
	h := sha256.New()
	h.Write([]byte(causeID))
	for _, p := range parts {
		h.Write([]byte{0})
		h.Write([]byte(p))
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// Source returns the CloudEvents source of a service: /lowbarena/<service>.
func Source(service string) string { return "/lowbarena/" + service }
