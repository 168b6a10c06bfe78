package sandbox_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/adapters/sandbox"
	"github.com/lowbarena/lowbarena/domain/grade"
	"github.com/lowbarena/lowbarena/domain/suite"
)

// pyList writes strs as a Python list of str literals.
func pyList(strs []string) string {
	q := make([]string, len(strs))
	for i, s := range strs {
		q[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// worldDir is a temporary folder with mode perm whose parents the sandbox
// user can traverse (t.TempDir's parent is the test user's own), so that
// only the sandbox keeps a program from it.
func worldDir(t *testing.T, perm os.FileMode) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "lowbarena-grade-test-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, perm))
	return dir
}

// sandboxUID is the uid programs run as under this test's grader.
func sandboxUID() int {
	if os.Geteuid() == 0 {
		return sandbox.SandboxUID
	}
	return os.Getuid()
}

// TestCodeEnvironment is not parallel: it sets a secret in the grader's
// environment, and opens a file without close-on-exec, that the program
// must not see.
func TestCodeEnvironment(t *testing.T) {
	needSandbox(t)
	t.Setenv("LOWBARENA_GRADE_SECRET", "hunter2")
	secret := filepath.Join(worldDir(t, 0o755), "secret")
	require.NoError(t, os.WriteFile(secret, []byte("hunter2"), 0o644))
	fd, err := syscall.Open(secret, syscall.O_RDONLY, 0) // no O_CLOEXEC
	require.NoError(t, err)
	defer syscall.Close(fd)
	flags, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_GETFD, 0)
	require.Zero(t, errno)
	require.Zero(t, flags&syscall.FD_CLOEXEC, "the control fd must be inherited by children")
	program := fmt.Sprintf(`import os, socket
assert "LOWBARENA_GRADE_SECRET" not in os.environ, "secret visible"
extra = set(os.environ) - {"PATH", "HOME", "TMPDIR", "PWD", "LC_CTYPE"}
assert not extra, "unexpected variables: %%s" %% sorted(extra)
assert os.getcwd() == "/work", os.getcwd()
assert os.environ["HOME"] == os.environ["TMPDIR"] == "/work"
assert os.path.realpath("/tmp") == "/work"
assert os.listdir(".") == ["main.py"], os.listdir(".")
try:
    open("main.py", "a")
    raise AssertionError("main.py is writable")
except OSError:
    pass
# Only stdio is open (3 is listdir's own).
assert sorted(os.listdir("/proc/self/fd")) == ["0", "1", "2", "3"], os.listdir("/proc/self/fd")
assert os.getuid() == %d and os.getgid() == %d and os.getgroups() == [], (os.getuid(), os.getgroups())
assert socket.gethostname() == "lowbarena-sandbox", socket.gethostname()
for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
    for f in ("environ", "cmdline"):
        try:
            data = open("/proc/%%s/%%s" %% (pid, f), "rb").read()
        except OSError:
            continue
        assert b"hunter2" not in data, "secret readable in /proc/%%s/%%s" %% (pid, f)
def add(a, b): return a + b
`, sandboxUID(), sandboxUID())
	res, err := (&sandbox.CodeGrader{}).Grade(context.Background(), addItem, program)
	require.NoError(t, err)
	require.Equal(t, 1.0, res.Score, res.Detail)
}

// TestCodeSeesNothingOfTheHost lays out what a program must not read (a
// held-out suite, the arena's data folder, another sample's run folder in
// the host's temporary folder, the host's /etc/passwd) and runs a
// program that looks for them and for their content anywhere it can read.
// The same program run on the host, outside the sandbox, finds them: the
// check can fail.
func TestCodeSeesNothingOfTheHost(t *testing.T) {
	needSandbox(t)
	t.Parallel()
	token := fmt.Sprintf("lowbarena-secret-%d", time.Now().UnixNano())
	dir := worldDir(t, 0o755)
	// Another sample's run folder, in the host's temporary folder.
	other, err := os.MkdirTemp("", "lowbarena-code-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(other) })
	secrets := []string{
		filepath.Join(dir, "suites", "ranked", "code.jsonl"),
		filepath.Join(dir, "data", "arena", "records", "sub-1.json"),
		filepath.Join(other, "main.py"),
	}
	for _, p := range secrets {
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(token+"\n"), 0o644))
	}
	require.NoError(t, os.Chmod(other, 0o755))
	require.FileExists(t, "/etc/passwd")
	paths := append(append([]string{}, secrets...), dir, other, "/etc/passwd", "/etc", "/root", "/home", "/var", "/sys", "/run")

	// The root the sandbox should show, derived from this host's layout.
	root := []string{"dev", "proc", "tmp", "usr", "work"}
	for _, top := range []string{"bin", "lib", "lib64"} {
		if _, err := os.Lstat("/" + top); err == nil {
			root = append(root, top)
		}
	}
	sort.Strings(root)
	local, _ := os.ReadDir("/usr/local")

	program := fmt.Sprintf(`import os
token = bytes.fromhex(%q)
seen = [p for p in %s if os.path.lexists(p)]
assert not seen, "visible: %%r" %% seen
assert sorted(os.listdir("/")) == %s, "root: %%r" %% sorted(os.listdir("/"))
assert %s or os.listdir("/usr/local") == [], "/usr/local: %%r" %% os.listdir("/usr/local")
found = []
for top, dirs, files in os.walk("/"):
    if top == "/":
        dirs[:] = [d for d in dirs if d not in ("proc", "dev", "usr")]
    for f in files:
        p = os.path.join(top, f)
        try:
            with open(p, "rb") as fh:
                if token in fh.read():
                    found.append(p)
        except OSError:
            pass
assert not found, "found: %%r" %% found
def add(a, b): return a + b
`, hex.EncodeToString([]byte(token)), pyList(paths), pyList(root), map[bool]string{true: "True", false: "False"}[len(local) == 0])

	res, err := (&sandbox.CodeGrader{}).Grade(context.Background(), addItem, program)
	require.NoError(t, err)
	require.Equal(t, 1.0, res.Score, res.Detail)

	// The control: on the host the same program sees them.
	out, err := exec.Command(sandbox.DefaultCodePython, "-I", "-c", program).CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "AssertionError: visible: ")
	require.Contains(t, string(out), secrets[0])
}

