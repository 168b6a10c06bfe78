// Package service runs rounds: on one pod, the in-round BF16 baseline, the
// reigning leader (the incumbent), up to five candidates, the shared
// scorer and a drift baseline are served one after another through the
// GPU runner, in the plan of the arena's round pages (23 steps for five
// candidates), each step with its real start and end as a round.step
// event and a round_steps row. Speeds are relative to the in-round
// baseline ("0 is baseline speed"); an entry whose engine dies is
// disqualified with its reason and the round goes on; the best scored
// entry leads the campaign.
package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/artifact"
	"github.com/lowbarena/lowbarena/events/bus"
	"github.com/lowbarena/lowbarena/services/domain/record"
	"github.com/lowbarena/lowbarena/services/domain/campaign"
	"github.com/lowbarena/lowbarena/services/domain/formula"
	"github.com/lowbarena/lowbarena/services/runtime"
	"github.com/lowbarena/lowbarena/services/domain/policy"
	"github.com/lowbarena/lowbarena/services/store"
)

// Name is the round service's name and event source.
const Name = "round"

// SubjectStart is the request subject of `arena round start`, and
// SubjectList that of `arena history --rounds`.
const (
	SubjectStart = "lowbarena.ctl.round.start"
	SubjectList  = "lowbarena.ctl.round.list"
)

// EntryTimeout bounds one entry's SLA job, queue time included.
var EntryTimeout = 30 * time.Minute

// MaxCandidates is how many candidates a round takes.
const MaxCandidates = 5

// Options configure the round service.
type Options struct {
	Campaigns campaign.Set
	// Store receives round_steps rows; may be nil.
	Store store.Store
	// Pod is the default pod of a round.
	Pod string
	// DriftThreshold marks a round whose drift baseline moved more than
	// this share of the baseline's rate; default 0.05.
	DriftThreshold float64
	// Policy scores entries; default policy.Default.
	Policy string
}

// Service runs rounds.
type Service struct {
	bus       *bus.Bus
	records   jetstream.KeyValue
	rounds    jetstream.KeyValue
	artifacts artifact.Store
	policy    policy.Policy
	opts      Options
	log       *slog.Logger
	wg        sync.WaitGroup
}

// New opens the buckets the service needs.
func New(ctx context.Context, b *bus.Bus, log *slog.Logger, o Options) (*Service, error) {
	if o.Pod == "" {
		o.Pod = "pod-0"
	}
	if o.DriftThreshold <= 0 {
		o.DriftThreshold = 0.05
	}
	if o.Policy == "" {
		o.Policy = policy.Default
	}
	p, err := policy.Load(o.Policy)
	if err != nil {
		return nil, fmt.Errorf("round: %w", err)
	}
	js := b.JetStream()
	recs, err := js.KeyValue(ctx, bus.BucketSubmissions)
	if err != nil {
		return nil, fmt.Errorf("round: %w", err)
	}
	rounds, err := js.KeyValue(ctx, bus.BucketRounds)
	if err != nil {
		return nil, fmt.Errorf("round: %w", err)
	}
	arts, err := artifact.NewJetStream(ctx, js, bus.ObjectArtifacts)
	if err != nil {
		return nil, fmt.Errorf("round: %w", err)
	}
	return &Service{bus: b, records: recs, rounds: rounds, artifacts: arts, policy: p, opts: o, log: log}, nil
}

// Actors returns the service's request handler; rounds run under it and
// end with it.
func (s *Service) Actors() []runtime.Actor {
	return []runtime.Actor{{Name: "round", Run: s.serve}}
}

// StartRequest is `arena round start`.
type StartRequest struct {
	Campaign   string   `json:"campaign"`
	Candidates []string `json:"candidates"`
	Pod        string   `json:"pod,omitempty"`
}

// StartReply is its answer: the round id, or why not.
type StartReply struct {
	RoundID string `json:"round_id,omitempty"`
	Steps   int    `json:"steps,omitempty"`
	Error   string `json:"error,omitempty"`
}

