package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lowbarena/lowbarena/domain/safetensors"
	"github.com/stretchr/testify/require"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// binary builds simengine once for all process tests.
func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "simengine-test")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "simengine")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = errors.New(string(out))
		}
	})
	require.NoError(t, buildErr)
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	if patchedDir != "" {
		os.RemoveAll(patchedDir)
	}
	os.Exit(code)
}

// tinyCheckpoint writes a two-layer BF16 checkpoint.
func tinyCheckpoint(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tiny-model")
	require.NoError(t, os.Mkdir(dir, 0o755))
	var w safetensors.Writer
	require.NoError(t, w.Add(safetensors.Tensor{Name: "model.embed_tokens.weight", DType: safetensors.BF16, Shape: []int64{256, 64}}))
	for _, n := range []string{"model.layers.0.mlp.weight", "model.layers.1.mlp.weight"} {
		require.NoError(t, w.Add(safetensors.Tensor{Name: n, DType: safetensors.BF16, Shape: []int64{64, 64}}))
	}
	_, err := w.WriteFile(filepath.Join(dir, "model.safetensors"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"),
		[]byte(`{"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"hidden_size":64,"max_position_embeddings":4096}`), 0o644))
	return dir
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

type proc struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
	done   chan error
	url    string
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func start(t *testing.T, checkpoint string, extra ...string) *proc {
	t.Helper()
	port := freePort(t)
	args := append([]string{"--checkpoint", checkpoint, "--port", strconv.Itoa(port), "--startup-seconds", "0.1", "--scale", "1000"}, extra...)
	p := &proc{cmd: exec.Command(binary(t), args...), stderr: &syncBuffer{}, done: make(chan error, 1), url: "http://127.0.0.1:" + strconv.Itoa(port)}
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

func (p *proc) wait(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case err := <-p.done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		require.NoError(t, err)
		return 0
	case <-time.After(within):
		t.Fatalf("process did not exit within %v; stderr:\n%s", within, p.stderr.String())
		return -1
	}
}

func TestProcessServesAndStopsOnSIGTERM(t *testing.T) {
	p := start(t, tinyCheckpoint(t))
	require.Eventually(t, func() bool {
		resp, err := http.Get(p.url + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}, 5*time.Second, 20*time.Millisecond, "stderr:\n%s", p.stderr.String())

	resp := post(t, context.Background(), p.url+"/v1/completions", map[string]any{"model": "tiny-model", "prompt": testPrompt, "max_tokens": 12, "stream": true})
	require.Equal(t, 200, resp.StatusCode)
	res := readSSE(t, resp.Body, false)
	require.True(t, res.done)
	require.Len(t, res.content, 12)
	require.Equal(t, int64(12), res.usage.CompletionTokens)

	log := p.stderr.String()
	require.Contains(t, log, "Loading weights took")
	require.Contains(t, log, "GPU KV cache size:")
	require.Contains(t, log, "Uvicorn running on http://127.0.0.1:")

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	start := time.Now()
	require.Equal(t, 0, p.wait(t, 3*time.Second))
	require.Less(t, time.Since(start), 2*time.Second)
}

func TestProcessFailures(t *testing.T) {
	corrupt := tinyCheckpoint(t)
	require.NoError(t, os.WriteFile(filepath.Join(corrupt, "model.safetensors"), []byte("\x10\x00\x00\x00\x00\x00\x00\x00{not a header}"), 0o644))
	for _, tc := range []struct {
		name    string
		dir     string
		args    []string
		wantLog string
	}{
		{"crash-on-start", tinyCheckpoint(t), []string{"--fault", "crash-on-start"}, "ERROR"},
		{"corrupt checkpoint", corrupt, nil, "safetensors: "},
		{"out of memory", tinyCheckpoint(t), []string{"--scale", "1e8", "--gpu-memory-gib", "20"}, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate"},
		{"die-after-tokens", tinyCheckpoint(t), []string{"--fault", "die-after-tokens=3"}, "CUDA error: an illegal memory access was encountered"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := start(t, tc.dir, tc.args...)
			if tc.name == "die-after-tokens" {
				require.Eventually(t, func() bool {
					resp, err := http.Get(p.url + "/health")
					if err == nil {
						resp.Body.Close()
					}
					return err == nil && resp.StatusCode == 200
				}, 5*time.Second, 20*time.Millisecond)
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				defer cancel()
				resp := post(t, ctx, p.url+"/v1/completions", map[string]any{"prompt": "x", "max_tokens": 10, "stream": true})
				res := readSSE(t, resp.Body, false)
				require.False(t, res.done)
			}
			require.Equal(t, 1, p.wait(t, 5*time.Second), "stderr:\n%s", p.stderr.String())
			require.Contains(t, p.stderr.String(), tc.wantLog)
			if tc.name == "corrupt checkpoint" {
				require.Regexp(t, `(?m)^ERROR .*safetensors: `, p.stderr.String())
				require.NotContains(t, p.stderr.String(), "Uvicorn running")
			}
		})
	}
}
