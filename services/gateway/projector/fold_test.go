package projector

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/events"
)

const sub = "b0c4e95f426f48e2"

var t0 = time.Date(2026, 10, 13, 5, 46, 19, 0, time.UTC)

func ev(t *testing.T, typ events.Type, n int, data any) event.Event {
	t.Helper()
	e, err := events.NewEvent(events.DeriveID(sub, string(typ)), typ, events.Source("test"), sub, data)
	require.NoError(t, err)
	e.SetTime(t0.Add(time.Duration(n) * time.Minute))
	return e
}

func received(t *testing.T) event.Event {
	return ev(t, events.SubmissionReceived, 0, events.SubmissionReceivedData{
		SubmissionID: sub, Participant: "trial-opus-5.5", Agent: "trial-opus-5.5", TaskID: "qwen3-8b", Split: "dev", Track: "engine",
		Solution:    events.DeclaredSolution{Checkpoint: "lowbarena-trial-fp8-v1", Method: "FP8", Precision: "W8A8KV4"},
		Bundle:      events.BundleRef{Store: "jetstream", Bucket: "uploads", Object: sub + ".tar.gz", Size: 10, SHA256: strings.Repeat("a", 64), Files: 2},
		SubmittedAt: t0,
	})
}

func started(t *testing.T, stage string, n int) event.Event {
	return ev(t, events.Type("dev.lowbarena."+stage+".started.v1"), n, events.StageStartedData{SubmissionID: sub, Stage: stage, Attempt: 1})
}

func statuses(r *record.Submission) []string {
	out := []string{r.Status}
	for _, s := range r.Stages {
		out = append(out, s.Name+":"+s.Status)
	}
	return out
}

// want is a record's expected statuses: the record's status, then every
// stage of events.Stages in order, each named one with its own status and
// the others with rest (so a stage added to the catalogue needs no change
// here).
func want(status, rest string, named ...string) []string {
	own := map[string]string{}
	for _, n := range named {
		stage, st, _ := strings.Cut(n, ":")
		own[stage] = st
	}
	out := []string{status}
	for _, stage := range events.Stages {
		st, ok := own[stage]
		if !ok {
			st = rest
		}
		out = append(out, stage+":"+st)
	}
	return out
}

func foldAll(t *testing.T, evs ...event.Event) (*record.Submission, []bool) {
	t.Helper()
	var rec *record.Submission
	var changed []bool
	for _, e := range evs {
		next, ch, err := Fold(rec, e)
		require.NoError(t, err, e.Type())
		rec = next
		changed = append(changed, ch)
	}
	return rec, changed
}

