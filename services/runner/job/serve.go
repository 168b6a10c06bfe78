// Package job runs the runner's jobs on one GPU: it starts an engine from
// its command template, samples the GPU while the engine serves, drives the
// load generator through the workloads, reads the engine's memory and
// start-up reports, and always stops the engine. It knows nothing of NATS:
// the runner service feeds it jobs and turns its results into events and
// rows.
package job

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lowbarena/lowbarena/domain/formula"
	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/services/runner/engine"
	"github.com/lowbarena/lowbarena/services/runner/loadgen"
	"github.com/lowbarena/lowbarena/services/runner/telemetry"
)

// Runner runs engines on one GPU, one at a time.
type Runner struct {
	// NVML is the GPU's telemetry; nil means there is no GPU and each
	// engine is watched through a simulated device backed by its own
	// memory report (and every figure says so).
	NVML *telemetry.Source
	// SampleInterval is the telemetry period; default 100 ms (10 Hz).
	SampleInterval time.Duration
	// HealthTimeout bounds an engine's start; default 10 min.
	HealthTimeout time.Duration
	// IdleTimeout bounds the wait for each streamed byte; default 30 s.
	IdleTimeout time.Duration
	// StopGrace is how long an engine has to exit after SIGTERM.
	StopGrace time.Duration
	// Samples receives telemetry batches (gpu_samples rows); may be nil.
	Samples func(ctx context.Context, run string, batch []telemetry.Sample) error
	// Requests receives each finished workload's requests (requests rows);
	// may be nil.
	Requests func(ctx context.Context, run string, res loadgen.Result) error
	// Progress is told of each phase; may be nil.
	Progress func(phase string, done, total int)
	// Env is added to each engine's environment (the runner's
	// CUDA_VISIBLE_DEVICES: the one GPU it drives).
	Env []string
	// EnvAllow adds names ("NAME") and prefixes ("PREFIX_*") of the
	// runner's environment an engine may inherit, to
	// engine.DefaultEnvAllow; secrets are never passed (engine.EnvDenied).
	EnvAllow []string
	// BaselineWait bounds the wait, before each engine, for the device to
	// return to its idle baseline (the last engine's memory takes a
	// moment to go); default 60 s.
	BaselineWait time.Duration
	// Log is the runner's logger.
	Log *slog.Logger
	// Sandbox says which engines run as untrusted code inside Box:
	// SandboxAuto (the default) the participants' patched engines,
	// SandboxOn every engine, SandboxOff none (a patched engine then
	// runs as a plain process, with a warning: for development only).
	Sandbox string
	// Box is the engine sandbox's template: bubblewrap, the extra
	// read-only paths of the image, the GPU's device nodes
	// (engine.GPUDevices); each run adds its checkpoint, its engine and
	// its run folder.
	Box engine.Box
	// RunDir holds the sandboxed engines' run folders (WORK/runs);
	// default the system's temporary folder.
	RunDir string
	// Patched is the participant's patched engine this job's candidate
	// runs (enginebuild.Built), set per job by the runner service; the
	// zero value runs the campaign's own engine. The BF16 reference
	// never runs it: its measurement is the campaign's, shared by every
	// candidate of the pod.
	Patched Patched
	// CacheDir, when set, holds the engines' compile and kernel caches
	// across starts, a folder per engine (see engineCache); "" leaves
	// them where the engine's environment puts them.
	CacheDir string
	// AfterCandidate, when set, is called by an efficiency job right after
	// the candidate's measured run, its engine kept (see Keep), before the
	// job's next engine: the runner service answers the submission's
	// quality job there, on that engine. Its time is not the efficiency
	// job's: it is left out of the job's held time.
	AfterCandidate func(ctx context.Context)
	// Keep, when set, keeps an unconstrained engine running after its
	// run for the next run with the same settings (see Keeper); shared
	// by the copies of a Runner made per job. nil keeps none.
	Keep *Keeper
}

