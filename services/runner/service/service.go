// Package service is the GPU runner: a long-lived worker that pulls jobs
// from the RUNNER_JOBS work queue one at a time (one runner per GPU),
// fetches their checkpoints from the artifact store, runs them with
// package job, writes GPU samples and per-request rows to the store and
// publishes runner.job.started, progress, completed or failed.
package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/artifact"
	"github.com/lowbarena/lowbarena/events/bus"
	"github.com/lowbarena/lowbarena/services/domain/suite"
	"github.com/lowbarena/lowbarena/services/runner/engine"
	"github.com/lowbarena/lowbarena/services/runner/job"
	"github.com/lowbarena/lowbarena/services/runner/loadgen"
	"github.com/lowbarena/lowbarena/services/runner/telemetry"
	"github.com/lowbarena/lowbarena/services/runtime"
	"github.com/lowbarena/lowbarena/services/store"
)

// Name is the runner's service name: its event source and durable.
const Name = "runner"

// Reasons a job fails that are not the engine's.
const (
	ReasonUnknownKind     = "job_unknown_kind"
	ReasonBadParams       = "job_bad_params"
	ReasonArtifactMissing = "artifact_missing"
	ReasonBadSuite        = "suite_invalid"
)

// Options configure a runner.
type Options struct {
	// Pod names the machine; BF16 references are cached per pod.
	Pod string
	// Runner names this worker (default pod/pid).
	Runner string
	// WorkDir holds checkpoints fetched from the artifact store, one
	// folder per bundle digest, kept across jobs.
	WorkDir string
	// AckWait is the job's ack deadline; the consume loop heartbeats every
	// third of it, so a runner that dies is noticed after about AckWait
	// and its job redelivered. Default 30 s.
	AckWait time.Duration
	// Job holds the engine timeouts and the GPU's telemetry.
	Job job.Runner
	// Store receives gpu_samples and requests rows; nil keeps none.
	Store store.Store
}

// Service is one runner.
type Service struct {
	bus       *bus.Bus
	artifacts artifact.Store
	refs      jetstream.KeyValue
	opts      Options
	log       *slog.Logger
	fetchMu   sync.Mutex
}

// New opens the stores the runner needs.
func New(ctx context.Context, b *bus.Bus, log *slog.Logger, o Options) (*Service, error) {
	js := b.JetStream()
	arts, err := artifact.NewJetStream(ctx, js, bus.ObjectArtifacts)
	if err != nil {
		return nil, fmt.Errorf("runner: %w", err)
	}
	refs, err := js.KeyValue(ctx, bus.BucketReferences)
	if err != nil {
		return nil, fmt.Errorf("runner: open bucket %s: %w", bus.BucketReferences, err)
	}
	if o.Pod == "" {
		o.Pod = "pod-0"
	}
	if o.Runner == "" {
		o.Runner = fmt.Sprintf("%s/%d", o.Pod, os.Getpid())
	}
	if o.WorkDir == "" {
		o.WorkDir = filepath.Join(os.TempDir(), "lowbarena-runner")
	}
	if err := os.MkdirAll(o.WorkDir, 0o755); err != nil {
		return nil, fmt.Errorf("runner: work folder: %w", err)
	}
	if o.AckWait <= 0 {
		o.AckWait = 30 * time.Second
	}
	o.Job.Log = log
	return &Service{bus: b, artifacts: arts, refs: refs, opts: o, log: log}, nil
}

// Consumer is the runners' shared durable on the work queue: every runner
// binds to it, and the server hands each job to one of them. Prefetch 1:
// a runner holds only the job it runs, so a queued job never waits behind
// a busy GPU while its ack timer runs. MaxDeliver 3: a job whose runner
// died twice is dead-lettered rather than killing a third.
func (s *Service) Consumer() bus.ConsumerConfig {
	return bus.ConsumerConfig{
		Name:       Name,
		Stream:     events.StreamRunnerJobs,
		Subjects:   []string{events.SubjectRootJobs + ".>"},
		AckWait:    s.opts.AckWait,
		MaxDeliver: 3,
		Prefetch:   1,
	}
}

