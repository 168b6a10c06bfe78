// Package rounds keeps the gateway's own view of each round: it folds
// round.started, round.step, round.completed and round.failed into one
// View per round, in the JetStream KV bucket round_views (its owner is
// the gateway), which the API serves and streams. The round service's
// internal state (bucket rounds) is never read here.
package rounds

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/lowbarena/lowbarena/events"
)

// Round statuses of a view.
const (
	StatusRunning  = "running"
	StatusComplete = "complete"
	StatusFailed   = "failed"
)

// View is one round as the page shows it.
type View struct {
	RoundID    string   `json:"round_id"`
	Campaign   string   `json:"campaign"`
	Pod        string   `json:"pod"`
	Incumbent  string   `json:"incumbent,omitempty"`
	Candidates []string `json:"candidates"`
	// Status is running until round.completed (complete) or round.failed
	// (failed); the first end wins.
	Status string `json:"status"`
	// StartedAt is the time of round.started.
	StartedAt *time.Time `json:"started_at,omitempty"`
	// Steps holds one step per step of the round's plan, in plan order.
	Steps []Step `json:"steps"`
	// Result is round.completed's data.
	Result *events.RoundCompletedData `json:"result,omitempty"`
	// Reason and Message say why a failed round failed.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// Step is one step of a round's plan.
type Step struct {
	Step    int          `json:"step"`
	Of      int          `json:"of"`
	Group   string       `json:"group,omitempty"`
	Name    string       `json:"name,omitempty"`
	Phase   events.Phase `json:"phase,omitempty"`
	Role    string       `json:"role,omitempty"`
	EntryID string       `json:"entry_id,omitempty"`
	// Status is the step's (events.StepStatus); a step announced by
	// round.started and not yet reported is pending.
	Status     events.StepStatus `json:"status"`
	StartedAt  *time.Time        `json:"started_at,omitempty"`
	FinishedAt *time.Time        `json:"finished_at,omitempty"`
	Detail     string            `json:"detail,omitempty"`
	// Rates are the entry's output tokens per second by workload once
	// its SLA was measured; Simulated says they came from a simulation.
	Rates     map[string]float64 `json:"rates,omitempty"`
	Simulated bool               `json:"simulated,omitempty"`
}

// ErrBadEvent is returned by Fold for an event that can never fold: not a
// round event, data that does not decode, a round id that is not its
// subject, or a step outside any plan.
var ErrBadEvent = errors.New("rounds: event cannot be folded")

// maxSteps bounds a plan, so a bad step number cannot grow a view without
// end.
const maxSteps = 4096

// stepRank orders step statuses. A step only moves to a higher rank, so
// a redelivered or out-of-order step event never moves it back; the end
// states share a rank, so the first end wins.
var stepRank = map[events.StepStatus]int{events.StepPending: 0, events.StepRunning: 1, events.StepDone: 2, events.StepFailed: 2, events.StepSkipped: 2}

// roundRank orders round statuses in the same way.
var roundRank = map[string]int{StatusRunning: 0, StatusComplete: 1, StatusFailed: 1}

// Fold applies one round event to cur (nil: no view yet) and returns the
// next view and whether it differs from cur; cur is not modified. Any
// round event starts a view, so a step folded before its round.started
// is kept, and round.started fills in the rest when it comes. Folding
// the same event twice changes nothing the second time.
func Fold(cur *View, e event.Event) (*View, bool, error) {
	next := clone(cur)
	var id string
	var err error
	switch events.Type(e.Type()) {
	case events.RoundStarted:
		var d events.RoundStartedData
		if d, err = events.Round.Started.Decode(e); err == nil {
			id = d.RoundID
			next = ensure(next, id)
			err = started(next, d, e.Time())
		}
	case events.RoundStep:
		var d events.RoundStepData
		if d, err = events.Round.Step.Decode(e); err == nil {
			id = d.RoundID
			next = ensure(next, id)
			err = step(next, d)
		}
	case events.RoundCompleted:
		var d events.RoundCompletedData
		if d, err = events.Round.Completed.Decode(e); err == nil {
			id = d.RoundID
			next = ensure(next, id)
			if next.Campaign == "" {
				next.Campaign = d.Campaign
			}
			if roundRank[next.Status] == 0 {
				next.Status, next.Result = StatusComplete, &d
			}
		}
	case events.RoundFailed:
		var d events.RoundFailedData
		if d, err = events.Round.Failed.Decode(e); err == nil {
			id = d.RoundID
			next = ensure(next, id)
			if roundRank[next.Status] == 0 {
				next.Status, next.Reason, next.Message = StatusFailed, d.Reason, d.Message
			}
		}
	default:
		return cur, false, fmt.Errorf("%w: %s is not a round event", ErrBadEvent, e.Type())
	}
	switch {
	case err != nil:
		return cur, false, fmt.Errorf("%w: %s %s: %w", ErrBadEvent, e.Type(), e.ID(), err)
	case id != e.Subject() || !events.ValidID(id):
		return cur, false, fmt.Errorf("%w: %s %s names round %q under subject %q", ErrBadEvent, e.Type(), e.ID(), id, e.Subject())
	case cur != nil && cur.RoundID != id:
		return cur, false, fmt.Errorf("%w: %s %s is about round %q, not %q", ErrBadEvent, e.Type(), e.ID(), id, cur.RoundID)
	}
	return next, !reflect.DeepEqual(cur, next), nil
}

// ensure returns v, or a new running view of round id.
func ensure(v *View, id string) *View {
	if v != nil {
		return v
	}
	return &View{RoundID: id, Status: StatusRunning, Candidates: []string{}, Steps: []Step{}}
}

// started fills in what round.started says, once, and announces the
// plan's steps as pending.
func started(v *View, d events.RoundStartedData, at time.Time) error {
	if d.Steps > maxSteps {
		return fmt.Errorf("a plan of %d steps", d.Steps)
	}
	if v.StartedAt == nil {
		at := at.UTC().Round(0)
		v.Campaign, v.Pod, v.Incumbent, v.StartedAt = d.Campaign, d.Pod, d.Incumbent, &at
		v.Candidates = append([]string{}, d.Candidates...)
	}
	grow(v, d.Steps)
	return nil
}

// step folds one step event: the step moves forward only.
func step(v *View, d events.RoundStepData) error {
	rank, ok := stepRank[d.Status]
	if !ok || d.Status == events.StepPending {
		return fmt.Errorf("step status %q", d.Status)
	}
	if d.Step < 1 || d.Step > maxSteps || d.Of > maxSteps {
		return fmt.Errorf("step %d of %d", d.Step, d.Of)
	}
	grow(v, max(d.Step, d.Of))
	s := &v.Steps[d.Step-1]
	// A placeholder (no name yet) takes any report; a reported step only
	// a later status.
	if s.Name != "" && rank <= stepRank[s.Status] {
		return nil
	}
	next := Step{Step: d.Step, Of: d.Of, Group: d.Group, Name: d.Name, Phase: d.Phase, Role: d.Role, EntryID: d.EntryID,
		Status: d.Status, StartedAt: utc(d.StartedAt), FinishedAt: utc(d.FinishedAt), Detail: d.Detail,
		Rates: maps.Clone(d.Rates), Simulated: d.Simulated}
	if next.StartedAt == nil {
		next.StartedAt = s.StartedAt
	}
	if next.FinishedAt == nil {
		next.FinishedAt = s.FinishedAt
	}
	*s = next
	return nil
}

// grow makes v hold at least n steps, the new ones pending.
func grow(v *View, n int) {
	for i := len(v.Steps); i < n; i++ {
		v.Steps = append(v.Steps, Step{Step: i + 1, Of: n, Status: events.StepPending})
	}
	for i := range v.Steps {
		if v.Steps[i].Name == "" && v.Steps[i].Of < n {
			v.Steps[i].Of = n
		}
	}
}

func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC().Round(0)
	return &u
}

// clone deep-copies v.
func clone(v *View) *View {
	if v == nil {
		return nil
	}
	c := *v
	c.Candidates = slices.Clone(v.Candidates)
	c.Steps = slices.Clone(v.Steps)
	for i := range c.Steps {
		c.Steps[i].Rates = maps.Clone(v.Steps[i].Rates)
	}
	if v.Result != nil {
		r := *v.Result
		r.Entries = slices.Clone(v.Result.Entries)
		c.Result = &r
	}
	return &c
}
