package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/lowbarena/lowbarena/domain/examples"
	"github.com/lowbarena/lowbarena/domain/formula"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/services/runner/engine"
	"github.com/lowbarena/lowbarena/services/runner/job"
	"github.com/lowbarena/lowbarena/services/runner/loadgen"
	"github.com/lowbarena/lowbarena/services/runner/telemetry"
)

// `arena gpu-check` is the acceptance run on a real GPU (make gpu-check,
// docs/operators/gpu-check.md): the runner's own pieces (engine.Start,
// telemetry over NVML, the load generator, job.Runner's Serve and
// Efficiency) against a real engine serving the example campaign's BF16
// checkpoint. Without a GPU it says so and exits 0.

// gpuCheckServer is the minimal server, beside the repository's root.
const gpuCheckServer = "tools/gpucheck/server.py"

// serverCommand is the minimal server's command template (%s: the
// server's path): every engine.Params placeholder it understands, each
// only when the runner sets it.
const serverCommand = "python3 %s --model {{.Checkpoint}} --port {{.Port}}" +
	"{{if .KVCacheDType}} --kv-cache-dtype {{.KVCacheDType}}{{end}}" +
	"{{if .MaxNumSeqs}} --max-num-seqs {{.MaxNumSeqs}}{{end}}" +
	"{{if .MaxModelLen}} --max-model-len {{.MaxModelLen}}{{end}}" +
	"{{if .KVCacheBytes}} --kv-cache-bytes {{.KVCacheBytes}}{{end}}" +
	"{{if .GPUMemoryGiB}} --gpu-memory-gib {{.GPUMemoryGiB}}{{end}}"

// The check's sizes: small, so that the whole check takes a few minutes.
const (
	// gpuCheckSeqs is the engines' --max-num-seqs: long_context's 64
	// requests at once.
	gpuCheckSeqs = 64
	// gpuCheckFactor is the budget replay's factor, the campaign's.
	gpuCheckFactor = 1.02
	// torchReportPath is the minimal server's report of torch's memory.
	torchReportPath = "/v1/gpucheck/torch"
	// minSampling is the shortest the memory step samples NVML.
	minSampling = 3 * time.Second
)

// gpuCheckWorkloads size the efficiency job's three workloads (serve 32
// requests at 32, interactive 4 at 1, long_context 64 at 64).
var gpuCheckWorkloads = job.WorkloadSpec{RequestsPerSlot: 1, MaxTokens: 32, PromptWords: 64, LongPromptWords: 512}

// memoryWorkload is the load of the memory step.
var memoryWorkload = loadgen.Workload{Name: "gpucheck", Concurrency: 8, Requests: 32, Warmup: 2, PromptWords: 128, MaxTokens: 32}

// gpuEngine is the engine the check runs.
type gpuEngine struct {
	// Name is "vllm", "sglang" or "server" (tools/gpucheck/server.py).
	Name string
	// Command is its command template (engine.Render).
	Command string
	// About says what it is, for the report.
	About string
}

// installed is what the machine has, for chooseEngine: LookPath finds a
// program on PATH (exec.LookPath), Python reports whether `python3 -c
// code` succeeds.
type installed struct {
	LookPath func(file string) (string, error)
	Python   func(code string) bool
}

// machineInstalled looks at this machine.
func machineInstalled() installed {
	return installed{LookPath: exec.LookPath, Python: func(code string) bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		return exec.CommandContext(ctx, "python3", "-c", code).Run() == nil
	}}
}

