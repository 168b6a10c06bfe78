// Package engine starts and stops an inference engine (vLLM, SGLang,
// simengine or any OpenAI-compatible server) as a real process from a
// command template, waits for it to become healthy, keeps the tail of its
// log, and classifies how it failed.
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
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/template"
	"time"
)

// Reasons a job fails for its engine. They are stable codes.
const (
	ReasonOOM           = "engine_oom"
	ReasonHealthTimeout = "engine_health_timeout"
	ReasonCrashed       = "engine_crashed"
	ReasonBadCheckpoint = "engine_bad_checkpoint"
	ReasonBadCommand    = "engine_bad_command"
	ReasonOverCap       = "engine_over_memory_cap"
)

// Params fill the command template.
type Params struct {
	Checkpoint   string
	Port         int
	KVCacheDType string
	MaxNumSeqs   int
	GPUMemoryGiB float64
}

// Render fills a command template ({{.Checkpoint}} {{.Port}}
// {{.KVCacheDType}} {{.MaxNumSeqs}} {{.GPUMemoryGiB}}) and splits it into
// words. Words are split on spaces after filling; values are the runner's,
// not the participant's, so they hold no spaces.
func Render(tmpl string, p Params) ([]string, error) {
	t, err := template.New("engine").Option("missingkey=error").Parse(tmpl)
	if err != nil {
		return nil, &Failure{Reason: ReasonBadCommand, Message: fmt.Sprintf("the engine command template does not parse: %v", err)}
	}
	var b bytes.Buffer
	if err := t.Execute(&b, p); err != nil {
		return nil, &Failure{Reason: ReasonBadCommand, Message: fmt.Sprintf("the engine command template names an unknown placeholder: %v", err)}
	}
	words := strings.Fields(b.String())
	if len(words) == 0 {
		return nil, &Failure{Reason: ReasonBadCommand, Message: "the engine command is empty"}
	}
	return words, nil
}

// Failure is an engine failure, classified.
type Failure struct {
	Reason  string
	Message string
	LogTail string
}

func (f *Failure) Error() string { return f.Reason + ": " + f.Message }

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
	// Env is added to the runner's environment.
	Env []string
	// Port is where it serves; HealthPath is polled there (default /health).
	Port       int
	HealthPath string
	// HealthTimeout bounds the wait for health; default 10 minutes (vLLM
	// loading a large checkpoint and capturing CUDA graphs).
	HealthTimeout time.Duration
	// StopGrace is how long SIGTERM has before SIGKILL; default 10 s.
	StopGrace time.Duration
	// TailLines is how many log lines are kept; default 40.
	TailLines int
}

// Engine is a started engine process.
type Engine struct {
	opts    Options
	cmd     *exec.Cmd
	tail    *tail
	done    chan struct{}
	err     error // the process's exit, once done is closed
	stopMu  sync.Mutex
	stopped bool
}

// Start starts the engine and waits until it is healthy, it exits, the
// health deadline passes or ctx ends. On any failure the process group is
// stopped before Start returns.
func Start(ctx context.Context, o Options) (*Engine, error) {
	if o.HealthPath == "" {
		o.HealthPath = "/health"
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
		return nil, &Failure{Reason: ReasonBadCommand, Message: "no engine command"}
	}
	e := &Engine{opts: o, tail: newTail(o.TailLines), done: make(chan struct{})}
	e.cmd = exec.Command(o.Command[0], o.Command[1:]...)
	e.cmd.Env = append(os.Environ(), o.Env...)
	e.cmd.Stdout, e.cmd.Stderr = e.tail, e.tail
	// Its own process group, so Stop reaches its children; and the
	// kernel kills it if the runner dies (Pdeathsig), so no engine
	// outlives a killed runner.
	e.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := e.cmd.Start(); err != nil {
		return nil, &Failure{Reason: ReasonBadCommand, Message: fmt.Sprintf("the engine did not start: %v", err)}
	}
	go func() {
		e.err = e.cmd.Wait()
		close(e.done)
	}()
	if err := e.waitHealthy(ctx); err != nil {
		e.Stop()
		return nil, err
	}
	return e, nil
}

func (e *Engine) waitHealthy(ctx context.Context) error {
	url := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(e.opts.Port)) + e.opts.HealthPath
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.NewTimer(e.opts.HealthTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-e.done:
			return e.classify("engine died before becoming healthy")
		case <-deadline.C:
			return &Failure{Reason: ReasonHealthTimeout, LogTail: e.tail.String(),
				Message: fmt.Sprintf("engine did not become healthy within %s (last error: %s); container log tail: %s", e.opts.HealthTimeout, lastError(e.tail.String()), e.tail.String())}
		case <-tick.C:
			resp, err := client.Get(url)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return nil
				}
			}
		}
	}
}

// Exited is closed when the engine process has exited.
func (e *Engine) Exited() <-chan struct{} { return e.done }

// Failure classifies an engine that exited while it served.
func (e *Engine) Failure() *Failure { return e.classify("engine died while serving") }

// Tail returns the kept log lines.
func (e *Engine) Tail() string { return e.tail.String() }

// PID returns the engine's process id (its process group id too).
func (e *Engine) PID() int { return e.cmd.Process.Pid }

// Stop ends the engine's process group: SIGTERM, then SIGKILL after the
// grace period. It is safe to call more than once and after the engine
// exited.
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
}

var (
	oomPattern  = regexp.MustCompile(`(?i)out of memory|OutOfMemoryError|CUDA_ERROR_OUT_OF_MEMORY|No available memory for the cache blocks`)
	ckptPattern = regexp.MustCompile(`(?i)SafetensorError|safetensors:|invalid checkpoint|Error loading model|HeaderTooLarge`)
	errPattern  = regexp.MustCompile(`(?i)error|exception|fatal`)
)

// classify names why the engine exited, from its exit and its log tail,
// in the records' sentence form.
func (e *Engine) classify(what string) *Failure {
	logTail := e.tail.String()
	reason := ReasonCrashed
	switch {
	case oomPattern.MatchString(logTail):
		reason = ReasonOOM
	case ckptPattern.MatchString(logTail):
		reason = ReasonBadCheckpoint
	}
	exit := "exited"
	if e.err != nil {
		exit = e.err.Error()
	}
	return &Failure{Reason: reason, LogTail: logTail,
		Message: fmt.Sprintf("%s (%s; last error: %s); container log tail: %s", what, exit, lastError(logTail), oneLine(logTail, 600))}
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

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = "..." + s[len(s)-n:]
	}
	return s
}

// tail keeps the last lines written to it.
type tail struct {
	mu      sync.Mutex
	lines   []string
	max     int
	partial []byte
}

func newTail(n int) *tail { return &tail{max: n} }

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.partial = append(t.partial, p...)
	for {
		i := bytes.IndexByte(t.partial, '\n')
		if i < 0 {
			break
		}
		t.push(string(t.partial[:i]))
		t.partial = t.partial[i+1:]
	}
	if len(t.partial) > 4096 { // a very long line is kept in pieces
		t.push(string(t.partial))
		t.partial = t.partial[:0]
	}
	return len(p), nil
}

func (t *tail) push(line string) {
	t.lines = append(t.lines, line)
	if len(t.lines) > t.max {
		t.lines = t.lines[len(t.lines)-t.max:]
	}
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := strings.Join(t.lines, "\n")
	if len(t.partial) > 0 {
		out += "\n" + string(t.partial)
	}
	return strings.TrimSpace(out)
}
