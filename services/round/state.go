package round

import (
	"fmt"
	"strings"
	"time"

	"github.com/lowbarena/lowbarena/domain/campaign"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
)

// stateVersion is the version of the round state this service writes
// and resumes, numbered from 1 as the ClickHouse migrations are. A state
// of another version cannot resume and ends as interrupted (see
// recover); a change to the state's layout that a running round would
// not survive takes the next number.
const stateVersion = 1

// Round statuses.
const (
	StatusRunning  = "running"
	StatusComplete = "complete"
	StatusFailed   = "failed"
)

// Entry statuses while the round runs; at the end an entry is "scored"
// or "disqualified".
const (
	entryPending      = ""
	entryRunning      = "running" // its SLA job is requested
	entryMeasured     = "measured"
	entryDisqualified = "disqualified"
	entryScored       = "scored"
)

// Entry is one entry of a round.
type Entry struct {
	ID   string `json:"entry_id"`
	Role string `json:"role"` // baseline, incumbent, candidate, drift_baseline
	// Submission is the entry's submission ("" for the BF16 baselines).
	Submission string `json:"submission,omitempty"`
	// Checkpoint is the bundle the runner serves, KVCacheDType its KV
	// dtype; both are kept so that a round resumes without asking again.
	Checkpoint   events.BundleRef `json:"checkpoint"`
	KVCacheDType string           `json:"kv_cache_dtype"`
	// Patch is the path, inside Checkpoint, of the entry's engine patch
	// (the engine track): its SLA job runs the campaign's engine built
	// with it (Round.EngineBundle), as the efficiency stage measured the
	// submission. Empty runs the campaign's own engine.
	Patch string `json:"patch,omitempty"`
	// EngineDigest is the patched tree's digest the build stage checked:
	// the runner serves no other (see events.SLAJobParams).
	EngineDigest string `json:"engine_digest,omitempty"`
	// Job is the entry's SLA job once requested, Deadline (wall clock)
	// when it is given up, EngineUp whether the runner reported the
	// engine healthy.
	Job      string            `json:"job,omitempty"`
	Deadline *time.Time        `json:"deadline,omitempty"`
	EngineUp bool              `json:"engine_up,omitempty"`
	Run      *events.EngineRun `json:"run,omitempty"`
	Status   string            `json:"status"`
	Reason   string            `json:"reason,omitempty"`
	Score    *float64          `json:"score,omitempty"`
	GPUHours float64           `json:"gpu_hours"`
}

// Step is one step of the plan.
type Step = events.RoundStepData

// Round is a round's state, kept in the rounds bucket as round.<id>. Every
// change is a compare-and-set over the revision it was read at (see
// Service.update), so the consumer, the ticker and the request handler
// of any instance may change it.
type Round struct {
	// Version is the stateVersion of the service that wrote the state.
	Version    int      `json:"version,omitempty"`
	ID         string   `json:"round_id"`
	Campaign   string   `json:"campaign"`
	Pod        string   `json:"pod"`
	Incumbent  string   `json:"incumbent,omitempty"`
	Candidates []string `json:"candidates,omitempty"`
	Entries    []*Entry `json:"entries"`
	// EngineBundle is the campaign's pinned engine source tree in the
	// artifact store, stored at the start when an entry patches the
	// engine (kept, like the entries' checkpoints, so a round resumes on
	// the same source).
	EngineBundle *events.BundleRef `json:"engine_bundle,omitempty"`
	Steps        []Step            `json:"steps"`
	Status       string            `json:"status"`
	StartedAt    time.Time         `json:"started_at"`
	// ScoreBy bounds how long the teardown waits for the score service's
	// standings (wall clock).
	ScoreBy *time.Time                 `json:"score_by,omitempty"`
	Result  *events.RoundCompletedData `json:"result,omitempty"`
	Failure *events.RoundFailedData    `json:"failure,omitempty"`
	// Outbox holds the effects of committed changes not yet carried out,
	// in order; Seq numbers them. See Effect.
	Outbox []Effect `json:"outbox,omitempty"`
	Seq    int      `json:"seq,omitempty"`
	// Trace is the W3C trace context (traceparent) of the round's start:
	// every effect is carried out in that trace, whoever carries it out
	// (the start, a tick, another instance after a crash), so one round is
	// one trace.
	Trace map[string]string `json:"trace,omitempty"`
}

