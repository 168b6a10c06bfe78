package sandbox

import (
	"bytes"
	"context"
	"crypto/rand"
	_ "embed" // the prelude and the harness
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrSandboxUnavailable is wrapped by the error of a CodeGrader that
// refuses to run a program because it cannot sandbox it: bubblewrap is
// missing or cannot create namespaces here, or the interpreter is missing
// or cannot be run by the sandbox user. The error's text says what
// to install or enable. Nothing in a refusal is the answer's fault, and no
// retry on the same machine helps: callers fail the job with
// reason.SandboxUnavailable. There is never a fallback to an unsandboxed
// run.
var ErrSandboxUnavailable = errors.New("sandbox unavailable")

// The user and group a program runs as when the grader runs as root
// (nobody and nogroup on Debian). A grader that is not root runs programs
// as itself, in a user namespace of their own.
const (
	SandboxUID = 65534
	SandboxGID = 65534
)

// Paths inside the sandbox.
const (
	// sandboxWork is the run's private folder: a tmpfs of at most Folder
	// bytes holding main.py (read-only); HOME and TMPDIR, and /tmp links
	// to it.
	sandboxWork = "/work"
	// sandboxPath is the only PATH a run sees.
	sandboxPath = "/usr/local/bin:/usr/bin:/bin"
	// sandboxHost is the sandbox's host name (its own UTS namespace).
	sandboxHost = "lowbarena-sandbox"
)

// probeOK is what the probe program writes when the sandbox works.
const probeOK = "lowbarena-sandbox-ok"

// Fixed file descriptors of bwrap (exec.Cmd.ExtraFiles start at 3).
const (
	fdStatus = 3 // bwrap's --json-status-fd: one JSON document a line
	fdSource = 4 // the program, copied by --ro-bind-data to /work/main.py
	fdTests  = 5 // the item's tests, read by the prelude and closed
	fdReport = 6 // the prelude's report of the checks, closed before the program starts
)

// Bounds of what passes between the grader and a run.
const (
	// maxTests is the longest Tests of an item.
	maxTests = 1 << 20
	// maxReport is the most of the prelude's report that is read.
	maxReport = 4 << 20
	// maxRecords is the most of the harness's results that is kept.
	maxRecords = 4 << 20
)

// The Python of every run: canon.py's encoder precedes both the prelude
// and the harness.
var (
	//go:embed python/canon.py
	canonPy string
	//go:embed python/prelude.py
	preludePy string
	//go:embed python/harness.py
	harnessPy string
)

// sandbox is a checked sandbox: bubblewrap and an interpreter that ran a
// probe program inside it as the sandbox user.
type sandbox struct {
	bwrap string
	// python is the interpreter's path, the same inside and outside.
	python string
	// binds are the interpreter's folders outside /usr, bound read-only.
	binds []string
	// maskLocal hides /usr/local behind an empty tmpfs (unless the
	// interpreter lives there).
	maskLocal bool
	// cred switches a root grader to SandboxUID; nil otherwise.
	cred     *syscall.Credential
	uid, gid int
}

// sandboxes caches checked sandboxes by bwrap path and interpreter name;
// only successes are cached, so installing bubblewrap or enabling user
// namespaces needs no restart. probing serialises the probes.
var (
	sandboxes sync.Map // string -> *sandbox
	probing   sync.Mutex
)

// Check reports whether g can sandbox programs on this machine: nil, or an
// error wrapping ErrSandboxUnavailable that says what to install or
// enable. It runs a probe program in the sandbox the first time (about as
// long as one Grade) and caches success; Grade checks the same way, so
// calling Check first is only useful to fail early.
func (g *CodeGrader) Check(ctx context.Context) error {
	_, err := g.sandbox(ctx)
	return err
}

// sandbox returns g's checked sandbox, probing it when no success is
// cached.
func (g *CodeGrader) sandbox(ctx context.Context) (*sandbox, error) {
	bwrap, err := exec.LookPath(g.bwrap())
	if err != nil {
		return nil, refusal("bubblewrap is not installed (%s: %w): install Debian's bubblewrap 0.8.0 or later (apt-get install bubblewrap; make deps does it)", g.bwrap(), err)
	}
	key := bwrap + "\x00" + g.python()
	if sb, ok := sandboxes.Load(key); ok {
		return sb.(*sandbox), nil
	}
	probing.Lock()
	defer probing.Unlock()
	if sb, ok := sandboxes.Load(key); ok {
		return sb.(*sandbox), nil
	}
	sb, err := g.probe(ctx, bwrap)
	if err != nil {
		return nil, err
	}
	sandboxes.Store(key, sb)
	return sb, nil
}

// forget drops g's cached sandbox, so that the next Grade probes again.
func (g *CodeGrader) forget(sb *sandbox) {
	sandboxes.CompareAndDelete(sb.bwrap+"\x00"+g.python(), sb)
}

// probe checks every part of the sandbox in turn, so that a refusal names
// the part that fails: the interpreter as the grader, the interpreter as
// the sandbox user, then bubblewrap running a probe program through the
// same path as a real run.
func (g *CodeGrader) probe(ctx context.Context, bwrap string) (*sandbox, error) {
	sb := &sandbox{bwrap: bwrap, uid: os.Getuid(), gid: os.Getgid()}
	if os.Geteuid() == 0 {
		sb.uid, sb.gid = SandboxUID, SandboxGID
		sb.cred = &syscall.Credential{Uid: SandboxUID, Gid: SandboxGID, Groups: []uint32{}}
	}
	// A grader killed before this process started may have left sandbox
	// inits behind (see SweepOrphans); a new grader ends them first.
	_, _ = SweepOrphans(sb.uid)
	// The interpreter: a name looked up in PATH, or a path; a launcher
	// such as a pyenv shim is resolved to the interpreter itself by asking
	// it, as the grader, for sys.executable.
	name := g.python()
	path, err := exec.LookPath(name)
	if err != nil {
		return nil, refusal("the interpreter %s is not installed (%w): install Debian's python3, or name an installed one", name, err)
	}
	out, err := g.hostPython(ctx, path, nil, "import sys; sys.stdout.write(sys.executable)")
	if err != nil {
		return nil, err
	}
	exe := strings.TrimSpace(out)
	if !filepath.IsAbs(exe) || !isExecutable(exe) {
		exe = path
	}
	exe, err = filepath.Abs(exe)
	if err != nil {
		return nil, fmt.Errorf("code grader: %s: %w", exe, err)
	}
	sb.python = exe

	// Run as the sandbox user, the interpreter says which folders it
	// needs; that it runs at all shows the user can read them.
	out, err = g.hostPython(ctx, exe, sb.cred, "import sys; print(sys.prefix); print(sys.base_prefix)")
	if err != nil {
		return nil, refusal("the interpreter %s cannot be run by uid %d, the sandbox user: %v; name one that user can read, such as Debian's %s", exe, sb.uid, err, DefaultCodePython)
	}
	need := append(strings.Split(strings.TrimSpace(out), "\n"), filepath.Dir(exe))
	sb.maskLocal = isDir("/usr/local")
	for _, p := range need {
		real, err := filepath.EvalSymlinks(p)
		if err != nil || !filepath.IsAbs(real) {
			continue
		}
		switch {
		case real == "/":
			return nil, refusal("the interpreter %s has / as its prefix, which would expose the whole file system: name one installed under a prefix of its own, such as Debian's %s", exe, DefaultCodePython)
		case within(real, "/usr/local"):
			sb.maskLocal = false
		case within(real, "/usr"):
		default:
			sb.binds = appendBind(sb.binds, real)
		}
	}

	// The probe program, run exactly as an answer's program is.
	const probeTimeout = 30 * time.Second
	r, err := g.run(ctx, sb, "import sys; sys.stdout.write("+strconv.Quote(probeOK)+")\n", "", probeTimeout)
	switch {
	case err != nil:
		return nil, err
	case r.ctxErr != nil:
		return nil, fmt.Errorf("code grader: sandbox probe: %w", r.ctxErr)
	case r.timedOut:
		return nil, refusal("the sandbox's probe program did not finish in %v (bubblewrap %s, interpreter %s)", probeTimeout, bwrap, exe)
	case !r.started:
		return nil, refusal("bubblewrap (%s) cannot create the sandbox as uid %d: %s; enable unprivileged user namespaces (sysctl user.max_user_namespaces above 0, kernel.unprivileged_userns_clone=1 where it exists, kernel.apparmor_restrict_unprivileged_userns=0 or an AppArmor profile for bwrap), and in a container allow them and a new /proc (Docker: --security-opt seccomp=unconfined --security-opt apparmor=unconfined --security-opt systempaths=unconfined)",
			bwrap, sb.uid, orNothing(lastLine(r.stderr)))
	case r.exit != 0 || r.stdout != probeOK:
		return nil, refusal("the interpreter %s does not run in the sandbox as uid %d (exit status %d: %s): name one that user can read, such as Debian's %s",
			exe, sb.uid, r.exit, orNothing(lastLine(r.stderr)), DefaultCodePython)
	case string(r.report) != "ok\n" || !slices.Equal(r.records, []string{"end"}):
		return nil, refusal("the sandbox's prelude and harness do not run with the interpreter %s (report %q, results %q): name one that runs them, such as Debian's %s",
			exe, r.report, r.records, DefaultCodePython)
	}
	return sb, nil
}

// hostPython runs python -I -c code outside any sandbox and returns its
// stdout: as the grader, in its environment (a pyenv shim needs it), or as
// cred with PATH only. It only ever runs the arena's own probe code, never
// an answer's.
func (g *CodeGrader) hostPython(ctx context.Context, python string, cred *syscall.Credential, code string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-I", "-c", code)
	cmd.Dir = "/"
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		cmd.Env = []string{"PATH=" + sandboxPath}
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		if ctx.Err() != nil {
			return "", fmt.Errorf("code grader: %s: %w", python, ctx.Err())
		}
		if line := lastLine(stderr.String()); line != "" {
			err = fmt.Errorf("%w: %s", err, line)
		}
		if cred == nil {
			return "", refusal("the interpreter %s does not run: %w", python, err)
		}
		return "", err
	}
	return string(out), nil
}