func (s *Service) serve(ctx context.Context) error {
	sub, err := s.bus.Conn().QueueSubscribe(SubjectStart, Name, func(m *nats.Msg) {
		var req StartRequest
		rep := StartReply{}
		if err := json.Unmarshal(m.Data, &req); err != nil {
			rep.Error = "the request is not a round: " + err.Error()
		} else if r, err := s.Start(ctx, req); err != nil {
			rep.Error = err.Error()
		} else {
			rep.RoundID, rep.Steps = r.ID, len(r.Steps)
		}
		body, _ := json.Marshal(rep)
		_ = m.Respond(body)
	})
	if err != nil {
		return fmt.Errorf("round: subscribe: %w", err)
	}
	list, err := s.bus.Conn().QueueSubscribe(SubjectList, Name, func(m *nats.Msg) {
		var req ListRequest
		_ = json.Unmarshal(m.Data, &req)
		rep := ListReply{Rounds: []Summary{}}
		rounds, err := s.List(ctx, req.Campaign)
		if err != nil {
			rep.Error = err.Error()
		} else {
			rep.Rounds = rounds
		}
		body, _ := json.Marshal(rep)
		_ = m.Respond(body)
	})
	if err != nil {
		return fmt.Errorf("round: subscribe: %w", err)
	}
	<-ctx.Done()
	_ = sub.Drain()
	_ = list.Drain()
	s.wg.Wait()
	return nil
}

// Entry is one entry of a round.
type Entry struct {
	ID   string `json:"entry_id"`
	Role string `json:"role"` // baseline, incumbent, candidate, drift_baseline
	// Submission is the entry's submission ("" for the BF16 baselines).
	Submission   string             `json:"submission,omitempty"`
	Checkpoint   events.BundleRef   `json:"-"`
	KVCacheDType string             `json:"-"`
	Record       *record.Submission `json:"-"`
	Run          *events.EngineRun  `json:"run,omitempty"`
	Status       string             `json:"status"`
	Reason       string             `json:"reason,omitempty"`
	Score        *float64           `json:"score,omitempty"`
	GPUHours     float64            `json:"gpu_hours"`
}

// Step is one step of the plan.
type Step = events.RoundStepData

// Round is a round's state, kept in the rounds bucket as round.<id>.
type Round struct {
	ID        string                     `json:"round_id"`
	Campaign  string                     `json:"campaign"`
	Pod       string                     `json:"pod"`
	Incumbent string                     `json:"incumbent,omitempty"`
	Entries   []*Entry                   `json:"entries"`
	Steps     []Step                     `json:"steps"`
	Status    string                     `json:"status"`
	StartedAt time.Time                  `json:"started_at"`
	Result    *events.RoundCompletedData `json:"result,omitempty"`

	camp *campaign.Campaign
}

func podKey(pod string) string     { return bus.Key("pod", pod) }
func leaderKey(camp string) string { return bus.Key("leader", camp) }
func roundKey(id string) string    { return "round." + id }

// Leader is the reigning leader of a campaign.
type Leader struct {
	Submission string  `json:"submission"`
	Score      float64 `json:"score"`
	Round      string  `json:"round"`
}

