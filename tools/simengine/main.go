// Command simengine is a simulated OpenAI-compatible inference engine: an
// HTTP server started like vLLM, for machines without a GPU. It reads a
// real checkpoint's headers, lays out memory on a simulated GPU, and serves
// completions at roofline speed (sleeping in real time for every step).
// Every report it gives says "simulated": true.
//
// Model: weights = TensorBytes*scale; KV per token = 2*layers*kv_heads*
// head_dim*bytes_per_element*kv_scale (kv_scale defaults to scale); other = 1.5 GiB; the KV pool is the rest
// of the cap. With --source-config (the full-size source model's shapes)
// weights are instead, for each tensor role, the full-size parameters of
// that role times the bytes per parameter the checkpoint stores the role
// in (see FullSizeWeights), and KV takes the full-size layers and heads. A step of b sequences, with the prompts admitted in it
// prefilled alongside, takes max(memory, compute) + overhead (see
// Plan.StepTime); steps are paced on a virtual clock so that timer
// overshoot does not accumulate (see Scheduler); params are the tensors' element count, with
// integer (packed 4-bit) tensors counted as two parameters per byte. Prompt
// tokens are ceil(len(text)/4) bytes (chat: message contents joined by
// newlines). load_seconds is reported as half of --startup-seconds.
//
// Plain, it writes vLLM-like start-up lines and serves vLLM's /metrics
// gauges and the arena's /v1/lowbarena/memory and startup reports.
//
// With --imitate vllm|sglang it stands for a pinned release of that engine
// (see docs/developers/imitations.md): `simengine --imitate ENGINE
// [simengine's flags] -- ENGINE ARGV...` reads the engine's own command
// line with the engine's flag table and argparse refusals, plans memory
// as the engine does from its flags, refuses to start in the engine's
// words where it would, writes its start-up lines through the start-up
// phases while the simulated device's used memory rises with them, and
// serves the engine's health endpoints and metrics at the engine's
// cadence; it serves no arena endpoint unless --arena-endpoints=true.
//
// In every mode GET /simulated/device reports the simulated GPU as NVML
// would count it for this engine.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