// Patched is a participant's patched engine, built for a job
// (enginebuild.Built): Path fills the command template's {{.Engine}},
// Dir is bound read-only into the sandbox, PythonPath goes first on a
// Python engine's PYTHONPATH. A Launch that carries one is untrusted and
// runs sandboxed (see Launch.EngineDir).
type Patched struct {
	Path, Dir, PythonPath string
}

// Candidate returns l running the job's patched engine, when it has one
// (l unchanged for a job without one).
func (r *Runner) Candidate(l Launch) Launch {
	if r.Patched.Dir == "" {
		return l
	}
	l.EnginePath, l.EngineDir, l.PythonPath = r.Patched.Path, r.Patched.Dir, r.Patched.PythonPath
	return l
}

// Sandbox modes (Runner.Sandbox, the runner's --engine-sandbox).
const (
	SandboxAuto = "auto"
	SandboxOn   = "on"
	SandboxOff  = "off"
)

// Launch is one engine start.
type Launch struct {
	// Run names this engine run ("reference", "candidate",
	// "serve@1.02") in rows and logs.
	Run string
	// Command is the engine's command template.
	Command string
	// Checkpoint is the local folder of the checkpoint.
	Checkpoint   string
	KVCacheDType string
	MaxNumSeqs   int
	// GPUMemoryGiB is the memory the engine is told it may use (0: the
	// whole GPU).
	GPUMemoryGiB float64
	// CapGiB is the hard cap the runner enforces from NVML: an engine
	// whose memory by the device's count goes above it is stopped, from
	// its start on (0: no cap).
	CapGiB float64
	// MaxModelLen, KVCacheBytes and MemFractionStatic fill the template's
	// placeholders of the same names (see engine.Params).
	MaxModelLen       int
	KVCacheBytes      int64
	MemFractionStatic float64
	// Engine is the participant's patched engine (enginebuild.Built):
	// EnginePath fills the template's {{.Engine}}, EngineDir is bound
	// read-only into the sandbox, PythonPath goes first on the engine's
	// PYTHONPATH (a Python overlay). A Launch with EngineDir set is
	// untrusted and runs sandboxed unless the runner's mode is off.
	EnginePath, EngineDir, PythonPath string
	// Keep offers the engine to the runner's Keeper after the run (see
	// Keeper): set for the runs whose engine a later run may share (a
	// quality job's, an efficiency job's candidate and reference runs),
	// never for an SLA job's (a round compares its entries each on a
	// fresh start) or a budget replay's.
	Keep bool
	// Audit, when set, gathers the audits' evidence on this run: the
	// probe set first, the items mixed into the workloads (see Mix), the
	// tokens counted, and the cache-defeating run last.
	Audit *AuditPlan
}

// Served is what one engine run measured; WorkloadResult one workload of
// it.
type (
	Served         = events.EngineRun
	WorkloadResult = events.WorkloadRun
)