// TestCodeSeesNoOtherRun runs two programs at once: one leaves an answer
// in its folder and waits; the other looks for it, and for any process
// but its own, while the first runs.
func TestCodeSeesNoOtherRun(t *testing.T) {
	needSandbox(t)
	t.Parallel()
	g := &sandbox.CodeGrader{}
	first := `import time
open("answer-a.txt", "w").write("the first run's answer")
time.sleep(3)
def add(a, b): return a + b
`
	second := `import os, time
time.sleep(0.5)
end = time.time() + 2
while time.time() < end:
    assert os.listdir("/work") == ["main.py"], os.listdir("/work")
    pids = {p for p in os.listdir("/proc") if p.isdigit()}
    # The sandbox's init (bubblewrap) and this program only.
    assert pids <= {"1", str(os.getpid())}, sorted(pids)
    time.sleep(0.05)
def add(a, b): return a + b
`
	var wg sync.WaitGroup
	results := make([]grade.Result, 2)
	errs := make([]error, 2)
	for i, program := range []string{first, second} {
		wg.Go(func() { results[i], errs[i] = g.Grade(context.Background(), addItem, program) })
	}
	wg.Wait()
	for i := range results {
		require.NoError(t, errs[i])
		require.Equal(t, 1.0, results[i].Score, "run %d: %s", i, results[i].Detail)
	}
}