// Start validates a round, takes its pod and runs it in the background.
// Refusals: an unknown campaign, no or too many candidates, a candidate
// twice, a candidate of another campaign or whose contract failed, and a
// pod already running a round.
func (s *Service) Start(ctx context.Context, req StartRequest) (*Round, error) {
	camp, err := s.opts.Campaigns.Lookup(req.Campaign)
	if err != nil {
		return nil, err
	}
	if camp.Engine == nil {
		return nil, fmt.Errorf("campaign %s names no engine, so it cannot run rounds", camp.TaskID)
	}
	if len(req.Candidates) == 0 || len(req.Candidates) > MaxCandidates {
		return nil, fmt.Errorf("a round takes 1 to %d candidates, not %d", MaxCandidates, len(req.Candidates))
	}
	pod := req.Pod
	if pod == "" {
		pod = s.opts.Pod
	}
	r := &Round{Campaign: camp.TaskID, Pod: pod, Status: "running", StartedAt: time.Now().UTC(), camp: camp}
	var lead Leader
	if e, err := s.rounds.Get(ctx, leaderKey(camp.TaskID)); err == nil {
		_ = json.Unmarshal(e.Value(), &lead)
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, err
	}
	ref, err := artifact.PutDir(ctx, s.artifacts, camp.ReferenceDir())
	if err != nil {
		return nil, fmt.Errorf("campaign %s: its BF16 reference: %w", camp.TaskID, err)
	}
	r.Entries = append(r.Entries, &Entry{ID: "baseline", Role: "baseline", Checkpoint: ref, KVCacheDType: "auto"})
	if lead.Submission != "" && !slices.Contains(req.Candidates, lead.Submission) {
		inc, err := s.entry(ctx, camp, lead.Submission, "incumbent", "incumbent")
		if err != nil {
			return nil, fmt.Errorf("the incumbent %s: %w", lead.Submission, err)
		}
		r.Incumbent = lead.Submission
		r.Entries = append(r.Entries, inc)
	}
	seen := map[string]bool{}
	for i, id := range req.Candidates {
		if seen[id] {
			return nil, fmt.Errorf("candidate %s is named twice", id)
		}
		seen[id] = true
		e, err := s.entry(ctx, camp, id, "candidate", fmt.Sprintf("candidate-%d", i+1))
		if err != nil {
			return nil, fmt.Errorf("candidate %s: %w", id, err)
		}
		r.Entries = append(r.Entries, e)
	}
	r.Entries = append(r.Entries, &Entry{ID: "drift_baseline", Role: "drift_baseline", Checkpoint: ref, KVCacheDType: "auto"})
	r.ID = "round-" + events.DeriveID(camp.TaskID, pod, r.StartedAt.Format(time.RFC3339Nano), strings.Join(req.Candidates, ","))[:16]
	r.Steps = plan(r)

	// One round per pod: the pod's key is created once, and released at
	// teardown.
	if _, err := s.rounds.Create(ctx, podKey(pod), []byte(r.ID)); errors.Is(err, jetstream.ErrKeyExists) {
		holder := "another round"
		if e, gerr := s.rounds.Get(ctx, podKey(pod)); gerr == nil {
			holder = "round " + string(e.Value())
		}
		return nil, fmt.Errorf("pod %s is running %s; wait for it or name another pod", pod, holder)
	} else if err != nil {
		return nil, err
	}
	if err := s.save(ctx, r); err != nil {
		return nil, err
	}
	started := events.RoundStartedData{RoundID: r.ID, Campaign: r.Campaign, Pod: pod, Incumbent: r.Incumbent, Candidates: req.Candidates, Steps: len(r.Steps)}
	if _, err := s.bus.PublishNew(ctx, events.DeriveID(r.ID, string(events.RoundStarted)), events.RoundStarted, events.Source(Name), r.ID, started); err != nil {
		_ = s.rounds.Delete(ctx, podKey(pod))
		return nil, err
	}
	s.log.Info("round started", "round", r.ID, "campaign", r.Campaign, "pod", pod, "incumbent", r.Incumbent, "candidates", len(req.Candidates), "steps", len(r.Steps))
	s.wg.Go(func() { s.run(ctx, r) })
	return r, nil
}