// freePort asks the kernel for a free loopback port.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("job: find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// Serve starts the engine, runs the workloads on it in order and stops it.
// An engine failure (it did not start, died, went over its cap) is an
// *engine.Failure; a bad stream is a *loadgen.Error; ctx ending is
// ctx.Err(). The engine is stopped on every path.
func (r *Runner) Serve(ctx context.Context, l Launch, workloads []loadgen.Workload) (Served, error) {
	return r.session(ctx, l, len(workloads), func(ss *session, out *Served) error {
		ctx, jctx, e, base, hc, sampler := ss.ctx, ss.jctx, ss.e, ss.base, ss.hc, ss.sampler
		pr := &probe{url: base + memoryPath, hc: hc}
		mp := &metricsProbe{hc: hc}
		if ss.family.MetricsPath != "" {
			mp.url = base + ss.family.MetricsPath
		}
		client := &loadgen.Client{BaseURL: base, Model: ss.model, IdleTimeout: r.IdleTimeout, HTTP: &http.Client{Transport: ss.tr}}
		out.Workloads = make(map[string]WorkloadResult, len(workloads))
		results := make(map[string]loadgen.Result, len(workloads))
		var audit *auditRun
		if l.Audit != nil && len(workloads) > 0 {
			audit = newAuditRun(l.Audit, l.Checkpoint, ss.model)
			r.progress("probes "+l.Run, 0, len(workloads))
			if err := audit.probes(jctx, client, workloads[0].MaxTokens); err != nil {
				return r.why(ctx, jctx, e, err)
			}
		}
		for i, w := range workloads {
			r.progress(w.Name+" "+l.Run, i, len(workloads))
			pr.reset()
			mp.reset()
			sampler.ResetPeak()
			pctx, stopProbe := context.WithCancel(jctx)
			var pwg sync.WaitGroup
			pwg.Go(func() { pr.run(pctx, r.interval()) })
			pwg.Go(func() { mp.run(pctx, r.interval()) })
			served := time.Now()
			res, err := client.Run(jctx, w)
			out.ServingSeconds += time.Since(served).Seconds()
			stopProbe()
			pwg.Wait()
			if err != nil {
				return r.why(ctx, jctx, e, err)
			}
			if r.Requests != nil {
				if err := r.Requests(ctx, l.Run, res); err != nil && r.Log != nil {
					r.Log.Warn("request rows not written", "run", l.Run, "workload", w.Name, "err", err)
				}
			}
			if audit != nil {
				audit.workload(w, res)
				results[w.Name] = res
			}
			wr := WorkloadResult{Rate: res.Rate, Running: res.Held, Full: w.Concurrency,
				TTFTP50: res.TTFTP50, TTFTP99: res.TTFTP99, TPOTP50: res.TPOTP50, TPOTP99: res.TPOTP99,
				ITLP50: res.ITLP50, ITLP90: res.ITLP90, ITLP99: res.ITLP99, Tokens: res.OutputTokens}
			devicePeak := formula.Round(float64(sampler.Peak())/formula.GiB, 3)
			out.DevicePeakGiB = max(out.DevicePeakGiB, devicePeak)
			wr.ContextTokens = contextTokens(res, w)
			// The engine's own report where it serves one; else its
			// metrics and the device's count of its memory.
			pk, running, ok := pr.result(out.Startup.KVCacheGiB)
			if !ok {
				pk, running, ok = mp.peakWithoutReport(out.Startup, sampler.Peak())
			}
			if ok {
				wr.Peak = pk
				if running > 0 {
					wr.Running = min(running, w.Concurrency)
				}
			}
			wr.Peak.DevicePeakGiB = devicePeak
			for _, p := range w.Prompts {
				if p.Item != "" {
					wr.AuditItems++
				}
			}
			out.Workloads[w.Name] = wr
		}
		if audit != nil {
			r.progress("cache_audit "+l.Run, len(workloads), len(workloads))
			if err := audit.cache(jctx, client, workloads[0]); err != nil {
				return r.why(ctx, jctx, e, err)
			}
			out.Audit = audit.evidence()
			out.Audit.Device = deviceRun(out, workloads, results)
		}
		out.Simulated = out.Simulated || pr.simulated
		return nil
	})
}