// Actors returns the runner's consumer.
func (s *Service) Actors() []runtime.Actor {
	return []runtime.Actor{{Name: Name, Run: func(ctx context.Context) error { return s.bus.Consume(ctx, s.Consumer(), s.Handle) }}}
}

// Handle runs one job.
//
// Idempotency: started carries the delivery number in its id (a
// redelivered job is visibly started again); completed and failed derive
// from the job event's id alone, so a job ends once however often it ran.
// Rows written by an attempt that died stay, tagged with that attempt's
// run id.
//
// Ack semantics: an engine or workload failure is the checkpoint's, so it
// is a runner.job.failed and an Ack; a runner told to stop hands the job
// back (Retry, Nak at once) after stopping its engine; anything else (the
// store, NATS) is a Retry.
func (s *Service) Handle(ctx context.Context, d *bus.Delivery) bus.Outcome {
	var req events.RunnerJobRequestedData
	if err := d.Decode(&req); err != nil {
		return bus.Poison("bad_payload", err)
	}
	src := events.Source(Name)
	run := fmt.Sprintf("%s-%d", req.JobID, d.NumDelivered)
	fail := func(reason, msg, tail string, seconds float64) bus.Outcome {
		s.log.Info("job failed", "job", req.JobID, "kind", req.Kind, "reason", reason, "message", msg)
		data := events.RunnerJobFailedData{JobID: req.JobID, Kind: req.Kind, SubmissionID: req.SubmissionID, RoundID: req.RoundID,
			Pod: s.opts.Pod, Runner: s.opts.Runner, Reason: reason, Message: msg, LogTail: clip(tail, 16<<10), GPUHours: hours(seconds)}
		if _, err := s.bus.PublishNew(ctx, events.DeriveID(d.Event.ID(), string(events.RunnerJobFailed)), events.RunnerJobFailed, src, req.JobID, data); err != nil {
			return bus.Retry(0, err)
		}
		return bus.Ack()
	}
	var (
		p  events.EfficiencyJobParams
		qp events.QualityJobParams
		sp events.SLAJobParams
	)
	switch req.Kind {
	case events.JobEfficiency:
		if err := json.Unmarshal(req.Params, &p); err != nil {
			return fail(ReasonBadParams, fmt.Sprintf("the job's params do not decode: %v", err), "", 0)
		}
		p.Engine.Command = req.Engine
	case events.JobQuality:
		if err := json.Unmarshal(req.Params, &qp); err != nil {
			return fail(ReasonBadParams, fmt.Sprintf("the job's params do not decode: %v", err), "", 0)
		}
		qp.Engine.Command = req.Engine
	case events.JobSLA:
		if err := json.Unmarshal(req.Params, &sp); err != nil {
			return fail(ReasonBadParams, fmt.Sprintf("the job's params do not decode: %v", err), "", 0)
		}
		sp.Engine.Command = req.Engine
	default:
		return fail(ReasonUnknownKind, fmt.Sprintf("this runner runs %s, %s and %s jobs, not %q", events.JobEfficiency, events.JobQuality, events.JobSLA, req.Kind), "", 0)
	}
	gpu := "simulated (no NVML)"
	if s.opts.Job.NVML != nil {
		gpu = s.opts.Job.NVML.GPU()
	}
	started := events.RunnerJobStartedData{JobID: req.JobID, Kind: req.Kind, SubmissionID: req.SubmissionID, RoundID: req.RoundID,
		Pod: s.opts.Pod, Runner: s.opts.Runner, GPU: gpu, Simulated: s.opts.Job.NVML == nil}
	if _, err := s.bus.PublishNew(ctx, events.DeriveID(d.Event.ID(), string(events.RunnerJobStarted), fmt.Sprint(d.NumDelivered)),
		events.RunnerJobStarted, src, req.JobID, started); err != nil {
		return bus.Retry(0, err)
	}
	s.log.Info("job started", "job", req.JobID, "kind", req.Kind, "submission", req.SubmissionID, "delivery", d.NumDelivered)

	cand, err := s.fetch(ctx, req.Checkpoint)
	if errors.Is(err, artifact.ErrNotFound) || errors.Is(err, artifact.ErrCorrupt) {
		return fail(ReasonArtifactMissing, "the checkpoint is not in the artifact store: "+err.Error(), "", 0)
	} else if err != nil {
		return bus.Retry(0, err)
	}
	var ref string
	if req.Kind != events.JobSLA {
		second, what := p.Reference, "the campaign's BF16 reference"
		if req.Kind == events.JobQuality {
			second, what = qp.Suite, "the campaign's eval suite"
		}
		ref, err = s.fetch(ctx, second)
		if errors.Is(err, artifact.ErrNotFound) || errors.Is(err, artifact.ErrCorrupt) {
			return fail(ReasonArtifactMissing, what+" is not in the artifact store: "+err.Error(), "", 0)
		} else if err != nil {
			return bus.Retry(0, err)
		}
	}

	jr := s.opts.Job
	var seq atomic.Uint64
	jr.Samples = func(ctx context.Context, phase string, b []telemetry.Sample) error {
		return s.samples(ctx, req, run+"/"+phase, &seq, b)
	}
	jr.Requests = func(ctx context.Context, phase string, res loadgen.Result) error {
		return s.requests(ctx, req, run+"/"+phase, res, jr.NVML == nil)
	}
	step := 0
	jr.Progress = func(phase string, done, total int) {
		step++
		prog := events.RunnerJobProgressData{JobID: req.JobID, Kind: req.Kind, SubmissionID: req.SubmissionID, RoundID: req.RoundID,
			Phase: phase, Done: done, Total: total}
		if _, err := s.bus.PublishNew(ctx, events.DeriveID(d.Event.ID(), string(events.RunnerJobProgress), fmt.Sprint(d.NumDelivered), fmt.Sprint(step)),
			events.RunnerJobProgress, src, req.JobID, prog); err != nil && ctx.Err() == nil {
			s.log.Warn("progress not published", "job", req.JobID, "err", err)
		}
	}
	var (
		res     any
		seconds float64
		cached  bool
	)
	switch req.Kind {
	case events.JobSLA:
		kv := sp.KVCacheDType
		if kv == "" {
			kv = "auto"
		}
		sr, serr := jr.Serve(ctx, job.Launch{Run: sp.Entry, Command: sp.Engine.Command, Checkpoint: cand, KVCacheDType: kv,
			MaxNumSeqs: sp.Engine.MaxNumSeqs}, job.Workloads(sp.Workload))
		res, seconds, err = sr, sr.Seconds, serr
	case events.JobQuality:
		st, lerr := suite.Load(ref)
		if lerr != nil {
			return fail(ReasonBadSuite, lerr.Error(), "", 0)
		}
		sim := jr.NVML == nil
		qr, qerr := jr.Quality(ctx, qp, cand, st, func(ctx context.Context, b []job.Graded) error {
			return s.graded(ctx, req, qp, b, sim)
		})
		res, seconds, err = qr, qr.Seconds, qerr
	default:
		er, eerr := jr.Efficiency(ctx, p, cand, ref, &refCache{kv: s.refs, pod: s.opts.Pod})
		res, seconds, cached, err = er, er.Seconds, er.Cached, eerr
	}
	switch {
	case ctx.Err() != nil:
		// The engine is already stopped (Serve stops it on every path);
		// the job goes back to the queue for another runner.
		s.log.Info("runner stopping; job handed back", "job", req.JobID)
		return bus.Retry(0, ctx.Err())
	case engine.AsFailure(err) != nil:
		f := engine.AsFailure(err)
		return fail(f.Reason, prefix(err, f.Message), f.LogTail, seconds)
	case loadgen.AsError(err) != nil:
		le := loadgen.AsError(err)
		return fail(le.Code, prefix(err, le.Message), "", seconds)
	case err != nil:
		return bus.Retry(0, err)
	}
	body, err := json.Marshal(res)
	if err != nil {
		return bus.Poison("result_unencodable", err)
	}
	done := events.RunnerJobCompletedData{JobID: req.JobID, Kind: req.Kind, SubmissionID: req.SubmissionID, RoundID: req.RoundID,
		Pod: s.opts.Pod, Runner: s.opts.Runner, GPUHours: hours(seconds), Result: body, CheckpointDigest: req.Checkpoint.SHA256}
	if _, err := s.bus.PublishNew(ctx, events.DeriveID(d.Event.ID(), string(events.RunnerJobCompleted)), events.RunnerJobCompleted, src, req.JobID, done); err != nil {
		return bus.Retry(0, err)
	}
	s.log.Info("job completed", "job", req.JobID, "submission", req.SubmissionID, "gpu_hours", done.GPUHours, "reference_cached", cached)
	return bus.Ack()
}