// outcome is how one sandboxed run ended.
type outcome struct {
	// started reports that bubblewrap set the sandbox up and executed the
	// program (its status reported an exit code); when false, nothing of
	// the program ran and stderr is bubblewrap's.
	started bool
	// exit is the program's exit status as bubblewrap reports it: 128+n
	// for a program killed by signal n.
	exit int
	// timedOut reports that the wall-clock limit killed the run; ctxErr
	// that the caller's context ended it.
	timedOut bool
	ctxErr   error
	// runErr is what Wait returned, for a run that ended otherwise.
	runErr error
	// report is what the prelude said of the tests (see prelude.py): the
	// checks and their expected values, or why the tests are bad; empty
	// when it did not run.
	report []byte
	// records are the harness's lines on stdout, without the run's mark
	// (see harness.py); recordsOver reports that some were dropped past
	// maxRecords. stdout is without them.
	records        []string
	recordsOver    bool
	stdout, stderr string
}

// run runs src as /work/main.py in a fresh sandbox, with tests as the
// prelude's tests, and waits for it; see CodeGrader for what the sandbox
// holds. Its error is the grader's own (pipes, a bwrap that cannot be
// started); everything else is in the outcome.
func (g *CodeGrader) run(ctx context.Context, sb *sandbox, src, tests string, timeout time.Duration) (outcome, error) {
	// Four pipes: bwrap's status, the program's source, the tests and the
	// prelude's report; ours[i] is this process's end of pipe i, theirs[i]
	// the end the sandbox holds.
	var ours, theirs [4]*os.File
	closeAll := func(files []*os.File) {
		for _, f := range files {
			if f != nil {
				f.Close()
			}
		}
	}
	for i, name := range []string{"status", "source", "tests", "report"} {
		r, w, err := os.Pipe()
		if err != nil {
			closeAll(ours[:])
			closeAll(theirs[:])
			return outcome{}, fmt.Errorf("code grader: %s pipe: %w", name, err)
		}
		if name == "status" || name == "report" { // the sandbox writes
			ours[i], theirs[i] = r, w
		} else {
			ours[i], theirs[i] = w, r
		}
	}
	statusR, sourceW, testsW, reportR := ours[0], ours[1], ours[2], ours[3]
	defer statusR.Close()
	defer reportR.Close()

	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(runCtx, sb.bwrap, g.bwrapArgs(sb)...)
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=" + sandboxPath}
	cmd.ExtraFiles = theirs[:] // fdStatus, fdSource, fdTests, fdReport
	// bwrap leads its own process group and runs as the sandbox user. The
	// program is in a session of its own inside the sandbox's PID
	// namespace, so killing the group kills bwrap, whose death kills the
	// namespace's init (--die-with-parent), whose death kills every process
	// of the namespace: nothing of the run outlives it, whatever group or
	// session it moved to.
	//
	// A grader that is killed (SIGKILL: no Cancel, no Kill of the group)
	// must not leave bwrap behind either. bwrap's --die-with-parent sets
	// its own parent death signal only once it has cloned the sandbox and
	// dropped its privileges: a grader killed before then leaves a bwrap
	// with no parent to die with, which goes on to run the program as the
	// sandbox user, unowned. Pdeathsig closes that window: Go's child sets
	// it after it has changed to the sandbox user's credentials (a
	// credential change clears the parent death signal, so it comes last,
	// as forkAndExecInChild1 orders it), checks that the grader is still
	// its parent (else it kills itself), and the signal survives the exec
	// of bwrap, which is not set-user-ID. It fires when the thread that
	// started bwrap ends, hence LockOSThread below.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: sb.cred, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// Bounds Wait should a straggler still hold the output pipes.
	cmd.WaitDelay = time.Second
	// The run's mark, fresh for every run, reaches the harness on stdin
	// and nowhere else; the harness writes it at the start of each of its
	// records (see harness.py).
	mark := newMark()
	cmd.Stdin = strings.NewReader(mark + "\n")
	stdout, stderr := newSplitter(mark, g.outputBytes()), newTail(g.outputBytes())
	cmd.Stdout, cmd.Stderr = stdout, stderr

	// bwrap's parent death signal (Pdeathsig above, and the one its
	// --die-with-parent sets) is sent when the thread that started it
	// exits: keep this goroutine on that thread until the run ends, so
	// that no other goroutine can end the thread under the run.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	err := cmd.Start()
	closeAll(theirs[:])
	if err != nil {
		sourceW.Close()
		testsW.Close()
		if errors.Is(err, fs.ErrPermission) || errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOEXEC) {
			return outcome{}, refusal("bubblewrap (%s) cannot be started as uid %d: %w", sb.bwrap, sb.uid, err)
		}
		return outcome{}, fmt.Errorf("code grader: start bubblewrap: %w", err)
	}
	// bwrap copies the program into the sandbox before it runs it; a
	// program over the pipe's buffer needs a writer beside it. A bwrap
	// that dies first makes the write fail, which ends the writer.
	go func() {
		_, _ = io.WriteString(sourceW, src)
		sourceW.Close()
	}()
	// The same for the tests, which the prelude reads before it reports.
	go func() {
		_, _ = io.WriteString(testsW, tests)
		testsW.Close()
	}()
	// The report is read while the run goes on: the prelude writes it
	// whole before the program starts.
	reported := make(chan []byte, 1)
	go func() {
		// A report cut at maxReport does not end as a whole one does: it
		// cannot be read.
		data, _ := readCapped(reportR, maxReport)
		reported <- data
	}()
	runErr := cmd.Wait()
	// Whatever happened, nothing of the run outlives it; nor, now and
	// then, anything a killed grader left on this machine.
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	maybeSweep(sb.uid)

	o := outcome{runErr: runErr, stderr: stderr.String(), ctxErr: ctx.Err()}
	stdout.end()
	o.stdout, o.records, o.recordsOver = stdout.out.String(), stdout.records, stdout.over
	o.timedOut = o.ctxErr == nil && errors.Is(runCtx.Err(), context.DeadlineExceeded)
	// bwrap has exited, so its status pipe is closed on its side; the
	// deadline only guards against a writer we do not know of.
	_ = statusR.SetReadDeadline(time.Now().Add(time.Second))
	status, _ := io.ReadAll(io.LimitReader(statusR, 64<<10))
	o.exit, o.started = exitCode(status)
	// The same holds for the report's pipe.
	_ = reportR.SetReadDeadline(time.Now().Add(time.Second))
	o.report = <-reported
	return o, nil
}