// session starts the engine of l, reads its start-up, watches it with
// telemetry (and its hard cap) from its start, runs body on it and stops
// it on every path. steps is the count of body's phases, for progress.
func (r *Runner) session(ctx context.Context, l Launch, steps int, body func(ss *session, out *Served) error) (out Served, err error) {
	t0 := time.Now()
	params := r.params(l)
	argv, err := engine.Render(l.Command, params)
	if err != nil {
		return out, err
	}
	own := ownCommand(l, params, argv)
	family := engine.Detect(own)
	if err := r.preflight(l, own, family); err != nil {
		return out, err
	}
	// The engine a run with these settings kept, if any (see Keeper);
	// any other kept engine is stopped here, before the wait for the
	// device's baseline.
	key := launchKey(l, params)
	want := key
	if !l.Keep {
		want = "" // served by no kept engine: any is stopped
	}
	k := r.Keep.take(ctx, want)
	// The job's context ends when the engine dies or goes over its cap,
	// so a start-up or a workload in flight stops at once.
	jctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	tailOf := func() string { return "" }
	sampler := &telemetry.Sampler{Interval: r.SampleInterval,
		Sink: func(ctx context.Context, b []telemetry.Sample) error {
			if r.Samples == nil {
				return nil
			}
			return r.Samples(ctx, l.Run, b)
		}}
	if l.CapGiB > 0 {
		sampler.CapBytes = uint64(l.CapGiB * formula.GiB)
		sampler.OverCap = func(s telemetry.Sample) {
			cancel(&engine.Failure{Reason: reason.EngineOverMemoryCap, LogTail: tailOf(), Message: fmt.Sprintf(
				"engine used %.3f GiB of GPU memory (the device's count over its %.3f GiB baseline), above its hard cap of %.3f GiB, and was stopped; container log tail: %s",
				float64(s.EngineMem)/formula.GiB, float64(sampler.Baseline)/formula.GiB, l.CapGiB, flat(tailOf(), 600))})
		}
	}
	sg := &sampling{Sampler: sampler, run: l.Run, log: r.Log}
	defer sg.stop()
	if k == nil {
		r.progress("starting_engine "+l.Run, 0, steps)
		if k, err = r.start(ctx, jctx, l, key, params, family, sg, &out); err != nil {
			return out, err
		}
	} else {
		// Served by the engine a run with the same settings kept: no
		// start paid, the start's figures reported as they were.
		r.progress("engine_kept "+l.Run, 0, steps)
		sampler.Source, sampler.Baseline = k.src, k.baseline
		sg.start()
		st := events.EngineStart{Run: l.Run, KeptFrom: k.run, LoadLogged: k.started.Start.LoadLogged, GraphLogged: k.started.Start.GraphLogged}
		out.Start = &st
		out.Startup, out.StartupPeakGiB, out.BaselineGiB, out.DeviceTotalGiB = k.started.Startup, k.started.StartupPeakGiB, k.started.BaselineGiB, k.started.DeviceTotalGiB
		out.GPU, out.Simulated = k.started.GPU, k.started.Simulated
		if r.Log != nil {
			r.Log.Info("engine kept from an earlier run serves this one", "run", l.Run, "kept_from", k.run)
		}
	}
	e := k.e
	tailOf = e.Tail
	// The engine is kept for a later run with the same settings when this
	// one served its body whole, the engine alive and within its cap;
	// stopped on every other path.
	defer func() {
		sg.stop()
		healthy := err == nil && ctx.Err() == nil && context.Cause(jctx) == nil
		select {
		case <-e.Exited():
			healthy = false
		default:
		}
		if healthy && l.Keep && keepable(l) && r.Keep != nil {
			r.Keep.put(k)
			return
		}
		k.release()
	}()
	defer func() {
		out.Seconds = time.Since(t0).Seconds()
		out.Samples = sampler.Count()
	}()
	go func() {
		select {
		case <-e.Exited():
			cancel(e.Failure())
		case <-jctx.Done():
		}
	}()
	ss := &session{ctx: ctx, jctx: jctx, e: e, base: k.base(), hc: &http.Client{Timeout: 5 * time.Second, Transport: k.tr},
		tr: k.tr, sampler: sampler, family: k.family, model: k.model}
	if err := body(ss, &out); err != nil {
		return out, err
	}
	r.progress("done "+l.Run, steps, steps)
	return out, nil
}

