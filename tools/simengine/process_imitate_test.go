package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lowbarena/lowbarena/domain/examples"
	"github.com/stretchr/testify/require"
)

var (
	exampleOnce sync.Once
	exampleDir  string
	exampleErr  error
)

// exampleBF16 is the example campaign's BF16 reference checkpoint, written
// once for the imitation process tests.
func exampleBF16(t *testing.T) string {
	t.Helper()
	exampleOnce.Do(func() {
		dir := filepath.Join(filepath.Dir(binary(t)), "examples")
		if _, exampleErr = examples.Write(dir); exampleErr == nil {
			exampleDir = filepath.Join(dir, examples.SubmissionsDir, "bf16-reference")
		}
	})
	require.NoError(t, exampleErr)
	return exampleDir
}

// startImitation starts `simengine --imitate ENGINE [sim...] -- argv...`.
func startImitation(t *testing.T, engine string, sim []string, argv ...string) *proc {
	t.Helper()
	args := append([]string{"--imitate", engine}, sim...)
	args = append(append(args, "--"), argv...)
	p := &proc{cmd: exec.Command(binary(t), args...), stderr: &syncBuffer{}, done: make(chan error, 1)}
	p.cmd.Stderr = p.stderr
	require.NoError(t, p.cmd.Start())
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
		}
	})
	return p
}

func getStatus(url string) int {
	resp, err := http.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestImitationProcess starts each imitation as the runner does and checks
// the process as the runner sees it: the port answers 503 from the start,
// the simulated device's used memory rises through the start-up to what
// the engine holds while serving (computed independently by Imitate),
// health turns 200, the engine's start-up lines are in the log, and no
// arena endpoint is served.
func TestImitationProcess(t *testing.T) {
	ck := exampleBF16(t)
	for _, tc := range []struct {
		engine, health string
		argv           func(port string) []string
		wantLog        string
	}{
		{"vllm", "/health", func(port string) []string {
			return []string{"vllm", "serve", ck, "--host", "127.0.0.1", "--port", port, "--dtype", "auto", "--kv-cache-dtype", "fp8",
				"--max-num-seqs", "64", "--max-model-len", "4096", "--no-enable-prefix-caching"}
		}, "] Maximum concurrency for 4,096 tokens per request: "},
		{"sglang", "/health_generate", func(port string) []string {
			return []string{"python3", "-m", "sglang.launch_server", "--model-path", ck, "--host", "127.0.0.1", "--port", port, "--kv-cache-dtype", "fp8_e4m3",
				"--max-running-requests", "64", "--context-length", "4096", "--disable-radix-cache", "--enable-metrics", "--decode-log-interval", "1"}
		}, "] Capture target decode CUDA graph end. elapsed="},
	} {
		t.Run(tc.engine, func(t *testing.T) {
			port := strconv.Itoa(freePort(t))
			argv := tc.argv(port)
			p := startImitation(t, tc.engine, []string{"--gpu", "h100", "--source-config", qwen3_8B, "--startup-seconds", "1.5"}, argv...)
			url := "http://127.0.0.1:" + port
			var used []int64
			var codes []int
			require.Eventually(t, func() bool {
				resp, err := http.Get(url + "/simulated/device")
				if err != nil {
					return false
				}
				var d DeviceReport
				require.NoError(t, json.NewDecoder(resp.Body).Decode(&d))
				resp.Body.Close()
				require.Equal(t, DeviceReport{GPU: "NVIDIA H100 (simulated)", Simulated: true, TotalBytes: 81559 * MiB, UsedBytes: d.UsedBytes, ComputeCapability: "9.0"}, d)
				used = append(used, d.UsedBytes)
				code := getStatus(url + tc.health)
				codes = append(codes, code)
				return code == 200
			}, 10*time.Second, 20*time.Millisecond, "stderr:\n%s", p.stderr.String())
			require.Equal(t, 503, codes[0], "health answers 503 while the engine starts")

			// What the engine holds while serving, planned here.
			ea, err := ParseEngineArgv(tc.engine, argv)
			require.NoError(t, err)
			m, err := LoadCheckpoint(ck)
			require.NoError(t, err)
			full, err := ReadSourceArch(qwen3_8B)
			require.NoError(t, err)
			fsz, err := FullSizeOf(ck, m, full)
			require.NoError(t, err)
			cfg := ModelConfig{Layers: full.Layers, KVHeads: full.KVHeads, Heads: full.Heads, HeadDim: full.HeadDim, Hidden: full.Hidden, MaxPos: full.MaxPos}
			want := int64(Imitate(ImitateInput{GPU: GPUs["h100"], Config: cfg, Weights: fsz.Weights, Args: ea, Startup: 1.5}).ServingBytes())
			require.Equal(t, want, used[len(used)-1])
			require.Less(t, used[0], want, "the device filled during the start-up")
			for i := 1; i < len(used); i++ {
				if tc.engine == "sglang" {
					require.GreaterOrEqual(t, used[i], used[i-1], "SGLang's device only rises")
				}
			}
			require.Equal(t, 404, getStatus(url+"/v1/lowbarena/memory"), "a real engine serves no arena endpoint")
			resp := post(t, t.Context(), url+"/v1/completions", map[string]any{"prompt": testPrompt, "max_tokens": 5})
			require.Equal(t, 200, resp.StatusCode)
			require.Contains(t, p.stderr.String(), tc.wantLog)
			if tc.engine == "sglang" {
				require.Contains(t, p.stderr.String(), "] Decode batch, #running-req: 1, ")
			}
			require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
			require.Equal(t, 0, p.wait(t, 5*time.Second))
		})
	}
}

// TestImitationRefusals checks the exit status and last log lines of each
// refusal, as the engine prints them.
func TestImitationRefusals(t *testing.T) {
	ck := exampleBF16(t)
	sim := []string{"--gpu", "h100", "--source-config", qwen3_8B, "--startup-seconds", "0.2"}
	for _, tc := range []struct {
		name     string
		engine   string
		sim      []string
		argv     []string
		exit     int
		wantLast string
	}{
		{"vllm unknown flag", "vllm", sim, []string{"vllm", "serve", ck, "--frobnicate"}, 2,
			"usage: vllm [-h] [-v] {chat,complete,serve,bench,collect-env,run-batch} ...\nvllm: error: unrecognized arguments: --frobnicate"},
		{"vllm FP4 KV", "vllm", sim, []string{"vllm", "serve", ck, "--kv-cache-dtype", "nvfp4"}, 2,
			"vllm serve: error: argument --kv-cache-dtype: invalid choice: 'nvfp4' (choose from auto, bfloat16, fp8, fp8_e4m3, fp8_e5m2, fp8_inc, fp8_ds_mla)"},
		{"vllm context too long", "vllm", sim, []string{"vllm", "serve", ck, "--max-model-len", "131072"}, 1,
			"is greater than the derived max_model_len (max_position_embeddings=40960 or model_max_length=None in model's config.json)"},
		{"vllm one request does not fit", "vllm", sim, []string{"vllm", "serve", ck, "--kv-cache-memory-bytes", "100000000"}, 1,
			"ValueError: To serve at least one request with the models's max seq len (40960)"},
		{"sglang missing model path", "sglang", sim, []string{"python3", "-m", "sglang.launch_server", "--port", "1"}, 2,
			"launch_server.py: error: the following arguments are required: --model-path/--model"},
		{"sglang not enough memory", "sglang", sim, []string{"python3", "-m", "sglang.launch_server", "--model-path", ck, "--mem-fraction-static", "0.15"}, 1,
			"RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: mem_fraction_static=0.15"},
		{"sglang context too long", "sglang", sim, []string{"python3", "-m", "sglang.launch_server", "--model-path", ck, "--context-length", "65536"}, 1,
			"ValueError: Warning: User-specified context_length (65536) is greater than the derived context_length (40960)."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startImitation(t, tc.engine, tc.sim, tc.argv...)
			require.Equal(t, tc.exit, p.wait(t, 5*time.Second), "stderr:\n%s", p.stderr.String())
			log := strings.TrimRight(p.stderr.String(), "\n")
			lines := strings.Split(log, "\n")
			require.Contains(t, strings.Join(lines[max(len(lines)-3, 0):], "\n"), tc.wantLast)
		})
	}
	// simengine's own refusals in imitate mode.
	for _, args := range [][]string{
		{"--imitate", "vllm", "--checkpoint", ck, "--", "vllm", "serve", ck},
		{"--imitate", "vllm"},
		{"--imitate", "tgi", "--", "tgi"},
	} {
		p := &proc{cmd: exec.Command(binary(t), args...), stderr: &syncBuffer{}, done: make(chan error, 1)}
		p.cmd.Stderr = p.stderr
		require.NoError(t, p.cmd.Start())
		go func() { p.done <- p.cmd.Wait() }()
		require.Equal(t, 2, p.wait(t, 5*time.Second), "%v", args)
		require.Contains(t, p.stderr.String(), "simengine: ", "%v", args)
	}
}

