package grade

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/lowbarena/lowbarena/services/domain/suite"
)

// Defaults of a CodeGrader's zero fields.
const (
	// DefaultCodeTimeout is the wall-clock limit of one run.
	DefaultCodeTimeout = 10 * time.Second
	// DefaultCodeMemory is the address-space limit of one run, in bytes.
	DefaultCodeMemory = 512 << 20
	// DefaultCodeProcs is the process limit (RLIMIT_NPROC) of one run.
	DefaultCodeProcs = 64
	// DefaultCodeFileSize is the largest file one run may write, in bytes.
	DefaultCodeFileSize = 16 << 20
	// DefaultCodeOutput is how much of each of stdout and stderr is kept
	// (the last bytes).
	DefaultCodeOutput = 4 << 10
)

// sandboxPath is the only PATH a run sees.
const sandboxPath = "/usr/local/bin:/usr/bin:/bin"

// CodeGrader grades an answer that holds a Python program: the last
// ```python (or ```py, ```python3) fenced block, else the last fenced
// block of any kind, else the whole answer; a fence left open (a truncated
// answer) runs to the end. The program, followed by the item's Tests, is
// written to main.py in a fresh temporary folder and run by python3 in a
// subprocess; it scores 1 when the run exits 0, and 0 otherwise with a
// Detail such as "tests failed: AssertionError: ...", "timed out after
// 10s" or "killed: memory limit (512 MiB address space)".
//
// The sandbox of one run, all of which ends with the run:
//
//   - prlimit limits address space (Memory), CPU seconds (CPU, soft; the
//     hard limit is a second more), processes (Procs), file size (FileSize)
//     and core dumps (none). RLIMIT_NPROC counts every process of the user
//     and does not bind root.
//   - unshare -rn puts the run in its own user and network namespaces: no
//     network but a loopback that is down, and no access to the grader's
//     /proc entries. It is used when "unshare -rn true" works on this
//     machine (probed once per process, see CodeIsolation); otherwise the
//     run has no isolation and Detail says so, or, with RequireIsolation,
//     Grade returns an error.
//   - The working directory is the temporary folder, removed afterwards;
//     the environment is PATH, HOME and TMPDIR only (the latter two the
//     folder), and python runs isolated (-I: no PYTHON* variables, no user
//     site-packages) without writing bytecode (-B); stdin is empty.
//   - The run leads its own process group, which is killed (SIGKILL) on the
//     wall-clock Timeout, on cancellation of the context, and after the run
//     in any case, so no process it started outlives Grade (one that moved
//     itself to another group or session excepted).
//   - Only the last OutputBytes of stdout and of stderr are kept.
//
// The file system is otherwise the grader's, read-only or not as the
// grader's user sees it: run the grader as an unprivileged user.
//
// A CodeGrader is safe for concurrent use; each Grade is one python
// process (about a CPU core while it runs), so callers bound their own
// concurrency. The zero value uses the defaults above. It has no format
// contract.
type CodeGrader struct {
	// Timeout is the wall-clock limit of a run (default
	// DefaultCodeTimeout).
	Timeout time.Duration
	// CPU is the CPU-time limit of a run, whole seconds rounded up
	// (default: Timeout rounded up, plus a second, so that a single-threaded
	// busy loop meets the wall-clock limit first and only a program burning
	// several cores meets this one).
	CPU time.Duration
	// Memory is the address-space limit of a run, in bytes (default
	// DefaultCodeMemory).
	Memory int64
	// Procs is the process limit of a run (default DefaultCodeProcs).
	Procs int
	// FileSize is the largest file a run may write, in bytes (default
	// DefaultCodeFileSize).
	FileSize int64
	// OutputBytes is how much of each of stdout and stderr is kept
	// (default DefaultCodeOutput).
	OutputBytes int
	// Python is the interpreter, a name looked up in PATH or a path
	// (default "python3"); a pyenv-style shim is resolved to the real
	// interpreter once, by asking it for sys.executable.
	Python string
	// RequireIsolation makes Grade fail rather than run a program without
	// unshare -rn.
	RequireIsolation bool
}