// start starts l's engine (its settings key) with telemetry (and its
// hard cap) from its launch: the device's baseline first, then the engine
// on a free port (again on another, up to three times, when the port was
// taken between), then its start-up report. It returns the running
// engine, whose release the caller owns; on an error nothing of it is
// left running, its sampling stopped. out gets the start's figures.
func (r *Runner) start(ctx, jctx context.Context, l Launch, key string, params engine.Params, family engine.Family,
	sg *sampling, out *Served) (*kept, error) {
	sampler := sg.Sampler
	t0 := time.Now()
	// The device's memory before the engine: the last engine's must
	// have gone (a bounded wait), and what is left is this one's
	// baseline.
	var (
		baseline uint64
		err      error
	)
	if r.NVML != nil {
		baseline, err = r.NVML.WaitIdle(ctx, r.baselineWait(), 200*time.Millisecond, baselineSlack)
		switch {
		case errors.Is(err, telemetry.ErrNotAtBaseline):
			return nil, &Refusal{Reason: reason.DeviceNotAtBaseline, Message: fmt.Sprintf(
				"the GPU did not return to its idle baseline before the %s engine could start (%v); nothing was measured", l.Run, err)}
		case err != nil:
			return nil, fmt.Errorf("job: the device's baseline: %w", err)
		}
	}
	sampler.Baseline = baseline
	box, env, err := r.box(l)
	if err != nil {
		return nil, err
	}
	tr := box.Transport()
	var (
		e    *engine.Engine
		port int
		src  *telemetry.Source
	)
	// A port taken between freePort and the engine's bind is the
	// runner's race, not the engine's failure: start again on another
	// port, up to three times. The start is timed from the first launch
	// to health (or to the engine's failure to start: that start held
	// the GPU as well).
	launched := time.Now()
	for attempt := 1; ; attempt++ {
		fail := func(err error) (*kept, error) {
			sg.stop()
			releaser(nil, src, r.NVML, box)()
			return nil, err
		}
		if port, err = freePort(); err != nil {
			return fail(err)
		}
		params.Port = port
		argv, err := engine.Render(l.Command, params)
		if err != nil {
			return fail(err)
		}
		src = r.NVML
		if src == nil {
			// No GPU: simengine's simulated device (preflight refused
			// every real engine).
			if src, err = telemetry.SimulatedVia("http://"+net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), tr); err != nil {
				return fail(fmt.Errorf("job: simulated telemetry: %w", err))
			}
		}
		sampler.Source = src
		sg.start()
		e, err = engine.Start(jctx, engine.Options{Command: argv, Port: port, HealthPath: family.HealthPath,
			HealthTimeout: r.HealthTimeout, StopGrace: r.StopGrace, TailLines: 200, Env: env, EnvAllow: r.EnvAllow, Sandbox: box})
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return fail(ctx.Err())
		}
		if cause := context.Cause(jctx); cause != nil && !errors.Is(cause, context.Canceled) {
			return fail(cause) // over its cap while it started
		}
		if f := engine.AsFailure(err); f != nil && f.Reason == reason.EnginePortInUse && attempt < 3 {
			if r.Log != nil {
				r.Log.Warn("engine port taken; starting it on another", "run", l.Run, "port", port, "attempt", attempt)
			}
			sg.stop()
			releaser(nil, src, r.NVML, nil)()
			src = nil
			continue
		}
		out.Start = failedStart(l.Run, launched, err)
		return fail(err)
	}
	st := StartOf(l.Run, time.Since(launched).Seconds(), startupLog(e))
	out.Start = &st
	k := &kept{key: key, run: l.Run, e: e, port: port, src: src, tr: tr, family: family, baseline: baseline,
		release: releaser(e, src, r.NVML, box)}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: tr}
	out.StartupPeakGiB = formula.Round(float64(sampler.ResetPeak())/formula.GiB, 3)
	out.BaselineGiB = formula.Round(float64(baseline)/formula.GiB, 3)
	out.DeviceTotalGiB = formula.Round(float64(src.TotalBytes())/formula.GiB, 3)
	// Start-up: the engine's own report where it serves one, else its
	// whole start-up log.
	if out.Startup, err = r.startup(ctx, hc, k.base(), startupLog(e)); err != nil {
		sg.stop()
		k.release()
		return nil, err
	}
	out.Startup.EngineInitSeconds = formula.Round(time.Since(t0).Seconds(), 2)
	out.GPU, out.Simulated = src.GPU(), src.Simulated()
	k.model = servedModel(ctx, hc, k.base(), l.Checkpoint)
	k.started = Served{Startup: out.Startup, StartupPeakGiB: out.StartupPeakGiB, BaselineGiB: out.BaselineGiB,
		DeviceTotalGiB: out.DeviceTotalGiB, GPU: out.GPU, Simulated: out.Simulated, Start: out.Start}
	return k, nil
}