// bwrapArgs is the sandbox of one run, in bubblewrap's order (later mounts
// go on top of earlier ones).
func (g *CodeGrader) bwrapArgs(sb *sandbox) []string {
	a := []string{
		// Every namespace; a user namespace is required (no -try), and the
		// program may not create more of them.
		"--unshare-user", "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
		"--disable-userns", "--die-with-parent", "--new-session", "--hostname", sandboxHost,
		// The minimal root: /usr read-only, /usr/local hidden.
		"--ro-bind", "/usr", "/usr",
	}
	if sb.maskLocal {
		a = append(a, "--tmpfs", "/usr/local", "--remount-ro", "/usr/local")
	}
	// /bin, /lib, /lib64: links into /usr on a merged-usr system, bound
	// read-only where they are real folders.
	for _, top := range []string{"/bin", "/lib", "/lib64"} {
		fi, err := os.Lstat(top)
		switch {
		case err != nil:
		case fi.Mode()&fs.ModeSymlink != 0:
			if target, err := os.Readlink(top); err == nil {
				a = append(a, "--symlink", target, top)
			}
		case fi.IsDir():
			a = append(a, "--ro-bind", top, top)
		}
	}
	for _, p := range sb.binds {
		a = append(a, "--ro-bind", p, p)
	}
	size := strconv.FormatInt(g.folder(), 10)
	a = append(a,
		"--proc", "/proc", "--dev", "/dev",
		"--size", size, "--tmpfs", "/dev/shm",
		"--size", size, "--tmpfs", sandboxWork,
		"--symlink", sandboxWork, "/tmp",
		"--ro-bind-data", strconv.Itoa(fdSource), sandboxWork+"/main.py",
		// Nothing but /work and /dev/shm is writable.
		"--remount-ro", "/dev", "--remount-ro", "/",
		"--chdir", sandboxWork,
		"--clearenv", "--setenv", "PATH", sandboxPath, "--setenv", "HOME", sandboxWork, "--setenv", "TMPDIR", sandboxWork,
		"--uid", strconv.Itoa(sb.uid), "--gid", strconv.Itoa(sb.gid),
		"--json-status-fd", strconv.Itoa(fdStatus),
		"--",
		sb.python, "-I", "-S", "-B", "-c", canonPy+preludePy, sb.python, canonPy+harnessPy,
		strconv.Itoa(fdTests), strconv.Itoa(fdReport),
		strconv.FormatInt(g.memory(), 10), strconv.FormatInt(g.cpuSeconds(), 10), strconv.FormatInt(g.cpuSeconds()+1, 10),
		strconv.Itoa(g.procs()), strconv.FormatInt(g.fileSize(), 10),
	)
	return a
}

