package bustest

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/schemas"
)

// SampleSubject is the CloudEvents subject (a submission or round id) of
// every sample event.
const SampleSubject = "b0c4e95f426f48e2"

// SampleJobKind is the job kind of the runner.job samples.
const SampleJobKind = "quality"

var sampleDigest = strings.Repeat("ab", 32)

// Sample returns a small payload of type t that validates against the
// type's schema: required fields only, set to the plainest values the schema
// takes (empty collections, zero numbers where allowed). It panics on a type
// outside the catalogue, so a new type without a sample fails the tests that
// walk the catalogue.
func Sample(t events.Type) any {
	spec, ok := events.Lookup(t)
	if !ok {
		panic(fmt.Sprintf("bustest: no sample for unknown type %q", t))
	}
	id := SampleSubject
	ref := events.BundleRef{Store: "jetstream", Bucket: "uploads", Object: id + ".tar", Size: 0, SHA256: sampleDigest, Files: 0}
	switch spec.Verb {
	case "started":
		if spec.Stage != "" {
			return &events.StageStartedData{SubmissionID: id, Stage: spec.Stage, Attempt: 1}
		}
	case "failed":
		if spec.Stage != "" {
			return &events.StageFailedData{SubmissionID: id, Stage: spec.Stage, Reason: "bundle_invalid", Message: "submission.json is missing."}
		}
	case "skipped":
		return &events.StageSkippedData{SubmissionID: id, Stage: spec.Stage, Reason: "not_qualified", Message: "The entry did not qualify."}
	}
	zero := 0.0
	switch t {
	case events.SubmissionReceived:
		return &events.SubmissionReceivedData{SubmissionID: id, Participant: "p", TaskID: "qwen3-8b", Split: "dev", Track: "open",
			Solution: events.DeclaredSolution{Checkpoint: "ckpt"}, Bundle: ref, SubmittedAt: time.Date(2026, 10, 13, 5, 46, 19, 0, time.UTC)}
	case events.BuildCompleted:
		return &events.BuildCompletedData{SubmissionID: id, BundleDigest: sampleDigest, Files: []events.FileDigest{}, Artifact: ref}
	case events.ContractCompleted:
		return &events.ContractCompletedData{SubmissionID: id, DetectedPrecision: "W4A16KV16", Contract: record.Contract{
			ForeignTensors: record.ForeignTensors{Largest: []record.ForeignTensor{}},
			Violations:     []record.Violation{},
		}}
	case events.QualityCompleted:
		return &events.QualityCompletedData{SubmissionID: id, DevQuality: record.Quality{Domains: map[string]record.Domain{}, Tier: "A"}}
	case events.EfficiencyCompleted:
		return &events.EfficiencyCompletedData{SubmissionID: id, Efficiency: map[string]float64{}, AnchorEfficiency: map[string]float64{},
			PeakMemory: map[string]record.PeakMemory{}, AnchorPeakMemory: map[string]record.PeakMemory{},
			Engine: record.Engine{Budget: map[string]record.Budget{}}, GPU: "H200"}
	case events.ScoreCompleted:
		return &events.ScoreCompletedData{SubmissionID: id, Policy: "v1", DevScore: record.Score{Precision: record.Precision{Label: "W4A16KV16"}, Drift: &zero}}
	case events.RunnerJobRequested:
		return &events.RunnerJobRequestedData{JobID: id, Kind: SampleJobKind, Engine: "vllm serve {{.Checkpoint}}", Checkpoint: ref}
	case events.RunnerJobStarted:
		return &events.RunnerJobStartedData{JobID: id, Kind: SampleJobKind, Runner: "r1", GPU: "H200"}
	case events.RunnerJobProgress:
		return &events.RunnerJobProgressData{JobID: id, Kind: SampleJobKind, Phase: "eval"}
	case events.RunnerJobCompleted:
		return &events.RunnerJobCompletedData{JobID: id, Kind: SampleJobKind, Runner: "r1", Result: json.RawMessage(`{}`)}
	case events.RunnerJobFailed:
		return &events.RunnerJobFailedData{JobID: id, Kind: SampleJobKind, Runner: "r1", Reason: "engine_crashed", Message: "The engine exited."}
	case events.RoundStarted:
		return &events.RoundStartedData{RoundID: id, Campaign: "c1", Pod: "pod1", Candidates: []string{}}
	case events.RoundStep:
		return &events.RoundStepData{RoundID: id, Step: 1, Of: 1, Group: "g", Name: "n", Phase: "serve", Status: "done"}
	case events.RoundCompleted:
		return &events.RoundCompletedData{RoundID: id, Campaign: "c1", Entries: []events.RoundEntry{}}
	}
	// A type without a case here carries its sample in its schema's
	// "examples" (see schemas.Example).
	if raw, ok := schemas.Example(string(t)); ok {
		v := spec.New()
		if err := json.Unmarshal(raw, v); err != nil {
			panic(fmt.Sprintf("bustest: the example in the schema of %s does not decode: %v", t, err))
		}
		return v
	}
	panic(fmt.Sprintf("bustest: no sample for %s (add one to the \"examples\" of its schema)", t))
}