// entry checks a submission can enter a round and describes it.
func (s *Service) entry(ctx context.Context, camp *campaign.Campaign, id, role, entryID string) (*Entry, error) {
	e, err := s.records.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("the arena has no submission %s", id)
	} else if err != nil {
		return nil, err
	}
	var rec record.Submission
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return nil, err
	}
	if rec.TaskID != camp.TaskID {
		return nil, fmt.Errorf("it belongs to campaign %s, not %s", rec.TaskID, camp.TaskID)
	}
	if c := rec.Result.Contract; c == nil || !c.OK || rec.Bundle == nil {
		why := "its contract has not been checked"
		if rec.Error != nil {
			why = fmt.Sprintf("its %s stage failed (%s)", rec.Error.Stage, rec.Error.Code)
		} else if c != nil && !c.OK {
			why = "it broke its contract"
		}
		return nil, fmt.Errorf("%s, so it cannot enter a round", why)
	}
	kv := "auto"
	if en := rec.Result.Engine; en != nil && en.Startup.KVCacheDType != "" {
		kv = en.Startup.KVCacheDType
	}
	ref := events.BundleRef{Store: "jetstream", Bucket: bus.ObjectArtifacts, Object: artifact.ManifestObject(rec.Bundle.Digest),
		Size: rec.Bundle.Bytes, SHA256: rec.Bundle.Digest, Files: rec.Bundle.Files}
	return &Entry{ID: entryID, Role: role, Submission: id, Checkpoint: ref, KVCacheDType: kv, Record: &rec}, nil
}

// plan lays out the steps: setup, then starting_engine and running SLA
// for every entry (the scorer after the candidates, the drift baseline
// last), then teardown.
func plan(r *Round) []Step {
	var steps []Step
	add := func(group, name, phase, role, entry string) {
		steps = append(steps, Step{RoundID: r.ID, Step: len(steps) + 1, Group: group, Name: name, Phase: phase, Role: role, EntryID: entry, Status: "pending"})
	}
	for _, st := range [][2]string{{"Renting a GPU pod", "provisioning"}, {"Preparing the pod", "bootstrapping"},
		{"Pulling engine images", "pulling_image"}, {"Downloading model weights", "downloading_model"}} {
		add("Setup", st[0], st[1], "", "")
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
			add("Scorer", "Scorer, starting the engine", "starting_engine", "scorer", "")
			add("Scorer", "Scorer, running the shared scorer", "running_scorer", "scorer", "")
		}
		if e.Role == "candidate" {
			n++
			group = fmt.Sprintf("Candidate %d of %d", n, cands)
		}
		add(group, group+", starting the engine", "starting_engine", e.Role, e.ID)
		add(group, group+", running SLA", "running_sla", e.Role, e.ID)
		if e.Role == "baseline" && !hasIncumbent {
			// The plan keeps its shape: no incumbent is two skipped steps.
			add("Incumbent", "Incumbent, starting the engine", "starting_engine", "incumbent", "")
			add("Incumbent", "Incumbent, running SLA", "running_sla", "incumbent", "")
		}
	}
	add("Teardown", "Releasing the pod", "teardown", "", "")
	for i := range steps {
		steps[i].Of = len(steps)
	}
	return steps
}

func (s *Service) save(ctx context.Context, r *Round) error {
	body, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = s.rounds.Put(ctx, roundKey(r.ID), body)
	return err
}

// mark moves a step to a status, publishing it with its times and
// keeping its row.
func (s *Service) mark(ctx context.Context, r *Round, i int, status, detail string) {
	st := &r.Steps[i]
	now := time.Now().UTC()
	switch status {
	case "running":
		st.StartedAt = &now
	default:
		if st.StartedAt == nil {
			st.StartedAt = &now
		}
		st.FinishedAt = &now
	}
	st.Status, st.Detail = status, detail
	if _, err := s.bus.PublishNew(ctx, events.DeriveID(r.ID, fmt.Sprint(st.Step), status), events.RoundStep, events.Source(Name), r.ID, *st); err != nil {
		s.log.Warn("round step not published", "round", r.ID, "step", st.Step, "err", err)
	}
	if status != "running" && s.opts.Store != nil {
		row := store.RoundStep{TsMs: uint64(now.UnixMilli()), RoundID: r.ID, Step: uint32(st.Step), Name: st.Name, Phase: st.Phase,
			Role: st.Role, EntryID: st.EntryID, Status: status, StartedMs: uint64(st.StartedAt.UnixMilli()), FinishedMs: uint64(now.UnixMilli()), Detail: detail}
		if err := store.Insert(ctx, s.opts.Store, []store.RoundStep{row}); err != nil {
			s.log.Warn("round step row not written", "round", r.ID, "err", err)
		}
	}
	_ = s.save(ctx, r)
}