// chooseEngine picks the engine: want is "auto" (vLLM when `vllm` is on
// PATH, else SGLang when python3 imports sglang, else the minimal server
// when python3 imports torch), or one of "vllm", "sglang", "server".
// server is the minimal server's path.
func chooseEngine(want, server string, have installed) (gpuEngine, error) {
	vllm := func() (gpuEngine, bool) {
		_, err := have.LookPath("vllm")
		return gpuEngine{Name: "vllm", Command: examples.VLLMEngineCommand, About: "vLLM (vllm on PATH)"}, err == nil
	}
	sglang := func() (gpuEngine, bool) {
		return gpuEngine{Name: "sglang", Command: examples.SGLangEngineCommand, About: "SGLang (python3 imports sglang)"},
			have.Python("import sglang")
	}
	minimal := func() (gpuEngine, bool) {
		return gpuEngine{Name: "server", Command: fmt.Sprintf(serverCommand, server),
			About: gpuCheckServer + " over this machine's PyTorch and transformers"}, have.Python("import torch")
	}
	switch want {
	case "", "auto":
		for _, try := range []func() (gpuEngine, bool){vllm, sglang, minimal} {
			if e, ok := try(); ok {
				return e, nil
			}
		}
		return gpuEngine{}, errors.New("no engine: vllm is not on PATH, and python3 imports neither sglang nor torch")
	case "vllm", "sglang", "server":
		e, ok := map[string]func() (gpuEngine, bool){"vllm": vllm, "sglang": sglang, "server": minimal}[want]()
		if !ok {
			return gpuEngine{}, fmt.Errorf("--engine %s: not installed here (%s)", want, e.About)
		}
		return e, nil
	}
	return gpuEngine{}, usageErr("--engine takes auto, vllm, sglang or server, not %q", want)
}

// findServer returns the minimal server's absolute path: path as given
// (relative to the working folder), else beside the binary's folder's
// parent (bin/arena in the repository). The command template is split on
// spaces, so the path must have none.
func findServer(path string) (string, error) {
	candidates := []string{path}
	if exe, err := os.Executable(); err == nil && !filepath.IsAbs(path) {
		candidates = append(candidates, filepath.Join(filepath.Dir(filepath.Dir(exe)), path))
	}
	for _, c := range candidates {
		abs, err := filepath.Abs(c)
		if err != nil {
			continue
		}
		if _, err := os.Stat(abs); err == nil {
			if strings.ContainsAny(abs, " \t\n") {
				return "", fmt.Errorf("the server's path %q has a space; the engine command is split on spaces", abs)
			}
			return abs, nil
		}
	}
	return "", fmt.Errorf("the minimal server %s is not here (run from the repository's root, or give --server)", path)
}

// gpuCheckDeps is what the check reaches outside itself, replaced in
// tests.
type gpuCheckDeps struct {
	// Open opens NVML on a device (telemetry.Open).
	Open func(index int) (*telemetry.Source, error)
	// Have is what the machine has installed.
	Have installed
	// Engine, when set, is the engine to run instead of the one
	// chooseEngine picks (tests).
	Engine *gpuEngine
}

// cmdGPUCheck is `arena gpu-check`.
func cmdGPUCheck(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runGPUCheck(ctx, args, stdout, stderr, gpuCheckDeps{Open: telemetry.Open, Have: machineInstalled()})
}

// gpuCheckOptions are gpu-check's flags.
type gpuCheckOptions struct {
	index         int
	engine        string
	server        string
	keep          bool
	healthTimeout time.Duration
}

func parseGPUCheck(args []string, stderr io.Writer) (gpuCheckOptions, error) {
	var o gpuCheckOptions
	fs := newFlagSet("gpu-check", stderr)
	fs.IntVar(&o.index, "gpu", 0, "the GPU's NVML index (as nvidia-smi lists them)")
	fs.StringVar(&o.engine, "engine", "auto", "auto (vLLM, else SGLang, else the minimal server), vllm, sglang or server")
	fs.StringVar(&o.server, "server", gpuCheckServer, "the minimal server's path")
	fs.BoolVar(&o.keep, "keep", false, "keep the example campaign's folder")
	fs.DurationVar(&o.healthTimeout, "health-timeout", 5*time.Minute, "how long an engine may take to become healthy")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: arena gpu-check [--gpu N] [--engine auto|vllm|sglang|server] [--server PATH] [--keep]")
		fmt.Fprintln(stderr, "  the runner against a real engine on this machine's GPU (docs/operators/gpu-check.md)")
		fs.PrintDefaults()
	}
	pos, err := parseFlags(fs, args)
	if err != nil {
		return o, err
	}
	if len(pos) > 0 {
		return o, usageErr("gpu-check takes no arguments (got %q)", pos)
	}
	return o, nil
}

