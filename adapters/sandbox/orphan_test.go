package sandbox_test

import (
	"bytes"
	"context"
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

	"github.com/lowbarena/lowbarena/adapters/sandbox"
)

// The helper of TestCodeDiesWithAKilledGrader is this test binary run
// again with envOrphanHelper set to the program's marker; envOrphanBwrap
// names the bubblewrap it runs, and envOrphanFlag a file it creates once
// its sandbox is checked (the slow wrapper below waits only once it
// exists).
const (
	envOrphanHelper = "LOWBARENA_GRADE_ORPHAN_HELPER"
	envOrphanBwrap  = "LOWBARENA_GRADE_ORPHAN_BWRAP"
	envOrphanFlag   = "LOWBARENA_GRADE_ORPHAN_FLAG"
)

// TestCodeDiesWithAKilledGrader: a grading process SIGKILLed while a
// sandbox runs, or while bubblewrap is still setting it up, leaves nothing
// of the sandbox behind: not bwrap (which runs as the sandbox user, in a
// process group of its own, so nothing else signals it), not the
// sandbox's init, not the program, not what the program started. The
// grader is this test binary run again (orphanHelper); the test finds the
// sandbox's processes in /proc as the helper's descendants, kills the
// helper, and requires each of them gone.
//
// bwrap binds its life to its parent's (--die-with-parent) only once it
// has set the sandbox up; a grader killed before then left a bwrap that
// ran the program anyway, as uid nobody, with nobody to end it. The
// second case holds that window open with a wrapper that waits, before it
// execs bwrap, until the test lets it go (after the checks): without the
// grader's own parent death signal on bwrap, the wrapper outlives the
// grader, as uid nobody, and the check fails.
func TestCodeDiesWithAKilledGrader(t *testing.T) {
	if marker := os.Getenv(envOrphanHelper); marker != "" {
		orphanHelper(marker, os.Getenv(envOrphanBwrap), os.Getenv(envOrphanFlag))
		return
	}
	needSandbox(t)
	bwrap, err := exec.LookPath("bwrap")
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		// slow makes bwrap a wrapper that, once the sandbox is checked,
		// waits for the test's go file before it execs bwrap.
		slow bool
	}{
		{"killed while the program runs", false},
		{"killed while bubblewrap starts", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := worldDir(t, 0o755)
			flag, gofile := filepath.Join(dir, "checked"), filepath.Join(dir, "go")
			// Whatever the outcome, a waiting wrapper is let go (it then
			// execs bwrap, which finds its grader gone).
			defer func() { _ = os.WriteFile(gofile, nil, 0o644) }()
			wrapper := bwrap
			if tc.slow {
				wrapper = filepath.Join(dir, "bwrap-slow")
				script := fmt.Sprintf("#!/bin/sh\nif [ -e %s ]; then\n  while [ ! -e %s ]; do sleep 0.1; done\nfi\nexec %s \"$@\"\n", flag, gofile, bwrap)
				require.NoError(t, os.WriteFile(wrapper, []byte(script), 0o755))
			}
			marker := fmt.Sprintf("8888.%09d", time.Now().Nanosecond())
			helper := exec.Command(os.Args[0], "-test.run=^TestCodeDiesWithAKilledGrader$", "-test.count=1")
			helper.Env = append(os.Environ(), envOrphanHelper+"="+marker, envOrphanBwrap+"="+wrapper, envOrphanFlag+"="+flag)
			var out bytes.Buffer
			helper.Stdout, helper.Stderr = &out, &out
			require.NoError(t, helper.Start())
			defer func() { _ = helper.Process.Kill(); _ = helper.Wait() }()

			// The moment to kill: the program's sleeper is up (bwrap,
			// the sandbox's init, python and the sleeper run), or the
			// wrapper waits before bwrap.
			var procs []proc
			require.Eventually(t, func() bool {
				procs = descendants(helper.Process.Pid)
				if tc.slow {
					_, err := os.Stat(flag)
					return err == nil && hasComm(procs, "bwrap-slow")
				}
				return len(sleepers(marker)) == 1 && hasComm(procs, "bwrap")
			}, time.Minute, 20*time.Millisecond, "the sandbox never ran; the helper said:\n%s", &out)
			procs = descendants(helper.Process.Pid)

			require.NoError(t, helper.Process.Signal(syscall.SIGKILL))
			_, _ = helper.Process.Wait()
			require.Eventually(t, func() bool { return len(live(procs)) == 0 }, 10*time.Second, 20*time.Millisecond,
				"outlived the killed grader: %v of %v", live(procs), procs)
			require.Empty(t, sleepers(marker), "the program ran after its grader died")
		})
	}
}

// orphanHelper checks its sandbox, creates flag, and grades a program that
// starts a sleeper and runs for a minute; the test kills this process
// meanwhile.
func orphanHelper(marker, bwrap, flag string) {
	g := &sandbox.CodeGrader{Bwrap: bwrap, Timeout: 2 * time.Minute}
	if err := g.Check(context.Background()); err != nil {
		fmt.Println("check:", err)
		return
	}
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		fmt.Println("flag:", err)
		return
	}
	program := fmt.Sprintf("import subprocess, time\nsubprocess.Popen([\"sleep\", %q])\ntime.sleep(60)\ndef add(a, b): return a + b\n", marker+"1")
	_, err := g.Grade(context.Background(), addItem, program)
	fmt.Println("graded:", err)
}

// proc is a process as /proc names it: its pid, start time (so a reused
// pid is not taken for it) and command.
type proc struct {
	pid   int
	start string
	comm  string
}

func (p proc) String() string { return fmt.Sprintf("%d(%s)", p.pid, p.comm) }

// alive reports whether p still runs (a zombie has ended).
func (p proc) alive() bool {
	_, _, start, state, ok := readStat(p.pid)
	return ok && start == p.start && state != "Z" && state != "X"
}

func live(ps []proc) []proc {
	var out []proc
	for _, p := range ps {
		if p.alive() {
			out = append(out, p)
		}
	}
	return out
}

func hasComm(ps []proc, comm string) bool {
	for _, p := range ps {
		if p.comm == comm {
			return true
		}
	}
	return false
}

// descendants lists the live processes below pid, from the host's /proc.
func descendants(root int) []proc {
	children := map[int][]proc{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, ppid, start, state, ok := readStat(pid)
		if !ok || state == "Z" {
			continue
		}
		children[ppid] = append(children[ppid], proc{pid: pid, start: start, comm: comm})
	}
	var out []proc
	queue := []int{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c.pid)
		}
	}
	return out
}

// readStat reads a process's command, parent, start time and state from
// /proc/<pid>/stat.
func readStat(pid int) (comm string, ppid int, start, state string, ok bool) {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return "", 0, "", "", false
	}
	s := string(data)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return "", 0, "", "", false
	}
	// After the command: state (field 3), ppid (4) ... starttime (22).
	f := strings.Fields(s[end+1:])
	if len(f) < 20 {
		return "", 0, "", "", false
	}
	ppid, _ = strconv.Atoi(f[1])
	return s[open+1 : end], ppid, f[19], f[0], true
}
