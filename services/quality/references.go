package quality

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/stage"
)

// The stage's bucket, bus.BucketQualityReferences, holds two kinds of
// keys, both the stage's alone:
//
//	quality.<campaign>.<suite key>  the BF16 reference's state (RefState)
//	job.<reference job id>          the campaign and suite key of a
//	                                reference job, kept when it is requested
//
// A reference job's outcome is keyed from what the job carries: a
// completed job's result names its campaign and suite key; a failed
// job's payload names neither, so its job.<id> entry (written before the
// job was queued) does. Nothing comes from process memory.

// RefState is the state of a BF16 quality reference.
type RefState struct {
	// Status is StatusDone or StatusFailed.
	Status string `json:"status"`
	// Reason says why a reference failed.
	Reason string `json:"reason,omitempty"`
	// Result is a done reference's job result.
	Result events.QualityJobResult `json:"result"`
}

// States of a BF16 quality reference.
const (
	StatusDone   = "done"
	StatusFailed = "failed"
)

// refKey is the bucket key of a BF16 quality reference.
func refKey(campaign, suiteKey string) string {
	return bus.Key("quality", campaign, suiteKey)
}

// refJob is what the bucket keeps of a requested reference job.
type refJob struct {
	Campaign string `json:"campaign"`
	SuiteKey string `json:"suite_key"`
}

func refJobKey(job string) string { return bus.Key("job", job) }

// putRefJob keeps a reference job's campaign and suite key. The value
// derives from the job id, so writing it again changes nothing.
func (s *Service) putRefJob(ctx context.Context, job string, r refJob) error {
	raw, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("quality: encode reference job: %w", err)
	}
	if _, err := s.refs.Put(ctx, refJobKey(job), raw); err != nil {
		return fmt.Errorf("quality: keep reference job %s: %w", job, err)
	}
	return nil
}

// refJobOf reads a reference job's campaign and suite key; ok is false
// when it was never kept (a job requested by an arena before this one).
func (s *Service) refJobOf(ctx context.Context, job string) (refJob, bool, error) {
	e, err := s.refs.Get(ctx, refJobKey(job))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return refJob{}, false, nil
	} else if err != nil {
		return refJob{}, false, fmt.Errorf("quality: read reference job %s: %w", job, err)
	}
	var r refJob
	if err := json.Unmarshal(e.Value(), &r); err != nil || r.Campaign == "" || r.SuiteKey == "" {
		return refJob{}, false, nil
	}
	return r, true, nil
}

// refStateOf reads a reference's state; nil when it is not there yet. A
// state that does not decode is a failed reference.
func (s *Service) refStateOf(ctx context.Context, campaign, suiteKey string) (*RefState, error) {
	e, err := s.refs.Get(ctx, refKey(campaign, suiteKey))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("quality: read bucket %s: %w", bus.BucketQualityReferences, err)
	}
	var st RefState
	if err := json.Unmarshal(e.Value(), &st); err != nil {
		return &RefState{Status: StatusFailed, Reason: "its state does not decode: " + err.Error()}, nil
	}
	return &st, nil
}

func (s *Service) putRefState(ctx context.Context, campaign, suiteKey string, st RefState) error {
	raw, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("quality: encode reference state: %w", err)
	}
	if _, err := s.refs.Put(ctx, refKey(campaign, suiteKey), raw); err != nil {
		return fmt.Errorf("quality: keep the reference of %s %s: %w", campaign, suiteKey, err)
	}
	return nil
}

// shared keeps a BF16 reference job's outcome (it belongs to no
// submission) as the reference's state: done with its result, or failed
// with the runner's reason. The campaign and suite key come from the
// result, or from the job's entry kept at request time (see above).
// An outcome whose reference cannot be named (a failed job an arena
// before this one requested) is logged and acked: its candidates are
// ended by their own MaxDeliver.
//
// A done reference's code answers are graded before its state is kept
// (gradeCode). Done means its answers are stored: a machine that cannot
// sandbox, or a suite the campaigns no longer hold, leaves them
// ungraded with a warning, and each candidate's pairing grades them
// again or is refused (sandbox_unavailable, suite_invalid), so fixing
// the machine needs no new reference job.
func (s *Service) shared(ctx context.Context, o stage.Outcome) error {
	job := o.JobID()
	var (
		res events.QualityJobResult
		st  RefState
	)
	switch {
	case o.Failed != nil:
		st = RefState{Status: StatusFailed, Reason: o.Failed.Reason + ": " + o.Failed.Message}
	default:
		var err error
		if res, err = events.QualityJob.Result(*o.Completed); err != nil {
			st = RefState{Status: StatusFailed, Reason: "the runner's result does not decode: " + err.Error()}
		} else if res.Role != events.RoleBF16 {
			s.log.Warn("a quality job of no submission that is no BF16 reference; left alone", "job", job, "role", res.Role)
			return nil
		} else {
			st = RefState{Status: StatusDone, Result: res}
		}
	}
	campaign, suiteKey := res.Campaign, res.SuiteKey
	if campaign == "" || suiteKey == "" {
		r, ok, err := s.refJobOf(ctx, job)
		if err != nil {
			return err
		}
		if !ok {
			s.log.Warn("BF16 quality reference of an unknown job; left alone", "job", job, "status", st.Status, "reason", st.Reason)
			return nil
		}
		campaign, suiteKey = r.Campaign, r.SuiteKey
	}
	if st.Status == StatusDone {
		if err := s.gradeReference(ctx, res); err != nil {
			return err
		}
	}
	if err := s.putRefState(ctx, campaign, suiteKey, st); err != nil {
		return err
	}
	s.log.Info("BF16 quality reference kept", "campaign", campaign, "suite", suiteKey, "status", st.Status, "reason", st.Reason,
		"generations", st.Result.Generations)
	return nil
}

// gradeReference grades a done reference's code answers (see shared): a
// refusal (no sandbox here, a suite no campaign holds) is logged and left
// to the candidates' pairing; any other error is a retry.
func (s *Service) gradeReference(ctx context.Context, res events.QualityJobResult) error {
	if res.Ungraded == 0 {
		return nil
	}
	task, st, err := s.suiteOf(res.Campaign, res.SuiteKey)
	if err == nil {
		var n int
		if n, err = s.gradeCode(ctx, task, st, res, ReferenceSubmission); err == nil {
			s.log.Info("BF16 quality reference's code answers graded", "campaign", task, "suite", res.SuiteKey, "graded", n)
			return nil
		}
	}
	if r := stage.AsRefusal(err); r != nil {
		s.log.Warn("BF16 quality reference's code answers left ungraded; its candidates' pairing grades them", "campaign", res.Campaign,
			"suite", res.SuiteKey, "reason", r.Code, "err", r.Message)
		return nil
	}
	return err
}