// TestDeviceEndpoint checks GET /simulated/device: in plain mode it is the
// plan's GPU with the used bytes of /v1/lowbarena/memory; with an imitated
// engine's Device, what the engine holds.
func TestDeviceEndpoint(t *testing.T) {
	ts, s := newTestServer(t, "none")
	resp, err := http.Get(ts.URL + "/simulated/device")
	require.NoError(t, err)
	defer resp.Body.Close()
	var d DeviceReport
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&d))
	require.Equal(t, DeviceReport{GPU: "NVIDIA H200 (simulated)", Simulated: true, TotalBytes: 141 * GiB, UsedBytes: s.Memory().UsedBytes, ComputeCapability: "9.0"}, d)
	require.Positive(t, d.UsedBytes)

	dev := &Device{GPU: GPUs["b200"], Total: GPUs["b200"].NVMLBytes}
	dev.SetUsed(3 * GiB)
	s2 := &Server{Plan: s.Plan, Sched: s.Sched, Device: dev, Imitate: "sglang", MetricsOff: true}
	rec := httptest.NewRecorder()
	s2.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/simulated/device", nil))
	require.JSONEq(t, `{"gpu":"NVIDIA B200 (simulated)","simulated":true,"total_bytes":192265846784,"used_bytes":3221225472,"compute_capability":"10.0"}`, rec.Body.String())
	for path, want := range map[string]int{"/metrics": 404, "/health_generate": 503, "/health": 503} {
		rec := httptest.NewRecorder()
		s2.Handler().ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		require.Equal(t, want, rec.Code, path)
	}
}
