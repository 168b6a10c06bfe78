package job_test

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/services/runner/engine"
	"github.com/lowbarena/lowbarena/services/runner/job"
	"github.com/lowbarena/lowbarena/services/runner/loadgen"
	"github.com/lowbarena/lowbarena/services/runner/telemetry"
)

// fakeGPU is an NVML of one Hopper device (compute capability 9.0, named
// as the fake it is) whose used memory the test sets: there is no GPU on
// the machines the tests run on.
func fakeGPU(t *testing.T, used *atomic.Uint64) *telemetry.Source {
	t.Helper()
	dev := &mock.Device{
		GetNameFunc: func() (string, nvml.Return) { return "NVIDIA H100 80GB HBM3 (test fake)", nvml.SUCCESS },
		GetUUIDFunc: func() (string, nvml.Return) { return "GPU-fake", nvml.SUCCESS },
		GetMemoryInfo_v2Func: func() (nvml.Memory_v2, nvml.Return) {
			return nvml.Memory_v2{Total: 80 << 30, Used: used.Load()}, nvml.SUCCESS
		},
		GetCudaComputeCapabilityFunc: func() (int, int, nvml.Return) { return 9, 0, nvml.SUCCESS },
		GetUtilizationRatesFunc:      func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{}, nvml.SUCCESS },
		GetPowerUsageFunc:            func() (uint32, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED },
	}
	src, err := telemetry.FromNVML(&mock.Interface{
		InitFunc:                   func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:               func() nvml.Return { return nvml.SUCCESS },
		DeviceGetCountFunc:         func() (int, nvml.Return) { return 1, nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(int) (nvml.Device, nvml.Return) { return dev, nvml.SUCCESS },
	}, false, 0)
	require.NoError(t, err)
	return src
}

// TestPreflightRefusals: what no engine start could measure or serve is
// refused before anything starts, each with its own reason and sentence:
// a real engine on a runner without NVML, an FP4 KV cache on Hopper, a
// context longer than the model's, and a GPU that did not return to its
// idle baseline. A refusal that is the pod's (no NVML, a held device) is
// a job.Refusal, handed back; one that is the submission's is an engine
// failure.
func TestPreflightRefusals(t *testing.T) {
	ck := writeCheckpoint(t, "BF16", 1<<20) // max_position_embeddings 32768
	wl := []loadgen.Workload{{Name: "serve", Concurrency: 1, Requests: 1, PromptWords: 8, MaxTokens: 4}}
	var used atomic.Uint64
	used.Store(1 << 30)
	gpu := fakeGPU(t, &used)
	// Never started: each case is refused first. "vllm" is not on PATH.
	vllm := "vllm serve {{.Checkpoint}} --port {{.Port}} --kv-cache-dtype {{.KVCacheDType}}{{if .MaxModelLen}} --max-model-len {{.MaxModelLen}}{{end}}"
	for _, tc := range []struct {
		name    string
		nvml    *telemetry.Source
		command string
		kv      string
		maxLen  int
		held    bool
		code    reason.Code
		refusal bool
		says    string
	}{
		{"real engine without NVML", nil, vllm, "auto", 0, false, reason.NoGPUTelemetry, true, "vllm, a real engine, and this runner has no NVML"},
		{"sglang without NVML", nil, "python3 -m sglang.launch_server --model-path {{.Checkpoint}} --port {{.Port}}", "auto", 0, false, reason.NoGPUTelemetry, true, "sglang, a real engine"},
		{"fp4 kv on hopper", gpu, vllm, "nvfp4", 0, false, reason.EngineKVDTypeUnsupportedOnGPU, false, `"nvfp4" is an FP4 cache, which needs a GPU of compute capability 10.0`},
		{"sglang's fp4 name on hopper", gpu, vllm, "fp4_e2m1", 0, false, reason.EngineKVDTypeUnsupportedOnGPU, false, "is 9.0"},
		{"context longer than the model's", gpu, vllm, "auto", 40000, false, reason.EngineContextTooLong, false,
			"needs a context of 40000 tokens and the model's own is 32768 (max_position_embeddings in its config.json)"},
		{"device held by something else", gpu, vllm, "auto", 0, true, reason.DeviceNotAtBaseline, true, "did not return to its idle baseline"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &job.Runner{NVML: tc.nvml, BaselineWait: 100 * time.Millisecond}
			if tc.held {
				_, err := gpu.WaitIdle(context.Background(), time.Second, time.Millisecond, 0) // the idle baseline: 1 GiB
				require.NoError(t, err)
				used.Store(20 << 30)
				defer used.Store(1 << 30)
			}
			_, err := r.Serve(context.Background(), job.Launch{Run: "candidate", Command: tc.command, Checkpoint: ck, KVCacheDType: tc.kv,
				MaxNumSeqs: 8, MaxModelLen: tc.maxLen}, wl)
			require.Error(t, err)
			var code reason.Code
			var msg string
			if rf := job.AsRefusal(err); rf != nil {
				require.True(t, tc.refusal, "%v", err)
				code, msg = rf.Reason, rf.Message
			} else {
				f := engine.AsFailure(err)
				require.NotNil(t, f, "%v", err)
				require.False(t, tc.refusal, "%v", err)
				code, msg = f.Reason, f.Message
			}
			require.Equal(t, tc.code, code, msg)
			require.Contains(t, msg, tc.says)
		})
	}
	// The same checks pass what fits: a context within the model's and
	// an FP8 cache on Hopper reach the engine (which is not installed).
	r := &job.Runner{NVML: gpu, BaselineWait: time.Second, HealthTimeout: 5 * time.Second}
	_, err := r.Serve(context.Background(), job.Launch{Run: "candidate", Command: vllm, Checkpoint: ck, KVCacheDType: "fp8", MaxModelLen: 4096}, wl)
	require.Equal(t, reason.EngineBadCommand, engine.AsFailure(err).Reason, "%v", err)
}

