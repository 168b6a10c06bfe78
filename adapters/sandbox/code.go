package sandbox

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/lowbarena/lowbarena/domain/grade"
	"github.com/lowbarena/lowbarena/domain/suite"
)

// Defaults of a CodeGrader's zero fields.
const (
	// DefaultCodeTimeout is the wall-clock limit of one run.
	DefaultCodeTimeout = 10 * time.Second
	// DefaultCodeMemory is the address-space limit of each process of a
	// run, in bytes.
	DefaultCodeMemory = 512 << 20
	// DefaultCodeProcs is the process limit (RLIMIT_NPROC, threads
	// included) of one run.
	DefaultCodeProcs = 64
	// DefaultCodeFileSize is the largest file one run may write, in bytes.
	DefaultCodeFileSize = 16 << 20
	// DefaultCodeFolder is the size of each of a run's two writable
	// folders (its working folder and /dev/shm), in bytes.
	DefaultCodeFolder = 64 << 20
	// DefaultCodeOutput is how much of each of stdout and stderr is kept
	// (the last bytes).
	DefaultCodeOutput = 4 << 10
	// DefaultCodePython is the interpreter: Debian's, which the sandbox
	// user can read.
	DefaultCodePython = "/usr/bin/python3"
	// DefaultCodeBwrap is bubblewrap, looked up in PATH.
	DefaultCodeBwrap = "bwrap"
)

// CodeGrader grades an answer that holds a Python program: the last
// ```python (or ```py, ```python3) fenced block, else the last fenced
// block of any kind, else the whole answer; a fence left open (a truncated
// answer) runs to the end. The program alone is main.py, run as __main__
// by python3 in a bubblewrap sandbox, and the item's Tests run after it
// in its namespace. It scores 1 when every check of the tests gave its
// expected value and the run then exits 0, and 0 otherwise with a Detail
// such as "tests failed: AssertionError: add(2, 3) != 5 (line 1: assert
// add(2, 3) == 5: got -1)", "tests did not run to their end", "timed out
// after 10s", "killed: memory limit (512 MiB address space)" or "killed:
// process limit (64 processes)".
//
// The checks are the top-level asserts of Tests: assert E == L (or L ==
// E), assert E != L, assert E is [not] None/True/False, and assert [not]
// E (E must be True, or False), where L is a literal (ast.literal_eval's,
// set() and frozenset(...)). Every other statement is set-up, run in order
// in the program's namespace, and may hold no assert or raise; tests of any
// other shape, or without a check, are a bad item (grade.ErrBadItem), and
// the program does not run. No object of the program takes part in a
// comparison: inside the sandbox, before the program starts, a prelude
// reads the tests and sends the literals, encoded, to the grader alone;
// the harness evaluates each E and encodes its value with an encoder that
// accepts only the exact built-in types (None, bool, int, float, str,
// bytes, list, tuple, dict, set, frozenset; a subclass is refused, as is
// anything else, with the reason) and calls no method a program can
// override; and the grader compares the two encodings. Types must match
// (a bool is not an int, a tuple not a list), except that an int and a
// float compare by value; floats compare within math.isclose(rel_tol=1e-9,
// abs_tol=1e-9); dict keys and set members compare exactly. The tests and
// their expected values are in nothing the program can read (main.py holds
// the program only), so neither a result dressed up to equal anything nor
// a forged report of the harness passes (see prelude).
//
// The sandbox of one run, all of which ends with the run:
//
//   - It runs as an unprivileged user: SandboxUID when the grader is root
//     (so that the process limit binds), else the grader's own user, in
//     new user, PID, network, IPC, UTS and (where the kernel has them)
//     cgroup namespaces; it cannot create further user namespaces.
//   - Its root is a read-only minimal tree: /usr (with /usr/local hidden
//     unless the interpreter lives there), /bin, /lib and /lib64 (links
//     into /usr on a merged-usr system), the interpreter's own prefix when
//     it is outside /usr, a /proc of its PID namespace and a minimal /dev.
//     Nothing else of the host: no /etc, /home, /root, /tmp, /var, no data
//     of the arena, no other run.
//   - Its writable folders are /work (its working folder, HOME and
//     TMPDIR, with /tmp linking to it) and /dev/shm, each a fresh tmpfs of
//     at most Folder bytes; main.py in /work is read-only.
//   - No network: its network namespace has only a loopback of its own.
//   - Limits, set inside the sandbox before main.py starts: address
//     space (Memory, per process), CPU seconds (CPU, soft; the hard limit
//     is a second more), processes and threads (Procs, counted in the
//     run's own user namespace, so that one run's fork bomb does not
//     starve another run), file size (FileSize) and core dumps (none).
//     Memory is per process, so a run holds at most about Procs × Memory.
//   - The wall-clock Timeout, the cancellation of the context, and the
//     end of the run in any case kill bubblewrap's process group; its
//     death kills the PID namespace (--die-with-parent), so no process of
//     the run outlives Grade, whatever group or session it moved to.
//   - The environment is PATH, HOME and TMPDIR only; no file descriptor
//     but stdio reaches the program; python runs isolated (-I: no PYTHON*
//     variables, no user site-packages) without writing bytecode (-B);
//     stdin is empty; only the last OutputBytes of stdout and of stderr
//     are kept.
//
// When the sandbox cannot be had (bubblewrap missing or unable to create
// namespaces, an interpreter missing or one the sandbox user cannot run),
// Grade refuses with an error wrapping ErrSandboxUnavailable; it
// never runs a program outside the sandbox. Check runs the same probe.
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
	// Memory is the address-space limit of each process of a run, in
	// bytes (default DefaultCodeMemory).
	Memory int64
	// Procs is the process limit of a run (default DefaultCodeProcs).
	Procs int
	// FileSize is the largest file a run may write, in bytes (default
	// DefaultCodeFileSize).
	FileSize int64
	// Folder is the size of each of a run's writable folders, /work and
	// /dev/shm, in bytes (default DefaultCodeFolder).
	Folder int64
	// OutputBytes is how much of each of stdout and stderr is kept
	// (default DefaultCodeOutput).
	OutputBytes int
	// Python is the interpreter, a name looked up in PATH or a path
	// (default DefaultCodePython). A launcher such as a pyenv shim is
	// resolved to the interpreter itself; its prefix is bound read-only
	// into the sandbox when it is outside /usr, and must be readable by the
	// sandbox user.
	Python string
	// Bwrap is bubblewrap, a name looked up in PATH or a path (default
	// DefaultCodeBwrap).
	Bwrap string
}

