package runner

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/lowbarena/lowbarena/adapters/hub"
	"github.com/lowbarena/lowbarena/platform/app"
	"github.com/lowbarena/lowbarena/services/runner/engine"
	"github.com/lowbarena/lowbarena/services/runner/job"
	"github.com/lowbarena/lowbarena/services/runner/telemetry"
)

// EnvCacheBytes names the cache cap's environment variable.
const EnvCacheBytes = "LOWBARENA_RUNNER_CACHE_BYTES"

// EnvEngineHelper names --engine-helper's environment variable.
const EnvEngineHelper = "LOWBARENA_ENGINE_HELPER"

// envInt64 is the integer in the environment variable key, or def.
func envInt64(key string, def int64) int64 {
	if n, err := strconv.ParseInt(os.Getenv(key), 10, 64); err == nil && n > 0 {
		return n
	}
	return def
}

// envInt is the non-negative integer in the environment variable key,
// or def.
func envInt(key string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(key)); err == nil && n >= 0 {
		return n
	}
	return def
}

// splitList is a comma-separated list's non-empty items.
func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// Component is the runner as one component, with one set of defaults
// for its own binary and `arena up` (which sets --work, --pod, --name
// and --ack-wait, and puts its own folder first on PATH so that engines
// named by a bare command are found beside it). The runner serves no
// pipeline stage itself; it keeps gpu_samples, requests and
// quality_items rows when the runtime has a store, and none otherwise.
func Component() app.Component {
	var (
		pod, name, work                            *string
		gpu                                        *int
		ackWait, health, idle, interval, stopGrace *time.Duration
		keepEngine                                 *time.Duration
		engineCache                                *string
		qualityWait                                *time.Duration
		cacheBytes                                 *int64
		engineEnv, engineSandbox, sandboxBind      *string
		engineHelper                               *string
		hubOptions                                 func(*slog.Logger) (hub.Options, error)
	)
	return app.Component{
		Name:  Name,
		Store: true,
		Flags: func(fs *flag.FlagSet) {
			pod = fs.String("pod", app.EnvOr("LOWBARENA_POD", "pod-0"), "name of this machine; BF16 references are measured once per pod (env LOWBARENA_POD)")
			gpu = fs.Int("gpu", envInt("LOWBARENA_GPU", 0), "NVML index of the GPU this runner drives on its pod: one runner per GPU, each with its own index; its engines see only that GPU (env LOWBARENA_GPU)")
			name = fs.String("name", "", "name of this runner in its events and the pods registry, unique among its pod's runners (default POD/HOST/PID)")
			work = fs.String("work", app.EnvOr("LOWBARENA_RUNNER_WORK", filepath.Join(os.TempDir(), "lowbarena-runner")), "folder of fetched checkpoints (env LOWBARENA_RUNNER_WORK)")
			ackWait = fs.Duration("ack-wait", 30*time.Second, "job ack deadline: a runner that dies is noticed after about this long")
			health = fs.Duration("health-timeout", 10*time.Minute, "longest an engine may take to become healthy")
			idle = fs.Duration("idle-timeout", 60*time.Second, "longest a streaming engine may stay silent")
			interval = fs.Duration("sample-interval", 100*time.Millisecond, "GPU telemetry period")
			stopGrace = fs.Duration("stop-grace", 10*time.Second, "how long an engine has to exit after SIGTERM before it is killed")
			cacheBytes = fs.Int64("cache-bytes", envInt64(EnvCacheBytes, DefaultCacheBytes),
				"size cap of the pod's cache of checkpoints by reference, WORK/cache (shared by every runner with the same --work; env "+EnvCacheBytes+")")
			engineEnv = fs.String("engine-env", os.Getenv("LOWBARENA_ENGINE_ENV"), "comma-separated names (NAME) and prefixes (PREFIX_*) of the runner's environment its engines may inherit beyond the default list "+
				"(PATH, HOME, CUDA_*, NVIDIA_*, NCCL_*, HF_HOME, VLLM_*, SGLANG_*, ...); names of secrets (tokens, passwords, keys, LOWBARENA_*, NATS_*) are never passed (env LOWBARENA_ENGINE_ENV)")
			engineSandbox = fs.String("engine-sandbox", app.EnvOr("LOWBARENA_ENGINE_SANDBOX", job.SandboxAuto),
				"which engines run as untrusted code under bubblewrap (no network but the runner's socket, only their own files and GPU): auto, a participant's patched engine; on, every engine; off, none (development only); "+
					"a job whose engine must be sandboxed on a pod that cannot is refused with engine_sandbox_unavailable (env LOWBARENA_ENGINE_SANDBOX)")
			sandboxBind = fs.String("engine-sandbox-bind", os.Getenv("LOWBARENA_ENGINE_SANDBOX_BIND"),
				"comma-separated host paths a sandboxed engine and its build see read-only, beyond /usr, /lib and a few files of /etc (an image's /opt/venv); never the runner's --work (env LOWBARENA_ENGINE_SANDBOX_BIND)")
			engineHelper = fs.String("engine-helper", os.Getenv(EnvEngineHelper),
				"the executable a sandboxed engine's sandbox starts first (it must call engine.RunHelper first in main): the runner's own by default; "+
					"a binary that links chDB (arena-up) cannot be it and names the light arena binary instead (env "+EnvEngineHelper+")")
			keepEngine = fs.Duration("keep-engine", 2*time.Minute,
				"how long an engine is kept running after a run without a memory budget, for the next run on this GPU with the same settings (a submission's quality and efficiency jobs; never an SLA job's): "+
					"that run pays no start; 0 stops every engine after its run")
			engineCache = fs.String("engine-cache", os.Getenv("LOWBARENA_ENGINE_CACHE"),
				"folder of the engines' compile and kernel caches (torch.compile, Triton, inductor, FlashInfer), kept across starts, a folder per engine program (a patched engine's its own, bound writable into its sandbox); "+
					"default WORK/engine-cache under --work; none leaves the caches where the engine's environment puts them (env LOWBARENA_ENGINE_CACHE)")
			qualityWait = fs.Duration("quality-wait", 5*time.Minute,
				"longest a runner holds a quality job while another runner runs the submission's efficiency job and says it will answer it on the candidate's engine (the wait ends when it no longer says so); 0 never waits")
			hubOptions = app.HubFlags(fs)
		},
		Build: func(ctx context.Context, rt *app.Runtime) ([]app.Actor, error) {
			jr := job.Runner{SampleInterval: *interval, HealthTimeout: *health, IdleTimeout: *idle, StopGrace: *stopGrace, EnvAllow: splitList(*engineEnv),
				Sandbox: *engineSandbox, Box: engine.Box{Extra: splitList(*sandboxBind), Helper: *engineHelper}, RunDir: filepath.Join(*work, "runs"),
				Keep: job.NewKeeper(*keepEngine), CacheDir: engineCacheDir(*engineCache, *work)}
			switch jr.Sandbox {
			case job.SandboxAuto, job.SandboxOn, job.SandboxOff:
			default:
				return nil, fmt.Errorf("runner: --engine-sandbox %q: want auto, on or off", jr.Sandbox)
			}

			src, err := telemetry.Open(*gpu)
			switch {
			case errors.Is(err, telemetry.ErrNoNVML):
				rt.Log.Warn("no NVML: simengine is watched through its simulated GPU and every figure says simulated; jobs of a real engine (vLLM, SGLang) are refused with no_gpu_telemetry", "err", err, "gpu_index", *gpu)
			case err != nil:
				return nil, fmt.Errorf("runner: GPU telemetry (--gpu %d): %w", *gpu, err)
			default:
				jr.NVML = src
				if uuid := src.UUID(); uuid != "" {
					// By UUID: CUDA numbers devices fastest first, NVML
					// by PCI bus, so an index could name another GPU.
					jr.Env = []string{"CUDA_VISIBLE_DEVICES=" + uuid}
				}
				rt.Log.Info("GPU telemetry", "gpu", src.GPU(), "gpu_index", *gpu, "uuid", src.UUID())
				// A sandboxed engine sees this GPU's node alone.
				jr.Box.Devices = engine.GPUDevices(src.Minor())
			}
			if len(jr.Box.Devices) == 0 {
				rt.Log.Info("engine sandbox: no GPU device nodes to bind (no GPU, or NVML gave no minor number)")
			}
			if err := jr.Box.Check(ctx); err != nil {
				rt.Log.Warn("engine sandbox unavailable: jobs whose engine must run sandboxed are refused with engine_sandbox_unavailable", "mode", jr.Sandbox, "err", err)
			}
			ho, err := hubOptions(rt.Log)
			if err != nil {
				return nil, err
			}
			s, err := New(ctx, rt.Bus, rt.Log, Options{Pod: *pod, Runner: *name, GPU: *gpu, WorkDir: *work, AckWait: *ackWait, Job: jr, Store: rt.Store,
				Hub: ho, CacheBytes: *cacheBytes, QualityWait: orNever(*qualityWait)})
			if err != nil {
				return nil, err
			}
			return s.Actors(), nil
		},
	}
}

// engineCacheDir is the runner's --engine-cache: the folder given, none
// for none, else WORK/engine-cache.
func engineCacheDir(flag, work string) string {
	switch flag {
	case "none":
		return ""
	case "":
		return filepath.Join(work, "engine-cache")
	}
	return flag
}

// orNever is a --quality-wait as Options.QualityWait reads it: 0 (never)
// as a negative duration, since Options' zero is the default.
func orNever(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}
