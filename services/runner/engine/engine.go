// Package engine starts and stops an inference engine (vLLM, SGLang,
// simengine or any OpenAI-compatible server) as a real process from a
// command template and an allow-listed environment, waits for it to become
// healthy, keeps its whole start-up log and the tail of its log, classifies
// how it failed, and reaps what it leaves behind.
//
// The engine runs in its own process group, so stopping it stops whatever
// it spawned (vLLM's workers); Stop always ends the group, with SIGTERM and
// then SIGKILL after a grace period, and the runner calls it on every path.
package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/template"
	"time"
	"unicode/utf8"

	"github.com/lowbarena/lowbarena/events/reason"
)

// Params fill the command template.
type Params struct {
	Checkpoint   string
	Port         int
	KVCacheDType string
	MaxNumSeqs   int
	// GPUMemoryGiB is the memory the engine may use (0: the whole GPU).
	GPUMemoryGiB float64
	// GPUMemoryFraction is GPUMemoryGiB over the GPU's total memory,
	// rounded to 4 places, for engines that take a fraction (vLLM's
	// --gpu-memory-utilization, SGLang's --mem-fraction-static); 0 when
	// GPUMemoryGiB is 0. Render fills it from GPUTotalGiB.
	GPUMemoryFraction float64
	// GPUMemoryBytes is GPUMemoryGiB in bytes (vLLM's
	// --kv-cache-memory-bytes takes bytes).
	GPUMemoryBytes int64
	// GPUTotalGiB is the GPU's memory, what the fraction is of.
	GPUTotalGiB float64
	// MaxModelLen is the context the engine must serve (vLLM's
	// --max-model-len, SGLang's --context-length): the campaign's
	// max_model_len for a measured run, a workload's longest prompt plus
	// its max tokens for a budget replay; 0 leaves the engine its model's
	// own (templates write {{if .MaxModelLen}}).
	MaxModelLen int
	// KVCacheBytes is the KV cache pool a budget replay allows, in bytes
	// (vLLM's --kv-cache-memory-bytes, which then ignores
	// --gpu-memory-utilization); 0 outside the replay.
	KVCacheBytes int64
	// MemFractionStatic is SGLang's --mem-fraction-static for a budget
	// replay: the weights and the allowed KV pool over the memory free
	// on the device before the engine loads (SGLang sizes its pool as
	// free × fraction − weights); 0 outside the replay.
	MemFractionStatic float64
	// Engine is the participant's patched engine built for this run
	// (enginebuild.Built.Engine): the program of a Go source, the
	// Python overlay folder of a Python one; empty for the campaign's
	// own engine. A campaign with an engine source writes its command
	// with it: "{{.Engine}} --port {{.Port}} ...".
	Engine string
}

// funcs are the template's functions: each engine's name for the arena's
// KV cache dtypes (the declaration's "fp8", "nvfp4", "auto", "bf16").
var funcs = template.FuncMap{
	// vllmKV: vLLM's --kv-cache-dtype takes auto, bfloat16, fp8,
	// fp8_e4m3, fp8_e5m2, nvfp4 (vllm/config/cache.py CacheDType).
	"vllmKV": func(s string) string {
		switch strings.ToLower(s) {
		case "", "auto":
			return "auto"
		case "bf16", "bfloat16":
			return "bfloat16"
		}
		return s
	},
	// sglangKV: SGLang's --kv-cache-dtype takes auto, fp8_e5m2,
	// fp8_e4m3, bf16, bfloat16, fp4_e2m1 (server_args.py); "fp8" is
	// fp8_e4m3 there. Others pass unchanged, so SGLang itself refuses
	// what it does not support (engine_unsupported_quantization).
	"sglangKV": func(s string) string {
		switch strings.ToLower(s) {
		case "", "auto":
			return "auto"
		case "fp8":
			return "fp8_e4m3"
		}
		return s
	},
}

