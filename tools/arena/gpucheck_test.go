package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/examples"
	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/services/runner/engine"
	"github.com/lowbarena/lowbarena/services/runner/job"
	"github.com/lowbarena/lowbarena/services/runner/telemetry"
)

// TestGPUCheckWithoutAGPU: without NVML (or with no device), gpu-check
// says so in one line and succeeds, before it looks for an engine.
func TestGPUCheckWithoutAGPU(t *testing.T) {
	for _, openErr := range []error{
		fmt.Errorf("%w: %s", telemetry.ErrNoNVML, "ERROR_LIBRARY_NOT_FOUND"),
		fmt.Errorf("%w: index 0, the machine has 0 (0 to -1)", telemetry.ErrNoDevice),
	} {
		var stdout, stderr bytes.Buffer
		deps := gpuCheckDeps{
			Open: func(int) (*telemetry.Source, error) { return nil, openErr },
			Have: installed{LookPath: func(string) (string, error) { panic("no engine is looked for without a GPU") }},
		}
		require.NoError(t, runGPUCheck(context.Background(), nil, &stdout, &stderr, deps))
		require.Equal(t, "gpu-check: no NVIDIA GPU here (NVML: "+openErr.Error()+"); nothing to check\n", stdout.String())
	}
	// A device index the machine does not have is the operator's
	// mistake, not a machine without a GPU.
	deps := gpuCheckDeps{Open: func(int) (*telemetry.Source, error) {
		return nil, fmt.Errorf("%w: index 3, the machine has 1 (0 to 0)", telemetry.ErrNoDevice)
	}}
	var stdout bytes.Buffer
	err := runGPUCheck(context.Background(), []string{"--gpu", "3"}, &stdout, &stdout, deps)
	require.ErrorIs(t, err, telemetry.ErrNoDevice)
}

// TestGPUCheckOnThisMachine runs the built arena's gpu-check where there
// is no GPU (CI, the developers' machines): one line, exit 0.
func TestGPUCheckOnThisMachine(t *testing.T) {
	if src, err := telemetry.Open(0); err == nil {
		src.Close()
		t.Skip("this machine has a GPU: make gpu-check runs the check itself")
	}
	res := arena(t, "gpu-check")
	require.Equal(t, 0, res.code, res.stderr)
	require.Regexp(t, `^gpu-check: no NVIDIA GPU here \(NVML: .+\); nothing to check\n$`, res.stdout)
}

// fakeInstalled is a machine with the given programs on PATH and the
// given Python modules importable.
func fakeInstalled(programs []string, modules ...string) installed {
	return installed{
		LookPath: func(file string) (string, error) {
			for _, p := range programs {
				if p == file {
					return "/usr/bin/" + file, nil
				}
			}
			return "", exec.ErrNotFound
		},
		Python: func(code string) bool {
			for _, m := range modules {
				if code == "import "+m {
					return true
				}
			}
			return false
		},
	}
}

func TestGPUCheckChoosesEngine(t *testing.T) {
	const server = "/repo/tools/gpucheck/server.py"
	for _, tc := range []struct {
		name, want string
		have       installed
		engine     string // "" when it must fail
	}{
		{"vLLM first", "auto", fakeInstalled([]string{"vllm"}, "sglang", "torch"), "vllm"},
		{"SGLang without vLLM", "auto", fakeInstalled(nil, "sglang", "torch"), "sglang"},
		{"the server over PyTorch", "auto", fakeInstalled(nil, "torch"), "server"},
		{"nothing to run", "auto", fakeInstalled(nil), ""},
		{"the server asked for beside vLLM", "server", fakeInstalled([]string{"vllm"}, "torch"), "server"},
		{"vLLM asked for, not installed", "vllm", fakeInstalled(nil, "sglang", "torch"), ""},
		{"SGLang asked for", "sglang", fakeInstalled([]string{"vllm"}, "sglang"), "sglang"},
		{"an unknown engine", "tgi", fakeInstalled([]string{"vllm"}), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := chooseEngine(tc.want, server, tc.have)
			if tc.engine == "" {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.engine, e.Name)
			switch e.Name {
			case "vllm":
				require.Equal(t, examples.VLLMEngineCommand, e.Command)
			case "sglang":
				require.Equal(t, examples.SGLangEngineCommand, e.Command)
			case "server":
				require.True(t, strings.HasPrefix(e.Command, "python3 "+server+" "), e.Command)
			}
		})
	}
}