// TestCodeWritesNowhereElse: every write outside /work and /dev/shm
// fails, and nothing reaches the host.
func TestCodeWritesNowhereElse(t *testing.T) {
	needSandbox(t)
	t.Parallel()
	host := worldDir(t, 0o777)
	name := fmt.Sprintf("escape-%d", time.Now().UnixNano())
	g := &sandbox.CodeGrader{Timeout: 5 * time.Second}
	for _, tc := range []struct {
		name, path, detail string
	}{
		{"root", "/" + name, "Read-only file system"},
		{"usr", "/usr/lib/" + name, "Read-only file system"},
		{"usr local", "/usr/local/" + name, "Read-only file system"},
		{"dev", "/dev/" + name, "Read-only file system"},
		{"etc", "/etc/" + name, "No such file or directory"},
		{"the host's temporary folder", filepath.Join(host, name), "No such file or directory"},
		{"its own program", "/work/main.py", "Read-only file system"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			program := fmt.Sprintf("open(%q, 'a').write('x')\ndef add(a, b): return a + b\n", tc.path)
			res, err := g.Grade(context.Background(), addItem, program)
			require.NoError(t, err)
			require.Zero(t, res.Score, res.Detail)
			require.Contains(t, res.Detail, tc.detail)
		})
	}
	require.NoFileExists(t, "/"+name)
	require.NoFileExists(t, filepath.Join(host, name))
	// Its own folders it may write.
	res, err := g.Grade(context.Background(), addItem, "open('/work/a', 'w').write('x')\nopen('/tmp/b', 'w').write('x')\n"+
		"open('/dev/shm/c', 'w').write('x')\ndef add(a, b): return a + b\n")
	require.NoError(t, err)
	require.Equal(t, 1.0, res.Score, res.Detail)
}

// listener counts the connections it accepts.
type listener struct {
	net.Listener
	accepted atomic.Int64
}

func listen(t *testing.T, network, address string) *listener {
	t.Helper()
	ln, err := net.Listen(network, address)
	require.NoError(t, err)
	l := &listener{Listener: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			l.accepted.Add(1)
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return l
}

// TestCodeNoNetwork: a program reaches no listener of the host (TCP on
// loopback, an abstract and a path UNIX socket) and nothing beyond it;
// the test itself reaches the same listeners.
func TestCodeNoNetwork(t *testing.T) {
	needSandbox(t)
	t.Parallel()
	tcp := listen(t, "tcp", "127.0.0.1:0")
	abstract := listen(t, "unix", fmt.Sprintf("@lowbarena-grade-test-%d", time.Now().UnixNano()))
	dir := worldDir(t, 0o777)
	path := listen(t, "unix", filepath.Join(dir, "s.sock"))
	require.NoError(t, os.Chmod(filepath.Join(dir, "s.sock"), 0o777))
	// The control: the listeners are there.
	for _, l := range []*listener{tcp, abstract, path} {
		c, err := net.Dial(l.Addr().Network(), l.Addr().String())
		require.NoError(t, err)
		c.Close()
		require.Eventually(t, func() bool { return l.accepted.Load() == 1 }, 5*time.Second, 10*time.Millisecond)
	}

	port := tcp.Addr().(*net.TCPAddr).Port
	g := &sandbox.CodeGrader{Timeout: 8 * time.Second}
	for _, tc := range []struct {
		name, connect, detail string
	}{
		{"tcp to the host's loopback", fmt.Sprintf("socket.create_connection(('127.0.0.1', %d), timeout=3)", port), "ConnectionRefusedError: [Errno 111]"},
		{"abstract unix socket", fmt.Sprintf("s = socket.socket(socket.AF_UNIX); s.connect(%q)", "\x00"+strings.TrimPrefix(abstract.Addr().String(), "@")), "ConnectionRefusedError: [Errno 111]"},
		{"unix socket file", fmt.Sprintf("s = socket.socket(socket.AF_UNIX); s.connect(%q)", path.Addr().String()), "FileNotFoundError"},
		{"the internet", "socket.create_connection(('1.1.1.1', 53), timeout=3)", "OSError: [Errno 101] Network is unreachable"},
		{"name lookup", "socket.getaddrinfo('example.com', 80)", "socket.gaierror"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			program := "import socket\n" + tc.connect + "\ndef add(a, b): return a + b\n"
			res, err := g.Grade(context.Background(), addItem, program)
			require.NoError(t, err)
			require.Zero(t, res.Score, res.Detail)
			require.Contains(t, res.Detail, tc.detail)
		})
	}
	for _, l := range []*listener{tcp, abstract, path} {
		require.Equal(t, int64(1), l.accepted.Load(), "%s accepted a connection from a sandbox", l.Addr())
	}
}

