package sandbox_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/adapters/sandbox"
	"github.com/lowbarena/lowbarena/domain/grade"
	"github.com/lowbarena/lowbarena/domain/suite"
)

// needSandbox skips a test on a machine where the code sandbox cannot
// run, unless LOWBARENA_REQUIRE_SANDBOX=1 (make test sets it), which makes
// that a failure.
func needSandbox(t testing.TB) {
	t.Helper()
	if err := (&sandbox.CodeGrader{}).Check(context.Background()); err != nil {
		if os.Getenv("LOWBARENA_REQUIRE_SANDBOX") == "1" {
			t.Fatalf("the code sandbox is required: %v", err)
		}
		t.Skipf("no code sandbox on this machine: %v", err)
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
	// The runs that must end at a limit other than the wall clock have
	// ample time (slow, a loaded machine notwithstanding); the others two
	// seconds.
	fast := &sandbox.CodeGrader{Timeout: 2 * time.Second}
	slow := &sandbox.CodeGrader{Timeout: 20 * time.Second}
	for _, tc := range []struct {
		name   string
		answer string
		score  float64
		empty  bool
		// detail must be in the Detail.
		detail string
		slow   bool
	}{
		{name: "right", answer: addRight, score: 1},
		{name: "right bare", answer: "def add(a, b):\n    return a + b\n", score: 1},
		{name: "right py fence", answer: "```py\ndef add(a, b): return a + b\n```", score: 1},
		{name: "last python block", answer: "```python\ndef add(a, b): return a - b\n```\nFixed:\n```python\ndef add(a, b): return a + b\n```\n```text\nok\n```", score: 1},
		{name: "plain fence", answer: "```\ndef add(a, b): return a + b\n```", score: 1},
		{name: "indented fence", answer: "1. Code:\n   ```python\n   def add(a, b):\n       return a + b\n   ```", score: 1},
		{name: "unclosed fence", answer: "```python\ndef add(a, b):\n    return a + b\n", score: 1},
		{name: "uses its folder, /tmp and a subprocess", score: 1, answer: "import subprocess, tempfile\n" +
			"open('notes.txt', 'w').write('x' * 1000)\n" +
			"with tempfile.NamedTemporaryFile() as f: f.write(b'y')\n" +
			"assert subprocess.run(['echo', 'hi'], capture_output=True).stdout == b'hi\\n'\n" +
			"def add(a, b): return a + b"},
		{name: "uses multiprocessing", score: 1, answer: "import multiprocessing as mp\n" +
			"def add(a, b): return a + b\n" +
			"if __name__ == '__main__':\n    with mp.Pool(2) as p: assert p.starmap(add, [(1, 2)]) == [3]"},
		{name: "wrong", answer: "```python\ndef add(a, b):\n    return a - b\n```", detail: "tests failed: AssertionError: add(2, 3) != 5"},
		{name: "syntax error", answer: "```python\ndef add(a, b)\n    return a + b\n```", detail: "tests failed: SyntaxError"},
		{name: "prose", answer: "I cannot write that function.", detail: "tests failed: SyntaxError"},
		{name: "exit code", answer: "import sys\nsys.exit(3)", detail: "tests failed: exit status 3"},
		// A program that leaves with status 0 before its tests have run
		// passes nothing: only the harness's mark, written after the end of
		// main.py, makes a run pass.
		{name: "leaves with sys.exit(0) before its tests", answer: "import sys\ndef add(a, b): return a - b\nsys.exit(0)", detail: "tests did not run"},
		{name: "leaves with os._exit(0) before its tests", answer: "import os\nos._exit(0)", detail: "tests did not run"},
		{name: "raises SystemExit before its tests", answer: "raise SystemExit", detail: "tests did not run"},
		{name: "forges a mark", answer: "import os\nprint('lowbarena-done-' + '0' * 32, flush=True)\nos._exit(0)", detail: "tests did not run"},
		{name: "looks for the mark on stdin", answer: "import os, sys\nprint(sys.stdin.read(), flush=True)\nos._exit(0)", detail: "tests did not run"},
		{name: "closes its output", answer: "import os\ndef add(a, b): return a + b\nos.close(1)", detail: "Bad file descriptor"},
		{name: "infinite loop", answer: "```python\nwhile True: pass\n```", detail: "timed out after 2s"},
		{name: "sleep", answer: "import time\ntime.sleep(60)", detail: "timed out after 2s"},
		{name: "memory bomb", answer: "x = bytearray(10**10)", detail: "killed: memory limit (512 MiB address space)", slow: true},
		{name: "growing list", answer: "x = []\nwhile True:\n    x.append(bytearray(16 << 20))", detail: "killed: memory limit (512 MiB address space)", slow: true},
		{name: "fork bomb", answer: "import os\nwhile True:\n    os.fork()", detail: "killed: process limit (64 processes)", slow: true},
		{name: "fork bomb that ignores failures", answer: "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass", detail: "timed out after 2s"},
		{name: "file bomb", answer: "with open('big', 'wb') as f:\n    f.write(b'x' * (32 << 20))", detail: "killed: file size limit (16777216 bytes)", slow: true},
		{name: "folder bomb", answer: "for i in range(100):\n    open('f%d' % i, 'wb').write(b'x' * (1 << 20))", detail: "killed: folder size limit (64 MiB)", slow: true},
		{name: "shared memory bomb", answer: "for i in range(100):\n    open('/dev/shm/f%d' % i, 'wb').write(b'x' * (1 << 20))", detail: "killed: folder size limit (64 MiB)", slow: true},
		{name: "self kill", answer: "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)", detail: "killed: signal segmentation fault"},
		{name: "child left in a loop", answer: "import subprocess\nsubprocess.Popen(['sleep', '60'])\nwhile True: pass", detail: "timed out after 2s"},
		{name: "output flood", answer: "import sys\nfor i in range(100000): print('x' * 100, file=sys.stderr)\nraise ValueError('boom')", detail: "tests failed: ValueError: boom"},
		{name: "stray lines after the exception", answer: "import sys\nsys.stderr.write('ValueError: boom\\n  File \"main.py\", line 9, in <module>\\n')\nsys.exit(1)", detail: "tests failed: ValueError: boom"},
		{name: "empty", answer: "", empty: true, detail: "empty answer"},
		{name: "empty block", answer: "```python\n\n```", empty: true, detail: "no program in answer"},
		{name: "over long", answer: strings.Repeat(" ", grade.MaxAnswerBytes-5) + "Paris 42 B", empty: true, detail: "answer over 65536 bytes"},
	} {
		// One at a time: twenty sandboxes at once on two cores would race
		// their own 2 s timeouts.
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			g := fast
			if tc.slow {
				g = slow
			}
			res, err := g.Grade(context.Background(), addItem, tc.answer)
			require.NoError(t, err)
			t.Logf("%v: %+v", time.Since(start).Round(time.Millisecond), res)
			require.Equal(t, tc.score, res.Score, res.Detail)
			require.Equal(t, tc.empty, res.Empty)
			require.False(t, res.HasFormat)
			require.False(t, res.Formatted)
			if tc.detail != "" {
				require.Contains(t, res.Detail, tc.detail)
			}
		})
	}
}