// params are l's settings as its command template reads them (its port
// drawn at each start).
func (r *Runner) params(l Launch) engine.Params {
	return engine.Params{Checkpoint: l.Checkpoint, KVCacheDType: l.KVCacheDType, MaxNumSeqs: l.MaxNumSeqs,
		GPUMemoryGiB: l.GPUMemoryGiB, GPUTotalGiB: r.gpuTotalGiB(), MaxModelLen: l.MaxModelLen,
		KVCacheBytes: l.KVCacheBytes, MemFractionStatic: l.MemFractionStatic, Engine: l.EnginePath}
}

// sampling runs a session's telemetry sampler in the background: started
// at each engine launch (or on a kept engine), stopped at the session's
// end or a failed launch, before the sampler's source is closed.
type sampling struct {
	*telemetry.Sampler
	run  string
	log  *slog.Logger
	wg   sync.WaitGroup
	halt context.CancelFunc
}

// start runs the sampler until stop.
func (sg *sampling) start() {
	ctx, halt := context.WithCancel(context.Background())
	sg.halt = halt
	sg.wg.Go(func() {
		if err := sg.Run(ctx); err != nil && sg.log != nil {
			sg.log.Warn("telemetry rows not written", "run", sg.run, "err", err)
		}
	})
}

// stop ends the sampler and waits for it; a no-op when it is not running.
func (sg *sampling) stop() {
	if sg.halt == nil {
		return
	}
	sg.halt()
	sg.halt = nil
	sg.wg.Wait()
}

// failedStart is the start of an engine that failed to start (err, an
// *engine.Failure, whose log tail is what it logged), launched at
// launched: it held the GPU until it failed. nil for any other error.
func failedStart(run string, launched time.Time, err error) *events.EngineStart {
	f := engine.AsFailure(err)
	if f == nil {
		return nil
	}
	st := StartOf(run, time.Since(launched).Seconds(), f.LogTail)
	return &st
}

// ownCommand is the command l's campaign's own engine runs: argv, or,
// for a patched engine, the template rendered with {{.Engine}} empty. A
// patched engine is of its campaign's engine's family whatever its built
// program is called, so the family (its health and metrics endpoints,
// whether it is a real engine) is read from this command.
func ownCommand(l Launch, params engine.Params, argv []string) []string {
	if l.EnginePath == "" {
		return argv
	}
	params.Engine = ""
	if own, err := engine.Render(l.Command, params); err == nil {
		return own
	}
	return argv
}

// box is the sandbox l's engine runs in (nil: none) and the runner's
// additions to its environment. A patched engine runs sandboxed unless
// the mode is off; every engine when it is on. The run folder, made
// here, is the caller's to remove.
func (r *Runner) box(l Launch) (*engine.Box, []string, error) {
	env := append([]string(nil), r.Env...)
	if l.PythonPath != "" {
		pp := l.PythonPath
		if old := os.Getenv("PYTHONPATH"); old != "" {
			pp += ":" + old
		}
		env = append(env, "PYTHONPATH="+pp)
	}
	cache, cacheEnv, err := r.engineCache(l)
	if err != nil {
		return nil, nil, err
	}
	env = append(env, cacheEnv...)
	untrusted := l.EngineDir != ""
	switch {
	case r.Sandbox == SandboxOff && untrusted:
		if r.Log != nil {
			r.Log.Warn("a participant's patched engine runs unsandboxed (--engine-sandbox off): for development only", "run", l.Run)
		}
		return nil, env, nil
	case r.Sandbox == SandboxOff, r.Sandbox != SandboxOn && !untrusted:
		return nil, env, nil
	}
	box := r.Box
	if err := box.Check(context.Background()); err != nil {
		return nil, nil, &engine.Failure{Reason: reason.EngineSandboxUnavailable, Message: fmt.Sprintf(
			"the %s engine must run sandboxed (--engine-sandbox %s) and this runner cannot sandbox it: %v", l.Run, r.sandboxMode(), err)}
	}
	if r.RunDir != "" {
		if err := os.MkdirAll(r.RunDir, 0o755); err != nil {
			return nil, nil, fmt.Errorf("job: run folder: %w", err)
		}
	}
	run, err := os.MkdirTemp(r.RunDir, "run-")
	if err != nil {
		return nil, nil, fmt.Errorf("job: run folder: %w", err)
	}
	box.ReadOnly = append(append([]string(nil), box.ReadOnly...), l.Checkpoint)
	if l.EngineDir != "" {
		box.ReadOnly = append(box.ReadOnly, l.EngineDir)
	}
	box.Writable = []string{run}
	if cache != "" {
		box.Writable = append(box.Writable, cache)
	}
	return &box, env, nil
}