// run runs the plan.
func (s *Service) run(ctx context.Context, r *Round) {
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = s.rounds.Delete(dctx, podKey(r.Pod))
	}()
	byID := map[string]*Entry{}
	for _, e := range r.Entries {
		byID[e.ID] = e
	}
	for i := 0; i < len(r.Steps); i++ {
		if ctx.Err() != nil {
			s.fail(r, "round_interrupted", "the round service stopped during the round; start it again")
			return
		}
		st := r.Steps[i]
		s.mark(ctx, r, i, "running", "")
		switch {
		case st.Phase == "provisioning":
			s.mark(ctx, r, i, "done", "pod "+r.Pod+" is this arena's own: nothing to rent")
		case st.Phase == "bootstrapping":
			s.mark(ctx, r, i, "done", "the pod's runner takes the round's jobs from RUNNER_JOBS")
		case st.Phase == "pulling_image":
			s.mark(ctx, r, i, "done", "engine: "+r.camp.Engine.Command)
		case st.Phase == "downloading_model":
			s.mark(ctx, r, i, "done", fmt.Sprintf("BF16 reference %s stored for the runner (%d bytes)", r.Entries[0].Checkpoint.SHA256[:12], r.Entries[0].Checkpoint.Size))
		case st.Role == "scorer":
			s.mark(ctx, r, i, "skipped", "no shared judge engine is configured: answers are graded by the built-in graders")
		case st.Role == "incumbent" && st.EntryID == "":
			s.mark(ctx, r, i, "skipped", "no incumbent yet: the campaign has no leader")
		case st.Phase == "starting_engine":
			e := byID[st.EntryID]
			s.runEntry(ctx, r, e, i)
			i++ // runEntry marks its running_sla step too
		case st.Phase == "teardown":
			s.finish(ctx, r)
			s.mark(ctx, r, i, "done", "pod "+r.Pod+" released")
		}
	}
	s.log.Info("round completed", "round", r.ID, "leader", r.Result.Leader, "changed", r.Result.LeaderChanged)
	if _, err := s.bus.PublishNew(ctx, events.DeriveID(r.ID, string(events.RoundCompleted)), events.RoundCompleted, events.Source(Name), r.ID, *r.Result); err != nil {
		s.log.Warn("round.completed not published", "round", r.ID, "err", err)
	}
}

func (s *Service) fail(r *Round, reason, msg string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r.Status = "failed"
	_ = s.save(ctx, r)
	_, _ = s.bus.PublishNew(ctx, events.DeriveID(r.ID, string(events.RoundFailed)), events.RoundFailed, events.Source(Name), r.ID,
		events.RoundFailedData{RoundID: r.ID, Reason: reason, Message: msg})
}

