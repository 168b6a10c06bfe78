// Package service is the efficiency stage: for every checkpoint that kept
// its contract it asks a GPU runner to measure it beside the campaign's
// BF16 reference on the same pod and to replay it under its budget, and
// turns the runner's measurement into the record's efficiency block:
// speeds and memories against BF16, the peak breakdown, the engine's
// start-up, the budget verdicts and the GPU-hours.
package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/artifact"
	"github.com/lowbarena/lowbarena/events/bus"
	"github.com/lowbarena/lowbarena/services/domain/record"
	"github.com/lowbarena/lowbarena/services/domain/campaign"
	"github.com/lowbarena/lowbarena/services/domain/formula"
	"github.com/lowbarena/lowbarena/services/runtime"
)

// Name is the efficiency service's name: its event source and durables.
const Name = "efficiency"

// Reasons the stage fails that are not the runner's.
const (
	ReasonNoEngine       = "campaign_no_engine"
	ReasonUnknownTask    = "campaign_unknown_task"
	ReasonNoReference    = "campaign_no_reference"
	ReasonNoArtifact     = "artifact_missing"
	ReasonKVMismatch     = "engine_kv_dtype_mismatch"
	ReasonBadMeasurement = "efficiency_bad_measurement"
)

// Options configure the stage.
type Options struct {
	Campaigns campaign.Set
}

// Service is the efficiency stage.
type Service struct {
	bus       *bus.Bus
	artifacts artifact.Store
	opts      Options
	log       *slog.Logger

	mu   sync.Mutex
	refs map[string]events.BundleRef // task id -> stored reference bundle
}

// New opens the artifact store.
func New(ctx context.Context, b *bus.Bus, log *slog.Logger, o Options) (*Service, error) {
	arts, err := artifact.NewJetStream(ctx, b.JetStream(), bus.ObjectArtifacts)
	if err != nil {
		return nil, fmt.Errorf("efficiency: %w", err)
	}
	return &Service{bus: b, artifacts: arts, opts: o, log: log, refs: map[string]events.BundleRef{}}, nil
}

// Requests is the durable that turns kept contracts into runner jobs.
var Requests = bus.ConsumerConfig{
	Name:     "efficiency",
	Subjects: []string{events.FilterFor(events.ContractCompleted)},
	AckWait:  60 * time.Second,
	Prefetch: 4,
}

// Results is the durable that turns runner outcomes into the stage's.
var Results = bus.ConsumerConfig{
	Name:     "efficiency-results",
	Subjects: []string{events.FilterFor(events.RunnerJobCompleted), events.FilterFor(events.RunnerJobFailed)},
	Prefetch: 8,
}

// Actors returns the stage's two consumers.
func (s *Service) Actors() []runtime.Actor {
	return []runtime.Actor{
		{Name: "efficiency-requests", Run: func(ctx context.Context) error { return s.bus.Consume(ctx, Requests, s.HandleContract) }},
		{Name: "efficiency-results", Run: func(ctx context.Context) error { return s.bus.Consume(ctx, Results, s.HandleResult) }},
	}
}

// JobID is the runner job of a submission's efficiency: one per
// submission, so a redelivered contract.completed requests the same job
// (and JetStream drops the second request).
func JobID(submission string) string { return "eff-" + events.DeriveID(submission, Name)[:24] }

// HandleContract requests the efficiency job of a kept contract.
//
// Idempotency: the job's event id and job id derive from the submission,
// so a redelivery publishes nothing new. Ack semantics: a campaign that
// cannot serve the checkpoint is an efficiency.failed and an Ack; a store
// or NATS error is a Retry.
func (s *Service) HandleContract(ctx context.Context, d *bus.Delivery) bus.Outcome {
	var in events.ContractCompletedData
	if err := d.Decode(&in); err != nil {
		return bus.Poison("bad_payload", err)
	}
	id, src := in.SubmissionID, events.Source(Name)
	fail := func(reason, msg string) bus.Outcome {
		s.log.Info("efficiency refused", "submission", id, "reason", reason, "message", msg)
		data := events.StageFailedData{SubmissionID: id, Stage: Name, Reason: reason, Message: msg}
		if _, err := s.bus.PublishNew(ctx, events.DeriveID(d.Event.ID(), string(events.EfficiencyFailed)), events.EfficiencyFailed, src, id, data); err != nil {
			return bus.Retry(0, err)
		}
		return bus.Ack()
	}
	if _, err := s.bus.PublishNew(ctx, events.DeriveID(d.Event.ID(), string(events.EfficiencyStarted)), events.EfficiencyStarted, src, id,
		events.StageStartedData{SubmissionID: id, Stage: Name, Attempt: int(d.NumDelivered)}); err != nil {
		return bus.Retry(0, err)
	}
	if in.Artifact == nil {
		return fail(ReasonNoArtifact, "the contract stage passed on no artifact to serve; submit again")
	}
	camp, err := s.opts.Campaigns.Lookup(in.TaskID)
	if err != nil {
		return fail(ReasonUnknownTask, err.Error())
	}
	if camp.Engine == nil {
		return fail(ReasonNoEngine, fmt.Sprintf("campaign %s names no engine (campaign.json \"engine\"), so its checkpoints cannot be served", camp.TaskID))
	}
	ref, err := s.reference(ctx, camp)
	if errors.Is(err, fs.ErrNotExist) {
		return fail(ReasonNoReference, fmt.Sprintf("campaign %s has no BF16 reference checkpoint at %s: %v", camp.TaskID, camp.ReferenceDir(), err))
	} else if err != nil {
		return bus.Retry(0, err)
	}
	p := events.EfficiencyJobParams{Campaign: camp.TaskID, Engine: *camp.Engine, Workload: camp.Efficiency.WorkloadSpec,
		KVCacheDType: in.KVCacheDType, Reference: ref, BudgetFactor: camp.Efficiency.BudgetFactor}
	params, err := json.Marshal(p)
	if err != nil {
		return bus.Poison("params_unencodable", err)
	}
	job := JobID(id)
	req := events.RunnerJobRequestedData{JobID: job, Kind: events.JobEfficiency, SubmissionID: id, Engine: camp.Engine.Command,
		Checkpoint: *in.Artifact, Params: params}
	if _, err := s.bus.PublishNew(ctx, events.DeriveID(id, string(events.RunnerJobRequested), events.JobEfficiency), events.RunnerJobRequested, src, job, req); err != nil {
		return bus.Retry(0, err)
	}
	s.log.Info("efficiency job requested", "submission", id, "job", job, "campaign", camp.TaskID, "kv_cache_dtype", in.KVCacheDType)
	return bus.Ack()
}