// engineCache is the folder l's engine keeps its caches in across starts
// (CacheDir/<16 hex digits>, made here) and the environment that points
// the engines there, each name its project's own:
//   - XDG_CACHE_HOME: vLLM's VLLM_CACHE_ROOT, whose torch_compile_cache
//     holds its compiled graphs, defaults to XDG_CACHE_HOME/vllm
//     (vllm/envs.py, get_default_cache_root);
//   - FLASHINFER_WORKSPACE_BASE: FlashInfer's JIT kernels go to
//     <base>/.cache/flashinfer, the base $HOME by default
//     (flashinfer/jit/env.py), not XDG_CACHE_HOME;
//   - TRITON_CACHE_DIR: Triton's kernels (triton/runtime/cache.py,
//     default ~/.triton/cache);
//   - TORCHINDUCTOR_CACHE_DIR: PyTorch inductor's (torch/_inductor/runtime/
//     cache_dir_utils.py, default /tmp/torchinductor_<user>).
//
// One folder per engine program: the
// campaign's command template, and the patched engine's folder when it
// runs one, so every start of one engine (its budget replays, the next
// job) finds what the last compiled, and a participant's patched engine,
// untrusted, writes only into its own (bound writable into its sandbox),
// never into the campaign engine's. Empty without CacheDir.
func (r *Runner) engineCache(l Launch) (string, []string, error) {
	if r.CacheDir == "" {
		return "", nil, nil
	}
	sum := sha256.Sum256([]byte(l.Command + "\x00" + l.EngineDir + "\x00" + l.PythonPath))
	dir := filepath.Join(r.CacheDir, hex.EncodeToString(sum[:8]))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, fmt.Errorf("job: engine cache folder: %w", err)
	}
	// Its time is its last start's; folders no engine started from for
	// CacheMaxAge go (each patched engine has one: they would pile up).
	now := time.Now()
	_ = os.Chtimes(dir, now, now)
	pruneCaches(r.CacheDir, now.Add(-CacheMaxAge), r.Log)
	return dir, []string{"XDG_CACHE_HOME=" + dir, "FLASHINFER_WORKSPACE_BASE=" + dir, "TRITON_CACHE_DIR=" + filepath.Join(dir, "triton"),
		"TORCHINDUCTOR_CACHE_DIR=" + filepath.Join(dir, "torchinductor")}, nil
}

// CacheMaxAge is how long an engine's cache folder is kept after the last
// start that used it.
const CacheMaxAge = 7 * 24 * time.Hour

// pruneCaches removes the cache folders of dir last used before cutoff.
func pruneCaches(dir string, cutoff time.Time, log *slog.Logger) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, en := range entries {
		fi, err := en.Info()
		if err != nil || !en.IsDir() || !fi.ModTime().Before(cutoff) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, en.Name())); err != nil && log != nil {
			log.Warn("engine cache folder not removed", "folder", en.Name(), "err", err)
		}
	}
}

