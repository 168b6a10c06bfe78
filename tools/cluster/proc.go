// Package cluster runs the arena as a cluster on one machine, without
// Docker, for tests: three nats-server processes routed to each other with
// JetStream (the arena's streams, buckets and object stores at R3, the
// users and permissions of deploy/nats/auth.conf), Debian's
// clickhouse-server, and every service as its own process from its own
// binary, with the flags and environment docs/operators/deploying.md gives (the gateway,
// build, contract, quality, efficiency, score, round and a runner per
// pod). It kills them (SIGKILL, SIGSTOP, a server stopped and started
// again) and reads back what the arena kept: every event of the ARENA
// stream, the dead-letter stream, the records and the rows.
//
// Nothing here is a fake: the processes are the binaries an operator
// runs, the only simulation is the GPU (the runners serve simengine on a
// simulated H200, and every figure says so).
package cluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// Proc is one process of the cluster, started from Bin with Args and Env,
// its output appended to Log. A process that exits on its own while it
// should run (a service that could not reach NATS or ClickHouse at its
// start) is started again after a second, as a container orchestrator
// would: Restarts counts those.
type Proc struct {
	// Name names the process in the fault table and the logs.
	Name string
	Bin  string
	Args []string
	// Env is added to the harness's own environment.
	Env []string
	// Dir is the working folder (default the log's folder).
	Dir string
	// Log is the file its standard output and error go to.
	Log string

	mu sync.Mutex
	// cmd is the running process; nil when none runs.
	cmd    *exec.Cmd
	exited chan struct{}
	// want says the process should run: an exit while want is true is
	// unexpected and followed by a restart.
	want bool
	// starts counts every start; restarts the unexpected exits.
	starts, restarts int
	closed           bool
}

// Start starts the process and keeps it running until Kill, Stop or
// Close.
func (p *Proc) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.want = true
	return p.startLocked()
}

func (p *Proc) startLocked() error {
	if p.closed {
		return errors.New("cluster: " + p.Name + " is closed")
	}
	if p.cmd != nil {
		return nil
	}
	f, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("cluster: %s log: %w", p.Name, err)
	}
	cmd := exec.Command(p.Bin, p.Args...)
	cmd.Env = append(os.Environ(), p.Env...)
	cmd.Dir = p.Dir
	if cmd.Dir == "" {
		cmd.Dir = filepath.Dir(p.Log)
	}
	cmd.Stdout, cmd.Stderr = f, f
	// Never outlive the harness: a test binary that dies takes the
	// cluster with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	fmt.Fprintf(f, "=== cluster: start %d of %s at %s\n", p.starts+1, p.Name, time.Now().UTC().Format(time.RFC3339Nano))
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("cluster: start %s: %w", p.Name, err)
	}
	p.starts++
	p.cmd = cmd
	exited := make(chan struct{})
	p.exited = exited
	go func() {
		_ = cmd.Wait()
		f.Close()
		p.mu.Lock()
		p.cmd = nil
		close(exited)
		again := p.want && !p.closed
		if again {
			p.restarts++
		}
		p.mu.Unlock()
		if again {
			// An orchestrator's restart: not at once, so that a process
			// that cannot start does not spin.
			time.Sleep(time.Second)
			p.mu.Lock()
			if p.want && !p.closed {
				_ = p.startLocked()
			}
			p.mu.Unlock()
		}
	}()
	return nil
}

// Kill sends SIGKILL and waits until the process is gone; it stays down
// until Start.
func (p *Proc) Kill() error {
	p.mu.Lock()
	p.want = false
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	// A stopped process is killed too; SIGCONT is not needed for SIGKILL.
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("cluster: kill %s: %w", p.Name, err)
	}
	<-exited
	return nil
}

// Pause stops the process with SIGSTOP: it holds its connections and its
// work but does nothing, as a machine that hangs. Resume continues it.
func (p *Proc) Pause() error { return p.signal(syscall.SIGSTOP) }

// Resume continues a paused process.
func (p *Proc) Resume() error { return p.signal(syscall.SIGCONT) }

func (p *Proc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return fmt.Errorf("cluster: %s is not running", p.Name)
	}
	return p.cmd.Process.Signal(sig)
}

// Terminate sends SIGTERM and waits up to grace for the process to exit,
// then kills it; it stays down until Start.
func (p *Proc) Terminate(grace time.Duration) {
	p.mu.Lock()
	p.want = false
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(grace):
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-exited
	}
}

// Close kills the process for good.
func (p *Proc) Close() {
	_ = p.Kill()
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
}

// PID is the running process's id, 0 when none runs.
func (p *Proc) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Running says whether the process runs now.
func (p *Proc) Running() bool { return p.PID() != 0 }

// Restarts counts the unexpected exits after which the process was
// started again.
func (p *Proc) Restarts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.restarts
}

// Starts counts the process's starts: 1 for one never killed or
// restarted.
func (p *Proc) Starts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.starts
}

// LogTail is the last n bytes of the process's log, for failure messages.
func (p *Proc) LogTail(n int) string {
	b, err := os.ReadFile(p.Log)
	if err != nil {
		return ""
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
