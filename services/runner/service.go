// Package service is the GPU runner: a long-lived worker that pulls jobs
// from the RUNNER_JOBS work queue one at a time (one runner per GPU),
// fetches their checkpoints from the artifact store, runs them with
// package job, writes GPU samples and per-request rows to the store and
// publishes runner.job.started, progress, completed or failed. The kinds
// of job it runs are registered once each (kinds.go); Handle is the same
// for all of them.
package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/lowbarena/lowbarena/adapters/hub"
	"github.com/lowbarena/lowbarena/adapters/staging"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/app"
	"github.com/lowbarena/lowbarena/platform/artifact"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/store"
	"github.com/lowbarena/lowbarena/platform/workqueue"
	"github.com/lowbarena/lowbarena/services/runner/engine"
	"github.com/lowbarena/lowbarena/services/runner/enginebuild"
	"github.com/lowbarena/lowbarena/services/runner/job"
	"github.com/lowbarena/lowbarena/services/runner/loadgen"
	"github.com/lowbarena/lowbarena/services/runner/telemetry"
)

// Name is the runner's service name: its event source and durable.
const Name = "runner"

// Options configure a runner.
type Options struct {
	// Pod names the machine; BF16 references are cached per pod.
	Pod string
	// Runner names this worker (default pod/host/pid); it keys the
	// worker's entry in the pods registry, so no two runners of a pod
	// may share it.
	Runner string
	// GPU is NVML's index of the device this runner drives on its pod
	// (one runner per GPU). Job.NVML, when set, is bound to it.
	GPU int
	// WorkDir holds checkpoints fetched from the artifact store, one
	// folder per bundle digest, kept across jobs.
	WorkDir string
	// AckWait is the job's ack deadline; the consume loop heartbeats every
	// third of it, so a runner that dies is noticed after about AckWait
	// and its job redelivered. Default 30 s.
	AckWait time.Duration
	// Job holds the engine timeouts and the GPU's telemetry.
	Job job.Runner
	// Store receives gpu_samples, requests and quality_items rows; nil
	// keeps none.
	Store store.Store
	// Hub reads checkpoints by reference from their repositories.
	Hub hub.Options
	// RowsWait bounds how long a job's outcome waits for its telemetry
	// and request rows to be written (the store may be out of reach);
	// default 10 min. The job's message is kept meanwhile (heartbeats).
	RowsWait time.Duration
	// RefusalDelay is the pause before a job this runner refused (see
	// job.Refusal) is delivered again; default 20 s.
	RefusalDelay time.Duration
	// QualityWait is how long a runner holds a quality job while another
	// runner runs the submission's efficiency job and says it will answer
	// it on the candidate's engine (see notHere); default 5 min, negative
	// never. The wait ends as soon as that runner no longer says so.
	QualityWait time.Duration
	// CacheBytes caps the pod's cache of checkpoints by reference in
	// WorkDir/cache (default DefaultCacheBytes), shared by every runner
	// whose WorkDir is the same folder.
	CacheBytes int64
}

