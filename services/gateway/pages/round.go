package pages

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/services/gateway/rounds"
)

// Owner is what the round page shows of an entry's submission: who
// submitted it and what, when the viewer may read its record.
type Owner struct {
	Participant, Method, Checkpoint, Precision string
	// Patch is the engine patch as PatchLabel writes it ("" for none).
	Patch string
}

// Round is the round page.
type Round struct {
	V rounds.View
	// Running says the round has not ended; Done and Total count its
	// steps, Current names the one in hand.
	Running     bool
	Done, Total int
	Current     string
	Scored      int
	Disq        int
	SettledIn   string
	TopScore    string
	Leader      string
	Previous    string
	LeaderNote  string
	Drift       string
	DriftNote   string
	Entries     []EntryRow
	Disqualifed []EntryRow
	Groups      []StepGroup
	Simulated   bool
	// Now is when the page was drawn (a running round's times count to it).
	Now time.Time
}

// EntryRow is one entry of the round.
type EntryRow struct {
	EntryID, Role, Submission string
	Owner                     *Owner
	Status, Score, Duration   string
	Speeds                    []Speed
	Reason, LogTail           string
}

// Speed is an entry's rate of one workload against the in-round
// baseline's.
type Speed struct {
	Workload, Rate, Ratio string
}

// StepGroup is a group of the plan (Setup, Baseline, Candidate 1 of 2,
// ...).
type StepGroup struct {
	Name        string
	Done, Total int
	Steps       []StepRow
}

// StepRow is one step with its real times. Detail is the step's detail
// without the engine's log tail, which LogTail holds apart.
type StepRow struct {
	rounds.Step
	Description, Started, Recorded, Since, Took string
	Detail, LogTail                             string
}

// descriptions say what each phase does in this arena.
var descriptions = map[events.Phase]string{
	events.PhaseProvisioning:     "Getting a GPU pod for the round.",
	events.PhaseBootstrapping:    "Making the pod's runner ready for the round's jobs.",
	events.PhasePullingImage:     "Fetching the engine the campaign serves.",
	events.PhaseDownloadingModel: "Staging the campaign's BF16 reference for the runner.",
	events.PhaseStartingEngine:   "Loading weights and waiting for the server to answer.",
	events.PhaseRunningSLA:       "Serving the three workloads under the campaign's latency objectives.",
	events.PhaseRunningScorer:    "Grading answers with the shared judge engine.",
	events.PhaseTeardown:         "Releasing the pod.",
}

// LogTailMarker separates a failure's sentence from its engine's log
// tail in a reason.
const LogTailMarker = "; container log tail: "

// splitLogTail separates a sentence from the engine's log tail it ends
// with ("" when it has none).
func splitLogTail(s string) (sentence, tail string) {
	if i := strings.Index(s, LogTailMarker); i >= 0 {
		return s[:i], s[i+len(LogTailMarker):]
	}
	return s, ""
}

// NewRound builds the page of a round view. owners maps the entries'
// submission ids to what the viewer may read of them; now is the
// drawing time.
func NewRound(v rounds.View, owners map[string]Owner, now time.Time) *Round {
	p := &Round{V: v, Running: v.Status == rounds.StatusRunning, Total: len(v.Steps), Now: now.UTC()}
	var prev *time.Time
	var group *StepGroup
	for _, st := range v.Steps {
		ended := st.Status.Ended()
		if ended {
			p.Done++
		}
		if st.Status == events.StepRunning && p.Current == "" {
			p.Current = fmt.Sprintf("step %d of %d: %s", st.Step, st.Of, st.Name)
		}
		p.Simulated = p.Simulated || st.Simulated
		row := StepRow{Step: st, Description: descriptions[st.Phase], Started: When(st.StartedAt), Recorded: When(st.FinishedAt), Since: Dash, Took: Dash}
		row.Detail, row.LogTail = splitLogTail(st.Detail)
		if st.FinishedAt != nil {
			if prev != nil {
				row.Since = Span(st.FinishedAt.Sub(*prev))
			} else if v.StartedAt != nil {
				// round.started's time is taken as its event is
				// published, a moment after the first step's own.
				row.Since = Span(max(st.FinishedAt.Sub(*v.StartedAt), 0))
			}
			prev = st.FinishedAt
			row.Took = Between(st.StartedAt, st.FinishedAt)
		} else if st.StartedAt != nil && st.Status == events.StepRunning {
			row.Took = Span(now.Sub(*st.StartedAt)) + " so far"
		}
		name := nonEmpty(st.Group, "Pending")
		if group == nil || group.Name != name {
			p.Groups = append(p.Groups, StepGroup{Name: name})
			group = &p.Groups[len(p.Groups)-1]
		}
		group.Total++
		if ended {
			group.Done++
		}
		group.Steps = append(group.Steps, row)
	}
	p.entries(owners, now)
	p.summary(now)
	return p
}

