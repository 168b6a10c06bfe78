package rounds

import (
	"fmt"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events"
)

const rid = "round-1"

var (
	t0 = time.Date(2026, 10, 13, 6, 0, 0, 0, time.UTC)
	t1 = t0.Add(time.Minute)
	t2 = t0.Add(2 * time.Minute)
)

func at(t time.Time) *time.Time { return &t }

// mk builds a round event of topic tp; its id derives from name, so the
// same name is a redelivery of the same event.
func mk[T any](t *testing.T, tp events.Topic[T], name string, data T) event.Event {
	t.Helper()
	e, err := tp.Event("ev-"+name, events.Source("round"), rid, data)
	require.NoError(t, err)
	e.SetTime(t0)
	return e
}

func startedEv(t *testing.T) event.Event {
	return mk(t, events.Round.Started, "started", events.RoundStartedData{RoundID: rid, Campaign: "tiny", Pod: "pod-a",
		Incumbent: "sub-0", Candidates: []string{"sub-1"}, Steps: 3})
}

func stepEv(t *testing.T, n int, status events.StepStatus, start, end *time.Time) event.Event {
	return mk(t, events.Round.Step, fmt.Sprintf("step-%d-%s", n, status), events.RoundStepData{RoundID: rid, Step: n, Of: 3,
		Group: "sla", Name: fmt.Sprintf("serve entry %d", n), Phase: "serve", Role: "candidate", EntryID: fmt.Sprintf("candidate-%d", n),
		Status: status, StartedAt: start, FinishedAt: end, Rates: ratesOf(status), Simulated: status == events.StepDone})
}

// ratesOf is what a step of status carries: rates once done.
func ratesOf(status events.StepStatus) map[string]float64 {
	if status != events.StepDone {
		return nil
	}
	return map[string]float64{"serve": 2800.5, "interactive": 293.7}
}

func completedEv(t *testing.T) event.Event {
	return mk(t, events.Round.Completed, "completed", events.RoundCompletedData{RoundID: rid, Campaign: "tiny", Leader: "sub-1",
		LeaderChanged: true, PreviousLeader: "sub-0", Entries: []events.RoundEntry{{EntryID: "candidate-1", Role: "candidate", Status: "scored"}}})
}

func failedEv(t *testing.T) event.Event {
	return mk(t, events.Round.Failed, "failed", events.RoundFailedData{RoundID: rid, Reason: "interrupted", Message: "the round service stopped"})
}

// viewStep is the view of step n as stepEv reports it.
func viewStep(n int, status events.StepStatus, start, end *time.Time) Step {
	return Step{Step: n, Of: 3, Group: "sla", Name: fmt.Sprintf("serve entry %d", n), Phase: "serve", Role: "candidate",
		EntryID: fmt.Sprintf("candidate-%d", n), Status: status, StartedAt: start, FinishedAt: end, Rates: ratesOf(status), Simulated: status == events.StepDone}
}

func pending(n int) Step { return Step{Step: n, Of: 3, Status: events.StepPending} }

