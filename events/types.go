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
	"errors"
	"fmt"
	"strings"

	"github.com/lowbarena/lowbarena/services/domain/record"
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
	// New returns a pointer to a zero payload of this type.
	New func() any
}

// Schema is the file name of the payload's JSON Schema in schemas/events.
func (s Spec) Schema() string { return string(s.Type) + ".json" }

// Catalogue lists every event type of the arena.
var Catalogue = []Spec{
	spec(SubmissionReceived, "", func() any { return new(SubmissionReceivedData) }),
	spec(BuildStarted, "build", func() any { return new(StageStartedData) }),
	spec(BuildCompleted, "build", func() any { return new(BuildCompletedData) }),
	spec(BuildFailed, "build", func() any { return new(StageFailedData) }),
	spec(ContractStarted, "contract", func() any { return new(StageStartedData) }),
	spec(ContractCompleted, "contract", func() any { return new(ContractCompletedData) }),
	spec(ContractFailed, "contract", func() any { return new(StageFailedData) }),
	spec(QualityStarted, "quality", func() any { return new(StageStartedData) }),
	spec(QualityCompleted, "quality", func() any { return new(QualityCompletedData) }),
	spec(QualityFailed, "quality", func() any { return new(StageFailedData) }),
	spec(EfficiencyStarted, "efficiency", func() any { return new(StageStartedData) }),
	spec(EfficiencyCompleted, "efficiency", func() any { return new(EfficiencyCompletedData) }),
	spec(EfficiencyFailed, "efficiency", func() any { return new(StageFailedData) }),
	spec(ScoreStarted, "score", func() any { return new(StageStartedData) }),
	spec(ScoreCompleted, "score", func() any { return new(ScoreCompletedData) }),
	spec(ScoreFailed, "score", func() any { return new(StageFailedData) }),
	spec(ScoreSkipped, "score", func() any { return new(StageSkippedData) }),
	spec(RunnerJobRequested, "", func() any { return new(RunnerJobRequestedData) }),
	spec(RunnerJobStarted, "", func() any { return new(RunnerJobStartedData) }),
	spec(RunnerJobProgress, "", func() any { return new(RunnerJobProgressData) }),
	spec(RunnerJobCompleted, "", func() any { return new(RunnerJobCompletedData) }),
	spec(RunnerJobFailed, "", func() any { return new(RunnerJobFailedData) }),
	spec(RoundStarted, "", func() any { return new(RoundStartedData) }),
	spec(RoundStep, "", func() any { return new(RoundStepData) }),
	spec(RoundCompleted, "", func() any { return new(RoundCompletedData) }),
	spec(RoundFailed, "", func() any { return new(RoundFailedData) }),
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
	if t == RunnerJobRequested {
		s.Stream = StreamRunnerJobs
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
	return SubjectRootArena + "." + s.Noun + "." + s.Verb + "." + id, nil
}

// JobSubject returns the RUNNER_JOBS subject of a job of the given kind
// ("quality", "efficiency", ...) for a submission or round id.
func JobSubject(kind, id string) (string, error) {
	if !ValidID(kind) || !ValidID(id) {
		return "", fmt.Errorf("events: job kind %q or id %q is not a valid subject token", kind, id)
	}
	return SubjectRootJobs + "." + kind + "." + id, nil
}

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
