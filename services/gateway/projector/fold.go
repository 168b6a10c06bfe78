// Package projector keeps the submission records: it folds every pipeline
// event into the record of its submission, in the JetStream KV bucket
// "submissions", and writes one stage_results row per ended stage.
package projector

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
)

// ErrNoRecord is returned by Fold for a stage event whose submission has no
// record yet (its submission.received has not been folded).
var ErrNoRecord = errors.New("projector: no record for this submission yet")

// ErrBadEvent is returned by Fold for an event that can never fold: its
// data does not decode, or it names another submission than its subject.
var ErrBadEvent = errors.New("projector: event cannot be folded")

// rank orders stage statuses. A stage only moves to a higher rank, so a
// late, out-of-order or redelivered event never moves it back; the three
// end states share a rank, so the first end wins.
var rank = map[string]int{
	record.StatusPending: 0,
	record.StatusRunning: 1,
	record.StatusDone:    2,
	record.StatusFailed:  2,
	record.StatusSkipped: 2,
}

// verbStatus is the stage status each stage event's verb moves to.
var verbStatus = map[string]string{"started": record.StatusRunning, "completed": record.StatusDone,
	"failed": record.StatusFailed, "skipped": record.StatusSkipped}

// NewRecord returns the record of a submission as submission.received starts it:
// every stage pending, status running.
func NewRecord(d *events.SubmissionReceivedData, at time.Time) *record.Submission {
	stages := make([]record.Stage, len(events.Stages))
	for i, name := range events.Stages {
		stages[i] = record.Stage{Name: name, Status: record.StatusPending}
	}
	return &record.Submission{
		Agent:       d.Agent,
		CreatedAt:   d.SubmittedAt.UTC(),
		ID:          d.SubmissionID,
		Participant: d.Participant,
		Partition:   "participant",
		Runner:      "local",
		Solution: record.Solution{
			Checkpoint:        d.Solution.Checkpoint,
			DeclaredPrecision: d.Solution.Precision != "",
			Method:            d.Solution.Method,
			Precision:         d.Solution.Precision,
		},
		Split:     d.Split,
		Stages:    stages,
		Status:    record.StatusRunning,
		TaskID:    d.TaskID,
		Track:     d.Track,
		UpdatedAt: at.UTC(),
	}
}

// Fold applies one event to rec (nil when the submission has no record
// yet) and returns the record and whether it changed. Fold is pure and
// idempotent: folding the same event twice changes nothing the second
// time, because stage statuses only move forward (see rank) and result
// blocks are set by the event that ends their stage.
func Fold(rec *record.Submission, e event.Event) (*record.Submission, bool, error) {
	spec, ok := events.Lookup(events.Type(e.Type()))
	if !ok {
		return rec, false, fmt.Errorf("%w: unknown type %q", ErrBadEvent, e.Type())
	}
	at := e.Time()
	if at.IsZero() {
		at = time.Now()
	}
	if spec.Type == events.SubmissionReceived {
		if rec != nil {
			return rec, false, nil // redelivered: the record exists
		}
		var d events.SubmissionReceivedData
		if err := decode(e, &d); err != nil {
			return nil, false, err
		}
		r := NewRecord(&d, at)
		r.Events = 1
		return r, true, nil
	}
	if spec.Stage == "" {
		return rec, false, nil // runner and round events are not part of a record
	}
	if rec == nil {
		return nil, false, ErrNoRecord
	}
	i := slices.IndexFunc(rec.Stages, func(s record.Stage) bool { return s.Name == spec.Stage })
	if i < 0 {
		return rec, false, fmt.Errorf("%w: record %s has no stage %s", ErrBadEvent, rec.ID, spec.Stage)
	}
	status := verbStatus[spec.Verb]
	if status == "" || rank[status] <= rank[rec.Stages[i].Status] {
		return rec, false, nil
	}
	// Decode before changing anything, so a bad event leaves rec as it was.
	next := clone(rec)
	st := &next.Stages[i]
	t := at.UTC()
	switch spec.Verb {
	case "started":
		st.StartedAt = &t
	case "completed":
		if err := foldResult(next, spec.Type, e); err != nil {
			return rec, false, err
		}
		st.FinishedAt = &t
	case "failed":
		var d events.StageFailedData
		if err := decode(e, &d); err != nil {
			return rec, false, err
		}
		st.FinishedAt, st.Reason = &t, d.Reason
		// The record's error is the first failure's: quality and
		// efficiency run side by side, and both may fail.
		if next.Error == nil {
			next.Error = &record.Error{Stage: spec.Stage, Code: d.Reason, Message: d.Message}
		}
		// A broken contract carries its contract block, so the record shows
		// what the checkpoint really is beside why it was refused.
		if spec.Stage == "contract" && len(d.Detail) > 0 {
			var c record.Contract
			if err := json.Unmarshal(d.Detail, &c); err == nil && c.DetectedPrecision != "" {
				next.Result.Contract = &c
				next.Solution.DetectedPrecision = c.DetectedPrecision
			}
		}
		// The stages after it will not run: the record says so. Only
		// those that wait on it: quality and efficiency both start when
		// the contract completes, so a failed quality leaves efficiency
		// to run, end and be charged, and the record to say so.
		for j := i + 1; j < len(next.Stages); j++ {
			if !waitsOn(next.Stages[j].Name, spec.Stage) {
				continue
			}
			if rank[next.Stages[j].Status] < rank[record.StatusSkipped] {
				next.Stages[j].Status, next.Stages[j].Reason = record.StatusSkipped, "after_"+spec.Stage+"_failed"
			}
		}
	case "skipped":
		var d events.StageSkippedData
		if err := decode(e, &d); err != nil {
			return rec, false, err
		}
		st.FinishedAt, st.Reason = &t, d.Reason
	}
	st.Status = status
	// An entry that is not qualified keeps its dev_score for display,
	// and its score stage reads skipped, as in the arena's records.
	if spec.Type == events.ScoreCompleted && next.Result.DevScore != nil && !next.Result.DevScore.Qualified {
		st.Status, st.Reason = record.StatusSkipped, string(reason.NotQualified)
	}
	next.Status = overall(next.Stages)
	next.UpdatedAt = t
	next.Events++
	return next, true, nil
}