// run is the whole process; it returns the exit status.
func run(args []string, stderr io.Writer) int { //nolint:gocyclo // a main: its flags, then each start-up step with its exit status, read top to bottom
	logger := log.New(stderr, "", 0)
	logf := func(level, format string, a ...any) {
		logger.Printf("%s %s [simengine] %s", level, time.Now().Format("01-02 15:04:05"), fmt.Sprintf(format, a...))
	}
	fs := flag.NewFlagSet("simengine", flag.ContinueOnError)
	fs.SetOutput(stderr)
	checkpoint := fs.String("checkpoint", "", "checkpoint folder with config.json and *.safetensors (required)")
	host := fs.String("host", "127.0.0.1", "address to listen on")
	port := fs.Int("port", 0, "port to listen on (required)")
	kvDType := fs.String("kv-cache-dtype", "auto", "KV cache dtype: auto|bf16|fp16|fp8|nvfp4")
	maxSeqs := fs.Int("max-num-seqs", 256, "most sequences running at once")
	capGiB := fs.Float64("gpu-memory-gib", 0, "memory cap in GiB (default the GPU's total)")
	gpuKey := fs.String("gpu", "h200", "simulated GPU: h200|h100|b200")
	scale := fs.Float64("scale", 1, "pretend the model is this many times larger in every byte")
	kvScale := fs.Float64("kv-scale", 0, "multiply the KV bytes per token by this instead of --scale (0: same as --scale)")
	sourceCfg := fs.String("source-config", "", "the full-size source model's shapes, a config.json path or inline key=value pairs in its names "+
		"(hidden_size=4096,num_hidden_layers=36,...): weights and KV are then those of the full-size model stored as the checkpoint stores each tensor role, and --scale and --kv-scale are ignored")
	startupSec := fs.Float64("startup-seconds", 1.0, "time before /health turns 200")
	overheadMS := fs.Float64("step-overhead-ms", 0.5, "fixed time per scheduler step")
	seed := fs.Int64("seed", 0, "seed of the generated tokens")
	faultStr := fs.String("fault", "none", "none|never-healthy|crash-on-start|die-after-tokens=N|malformed-sse|zero-tokens|lie-tokens|hang-after-tokens=N, "+
		"or a bad input on the dev suite's items: error-audit-items|slow-audit-items|stop-mid-item")
	servedName := fs.String("served-model-name", "", "the id /v1/models names the model by (default the checkpoint folder's name)")
	imitate := fs.String("imitate", "", "imitate a pinned engine release, vllm|sglang, started as `simengine --imitate ENGINE [flags] -- ENGINE ARGV...` (empty: plain simengine)")
	arena := fs.Bool("arena-endpoints", true, "serve /v1/lowbarena/memory and /v1/lowbarena/startup (false: only what a real engine serves, its log and /metrics; default false with --imitate)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *imitate != "" {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for _, name := range []string{"checkpoint", "host", "port", "kv-cache-dtype", "max-num-seqs", "gpu-memory-gib", "served-model-name"} {
			if set[name] {
				logger.Printf("simengine: --%s is the engine's to set with --imitate: give it in the engine's argv after --", name)
				return 2
			}
		}
		return runImitate(imitateOptions{
			Engine: *imitate, GPU: *gpuKey, Scale: *scale, KVScale: *kvScale, SourceConfig: *sourceCfg,
			StartupSeconds: *startupSec, OverheadMS: *overheadMS, Seed: *seed, Fault: *faultStr,
			ArenaEndpoints: set["arena-endpoints"] && *arena,
		}, fs.Args(), stderr)
	}
	if *checkpoint == "" || *port == 0 {
		logf("ERROR", "--checkpoint and --port are required")
		return 2
	}
	gpu, ok := GPUs[*gpuKey]
	if !ok {
		logf("ERROR", "unknown --gpu %q", *gpuKey)
		return 2
	}
	fault, err := ParseFault(*faultStr)
	if err != nil {
		logf("ERROR", "%v", err)
		return 2
	}
	logf("INFO", "simengine: simulating %s, model=%s kv_cache_dtype=%s", gpu.Name, *checkpoint, *kvDType)
	start := time.Now()
	m, err := LoadCheckpoint(*checkpoint)
	if err != nil {
		logf("ERROR", "%v", err)
		return 1
	}
	in := PlanInput{
		GPU: gpu, CapBytes: *capGiB * GiB, Config: m.Config, Weights: m.Weights,
		KVDType: *kvDType, Scale: *scale, KVScale: *kvScale, StepOverhead: time.Duration(*overheadMS * float64(time.Millisecond)),
	}
	if *sourceCfg != "" {
		full, err := ReadSourceArch(*sourceCfg)
		if err != nil {
			logf("ERROR", "--source-config: %v", err)
			return 2
		}
		fs, err := FullSizeOf(*checkpoint, m, full)
		if err != nil {
			logf("ERROR", "%v", err)
			return 1
		}
		in.Weights, in.Scale, in.KVScale = fs.Weights, 1, 1
		in.Config = ModelConfig{Layers: full.Layers, KVHeads: full.KVHeads, Heads: full.Heads, HeadDim: full.HeadDim, Hidden: full.Hidden, MaxPos: full.MaxPos}
		var roles []string
		for _, r := range Roles {
			if b, ok := fs.BytesPerParam[r]; ok {
				roles = append(roles, fmt.Sprintf("%s %.4f", r, b))
			}
		}
		logf("INFO", "full-size source model (hidden %d, %d layers, %d/%d heads, vocab %d): %.2f GiB of weights; bytes per parameter by role: %s",
			full.Hidden, full.Layers, full.Heads, full.KVHeads, full.Vocab, fs.Weights.Bytes/GiB, strings.Join(roles, ", "))
	}
	plan, err := NewPlan(in)
	var oom *OOMError
	if errors.As(err, &oom) {
		logf("ERROR", "%v", err)
		return 1
	} else if err != nil {
		logf("ERROR", "%v", err)
		return 2
	}
	logf("INFO", "Loading weights took %.2f seconds", *startupSec/2)
	logf("INFO", "Model loading took %.4f GiB and %.6f seconds", plan.WeightsBytes/GiB, *startupSec/2)
	logf("INFO", "GPU KV cache size: %d tokens", plan.KVTokens())
	logf("INFO", "Available KV cache memory: %.2f GiB", plan.KVPoolBytes/GiB)
	logf("INFO", "Maximum concurrency for 32,768 tokens per request: %.2fx", float64(plan.KVTokens())/32768)
	logf("INFO", "Graph capturing finished in 0 secs, took 0.17 GiB")
	logf("INFO", "answer model: damage %.3f from the stored weight dtypes and kv_cache_dtype=%s (simulated accuracy)", Damage(m.Checkpoint, plan.KVDType), plan.KVDType)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	toks, why := LoadTokens(*checkpoint)
	logf("INFO", "output: %s", why)
	sched := NewScheduler(plan, *maxSeqs)
	if fault.Kind == "hang-after-tokens" {
		sched.Hang, sched.HangAfter = true, fault.N
	}
	if fault.Kind == "die-after-tokens" {
		sched.DieAfter = max(fault.N, 1)
		sched.OnDie = func() {
			logf("ERROR", "CUDA error: an illegal memory access was encountered")
			os.Exit(1)
		}
	}
	srv := &Server{Plan: plan, Sched: sched, Fault: fault, ModelID: m.Name, StartupSeconds: *startupSec, Seed: *seed,
		Damage: Damage(m.Checkpoint, plan.KVDType), NoArenaEndpoints: !*arena, Tokens: toks, ServedName: *servedName}
	schedCtx, schedCancel := context.WithCancel(context.Background())
	defer schedCancel()
	go sched.Run(schedCtx)

	addr := net.JoinHostPort(*host, strconv.Itoa(*port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		logf("ERROR", "listen: %v", err)
		return 1
	}
	httpSrv := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	serveErr := make(chan error, 1)
	go func() { serveErr <- httpSrv.Serve(ln) }()
	logger.Printf("INFO:     Started server process [%d]", os.Getpid())
	logger.Printf("INFO:     Uvicorn running on http://%s (Press CTRL+C to quit)", addr)

	ready := time.NewTimer(time.Until(start.Add(time.Duration(*startupSec * float64(time.Second)))))
	defer ready.Stop()
	for {
		select {
		case <-ready.C:
			if fault.Kind == "crash-on-start" {
				logf("ERROR", "EngineCore failed to start: RuntimeError: Engine core initialization failed (simulated fault crash-on-start)")
				return 1
			}
			srv.SetReady()
			logf("INFO", "Application startup complete.")
		case err := <-serveErr:
			logf("ERROR", "serve: %v", err)
			return 1
		case <-ctx.Done():
			logger.Printf("INFO:     Shutting down")
			sctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
			defer cancel()
			schedCancel()
			if err := httpSrv.Shutdown(sctx); err != nil {
				_ = httpSrv.Close()
			}
			logger.Printf("INFO:     Finished server process [%d]", os.Getpid())
			return 0
		}
	}
}