// TestGPUCheckServerCommand renders the minimal server's template as the
// runner does: the cap only under a budget, every placeholder the runner
// may set, and the runner sees a plain OpenAI-compatible server.
func TestGPUCheckServerCommand(t *testing.T) {
	tmpl := fmt.Sprintf(serverCommand, "/repo/tools/gpucheck/server.py")
	argv, err := engine.Render(tmpl, engine.Params{Checkpoint: "/ck", Port: 8123, KVCacheDType: "auto", MaxNumSeqs: 64, GPUTotalGiB: 80})
	require.NoError(t, err)
	require.Equal(t, []string{"python3", "/repo/tools/gpucheck/server.py", "--model", "/ck", "--port", "8123",
		"--kv-cache-dtype", "auto", "--max-num-seqs", "64"}, argv)
	require.Equal(t, engine.FamilyOpenAI, engine.Detect(argv))

	argv, err = engine.Render(tmpl, engine.Params{Checkpoint: "/ck", Port: 8123, GPUMemoryGiB: 0.5, GPUTotalGiB: 80,
		MaxModelLen: 2048, KVCacheBytes: 1 << 20})
	require.NoError(t, err)
	require.Equal(t, "--max-model-len 2048 --kv-cache-bytes 1048576 --gpu-memory-gib 0.5", strings.Join(argv[6:], " "))
}

func TestGPUCheckTooSmallCap(t *testing.T) {
	const weights = 5 << 20
	require.InDelta(t, float64(weights)/4/(1<<30), tooSmallCapGiB("server", weights, 79.6), 1e-12)
	// vLLM's and SGLang's fraction, rounded as engine.Render rounds it, is
	// the smallest that is not 0.
	for _, name := range []string{"vllm", "sglang"} {
		capGiB := tooSmallCapGiB(name, weights, 79.6)
		argv, err := engine.Render("e {{.GPUMemoryFraction}}", engine.Params{GPUMemoryGiB: capGiB, GPUTotalGiB: 79.6})
		require.NoError(t, err)
		require.Equal(t, "0.0001", argv[1])
	}
}

func TestGPUCheckOOMVerdict(t *testing.T) {
	tail := "INFO: gpucheck server: torch 2.7.0\nTraceback (most recent call last):\n" +
		"  File \"server.py\", line 715, in load_model\n" +
		"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB. GPU 0 has a total capacity of 79.19 GiB"
	code, phase := engine.Classify(tail)
	line, err := oomVerdict(&engine.Failure{Reason: code, Phase: phase, LogTail: tail, Message: "engine died before becoming healthy"})
	require.NoError(t, err)
	require.Equal(t, "engine_oom (weights_loading), as the runner classifies it: torch.OutOfMemoryError: CUDA out of memory. "+
		"Tried to allocate 2.00 MiB. GPU 0 has a total capacity of 79.19 GiB", line)

	_, err = oomVerdict(nil)
	require.ErrorContains(t, err, "no out of memory")
	_, err = oomVerdict(&engine.Failure{Reason: reason.EngineCrashed, Message: "engine died before becoming healthy"})
	require.ErrorContains(t, err, "classified engine_crashed, not engine_oom")
	_, err = oomVerdict(errors.New("context deadline exceeded"))
	require.ErrorContains(t, err, "not as an engine failure")
}