// runEntry serves one entry through the runner: step i is its
// starting_engine, i+1 its running_sla.
func (s *Service) runEntry(ctx context.Context, r *Round, e *Entry, i int) {
	job := "sla-" + events.DeriveID(r.ID, e.ID)[:24]
	engineUp := false
	// disqualify ends the entry: its starting_engine step fails (and its
	// SLA is skipped) before the engine was healthy, its SLA step after.
	disqualify := func(reason string) {
		e.Status, e.Reason = "disqualified", reason
		if !engineUp {
			s.mark(ctx, r, i, "failed", reason)
			s.mark(ctx, r, i+1, "skipped", "the engine did not start")
		} else {
			s.mark(ctx, r, i+1, "failed", reason)
		}
	}
	p := events.SLAJobParams{Engine: *r.camp.Engine, Workload: r.camp.Efficiency.WorkloadSpec, KVCacheDType: e.KVCacheDType, Entry: e.ID}
	params, _ := json.Marshal(p)
	req := events.RunnerJobRequestedData{JobID: job, Kind: events.JobSLA, SubmissionID: e.Submission, RoundID: r.ID, Pod: r.Pod,
		Engine: r.camp.Engine.Command, Checkpoint: e.Checkpoint, Params: params}
	if _, err := s.bus.PublishNew(ctx, events.DeriveID(job, string(events.RunnerJobRequested)), events.RunnerJobRequested, events.Source(Name), job, req); err != nil {
		disqualify("round_job_not_queued: " + err.Error())
		return
	}
	cons, err := s.bus.JetStream().OrderedConsumer(ctx, events.StreamArena, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.SubjectRootArena + ".runner.job.*." + job}})
	if err != nil {
		e.Status, e.Reason = "disqualified", "round_watch_failed: "+err.Error()
		s.mark(ctx, r, i, "failed", e.Reason)
		s.mark(ctx, r, i+1, "skipped", "")
		return
	}
	deadline := time.Now().Add(EntryTimeout)
	for {
		msg, err := cons.Next(jetstream.FetchMaxWait(min(30*time.Second, max(time.Until(deadline), 100*time.Millisecond))))
		if ctx.Err() != nil {
			return
		}
		if err != nil && time.Now().After(deadline) {
			// No runner took the job, or it never ended: the entry is
			// disqualified and the round goes on rather than hang.
			disqualify(fmt.Sprintf("round_job_timeout: its SLA job %s did not end within %s (is the pod's runner up?)", job, EntryTimeout))
			return
		}
		if err != nil {
			continue // still running: wait on
		}
		typ := events.Type(msg.Headers().Get("ce-type"))
		switch typ {
		case events.RunnerJobProgress:
			var pd events.RunnerJobProgressData
			_ = json.Unmarshal(msg.Data(), &pd)
			if !engineUp && !strings.HasPrefix(pd.Phase, "starting_engine") {
				engineUp = true
				s.mark(ctx, r, i, "done", "engine healthy")
				s.mark(ctx, r, i+1, "running", "")
			}
		case events.RunnerJobCompleted:
			var cd events.RunnerJobCompletedData
			_ = json.Unmarshal(msg.Data(), &cd)
			var run events.EngineRun
			_ = json.Unmarshal(cd.Result, &run)
			e.Run, e.GPUHours, e.Status = &run, cd.GPUHours, "measured"
			if !engineUp {
				s.mark(ctx, r, i, "done", "engine healthy")
			}
			s.mark(ctx, r, i+1, "done", fmt.Sprintf("serve %.1f tok/s, interactive %.1f, long_context %.1f",
				run.Workloads["serve"].Rate, run.Workloads["interactive"].Rate, run.Workloads["long_context"].Rate))
			return
		case events.RunnerJobFailed:
			var fd events.RunnerJobFailedData
			_ = json.Unmarshal(msg.Data(), &fd)
			e.GPUHours = fd.GPUHours
			disqualify(fd.Reason + ": " + fd.Message)
			return
		}
	}
}

// finish scores the entries against the in-round baseline, measures the
// drift, and settles the leader.
func (s *Service) finish(ctx context.Context, r *Round) {
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
	if base == nil || base.Run == nil {
		res.Entries = nil
		for _, e := range r.Entries {
			res.Entries = append(res.Entries, events.RoundEntry{EntryID: e.ID, Role: e.Role, Status: "disqualified", Reason: "the in-round baseline could not be measured: " + base.Reason})
		}
		r.Result = res
		res.DurationSeconds = time.Since(r.StartedAt).Seconds()
		return
	}
	if drift != nil && drift.Run != nil {
		d := 0.0
		for _, w := range formula.Workloads {
			if b := base.Run.Workloads[w.Name].Rate; b > 0 {
				d = math.Max(d, math.Abs(drift.Run.Workloads[w.Name].Rate/b-1))
			}
		}
		d = formula.Round(d, 4)
		res.Drift, res.DriftMarked = &d, d > s.opts.DriftThreshold
		if res.DriftMarked {
			s.log.Warn("round marked: the drift baseline moved", "round", r.ID, "drift", d, "threshold", s.opts.DriftThreshold)
		}
	}
	var top *Entry
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
			re.Status, re.Score = "scored", &zero
		case e.Run == nil:
			re.Status = "disqualified"
		default:
			sc, reason := s.inRound(base.Run, e)
			if reason != "" {
				re.Status, re.Reason = "disqualified", reason
			} else {
				re.Status, re.Score = "scored", &sc
				e.Score = &sc
				if top == nil || sc > *top.Score {
					top = e
				}
			}
		}
		e.Status, e.Reason = re.Status, re.Reason
		res.Entries = append(res.Entries, re)
	}
	if top != nil {
		res.TopScore, res.Leader = top.Score, top.Submission
		res.LeaderChanged = top.Submission != r.Incumbent
		body, _ := json.Marshal(Leader{Submission: top.Submission, Score: *top.Score, Round: r.ID})
		if _, err := s.rounds.Put(ctx, leaderKey(r.Campaign), body); err != nil {
			s.log.Warn("leader not kept", "round", r.ID, "err", err)
		}
	} else {
		res.Leader = r.Incumbent
	}
	res.GPUHours = formula.Round(res.GPUHours, 6)
	res.DurationSeconds = formula.Round(time.Since(r.StartedAt).Seconds(), 3)
	r.Result, r.Status = res, "complete"
}

