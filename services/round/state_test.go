package round

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/campaign"
	"github.com/lowbarena/lowbarena/domain/policy"
	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/app"
)

// These tests are the round's decisions without a bus: the plan, the
// state's transitions on the runner's outcomes, the lease and the
// in-round score.

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func testCampaign() *campaign.Campaign {
	return &campaign.Campaign{TaskID: "camp", Engine: &campaign.EngineSpec{Command: "engine --model {{.Checkpoint}}"}}
}

// newRound is a round of n candidates, with or without an incumbent.
func newRound(n int, incumbent bool) *Round {
	r := &Round{Version: stateVersion, ID: "round-test", Campaign: "camp", Pod: "pod-t", Status: StatusRunning, StartedAt: t0}
	ref := events.BundleRef{SHA256: "0123456789abcdef0123", Size: 42}
	r.Entries = append(r.Entries, &Entry{ID: "baseline", Role: "baseline", Checkpoint: ref, KVCacheDType: "auto"})
	if incumbent {
		r.Incumbent = "lead"
		r.Entries = append(r.Entries, &Entry{ID: "incumbent", Role: "incumbent", Submission: "lead", KVCacheDType: "auto"})
	}
	for i := range n {
		id := string(rune('a' + i))
		r.Entries = append(r.Entries, &Entry{ID: "candidate-" + id, Role: "candidate", Submission: id, KVCacheDType: "auto"})
	}
	r.Entries = append(r.Entries, &Entry{ID: "drift_baseline", Role: "drift_baseline", Checkpoint: ref, KVCacheDType: "auto"})
	r.Steps = plan(r)
	return r
}

func statuses(r *Round) []string {
	var out []string
	for _, st := range r.Steps {
		out = append(out, string(st.Status))
	}
	return out
}

func TestPlan(t *testing.T) {
	cases := []struct {
		name       string
		candidates int
		incumbent  bool
		steps      int
		// skipped are the steps (numbered from 1) that stand for a
		// missing incumbent, to be skipped: the plan keeps its shape.
		skipped []int
	}{
		{"five candidates, no incumbent", 5, false, 23, []int{7, 8}},
		{"five candidates and the incumbent", 5, true, 23, nil},
		{"one candidate", 1, false, 15, []int{7, 8}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRound(c.candidates, c.incumbent)
			require.Len(t, r.Steps, c.steps)
			require.Equal(t, events.PhaseProvisioning, r.Steps[0].Phase)
			require.Equal(t, events.PhaseTeardown, r.Steps[c.steps-1].Phase)
			require.Equal(t, "Drift baseline", r.Steps[c.steps-3].Group)
			require.Equal(t, "scorer", r.Steps[c.steps-5].Role)
			for i, st := range r.Steps {
				require.Equal(t, i+1, st.Step)
				require.Equal(t, c.steps, st.Of)
			}
			if c.candidates == 5 {
				require.Equal(t, "Candidate 2 of 5, running SLA", r.Steps[11].Name)
			}
			for _, n := range c.skipped {
				require.Equal(t, "incumbent", r.Steps[n-1].Role, "step %d", n)
				require.Empty(t, r.Steps[n-1].EntryID, "step %d", n)
			}
			if c.incumbent {
				require.Equal(t, "incumbent", r.Steps[6].EntryID)
			}
			// The setup settles and the baseline's job is requested.
			require.False(t, advance(r, testCampaign(), t0, time.Minute))
			require.Equal(t, []string{"done", "done", "done", "done", "running", "pending"}, statuses(r)[:6])
			var jobs []string
			for _, ef := range r.Outbox {
				if ef.Job != nil {
					jobs = append(jobs, ef.Job.JobID)
				}
			}
			require.Equal(t, []string{jobID(r.ID, "baseline")}, jobs, "one job, the baseline's")
			require.Equal(t, entryRunning, r.Entries[0].Status)
			require.Equal(t, t0.Add(time.Minute), *r.Entries[0].Deadline)

			// Advancing again changes nothing: the round waits.
			seq := r.Seq
			require.False(t, advance(r, testCampaign(), t0, time.Minute))
			require.Equal(t, seq, r.Seq)
		})
	}
}

func run(rate float64) events.EngineRun {
	return events.EngineRun{Workloads: map[string]events.WorkloadRun{"serve": {Rate: rate}, "interactive": {Rate: rate}, "long_context": {Rate: rate}}}
}

// outcome is one runner event for the baseline's job.
type outcome func(r *Round, e *Entry, now time.Time) bool

var (
	progress = func(phase string) outcome {
		return func(r *Round, e *Entry, now time.Time) bool { return engineHealthy(r, e, phase, now) }
	}
	completed = func(r *Round, e *Entry, now time.Time) bool { return measured(r, e, run(100), 0.01, now) }
	crashed   = func(r *Round, e *Entry, now time.Time) bool {
		return disqualify(r, e, "engine_crashed: the engine exited", 0.001, now)
	}
	timedOut = func(r *Round, _ *Entry, now time.Time) bool { return timeouts(r, now.Add(2*time.Minute), time.Minute) }
)