// pickEngine is deps.Engine, else chooseEngine's.
func pickEngine(o gpuCheckOptions, deps gpuCheckDeps) (gpuEngine, error) {
	if deps.Engine != nil {
		return *deps.Engine, nil
	}
	server, serverErr := findServer(o.server)
	eng, err := chooseEngine(o.engine, server, deps.Have)
	if err == nil && eng.Name == "server" {
		err = serverErr
	}
	return eng, err
}

// runGPUCheck is gpu-check with its dependencies given.
func runGPUCheck(ctx context.Context, args []string, stdout, stderr io.Writer, deps gpuCheckDeps) error {
	o, err := parseGPUCheck(args, stderr)
	if err != nil {
		return err
	}
	src, err := deps.Open(o.index)
	if errors.Is(err, telemetry.ErrNoNVML) || (o.index == 0 && errors.Is(err, telemetry.ErrNoDevice)) {
		fmt.Fprintf(stdout, "gpu-check: no NVIDIA GPU here (NVML: %v); nothing to check\n", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("gpu-check: %w", err)
	}
	defer src.Close()
	eng, err := pickEngine(o, deps)
	if err != nil {
		return fmt.Errorf("gpu-check: %w", err)
	}
	dir, err := os.MkdirTemp("", "gpucheck-")
	if err != nil {
		return fmt.Errorf("gpu-check: %w", err)
	}
	if !o.keep {
		defer os.RemoveAll(dir)
	}
	if _, err := examples.Write(dir); err != nil {
		return fmt.Errorf("gpu-check: %w", err)
	}
	c := &gpuCheck{out: stdout, src: src, eng: eng, dir: dir, healthTimeout: o.healthTimeout,
		log: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})), progress: stderr}
	return c.run(ctx)
}

// gpuCheck is one run of the check.
type gpuCheck struct {
	out           io.Writer
	progress      io.Writer
	src           *telemetry.Source
	eng           gpuEngine
	dir           string
	healthTimeout time.Duration
	log           *slog.Logger
	// failures are the check's failed steps and findings.
	failures []string
}

func (c *gpuCheck) reference() string {
	return filepath.Join(c.dir, examples.CampaignsDir, examples.TaskID, "reference")
}

func (c *gpuCheck) candidate() string {
	return filepath.Join(c.dir, examples.SubmissionsDir, "bf16-reference")
}

func (c *gpuCheck) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	c.failures = append(c.failures, msg)
	fmt.Fprintln(c.out, "  FAILED: "+msg)
}

// env is each engine's environment: the one GPU the check reads, by
// UUID (CUDA's order is not NVML's).
func (c *gpuCheck) env() []string {
	if u := c.src.UUID(); u != "" {
		return []string{"CUDA_VISIBLE_DEVICES=" + u}
	}
	return []string{"CUDA_VISIBLE_DEVICES=" + strconv.Itoa(c.src.Index())}
}

func (c *gpuCheck) runner() (*job.Runner, *atomic.Int64) {
	var samples atomic.Int64
	return &job.Runner{NVML: c.src, HealthTimeout: c.healthTimeout, Env: c.env(), Log: c.log,
		Samples: func(_ context.Context, _ string, b []telemetry.Sample) error {
			samples.Add(int64(len(b)))
			return nil
		},
		Progress: func(phase string, done, total int) {
			fmt.Fprintf(c.progress, "gpu-check: %s (%d/%d)\n", phase, done, total)
		}}, &samples
}