func TestFold(t *testing.T) {
	base := func(status string, steps ...Step) *View {
		return &View{RoundID: rid, Campaign: "tiny", Pod: "pod-a", Incumbent: "sub-0", Candidates: []string{"sub-1"},
			Status: status, StartedAt: at(t0), Steps: steps}
	}
	complete := base(StatusComplete, viewStep(1, events.StepDone, at(t1), at(t2)), viewStep(2, events.StepSkipped, nil, nil), pending(3))
	complete.Result = &events.RoundCompletedData{RoundID: rid, Campaign: "tiny", Leader: "sub-1", LeaderChanged: true, PreviousLeader: "sub-0",
		Entries: []events.RoundEntry{{EntryID: "candidate-1", Role: "candidate", Status: "scored"}}}
	failed := base(StatusFailed, viewStep(1, events.StepRunning, at(t1), nil), pending(2), pending(3))
	failed.Reason, failed.Message = "interrupted", "the round service stopped"

	tests := []struct {
		name    string
		events  func(t *testing.T) []event.Event
		changed []bool
		want    *View
	}{
		{
			name: "started, steps, completed",
			events: func(t *testing.T) []event.Event {
				return []event.Event{startedEv(t), stepEv(t, 1, events.StepRunning, at(t1), nil), stepEv(t, 1, events.StepDone, at(t1), at(t2)),
					stepEv(t, 2, events.StepSkipped, nil, nil), completedEv(t)}
			},
			changed: []bool{true, true, true, true, true},
			want:    complete,
		},
		{
			name: "redelivered and out-of-order steps",
			events: func(t *testing.T) []event.Event {
				return []event.Event{startedEv(t), stepEv(t, 1, events.StepDone, nil, at(t2)), stepEv(t, 1, events.StepRunning, at(t1), nil),
					stepEv(t, 1, events.StepDone, nil, at(t2)), stepEv(t, 2, events.StepSkipped, nil, nil), stepEv(t, 2, events.StepFailed, nil, at(t2)),
					startedEv(t), completedEv(t), completedEv(t)}
			},
			// The late running step brings nothing: a done step never
			// moves back, and its missing start stays missing. The first
			// end of a step wins.
			changed: []bool{true, true, false, false, true, false, false, true, false},
			want: func() *View {
				v := *complete
				v.Steps = []Step{viewStep(1, events.StepDone, nil, at(t2)), viewStep(2, events.StepSkipped, nil, nil), pending(3)}
				return &v
			}(),
		},
		{
			name: "a step before its round.started",
			events: func(t *testing.T) []event.Event {
				return []event.Event{stepEv(t, 1, events.StepRunning, at(t1), nil), stepEv(t, 1, events.StepDone, nil, at(t2)), startedEv(t),
					stepEv(t, 2, events.StepSkipped, nil, nil), completedEv(t)}
			},
			changed: []bool{true, true, true, true, true},
			want:    complete,
		},
		{
			name: "failed round, a completed after it changes nothing",
			events: func(t *testing.T) []event.Event {
				return []event.Event{startedEv(t), stepEv(t, 1, events.StepRunning, at(t1), nil), failedEv(t), failedEv(t), completedEv(t)}
			},
			changed: []bool{true, true, true, false, false},
			want:    failed,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var v *View
			evs := tt.events(t)
			require.Len(t, tt.changed, len(evs))
			for i, e := range evs {
				next, changed, err := Fold(v, e)
				require.NoError(t, err)
				require.Equal(t, tt.changed[i], changed, "event %d (%s)", i, e.ID())
				if !changed {
					require.Equal(t, v, next, "an unchanged fold returns the view as it was")
				}
				v = next
			}
			require.Equal(t, tt.want, v)
		})
	}
}

func TestFoldRefusesBadEvents(t *testing.T) {
	other, err := events.Round.Failed.Event("ev-x", events.Source("round"), "round-2",
		events.RoundFailedData{RoundID: rid, Reason: "interrupted", Message: "m"})
	require.NoError(t, err)
	beyond := stepEv(t, 1, events.StepRunning, nil, nil)
	require.NoError(t, beyond.SetData(event.ApplicationJSON, events.RoundStepData{RoundID: rid, Step: maxSteps + 1, Of: 3,
		Group: "g", Name: "n", Phase: "p", Status: events.StepRunning}))
	notRound, err := events.Job.Progress.Event("ev-y", events.Source("runner"), rid, events.RunnerJobProgressData{JobID: "j", Kind: "sla"})
	require.NoError(t, err)
	view, _, err := Fold(nil, startedEv(t))
	require.NoError(t, err)
	for name, tc := range map[string]struct {
		cur *View
		e   event.Event
	}{
		"round id is not its subject": {nil, other},
		"step outside any plan":       {nil, beyond},
		"not a round event":           {nil, notRound},
		"another round's view":        {&View{RoundID: "round-9", Status: StatusRunning}, startedEv(t)},
	} {
		t.Run(name, func(t *testing.T) {
			next, changed, err := Fold(tc.cur, tc.e)
			require.ErrorIs(t, err, ErrBadEvent)
			require.False(t, changed)
			require.Equal(t, tc.cur, next)
		})
	}
	require.Equal(t, []Step{pending(1), pending(2), pending(3)}, view.Steps, "round.started announces its plan's steps")
}