func TestGPUCheckMemoryTable(t *testing.T) {
	var b bytes.Buffer
	writeMemoryTable(&b, memoryRun{StartSeconds: 7.25, Samples: 98, SampleSeconds: 9.8, BaselineBytes: 512 << 20,
		PeakBytes: 1536 << 20, Rate: 1234.5, Held: 8,
		Torch: &torchReport{AllocatedBytes: 300 << 20, MaxAllocatedBytes: 320 << 20, ReservedBytes: 330 << 20,
			MaxReservedBytes: 384 << 20, WeightsBytes: 5 << 20, KVPoolBytes: 256 << 20, KVPoolTokens: 262144}})
	out := b.String()
	for _, want := range []string{
		"NVML samples             10.0 /s", "98 samples in 9.8 s",
		"start-up                 7.25 s", "idle baseline            0.500 GiB",
		"engine, by the device    1.000 GiB", "NVML used at its peak (1.500 GiB) less the baseline",
		"start-up, by the device",
		"torch allocated          0.293 GiB", "KV pool 0.250 GiB (262144 tokens)",
		"device beyond torch      0.625 GiB", "held 8 of 8",
	} {
		require.Contains(t, out, want)
	}
	b.Reset()
	writeMemoryTable(&b, memoryRun{Samples: 10, SampleSeconds: 1, StartupPeakBytes: 3 << 29})
	require.Contains(t, b.String(), "the engine serves no /v1/gpucheck/torch")
	require.Contains(t, b.String(), "start-up, by the device  1.500 GiB")
}

func TestGPUCheckBudgetTable(t *testing.T) {
	wls := job.Workloads(gpuCheckWorkloads)
	rate := func(v float64) *float64 { return &v }
	res := job.Efficiency{
		Candidate: job.Served{Workloads: map[string]job.WorkloadResult{
			"serve":        {Rate: 1000, Running: 32, Full: 32, Peak: record.PeakMemory{PeakGiB: 0.9, Source: record.MemoryFromNVML}},
			"interactive":  {Rate: 100, Running: 1, Full: 1, Peak: record.PeakMemory{PeakGiB: 0.85, Source: record.MemoryFromNVML}},
			"long_context": {Rate: 900, Running: 64, Full: 64},
		}},
		Budget: map[string]record.Budget{
			"serve@1.02":        {BudgetGiB: 0.918, CapGiB: 4.918, Factor: 1.02, FullRunning: 32, Running: 32, Value: rate(990), Healthy: true},
			"interactive@1.02":  {BudgetGiB: 0.867, CapGiB: 4.867, Factor: 1.02, FullRunning: 1, Running: 1, Value: rate(50)},
			"long_context@1.02": {BudgetGiB: 0, CapGiB: 4, Factor: 1.02, FullRunning: 64, Running: 64, Value: rate(900), Healthy: true},
		},
	}
	var b bytes.Buffer
	failures := writeBudgetTable(&b, wls, res, 1.02)
	out := b.String()
	require.Contains(t, out, "serve@1.02         1000.0  32/32    0.900     nvml    0.918       4.918    990.0         32/32    yes")
	require.Contains(t, out, "interactive@1.02   100.0   1/1      0.850     nvml    0.867       4.867    50.0          1/1      NO")
	require.Contains(t, out, "long_context@1.02  900.0   64/64    0.000     none")
	require.Equal(t, []string{
		"interactive@1.02: contract: limited to a hard cap of its interactive peak plus 2% (4.867 GiB with room for its CUDA context), the engine did not keep 90% of its rate",
		"long_context@1.02: the candidate's peak was not measured (source none), so the budget is 0 and the replay ran without one",
	}, failures)

	res.Simulated = true
	delete(res.Budget, "serve@1.02")
	failures = writeBudgetTable(&b, wls, res, 1.02)
	require.Contains(t, failures, "the efficiency job's figures are simulated, not NVML's")
	require.Contains(t, failures, "serve@1.02: no replay")
}