// Service is one runner.
type Service struct {
	bus       *bus.Bus
	artifacts artifact.Store
	// arena is the ARENA stream, read for a job's stored outcome (ended).
	arena   jetstream.Stream
	refs    jetstream.KeyValue
	opts    Options
	log     *slog.Logger
	fetchMu sync.Mutex
	// cache stages checkpoints by reference onto the pod.
	cache *staging.Cache
	// registry holds the job kinds this runner runs (see kinds).
	registry *Registry
	// pod follows the pod's lease and keeps the runner's entry in the
	// pods registry.
	pod *pod
	// builder builds candidates' patched engines into WORK/engines,
	// shared by the pod's runners (see buildEngine).
	builder enginebuild.Builder
	// along answers a submission's quality job on its efficiency job's
	// engine (see alongside).
	along alongside
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
	if !events.ValidPod(o.Pod) {
		return nil, fmt.Errorf("runner: pod %q names a job subject and a durable: use letters, digits, - and _ only", o.Pod)
	}
	if o.Runner == "" {
		// Unique among the pod's runners, which also key the pods
		// registry by it: in containers every runner may be pid 1 (the
		// host name tells them apart there), on one host the pids do.
		host, _ := os.Hostname()
		o.Runner = fmt.Sprintf("%s/%s/%d", o.Pod, host, os.Getpid())
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
	if o.CacheBytes <= 0 {
		o.CacheBytes = DefaultCacheBytes
	}
	if o.RefusalDelay <= 0 {
		o.RefusalDelay = 20 * time.Second
	}
	if o.QualityWait == 0 {
		o.QualityWait = 5 * time.Minute
	}
	if o.RowsWait <= 0 {
		o.RowsWait = 10 * time.Minute
	}
	o.Hub.Log = log
	cache, err := staging.Open(staging.Options{Dir: cacheDir(o.WorkDir), MaxBytes: o.CacheBytes, Hub: hub.New(o.Hub), Log: log})
	if err != nil {
		return nil, fmt.Errorf("runner: %w", err)
	}
	o.Job.Log = log
	if o.GPU < 0 {
		return nil, fmt.Errorf("runner: GPU index %d: use 0 or more", o.GPU)
	}
	rounds, pods, err := openPod(ctx, js)
	if err != nil {
		return nil, err
	}
	arena, err := js.Stream(ctx, events.StreamArena)
	if err != nil {
		return nil, fmt.Errorf("runner: open stream %s: %w", events.StreamArena, err)
	}
	s := &Service{bus: b, artifacts: arts, arena: arena, refs: refs, opts: o, log: log, cache: cache,
		builder: enginebuild.Builder{Dir: filepath.Join(o.WorkDir, "engines"), Box: buildBox(o.Job.Box)}}
	s.registry = s.kinds()
	entry := events.PodEntry{Pod: o.Pod, Runner: o.Runner, GPUIndex: o.GPU, GPU: s.gpu(),
		Simulated: o.Job.NVML == nil, Kinds: s.registry.Names(), StartedAt: time.Now().UTC()}
	if o.Job.NVML != nil {
		entry.GPUUUID = o.Job.NVML.UUID()
	}
	s.pod = newPod(rounds, pods, log, entry, o.AckWait/3)
	return s, nil
}

// Kinds lists the job kinds the runner runs, in registration order.
func (s *Service) Kinds() []string { return s.registry.Names() }

// Consumer is the runners' shared durable on the work queue: every runner
// binds to it, and the server hands each job without a pod
// (jobs.<kind>.<id>) to one of them. Prefetch 1: a runner holds only the
// job it runs, so a queued job never waits behind a busy GPU while its ack
// timer runs. MaxDeliver 3: a job whose runner died twice is
// dead-lettered rather than killing a third.
//
// Its filter was jobs.> before jobs could be pinned to a pod; RUNNER_JOBS
// is a work queue, whose durables' filters may not overlap, so a runner
// narrows it (EnsureConsumer updates it in place, keeping its queue)
// before it creates its pod's durable.
//
// A job it gives up (dead-lettered) ends as a runner.job.failed with
// reason job_abandoned (see Abandon), so the stage or round waiting on it
// hears.
func (s *Service) Consumer() bus.ConsumerConfig {
	return bus.ConsumerConfig{
		Name:             Name,
		Stream:           events.StreamRunnerJobs,
		Subjects:         []string{events.JobSharedFilter},
		AckWait:          s.opts.AckWait,
		MaxDeliver:       3,
		Prefetch:         1,
		DeadLetterPolicy: workqueue.OnDeadLetter(s.Abandon),
	}
}

// Abandon ends a job the runners' consumer gives up (its
// workqueue.OnDeadLetter hook): one delivered MaxDeliver times without an
// outcome (every runner that took it stopped or was killed first), or one
// its handler called poison.
// It publishes the job's runner.job.failed with reason job_abandoned, the
// deliveries and the last reason in its message, so the stage or round
// that waits on the job fails it instead of waiting forever.
//
// Idempotent: the event's id is the one a runner's own failure of the job
// gets (derived from the job event's id), so a hook repeated after a
// crash, or one that follows a failure whose ack was lost, is stored once
// (the stream's duplicate window). A message that is not a job request
// has nothing to end; the dead letter keeps it.
//
// A job delivered past MaxDeliver while a live runner still runs an
// earlier delivery is not given up (workqueue.ErrStillHeld: the message
// comes back later and is asked about again): in the chaos runs a runner's
// heartbeat was lost while NATS elected the consumer's leader, the job
// was delivered again to the other runner, given up there, and the
// first runner completed it 8 s later, too late for the submission,
// already failed. The pods registry says who runs what (heldElsewhere);
// once the runner that held it dies, its entry goes stale within two
// thirds of the ack deadline and the job is given up.
func (s *Service) Abandon(ctx context.Context, dl bus.DeadLetter) error {
	if events.Type(dl.Event.Type()) != events.RunnerJobRequested {
		return nil
	}
	req, err := events.Job.Requested.Decode(dl.Event)
	if err != nil {
		return nil
	}
	// A job that ended on an earlier delivery (its runner's ack never
	// reached the server) has nothing to give up: acked, not
	// dead-lettered. One given up already (this hook ran, and the dead
	// letter that follows it did not land) is dead-lettered without a
	// second job_abandoned, however long ago the first was published.
	switch t, why, err := s.ended(ctx, dl.Event, dl.Stored, req.Kind, req.JobID); {
	case errors.Is(err, bus.ErrDenied):
		// Its NATS user may not read outcomes (an auth.conf that does
		// not grant it): the job is given up without knowing whether it
		// ended, rather than asked about forever.
		s.log.Warn("cannot read the job's outcome; giving it up without knowing it (grant the runner's NATS user what deploy/nats/auth.conf grants it)",
			"job", req.JobID, "err", err)
	case err != nil:
		return fmt.Errorf("runner: look for job %s's outcome before giving it up: %w", req.JobID, err)
	case t == events.RunnerJobFailed && why == string(reason.JobAbandoned):
		return nil
	case t != "":
		return fmt.Errorf("%w: job %s has its %s", workqueue.ErrSettled, req.JobID, t)
	}
	if dl.Reason == reason.MaxDeliverExceeded {
		holder, err := s.heldElsewhere(ctx, req.JobID)
		if err != nil {
			return fmt.Errorf("runner: read the pods registry before giving job %s up: %w", req.JobID, err)
		}
		if holder != "" {
			return fmt.Errorf("%w: job %s runs on %s (delivery %d here)", workqueue.ErrStillHeld, req.JobID, holder, dl.Deliveries)
		}
	}
	last := string(dl.Reason)
	if dl.Err != nil {
		last += ": " + dl.Err.Error()
	}
	msg := fmt.Sprintf("the runners gave the %s job %s up after %d deliveries without an outcome (last: %s): each runner that took it stopped or died before it ended, so nothing was measured. "+
		"Submit the checkpoint again; if it is given up again, ask the arena's operator to read the runners' logs and the job's dead letter on %s.%s",
		req.Kind, req.JobID, dl.Deliveries, clip(last, 2048), events.SubjectRootDLQ, Name)
	data := events.RunnerJobFailedData{JobID: req.JobID, Kind: req.Kind, SubmissionID: req.SubmissionID, RoundID: req.RoundID,
		Pod: s.opts.Pod, Runner: s.opts.Runner, Reason: string(reason.JobAbandoned), Message: msg}
	if _, err := bus.Emit(ctx, s.bus, events.Source(Name), events.Job.Failed, req.JobID, data, bus.CausedBy(dl.Event.ID())); err != nil {
		return fmt.Errorf("runner: publish the abandoned job %s: %w", req.JobID, err)
	}
	s.log.Warn("job abandoned", "job", req.JobID, "kind", req.Kind, "submission", req.SubmissionID, "round", req.RoundID, "deliveries", dl.Deliveries, "last", last)
	return nil
}

// heldElsewhere names the runner (its key in the pods registry) that
// runs job now, or "" when none does. A runner writes its entry at
// each change and every third of the ack deadline (pod.beat), so an
// entry that names the job and was written less than two thirds of the
// ack deadline ago (the server's timestamp) is a live runner's; an older
// one is a dead runner's, or a stale view not worth waiting on. This
// runner's own entry is not asked: it runs no job while it gives one up.
func (s *Service) heldElsewhere(ctx context.Context, job string) (string, error) {
	k, _, err := s.heldBy(ctx, job)
	return k, err
}

// heldBy is heldElsewhere with the holder's entry of the job.
func (s *Service) heldBy(ctx context.Context, job string) (string, *events.PodJob, error) {
	return s.liveJob(ctx, func(j *events.PodJob) bool { return j.JobID == job })
}

// liveJob finds a live runner other than this one (its entry written less
// than two thirds of the ack deadline ago) whose job matches, and returns
// its key and job ("" and nil when none does).
func (s *Service) liveJob(ctx context.Context, match func(*events.PodJob) bool) (string, *events.PodJob, error) {
	keys, err := s.pod.pods.ListKeys(ctx)
	if err != nil {
		return "", nil, err
	}
	defer func() { _ = keys.Stop() }()
	fresh := 2 * s.opts.AckWait / 3
	for k := range keys.Keys() {
		if k == s.pod.key {
			continue
		}
		e, err := s.pod.pods.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		} else if err != nil {
			return "", nil, err
		}
		var entry events.PodEntry
		if json.Unmarshal(e.Value(), &entry) != nil || entry.Job == nil || !match(entry.Job) {
			continue
		}
		if time.Since(e.Created()) < fresh {
			return k, entry.Job, nil
		}
	}
	return "", nil, nil
}