// TestCodeLeavesNothing: a program that starts a sleeper, and a daemon
// that left its process group and session, leaves neither behind. The test
// watches the host's /proc for both while the program runs (so the check
// can fail) and after Grade returns.
func TestCodeLeavesNothing(t *testing.T) {
	needSandbox(t)
	t.Parallel()
	marker := fmt.Sprintf("7777.%09d", time.Now().Nanosecond())
	program := fmt.Sprintf(`import os, subprocess, time
subprocess.Popen(["sleep", "%[1]s1"])
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execvp("sleep", ["sleep", "%[1]s2"])
    os._exit(0)
time.sleep(3)
def add(a, b): return a + b
`, marker)
	done := make(chan struct{})
	var (
		res grade.Result
		err error
	)
	go func() {
		defer close(done)
		res, err = (&sandbox.CodeGrader{}).Grade(context.Background(), addItem, program)
	}()
	seen := map[string]bool{}
	for running := true; running; {
		select {
		case <-done:
			running = false
		case <-time.After(20 * time.Millisecond):
			for _, p := range sleepers(marker) {
				seen[p] = true
			}
		}
	}
	require.NoError(t, err)
	require.Equal(t, 1.0, res.Score, res.Detail)
	require.True(t, seen[marker+"1"], "the sleeper was never seen running: %v", seen)
	require.True(t, seen[marker+"2"], "the daemon was never seen running: %v", seen)
	require.Eventually(t, func() bool { return len(sleepers(marker)) == 0 }, 5*time.Second, 20*time.Millisecond,
		"outlived Grade: %v", sleepers(marker))
}

// sleepers returns the arguments of live (not zombie) sleep processes on
// the host whose argument starts with marker.
func sleepers(marker string) []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		if len(args) != 2 || filepath.Base(args[0]) != "sleep" || !strings.HasPrefix(args[1], marker) {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// The state follows the parenthesised command name.
		if _, rest, _ := strings.Cut(string(stat), ") "); strings.HasPrefix(rest, "Z") || strings.HasPrefix(rest, "X") {
			continue
		}
		out = append(out, args[1])
	}
	return out
}

// noNamespaces is what bwrap says, and does, where it cannot create a
// user namespace.
const noNamespaces = `echo "bwrap: No permissions to create new namespace, likely because the kernel does not allow non-privileged user namespaces." >&2; exit 1`

// TestCheckSuite is not parallel: it puts a bwrap that cannot create
// namespaces first on PATH, where the built-in code grader finds it.
func TestCheckSuite(t *testing.T) {
	needSandbox(t)
	ctx := context.Background()
	withCode := suite.Generate("t", "1", suite.SplitDev, suite.SeedDev, suite.Sizes{"math": 2, "code": 1})
	noCode := suite.Generate("t", "1", suite.SplitDev, suite.SeedDev, suite.Sizes{"math": 2})
	require.NoError(t, grade.Check(ctx, withCode))
	require.NoError(t, grade.Check(ctx, noCode))

	dir := worldDir(t, 0o755)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "bwrap"), []byte("#!/bin/sh\n"+noNamespaces+"\n"), 0o755))
	t.Setenv("PATH", dir+string(filepath.ListSeparator)+os.Getenv("PATH"))
	err := grade.Check(ctx, withCode)
	require.ErrorIs(t, err, sandbox.ErrSandboxUnavailable)
	require.ErrorContains(t, err, "No permissions to create new namespace")
	require.NoError(t, grade.Check(ctx, noCode), "a suite without code needs no sandbox")
	_, err = grade.Grade(ctx, addItem, addRight)
	require.ErrorIs(t, err, sandbox.ErrSandboxUnavailable)
}