// Effect is one thing a committed change asks the world for: an event to
// publish (a step, the SLA job of an entry, the round's start or end),
// the campaign's leader to keep, the pod's lease to release.
//
// Invariant: an effect is written to the outbox in the same
// compare-and-set as the change that caused it, and carried out after;
// carrying it out twice is harmless (every event has a deterministic id,
// so JetStream drops the repeat; the leader and the release are
// idempotent), so a crash between the commit and the flush is repaired by
// whichever instance flushes next. (A leader put again long after a later
// round of the same campaign settled its own would put an older leader
// back; an outbox is flushed within a tick of its commit, so this is not
// guarded.)
type Effect struct {
	Seq       int                            `json:"seq"`
	Step      *Step                          `json:"step,omitempty"`
	Job       *events.RunnerJobRequestedData `json:"job,omitempty"`
	Started   *events.RoundStartedData       `json:"started,omitempty"`
	Completed *events.RoundCompletedData     `json:"completed,omitempty"`
	Failed    *events.RoundFailedData        `json:"failed,omitempty"`
	Leader    *Leader                        `json:"leader,omitempty"`
	Release   bool                           `json:"release,omitempty"`
}

// Leader is the reigning leader of a campaign.
type Leader struct {
	Submission string  `json:"submission"`
	Score      float64 `json:"score"`
	Round      string  `json:"round"`
}

func (r *Round) emit(e Effect) {
	r.Seq++
	e.Seq = r.Seq
	r.Outbox = append(r.Outbox, e)
}

// dropDone removes the effects numbered up to seq.
func (r *Round) dropDone(seq int) bool {
	n := 0
	for n < len(r.Outbox) && r.Outbox[n].Seq <= seq {
		n++
	}
	r.Outbox = r.Outbox[n:]
	return n > 0
}

func (r *Round) entry(id string) *Entry {
	for _, e := range r.Entries {
		if e.ID == id {
			return e
		}
	}
	return nil
}

func (r *Round) entryByJob(job string) *Entry {
	for _, e := range r.Entries {
		if e.Job != "" && e.Job == job {
			return e
		}
	}
	return nil
}

// stepOf returns the index of an entry's starting_engine step; its
// running_sla step follows it.
func (r *Round) stepOf(e *Entry) int {
	for i, st := range r.Steps {
		if st.EntryID == e.ID && st.Phase == events.PhaseStartingEngine {
			return i
		}
	}
	return -1
}

// next returns the index of the first step not yet settled, or -1.
func (r *Round) next() int {
	for i, st := range r.Steps {
		if st.Status == events.StepPending || st.Status == events.StepRunning {
			return i
		}
	}
	return -1
}

// reached returns the last step that started (0 when none did).
func (r *Round) reached() *Step {
	var last *Step
	for i := range r.Steps {
		if r.Steps[i].Status != events.StepPending && r.Steps[i].Status != "" {
			last = &r.Steps[i]
		}
	}
	return last
}

// reachedText says how far the round got: "reached step 9 of 23:
// Candidate 2 of 5, running SLA".
func (r *Round) reachedText() string {
	st := r.reached()
	if st == nil {
		return fmt.Sprintf("it had not reached its first step of %d", len(r.Steps))
	}
	return fmt.Sprintf("reached step %d of %d: %s", st.Step, st.Of, st.Name)
}

// mark moves step i to status with its times, and emits its event.
func (r *Round) mark(i int, status events.StepStatus, detail string, now time.Time) {
	st := &r.Steps[i]
	switch status {
	case events.StepRunning:
		at := now
		st.StartedAt, st.FinishedAt = &at, nil
	default:
		if st.StartedAt == nil {
			at := now
			st.StartedAt = &at
		}
		at := now
		st.FinishedAt = &at
	}
	st.Status, st.Detail = status, detail
	snap := *st
	r.emit(Effect{Step: &snap})
}

// jobID is an entry's SLA job id: the same for the same round and entry,
// so a job requested again (a resumed round) is dropped by JetStream.
func jobID(round, entry string) string { return "sla-" + events.DeriveID(round, entry)[:24] }

// plan lays out the steps: setup, then starting_engine and running SLA
// for every entry (the scorer after the candidates, the drift baseline
// last), then teardown.
func plan(r *Round) []Step {
	var steps []Step
	add := func(group, name string, phase events.Phase, role, entry string) {
		steps = append(steps, Step{RoundID: r.ID, Step: len(steps) + 1, Group: group, Name: name, Phase: phase, Role: role, EntryID: entry, Status: events.StepPending})
	}
	for _, st := range []struct {
		name  string
		phase events.Phase
	}{{"Renting a GPU pod", events.PhaseProvisioning}, {"Preparing the pod", events.PhaseBootstrapping},
		{"Pulling engine images", events.PhasePullingImage}, {"Downloading model weights", events.PhaseDownloadingModel}} {
		add("Setup", st.name, st.phase, "", "")
	}
	n, cands := 0, 0
	for _, e := range r.Entries {
		if e.Role == "candidate" {
			cands++
		}
	}
	hasIncumbent := r.Incumbent != ""
	for _, e := range r.Entries {
		group := map[string]string{"baseline": "Baseline", "incumbent": "Incumbent", "drift_baseline": "Drift baseline"}[e.Role]
		if e.Role == "drift_baseline" {
			add("Scorer", "Scorer, starting the engine", events.PhaseStartingEngine, "scorer", "")
			add("Scorer", "Scorer, running the shared scorer", events.PhaseRunningScorer, "scorer", "")
		}
		if e.Role == "candidate" {
			n++
			group = fmt.Sprintf("Candidate %d of %d", n, cands)
		}
		add(group, group+", starting the engine", events.PhaseStartingEngine, e.Role, e.ID)
		add(group, group+", running SLA", events.PhaseRunningSLA, e.Role, e.ID)
		if e.Role == "baseline" && !hasIncumbent {
			// The plan keeps its shape: no incumbent is two skipped steps.
			add("Incumbent", "Incumbent, starting the engine", events.PhaseStartingEngine, "incumbent", "")
			add("Incumbent", "Incumbent, running SLA", events.PhaseRunningSLA, "incumbent", "")
		}
	}
	add("Teardown", "Releasing the pod", events.PhaseTeardown, "", "")
	for i := range steps {
		steps[i].Of = len(steps)
	}
	return steps
}