// Render fills a command template ({{.Checkpoint}} {{.Port}}
// {{.KVCacheDType}} {{.MaxNumSeqs}} {{.GPUMemoryGiB}}
// {{.GPUMemoryFraction}} {{.GPUMemoryBytes}} {{.MaxModelLen}}
// {{.KVCacheBytes}} {{.MemFractionStatic}} {{.Engine}}, the functions vllmKV and
// sglangKV) and splits it into words. Words are split on spaces after
// filling; values are the runner's, not the participant's, so they hold no
// spaces.
func Render(tmpl string, p Params) ([]string, error) {
	if p.GPUMemoryGiB > 0 {
		p.GPUMemoryBytes = int64(p.GPUMemoryGiB * (1 << 30))
		if p.GPUTotalGiB > 0 {
			p.GPUMemoryFraction = math.Round(min(p.GPUMemoryGiB/p.GPUTotalGiB, 1)*1e4) / 1e4
		}
	}
	t, err := template.New("engine").Option("missingkey=error").Funcs(funcs).Parse(tmpl)
	if err != nil {
		return nil, &Failure{Reason: reason.EngineBadCommand, Message: fmt.Sprintf("the engine command template does not parse: %v", err)}
	}
	var b bytes.Buffer
	if err := t.Execute(&b, p); err != nil {
		return nil, &Failure{Reason: reason.EngineBadCommand, Message: fmt.Sprintf("the engine command template names an unknown placeholder: %v", err)}
	}
	words := strings.Fields(b.String())
	if len(words) == 0 {
		return nil, &Failure{Reason: reason.EngineBadCommand, Message: "the engine command is empty"}
	}
	return words, nil
}

// Failure is an engine failure, classified.
type Failure struct {
	Reason  reason.Code
	Message string
	LogTail string
	// Phase is where an engine_oom happened (PhaseWeights,
	// PhaseCUDAGraph, PhaseKVCache, PhaseServing; "" when unknown).
	Phase string
	// Exit is how the process ended ("exit status 1"), when it did.
	Exit string
}

func (f *Failure) Error() string { return string(f.Reason) + ": " + f.Message }

// AsFailure returns the *Failure in err's chain, or nil.
func AsFailure(err error) *Failure {
	var f *Failure
	if errors.As(err, &f) {
		return f
	}
	return nil
}

// Options start an engine.
type Options struct {
	// Command is the argv (Render's output).
	Command []string
	// Env is the runner's own additions to the engine's environment
	// (CUDA_VISIBLE_DEVICES): they replace an inherited value of the same
	// name. The engine inherits of the runner's environment only what
	// DefaultEnvAllow and EnvAllow name, and never a denied name, Env's
	// included (see Environ).
	Env []string
	// EnvAllow is the operator's additions to DefaultEnvAllow: names, or
	// prefixes written "PREFIX_*" (a bare "*" allows nothing).
	EnvAllow []string
	// Port is where it serves; HealthPath is polled there (default: the
	// family's of Detect(Command)).
	Port       int
	HealthPath string
	// HealthTimeout bounds the wait for health; default 10 minutes (vLLM
	// loading a large checkpoint and capturing CUDA graphs).
	HealthTimeout time.Duration
	// ProbeTimeout bounds one health probe; default the family's
	// (Family.ProbeTimeout: 5 s for SGLang, whose /health_generate runs a
	// generation, 2 s otherwise).
	ProbeTimeout time.Duration
	// StopGrace is how long SIGTERM has before SIGKILL; default 10 s.
	StopGrace time.Duration
	// TailLines is how many of the last log lines Tail keeps; default 40.
	// The whole start-up log (every line until the engine is healthy) is
	// kept besides, within MaxStartupLogBytes (StartupLog).
	TailLines int
	// Sandbox, when set, runs the engine as untrusted code inside it (see
	// Box), served through its Socket; the health probe, and every client
	// the runner builds for the engine (Box.Transport), dial that socket.
	// A Box that cannot sandbox here fails Start with
	// engine_sandbox_unavailable before anything runs.
	Sandbox *Box
}

// Engine is a started engine process.
type Engine struct {
	opts Options
	// probeErr is the last health probe's error, in the records' form.
	probeErr string
	cmd      *exec.Cmd
	log      *engineLog
	done     chan struct{}
	err      error // the process's exit, once done is closed
	stopMu   sync.Mutex
	stopped  bool
	// reaped is closed once Stop has reaped what was left of the
	// engine's process group (see reap.go).
	reaped chan struct{}
}

// exitDrain is how long the log of an exited engine is still read from
// pipes a child of it holds open (see Start).
const exitDrain = time.Second