// Grade runs the answer's program and the item's tests; see CodeGrader.
func (g *CodeGrader) Grade(ctx context.Context, it suite.Item, answer string) (Result, error) {
	if strings.TrimSpace(it.Tests) == "" {
		return Result{}, fmt.Errorf("code grader: item %s: %w: no tests", it.ID, ErrBadItem)
	}
	if r, ok := refuse(answer, false); ok {
		return r, nil
	}
	program := ExtractProgram(answer)
	if strings.TrimSpace(program) == "" {
		return Result{Empty: true, Detail: "no program in answer"}, nil
	}
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("code grader: item %s: %w", it.ID, err)
	}
	python, err := resolvePython(ctx, g.python())
	if err != nil {
		return Result{}, err
	}
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		return Result{}, fmt.Errorf("code grader: prlimit not found: %w", err)
	}
	isolated, why := CodeIsolation()
	if !isolated && g.RequireIsolation {
		return Result{}, fmt.Errorf("code grader: isolation required but unavailable: %s", why)
	}

	dir, err := os.MkdirTemp("", "lowbarena-code-*")
	if err != nil {
		return Result{}, fmt.Errorf("code grader: temporary folder: %w", err)
	}
	defer removeAll(dir)
	src := program
	if !strings.HasSuffix(src, "\n") {
		src += "\n"
	}
	src += "\n# --- tests ---\n" + it.Tests + "\n"
	if err := os.WriteFile(filepath.Join(dir, "main.py"), []byte(src), 0o644); err != nil {
		return Result{}, fmt.Errorf("code grader: write program: %w", err)
	}

	timeout, cpu, mem := g.timeout(), g.cpuSeconds(), g.memory()
	args := []string{
		fmt.Sprintf("--as=%d", mem),
		fmt.Sprintf("--cpu=%d:%d", cpu, cpu+1),
		fmt.Sprintf("--nproc=%d", g.procs()),
		fmt.Sprintf("--fsize=%d", g.fileSize()),
		"--core=0",
	}
	if isolated {
		args = append(args, "unshare", "-rn")
	}
	args = append(args, python, "-I", "-B", "main.py")

	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(runCtx, prlimit, args...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + sandboxPath, "HOME=" + dir, "TMPDIR=" + dir}
	// The run leads its own process group: prlimit execs unshare, which
	// execs python, so the group id stays the pid we start.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// Bounds Wait when a straggler still holds the output pipes.
	cmd.WaitDelay = time.Second
	stdout, stderr := newTail(g.outputBytes()), newTail(g.outputBytes())
	cmd.Stdout, cmd.Stderr = stdout, stderr

	if err := cmd.Start(); err != nil {
		return Result{}, fmt.Errorf("code grader: start sandbox: %w", err)
	}
	runErr := cmd.Wait()
	// Whatever happened, nothing of the run outlives it.
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)

	res := g.judge(ctx, runCtx, cmd.ProcessState, runErr, stdout.String(), stderr.String())
	if ctx.Err() != nil {
		return Result{}, fmt.Errorf("code grader: item %s: %w", it.ID, ctx.Err())
	}
	if !isolated {
		res.Detail = joinDetail(res.Detail, "isolation: none ("+why+")")
	}
	return res, nil
}

// judge turns the end of a run into a Result.
func (g *CodeGrader) judge(ctx, runCtx context.Context, ps *os.ProcessState, runErr error, stdout, stderr string) Result {
	if ps != nil && ps.Success() {
		return Result{Score: 1}
	}
	if ctx.Err() == nil && errors.Is(runCtx.Err(), context.DeadlineExceeded) {
		return Result{Detail: fmt.Sprintf("timed out after %v", g.timeout())}
	}
	if ps == nil {
		return Result{Detail: fmt.Sprintf("run failed: %v", runErr)}
	}
	line := lastLine(stderr)
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		switch sig := ws.Signal(); sig {
		case syscall.SIGXCPU:
			return Result{Detail: fmt.Sprintf("killed: CPU time limit (%ds)", g.cpuSeconds())}
		case syscall.SIGXFSZ:
			return Result{Detail: fmt.Sprintf("killed: file size limit (%d bytes)", g.fileSize())}
		case syscall.SIGKILL:
			return Result{Detail: "killed: SIGKILL (CPU or memory limit)"}
		default:
			return Result{Detail: joinDetail(fmt.Sprintf("killed: signal %v", sig), line)}
		}
	}
	switch {
	case strings.HasPrefix(line, "MemoryError"):
		return Result{Detail: fmt.Sprintf("killed: memory limit (%d MiB address space)", g.memory()>>20)}
	case strings.Contains(line, "[Errno 27]"): // EFBIG: python ignores SIGXFSZ
		return Result{Detail: fmt.Sprintf("killed: file size limit (%d bytes)", g.fileSize())}
	case line != "":
		return Result{Detail: "tests failed: " + line}
	}
	detail := fmt.Sprintf("tests failed: exit status %d", ps.ExitCode())
	if out := lastLine(stdout); out != "" {
		detail += ", stdout: " + out
	}
	return Result{Detail: detail}
}

func (g *CodeGrader) timeout() time.Duration {
	if g.Timeout > 0 {
		return g.Timeout
	}
	return DefaultCodeTimeout
}

// cpuSeconds is the CPU limit in whole seconds, at least 1.
func (g *CodeGrader) cpuSeconds() int64 {
	if g.CPU > 0 {
		return max(1, int64((g.CPU+time.Second-1)/time.Second))
	}
	return int64((g.timeout()+time.Second-1)/time.Second) + 1
}

func (g *CodeGrader) memory() int64 {
	if g.Memory > 0 {
		return g.Memory
	}
	return DefaultCodeMemory
}

func (g *CodeGrader) procs() int {
	if g.Procs > 0 {
		return g.Procs
	}
	return DefaultCodeProcs
}