func TestOutcomes(t *testing.T) {
	cases := []struct {
		name     string
		outcomes []outcome
		// changed is what each outcome said.
		changed []bool
		// status is the baseline entry's status after them, steps its
		// starting_engine and running_sla steps' statuses, and next the
		// status of the incumbent's first step once the plan advanced.
		status string
		steps  [2]string
		reason string
	}{
		{"completed", []outcome{completed}, []bool{true}, entryMeasured, [2]string{"done", "done"}, ""},
		{"healthy, then completed", []outcome{progress("starting_engine baseline"), progress("serve"), completed}, []bool{false, true, true},
			entryMeasured, [2]string{"done", "done"}, ""},
		{"failed before the engine was healthy", []outcome{crashed}, []bool{true}, entryDisqualified, [2]string{"failed", "skipped"}, "engine_crashed: the engine exited"},
		{"failed after the engine was healthy", []outcome{progress("serve"), crashed}, []bool{true, true}, entryDisqualified, [2]string{"done", "failed"}, "engine_crashed: the engine exited"},
		{"a duplicate outcome changes nothing", []outcome{completed, completed, crashed, progress("serve")}, []bool{true, false, false, false},
			entryMeasured, [2]string{"done", "done"}, ""},
		{"no outcome by the deadline", []outcome{timedOut, completed}, []bool{true, false}, entryDisqualified, [2]string{"failed", "skipped"}, "round_job_timeout"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRound(2, false)
			advance(r, testCampaign(), t0, time.Minute)
			base := r.entry("baseline")
			for i, o := range c.outcomes {
				before := r.Seq
				require.Equal(t, c.changed[i], o(r, base, t0.Add(time.Second)), "outcome %d", i)
				if !c.changed[i] {
					require.Equal(t, before, r.Seq, "outcome %d emits nothing", i)
				}
				advance(r, testCampaign(), t0.Add(time.Second), time.Minute)
			}
			require.Equal(t, c.status, base.Status)
			require.Contains(t, base.Reason, c.reason)
			require.Equal(t, c.steps, [2]string{string(r.Steps[4].Status), string(r.Steps[5].Status)})
			// A measured entry's running_sla step carries its rates, in the
			// state and in the step event published; another carries none.
			var published *Step
			for _, ef := range r.Outbox {
				if ef.Step != nil && ef.Step.Step == 6 && ef.Step.Status != events.StepRunning {
					published = ef.Step
				}
			}
			require.NotNil(t, published)
			if c.status == entryMeasured {
				want := map[string]float64{"serve": 100, "interactive": 100, "long_context": 100}
				require.Equal(t, want, r.Steps[5].Rates)
				require.Equal(t, want, published.Rates)
			} else {
				require.Nil(t, published.Rates)
			}
			// Either way the round goes on: the first candidate's job is
			// requested (the missing incumbent's steps are skipped).
			require.Equal(t, []string{"skipped", "skipped", "running", "pending"}, statuses(r)[6:10])
			require.Equal(t, entryRunning, r.entry("candidate-a").Status)
		})
	}
}

// A round taken over requests the job in hand again, with the same id
// and a fresh deadline, and keeps what it had.
func TestResume(t *testing.T) {
	r := newRound(1, false)
	advance(r, testCampaign(), t0, time.Minute)
	require.True(t, engineHealthy(r, r.entry("baseline"), "serve", t0))
	r.Outbox = nil
	later := t0.Add(time.Hour)
	resume(r, testCampaign(), later, time.Minute)
	require.Len(t, r.Outbox, 1)
	require.Equal(t, jobID(r.ID, "baseline"), r.Outbox[0].Job.JobID)
	base := r.entry("baseline")
	require.True(t, base.EngineUp)
	require.Equal(t, later.Add(time.Minute), *base.Deadline)
	require.Equal(t, events.StepRunning, r.Steps[5].Status)
}

func TestFailSaysHowFarTheRoundGot(t *testing.T) {
	r := newRound(5, false)
	advance(r, testCampaign(), t0, time.Minute)
	for _, id := range []string{"baseline", "candidate-a"} {
		require.True(t, measured(r, r.entry(id), run(100), 0, t0))
		advance(r, testCampaign(), t0, time.Minute)
	}
	require.True(t, engineHealthy(r, r.entry("candidate-b"), "serve", t0))
	require.True(t, fail(r, reason.Interrupted, "its campaign camp is no longer loaded", t0))
	require.False(t, fail(r, reason.Interrupted, "again", t0), "a round ends once")
	require.Equal(t, StatusFailed, r.Status)
	require.Equal(t, "its campaign camp is no longer loaded; reached step 12 of 23: Candidate 2 of 5, running SLA", r.Failure.Message)
	require.Equal(t, events.StepFailed, r.Steps[11].Status, "the step in flight fails")
	last := r.Outbox[len(r.Outbox)-2:]
	require.Equal(t, string(reason.Interrupted), last[0].Failed.Reason)
	require.True(t, last[1].Release)
}