// TestGPUCheckServerParses compiles the minimal server (its syntax, on
// the python3 here; torch is needed only to run it).
func TestGPUCheckServerParses(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 on PATH")
	}
	out, err := exec.Command(py, "-c", "import py_compile, sys; py_compile.compile(sys.argv[1], cfile=sys.argv[2], doraise=True)",
		"../gpucheck/server.py", filepath.Join(t.TempDir(), "server.pyc")).CombinedOutput()
	require.NoError(t, err, string(out))
}

// TestGPUCheckRunsItsSteps runs the whole check against simengine, the
// simulated engine, on a mocked NVML device: each step runs and prints
// its figures, the out-of-memory step finds simengine's engine_oom, and
// the check fails, as it must, because the efficiency figures are
// simulated.
func TestGPUCheckRunsItsSteps(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the simulated engine eight times")
	}
	saved, savedMem := gpuCheckWorkloads, memoryWorkload
	t.Cleanup(func() { gpuCheckWorkloads, memoryWorkload = saved, savedMem })
	gpuCheckWorkloads = job.WorkloadSpec{RequestsPerSlot: 1, MaxTokens: 8, PromptWords: 16, LongPromptWords: 32}
	memoryWorkload.Requests, memoryWorkload.MaxTokens = 8, 8

	dev := &mock.Device{
		GetNameFunc:       func() (string, nvml.Return) { return "NVIDIA H100 80GB HBM3 (mock)", nvml.SUCCESS },
		GetUUIDFunc:       func() (string, nvml.Return) { return "GPU-mock-0", nvml.SUCCESS },
		GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) { return nvml.Memory{Total: 80 << 30, Used: 512 << 20}, nvml.SUCCESS },
		GetMemoryInfo_v2Func: func() (nvml.Memory_v2, nvml.Return) {
			return nvml.Memory_v2{Total: 80 << 30, Used: 512 << 20}, nvml.SUCCESS
		},
		GetCudaComputeCapabilityFunc: func() (int, int, nvml.Return) { return 9, 0, nvml.SUCCESS },
		GetUtilizationRatesFunc: func() (nvml.Utilization, nvml.Return) {
			return nvml.Utilization{}, nvml.SUCCESS
		},
		GetPowerUsageFunc:              func() (uint32, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED },
		GetComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS },
	}
	lib := &mock.Interface{
		InitFunc:                   func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:               func() nvml.Return { return nvml.SUCCESS },
		DeviceGetCountFunc:         func() (int, nvml.Return) { return 1, nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(int) (nvml.Device, nvml.Return) { return dev, nvml.SUCCESS },
	}
	sim := filepath.Join(filepath.Dir(arenaBin), "simengine")
	eng := gpuEngine{Name: "simengine", About: "simengine", Command: strings.Replace(examples.EngineCommand, "simengine", sim, 1)}
	var stdout, stderr bytes.Buffer
	err := runGPUCheck(context.Background(), nil, &stdout, &stderr, gpuCheckDeps{
		Open:   func(i int) (*telemetry.Source, error) { return telemetry.FromNVML(lib, false, i) },
		Engine: &eng,
	})
	out := stdout.String()
	t.Log("\n" + out)
	var ee *exitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, exitFailed, ee.code)
	for _, want := range []string{
		"gpu-check: NVIDIA H100 80GB HBM3 (mock) (GPU-mock-0, NVML index 0), 80.0 GiB",
		"1. one engine run", "NVML samples", "start-up", "the engine serves no /v1/gpucheck/torch",
		"2. the budget replay", "serve@1.02", "interactive@1.02", "long_context@1.02", "engine_report",
		"3. out of memory under a too-small cap: 0.008000 GiB, 0.0001 of the GPU",
		"engine_oom (", "as the runner classifies it:", "torch.OutOfMemoryError: CUDA out of memory.",
		"device back at its baseline", "FAILED: the efficiency job's figures are simulated, not NVML's",
	} {
		require.Contains(t, out, want)
	}
	require.Regexp(t, `NVML samples +\d+\.\d /s +[1-9]\d* samples in [3-9]\.\d s`, out, "the memory step samples 3 s at least")
	require.Contains(t, out, "\ngpu-check: FAILED (")
}