func (r *Runner) sandboxMode() string {
	if r.Sandbox == "" {
		return SandboxAuto
	}
	return r.Sandbox
}

// baselineSlack is how far above its idle baseline a device still counts
// as idle: the CUDA context of a process that is going, the driver's
// bookkeeping.
const baselineSlack = 256 << 20

func (r *Runner) baselineWait() time.Duration {
	if r.BaselineWait > 0 {
		return r.BaselineWait
	}
	return time.Minute
}

// session is a running engine, for a job's body.
type session struct {
	// ctx is the job's; jctx ends also when the engine dies or goes over
	// its cap.
	ctx, jctx   context.Context
	e           *engine.Engine
	base, model string
	hc          *http.Client
	// tr reaches the engine (through its sandbox's socket when it runs
	// in one): every client of the engine is built on it.
	tr      *http.Transport
	sampler *telemetry.Sampler
	// family is the engine's (engine.Detect): its health and metrics
	// endpoints.
	family engine.Family
}

// startupLog is what the runner reads an engine's start-up report from:
// its whole log until it was healthy (vLLM's config line, with the KV
// dtype the record checks, is among its first; dozens of route and
// compile lines follow it).
func startupLog(e *engine.Engine) string { return e.StartupLog() }

// why turns a workload's error into the job's: the engine's own failure
// when it died or went over its cap (that is the cause, the broken stream
// the symptom), ctx's error when the runner is stopping, else the load
// generator's classified error.
func (r *Runner) why(ctx, jctx context.Context, e *engine.Engine, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if cause := context.Cause(jctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	select {
	case <-e.Exited():
		return e.Failure()
	case <-time.After(200 * time.Millisecond):
	}
	return err
}

// SimulatedGPUTotalGiB is the memory of the GPU simulated without NVML
// (an H200's 141 GiB, simengine's default), what a budget's
// GPUMemoryFraction is of there.
const SimulatedGPUTotalGiB = 141

// gpuTotalGiB is the GPU's memory: NVML's, or the simulated H200's.
func (r *Runner) gpuTotalGiB() float64 {
	if r.NVML != nil {
		if b := r.NVML.TotalBytes(); b > 0 {
			return float64(b) / formula.GiB
		}
	}
	return SimulatedGPUTotalGiB
}

func (r *Runner) interval() time.Duration {
	if r.SampleInterval > 0 {
		return r.SampleInterval
	}
	return 100 * time.Millisecond
}

func (r *Runner) progress(phase string, done, total int) {
	if r.Progress != nil {
		r.Progress(phase, done, total)
	}
}

// startup reads the engine's start-up report: its endpoint where it
// serves one, else the lines of its log.
func (r *Runner) startup(ctx context.Context, hc *http.Client, base, log string) (record.Startup, error) {
	var s record.Startup
	err := getJSON(ctx, hc, base+startupPath, &s)
	if err == nil {
		return s, nil
	}
	if !errors.Is(err, errNoEndpoint) && r.Log != nil {
		r.Log.Warn("engine start-up report unreadable; reading its log", "err", err)
	}
	s, ok := ParseStartup(log)
	if !ok {
		return s, &engine.Failure{Reason: reason.EngineNoStartupReport, LogTail: log,
			Message: "the engine became healthy but reported neither its KV cache size nor its token count (no start-up endpoint, no vLLM or SGLang start-up lines in its log)"}
	}
	return s, nil
}

// servedModel is the id the engine serves the checkpoint under (the first
// of /v1/models), or the checkpoint path, as vLLM names it by default.
func servedModel(ctx context.Context, hc *http.Client, base, checkpoint string) string {
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := getJSON(ctx, hc, base+"/v1/models", &list); err != nil || len(list.Data) == 0 || list.Data[0].ID == "" {
		return checkpoint
	}
	return list.Data[0].ID
}

// flat joins a log on one line and keeps its last n bytes.
func flat(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = "..." + s[len(s)-n:]
	}
	return s
}