// TestCodeRefusesWithoutSandbox: where bubblewrap cannot sandbox a
// program, Grade and Check refuse with ErrSandboxUnavailable and say what
// to do, and the program never runs: it would leave a file in a folder
// anyone may write.
func TestCodeRefusesWithoutSandbox(t *testing.T) {
	needSandbox(t)
	t.Parallel()
	bwrap, err := exec.LookPath("bwrap")
	require.NoError(t, err)
	open := worldDir(t, 0o755)   // the sandbox user may run what is here
	closed := worldDir(t, 0o700) // root's only
	marks := worldDir(t, 0o777)  // anyone may write here

	script := func(dir, name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755))
		return p
	}
	flag := filepath.Join(open, "broken")
	// Works until the flag exists: a machine that loses its sandbox after
	// the grader checked it.
	flaky := script(open, "bwrap-flaky", fmt.Sprintf("if [ -e %s ]; then %s; fi\nexec %s \"$@\"", flag, noNamespaces, bwrap))
	python := filepath.Join(closed, "python3")
	if os.Geteuid() == 0 {
		exe, err := filepath.EvalSymlinks(sandbox.DefaultCodePython)
		require.NoError(t, err)
		data, err := os.ReadFile(exe)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(python, data, 0o755))
	}

	for i, tc := range []struct {
		name     string
		g        *sandbox.CodeGrader
		rootOnly bool
		before   func(t *testing.T, g *sandbox.CodeGrader)
		message  []string
	}{
		{name: "bubblewrap missing", g: &sandbox.CodeGrader{Bwrap: filepath.Join(open, "no-bwrap")},
			message: []string{"bubblewrap is not installed", "apt-get install bubblewrap"}},
		{name: "bubblewrap without user namespaces", g: &sandbox.CodeGrader{Bwrap: script(open, "bwrap-no-userns", noNamespaces)},
			message: []string{"cannot create the sandbox", "No permissions to create new namespace", "enable unprivileged user namespaces"}},
		{name: "bubblewrap the sandbox user cannot run", g: &sandbox.CodeGrader{Bwrap: script(closed, "bwrap", "exec "+bwrap+" \"$@\"")}, rootOnly: true,
			message: []string{"cannot be started as uid 65534", "permission denied"}},
		{name: "an interpreter the sandbox user cannot read", g: &sandbox.CodeGrader{Python: python}, rootOnly: true,
			message: []string{"the interpreter " + python + " cannot be run by uid 65534", "/usr/bin/python3"}},
		{name: "a sandbox lost after the check", g: &sandbox.CodeGrader{Bwrap: flaky},
			before: func(t *testing.T, g *sandbox.CodeGrader) {
				res, err := g.Grade(context.Background(), addItem, addRight)
				require.NoError(t, err)
				require.Equal(t, 1.0, res.Score, res.Detail)
				require.NoError(t, os.WriteFile(flag, nil, 0o644))
			},
			message: []string{"cannot create the sandbox", "No permissions to create new namespace"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.rootOnly && os.Geteuid() != 0 {
				t.Skip("the grader switches to the sandbox user only as root")
			}
			if tc.before != nil {
				tc.before(t, tc.g)
			}
			mark := filepath.Join(marks, fmt.Sprint(i))
			program := fmt.Sprintf("open(%q, 'w').write('ran')\ndef add(a, b): return a + b\n", mark)
			res, err := tc.g.Grade(context.Background(), addItem, program)
			t.Log(err)
			require.ErrorIs(t, err, sandbox.ErrSandboxUnavailable)
			require.Equal(t, grade.Result{}, res)
			for _, m := range tc.message {
				require.ErrorContains(t, err, m)
			}
			require.NoFileExists(t, mark, "the program ran")
			require.ErrorIs(t, tc.g.Check(context.Background()), sandbox.ErrSandboxUnavailable)
		})
	}
}