// advance settles the plan's steps, from the first one not yet settled,
// until the round must wait: for an entry's SLA job (requested here, with
// its deadline), or at teardown for the entries' standings (it returns
// true then; finish ends the round). It is a function of the state alone
// and safe to run again: a step already settled is never marked twice,
// and an entry's job is requested once per state.
func advance(r *Round, camp *campaign.Campaign, now time.Time, timeout time.Duration) (needScores bool) {
	if r.Status != StatusRunning {
		return false
	}
	for {
		i := r.next()
		if i < 0 {
			return false
		}
		st := r.Steps[i]
		switch {
		case st.Phase == events.PhaseProvisioning:
			r.mark(i, events.StepRunning, "", now)
			r.mark(i, events.StepDone, "pod "+r.Pod+" is this arena's own: nothing to rent", now)
		case st.Phase == events.PhaseBootstrapping:
			r.mark(i, events.StepRunning, "", now)
			r.mark(i, events.StepDone, "the pod's runner takes the round's jobs from RUNNER_JOBS", now)
		case st.Phase == events.PhasePullingImage:
			r.mark(i, events.StepRunning, "", now)
			r.mark(i, events.StepDone, "engine: "+camp.Engine.Command, now)
		case st.Phase == events.PhaseDownloadingModel:
			ref := r.Entries[0].Checkpoint
			r.mark(i, events.StepRunning, "", now)
			r.mark(i, events.StepDone, fmt.Sprintf("BF16 reference %s stored for the runner (%d bytes)", short(ref.SHA256), ref.Size), now)
		case st.Role == "scorer":
			r.mark(i, events.StepRunning, "", now)
			r.mark(i, events.StepSkipped, "no shared judge engine is configured: answers are graded by the built-in graders", now)
		case st.Role == "incumbent" && st.EntryID == "":
			r.mark(i, events.StepRunning, "", now)
			r.mark(i, events.StepSkipped, "no incumbent yet: the campaign has no leader", now)
		case st.Phase == events.PhaseStartingEngine:
			e := r.entry(st.EntryID)
			if e == nil {
				// A plan names only its own entries; a state that does
				// not is corrupt, and its step fails rather than loop.
				r.mark(i, events.StepFailed, "the round has no entry "+st.EntryID, now)
				continue
			}
			if e.Status == entryPending {
				r.mark(i, events.StepRunning, "", now)
				if !request(r, e, camp, now, timeout) {
					continue // disqualified: the plan moves on
				}
			}
			return false
		case st.Phase == events.PhaseRunningSLA:
			return false // the entry's job runs; its outcome moves on
		case st.Phase == events.PhaseTeardown:
			if st.Status == events.StepPending {
				r.mark(i, events.StepRunning, "", now)
				by := now.Add(timeout)
				r.ScoreBy = &by
			}
			return true
		default:
			r.mark(i, events.StepSkipped, "this service has no such step", now)
		}
	}
}

// request asks the runner for e's SLA job and sets its deadline. Params
// that do not encode disqualify the entry (job_bad_params, as the runner
// would) and request reports false.
func request(r *Round, e *Entry, camp *campaign.Campaign, now time.Time, timeout time.Duration) bool {
	e.Status, e.Job = entryRunning, jobID(r.ID, e.ID)
	deadline := now.Add(timeout)
	e.Deadline = &deadline
	p := events.SLAJobParams{Engine: *camp.Engine, Workload: camp.Efficiency.WorkloadSpec, KVCacheDType: e.KVCacheDType, Entry: e.ID}
	if e.Patch != "" {
		p.EngineBundle, p.Patch, p.EngineDigest = r.EngineBundle, e.Patch, e.EngineDigest
	}
	req, err := events.SLAJob.Request(events.RunnerJobRequestedData{JobID: e.Job, SubmissionID: e.Submission, RoundID: r.ID,
		Pod: r.Pod, Engine: camp.Engine.Command, Checkpoint: e.Checkpoint}, p)
	if err != nil {
		disqualify(r, e, "job_bad_params: "+err.Error(), 0, now)
		return false
	}
	r.emit(Effect{Job: &req})
	return true
}