// TestModelMaxLen: the model's own context as vLLM derives it from
// config.json: the smallest length key, stretched by RoPE scaling except
// where max_position_embeddings is already the stretched length.
func TestModelMaxLen(t *testing.T) {
	for _, tc := range []struct {
		name, cfg string
		want      int
	}{
		{"plain", `{"max_position_embeddings": 40960}`, 40960},
		{"smallest key wins", `{"max_position_embeddings": 8192, "seq_length": 4096}`, 4096},
		{"yarn from the original length", `{"max_position_embeddings": 40960, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}`, 131072},
		{"linear", `{"max_position_embeddings": 4096, "rope_scaling": {"type": "linear", "factor": 2.0}}`, 8192},
		{"llama3 is stretched already", `{"max_position_embeddings": 131072, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}`, 131072},
		{"a multimodal model's text", `{"text_config": {"max_position_embeddings": 32768}}`, 32768},
		{"none stated", `{"hidden_size": 256}`, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), []byte(tc.cfg), 0o644))
			got, _, err := job.ModelMaxLen(dir)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), []byte("{"), 0o644))
	_, _, err := job.ModelMaxLen(dir)
	require.Error(t, err)
}

// TestEngineRefusalsInTheirOwnWords: what the engines themselves refuse,
// as the pinned releases print it (simengine imitating each), ends the
// job with its own reason: a command line the engine's argparse refuses,
// a context longer than the model's (asked of the engine directly, past
// the runner's own check), and a static fraction too small for the
// weights.
func TestEngineRefusalsInTheirOwnWords(t *testing.T) {
	ck := writeCheckpoint(t, "BF16", 4<<20) // 32 GiB as the imitations scale it; max_position_embeddings 32768
	wl := []loadgen.Workload{{Name: "serve", Concurrency: 1, Requests: 1, PromptWords: 8, MaxTokens: 4}}
	for _, tc := range []struct {
		name, engine, template string
		code                   reason.Code
		phase                  string
	}{
		{"an unknown flag", "vllm", vllmTemplate + " --no-such-flag 1", reason.EngineBadFlags, ""},
		{"a context longer than the model's", "vllm", vllmTemplate + " --max-model-len 65536", reason.EngineContextTooLong, ""},
		{"sglang's context check", "sglang", sglangTemplate + " --context-length 65536", reason.EngineContextTooLong, ""},
		{"a static fraction below the weights", "sglang", sglangTemplate + " --mem-fraction-static 0.1", reason.EngineOOM, engine.PhaseKVCache},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _, _ := runner(t)
			_, err := r.Serve(context.Background(), job.Launch{Run: "candidate", Command: imitation(tc.engine, tc.template), Checkpoint: ck,
				KVCacheDType: "auto", MaxNumSeqs: 8}, wl)
			f := engine.AsFailure(err)
			require.NotNil(t, f, "%v", err)
			require.Equal(t, tc.code, f.Reason, f.Message)
			require.Equal(t, tc.phase, f.Phase)
		})
	}
}
