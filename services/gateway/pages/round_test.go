package pages

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/services/gateway/rounds"
)

const roundID = "round-5f3a9c0e1b2d4a68"

var r0 = time.Date(2026, 9, 17, 12, 46, 0, 0, time.UTC)

// plan is a round's plan as the round service lays it out for two
// candidates and no incumbent: 17 steps.
type planStep struct {
	group, name string
	phase       events.Phase
	role, entry string
}

func roundPlan() []planStep {
	p := []planStep{
		{"Setup", "Renting a GPU pod", "provisioning", "", ""}, {"Setup", "Preparing the pod", "bootstrapping", "", ""},
		{"Setup", "Pulling engine images", "pulling_image", "", ""}, {"Setup", "Downloading model weights", "downloading_model", "", ""},
		{"Baseline", "Baseline, starting the engine", "starting_engine", "baseline", "baseline"}, {"Baseline", "Baseline, running SLA", "running_sla", "baseline", "baseline"},
		{"Incumbent", "Incumbent, starting the engine", "starting_engine", "incumbent", ""}, {"Incumbent", "Incumbent, running SLA", "running_sla", "incumbent", ""},
	}
	for n := 1; n <= 2; n++ {
		g := fmt.Sprintf("Candidate %d of 2", n)
		e := fmt.Sprintf("candidate-%d", n)
		p = append(p, planStep{g, g + ", starting the engine", "starting_engine", "candidate", e}, planStep{g, g + ", running SLA", "running_sla", "candidate", e})
	}
	return append(p, planStep{"Scorer", "Scorer, starting the engine", "starting_engine", "scorer", ""}, planStep{"Scorer", "Scorer, running the shared scorer", "running_scorer", "scorer", ""},
		planStep{"Drift baseline", "Drift baseline, starting the engine", "starting_engine", "drift_baseline", "drift_baseline"},
		planStep{"Drift baseline", "Drift baseline, running SLA", "running_sla", "drift_baseline", "drift_baseline"},
		planStep{"Teardown", "Releasing the pod", "teardown", "", ""})
}

type stepOutcome struct {
	status events.StepStatus
	detail string
	rates  map[string]float64
	took   time.Duration
}

// roundEvents are the events of a round whose steps ended as outcomes
// say (in plan order, each after the one before), then end.
func roundEvents(t *testing.T, outcomes []stepOutcome, end any) []event.Event {
	t.Helper()
	mk := func(typ events.Type, id string, data any, at time.Time) event.Event {
		e, err := events.NewEvent(events.DeriveID(roundID, id), typ, events.Source("round"), roundID, data)
		require.NoError(t, err)
		e.SetTime(at)
		return e
	}
	plan := roundPlan()
	evs := []event.Event{mk(events.RoundStarted, "started", events.RoundStartedData{RoundID: roundID, Campaign: "qwen3-tiny", Pod: "pod-0",
		Candidates: []string{"sub-1", "sub-2"}, Steps: len(plan)}, r0)}
	at := r0
	for i, o := range outcomes {
		p := plan[i]
		start := at
		d := events.RoundStepData{RoundID: roundID, Step: i + 1, Of: len(plan), Group: p.group, Name: p.name, Phase: p.phase, Role: p.role, EntryID: p.entry,
			Status: "running", StartedAt: &start}
		evs = append(evs, mk(events.RoundStep, fmt.Sprint(i, "running"), d, start))
		if o.status == "running" {
			continue
		}
		at = at.Add(o.took)
		fin := at
		d.Status, d.FinishedAt, d.Detail, d.Rates, d.Simulated = o.status, &fin, o.detail, o.rates, o.rates != nil
		evs = append(evs, mk(events.RoundStep, fmt.Sprint(i, o.status), d, fin))
	}
	switch e := end.(type) {
	case events.RoundCompletedData:
		evs = append(evs, mk(events.RoundCompleted, "completed", e, at))
	case events.RoundFailedData:
		evs = append(evs, mk(events.RoundFailed, "failed", e, at))
	}
	return evs
}

func view(t *testing.T, evs []event.Event) rounds.View {
	t.Helper()
	var v *rounds.View
	for _, e := range evs {
		next, _, err := rounds.Fold(v, e)
		require.NoError(t, err)
		v = next
	}
	return *v
}

const tail = `File "/src/engine.py", line 12, in capture <graphs>
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 136.00 MiB`