// submissionOf is the submission an entry of the plan stands for.
func (p *Round) submissionOf(entry string) string {
	switch {
	case entry == "incumbent":
		return p.V.Incumbent
	case strings.HasPrefix(entry, "candidate-"):
		n, err := strconv.Atoi(strings.TrimPrefix(entry, "candidate-"))
		if err == nil && n >= 1 && n <= len(p.V.Candidates) {
			return p.V.Candidates[n-1]
		}
	}
	return ""
}

// entries lays out one row per entry of the plan, the drift baseline
// last, with its in-round speeds against the baseline's rates.
func (p *Round) entries(owners map[string]Owner, now time.Time) { //nolint:gocyclo // a view model: one row per plan entry, each field with its own case for a step not yet reported
	type steps struct{ start, sla *rounds.Step }
	// The plan's entries, known from round.started before their steps
	// report: the baseline, the incumbent, each candidate, the drift
	// baseline.
	order := []string{"baseline"}
	if p.V.Incumbent != "" {
		order = append(order, "incumbent")
	}
	for i := range p.V.Candidates {
		order = append(order, fmt.Sprintf("candidate-%d", i+1))
	}
	order = append(order, "drift_baseline")
	by := map[string]*steps{}
	for _, id := range order {
		by[id] = &steps{}
	}
	for i := range p.V.Steps {
		st := &p.V.Steps[i]
		if st.EntryID == "" {
			continue
		}
		e := by[st.EntryID]
		if e == nil {
			e = &steps{}
			by[st.EntryID] = e
			order = append(order, st.EntryID)
		}
		switch st.Phase {
		case events.PhaseStartingEngine:
			e.start = st
		case events.PhaseRunningSLA:
			e.sla = st
		}
	}
	var base map[string]float64
	if b := by["baseline"]; b != nil && b.sla != nil {
		base = b.sla.Rates
	}
	results := map[string]int{}
	if p.V.Result != nil {
		for i, e := range p.V.Result.Entries {
			results[e.EntryID] = i
		}
	}
	for _, id := range order {
		e := by[id]
		row := EntryRow{EntryID: id, Role: roleOf(id), Submission: p.submissionOf(id), Status: "waiting", Score: Dash, Duration: Dash}
		if o, ok := owners[row.Submission]; ok && row.Submission != "" {
			row.Owner = &o
		}
		switch {
		case e.sla != nil && e.sla.Status == events.StepDone:
			row.Status = "measured"
		case (e.sla != nil && e.sla.Status == events.StepFailed) || (e.start != nil && e.start.Status == events.StepFailed):
			row.Status = "disqualified"
		case (e.start != nil && e.start.Status == events.StepRunning) || (e.sla != nil && e.sla.Status == events.StepRunning):
			row.Status = "running"
		}
		for _, st := range []*rounds.Step{e.start, e.sla} {
			if st != nil && st.Status == events.StepFailed && row.Reason == "" {
				row.Reason = st.Detail
			}
		}
		key := row.Submission
		if key == "" {
			key = id
		}
		if i, ok := results[key]; ok {
			r := p.V.Result.Entries[i]
			row.Status = r.Status
			if r.Score != nil {
				row.Score = Fixed(*r.Score, 4)
			}
			if r.Reason != "" {
				row.Reason = r.Reason
			}
		}
		if e.start != nil && e.start.StartedAt != nil {
			switch end := endOf(e.start, e.sla); {
			case end != nil:
				row.Duration = Span(end.Sub(*e.start.StartedAt))
			case row.Status == "running":
				row.Duration = Span(now.Sub(*e.start.StartedAt)) + " so far"
			}
		}
		if e.sla != nil && e.sla.Rates != nil {
			for _, w := range Workloads {
				r, ok := e.sla.Rates[w]
				if !ok {
					continue
				}
				s := Speed{Workload: w, Rate: Fixed(r, 1), Ratio: Dash}
				if b := base[w]; b > 0 {
					s.Ratio = Ratio(r / b)
				}
				row.Speeds = append(row.Speeds, s)
			}
		}
		row.Reason, row.LogTail = splitLogTail(row.Reason)
		if id == "drift_baseline" {
			row.Status = strings.Replace(row.Status, "waiting", "waiting for the others", 1)
		}
		p.Entries = append(p.Entries, row)
		if row.Status == "disqualified" {
			p.Disqualifed = append(p.Disqualifed, row)
		}
	}
}

