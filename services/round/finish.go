package round

import (
	"math"
	"time"

	"github.com/lowbarena/lowbarena/domain/formula"
	"github.com/lowbarena/lowbarena/domain/policy"
	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/events"
)

// devScore is what the score service answered for an entry's submission
// at the end of the round: its dev score, or why there is none.
type devScore struct {
	Score *record.Score
	// Missing says why Score is nil ("not scored yet: ...").
	Missing string
}

// notScored is the reason of an entry whose dev score is not in.
const notScored = "not scored yet: its quality and efficiency stages have not both finished"

// finish scores the entries against the in-round baseline, measures the
// drift, settles the leader and ends the round: its teardown step is
// done, round.completed is emitted, then the leader and the pod's
// release. scores holds the dev score of each measured entry's
// submission. It changes nothing unless the round waits at its teardown.
func finish(r *Round, scores map[string]devScore, pol policy.Policy, threshold float64, now time.Time) bool {
	i := r.next()
	if r.Status != StatusRunning || i < 0 || r.Steps[i].Phase != events.PhaseTeardown || r.Steps[i].Status != events.StepRunning {
		return false
	}
	res := &events.RoundCompletedData{RoundID: r.ID, Campaign: r.Campaign, PreviousLeader: r.Incumbent}
	var base, drift *Entry
	for _, e := range r.Entries {
		res.GPUHours += e.GPUHours
		switch e.Role {
		case "baseline":
			base = e
		case "drift_baseline":
			drift = e
		}
	}
	var top *Entry
	switch {
	case base == nil || base.Run == nil:
		why := "the in-round baseline could not be measured"
		if base != nil && base.Reason != "" {
			why += ": " + base.Reason
		}
		for _, e := range r.Entries {
			res.Entries = append(res.Entries, events.RoundEntry{EntryID: e.ID, Role: e.Role, Status: entryDisqualified, Reason: why})
		}
	default:
		if drift != nil && drift.Run != nil {
			d := 0.0
			for _, w := range formula.Workloads {
				if b := base.Run.Workloads[w.Name].Rate; b > 0 {
					d = math.Max(d, math.Abs(drift.Run.Workloads[w.Name].Rate/b-1))
				}
			}
			d = formula.Round(d, 4)
			res.Drift, res.DriftMarked = &d, d > threshold
		}
		for _, e := range r.Entries {
			re := events.RoundEntry{EntryID: e.ID, Role: e.Role, Status: e.Status, Reason: e.Reason}
			if e.Submission != "" {
				re.EntryID = e.Submission
			}
			switch {
			case e.Role == "drift_baseline":
				continue
			case e.Role == "baseline":
				zero := 0.0
				re.Status, re.Score = entryScored, &zero
			case e.Run == nil:
				re.Status = entryDisqualified
			default:
				sc, reason := inRound(pol, base.Run, e.Run, scores[e.Submission])
				if reason != "" {
					re.Status, re.Reason = entryDisqualified, reason
				} else {
					re.Status, re.Score = entryScored, &sc
					e.Score = &sc
					if top == nil || sc > *top.Score {
						top = e
					}
				}
			}
			e.Status, e.Reason = re.Status, re.Reason
			res.Entries = append(res.Entries, re)
		}
	}
	res.Leader = r.Incumbent
	if top != nil {
		res.TopScore, res.Leader = top.Score, top.Submission
		res.LeaderChanged = top.Submission != r.Incumbent
	}
	res.GPUHours = formula.Round(res.GPUHours, 6)
	res.DurationSeconds = formula.Round(now.Sub(r.StartedAt).Seconds(), 3)
	r.Result, r.Status = res, StatusComplete
	if top != nil {
		r.emit(Effect{Leader: &Leader{Submission: top.Submission, Score: *top.Score, Round: r.ID}})
	}
	r.mark(i, events.StepDone, "pod "+r.Pod+" released", now)
	r.emit(Effect{Completed: res})
	r.emit(Effect{Release: true})
	return true
}

// inRound scores an entry against the in-round baseline: speeds from its
// rates in this round, memory and drift from its dev score (the same
// GPU's efficiency block, its quality); an entry that is not qualified is
// disqualified with its reason.
func inRound(pol policy.Policy, base, run *events.EngineRun, ds devScore) (float64, string) {
	if ds.Score == nil {
		if ds.Missing != "" {
			return 0, ds.Missing
		}
		return 0, notScored
	}
	if !ds.Score.Qualified {
		if ds.Score.Reason != nil {
			return 0, *ds.Score.Reason
		}
		return 0, "not qualified"
	}
	speeds := map[string]float64{}
	for _, w := range formula.Workloads {
		b, c := base.Workloads[w.Name].Rate, run.Workloads[w.Name].Rate
		if b <= 0 || c <= 0 {
			return 0, "no " + w.Name + " rate in this round"
		}
		speeds[w.Name] = c / b
	}
	memory := 1.0
	if ds.Score.Memory != nil {
		memory = *ds.Score.Memory
	}
	drift := 0.0
	if ds.Score.Drift != nil {
		drift = *ds.Score.Drift
	}
	return pol.Score(formula.Gain(formula.GeoMean(speeds), memory), drift), ""
}