func (g *CodeGrader) fileSize() int64 {
	if g.FileSize > 0 {
		return g.FileSize
	}
	return DefaultCodeFileSize
}

func (g *CodeGrader) outputBytes() int {
	if g.OutputBytes > 0 {
		return g.OutputBytes
	}
	return DefaultCodeOutput
}

func (g *CodeGrader) python() string {
	if g.Python != "" {
		return g.Python
	}
	return "python3"
}

// ExtractProgram returns the program in a code answer: the body of the
// last ```python, ```py or ```python3 fenced block, else of the last
// fenced block of any kind, else the whole answer. A fence left open runs
// to the end of the answer, and a fence's indentation is removed from its
// body.
func ExtractProgram(answer string) string {
	type block struct {
		python bool
		lines  []string
	}
	var (
		blocks []block
		cur    *block
		indent string
	)
	for line := range strings.SplitSeq(answer, "\n") {
		line = strings.TrimRight(line, "\r")
		t := strings.TrimSpace(line)
		if strings.HasPrefix(t, "```") {
			info := strings.TrimSpace(strings.TrimLeft(t, "`"))
			switch {
			case cur == nil:
				lang, _, _ := strings.Cut(strings.ToLower(info), " ")
				cur = &block{python: lang == "python" || lang == "py" || lang == "python3"}
				indent = line[:len(line)-len(strings.TrimLeft(line, " \t"))]
				continue
			case info == "":
				blocks = append(blocks, *cur)
				cur = nil
				continue
			}
		}
		if cur != nil {
			cur.lines = append(cur.lines, strings.TrimPrefix(line, indent))
		}
	}
	if cur != nil {
		blocks = append(blocks, *cur)
	}
	if len(blocks) == 0 {
		return answer
	}
	pick := blocks[len(blocks)-1]
	for i := len(blocks) - 1; i >= 0; i-- {
		if blocks[i].python {
			pick = blocks[i]
			break
		}
	}
	return strings.Join(pick.lines, "\n")
}

// CodeIsolation reports whether code runs under unshare -rn on this
// machine and, when not, why. It probes "unshare -rn true" once per
// process and caches the answer.
func CodeIsolation() (isolated bool, why string) {
	isolation.once.Do(func() {
		isolation.ok, isolation.why = probeIsolation()
	})
	return isolation.ok, isolation.why
}

var isolation struct {
	once sync.Once
	ok   bool
	why  string
}

func probeIsolation() (bool, string) {
	path, err := exec.LookPath("unshare")
	if err != nil {
		return false, "unshare not found"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "-rn", "true")
	cmd.Env = []string{"PATH=" + sandboxPath}
	if out, err := cmd.CombinedOutput(); err != nil {
		return false, fmt.Sprintf("unshare -rn true failed: %v: %s", err, lastLine(string(out)))
	}
	return true, "unshare -rn"
}

// pythons caches interpreter names resolved to real interpreters; only
// successes are cached, so installing python3 later needs no restart.
var pythons sync.Map // string -> string

// resolvePython finds name and resolves a launcher (such as a pyenv shim)
// to the interpreter itself, which needs no environment to start.
func resolvePython(ctx context.Context, name string) (string, error) {
	if p, ok := pythons.Load(name); ok {
		return p.(string), nil
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("code grader: %s not found: %w", name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "-I", "-c", "import sys; sys.stdout.write(sys.executable)").Output()
	if err != nil {
		return "", fmt.Errorf("code grader: %s does not run: %w", path, err)
	}
	real := strings.TrimSpace(string(out))
	if real == "" || !filepath.IsAbs(real) {
		real = path
	}
	if _, err := os.Stat(real); err != nil {
		real = path
	}
	pythons.Store(name, real)
	return real, nil
}

// removeAll removes a run's folder, first making its folders writable in
// case the program took the permission away.
func removeAll(dir string) {
	if os.RemoveAll(dir) == nil {
		return
	}
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	_ = os.RemoveAll(dir)
}

// tail is an io.Writer keeping the last max bytes written to it.
type tail struct {
	max int
	buf []byte
}

func newTail(max int) *tail { return &tail{max: max} }

// Write keeps the last t.max bytes of what was written; it never fails.
func (t *tail) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) >= t.max {
		t.buf = append(t.buf[:0], p[len(p)-t.max:]...)
		return n, nil
	}
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		copy(t.buf, t.buf[over:])
		t.buf = t.buf[:t.max]
	}
	return n, nil
}

func (t *tail) String() string { return string(t.buf) }

// lastLine returns the last non-blank line of s, trimmed and shortened for
// a Detail.
func lastLine(s string) string {
	s = strings.TrimRight(s, " \t\r\n")
	s = strings.TrimSpace(s[strings.LastIndexByte(s, '\n')+1:])
	const max = 300
	if len(s) > max {
		cut := max
		for cut > 0 && s[cut]&0xC0 == 0x80 {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

func joinDetail(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}