// TestCodeGeneratedSuite: honest programs still pass in the sandbox. The
// shipped suite's code items, answered by the generators' own solver,
// score 1 when right and 0 when wrong.
func TestCodeGeneratedSuite(t *testing.T) {
	needSandbox(t)
	t.Parallel()
	s := suite.Generate("t", "1", suite.SplitDev, suite.SeedDev, suite.Sizes{"code": 12})
	require.Len(t, s.Items["code"], 12)
	for _, it := range s.Items["code"] {
		sol, ok := suite.Solve(it.Prompt)
		require.True(t, ok, it.ID)
		require.NotEmpty(t, sol.Wrong, it.ID)
		res, err := grade.Grade(context.Background(), it, sol.Right)
		require.NoError(t, err)
		require.Equal(t, 1.0, res.Score, "%s: %s", it.ID, res.Detail)
		res, err = grade.Grade(context.Background(), it, sol.Wrong[0])
		require.NoError(t, err)
		require.Zero(t, res.Score, "%s: a wrong program passed", it.ID)
	}
}

func TestCodeCPULimit(t *testing.T) {
	needSandbox(t)
	t.Parallel()
	g := &sandbox.CodeGrader{Timeout: 8 * time.Second, CPU: time.Second}
	res, err := g.Grade(context.Background(), addItem, "while True: pass")
	require.NoError(t, err)
	require.Zero(t, res.Score)
	require.Contains(t, res.Detail, "killed: CPU time limit (1s)")
}

func TestCodeGraderSurvives(t *testing.T) {
	needSandbox(t)
	t.Parallel()
	// After the loops, bombs and kills above and beside it, the grader
	// still grades.
	g := &sandbox.CodeGrader{Timeout: 2 * time.Second}
	for _, answer := range []string{"while True: pass", "x = bytearray(10**10)", "import os\nwhile True: os.fork()", addRight} {
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

	_, err := (&sandbox.CodeGrader{}).Grade(context.Background(), suite.Item{ID: "k2", Grader: suite.GraderCode}, addRight)
	require.ErrorIs(t, err, grade.ErrBadItem)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = (&sandbox.CodeGrader{}).Grade(ctx, addItem, addRight)
	require.ErrorIs(t, err, context.Canceled)

	// Cancelling mid-run is the grader's failure, not a timeout.
	ctx, cancel = context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err = (&sandbox.CodeGrader{}).Grade(ctx, addItem, "while True: pass")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NotErrorIs(t, err, sandbox.ErrSandboxUnavailable)
}

// TestCodeInterpreterNotInstalled: a missing interpreter is a refusal, not
// a failure to retry.
func TestCodeInterpreterNotInstalled(t *testing.T) {
	needSandbox(t)
	t.Parallel()
	res, err := (&sandbox.CodeGrader{Python: "python3-not-installed"}).Grade(context.Background(), addItem, addRight)
	require.ErrorIs(t, err, sandbox.ErrSandboxUnavailable)
	require.ErrorIs(t, err, exec.ErrNotFound)
	require.ErrorContains(t, err, "code grader: sandbox unavailable: the interpreter python3-not-installed is not installed")
	require.Equal(t, grade.Result{}, res)
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
			require.Equal(t, tc.want, sandbox.ExtractProgram(tc.answer))
		})
	}
}

// TestRegistersTheCodeGrader: importing the sandbox puts the code grader
// in grade's package-level registry, where grade.For and grade.Check find
// it.
func TestRegistersTheCodeGrader(t *testing.T) {
	g, err := grade.For(suite.Item{ID: "k", Grader: suite.GraderCode})
	require.NoError(t, err)
	require.IsType(t, &sandbox.CodeGrader{}, g)
}