// resume is a taken-over round starting again: the job of the entry in
// hand is requested again (the same ids: a job already queued or done is
// not queued twice, and its outcome, if any, is in the stream for the
// durable consumer) with a fresh deadline, then the plan advances.
func resume(r *Round, camp *campaign.Campaign, now time.Time, timeout time.Duration) bool {
	for _, e := range r.Entries {
		if e.Status == entryRunning {
			e.Status = entryPending
			request(r, e, camp, now, timeout)
		}
	}
	return advance(r, camp, now, timeout)
}

// engineHealthy records the runner's first progress past the engine's
// start: the entry's starting_engine step is done and its SLA runs.
func engineHealthy(r *Round, e *Entry, phase string, now time.Time) bool {
	if e.Status != entryRunning || e.EngineUp || strings.HasPrefix(phase, string(events.PhaseStartingEngine)) {
		return false
	}
	i := r.stepOf(e)
	if i < 0 {
		return false
	}
	e.EngineUp = true
	r.mark(i, events.StepDone, "engine healthy", now)
	r.mark(i+1, events.StepRunning, "", now)
	return true
}

// measured records an entry's completed SLA job. An outcome for an entry
// already ended changes nothing.
func measured(r *Round, e *Entry, run events.EngineRun, gpuHours float64, now time.Time) bool {
	if e.Status != entryRunning {
		return false
	}
	i := r.stepOf(e)
	if i < 0 {
		return false
	}
	e.Run, e.GPUHours, e.Status = &run, gpuHours, entryMeasured
	if !e.EngineUp {
		e.EngineUp = true
		r.mark(i, events.StepDone, "engine healthy", now)
	}
	// The step's event carries the rates themselves, so that a reader
	// (the round page) compares entries without parsing the detail.
	rates := make(map[string]float64, len(run.Workloads))
	for w, wr := range run.Workloads {
		rates[w] = wr.Rate
	}
	r.Steps[i+1].Rates, r.Steps[i+1].Simulated = rates, run.Simulated
	r.mark(i+1, events.StepDone, fmt.Sprintf("serve %.1f tok/s, interactive %.1f, long_context %.1f",
		run.Workloads["serve"].Rate, run.Workloads["interactive"].Rate, run.Workloads["long_context"].Rate), now)
	return true
}

// disqualify ends an entry whose SLA job ended badly: its
// starting_engine step fails (and its SLA is skipped) before the engine
// was healthy, its SLA step after. An entry already ended changes
// nothing.
func disqualify(r *Round, e *Entry, reason string, gpuHours float64, now time.Time) bool {
	if e.Status != entryRunning {
		return false
	}
	i := r.stepOf(e)
	if i < 0 {
		return false
	}
	e.Status, e.Reason, e.GPUHours = entryDisqualified, reason, gpuHours
	if !e.EngineUp {
		r.mark(i, events.StepFailed, reason, now)
		r.mark(i+1, events.StepSkipped, "the engine did not start", now)
	} else {
		r.mark(i+1, events.StepFailed, reason, now)
	}
	return true
}

// timeouts disqualifies every entry whose SLA job has not ended by its
// deadline: no runner took it, or it never ended.
func timeouts(r *Round, now time.Time, timeout time.Duration) bool {
	changed := false
	for _, e := range r.Entries {
		if e.Status == entryRunning && e.Deadline != nil && now.After(*e.Deadline) {
			changed = disqualify(r, e, fmt.Sprintf("round_job_timeout: its SLA job %s did not end within %s (is the pod's runner up?)", e.Job, timeout), 0, now) || changed
		}
	}
	return changed
}

// fail ends a running round with code: the steps in flight fail, the
// round.failed event says why and how far the round got, and the pod is
// released.
func fail(r *Round, code reason.Code, why string, now time.Time) bool {
	if r.Status != StatusRunning {
		return false
	}
	msg := why + "; " + r.reachedText()
	for i := range r.Steps {
		if r.Steps[i].Status == events.StepRunning {
			r.mark(i, events.StepFailed, string(code)+": "+why, now)
		}
	}
	r.Status = StatusFailed
	r.Failure = &events.RoundFailedData{RoundID: r.ID, Reason: string(code), Message: msg}
	r.emit(Effect{Failed: r.Failure})
	r.emit(Effect{Release: true})
	return true
}

func short(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}