// Start starts the engine and waits until it is healthy, it exits, the
// health deadline passes or ctx ends. On any failure the process group is
// stopped before Start returns.
func Start(ctx context.Context, o Options) (*Engine, error) {
	family := Detect(o.Command)
	if o.HealthPath == "" {
		o.HealthPath = family.HealthPath
	}
	if o.ProbeTimeout <= 0 {
		o.ProbeTimeout = family.ProbeTimeout
	}
	if o.HealthTimeout <= 0 {
		o.HealthTimeout = 10 * time.Minute
	}
	if o.StopGrace <= 0 {
		o.StopGrace = 10 * time.Second
	}
	if o.TailLines <= 0 {
		o.TailLines = 40
	}
	if len(o.Command) == 0 {
		return nil, &Failure{Reason: reason.EngineBadCommand, Message: "no engine command"}
	}
	e := &Engine{opts: o, log: newEngineLog(o.TailLines), done: make(chan struct{}), reaped: make(chan struct{})}
	if o.Sandbox == nil {
		e.cmd = exec.Command(o.Command[0], o.Command[1:]...)
		e.cmd.Env = Environ(os.Environ(), o.EnvAllow, o.Env)
	} else {
		cmd, err := sandboxed(ctx, o)
		if err != nil {
			return nil, err
		}
		e.cmd = cmd
	}
	e.cmd.Stdout, e.cmd.Stderr = e.log, e.log
	// Its own process group, so Stop reaches its children; and the
	// kernel kills it if the runner dies (Pdeathsig), so no engine
	// outlives a killed runner.
	e.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// The engine has ended when its leader exits, whoever still holds its
	// output: a child it started (an engine core, a wrapper's background
	// process) inherits the log pipes, and Wait, which waits for them to
	// close, would hold Exited, and with it the failure of an engine that
	// exited before it was healthy, until the health deadline (minutes).
	// WaitDelay closes the pipes that long after the exit; Stop then ends
	// the group, children included.
	e.cmd.WaitDelay = exitDrain
	if err := e.cmd.Start(); err != nil {
		return nil, &Failure{Reason: reason.EngineBadCommand, Message: fmt.Sprintf("the engine did not start: %v", err)}
	}
	go func() {
		e.err = e.cmd.Wait()
		close(e.done)
	}()
	if err := e.waitHealthy(ctx); err != nil {
		e.Stop()
		return nil, err
	}
	e.log.markHealthy()
	return e, nil
}

func (e *Engine) waitHealthy(ctx context.Context) error {
	url := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(e.opts.Port)) + e.opts.HealthPath
	client := &http.Client{Timeout: e.opts.ProbeTimeout, Transport: e.opts.Sandbox.Transport()}
	deadline := time.NewTimer(e.opts.HealthTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	probe := func() bool {
		resp, err := client.Get(url)
		if err != nil {
			e.probeErr = probeError(err)
			return false
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return true
		}
		e.probeErr = fmt.Sprintf("HTTP %d from %s", resp.StatusCode, e.opts.HealthPath)
		return false
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-e.done:
			if e.probeErr == "" {
				probe() // it died before the first probe: ask once, as a watcher would have
			}
			return e.classify("engine died before becoming healthy", e.probeErr)
		case <-deadline.C:
			last := e.probeErr
			if last == "" {
				last = lastError(e.log.String())
			}
			return &Failure{Reason: reason.EngineHealthTimeout, LogTail: e.log.String(),
				Message: fmt.Sprintf("engine did not become healthy within %s (last error: %s); container log tail: %s", e.opts.HealthTimeout, last, oneLine(e.log.String(), MessageTail))}
		case <-tick.C:
			if probe() {
				return nil
			}
		}
	}
}

// probeError writes a failed health probe as the arena's records do, in
// Python's form of an OS error ("[Errno 111] Connection refused"), so a
// refused connection reads the same whichever runner saw it.
func probeError(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		s := errno.Error()
		if s != "" {
			s = strings.ToUpper(s[:1]) + s[1:]
		}
		return fmt.Sprintf("[Errno %d] %s", int(errno), s)
	}
	var ue *neturl.Error
	if errors.As(err, &ue) && ue.Timeout() {
		return "timed out"
	}
	return err.Error()
}

// sandboxed is the command of an engine run inside o.Sandbox: checked
// first, its environment the allow-listed one with HOME in its run folder
// and TMPDIR its private /tmp (Box.TempDir).
func sandboxed(ctx context.Context, o Options) (*exec.Cmd, error) {
	b := o.Sandbox
	if err := b.Check(ctx); err != nil {
		return nil, &Failure{Reason: reason.EngineSandboxUnavailable, Message: fmt.Sprintf("the engine must run sandboxed and cannot: %v", err)}
	}
	if len(b.Writable) == 0 {
		return nil, &Failure{Reason: reason.EngineSandboxUnavailable, Message: "the engine's sandbox has no run folder"}
	}
	cmd, err := b.Command(o.Command, "", &Forward{Socket: b.Socket(), Port: o.Port})
	if err != nil {
		return nil, &Failure{Reason: reason.EngineSandboxUnavailable, Message: fmt.Sprintf("the engine's sandbox: %v", err)}
	}
	cmd.Env = Environ(os.Environ(), o.EnvAllow, append(append([]string(nil), o.Env...), "HOME="+b.Writable[0], "TMPDIR="+b.TempDir()))
	return cmd, nil
}