// reference stores the campaign's BF16 reference checkpoint in the
// artifact store (content addressed: storing it again is a no-op) and
// returns its reference, once per campaign per process.
func (s *Service) reference(ctx context.Context, c *campaign.Campaign) (events.BundleRef, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ref, ok := s.refs[c.TaskID]; ok {
		return ref, nil
	}
	// A folder without weights is refused before anything is stored.
	if w, err := filepath.Glob(filepath.Join(c.ReferenceDir(), "*.safetensors")); err != nil || len(w) == 0 {
		return events.BundleRef{}, fmt.Errorf("%w: no *.safetensors in %s", fs.ErrNotExist, c.ReferenceDir())
	}
	ref, err := artifact.PutDir(ctx, s.artifacts, c.ReferenceDir())
	if err != nil {
		return events.BundleRef{}, err
	}
	s.log.Info("BF16 reference stored", "campaign", c.TaskID, "digest", ref.SHA256[:12], "files", ref.Files, "bytes", ref.Size)
	s.refs[c.TaskID] = ref
	return ref, nil
}

// HandleResult turns a finished efficiency job into efficiency.completed
// or efficiency.failed. Jobs of other kinds are acked and left alone.
//
// Idempotency: outputs derive from the job's id, so a job whose outcome
// arrives twice ends the stage once. Ack semantics: everything here is a
// pure function of the event, so only a publish error is a Retry.
func (s *Service) HandleResult(ctx context.Context, d *bus.Delivery) bus.Outcome {
	src := events.Source(Name)
	publish := func(id string, t events.Type, job string, data any) bus.Outcome {
		if _, err := s.bus.PublishNew(ctx, events.DeriveID(job, string(t)), t, src, id, data); err != nil {
			return bus.Retry(0, err)
		}
		return bus.Ack()
	}
	if events.Type(d.Event.Type()) == events.RunnerJobFailed {
		var f events.RunnerJobFailedData
		if err := d.Decode(&f); err != nil {
			return bus.Poison("bad_payload", err)
		}
		if f.Kind != events.JobEfficiency || f.SubmissionID == "" {
			return bus.Ack()
		}
		var detail json.RawMessage
		if f.LogTail != "" {
			detail, _ = json.Marshal(map[string]any{"log_tail": f.LogTail, "pod": f.Pod, "runner": f.Runner, "gpu_hours": f.GPUHours})
		}
		s.log.Info("efficiency failed", "submission", f.SubmissionID, "reason", f.Reason)
		return publish(f.SubmissionID, events.EfficiencyFailed, f.JobID, events.StageFailedData{SubmissionID: f.SubmissionID, Stage: Name,
			Reason: f.Reason, Message: f.Message, Detail: detail})
	}
	var c events.RunnerJobCompletedData
	if err := d.Decode(&c); err != nil {
		return bus.Poison("bad_payload", err)
	}
	if c.Kind != events.JobEfficiency || c.SubmissionID == "" {
		return bus.Ack()
	}
	var res events.EfficiencyJobResult
	if err := json.Unmarshal(c.Result, &res); err != nil {
		return publish(c.SubmissionID, events.EfficiencyFailed, c.JobID, events.StageFailedData{SubmissionID: c.SubmissionID, Stage: Name,
			Reason: ReasonBadMeasurement, Message: "the runner's result does not decode: " + err.Error()})
	}
	out, err := Block(c, res)
	if err != nil {
		var mm *kvMismatch
		reason := ReasonBadMeasurement
		if errors.As(err, &mm) {
			reason = ReasonKVMismatch
		}
		return publish(c.SubmissionID, events.EfficiencyFailed, c.JobID, events.StageFailedData{SubmissionID: c.SubmissionID, Stage: Name,
			Reason: reason, Message: err.Error()})
	}
	s.log.Info("efficiency measured", "submission", c.SubmissionID, "serve_speed", formula.Round(out.Efficiency[formula.First]/out.AnchorEfficiency[formula.First], 4),
		"serve_peak_gib", out.PeakMemory[formula.First].PeakGiB, "bf16_serve_peak_gib", out.AnchorPeakMemory[formula.First].PeakGiB,
		"budget", out.BudgetReason == "", "gpu_hours", out.GPUHours, "simulated", out.Simulated)
	return publish(c.SubmissionID, events.EfficiencyCompleted, c.JobID, out)
}