// needs is what each stage starts after: the contract after the build,
// quality and efficiency both after the contract (side by side), the
// score once the contract, quality and efficiency outcomes are in.
var needs = map[string][]string{
	"contract":   {"build"},
	"quality":    {"contract"},
	"efficiency": {"contract"},
	"score":      {"contract", "quality", "efficiency"},
}

// waitsOn reports whether stage runs only after stage on has completed,
// directly or through another stage. A stage needs does not name waits
// on every stage before it in events.Stages.
func waitsOn(stage, on string) bool {
	direct, ok := needs[stage]
	if !ok {
		i, j := slices.Index(events.Stages, stage), slices.Index(events.Stages, on)
		return j >= 0 && j < i
	}
	for _, n := range direct {
		if n == on || waitsOn(n, on) {
			return true
		}
	}
	return false
}

// overall is running until every stage has ended, then failed when one
// failed and done otherwise.
func overall(stages []record.Stage) string {
	failed := false
	for _, s := range stages {
		if rank[s.Status] < 2 {
			return record.StatusRunning
		}
		failed = failed || s.Status == record.StatusFailed
	}
	if failed {
		return record.StatusFailed
	}
	return record.StatusDone
}

func foldResult(r *record.Submission, t events.Type, e event.Event) error {
	switch t {
	case events.BuildCompleted:
		var d events.BuildCompletedData
		if err := decode(e, &d); err != nil {
			return err
		}
		r.Bundle = &record.Bundle{Digest: d.BundleDigest, Bytes: d.Bytes, Files: len(d.Files), DuplicateOf: d.DuplicateOf, Reference: d.Reference}
		if p := d.Patch; p != nil {
			cp := *p
			cp.Files = slices.Clone(p.Files)
			r.Bundle.Patch = &cp
		}
	case events.ContractCompleted:
		var d events.ContractCompletedData
		if err := decode(e, &d); err != nil {
			return err
		}
		r.Result.Contract = &d.Contract
		r.Solution.DetectedPrecision = d.DetectedPrecision
	case events.QualityCompleted:
		var d events.QualityCompletedData
		if err := decode(e, &d); err != nil {
			return err
		}
		r.Result.DevQuality, r.Result.KL = &d.DevQuality, d.KL
		r.Result.Simulated = r.Result.Simulated || d.Simulated
		setGPUSeconds(r, events.JobQuality, d.GPUSeconds)
	case events.EfficiencyCompleted:
		var d events.EfficiencyCompletedData
		if err := decode(e, &d); err != nil {
			return err
		}
		r.Result.Efficiency, r.Result.AnchorEfficiency = d.Efficiency, d.AnchorEfficiency
		r.Result.PeakMemory, r.Result.AnchorPeakMemory = d.PeakMemory, d.AnchorPeakMemory
		r.Result.Engine, r.Result.Workload = &d.Engine, &d.Workload
		r.Result.GPUHours, r.Result.GPU = &d.GPUHours, d.GPU
		r.Result.Simulated = r.Result.Simulated || d.Simulated
		setGPUSeconds(r, events.JobEfficiency, d.GPUSeconds)
	case events.ScoreCompleted:
		var d events.ScoreCompletedData
		if err := decode(e, &d); err != nil {
			return err
		}
		r.Result.DevScore = &d.DevScore
		r.Result.Split = r.Split
	}
	return nil
}

// setGPUSeconds sets the GPU time of the submission's job of kind (its
// completion's gpu_seconds) in the record's gpu_seconds, whose totals are
// the sum of its jobs': a completion folded twice counts once. p nil (a
// runner that did not time its job) leaves the record as it is.
func setGPUSeconds(r *record.Submission, kind string, p *record.GPUPhases) {
	if p == nil {
		return
	}
	if r.Result.GPUSeconds == nil {
		r.Result.GPUSeconds = &record.GPUSeconds{}
	}
	r.Result.GPUSeconds.SetJob(kind, *p)
}

func decode(e event.Event, v any) error {
	if err := json.Unmarshal(e.Data(), v); err != nil {
		return fmt.Errorf("%w: decode %s data: %w", ErrBadEvent, e.Type(), err)
	}
	var id struct {
		SubmissionID string `json:"submission_id"`
	}
	_ = json.Unmarshal(e.Data(), &id)
	if id.SubmissionID != "" && id.SubmissionID != e.Subject() {
		return fmt.Errorf("%w: data names submission %s but the event is about %s", ErrBadEvent, id.SubmissionID, e.Subject())
	}
	return nil
}

// clone deep-copies a record through JSON, so Fold never mutates its input.
func clone(r *record.Submission) *record.Submission {
	b, err := json.Marshal(r)
	if err != nil {
		panic(fmt.Sprintf("projector: marshal record: %v", err))
	}
	var out record.Submission
	if err := json.Unmarshal(b, &out); err != nil {
		panic(fmt.Sprintf("projector: unmarshal record: %v", err))
	}
	return &out
}