// prefix keeps the context the job added before a failure's own message
// ("the BF16 reference: engine died ...").
func prefix(err error, msg string) string {
	full := err.Error()
	if i := strings.Index(full, ": "); i > 0 && strings.HasPrefix(full, "the ") {
		return full[:i] + ": " + msg
	}
	return msg
}

func hours(seconds float64) float64 { return float64(int64(seconds/3600*1e6+0.5)) / 1e6 }

func clip(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

func (s *Service) samples(ctx context.Context, req events.RunnerJobRequestedData, run string, seq *atomic.Uint64, b []telemetry.Sample) error {
	if s.opts.Store == nil {
		return nil
	}
	rows := make([]store.GPUSample, len(b))
	for i, x := range b {
		sim := uint8(0)
		if x.Simulated {
			sim = 1
		}
		rows[i] = store.GPUSample{TsMs: uint64(x.At.UnixMilli()), Pod: s.opts.Pod, GPU: uint32(x.GPU), GPUUUID: x.UUID,
			RunID: run, JobID: req.JobID, Seq: seq.Add(1), MemUsed: x.MemUsed, MemTotal: x.MemTotal, ProcMem: x.ProcMem,
			Util: x.Util, Power: x.PowerW, Simulated: sim}
	}
	return store.Insert(ctx, s.opts.Store, rows)
}

// graded writes a quality job's graded samples to quality_items. The
// BF16 reference's rows carry the submission id "bf16-reference".
func (s *Service) graded(ctx context.Context, req events.RunnerJobRequestedData, p events.QualityJobParams, b []job.Graded, simulated bool) error {
	if s.opts.Store == nil {
		return nil
	}
	sub := req.SubmissionID
	if p.Role == events.RoleBF16 {
		sub = "bf16-reference"
	}
	sim := uint8(0)
	if simulated {
		sim = 1
	}
	now := uint64(time.Now().UnixMilli())
	name, _, _ := strings.Cut(p.SuiteKey, "@")
	rows := make([]store.QualityItem, len(b))
	for i, g := range b {
		f := uint8(0)
		if g.Formatted {
			f = 1
		}
		rows[i] = store.QualityItem{TsMs: now, Campaign: p.Campaign, Suite: name, SuiteVersion: p.SuiteKey, SubmissionID: sub, Role: p.Role,
			Domain: g.Item.Domain, ItemID: g.Item.ID, Sample: uint32(g.Sample), Score: g.Score, Formatted: f,
			OutputTokens: uint32(g.OutputTokens), Simulated: sim}
	}
	return store.Insert(ctx, s.opts.Store, rows)
}

func (s *Service) requests(ctx context.Context, req events.RunnerJobRequestedData, run string, res loadgen.Result, simulated bool) error {
	if s.opts.Store == nil || len(res.Samples) == 0 {
		return nil
	}
	sim := uint8(0)
	if simulated {
		sim = 1
	}
	rows := make([]store.Request, len(res.Samples))
	for i, x := range res.Samples {
		itl := make([]float64, len(x.ITL))
		for j, d := range x.ITL {
			itl[j] = float64(d) / float64(time.Millisecond)
		}
		rows[i] = store.Request{TsMs: uint64(x.Start.UnixMilli()), SubmissionID: req.SubmissionID, JobID: req.JobID, RunID: run,
			Workload: res.Workload, Seq: uint32(x.Seq), PromptTokens: uint32(x.PromptTokens), OutputTokens: uint32(x.OutputTokens),
			TTFTMs: float64(x.TTFT) / float64(time.Millisecond), ITLP50Ms: loadgen.Percentile(itl, 50), ITLP99Ms: loadgen.Percentile(itl, 99),
			E2EMs: float64(x.E2E) / float64(time.Millisecond), OK: 1, Simulated: sim}
	}
	return store.Insert(ctx, s.opts.Store, rows)
}

// fetch materialises a bundle from the artifact store into
// WorkDir/<digest>, checking every file's digest on the way, and returns
// the folder. A folder already complete is reused: it is renamed into
// place only after every file landed.
func (s *Service) fetch(ctx context.Context, ref events.BundleRef) (string, error) {
	if !hexDigest.MatchString(ref.SHA256) {
		return "", fmt.Errorf("%w: bundle reference %q has no digest", artifact.ErrNotFound, ref.Object)
	}
	s.fetchMu.Lock()
	defer s.fetchMu.Unlock()
	dir := filepath.Join(s.opts.WorkDir, ref.SHA256)
	if _, err := os.Stat(filepath.Join(dir, ".complete")); err == nil {
		return dir, nil
	}
	m, err := s.artifacts.Manifest(ctx, ref)
	if err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(s.opts.WorkDir, "fetch-")
	if err != nil {
		return "", fmt.Errorf("runner: %w", err)
	}
	defer os.RemoveAll(tmp)
	root, err := os.OpenRoot(tmp)
	if err != nil {
		return "", fmt.Errorf("runner: %w", err)
	}
	defer root.Close()
	for _, f := range m.Files {
		if err := s.fetchFile(ctx, root, f); err != nil {
			return "", err
		}
	}
	if err := root.WriteFile(".complete", []byte(m.Digest+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("runner: %w", err)
	}
	_ = os.RemoveAll(dir)
	if err := os.Rename(tmp, dir); err != nil {
		return "", fmt.Errorf("runner: %w", err)
	}
	return dir, nil
}

var hexDigest = regexp.MustCompile(`^[0-9a-f]{64}$`)

// fetchFile copies one file into root (paths were checked by the build
// stage; os.Root refuses any that would leave the folder all the same).
func (s *Service) fetchFile(ctx context.Context, root *os.Root, f events.FileDigest) error {
	if d := filepath.Dir(f.Path); d != "." {
		if err := root.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("runner: %w", err)
		}
	}
	r, err := s.artifacts.OpenFile(ctx, f.SHA256)
	if err != nil {
		return err
	}
	defer r.Close()
	w, err := root.Create(f.Path)
	if err != nil {
		return fmt.Errorf("runner: %w", err)
	}
	n, err := io.Copy(w, r)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("runner: fetch %s: %w", f.Path, err)
	}
	if n != f.Size {
		return fmt.Errorf("%w: %s is %d bytes, the manifest says %d", artifact.ErrCorrupt, f.Path, n, f.Size)
	}
	return nil
}

// refCache keeps BF16 reference measurements in the references bucket,
// keyed pod.campaign.digest, written with Create: the first runner of a
// pod to measure a reference keeps it.
type refCache struct {
	kv  jetstream.KeyValue
	pod string
}

func (c *refCache) key(campaign, digest string) string {
	return bus.Key(c.pod, campaign, digest)
}

func (c *refCache) Get(ctx context.Context, campaign, digest string) (*job.Served, error) {
	e, err := c.kv.Get(ctx, c.key(campaign, digest))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("runner: reference cache: %w", err)
	}
	var s job.Served
	if err := json.Unmarshal(e.Value(), &s); err != nil {
		return nil, nil // unreadable: measure again
	}
	return &s, nil
}

func (c *refCache) Put(ctx context.Context, campaign, digest string, s job.Served) error {
	b, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("runner: reference cache: %w", err)
	}
	if _, err := c.kv.Create(ctx, c.key(campaign, digest), b); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("runner: reference cache: %w", err)
	}
	return nil
}