// Exited is closed when the engine process has exited.
func (e *Engine) Exited() <-chan struct{} { return e.done }

// Failure classifies an engine that exited while it served.
func (e *Engine) Failure() *Failure {
	f := e.classify("engine died while serving", lastError(e.log.String()))
	if f.Reason == reason.EngineOOM && f.Phase == "" {
		f.Phase = PhaseServing
	}
	return f
}

// Tail returns the last TailLines log lines.
func (e *Engine) Tail() string { return e.log.String() }

// StartupLog returns the engine's log from its first line until it became
// healthy (all of it while it is starting; the lines that reach the runner
// within half a second of the engine's healthy answer count), within
// MaxStartupLogBytes: the lines a start-up report is read from, the first
// ones included (vLLM's configuration line), however many followed them.
func (e *Engine) StartupLog() string { return e.log.Startup() }

// PID returns the engine's process id (its process group id too).
func (e *Engine) PID() int { return e.cmd.Process.Pid }

// Stop ends the engine's process group: SIGTERM, then SIGKILL after the
// grace period, and reaps the group's members that the runner inherited
// (orphans of the engine, when the runner is their subreaper: see
// BecomeSubreaper). It is safe to call more than once and after the
// engine exited.
func (e *Engine) Stop() {
	e.stopMu.Lock()
	defer e.stopMu.Unlock()
	if e.stopped {
		return
	}
	e.stopped = true
	pgid := e.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-e.done:
	case <-time.After(e.opts.StopGrace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-e.done
	}
	// Children that ignored SIGTERM while the leader exited go too.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	// The leader has been waited for (done is closed): what is left of
	// its group is reaped now and, for the members not dead yet, by a
	// bounded sweep (reap.go).
	if reapGroup(pgid) {
		close(e.reaped)
		return
	}
	go func() {
		defer close(e.reaped)
		sweepGroup(pgid, reapSweep)
	}()
}

// Reaped is closed once Stop has reaped the engine's process group: at
// once when nothing of it is left, else when its last member is reaped or
// the sweep gives up (reapSweep after Stop).
func (e *Engine) Reaped() <-chan struct{} { return e.reaped }

var errPattern = regexp.MustCompile(`(?i)error|exception|fatal`)

// MessageTail is how much of the flattened log tail a failure's message
// keeps: its last characters, as the arena's records keep them (the
// round page's tails run to about 3,700 characters).
const MessageTail = 4000

// classify names why the engine exited, from its log tail (Classify), in
// the records' sentence form: "engine died before becoming healthy (last
// error: [Errno 111] Connection refused); container log tail: ...".
func (e *Engine) classify(what, last string) *Failure {
	logTail := e.log.String()
	reason, phase := Classify(logTail)
	exit := "exited"
	if e.err != nil {
		exit = e.err.Error()
	}
	if last == "" {
		last = "none logged"
	}
	return &Failure{Reason: reason, Phase: phase, Exit: exit, LogTail: logTail,
		Message: FailureMessage(what, last, logTail)}
}

// FailureMessage is a failure's sentence: what happened, the last error
// seen and the log tail on one line (its last MessageTail characters).
func FailureMessage(what, last, logTail string) string {
	return fmt.Sprintf("%s (last error: %s); container log tail: %s", what, last, oneLine(logTail, MessageTail))
}

// lastError is the last log line that looks like an error.
func lastError(logTail string) string {
	lines := strings.Split(logTail, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if errPattern.MatchString(lines[i]) {
			return strings.TrimSpace(lines[i])
		}
	}
	return "none logged"
}

// oneLine joins s's words with single spaces and keeps its last n bytes
// (whole characters), cut as the arena's records cut a tail: mid-word,
// without a mark.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		i := len(s) - n
		for i < len(s) && !utf8.RuneStart(s[i]) {
			i++
		}
		s = s[i:]
	}
	return s
}
