package grade_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/services/domain/grade"
	"github.com/lowbarena/lowbarena/services/domain/suite"
)

// needSandbox skips a test on a machine without python3 or prlimit.
func needSandbox(t testing.TB) {
	t.Helper()
	for _, tool := range []string{"python3", "prlimit"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed: %v", tool, err)
		}
	}
}

// addItem is a code item: write add(a, b).
var addItem = suite.Item{
	ID:     "k1",
	Grader: suite.GraderCode,
	Prompt: "Write add(a, b).",
	Tests:  "assert add(2, 3) == 5, \"add(2, 3) != 5\"\nassert add(-1, 1) == 0\n",
}

const addRight = "Here you go:\n\n```python\ndef add(a, b):\n    return a + b\n```\n"

func TestCode(t *testing.T) {
	needSandbox(t)
	t.Parallel()
	g := &grade.CodeGrader{Timeout: 2 * time.Second}
	for _, tc := range []struct {
		name   string
		answer string
		score  float64
		empty  bool
		// detail must be in the Detail.
		detail string
		// within bounds the run's wall time.
		within time.Duration
	}{
		{name: "right", answer: addRight, score: 1},
		{name: "right bare", answer: "def add(a, b):\n    return a + b\n", score: 1},
		{name: "right py fence", answer: "```py\ndef add(a, b): return a + b\n```", score: 1},
		{name: "last python block", answer: "```python\ndef add(a, b): return a - b\n```\nFixed:\n```python\ndef add(a, b): return a + b\n```\n```text\nok\n```", score: 1},
		{name: "plain fence", answer: "```\ndef add(a, b): return a + b\n```", score: 1},
		{name: "indented fence", answer: "1. Code:\n   ```python\n   def add(a, b):\n       return a + b\n   ```", score: 1},
		{name: "unclosed fence", answer: "```python\ndef add(a, b):\n    return a + b\n", score: 1},
		{name: "wrong", answer: "```python\ndef add(a, b):\n    return a - b\n```", detail: "tests failed: AssertionError: add(2, 3) != 5"},
		{name: "syntax error", answer: "```python\ndef add(a, b)\n    return a + b\n```", detail: "tests failed: SyntaxError"},
		{name: "prose", answer: "I cannot write that function.", detail: "tests failed: SyntaxError"},
		{name: "exit code", answer: "import sys\nsys.exit(3)", detail: "tests failed: exit status 3"},
		{name: "infinite loop", answer: "```python\nwhile True: pass\n```", detail: "timed out after 2s", within: 6 * time.Second},
		{name: "sleep", answer: "import time\ntime.sleep(60)", detail: "timed out after 2s", within: 6 * time.Second},
		{name: "memory bomb", answer: "x = bytearray(10**10)", detail: "killed: memory limit"},
		{name: "growing list", answer: "x = []\nwhile True:\n    x.append(bytearray(16 << 20))", detail: "killed: memory limit", within: 6 * time.Second},
		{name: "file bomb", answer: "with open('big', 'wb') as f:\n    f.write(b'x' * (32 << 20))", detail: "killed: file size limit"},
		{name: "self kill", answer: "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)", detail: "killed: signal segmentation fault"},
		{name: "child left in a loop", answer: "import subprocess\nsubprocess.Popen(['sleep', '60'])\nwhile True: pass", detail: "timed out after 2s", within: 6 * time.Second},
		{name: "output flood", answer: "import sys\nfor i in range(100000): print('x' * 100, file=sys.stderr)\nraise ValueError('boom')", detail: "tests failed: ValueError: boom"},
		{name: "empty", answer: "", empty: true, detail: "empty answer"},
		{name: "empty block", answer: "```python\n\n```", empty: true, detail: "no program in answer"},
		{name: "over long", answer: overLong, empty: true, detail: "answer over 65536 bytes"},
	} {
		// One at a time: twenty sandboxes at once on two cores would race
		// their own 2 s timeouts.
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			res, err := g.Grade(context.Background(), addItem, tc.answer)
			took := time.Since(start)
			require.NoError(t, err)
			t.Logf("%v: %+v", took.Round(time.Millisecond), res)
			require.Equal(t, tc.score, res.Score, res.Detail)
			require.Equal(t, tc.empty, res.Empty)
			require.False(t, res.HasFormat)
			require.False(t, res.Formatted)
			if tc.detail != "" {
				require.Contains(t, res.Detail, tc.detail)
			}
			within := tc.within
			if within == 0 {
				within = 10 * time.Second
			}
			require.Less(t, took, within, "run took %v", took)
		})
	}
}

func TestCodeCPULimit(t *testing.T) {
	needSandbox(t)
	t.Parallel()
	g := &grade.CodeGrader{Timeout: 8 * time.Second, CPU: time.Second}
	res, err := g.Grade(context.Background(), addItem, "while True: pass")
	require.NoError(t, err)
	require.Zero(t, res.Score)
	require.Contains(t, res.Detail, "killed: CPU time limit (1s)")
}

func TestCodeNoNetwork(t *testing.T) {
	needSandbox(t)
	if ok, why := grade.CodeIsolation(); !ok {
		t.Skipf("no isolation on this machine: %s", why)
	}
	t.Parallel()
	program := "import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=3).close()\n" +
		"def add(a, b): return a + b\n"
	res, err := (&grade.CodeGrader{}).Grade(context.Background(), addItem, program)
	require.NoError(t, err)
	require.Zero(t, res.Score)
	require.Contains(t, res.Detail, "tests failed: OSError: [Errno 101] Network is unreachable")
}

