package engine_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/examples"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/services/runner/engine"
)

// The test binary doubles as a fake engine: with LOWBARENA_FAKE_ENGINE set
// it behaves as that mode says, on the port given as its argument.
func TestMain(m *testing.M) {
	if mode := os.Getenv("LOWBARENA_FAKE_ENGINE"); mode != "" {
		fakeEngine(mode, os.Args[len(os.Args)-1])
		return
	}
	os.Exit(m.Run())
}

func fakeEngine(mode, port string) {
	if mode == "replay" {
		// An engine that prints a recorded log and dies before it
		// listens, as the round page's SGLang engines did.
		b, err := os.ReadFile(os.Getenv("LOWBARENA_FAKE_LOG"))
		if err != nil {
			panic(err)
		}
		os.Stderr.Write(b)
		os.Exit(1)
	}
	fmt.Println("INFO starting fake engine, mode", mode)
	switch mode {
	case "oom":
		fmt.Fprintln(os.Stderr, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
		os.Exit(1)
	case "crash":
		fmt.Fprintln(os.Stderr, "RuntimeError: engine core initialisation failed")
		os.Exit(2)
	case "badckpt":
		fmt.Fprintln(os.Stderr, "ERROR safetensors: header_truncated: model.safetensors")
		os.Exit(1)
	}
	if mode == "crash-leaving-child" {
		// An engine that starts a worker sharing its log, then fails
		// before it is healthy: the worker keeps the log pipes open.
		child := exec.Command("sleep", "300")
		child.Stdout, child.Stderr = os.Stdout, os.Stderr
		_ = child.Start()
		fmt.Println("child", child.Process.Pid)
		fmt.Fprintln(os.Stderr, "RuntimeError: Engine core initialization failed. See root cause above.")
		os.Exit(3)
	}
	if mode == "stubborn" {
		signal.Ignore(syscall.SIGTERM)
		child := exec.Command("sleep", "300")
		_ = child.Start()
		fmt.Println("child", child.Process.Pid)
	}
	status := http.StatusOK
	if mode == "unhealthy" {
		status = http.StatusServiceUnavailable
	}
	http.HandleFunc("/health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(status) })
	go func() { _ = http.ListenAndServe("127.0.0.1:"+port, nil) }()
	if mode == "die" {
		time.Sleep(300 * time.Millisecond)
		fmt.Fprintln(os.Stderr, "CUDA error: an illegal memory access was encountered")
		os.Exit(1)
	}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM)
	<-ch
	os.Exit(0)
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func options(t *testing.T, mode string) engine.Options {
	port := freePort(t)
	return engine.Options{Command: []string{os.Args[0], strconv.Itoa(port)}, Env: []string{"LOWBARENA_FAKE_ENGINE=" + mode},
		Port: port, HealthTimeout: 3 * time.Second, StopGrace: 300 * time.Millisecond}
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

func TestStartAndStop(t *testing.T) {
	t.Parallel()
	e, err := engine.Start(context.Background(), options(t, "healthy"))
	require.NoError(t, err)
	require.True(t, alive(e.PID()))
	require.Contains(t, e.Tail(), "starting fake engine")
	e.Stop()
	<-e.Exited()
	e.Stop() // twice is fine
}

// TestStopEndsTheWholeGroup: an engine that ignores SIGTERM and has a
// child is killed with its child.
func TestStopEndsTheWholeGroup(t *testing.T) {
	t.Parallel()
	e, err := engine.Start(context.Background(), options(t, "stubborn"))
	require.NoError(t, err)
	var child int
	require.Eventually(t, func() bool {
		m := regexp.MustCompile(`child (\d+)`).FindStringSubmatch(e.Tail())
		if m != nil {
			child, _ = strconv.Atoi(m[1])
		}
		return m != nil
	}, 5*time.Second, 20*time.Millisecond)
	require.True(t, alive(child))
	e.Stop()
	select {
	case <-e.Exited():
	case <-time.After(5 * time.Second):
		t.Fatal("the engine outlived Stop")
	}
	require.Eventually(t, func() bool { return !alive(child) }, 5*time.Second, 20*time.Millisecond, "no engine child is left behind")
}

func TestStartClassifiesFailures(t *testing.T) {
	t.Parallel()
	cases := []struct {
		mode   string
		reason reason.Code
		says   string
	}{
		{"oom", reason.EngineOOM, "engine died before becoming healthy"},
		{"crash", reason.EngineCrashed, "last error: [Errno 111] Connection refused); container log tail: INFO starting fake engine, mode crash RuntimeError: engine core initialisation failed"},
		{"badckpt", reason.EngineBadCheckpoint, "header_truncated"},
		{"unhealthy", reason.EngineHealthTimeout, "did not become healthy within 3s"},
	}
	for _, tc := range cases {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			o := options(t, tc.mode)
			_, err := engine.Start(context.Background(), o)
			f := engine.AsFailure(err)
			require.NotNil(t, f, "%v", err)
			require.Equal(t, tc.reason, f.Reason, f.Message)
			require.Contains(t, f.Message, tc.says)
			require.Contains(t, f.Message, "container log tail: ")
		})
	}
}

// TestEngineThatExitsBeforeHealthyFailsAtOnce: an engine whose process
// exits before it is healthy fails Start with its exit status and log
// tail, though a child it started still holds its log pipes (as an
// engine core or a wrapper's background process does), and the health
// deadline is an hour away: Start returns well before it (the test's
// context bounds the wait; it is not a speed assertion), and the child
// is ended with the engine's group.
func TestEngineThatExitsBeforeHealthyFailsAtOnce(t *testing.T) {
	t.Parallel()
	o := options(t, "crash-leaving-child")
	o.HealthTimeout = time.Hour
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := engine.Start(ctx, o)
	require.NoError(t, ctx.Err(), "Start waited for the pipes of the engine's child, not for the engine")
	f := engine.AsFailure(err)
	require.NotNil(t, f, "%v", err)
	require.Equal(t, reason.EngineCrashed, f.Reason, f.Message)
	require.Equal(t, "exit status 3", f.Exit)
	require.Contains(t, f.Message, "engine died before becoming healthy")
	require.Contains(t, f.LogTail, "Engine core initialization failed")
	m := regexp.MustCompile(`child (\d+)`).FindStringSubmatch(f.LogTail)
	require.NotNil(t, m, f.LogTail)
	child, _ := strconv.Atoi(m[1])
	require.Eventually(t, func() bool { return !alive(child) }, 5*time.Second, 20*time.Millisecond, "the engine's child is ended with it")
}

func TestEngineDiesWhileServing(t *testing.T) {
	t.Parallel()
	e, err := engine.Start(context.Background(), options(t, "die"))
	require.NoError(t, err)
	select {
	case <-e.Exited():
	case <-time.After(10 * time.Second):
		t.Fatal("the engine did not die")
	}
	f := e.Failure()
	require.Equal(t, reason.EngineCrashed, f.Reason)
	require.Contains(t, f.Message, "engine died while serving")
	require.Contains(t, f.Message, "illegal memory access")
	e.Stop()
}

func TestRender(t *testing.T) {
	t.Parallel()
	got, err := engine.Render("simengine --checkpoint {{.Checkpoint}} --port {{.Port}} --kv-cache-dtype {{.KVCacheDType}} --max-num-seqs {{.MaxNumSeqs}} --gpu-memory-gib {{.GPUMemoryGiB}}",
		engine.Params{Checkpoint: "/ck", Port: 8001, KVCacheDType: "fp8", MaxNumSeqs: 64, GPUMemoryGiB: 22.653})
	require.NoError(t, err)
	require.Equal(t, []string{"simengine", "--checkpoint", "/ck", "--port", "8001", "--kv-cache-dtype", "fp8", "--max-num-seqs", "64", "--gpu-memory-gib", "22.653"}, got)

	// The documented vLLM and SGLang templates: the budget as a fraction
	// of the GPU (22.653 GiB of an H200's 141 GiB is 0.1607), only when
	// there is one, and each engine's name for the KV dtype.
	vllm, sglang := examples.VLLMEngineCommand, examples.SGLangEngineCommand
	for _, tc := range []struct {
		tmpl string
		p    engine.Params
		want string
	}{
		{vllm, engine.Params{Checkpoint: "/ck", Port: 8001, KVCacheDType: "auto", MaxNumSeqs: 256},
			"vllm serve /ck --host 127.0.0.1 --port 8001 --dtype auto --kv-cache-dtype auto --max-num-seqs 256 --max-model-len 32768 --no-enable-prefix-caching"},
		{vllm, engine.Params{Checkpoint: "/ck", Port: 8001, KVCacheDType: "nvfp4", MaxNumSeqs: 256, GPUMemoryGiB: 22.653, GPUTotalGiB: 141},
			"vllm serve /ck --host 127.0.0.1 --port 8001 --dtype auto --kv-cache-dtype nvfp4 --max-num-seqs 256 --max-model-len 32768 --no-enable-prefix-caching --gpu-memory-utilization 0.1607"},
		{sglang, engine.Params{Checkpoint: "/ck", Port: 30000, KVCacheDType: "fp8", MaxNumSeqs: 64, GPUMemoryGiB: 70.5, GPUTotalGiB: 141},
			"python3 -m sglang.launch_server --model-path /ck --host 127.0.0.1 --port 30000 --kv-cache-dtype fp8_e4m3 --max-running-requests 64 --context-length 32768 --disable-radix-cache --enable-metrics --mem-fraction-static 0.5"},
		{"vllm serve {{.Checkpoint}} --kv-cache-memory-bytes {{.GPUMemoryBytes}}", engine.Params{Checkpoint: "/ck", GPUMemoryGiB: 1.5},
			"vllm serve /ck --kv-cache-memory-bytes 1610612736"},
	} {
		got, err := engine.Render(tc.tmpl, tc.p)
		require.NoError(t, err)
		require.Equal(t, tc.want, strings.Join(got, " "))
	}
	for _, bad := range []string{"", "vllm {{.Nope}}", "vllm {{.Port"} {
		_, err := engine.Render(bad, engine.Params{})
		require.Equal(t, reason.EngineBadCommand, engine.AsFailure(err).Reason, bad)
	}
	_, err = engine.Start(context.Background(), engine.Options{Command: []string{"/nonexistent/engine"}, Port: 1})
	require.Equal(t, reason.EngineBadCommand, engine.AsFailure(err).Reason)
}