func TestFold(t *testing.T) {
	buildDone := func(t *testing.T) event.Event {
		return ev(t, events.BuildCompleted, 2, events.BuildCompletedData{SubmissionID: sub, BundleDigest: "ab12", Files: []events.FileDigest{{Path: "config.json", Size: 2, SHA256: "cd"}}, Bytes: 2,
			Artifact: events.BundleRef{Store: "jetstream", Bucket: "artifacts", Object: "x", SHA256: "ab12"}})
	}
	contractFailed := func(t *testing.T) event.Event {
		c := record.Contract{OK: false, DetectedPrecision: "W16A16KV8", DeclaredPrecision: "W4A4KV8", WeightBits: 16,
			Violations: []record.Violation{{Code: "precision_wider_than_declared", Message: "W4A4KV8 declared · the service reads W16A16KV8"}}}
		detail, err := json.Marshal(c)
		require.NoError(t, err)
		return ev(t, events.ContractFailed, 4, events.StageFailedData{SubmissionID: sub, Stage: "contract", Reason: "precision_wider_than_declared",
			Message: "W4A4KV8 declared · the service reads W16A16KV8", Detail: detail})
	}
	tests := []struct {
		name    string
		events  func(t *testing.T) []event.Event
		want    []string
		changed []bool
		check   func(t *testing.T, r *record.Submission)
	}{
		{"received starts every stage pending", func(t *testing.T) []event.Event { return []event.Event{received(t)} },
			want("running", "pending"), []bool{true},
			func(t *testing.T, r *record.Submission) {
				require.Equal(t, "qwen3-8b", r.TaskID)
				require.True(t, r.Solution.DeclaredPrecision)
				require.Equal(t, t0, r.CreatedAt)
				require.Nil(t, r.Error)
			}},
		{"build runs then completes", func(t *testing.T) []event.Event {
			return []event.Event{received(t), started(t, "build", 1), buildDone(t)}
		},
			want("running", "pending", "build:done"), []bool{true, true, true},
			func(t *testing.T, r *record.Submission) {
				require.Equal(t, "ab12", r.Bundle.Digest)
				require.Equal(t, t0.Add(time.Minute), *r.Stages[0].StartedAt)
				require.Equal(t, t0.Add(2*time.Minute), *r.Stages[0].FinishedAt)
				require.Equal(t, t0.Add(2*time.Minute), r.UpdatedAt)
			}},
		{"a checkpoint by reference keeps its repository in the record", func(t *testing.T) []event.Event {
			d := events.BuildCompletedData{SubmissionID: sub, BundleDigest: "ab12", Bytes: 9000, Artifact: events.BundleRef{Store: "jetstream", Bucket: "artifacts", Object: "x", SHA256: "ab12"},
				Reference: &events.CheckpointReference{Repository: "https://huggingface.co/org/model", Revision: "main", Files: 3, Bytes: 9000}}
			return []event.Event{received(t), ev(t, events.BuildCompleted, 2, d)}
		},
			want("running", "pending", "build:done"), []bool{true, true},
			func(t *testing.T, r *record.Submission) {
				require.Equal(t, &record.Reference{Repository: "https://huggingface.co/org/model", Revision: "main", Files: 3, Bytes: 9000}, r.Bundle.Reference)
			}},
		{"a failed contract skips the rest and fails the record", func(t *testing.T) []event.Event {
			return []event.Event{received(t), buildDone(t), started(t, "contract", 3), contractFailed(t)}
		},
			want("failed", "skipped", "build:done", "contract:failed"), []bool{true, true, true, true},
			func(t *testing.T, r *record.Submission) {
				require.Equal(t, &record.Error{Stage: "contract", Code: "precision_wider_than_declared", Message: "W4A4KV8 declared · the service reads W16A16KV8"}, r.Error)
				require.Equal(t, "precision_wider_than_declared", r.Stages[1].Reason)
				require.NotNil(t, r.Result.Contract, "a refused contract keeps its contract block")
				require.False(t, r.Result.Contract.OK)
				require.Equal(t, 16, r.Result.Contract.WeightBits)
				require.Equal(t, "W16A16KV8", r.Solution.DetectedPrecision)
			}},
		{"redelivered and late events change nothing", func(t *testing.T) []event.Event {
			return []event.Event{received(t), buildDone(t), started(t, "build", 1), buildDone(t), received(t)}
		},
			want("running", "pending", "build:done"), []bool{true, true, false, false, false}, nil},
		{"runner events are not part of the record", func(t *testing.T) []event.Event {
			return []event.Event{received(t), ev(t, events.RunnerJobStarted, 1, json.RawMessage(`{}`))}
		},
			want("running", "pending"), []bool{true, false}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec, changed := foldAll(t, tt.events(t)...)
			require.Equal(t, tt.want, statuses(rec))
			require.Equal(t, tt.changed, changed)
			if tt.check != nil {
				tt.check(t, rec)
			}
		})
	}
}

// TestFoldSideBySideStages: quality and efficiency both start when the
// contract completes. A failed quality skips the score, which waits on
// it, never efficiency, which ran beside it: whether quality fails before
// or after efficiency ends, the record shows efficiency done with its
// result and GPU-hours, and the score skipped after the quality failure.
func TestFoldSideBySideStages(t *testing.T) {
	buildDone := ev(t, events.BuildCompleted, 2, events.BuildCompletedData{SubmissionID: sub, BundleDigest: "ab12", Bytes: 2,
		Artifact: events.BundleRef{Store: "jetstream", Bucket: "artifacts", Object: "x", SHA256: "ab12"}})
	contractDone := ev(t, events.ContractCompleted, 3, events.ContractCompletedData{SubmissionID: sub, Contract: record.Contract{OK: true},
		DetectedPrecision: "W8A8KV8", TaskID: "qwen3-8b"})
	qualityFailed := ev(t, events.QualityFailed, 5, events.StageFailedData{SubmissionID: sub, Stage: "quality", Reason: "campaign_no_suite",
		Message: "campaign qwen3-8b names no eval suite"})
	effDone := ev(t, events.EfficiencyCompleted, 9, events.EfficiencyCompletedData{SubmissionID: sub, Efficiency: map[string]float64{"serve": 1234.5},
		AnchorEfficiency: map[string]float64{"serve": 1000}, GPUHours: 0.25, GPU: "NVIDIA H200 (simulated)", Simulated: true,
		Engine: record.Engine{Audit: &record.Audit{Verdict: record.VerdictSkipped}}})
	for _, tc := range []struct {
		name   string
		events []event.Event
	}{
		{"quality fails, then efficiency completes", []event.Event{received(t), buildDone, contractDone, started(t, "quality", 4), started(t, "efficiency", 4),
			qualityFailed, effDone}},
		{"efficiency completes, then quality fails", []event.Event{received(t), buildDone, contractDone, started(t, "quality", 4), started(t, "efficiency", 4),
			effDone, qualityFailed}},
		{"quality fails before efficiency starts", []event.Event{received(t), buildDone, contractDone, started(t, "quality", 4), qualityFailed,
			started(t, "efficiency", 6), effDone}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, _ := foldAll(t, tc.events...)
			require.Equal(t, want("failed", "pending", "build:done", "contract:done", "quality:failed", "efficiency:done", "score:skipped"), statuses(rec))
			eff := rec.Stages[3]
			require.Empty(t, eff.Reason, "efficiency ran: it is not skipped")
			require.NotNil(t, eff.FinishedAt)
			require.Equal(t, map[string]float64{"serve": 1234.5}, rec.Result.Efficiency, "its result is in the record")
			require.NotNil(t, rec.Result.GPUHours)
			require.InDelta(t, 0.25, *rec.Result.GPUHours, 1e-12, "and the GPU-hours it was charged")
			require.Equal(t, "after_quality_failed", rec.Stages[4].Reason)
			require.Equal(t, &record.Error{Stage: "quality", Code: "campaign_no_suite", Message: "campaign qwen3-8b names no eval suite"}, rec.Error)
		})
	}
	// Both side-by-side stages fail: the record's error is the first.
	effFailed := ev(t, events.EfficiencyFailed, 8, events.StageFailedData{SubmissionID: sub, Stage: "efficiency", Reason: "engine_oom", Message: "out of memory"})
	rec, _ := foldAll(t, received(t), buildDone, contractDone, qualityFailed, effFailed)
	require.Equal(t, want("failed", "pending", "build:done", "contract:done", "quality:failed", "efficiency:failed", "score:skipped"), statuses(rec))
	require.Equal(t, "quality", rec.Error.Stage)
	require.Equal(t, "engine_oom", rec.Stages[3].Reason)
	// A failed contract still skips everything after it.
	contractFailed := ev(t, events.ContractFailed, 3, events.StageFailedData{SubmissionID: sub, Stage: "contract", Reason: "precision_wider_than_declared", Message: "x"})
	rec, _ = foldAll(t, received(t), buildDone, contractFailed)
	for _, st := range rec.Stages[2:] {
		require.Equal(t, record.StatusSkipped, st.Status, st.Name)
		require.Equal(t, "after_contract_failed", st.Reason, st.Name)
	}
}