// PodConsumer is the durable of the jobs pinned to this runner's pod
// (jobs.<kind>.<id>.<pod>, a round's), shared by the pod's runners: such a
// job waits for them, however long, and is never served elsewhere. Same
// settings as Consumer; its dead letters go to dlq.runner.
func (s *Service) PodConsumer() bus.ConsumerConfig { return PodConsumerOf(s.Consumer(), s.opts.Pod) }

// PodConsumerOf is the durable of the jobs pinned to pod, with the shared
// durable shared's settings (see PodConsumer).
func PodConsumerOf(shared bus.ConsumerConfig, pod string) bus.ConsumerConfig {
	shared.Name = PodConsumerName(pod)
	shared.Subjects = []string{events.JobPodFilter(pod)}
	shared.DeadLetterAs = Name
	return shared
}

// PodConsumerName is the durable of the jobs pinned to pod: runner-<pod>.
func PodConsumerName(pod string) string { return Name + "-" + pod }

// pollWait is how long an idle runner waits on each of its durables in
// turn: a job queued while it is idle starts within about twice that.
const pollWait = time.Second

// Actors returns the runner's consume loop. It holds one job at a time:
// when idle it takes the next job pinned to its pod before the next shared
// one, and pulls nothing ahead, so a busy runner holds no job another
// runner could take.
func (s *Service) Actors() []app.Actor {
	return []app.Actor{{Name: Name, Run: s.Run}}
}