// inRound scores an entry against the in-round baseline: speeds from its
// rates in this round, memory from its efficiency block (the same GPU),
// drift from its quality; an entry that is not qualified is disqualified
// with its reason.
func (s *Service) inRound(base *events.EngineRun, e *Entry) (float64, string) {
	rec := e.Record
	if rec == nil || rec.Result.DevScore == nil {
		return 0, "not scored yet: its quality and efficiency stages have not both finished"
	}
	ds := rec.Result.DevScore
	if !ds.Qualified {
		if ds.Reason != nil {
			return 0, *ds.Reason
		}
		return 0, "not qualified"
	}
	speeds := map[string]float64{}
	for _, w := range formula.Workloads {
		b, c := base.Workloads[w.Name].Rate, e.Run.Workloads[w.Name].Rate
		if b <= 0 || c <= 0 {
			return 0, "no " + w.Name + " rate in this round"
		}
		speeds[w.Name] = c / b
	}
	memory := 1.0
	if ds.Memory != nil {
		memory = *ds.Memory
	}
	drift := 0.0
	if ds.Drift != nil {
		drift = *ds.Drift
	}
	return s.policy.Score(formula.Gain(formula.GeoMean(speeds), memory), drift), ""
}

// ListRequest asks for the rounds of a campaign ("" for all).
type ListRequest struct {
	Campaign string `json:"campaign,omitempty"`
}

// Summary is one round's result, for people.
type Summary struct {
	RoundID   string                     `json:"round_id"`
	Campaign  string                     `json:"campaign"`
	Pod       string                     `json:"pod"`
	Status    string                     `json:"status"`
	StartedAt time.Time                  `json:"started_at"`
	Steps     int                        `json:"steps"`
	Result    *events.RoundCompletedData `json:"result,omitempty"`
}

// ListReply answers a ListRequest.
type ListReply struct {
	Rounds []Summary `json:"rounds"`
	Error  string    `json:"error,omitempty"`
}

// List returns the rounds kept in the rounds bucket, oldest first.
func (s *Service) List(ctx context.Context, campaignID string) ([]Summary, error) {
	keys, err := s.rounds.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	var out []Summary
	for k := range keys.Keys() {
		if !strings.HasPrefix(k, "round.") {
			continue
		}
		e, err := s.rounds.Get(ctx, k)
		if err != nil {
			continue
		}
		var r Round
		if json.Unmarshal(e.Value(), &r) != nil || (campaignID != "" && r.Campaign != campaignID) {
			continue
		}
		out = append(out, Summary{RoundID: r.ID, Campaign: r.Campaign, Pod: r.Pod, Status: r.Status, StartedAt: r.StartedAt, Steps: len(r.Steps), Result: r.Result})
	}
	slices.SortFunc(out, func(a, b Summary) int { return a.StartedAt.Compare(b.StartedAt) })
	return out, nil
}