func TestFoldDoesNotMutateItsInput(t *testing.T) {
	rec, _ := foldAll(t, received(t))
	before, _ := json.Marshal(rec)
	_, changed, err := Fold(rec, started(t, "build", 1))
	require.NoError(t, err)
	require.True(t, changed)
	after, _ := json.Marshal(rec)
	require.JSONEq(t, string(before), string(after))
}

func TestFoldErrors(t *testing.T) {
	_, _, err := Fold(nil, started(t, "build", 1))
	require.ErrorIs(t, err, ErrNoRecord)

	rec, _ := foldAll(t, received(t))
	wrong := ev(t, events.BuildFailed, 1, events.StageFailedData{SubmissionID: "someoneelse", Stage: "build", Reason: "x", Message: "y"})
	_, changed, err := Fold(rec, wrong)
	require.ErrorIs(t, err, ErrBadEvent)
	require.False(t, changed)
	require.Equal(t, record.StatusPending, rec.Stages[0].Status)
}

// TestFoldGPUSeconds: the record's gpu_seconds holds each job's GPU time
// by phase, from its stage's completion, and their totals; a completion
// folded again counts once.
func TestFoldGPUSeconds(t *testing.T) {
	eff := record.GPUPhases{Held: 500, Serving: 60, EngineStart: 400, Loading: 160, GraphCapture: 100, OtherStart: 140, Starts: 4}
	qual := record.GPUPhases{Held: 130, Serving: 25, EngineStart: 100, Loading: 40, GraphCapture: 25, OtherStart: 35, Starts: 1}
	effDone := ev(t, events.EfficiencyCompleted, 9, events.EfficiencyCompletedData{SubmissionID: sub, Efficiency: map[string]float64{"serve": 1234.5},
		AnchorEfficiency: map[string]float64{"serve": 1000}, GPUHours: 0.25, GPU: "NVIDIA H200 (simulated)", Simulated: true, GPUSeconds: &eff})
	qualDone := ev(t, events.QualityCompleted, 8, events.QualityCompletedData{SubmissionID: sub, GPUSeconds: &qual})
	rec, _ := foldAll(t, received(t), started(t, "quality", 4), started(t, "efficiency", 4), effDone, qualDone, effDone)
	g := rec.Result.GPUSeconds
	require.NotNil(t, g)
	require.Equal(t, map[string]record.GPUPhases{"efficiency": eff, "quality": qual}, g.Jobs)
	require.Equal(t, record.GPUPhases{Held: 630, Serving: 85, EngineStart: 500, Loading: 200, GraphCapture: 125, OtherStart: 175, Starts: 5}, g.GPUPhases,
		"the totals are the jobs' sum, the efficiency job counted once")

	untimed := ev(t, events.QualityCompleted, 8, events.QualityCompletedData{SubmissionID: sub})
	rec, _ = foldAll(t, received(t), untimed)
	require.Nil(t, rec.Result.GPUSeconds, "a job that was not timed adds nothing")
}
