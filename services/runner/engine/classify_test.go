package engine_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/services/runner/engine"
)

// TestClassifyRealLogTails classifies log tails the engines really printed
// (testdata/logs/SOURCES.md says where each comes from).
func TestClassifyRealLogTails(t *testing.T) {
	t.Parallel()
	cases := []struct {
		file   string
		reason reason.Code
		phase  string
	}{
		{"vllm_weights_oom.log", reason.EngineOOM, engine.PhaseWeights},
		{"vllm_cuda_graph_oom.log", reason.EngineOOM, engine.PhaseCUDAGraph},
		{"vllm_kv_cache_oom.log", reason.EngineOOM, engine.PhaseKVCache},
		{"sglang_kv_cache_oom.log", reason.EngineOOM, engine.PhaseKVCache},
		{"vllm_bad_checkpoint.log", reason.EngineBadCheckpoint, ""},
		{"vllm_unsupported_quantization.log", reason.EngineUnsupportedQuantization, ""},
		{"sglang_unsupported_kv_dtype.log", reason.EngineUnsupportedQuantization, ""},
		{"vllm_port_in_use.log", reason.EnginePortInUse, ""},
		{"vllm_nccl.log", reason.EngineNCCLError, ""},
		// vLLM's INFO advice mentions running out of memory; the engine
		// died of something else.
		{"vllm_advice_then_crash.log", reason.EngineCrashed, ""},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			b, err := os.ReadFile(filepath.Join("testdata", "logs", tc.file))
			require.NoError(t, err)
			code, phase := engine.Classify(string(b))
			require.Equal(t, tc.reason, code)
			require.Equal(t, tc.phase, phase)
		})
	}
}

// roundPage renders text as the arena's round page shows it: underscores
// become spaces and runs of white space one space.
func roundPage(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "_", " ")), " ")
}

// TestGoldenRoundPageSGLangOOM: the round page's two SGLang engines died
// of CUDA out of memory while capturing CUDA graphs, before they became
// healthy. A real process prints that log tail and dies without
// listening; the runner classifies it engine_oom and writes the page's
// reason sentence, the refused health probe included.
func TestGoldenRoundPageSGLangOOM(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile("../../../schemas/testdata/lowbarena/round_page.txt")
	require.NoError(t, err)
	var want []string
	for _, line := range strings.Split(string(page), "\n") {
		if s, ok := strings.CutPrefix(line, "disqualified"); ok {
			want = append(want, s)
		}
	}
	require.Len(t, want, 2, "the page's two disqualified entries")
	tmpl, err := os.ReadFile("testdata/sglang_cuda_graph_oom.log.tmpl")
	require.NoError(t, err)
	entries := []map[string]string{
		{"{gpu}": "1", "{free}": "99.06", "{used}": "31.10", "{at}": "2026-09-17 14:05:37"},
		{"{gpu}": "3", "{free}": "97.06", "{used}": "31.11", "{at}": "2026-09-17 14:11:47"},
	}
	for i, vals := range entries {
		log := string(tmpl)
		for k, v := range vals {
			log = strings.ReplaceAll(log, k, v)
		}
		path := filepath.Join(t.TempDir(), "container.log")
		require.NoError(t, os.WriteFile(path, []byte(log), 0o644))
		o := options(t, "replay")
		o.Env = append(o.Env, "LOWBARENA_FAKE_LOG="+path)
		o.TailLines = 200
		_, err := engine.Start(context.Background(), o)
		f := engine.AsFailure(err)
		require.NotNil(t, f, "%v", err)
		require.Equal(t, reason.EngineOOM, f.Reason)
		require.Equal(t, engine.PhaseCUDAGraph, f.Phase)
		require.Equal(t, "exit status 1", f.Exit)
		require.True(t, strings.HasPrefix(f.Message, "engine died before becoming healthy (last error: [Errno 111] Connection refused); container log tail: m tokens) File "), f.Message)
		require.Equal(t, want[i], roundPage(f.Message))
	}
}

func TestDetect(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cmd  string
		want engine.Family
	}{
		{"vllm serve /ck --port 8001", engine.FamilyVLLM},
		{"/opt/venv/bin/vllm serve /ck", engine.FamilyVLLM},
		{"python3 -m vllm.entrypoints.openai.api_server --model /ck", engine.FamilyVLLM},
		{"python3 -m sglang.launch_server --model-path /ck", engine.FamilySGLang},
		{"sglang serve --model-path /ck", engine.FamilySGLang},
		{"/bin/simengine --checkpoint /ck", engine.FamilySimengine},
		{"simengine --checkpoint /ck --imitate sglang", engine.FamilySGLang},
		{"simengine --imitate=vllm --checkpoint /ck", engine.FamilyVLLM},
		{"llama-server -m /ck", engine.FamilyOpenAI},
	} {
		require.Equal(t, tc.want, engine.Detect(strings.Fields(tc.cmd)), tc.cmd)
	}
	require.Equal(t, "/health_generate", engine.FamilySGLang.HealthPath)
}
