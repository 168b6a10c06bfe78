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

// The test binary doubles as a fake engine: with FAKE_ENGINE_MODE set it
// behaves as that mode says, on the port given as its last argument. (The
// name is not a LOWBARENA_* one: the engine's environment never holds
// those, see Environ.)
//
// The test process is its children's subreaper, as the runner is: an
// engine's orphans become its children, and Stop must reap them.
func TestMain(m *testing.M) {
	if mode := os.Getenv("FAKE_ENGINE_MODE"); mode != "" {
		fakeEngine(mode, os.Args[len(os.Args)-1])
		return
	}
	if err := engine.BecomeSubreaper(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

func fakeEngine(mode, port string) {
	if mode == "replay" {
		// An engine that prints a recorded log and dies before it
		// listens, as the round page's SGLang engines did.
		b, err := os.ReadFile(os.Getenv("FAKE_ENGINE_LOG"))
		if err != nil {
			panic(err)
		}
		os.Stderr.Write(b)
		os.Exit(1)
	}
	if mode == "orphan" {
		// An engine whose process exits before a child it started in
		// its group (vLLM's API server before its EngineCore): the
		// child is re-parented to the subreaper.
		child := exec.Command("sleep", "0.3")
		_ = child.Start()
		fmt.Println("child", child.Process.Pid)
		os.Exit(4)
	}
	if mode == "chatty" {
		chatty()
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
	switch mode {
	case "env":
		for _, kv := range os.Environ() {
			fmt.Println("ENV " + kv)
		}
	}
	status := http.StatusOK
	if mode == "unhealthy" {
		status = http.StatusServiceUnavailable
	}
	health := func(w http.ResponseWriter, _ *http.Request) {
		if mode == "slow-health" {
			// SGLang's /health_generate answers once a generation
			// ran, a second or more after the probe came.
			time.Sleep(3 * time.Second)
		}
		w.WriteHeader(status)
	}
	http.HandleFunc("/health", health)
	http.HandleFunc("/health_generate", health)
	http.HandleFunc("/say", func(w http.ResponseWriter, r *http.Request) { fmt.Println(r.URL.Query().Get("line")) })
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

// The lines of the chatty engine: vLLM's configuration line first, as
// vLLM prints it ("Initializing a V1 LLM engine ... with config:",
// vllm/v1/engine/core.py), then many more (its Route: lines, compile and
// tqdm output), one of 10 KiB kept whole and one of 100 KiB cut.
const (
	chattyFirst = "INFO 11-02 10:00:02 [core.py:77] Initializing a V1 LLM engine (v0.13.0) with config: model='m', speculative_config=None, kv_cache_dtype=fp8, seed=0"
	chattyLines = 2000
	longLine    = 10 << 10
	tooLongLine = 100 << 10
)

func chatty() {
	fmt.Println(chattyFirst)
	for i := range chattyLines {
		fmt.Printf("INFO 11-02 10:00:03 [launcher.py:46] Route: /v1/route%d, Methods: POST\n", i)
	}
	fmt.Println("L" + strings.Repeat("x", longLine-1))
	fmt.Println("T" + strings.Repeat("y", tooLongLine-1))
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func options(t *testing.T, mode string) engine.Options {
	port := freePort(t)
	return engine.Options{Command: []string{os.Args[0], strconv.Itoa(port)}, Env: []string{"FAKE_ENGINE_MODE=" + mode},
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
	// The child was the test process's (its subreaper's) once the
	// engine died: Stop reaped it, so no zombie of it remains either.
	select {
	case <-e.Reaped():
	case <-time.After(10 * time.Second):
		t.Fatal("Stop did not reap the engine's group")
	}
	_, err = os.Stat(fmt.Sprintf("/proc/%d", child))
	require.True(t, os.IsNotExist(err), "the child was reaped: %v", err)
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

	// The documented vLLM and SGLang templates: the campaign's context
	// when it names one; the budget replay's KV pool in bytes for vLLM
	// and as SGLang's static fraction, only in the replay; each engine's
	// name for the KV dtype.
	vllm, sglang := examples.VLLMEngineCommand, examples.SGLangEngineCommand
	for _, tc := range []struct {
		tmpl string
		p    engine.Params
		want string
	}{
		{vllm, engine.Params{Checkpoint: "/ck", Port: 8001, KVCacheDType: "auto", MaxNumSeqs: 256},
			"vllm serve /ck --host 127.0.0.1 --port 8001 --dtype auto --kv-cache-dtype auto --max-num-seqs 256 --no-enable-prefix-caching"},
		{vllm, engine.Params{Checkpoint: "/ck", Port: 8001, KVCacheDType: "fp8", MaxNumSeqs: 256, MaxModelLen: 404, GPUMemoryGiB: 18.829, GPUTotalGiB: 79.6,
			KVCacheBytes: 2221597410, MemFractionStatic: 0.2191},
			"vllm serve /ck --host 127.0.0.1 --port 8001 --dtype auto --kv-cache-dtype fp8 --max-num-seqs 256 --max-model-len 404 --no-enable-prefix-caching --kv-cache-memory-bytes 2221597410"},
		{sglang, engine.Params{Checkpoint: "/ck", Port: 30000, KVCacheDType: "fp8", MaxNumSeqs: 64, MaxModelLen: 4096},
			"python3 -m sglang.launch_server --model-path /ck --host 127.0.0.1 --port 30000 --kv-cache-dtype fp8_e4m3 --max-running-requests 64 --context-length 4096 --disable-radix-cache --enable-metrics --decode-log-interval 1"},
		{sglang, engine.Params{Checkpoint: "/ck", Port: 30000, KVCacheDType: "fp8", MaxNumSeqs: 64, MaxModelLen: 404, GPUMemoryGiB: 18.829,
			KVCacheBytes: 2221597410, MemFractionStatic: 0.2191},
			"python3 -m sglang.launch_server --model-path /ck --host 127.0.0.1 --port 30000 --kv-cache-dtype fp8_e4m3 --max-running-requests 64 --context-length 404 --disable-radix-cache --enable-metrics --decode-log-interval 1 --mem-fraction-static 0.2191"},
		{"vllm serve {{.Checkpoint}} --gpu-memory-utilization {{.GPUMemoryFraction}} {{.GPUMemoryBytes}}", engine.Params{Checkpoint: "/ck", GPUMemoryGiB: 22.653, GPUTotalGiB: 141},
			"vllm serve /ck --gpu-memory-utilization 0.1607 24323473539"},
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

// TestStartupLogKeepsEveryLineUntilHealthy: an engine prints its
// configuration line first, then 2,000 other lines, one of 10 KiB and one
// of 100 KiB, then becomes healthy. StartupLog holds all of it, the first
// line included, the 10 KiB line whole and the 100 KiB one cut at
// MaxLineBytes with a mark; Tail holds only the last TailLines; what the
// engine prints once healthy is in Tail, not in StartupLog.
func TestStartupLogKeepsEveryLineUntilHealthy(t *testing.T) {
	t.Parallel()
	o := options(t, "chatty")
	o.HealthTimeout = 20 * time.Second
	e, err := engine.Start(context.Background(), o)
	require.NoError(t, err)
	defer e.Stop()

	startup := e.StartupLog()
	lines := strings.Split(startup, "\n")
	require.Equal(t, chattyFirst, lines[0], "the configuration line, the first one")
	routes := 0
	for _, l := range lines {
		if strings.Contains(l, "] Route: /v1/route") {
			routes++
		}
	}
	require.Equal(t, chattyLines, routes, "every line until healthy")
	require.Contains(t, lines, "L"+strings.Repeat("x", longLine-1), "a 10 KiB line is kept whole")
	var cut string
	for _, l := range lines {
		if strings.HasPrefix(l, "T") {
			cut = l
		}
	}
	require.Equal(t, "T"+strings.Repeat("y", engine.MaxLineBytes-1)+fmt.Sprintf(" [line cut: %d more bytes not kept]", tooLongLine-engine.MaxLineBytes), cut)
	require.NotContains(t, e.Tail(), chattyFirst, "the tail is the last lines only")
	require.LessOrEqual(t, len(strings.Split(e.Tail(), "\n")), 40)

	time.Sleep(time.Second) // past the start-up log's grace after health
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/say?line=after-healthy", o.Port))
	require.NoError(t, err)
	resp.Body.Close()
	require.Eventually(t, func() bool { return strings.Contains(e.Tail(), "after-healthy") }, 5*time.Second, 10*time.Millisecond)
	require.NotContains(t, e.StartupLog(), "after-healthy", "the start-up log ends when the engine is healthy")
}

// TestEngineEnvironmentHoldsNoSecrets: a real engine process started from
// a runner whose environment holds hub tokens, the NATS nkey seed and the
// store's URL with its password sees none of them, and sees PATH, the
// CUDA_VISIBLE_DEVICES the runner adds, and what the operator allows.
func TestEngineEnvironmentHoldsNoSecrets(t *testing.T) {
	secrets := map[string]string{
		"LOWBARENA_REF_TOKENS": "hub.example=tok-123",
		"HF_TOKEN":             "hf_abcdef",
		"LOWBARENA_NATS_NKEY":  "SUAEXAMPLESEED",
		"LOWBARENA_STORE":      "clickhouse://runner:s3cret@store:9000/arena",
		"NATS_URL":             "nats://runner:pw@nats:4222",
		"VLLM_API_KEY":         "sk-engine",
		"MY_DB_PASSWORD":       "db-pass-42",
	}
	for k, v := range secrets {
		t.Setenv(k, v)
	}
	t.Setenv("CUDA_VISIBLE_DEVICES", "7") // the runner's own value is replaced
	t.Setenv("SITE_MIRROR", "https://mirror.example")
	t.Setenv("UNLISTED", "x")
	o := options(t, "env")
	o.Env = append(o.Env, "CUDA_VISIBLE_DEVICES=GPU-1234", "HF_TOKEN=added-by-mistake")
	o.EnvAllow = []string{"SITE_*", "LOWBARENA_*"}
	e, err := engine.Start(context.Background(), o)
	require.NoError(t, err)
	defer e.Stop()

	env := map[string]string{}
	for _, l := range strings.Split(e.StartupLog(), "\n") {
		if kv, ok := strings.CutPrefix(l, "ENV "); ok {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
	}
	require.Equal(t, os.Getenv("PATH"), env["PATH"])
	require.Equal(t, "GPU-1234", env["CUDA_VISIBLE_DEVICES"])
	require.Equal(t, "https://mirror.example", env["SITE_MIRROR"], "the operator's allow")
	require.NotContains(t, env, "UNLISTED")
	for k, v := range secrets {
		require.NotContains(t, env, k)
		require.NotContains(t, e.StartupLog(), v, k)
	}
	require.NotContains(t, e.StartupLog(), "added-by-mistake", "a denied name is dropped from the runner's additions too")
}

// TestStopReapsOrphans: an engine that starts a child in its group and
// exits before it (vLLM's API server before its EngineCore) leaves the
// child to the subreaper, the test process here as the runner in its
// container. Stop, with the sweep after it, reaps it: no zombie child of
// the test process remains.
func TestStopReapsOrphans(t *testing.T) {
	o := options(t, "orphan")
	_, err := engine.Start(context.Background(), o)
	f := engine.AsFailure(err)
	require.NotNil(t, f, "%v", err)
	require.Equal(t, "exit status 4", f.Exit)
	m := regexp.MustCompile(`child (\d+)`).FindStringSubmatch(f.LogTail)
	require.NotNil(t, m, f.LogTail)
	child, _ := strconv.Atoi(m[1])
	require.Eventually(t, func() bool {
		_, err := os.Stat(fmt.Sprintf("/proc/%d", child))
		return os.IsNotExist(err)
	}, 10*time.Second, 20*time.Millisecond, "the orphan is reaped, not left a zombie")
	require.Empty(t, zombieChildren(t))
}

// zombieChildren lists the test process's children that have exited and
// were not waited for.
func zombieChildren(t *testing.T) []int {
	t.Helper()
	dirs, err := os.ReadDir("/proc")
	require.NoError(t, err)
	var zombies []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may hold spaces and parentheses.
		rest := string(b[strings.LastIndexByte(string(b), ')')+1:])
		fields := strings.Fields(rest)
		if len(fields) >= 2 && fields[0] == "Z" && fields[1] == strconv.Itoa(os.Getpid()) {
			zombies = append(zombies, pid)
		}
	}
	return zombies
}

// TestProbeTimeoutDefaultsToTheFamily: SGLang's /health_generate answers
// after a generation ran, here after 3 s. With SGLang's default probe
// timeout (5 s) the engine becomes healthy; with 1 s every probe times out
// and so does the wait.
func TestProbeTimeoutDefaultsToTheFamily(t *testing.T) {
	t.Parallel()
	require.Equal(t, 5*time.Second, engine.FamilySGLang.ProbeTimeout)
	require.Equal(t, 2*time.Second, engine.FamilyVLLM.ProbeTimeout)

	sglang := func() engine.Options {
		o := options(t, "slow-health")
		o.Command = []string{os.Args[0], "sglang.launch_server", strconv.Itoa(o.Port)}
		o.HealthTimeout = 15 * time.Second
		return o
	}
	o := sglang()
	require.Equal(t, "/health_generate", engine.Detect(o.Command).HealthPath)
	e, err := engine.Start(context.Background(), o)
	require.NoError(t, err)
	e.Stop()

	o = sglang()
	o.ProbeTimeout = time.Second
	o.HealthTimeout = 4 * time.Second
	_, err = engine.Start(context.Background(), o)
	f := engine.AsFailure(err)
	require.NotNil(t, f, "%v", err)
	require.Equal(t, reason.EngineHealthTimeout, f.Reason)
	require.Contains(t, f.Message, "(last error: timed out)")
}