func (c *gpuCheck) run(ctx context.Context) error {
	totalGiB := float64(c.src.TotalBytes()) / formula.GiB
	fmt.Fprintf(c.out, "gpu-check: %s (%s, NVML index %d), %.1f GiB\n", c.src.GPU(), c.src.UUID(), c.src.Index(), totalGiB)
	fmt.Fprintf(c.out, "engine: %s\n", c.eng.About)
	fmt.Fprintf(c.out, "checkpoint: the example campaign's BF16 reference (%s, %s)\n\n", examples.TaskID, c.reference())

	baseline := c.baseline()
	fmt.Fprintln(c.out, "1. one engine run, watched through NVML ("+workloadAbout(memoryWorkload)+")")
	m, err := measureEngine(ctx, c.src, c.eng, c.reference(), c.env(), c.healthTimeout, baseline)
	if err != nil {
		c.fail("the engine run: %v", err)
	} else {
		writeMemoryTable(c.out, m)
	}
	c.afterEngines(ctx, baseline)

	fmt.Fprintf(c.out, "\n2. the budget replay: job.Runner.Efficiency, the BF16 reference as the candidate, factor %g\n", gpuCheckFactor)
	c.efficiency(ctx)
	c.afterEngines(ctx, baseline)

	weights, err := checkpointBytes(c.reference())
	if err != nil {
		return fmt.Errorf("gpu-check: %w", err)
	}
	capGiB := tooSmallCapGiB(c.eng.Name, weights, totalGiB)
	why := fmt.Sprintf("a quarter of the checkpoint's %.6f GiB of weights", float64(weights)/formula.GiB)
	if c.eng.Name != "server" {
		why = "0.0001 of the GPU, too little for the engine's activations and KV cache pool"
	}
	fmt.Fprintf(c.out, "\n3. out of memory under a too-small cap: %.6f GiB, %s\n", capGiB, why)
	c.oom(ctx, capGiB)
	c.afterEngines(ctx, baseline)

	fmt.Fprintln(c.out)
	if len(c.failures) > 0 {
		fmt.Fprintf(c.out, "gpu-check: FAILED (%d): %s\n", len(c.failures), strings.Join(c.failures, "; "))
		return &exitError{code: exitFailed, err: fmt.Errorf("gpu-check failed: %d finding(s)", len(c.failures))}
	}
	fmt.Fprintln(c.out, "gpu-check: passed")
	return nil
}

// baseline is the device's used memory at rest: the least of a few
// readings.
func (c *gpuCheck) baseline() uint64 {
	var least uint64
	for i := range 5 {
		if m, err := c.src.Memory(); err == nil && (i == 0 || m.Used < least) {
			least = m.Used
		}
		time.Sleep(50 * time.Millisecond)
	}
	return least
}