// Run consumes jobs until ctx is cancelled (see Actors).
//
// While a round holds the pod (its lease, watched in the rounds bucket)
// the runner asks only its pod's durable: the round's jobs have the pod
// to themselves, and shared jobs go to the other pods' runners, or wait
// for the lease to end. No scheduler picks a pod for a shared job: the
// shared durable is a pull consumer, so the server hands each job to a
// runner that asks, and only idle runners of unheld pods ask.
func (s *Service) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// An engine kept for a later job stops with the runner.
	defer s.opts.Job.Keep.Close()
	ready := make(chan struct{})
	watched := make(chan error, 1)
	go func() { watched <- s.pod.watchLease(ctx, ready) }()
	select {
	case <-ready:
	case err := <-watched:
		return err
	case <-ctx.Done():
		return nil
	}
	announced := make(chan struct{})
	go func() { defer close(announced); _ = s.pod.announce(ctx) }()
	defer func() { cancel(); <-announced }()
	const shared = 1
	open := func(i int) bool { return i != shared || s.pod.sharedOpen() }
	return workqueue.ConsumeFirstWhen(ctx, s.bus, []bus.ConsumerConfig{s.PodConsumer(), s.Consumer()}, pollWait, open, s.Handle)
}

// gpu names the runner's device.
func (s *Service) gpu() string {
	if s.opts.Job.NVML != nil {
		return s.opts.Job.NVML.GPU()
	}
	return "simulated (no NVML)"
}