func completeOutcomes() []stepOutcome {
	sec := time.Second
	return []stepOutcome{
		{"done", "pod pod-0 is this arena's own", nil, 10 * time.Millisecond}, {"done", "the pod's runner takes the jobs", nil, 0},
		{"done", "engine: simengine", nil, 0}, {"done", "BF16 reference stored", nil, 0},
		{"done", "engine healthy", nil, 3 * sec}, {"done", "serve 1000.0 tok/s", map[string]float64{"serve": 1000, "interactive": 100, "long_context": 400}, 20 * sec},
		{"skipped", "no incumbent yet", nil, 0}, {"skipped", "no incumbent yet", nil, 0},
		{"done", "engine healthy", nil, 2 * sec}, {"done", "serve 1500.0 tok/s", map[string]float64{"serve": 1500, "interactive": 120, "long_context": 600}, 15 * sec},
		{"failed", "engine_oom: engine died before becoming healthy (last error: [Errno 111] Connection refused); container log tail: " + tail, nil, 4 * sec},
		{"skipped", "the engine did not start", nil, 0},
		{"skipped", "no shared judge", nil, 0}, {"skipped", "no shared judge", nil, 0},
		{"done", "engine healthy", nil, 3 * sec}, {"done", "serve 1012.0 tok/s", map[string]float64{"serve": 1012, "interactive": 99, "long_context": 404}, 20 * sec},
		{"done", "pod pod-0 released", nil, 500 * time.Millisecond},
	}
}

func TestRoundComplete(t *testing.T) {
	top, zero, drift := 0.1234, 0.0, 0.012
	done := events.RoundCompletedData{RoundID: roundID, Campaign: "qwen3-tiny", TopScore: &top, Leader: "sub-1", LeaderChanged: true,
		DurationSeconds: 8237, Drift: &drift, Entries: []events.RoundEntry{
			{EntryID: "baseline", Role: "baseline", Status: "scored", Score: &zero},
			{EntryID: "sub-1", Role: "candidate", Status: "scored", Score: &top},
			{EntryID: "sub-2", Role: "candidate", Status: "disqualified",
				Reason: "engine_oom: engine died before becoming healthy (last error: [Errno 111] Connection refused); container log tail: " + tail},
		}}
	v := view(t, roundEvents(t, completeOutcomes(), done))
	owners := map[string]Owner{"sub-1": {Participant: "team-a", Checkpoint: "tiny-fp8", Patch: "patches/fast.patch 3f2a91c…9c0de"}}
	p := NewRound(v, owners, r0.Add(3*time.Hour))
	page := render(t, KindRound, Page{Title: "x", Live: "round:" + roundID, Body: p})

	has(t, page, `<span class="st complete" id="round-status">complete</span>`)
	has(t, page, `<strong id="campaign">qwen3-tiny</strong>`)
	has(t, page, `<p id="entries-count">2 scored · 1 disqualified</p>`)
	has(t, page, `<p id="settled">2h 17m</p>`)
	has(t, page, `<p id="top-score">0.1234</p>`)
	has(t, page, "0 is baseline speed")
	has(t, page, "changed: won by sub-1 (the campaign had no leader)")
	has(t, page, `<p id="drift">1.20%</p>`)
	has(t, page, "within the campaign&#39;s threshold")
	has(t, page, `id="simulated"`)

	// Entries by role, with participant, patch, status, score, duration,
	// speeds against the baseline and a link.
	c1 := row(t, page, "data-entry", "candidate-1")
	for _, s := range []string{`<a href="/participants/team-a">team-a</a>`, "<code>patches/fast.patch 3f2a91c…9c0de</code>", `<span class="st scored">scored</span>`,
		`<td class="n score">0.1234</td>`, "<td class=\"n\">17.0s</td>", `<span data-workload="serve" title="1500.0 tokens/s">1.50×</span>`,
		`<span data-workload="interactive" title="120.0 tokens/s">1.20×</span>`, `<span data-workload="long_context" title="600.0 tokens/s">1.50×</span>`,
		`<a href="/submissions/sub-1">sub-1</a>`} {
		has(t, c1, s)
	}
	base := row(t, page, "data-entry", "baseline")
	has(t, base, `<td class="n score">0.0000</td>`)
	has(t, base, `1.00×`)
	has(t, base, ">BF16</td>")
	c2 := row(t, page, "data-entry", "candidate-2")
	has(t, c2, "not readable with this token")
	has(t, c2, `<span class="st disqualified">disqualified</span>`)
	has(t, c2, "<td class=\"n\">4.0s</td>")
	drow := row(t, page, "data-entry", "drift_baseline")
	has(t, drow, `title="1012.0 tokens/s">1.01×</span>`)
	// Every disqualification with its reason and its log tail apart.
	disq := page[strings.Index(page, `<section id="disqualifications">`):]
	disq = disq[:strings.Index(disq, "</section>")]
	has(t, disq, "engine_oom: engine died before becoming healthy (last error: [Errno 111] Connection refused)</p>")
	has(t, disq, `<pre class="logtail">File &#34;/src/engine.py&#34;, line 12, in capture &lt;graphs&gt;`+"\n"+`torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 136.00 MiB</pre>`)

	// The steps grouped by phase, with their real times.
	require.Len(t, p.Groups, 8)
	for i, want := range []string{"Setup 4/4", "Baseline 2/2", "Incumbent 2/2", "Candidate 1 of 2 2/2", "Candidate 2 of 2 2/2", "Scorer 2/2", "Drift baseline 2/2", "Teardown 1/1"} {
		g := p.Groups[i]
		require.Equal(t, want, fmt.Sprintf("%s %d/%d", g.Name, g.Done, g.Total))
	}
	has(t, page, "Run <span class=\"muted\">17/17 steps</span>")
	step6 := p.Groups[1].Steps[1]
	require.Equal(t, "Sep 17, 2026, 12:46:23 UTC", step6.Recorded)
	require.Equal(t, "20.0s", step6.Took)
	require.Equal(t, "20.0s", step6.Since, "since step 5 was recorded")
	require.Equal(t, "10ms", p.Groups[0].Steps[0].Since, "since the round was seated")
	require.Equal(t, "0ms", p.Groups[0].Steps[1].Since)
	has(t, page, "Serving the three workloads under the campaign&#39;s latency objectives.")
	// A failed step's engine log tail is apart from its sentence, folded.
	failed := p.Groups[4].Steps[0]
	require.Equal(t, events.StepFailed, failed.Status)
	require.Equal(t, "engine_oom: engine died before becoming healthy (last error: [Errno 111] Connection refused)", failed.Detail)
	require.Equal(t, tail, failed.LogTail)
	step := page[strings.Index(page, `<li class="step" data-step="11"`):]
	step = step[:strings.Index(step, "</li>")]
	has(t, step, `<div class="detail">engine_oom: engine died before becoming healthy (last error: [Errno 111] Connection refused)</div>`)
	has(t, step, `<details class="steptail"><summary>container log tail</summary><pre class="logtail">File &#34;/src/engine.py&#34;`)
	require.Equal(t, "engine healthy", p.Groups[1].Steps[0].Detail, "a step without a log tail keeps its detail")
	require.Empty(t, p.Groups[1].Steps[0].LogTail)
}