// TestCodeEnvironment is not parallel: it sets a secret in the grader's
// environment that the program must not see.
func TestCodeEnvironment(t *testing.T) {
	needSandbox(t)
	t.Setenv("LOWBARENA_GRADE_SECRET", "hunter2")
	isolated, _ := grade.CodeIsolation()
	program := fmt.Sprintf(`import os
assert "LOWBARENA_GRADE_SECRET" not in os.environ, "secret visible"
extra = set(os.environ) - {"PATH", "HOME", "TMPDIR", "LC_CTYPE"}
assert not extra, "unexpected variables: %%s" %% sorted(extra)
here = os.path.realpath(os.getcwd())
assert os.path.realpath(os.environ["HOME"]) == here, "HOME is not the run folder"
assert os.listdir(here) == ["main.py"], os.listdir(here)
try:
    leaked = b"hunter2" in open("/proc/%%d/environ" %% os.getppid(), "rb").read()
except OSError:
    leaked = False
assert not (leaked and %s), "secret readable through /proc"
def add(a, b): return a + b
`, map[bool]string{true: "True", false: "False"}[isolated])
	res, err := (&grade.CodeGrader{}).Grade(context.Background(), addItem, program)
	require.NoError(t, err)
	require.Equal(t, 1.0, res.Score, res.Detail)
}

// TestCodeLeavesNothing checks that a process the program leaves behind
// is killed and the run folder removed when Grade returns.
func TestCodeLeavesNothing(t *testing.T) {
	needSandbox(t)
	t.Parallel()
	out := t.TempDir()
	program := fmt.Sprintf(`import os, subprocess
p = subprocess.Popen(["sleep", "60"])
with open(%q, "w") as f:
    f.write("%%d %%s" %% (p.pid, os.getcwd()))
def add(a, b): return a + b
`, filepath.Join(out, "pid"))
	res, err := (&grade.CodeGrader{}).Grade(context.Background(), addItem, program)
	require.NoError(t, err)
	require.Equal(t, 1.0, res.Score, res.Detail)

	b, err := os.ReadFile(filepath.Join(out, "pid"))
	require.NoError(t, err)
	pidText, dir, ok := strings.Cut(string(b), " ")
	require.True(t, ok)
	pid, err := strconv.Atoi(pidText)
	require.NoError(t, err)
	require.NoDirExists(t, dir)
	require.Eventually(t, func() bool { return !running(pid) }, 5*time.Second, 20*time.Millisecond, "pid %d outlived Grade", pid)
}

// running reports whether pid is a live (not zombie) process.
func running(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	_, rest, _ := strings.Cut(string(stat), ") ")
	return !strings.HasPrefix(rest, "Z") && !strings.HasPrefix(rest, "X")
}

func TestCodeGraderSurvives(t *testing.T) {
	needSandbox(t)
	t.Parallel()
	// After the loops, bombs and kills above and beside it, the grader
	// still grades.
	g := &grade.CodeGrader{Timeout: 2 * time.Second}
	for _, answer := range []string{"while True: pass", "x = bytearray(10**10)", addRight} {
		_, err := g.Grade(context.Background(), addItem, answer)
		require.NoError(t, err)
	}
	res, err := g.Grade(context.Background(), addItem, addRight)
	require.NoError(t, err)
	require.Equal(t, 1.0, res.Score, res.Detail)
}

func TestCodeErrors(t *testing.T) {
	needSandbox(t)
	t.Parallel()

	_, err := (&grade.CodeGrader{Python: "python3-not-installed"}).Grade(context.Background(), addItem, addRight)
	require.ErrorIs(t, err, exec.ErrNotFound)
	require.ErrorContains(t, err, "code grader: python3-not-installed not found")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = (&grade.CodeGrader{}).Grade(ctx, addItem, addRight)
	require.ErrorIs(t, err, context.Canceled)

	// Cancelling mid-run is the grader's failure, not a timeout.
	ctx, cancel = context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = (&grade.CodeGrader{}).Grade(ctx, addItem, "while True: pass")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(start), 5*time.Second)
}

func TestExtractProgram(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, answer, want string
	}{
		{"whole answer", "print(1)", "print(1)"},
		{"python block", "text\n```python\nprint(1)\n```\nmore", "print(1)"},
		{"last python block over later plain block", "```python\nprint(1)\n```\n```\nprint(2)\n```", "print(1)"},
		{"last plain block", "```\nprint(1)\n```\n```\nprint(2)\n```", "print(2)"},
		{"python3 fence with attributes", "```Python3 title=x\nprint(1)\n```", "print(1)"},
		{"fence inside block is text", "```python\ns = '''\n```js\n'''\n```", "s = '''\n```js\n'''"},
		{"crlf", "```python\r\nprint(1)\r\n```\r\n", "print(1)"},
		{"indented", "  ```python\n  if x:\n      y()\n  ```", "if x:\n    y()"},
		{"unclosed", "```python\nprint(1)\nprint(2)", "print(1)\nprint(2)"},
		{"empty block", "```python\n```", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, grade.ExtractProgram(tc.answer))
		})
	}
}