// kvMismatch is an engine that ran a KV dtype other than the declared one.
type kvMismatch struct{ declared, running string }

func (e *kvMismatch) Error() string {
	return fmt.Sprintf("the submission declares KV cache dtype %s but its engine reported running %s", e.declared, e.running)
}

// Block builds the record's efficiency block from a runner's measurement.
func Block(c events.RunnerJobCompletedData, res events.EfficiencyJobResult) (events.EfficiencyCompletedData, error) {
	out := events.EfficiencyCompletedData{SubmissionID: c.SubmissionID, GPU: res.GPU, Simulated: res.Simulated, Pod: c.Pod, BundleDigest: c.CheckpointDigest,
		GPUHours: c.GPUHours, Efficiency: map[string]float64{}, AnchorEfficiency: map[string]float64{},
		PeakMemory: map[string]record.PeakMemory{}, AnchorPeakMemory: map[string]record.PeakMemory{}}
	for _, w := range formula.Workloads {
		cw, ok1 := res.Candidate.Workloads[w.Name]
		rw, ok2 := res.Reference.Workloads[w.Name]
		if !ok1 || !ok2 || cw.Rate <= 0 || rw.Rate <= 0 || cw.Peak.PeakGiB <= 0 || rw.Peak.PeakGiB <= 0 {
			return out, fmt.Errorf("the runner measured no %s rate or peak for the submission or its BF16 reference", w.Name)
		}
		out.Efficiency[w.Name], out.AnchorEfficiency[w.Name] = cw.Rate, rw.Rate
		out.PeakMemory[w.Name], out.AnchorPeakMemory[w.Name] = cw.Peak, rw.Peak
	}
	first := formula.First
	out.Workload = record.Workload{
		BF16:       record.WorkloadFigures{PeakGiB: out.AnchorPeakMemory[first].PeakGiB, Rate: out.AnchorEfficiency[first]},
		Submission: record.WorkloadFigures{PeakGiB: out.PeakMemory[first].PeakGiB, Rate: out.Efficiency[first]},
	}
	running := res.Candidate.Startup.KVCacheDType
	audit := map[string]any{"kv_cache_dtype_declared": res.KVCacheDType, "kv_cache_dtype_engine": running,
		"reference_cached": res.Cached, "pod": c.Pod}
	auditJSON, _ := json.Marshal(audit)
	if !SameKV(res.KVCacheDType, running) {
		return out, &kvMismatch{declared: res.KVCacheDType, running: running}
	}
	out.Engine = record.Engine{Audit: auditJSON, Budget: res.Budget, HardCap: res.HardCap, Startup: res.Candidate.Startup,
		StoredGiB: formula.StoredGiB(res.StoredBytes)}
	if out.Engine.Budget == nil {
		out.Engine.Budget = map[string]record.Budget{}
	}
	out.BudgetReason = Verdict(res)
	return out, nil
}

// Verdict is the first failed budget's sentence in the records' order of
// workloads, or "" when every budget held.
func Verdict(res events.EfficiencyJobResult) string {
	keys := slices.Sorted(maps.Keys(res.Budget))
	for _, w := range formula.Workloads {
		for _, key := range keys {
			b := res.Budget[key]
			if !strings.HasPrefix(key, w.Name+"@") || b.Healthy {
				continue
			}
			return formula.Reason(w.Name, formula.Budget{Factor: b.Factor, BudgetGiB: b.BudgetGiB, CapGiB: b.CapGiB},
				formula.Replay{Running: b.Running, Full: b.FullRunning, Rate: b.Value}, res.Candidate.Workloads[w.Name].Rate)
		}
	}
	return ""
}

// SameKV reports whether an engine that reports running KV dtype kept a
// declared one. A declaration of "" or "auto" leaves the choice to the
// engine (the model's dtype); fp8 and fp8_e4m3 are one dtype.
func SameKV(declared, running string) bool {
	norm := func(s string) string {
		s = strings.ToLower(strings.TrimSpace(s))
		switch s {
		case "fp8_e4m3", "fp8e4m3":
			return "fp8"
		case "bfloat16":
			return "bf16"
		}
		return s
	}
	d := norm(declared)
	if d == "" || d == "auto" {
		return true
	}
	return d == norm(running)
}