// Handle runs one job of a registered kind.
//
// Idempotency: started carries the delivery number in its id (a
// redelivered job is visibly started again); completed and failed derive
// from the job event's id alone, so a job ends once however often it ran.
// A delivery whose job has its outcome stored already (a runner published
// it, then died or lost its ack) is acked without running (see ended):
// the GPU does not run it twice, however late the redelivery comes.
// Rows written by an attempt that died stay, tagged with that attempt's
// run id.
//
// Ack semantics: an unknown kind, params that do not decode, a missing
// artifact, a checkpoint by reference that cannot be staged (its
// repository's reason, or staging_cache_full), a candidate's patched
// engine that does not build (engine_build_failed, engine_build_timeout)
// and an engine or workload failure are the job's, so they are a runner.job.failed and an Ack; a runner told to stop hands the job
// back (Retry, Nak at once) after stopping its engine; anything else (the
// store, NATS) is a Retry.
func (s *Service) Handle(ctx context.Context, d *bus.Delivery) bus.Outcome {
	req, err := events.Job.Requested.Decode(d.Event)
	if err != nil {
		return bus.Poison(reason.BadPayload, err)
	}
	src := events.Source(Name)
	if out, done := s.notHere(ctx, d, req); done {
		return out
	}
	run := fmt.Sprintf("%s-%d", req.JobID, d.NumDelivered)
	// The job's span (the bus's process span) says where it ran.
	trace.SpanFromContext(ctx).SetAttributes(bus.AttrPod.String(s.opts.Pod), attribute.String("lowbarena.runner", s.opts.Runner))
	running := &events.PodJob{JobID: req.JobID, Kind: req.Kind, SubmissionID: req.SubmissionID, RoundID: req.RoundID,
		Since: time.Now().UTC(), Delivery: d.NumDelivered}
	s.pod.setJob(running)
	defer s.pod.setJob(nil)
	gpu, gpuIndex := s.gpu(), s.opts.GPU
	var releases []func()
	// exit is how the engine's process ended, for an engine failure.
	exit := ""
	fail := func(code reason.Code, msg, tail string, seconds float64) bus.Outcome {
		s.log.Info("job failed", "job", req.JobID, "kind", req.Kind, "reason", code, "exit", exit, "message", msg)
		data := events.RunnerJobFailedData{JobID: req.JobID, Kind: req.Kind, SubmissionID: req.SubmissionID, RoundID: req.RoundID,
			Pod: s.opts.Pod, Runner: s.opts.Runner, Reason: string(code), Message: msg, LogTail: clip(tail, 16<<10), GPUHours: hours(seconds), Exit: clip(exit, 250),
			GPU: gpu, GPUIndex: gpuIndex}
		// On arena.runner.job.failed.<kind>.<job> (the bus reads the kind
		// from the payload).
		if _, err := bus.Emit(ctx, s.bus, src, events.Job.Failed, req.JobID, data, bus.CausedBy(d.Event.ID())); err != nil {
			return bus.Retry(0, err)
		}
		return bus.Ack()
	}
	prep, err := s.registry.lookup(req.Kind)
	if err != nil {
		f := asFailure(err)
		return fail(f.Reason, f.Message, "", 0)
	}
	work, err := prep(req)
	if err != nil {
		return fail(reason.JobBadParams, fmt.Sprintf("the job's params do not decode: %v", err), "", 0)
	}
	started := events.RunnerJobStartedData{JobID: req.JobID, Kind: req.Kind, SubmissionID: req.SubmissionID, RoundID: req.RoundID,
		Pod: s.opts.Pod, Runner: s.opts.Runner, GPU: gpu, Simulated: s.opts.Job.NVML == nil, GPUIndex: gpuIndex}
	if _, err := bus.Emit(ctx, s.bus, src, events.Job.Started, req.JobID, started, bus.CausedBy(d.Event.ID(), fmt.Sprint(d.NumDelivered))); err != nil {
		return bus.Retry(0, err)
	}
	s.log.Info("job started", "job", req.JobID, "kind", req.Kind, "submission", req.SubmissionID, "delivery", d.NumDelivered)

	var stepMu sync.Mutex
	step := 0
	progress := func(phase string, done, total int, unit string) {
		stepMu.Lock()
		step++
		n := step
		stepMu.Unlock()
		prog := events.RunnerJobProgressData{JobID: req.JobID, Kind: req.Kind, SubmissionID: req.SubmissionID, RoundID: req.RoundID,
			Phase: phase, Done: done, Total: total, Unit: unit}
		if _, err := bus.Emit(ctx, s.bus, src, events.Job.Progress, req.JobID, prog, bus.CausedBy(d.Event.ID(), fmt.Sprint(d.NumDelivered), fmt.Sprint(n))); err != nil && ctx.Err() == nil {
			s.log.Warn("progress not published", "job", req.JobID, "err", err)
		}
	}

	// The checkpoint and the job's other bundles, each held until the
	// job ends (a checkpoint by reference is staged through the pod's
	// cache, its progress in bytes).
	env := Env{Request: req}
	fetch := func(ref events.BundleRef, what string) (string, bus.Outcome, bool) {
		dir, release, err := s.fetch(ctx, ref, throttled(func(done, total int64) {
			progress(events.PhaseStaging, int(done), int(total), events.UnitBytes)
		}))
		if err != nil {
			if f := stagingFailure(what, err); f != nil && ctx.Err() == nil {
				return "", fail(f.Reason, f.Message, "", 0), false
			}
			return "", bus.Retry(stagingDelay(err), err), false
		}
		releases = append(releases, release)
		return dir, bus.Outcome{}, true
	}
	defer func() {
		for _, r := range releases {
			r()
		}
	}()
	var outcome bus.Outcome
	var ok bool
	if env.Checkpoint, outcome, ok = fetch(req.Checkpoint, "the checkpoint"); !ok {
		return outcome
	}
	for _, a := range work.fetch {
		dir, outcome, ok := fetch(a.Ref, a.What)
		if !ok {
			return outcome
		}
		env.Artifacts = append(env.Artifacts, dir)
	}

	jr := s.opts.Job
	// A candidate's patched engine: the campaign's bundle fetched like
	// the others, the engine built once per pod (or found built), run
	// sandboxed by the job's candidate runs.
	if ep := work.patched; ep != nil {
		if jr.Patched, outcome, ok = s.patchedEngine(ctx, req.JobID, *ep, env.Checkpoint, fetch, fail, progress, &exit); !ok {
			return outcome
		}
	}
	var seq atomic.Uint64
	// Telemetry and request rows go through the job's writer, in the
	// background: a store that is out of reach stalls neither the
	// sampler nor the workloads. They are all written (or the wait has
	// passed) before the job's outcome is published.
	rows := newRowWriter(s.log.With("job", req.JobID))
	jr.Samples = func(_ context.Context, phase string, b []telemetry.Sample) error {
		rows.add(func(ctx context.Context) error { return s.samples(ctx, req, run+"/"+phase, &seq, b) })
		return nil
	}
	simulated := jr.NVML == nil
	jr.Requests = func(_ context.Context, phase string, res loadgen.Result) error {
		rows.add(func(ctx context.Context) error { return s.requests(ctx, req, run+"/"+phase, res, simulated) })
		return nil
	}
	jr.Progress = func(phase string, done, total int) { progress(phase, done, total, "") }
	if req.Kind == events.JobEfficiency && jr.Keep != nil && jr.Keep.For > 0 {
		alongside := *running
		alongside.QualityAlongside = true
		s.pod.setJob(&alongside)
		jr.AfterCandidate = s.qualityAlongside(req, running)
	}
	env.Job = &jr
	res, err := work.run(ctx, env)
	s.addGPUSeconds(rows, req, d.NumDelivered, res.GPU, err, simulated)
	s.flushRows(ctx, rows, req.JobID)
	switch {
	case ctx.Err() != nil:
		// The engine is already stopped (Serve stops it on every path);
		// the job goes back to the queue for another runner.
		s.log.Info("runner stopping; job handed back", "job", req.JobID)
		return bus.Retry(0, ctx.Err())
	case job.AsRefusal(err) != nil:
		// The pod's doing, not the submission's: handed back, a while
		// later, for this or another runner; failed with its reason once
		// the tries are spent, so a misconfigured arena says why.
		rf := job.AsRefusal(err)
		if d.NumDelivered < refusalTries {
			s.log.Warn("job refused by this runner; handed back", "job", req.JobID, "reason", rf.Reason, "message", rf.Message, "delivery", d.NumDelivered)
			return bus.Retry(s.opts.RefusalDelay, err)
		}
		return fail(rf.Reason, rf.Message, "", res.Seconds)
	case asFailure(err) != nil:
		f := asFailure(err)
		return fail(f.Reason, f.Message, "", res.Seconds)
	case engine.AsFailure(err) != nil:
		f := engine.AsFailure(err)
		exit = f.Exit
		return fail(f.Reason, prefix(err, f.Message), f.LogTail, res.Seconds)
	case loadgen.AsError(err) != nil:
		le := loadgen.AsError(err)
		return fail(le.Code, prefix(err, le.Message), "", res.Seconds)
	case err != nil:
		return bus.Retry(0, err)
	}
	if res.Unencodable != nil {
		return bus.Poison(reason.ResultUnencodable, res.Unencodable)
	}
	done := events.RunnerJobCompletedData{JobID: req.JobID, Kind: req.Kind, SubmissionID: req.SubmissionID, RoundID: req.RoundID,
		Pod: s.opts.Pod, Runner: s.opts.Runner, GPUHours: hours(res.Seconds), Result: res.Body, CheckpointDigest: req.Checkpoint.SHA256,
		GPU: gpu, GPUIndex: gpuIndex}
	// On arena.runner.job.completed.<kind>.<job>.
	if _, err := bus.Emit(ctx, s.bus, src, events.Job.Completed, req.JobID, done, bus.CausedBy(d.Event.ID())); err != nil {
		return bus.Retry(0, err)
	}
	s.log.Info("job completed", append([]any{"job", req.JobID, "kind", req.Kind, "submission", req.SubmissionID, "gpu_hours", done.GPUHours}, res.Attrs...)...)
	return bus.Ack()
}