func TestReadLease(t *testing.T) {
	now := t0
	lease := func(exp time.Time) []byte {
		b, _ := json.Marshal(Lease{Round: "round-a", Holder: "round-x", ExpiresAt: exp})
		return b
	}
	cases := []struct {
		name  string
		value []byte
		state leaseState
		round string
	}{
		{"free", nil, leaseFree, ""},
		{"held", lease(now.Add(time.Second)), leaseHeld, "round-a"},
		{"expired", lease(now.Add(-time.Second)), leaseExpired, "round-a"},
		{"expires now", lease(now), leaseExpired, "round-a"},
		{"garbage", []byte("{not json"), leaseExpired, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l, state := readLease(c.value, now)
			require.Equal(t, c.state, state)
			require.Equal(t, c.round, l.Round)
		})
	}
}

func TestInRound(t *testing.T) {
	pol, err := policy.Load(policy.Default)
	require.NoError(t, err)
	mem, drift, why := 1.5, 0.5, "quality tier fail below B"
	base := run(100)
	cases := []struct {
		name   string
		run    events.EngineRun
		ds     devScore
		reason string
		// faster says the score is above that of the same entry at the
		// baseline's speed.
		faster bool
	}{
		{"not scored yet", run(150), devScore{}, notScored, false},
		{"not scored, with why", run(150), devScore{Missing: "not scored: score_failed"}, "not scored: score_failed", false},
		{"not qualified", run(150), devScore{Score: &record.Score{Qualified: false, Reason: &why}}, why, false},
		{"no rate", run(0), devScore{Score: &record.Score{Qualified: true}}, "no serve rate in this round", false},
		{"faster than the baseline", run(150), devScore{Score: &record.Score{Qualified: true, Memory: &mem, Drift: &drift}}, "", true},
	}
	same, reason := inRound(pol, &base, &base, devScore{Score: &record.Score{Qualified: true, Memory: &mem, Drift: &drift}})
	require.Empty(t, reason)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sc, reason := inRound(pol, &base, &c.run, c.ds)
			require.Equal(t, c.reason, reason)
			if c.faster {
				require.Greater(t, sc, same)
			}
		})
	}
	// Memory counts: the same speed with less memory saved scores lower.
	one := 1.0
	less, _ := inRound(pol, &base, &base, devScore{Score: &record.Score{Qualified: true, Memory: &one, Drift: &drift}})
	require.Less(t, less, same)
}

// The component holds the service's flags with the binary's defaults; it
// has no pod flag: a round names its pod or takes the only live one.
func TestComponentFlags(t *testing.T) {
	cfg := app.DefaultConfig(Name)
	fs := Component().FlagSet(&cfg)
	got := map[string]string{}
	for _, n := range []string{"drift-threshold", "lease-ttl", "entry-timeout"} {
		f := fs.Lookup(n)
		require.NotNil(t, f, n)
		got[n] = f.DefValue
	}
	require.Equal(t, map[string]string{"drift-threshold": "0.05", "lease-ttl": "30s", "entry-timeout": "30m0s"}, got)
	require.NotNil(t, fs.Lookup("campaigns"))
	require.Nil(t, fs.Lookup("pod"), "no default pod")
}

// TestPatchedEntryServesItsEngine checks that the SLA job of an entry
// whose submission patches the engine names the round's engine source and
// the entry's patch (the runner builds and runs that engine, as the
// efficiency stage measured it), and that the BF16 baseline's and an
// unpatched candidate's do not.
func TestPatchedEntryServesItsEngine(t *testing.T) {
	r := newRound(2, false)
	src := events.BundleRef{SHA256: "feedfacefeedfacefeed", Size: 7, Files: 3}
	r.EngineBundle = &src
	r.entry("candidate-a").Patch = "engine.patch"
	r.entry("candidate-a").EngineDigest = "0f0f"
	camp := testCampaign()
	for _, c := range []struct {
		entry  string
		bundle *events.BundleRef
		patch  string
	}{
		{"baseline", nil, ""},
		{"candidate-a", &src, "engine.patch"},
		{"candidate-b", nil, ""},
		{"drift_baseline", nil, ""},
	} {
		r.Outbox = nil
		require.True(t, request(r, r.entry(c.entry), camp, t0, time.Minute), c.entry)
		require.Len(t, r.Outbox, 1, c.entry)
		var p events.SLAJobParams
		require.NoError(t, json.Unmarshal(r.Outbox[0].Job.Params, &p), c.entry)
		require.Equal(t, c.entry, p.Entry)
		require.Equal(t, c.bundle, p.EngineBundle, c.entry)
		require.Equal(t, c.patch, p.Patch, c.entry)
		if c.patch != "" {
			require.Equal(t, "0f0f", p.EngineDigest, "the runner serves only the tree the build checked")
		} else {
			require.Empty(t, p.EngineDigest, c.entry)
		}
	}
}