// The prelude (python/prelude.py) starts every run inside the sandbox,
// in an interpreter that runs nothing of the answer's. It closes every
// file descriptor but stdio and its two pipes, so that none the grader's
// process holds without close-on-exec (a library's, or one it inherited)
// reaches the program; reads the item's tests, turns them into checks and
// reports each check's expected value to the grader alone, on a pipe it
// closes; sets the run's limits, hard and soft (never above a hard limit
// the grader already has), inside the user namespace, where RLIMIT_NPROC
// counts this run's processes only; and execs the harness
// (python/harness.py) afresh. The harness runs main.py, the program alone,
// then the checks, and writes what each check's expression gave, encoded
// by python/canon.py, on stdout after the run's mark, which it read from
// stdin before the program started. A program that leaves before the
// checks have run to their end (sys.exit(0), os._exit(0), closing its
// output) has no "end" record, and its answer scores 0 whatever its exit
// status. The expected values are in no file, pipe or memory the program
// can read, so neither a forged record nor an object that claims to
// equal anything passes a check: the grader compares the encodings,
// outside the sandbox (see value.go).

// newMark returns a fresh random mark of a run.
func newMark() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "lowbarena-done-" + hex.EncodeToString(b[:])
}

// exitCode reads bwrap's JSON status: the program's exit code, and whether
// bwrap reported one (it does only once the program was executed).
func exitCode(status []byte) (int, bool) {
	dec := json.NewDecoder(bytes.NewReader(status))
	for {
		var doc struct {
			ExitCode *int `json:"exit-code"`
		}
		if err := dec.Decode(&doc); err != nil {
			return 0, false
		}
		if doc.ExitCode != nil {
			return *doc.ExitCode, true
		}
	}
}

// refusal is an error wrapping ErrSandboxUnavailable.
func refusal(format string, args ...any) error {
	return fmt.Errorf("code grader: %w: %w", ErrSandboxUnavailable, fmt.Errorf(format, args...))
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

func isDir(p string) bool {
	fi, err := os.Lstat(p)
	return err == nil && fi.IsDir()
}

// within reports whether p is dir or below it.
func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// appendBind adds p to binds unless a folder of binds holds it, and drops
// the binds p holds.
func appendBind(binds []string, p string) []string {
	kept := binds[:0]
	for _, b := range binds {
		if within(p, b) {
			return binds
		}
		if !within(b, p) {
			kept = append(kept, b)
		}
	}
	return append(kept, p)
}

func orNothing(s string) string {
	if s == "" {
		return "no message"
	}
	return s
}