func TestRoundRunning(t *testing.T) {
	outs := completeOutcomes()[:9]
	outs = append(outs, stepOutcome{status: "running"})
	v := view(t, roundEvents(t, outs, nil))
	now := r0.Add(time.Minute)
	p := NewRound(v, nil, now)
	page := render(t, KindRound, Page{Title: "x", Body: p})
	has(t, page, `<span class="st running" id="round-status">running</span>`)
	has(t, page, `<progress max="17" value="9"></progress> 9/17 steps · now step 10 of 17: Candidate 1 of 2, running SLA`)
	has(t, page, "not settled yet")
	has(t, page, `<p id="top-score">—</p>`)
	has(t, page, "the drift baseline runs last")
	c1 := row(t, page, "data-entry", "candidate-1")
	has(t, c1, `<span class="st running">running</span>`)
	// Its engine started at r0 + 23.01 s; drawn at r0 + 60 s.
	has(t, c1, "37.0s so far")
	has(t, row(t, page, "data-entry", "candidate-2"), `<span class="st waiting">waiting</span>`)
	has(t, row(t, page, "data-entry", "drift_baseline"), "waiting for the others")
	require.Equal(t, 0, p.Scored)
	require.Equal(t, "—", p.Groups[len(p.Groups)-1].Steps[0].Since, "a step not recorded yet")
	require.Equal(t, "Not recorded", p.Groups[len(p.Groups)-1].Steps[0].Recorded)
}

func TestRoundFailed(t *testing.T) {
	outs := completeOutcomes()[:5]
	v := view(t, roundEvents(t, outs, events.RoundFailedData{RoundID: roundID, Reason: "interrupted",
		Message: "the round service stopped; reached step 5 of 17: Baseline, starting the engine"}))
	page := render(t, KindRound, Page{Title: "x", Body: NewRound(v, nil, r0.Add(time.Hour))})
	has(t, page, `<span class="st failed" id="round-status">failed</span>`)
	has(t, page, `<code class="reason">interrupted</code>: the round service stopped; reached step 5 of 17: Baseline, starting the engine`)
	has(t, page, "unchanged: the round failed (interrupted)")
	has(t, page, "not measured: the round failed")
}