// afterEngines reports how long the device took to come back to its
// baseline after the engines stopped (within 64 MiB; a next engine that
// starts before then finds less memory free).
func (c *gpuCheck) afterEngines(ctx context.Context, baseline uint64) {
	t0 := time.Now()
	const slack = 64 << 20
	var used uint64
	for time.Since(t0) < 15*time.Second && ctx.Err() == nil {
		if m, err := c.src.Memory(); err == nil {
			used = m.Used
			if used <= baseline+slack {
				fmt.Fprintf(c.out, "  device back at its baseline %.2fs after the engine stopped (%.3f GiB used)\n",
					time.Since(t0).Seconds(), gib(used))
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.fail("the device still holds %.3f GiB above its baseline 15 s after the engine stopped", gib(used-min(used, baseline)))
}

func (c *gpuCheck) efficiency(ctx context.Context) {
	r, samples := c.runner()
	p := job.EfficiencyParams{Campaign: "gpu-check", Engine: job.EngineSpec{Command: c.eng.Command, MaxNumSeqs: gpuCheckSeqs},
		Workload: gpuCheckWorkloads, KVCacheDType: "auto", Reference: events.BundleRef{SHA256: "gpu-check"}, BudgetFactor: gpuCheckFactor}
	wls := job.Workloads(p.Workload)
	for _, w := range wls {
		fmt.Fprintf(c.out, "  %s\n", workloadAbout(w))
	}
	t0 := time.Now()
	res, err := r.Efficiency(ctx, p, c.candidate(), c.reference(), &memoryCache{}, nil)
	fmt.Fprintf(c.out, "  took %.0f s; %d NVML samples\n", time.Since(t0).Seconds(), samples.Load())
	if err != nil {
		c.fail("the efficiency job: %v", err)
		return
	}
	writeStartup(c.out, "reference", res.Reference)
	writeStartup(c.out, "candidate", res.Candidate)
	for _, f := range writeBudgetTable(c.out, wls, res, gpuCheckFactor) {
		c.fail("%s", f)
	}
}

func (c *gpuCheck) oom(ctx context.Context, capGiB float64) {
	r, _ := c.runner()
	_, err := r.Serve(ctx, job.Launch{Run: "too-small-cap", Command: c.eng.Command, Checkpoint: c.reference(),
		KVCacheDType: "auto", MaxNumSeqs: 8, GPUMemoryGiB: capGiB,
		// vLLM and SGLang are bounded by their pool (the templates render
		// only these): a 1 MiB pool, a static fraction of 0.0001; the
		// server by torch's fraction of the device (GPUMemoryGiB).
		KVCacheBytes: 1 << 20, MemFractionStatic: 0.0001},
		[]loadgen.Workload{{Name: "interactive", Concurrency: 1, Requests: 1, PromptWords: 16, MaxTokens: 4}})
	line, verr := oomVerdict(err)
	if verr != nil {
		c.fail("too-small cap: %v", verr)
		return
	}
	fmt.Fprintf(c.out, "  %s\n", line)
}

// memoryCache is the check's reference cache: empty, so the reference is
// measured.
type memoryCache struct{ s *job.Served }

func (m *memoryCache) Get(context.Context, string, string) (*job.Served, error) { return m.s, nil }

func (m *memoryCache) Put(_ context.Context, _, _ string, s job.Served) error {
	m.s = &s
	return nil
}

// torchReport is the minimal server's GET /v1/gpucheck/torch: torch's
// own count of its memory.
type torchReport struct {
	Device            string `json:"device"`
	TotalBytes        uint64 `json:"total_bytes"`
	CapBytes          *int64 `json:"cap_bytes"`
	AllocatedBytes    uint64 `json:"allocated_bytes"`
	MaxAllocatedBytes uint64 `json:"max_allocated_bytes"`
	ReservedBytes     uint64 `json:"reserved_bytes"`
	MaxReservedBytes  uint64 `json:"max_reserved_bytes"`
	// The start-up's peaks (its profiling pass), before serving began.
	StartupMaxAllocatedBytes uint64 `json:"startup_max_allocated_bytes"`
	StartupMaxReservedBytes  uint64 `json:"startup_max_reserved_bytes"`
	WeightsBytes             uint64 `json:"weights_bytes"`
	KVPoolBytes              uint64 `json:"kv_pool_bytes"`
	KVPoolTokens             int64  `json:"kv_pool_tokens"`
}

// memoryRun is what the memory step measured.
type memoryRun struct {
	// StartSeconds is process start to healthy.
	StartSeconds float64
	// Samples NVML readings in SampleSeconds of wall time.
	Samples       int64
	SampleSeconds float64
	// BaselineBytes is the device's used memory before the engine
	// started; PeakBytes the most NVML saw used while it served;
	// StartupPeakBytes the most it saw used over the baseline from the
	// engine's start to its health (sampled from the start, as the
	// runner samples).
	BaselineBytes, PeakBytes, StartupPeakBytes uint64
	// Torch is the engine's own report (nil: it serves none).
	Torch *torchReport
	// Rate and Held are the workload's output tokens per second and the
	// most requests it held at once.
	Rate float64
	Held int
}

// measureEngine starts the engine on the checkpoint, samples NVML while a
// workload runs on it, reads torch's report where the engine serves one,
// and stops it.
func measureEngine(ctx context.Context, src *telemetry.Source, eng gpuEngine, checkpoint string, env []string,
	healthTimeout time.Duration, baseline uint64) (memoryRun, error) {
	m := memoryRun{BaselineBytes: baseline}
	port, err := loopbackPort()
	if err != nil {
		return m, err
	}
	argv, err := engine.Render(eng.Command, engine.Params{Checkpoint: checkpoint, Port: port, KVCacheDType: "auto",
		MaxNumSeqs: gpuCheckSeqs, GPUTotalGiB: float64(src.TotalBytes()) / formula.GiB})
	if err != nil {
		return m, fmt.Errorf("render the engine command: %w", err)
	}
	var n atomic.Int64
	sampler := &telemetry.Sampler{Source: src, Interval: 100 * time.Millisecond, Baseline: baseline,
		Sink: func(_ context.Context, b []telemetry.Sample) error {
			n.Add(int64(len(b)))
			return nil
		}}
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	ts := time.Now()
	go func() { done <- sampler.Run(sctx) }()
	t0 := time.Now()
	e, err := engine.Start(ctx, engine.Options{Command: argv, Port: port, HealthTimeout: healthTimeout, Env: env, TailLines: 200})
	if err != nil {
		stop()
		<-done
		return m, fmt.Errorf("the engine did not start: %w", err)
	}
	defer e.Stop()
	m.StartSeconds = time.Since(t0).Seconds()
	m.StartupPeakBytes = sampler.ResetPeak()
	base := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	hc := &http.Client{Timeout: 10 * time.Second}
	client := &loadgen.Client{BaseURL: base, Model: servedModelID(ctx, hc, base, checkpoint)}
	res, werr := client.Run(ctx, memoryWorkload)
	var tr torchReport
	terr := getJSONFrom(ctx, hc, base+torchReportPath, &tr)
	// Sample a few seconds at least, however fast the workload was, so
	// that the rate is measured over more than a handful of samples.
	select {
	case <-time.After(time.Until(ts.Add(minSampling))):
	case <-ctx.Done():
	case <-e.Exited():
	}
	stop()
	<-done
	m.SampleSeconds, m.Samples = time.Since(ts).Seconds(), n.Load()
	m.PeakBytes = baseline + sampler.Peak()
	if werr != nil {
		select {
		case <-e.Exited():
			return m, fmt.Errorf("the engine died serving: %w", e.Failure())
		default:
		}
		return m, fmt.Errorf("the workload: %w", werr)
	}
	m.Rate, m.Held = res.Rate, res.Held
	if terr == nil {
		m.Torch = &tr
	}
	return m, nil
}

// errNotServed is a 404: the engine serves no such endpoint.
var errNotServed = errors.New("not served")

func getJSONFrom(ctx context.Context, hc *http.Client, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return errNotServed
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	return nil
}

// servedModelID is the first id of the engine's /v1/models, or the
// checkpoint's path (vLLM's default name).
func servedModelID(ctx context.Context, hc *http.Client, base, checkpoint string) string {
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := getJSONFrom(ctx, hc, base+"/v1/models", &list); err != nil || len(list.Data) == 0 || list.Data[0].ID == "" {
		return checkpoint
	}
	return list.Data[0].ID
}

func loopbackPort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// checkpointBytes is the size of a checkpoint's safetensors files.
func checkpointBytes(dir string) (int64, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	if err != nil {
		return 0, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	var n int64
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			return 0, fmt.Errorf("checkpoint %s: %w", dir, err)
		}
		n += fi.Size()
	}
	return n, nil
}

// tooSmallCapGiB is the cap the out-of-memory step gives the engine. The
// minimal server caps torch at it (set_per_process_memory_fraction): a
// quarter of the weights, so the first weight it puts on the GPU runs
// out of memory. vLLM and SGLang take the budget as a fraction of the GPU
// rounded to 4 places (engine.Params.GPUMemoryFraction), so theirs is the
// smallest fraction that is not 0, 0.0001 of the GPU: room for the tiny
// weights but not for the activations and KV cache pool on top.
func tooSmallCapGiB(engineName string, weightsBytes int64, totalGiB float64) float64 {
	if engineName == "server" {
		return float64(weightsBytes) / 4 / formula.GiB
	}
	return 1e-4 * totalGiB
}

// oomLine matches the line of a log that says it ran out of memory.
var oomLine = regexp.MustCompile(`(?i)out of memory|OutOfMemoryError|No available memory for the cache blocks|Not enough memory`)

// oomVerdict checks the failure of the engine run under a too-small cap:
// it must be engine_oom. It returns the line to print: the code, the
// phase and the log's out-of-memory line.
func oomVerdict(err error) (string, error) {
	if err == nil {
		return "", errors.New("the engine served under a cap below its weights: no out of memory")
	}
	f := engine.AsFailure(err)
	if f == nil {
		return "", fmt.Errorf("the engine run failed, not as an engine failure: %w", err)
	}
	if f.Reason != reason.EngineOOM {
		return "", fmt.Errorf("classified %s, not %s: %s", f.Reason, reason.EngineOOM, flatTail(f.Message, 300))
	}
	phase := f.Phase
	if phase == "" {
		phase = "phase unknown"
	}
	line := ""
	lines := strings.Split(f.LogTail, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if oomLine.MatchString(lines[i]) {
			line = flatTail(lines[i], 240)
			break
		}
	}
	return fmt.Sprintf("%s (%s), as the runner classifies it: %s", f.Reason, phase, line), nil
}

// flatTail joins s on one line and keeps its first n bytes.
func flatTail(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = s[:n] + "..."
	}
	return s
}

func gib(b uint64) float64 { return float64(b) / formula.GiB }

func workloadAbout(w loadgen.Workload) string {
	return fmt.Sprintf("%s: %d requests at concurrency %d, %d prompt words, %d tokens out", w.Name, w.Requests, w.Concurrency,
		w.PromptWords, w.MaxTokens)
}

// writeMemoryTable prints the memory step.
func writeMemoryTable(w io.Writer, m memoryRun) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	rate := 0.0
	if m.SampleSeconds > 0 {
		rate = float64(m.Samples) / m.SampleSeconds
	}
	fmt.Fprintf(tw, "  NVML samples\t%.1f /s\t%d samples in %.1f s (the runner samples every 100 ms)\n", rate, m.Samples, m.SampleSeconds)
	fmt.Fprintf(tw, "  start-up\t%.2f s\tprocess start to healthy\n", m.StartSeconds)
	fmt.Fprintf(tw, "  idle baseline\t%.3f GiB\tNVML used before the engine started\n", gib(m.BaselineBytes))
	engineBytes := m.PeakBytes - min(m.PeakBytes, m.BaselineBytes)
	fmt.Fprintf(tw, "  engine, by the device\t%.3f GiB\tNVML used at its peak (%.3f GiB) less the baseline\n", gib(engineBytes), gib(m.PeakBytes))
	fmt.Fprintf(tw, "  start-up, by the device\t%.3f GiB\tNVML used over the baseline at its most from the engine's start to its health (weights, profiling, pool)\n", gib(m.StartupPeakBytes))
	if t := m.Torch; t != nil {
		fmt.Fprintf(tw, "  torch allocated\t%.3f GiB\tmax %.3f GiB; weights %.4f GiB, KV pool %.3f GiB (%d tokens)\n",
			gib(t.AllocatedBytes), gib(t.MaxAllocatedBytes), gib(t.WeightsBytes), gib(t.KVPoolBytes), t.KVPoolTokens)
		fmt.Fprintf(tw, "  torch reserved\t%.3f GiB\tmax %.3f GiB (the caching allocator's segments)\n", gib(t.ReservedBytes), gib(t.MaxReservedBytes))
		fmt.Fprintf(tw, "  torch at start-up\t%.3f GiB\treserved at most while profiling (%.3f GiB allocated), before NVML was sampled\n",
			gib(t.StartupMaxReservedBytes), gib(t.StartupMaxAllocatedBytes))
		fmt.Fprintf(tw, "  device beyond torch\t%.3f GiB\tthe engine by the device less torch's max reserved: CUDA context, cuBLAS workspace\n",
			gib(engineBytes-min(engineBytes, t.MaxReservedBytes)))
	} else {
		fmt.Fprintf(tw, "  torch\tn/a\tthe engine serves no %s\n", torchReportPath)
	}
	fmt.Fprintf(tw, "  workload\t%.1f tok/s\theld %d of %d requests at once\n", m.Rate, m.Held, memoryWorkload.Concurrency)
	tw.Flush()
}