// Grade runs the answer's program and the item's tests; see CodeGrader.
func (g *CodeGrader) Grade(ctx context.Context, it suite.Item, answer string) (grade.Result, error) {
	if strings.TrimSpace(it.Tests) == "" {
		return grade.Result{}, fmt.Errorf("code grader: item %s: %w: no tests", it.ID, grade.ErrBadItem)
	}
	if len(it.Tests) > maxTests {
		return grade.Result{}, fmt.Errorf("code grader: item %s: %w: tests over %d bytes", it.ID, grade.ErrBadItem, maxTests)
	}
	if r, ok := grade.Refuse(answer, false); ok {
		return r, nil
	}
	program := ExtractProgram(answer)
	if strings.TrimSpace(program) == "" {
		return grade.Result{Empty: true, Detail: "no program in answer"}, nil
	}
	if err := ctx.Err(); err != nil {
		return grade.Result{}, fmt.Errorf("code grader: item %s: %w", it.ID, err)
	}
	sb, err := g.sandbox(ctx)
	if err != nil {
		return grade.Result{}, err
	}
	if !strings.HasSuffix(program, "\n") {
		program += "\n"
	}
	o, err := g.run(ctx, sb, program, it.Tests, g.timeout())
	if err != nil {
		return grade.Result{}, err
	}
	if o.ctxErr != nil {
		return grade.Result{}, fmt.Errorf("code grader: item %s: %w", it.ID, o.ctxErr)
	}
	if !o.started && !o.timedOut {
		// bubblewrap failed before the program ran: probe again, so that a
		// machine that lost its sandbox refuses, and anything else is the
		// grader's failure, never the answer's.
		g.forget(sb)
		if _, err := g.sandbox(ctx); err != nil {
			return grade.Result{}, err
		}
		return grade.Result{}, fmt.Errorf("code grader: item %s: the sandbox did not start (%s; %w)", it.ID, orNothing(lastLine(o.stderr)), o.runErr)
	}
	// The report was written whole before the program started: nothing in
	// it is the answer's doing.
	checks, bad, err := parseReport(o.report)
	switch {
	case bad != "":
		return grade.Result{}, fmt.Errorf("code grader: item %s: %w: %s", it.ID, grade.ErrBadItem, bad)
	case err != nil && o.timedOut:
		return g.judge(o, nil), nil
	case err != nil:
		return grade.Result{}, fmt.Errorf("code grader: item %s: the sandbox's prelude did not report the tests (%s): %w", it.ID, orNothing(lastLine(o.stderr)), err)
	}
	return g.judge(o, checks), nil
}