// notHere says whether the job of delivery d (its request req) is not to
// run here, and its outcome then.
//
// A job whose outcome is stored already (an earlier delivery's runner
// published it, then died or lost its ack) is not run again. Not found,
// or not readable now (then it runs, as it would have: its outcome's id
// is the same, stored once), it runs. One given up already goes back to
// the dead letters (its job_abandoned is not published again).
//
// A quality job whose submission's efficiency job runs on another live
// runner that will answer it on the candidate's engine
// (PodJob.QualityAlongside) waits here, its delivery held, until that
// runner no longer says so (it answered it, or its candidate's run
// failed, or it died and its entry went stale) or Options.QualityWait
// has passed: so it prefers the pod that holds its engine. Answered
// there, it ends here unrun.
//
// A job another live runner runs now as a quality job answered alongside
// its efficiency job (see alongside) is handed back: it ends there, and
// this delivery then finds its outcome. Only such a run (its delivery 0)
// is waited on: a runner that died holding an earlier delivery may still
// look alive for a moment, and its job must run here.
func (s *Service) notHere(ctx context.Context, d *bus.Delivery, req events.RunnerJobRequestedData) (bus.Outcome, bool) {
	if out, done := s.endedAlready(ctx, d, req); done {
		return out, true
	}
	if s.waitAlongside(ctx, req) {
		if ctx.Err() != nil {
			return bus.Retry(0, ctx.Err()), true
		}
		if out, done := s.endedAlready(ctx, d, req); done {
			return out, true
		}
	}
	if req.Kind != events.JobQuality {
		return bus.Outcome{}, false // only a quality job is run alongside (delivery 0)
	}
	if holder, held, err := s.heldBy(ctx, req.JobID); err == nil && holder != "" && held.Delivery == 0 {
		s.log.Info("job runs on another runner now; handed back", "job", req.JobID, "runner", holder, "delivery", d.NumDelivered)
		return bus.Retry(s.opts.AckWait, fmt.Errorf("job %s runs on %s now", req.JobID, holder)), true
	}
	return bus.Outcome{}, false
}