func endOf(start, sla *rounds.Step) *time.Time {
	if sla != nil && sla.FinishedAt != nil && sla.Status != events.StepSkipped {
		return sla.FinishedAt
	}
	if start != nil && start.Status == events.StepFailed {
		return start.FinishedAt
	}
	return nil
}

func roleOf(entry string) string {
	switch {
	case strings.HasPrefix(entry, "candidate-"):
		return "candidate"
	case entry == "drift_baseline":
		return "drift baseline"
	}
	return entry
}

// summary writes what the round came to: its entries scored and
// disqualified, how long it took, the top score, the leader and the
// drift baseline's verdict.
func (p *Round) summary(now time.Time) {
	for _, e := range p.Entries {
		switch e.Status {
		case "scored":
			p.Scored++
		case "disqualified":
			p.Disq++
		}
	}
	p.TopScore, p.Drift, p.SettledIn = Dash, Dash, Dash
	res := p.V.Result
	switch {
	case p.Running && p.V.StartedAt != nil:
		p.SettledIn = "running for " + Span(now.Sub(*p.V.StartedAt))
		p.LeaderNote = "not settled yet: the leader changes only when the round completes"
		p.DriftNote = "the drift baseline runs last"
	case p.V.Status == rounds.StatusFailed:
		p.LeaderNote = "unchanged: the round failed (" + p.V.Reason + ")"
		p.DriftNote = "not measured: the round failed"
	case res != nil:
		p.SettledIn = Span(time.Duration(res.DurationSeconds * float64(time.Second)))
		if res.TopScore != nil {
			p.TopScore = Fixed(*res.TopScore, 4)
		}
		p.Leader, p.Previous = res.Leader, res.PreviousLeader
		switch {
		case res.Leader == "":
			p.LeaderNote = "none: no entry scored"
		case res.LeaderChanged && res.PreviousLeader != "":
			p.LeaderNote = "changed: won by " + res.Leader + ", the incumbent " + res.PreviousLeader + " lost"
		case res.LeaderChanged:
			p.LeaderNote = "changed: won by " + res.Leader + " (the campaign had no leader)"
		default:
			p.LeaderNote = "kept by the incumbent " + res.Leader
		}
		switch {
		case res.Drift == nil:
			p.DriftNote = "not measured: the drift baseline did not finish"
		case res.DriftMarked:
			p.Drift = Percent(*res.Drift, 2)
			p.DriftNote = "marked: the pod moved beyond the campaign's threshold during the round; its speeds are suspect"
		default:
			p.Drift = Percent(*res.Drift, 2)
			p.DriftNote = "within the campaign's threshold: the pod held steady"
		}
	}
}