// judge turns the end of a run into a Result: the first check whose
// result is not its expected value, among those the run reported however
// it ended, else how the run ended. It passes a run that exited 0 after
// the harness reported every check, each the value expected. bubblewrap
// reports a program killed by signal n as exit status 128+n, as a shell
// does.
func (g *CodeGrader) judge(o outcome, checks []check) grade.Result {
	results, end, problem := readResults(o.records, len(checks))
	for i, r := range results {
		if detail, ok := checks[i].failure(r); !ok {
			return grade.Result{Detail: "tests failed: " + detail}
		}
	}
	switch {
	case o.recordsOver:
		return grade.Result{Detail: fmt.Sprintf("tests failed: results over %d MiB", maxRecords>>20)}
	case problem != "":
		return grade.Result{Detail: "tests failed: the results are forged or malformed: " + problem}
	case o.timedOut:
		return grade.Result{Detail: fmt.Sprintf("timed out after %v", g.timeout())}
	case o.exit == 0 && end:
		return grade.Result{Score: 1}
	case o.exit == 0:
		return grade.Result{Detail: fmt.Sprintf("tests did not run to their end (%d of %d checks): the program left with exit status 0 (sys.exit, os._exit or a closed output)", len(results), len(checks))}
	}
	line := failureLine(o.stderr)
	if o.exit > 128 && o.exit < 128+65 {
		switch sig := syscall.Signal(o.exit - 128); sig {
		case syscall.SIGXCPU:
			return grade.Result{Detail: fmt.Sprintf("killed: CPU time limit (%ds)", g.cpuSeconds())}
		case syscall.SIGXFSZ:
			return grade.Result{Detail: fmt.Sprintf("killed: file size limit (%d bytes)", g.fileSize())}
		case syscall.SIGKILL:
			return grade.Result{Detail: "killed: SIGKILL (CPU or memory limit)"}
		default:
			return grade.Result{Detail: joinDetail(fmt.Sprintf("killed: signal %v", sig), line)}
		}
	}
	switch {
	case strings.HasPrefix(line, "MemoryError"):
		return grade.Result{Detail: fmt.Sprintf("killed: memory limit (%d MiB address space)", g.memory()>>20)}
	case strings.Contains(line, "[Errno 27]"): // EFBIG: python ignores SIGXFSZ
		return grade.Result{Detail: fmt.Sprintf("killed: file size limit (%d bytes)", g.fileSize())}
	case strings.Contains(line, "[Errno 28]"): // ENOSPC: the folder is full
		return grade.Result{Detail: fmt.Sprintf("killed: folder size limit (%d MiB)", g.folder()>>20)}
	case strings.HasPrefix(line, "BlockingIOError: [Errno 11]"): // EAGAIN from fork
		return grade.Result{Detail: fmt.Sprintf("killed: process limit (%d processes)", g.procs())}
	case line != "":
		return grade.Result{Detail: "tests failed: " + line}
	}
	detail := fmt.Sprintf("tests failed: exit status %d", o.exit)
	if out := lastLine(o.stdout); out != "" {
		detail += ", stdout: " + out
	}
	return grade.Result{Detail: detail}
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

func (g *CodeGrader) folder() int64 {
	if g.Folder > 0 {
		return g.Folder
	}
	return DefaultCodeFolder
}

func (g *CodeGrader) python() string {
	if g.Python != "" {
		return g.Python
	}
	return DefaultCodePython
}

func (g *CodeGrader) bwrap() string {
	if g.Bwrap != "" {
		return g.Bwrap
	}
	return DefaultCodeBwrap
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

// exceptionLine is the last line of a Python traceback: the exception's
// name, built-in ones ending in Error, Exception, Exit, Interrupt or
// Warning, then its message.
var exceptionLine = regexp.MustCompile(`^([A-Za-z_]\w*\.)*[A-Za-z_]\w*(Error|Exception|Exit|Interrupt|Warning)(: |$)`)

// failureLine returns the line of stderr that says why a run failed: the
// last exception line among its last 64 lines, else its last line. The
// processes of a run share stderr, so the tracebacks of a program's
// children (a fork bomb's) interleave, a line at a time, with its own.
func failureLine(stderr string) string {
	lines := strings.Split(strings.TrimRight(stderr, " \t\r\n"), "\n")
	for i := len(lines) - 1; i >= 0 && i >= len(lines)-64; i-- {
		if l := strings.TrimSpace(lines[i]); exceptionLine.MatchString(l) {
			return lastLine(l)
		}
	}
	return lastLine(stderr)
}

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