// endedAlready is notHere's check of the job's stored outcome.
func (s *Service) endedAlready(ctx context.Context, d *bus.Delivery, req events.RunnerJobRequestedData) (bus.Outcome, bool) {
	switch t, why, err := s.ended(ctx, d.Event, d.Stored, req.Kind, req.JobID); {
	case err != nil:
		s.log.Warn("could not look for the job's outcome; running it", "job", req.JobID, "err", err)
	case t == events.RunnerJobFailed && why == string(reason.JobAbandoned):
		return bus.Poison(reason.JobAbandoned, fmt.Errorf("job %s was given up already (its %s is stored)", req.JobID, t)), true
	case t != "":
		s.log.Info("job ended already; not run again", "job", req.JobID, "kind", req.Kind, "outcome", string(t), "reason", why, "delivery", d.NumDelivered)
		return bus.Ack(), true
	}
	return bus.Outcome{}, false
}

// waitAlongside holds a quality job while another live runner says it
// will answer it alongside the submission's efficiency job (see notHere),
// up to Options.QualityWait; it reports whether it waited at all.
func (s *Service) waitAlongside(ctx context.Context, req events.RunnerJobRequestedData) bool {
	if req.Kind != events.JobQuality || req.SubmissionID == "" || s.opts.QualityWait <= 0 {
		return false
	}
	waited := false
	deadline := time.Now().Add(s.opts.QualityWait)
	for {
		holder, _, err := s.liveJob(ctx, func(j *events.PodJob) bool { return j.SubmissionID == req.SubmissionID && j.QualityAlongside })
		if err != nil || holder == "" || time.Now().After(deadline) {
			return waited
		}
		if !waited {
			s.log.Info("the submission's efficiency job runs on another runner, which answers this quality job on the candidate's engine; waiting",
				"job", req.JobID, "runner", holder, "at_most", s.opts.QualityWait)
		}
		waited = true
		select {
		case <-ctx.Done():
			return true
		case <-time.After(alongsidePoll):
		}
	}
}

// alongsidePoll is how often a held quality job asks the pods registry.
const alongsidePoll = 250 * time.Millisecond

// refusalTries is how many deliveries a job refused by its runner (see
// job.Refusal) gets before it fails with the refusal's reason.
const refusalTries = 3

// flushRows waits until the job's rows are written: up to
// Options.RowsWait, or a few seconds for a runner that is stopping.
func (s *Service) flushRows(ctx context.Context, w *rowWriter, job string) {
	wait := s.opts.RowsWait
	if ctx.Err() != nil {
		wait = 5 * time.Second
	}
	ok, dropped, failed := w.flush(wait)
	if !ok || dropped > 0 || failed > 0 {
		s.log.Warn("job rows incomplete", "job", job, "all_written", ok, "batches_dropped", dropped, "batches_failed", failed)
	}
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