// writeStartup prints what the runner read of an engine run's start-up.
func writeStartup(w io.Writer, run string, s job.Served) {
	st := s.Startup
	fmt.Fprintf(w, "  %s: start-up %.2f s (the runner's engine_init), weights %.4f GiB, KV pool %.3f GiB of %.0f tokens; device peak %.3f GiB\n",
		run, st.EngineInitSeconds, st.WeightsGiB, st.KVCacheGiB, st.KVCacheTokens, s.DevicePeakGiB)
}

// writeBudgetTable prints each workload's measurement and its replay
// under its budget, and returns the findings that fail the check: a
// replay that is not healthy, a budget of 0 (no peak was measured, so
// the replay ran uncapped), simulated figures.
func writeBudgetTable(w io.Writer, wls []loadgen.Workload, res job.Efficiency, factor float64) []string {
	var failures []string
	if res.Simulated {
		failures = append(failures, "the efficiency job's figures are simulated, not NVML's")
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  workload\ttok/s\trunning\tpeak GiB\tsource\tbudget GiB\tcap GiB\treplay tok/s\trunning\thealthy")
	for _, wl := range wls {
		key := fmt.Sprintf("%s@%g", wl.Name, factor)
		cand := res.Candidate.Workloads[wl.Name]
		b, ok := res.Budget[key]
		if !ok {
			failures = append(failures, key+": no replay")
			continue
		}
		replay := "-"
		if b.Value != nil {
			replay = fmt.Sprintf("%.1f", *b.Value)
		}
		source := cand.Peak.Source
		if source == "" {
			source = "none"
		}
		healthy := "yes"
		if !b.Healthy {
			healthy = "NO"
		}
		fmt.Fprintf(tw, "  %s\t%.1f\t%d/%d\t%.3f\t%s\t%.3f\t%.3f\t%s\t%.0f/%.0f\t%s\n", key, cand.Rate, cand.Running, cand.Full,
			cand.Peak.PeakGiB, source, b.BudgetGiB, b.CapGiB, replay, b.Running, b.FullRunning, healthy)
		switch {
		case b.BudgetGiB <= 0:
			failures = append(failures, fmt.Sprintf("%s: the candidate's peak was not measured (source %s), so the budget is 0 and the replay ran without one", key, source))
		case !b.Healthy:
			failures = append(failures, key+": "+formula.Reason(wl.Name, formula.Budget{Factor: b.Factor, BudgetGiB: b.BudgetGiB, CapGiB: b.CapGiB},
				formula.Replay{Running: b.Running, Full: b.FullRunning, Rate: b.Value}, cand.Rate))
		}
	}
	tw.Flush()
	return failures
}
