package sandbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/adapters/sandbox"
)

// envSweepHelper runs this test binary as a fresh grader that only checks
// its sandbox (which sweeps) and exits.
const envSweepHelper = "LOWBARENA_GRADE_SWEEP_HELPER"

// TestSweepEndsOrphanedSandboxInits: the sandbox init that a killed
// bubblewrap leaves behind (blocked for good on bubblewrap's setup eventfd,
// before its parent death signal is set; see SweepOrphans) is ended by the
// next grader that checks its sandbox, and by SweepOrphans, while a live
// sandbox beside it is left alone. The orphan is made exactly as a grader
// SIGKILLed mid-setup makes it: bwrap is held, by --userns-block-fd, in
// the window between cloning the sandbox and releasing it, and killed
// there.
func TestSweepEndsOrphanedSandboxInits(t *testing.T) {
	if os.Getenv(envSweepHelper) == "1" {
		if err := (&sandbox.CodeGrader{}).Check(context.Background()); err != nil {
			fmt.Println("check:", err)
			os.Exit(1)
		}
		return
	}
	needSandbox(t)
	bwrap, err := exec.LookPath("bwrap")
	require.NoError(t, err)

	liveInit, stopLive := startSandbox(t, bwrap, false)
	defer stopLive()

	for _, tc := range []struct {
		name  string
		sweep func(t *testing.T)
	}{
		{"a new grader's check", func(t *testing.T) {
			helper := exec.Command(os.Args[0], "-test.run=^TestSweepEndsOrphanedSandboxInits$", "-test.count=1")
			helper.Env = append(os.Environ(), envSweepHelper+"=1")
			out, err := helper.CombinedOutput()
			require.NoError(t, err, "the helper grader: %s", out)
		}},
		{"SweepOrphans", func(t *testing.T) {
			n, err := sandbox.SweepOrphans(sandboxUID())
			require.NoError(t, err)
			require.GreaterOrEqual(t, n, 1, "it killed nothing")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			orphan, _ := startSandbox(t, bwrap, true)
			require.True(t, orphan.alive(), "the orphaned init is not there to sweep")
			tc.sweep(t)
			require.Eventually(t, func() bool { return !orphan.alive() }, 10*time.Second, 20*time.Millisecond,
				"the orphaned sandbox init %v outlived the sweep", orphan)
			require.True(t, liveInit.alive(), "the sweep killed a live sandbox's init %v", liveInit)
		})
	}
}

// startSandbox starts bwrap as the sandbox user, running a sleeper in a
// new PID namespace, and returns the sandbox's init (pid 1 of that
// namespace) once it exists, and a func that ends the run. With orphan,
// bwrap is held before it releases the init (--userns-block-fd on a pipe
// nobody writes) and killed there: the init it returns has no bwrap left.
func startSandbox(t *testing.T, bwrap string, orphan bool) (proc, func()) {
	t.Helper()
	infoR, infoW, err := os.Pipe()
	require.NoError(t, err)
	defer infoR.Close()
	blockR, blockW, err := os.Pipe()
	require.NoError(t, err)
	defer blockW.Close()
	args := []string{"--unshare-user", "--unshare-pid", "--die-with-parent", "--info-fd", "3"}
	if orphan {
		args = append(args, "--userns-block-fd", "4")
	}
	args = append(args, "--ro-bind", "/usr", "/usr")
	for _, top := range []string{"/bin", "/lib", "/lib64"} {
		if target, err := os.Readlink(top); err == nil {
			args = append(args, "--symlink", target, top)
		}
	}
	args = append(args, "--", "/usr/bin/sleep", "60")
	cmd := exec.Command(bwrap, args...)
	cmd.Dir = "/"
	cmd.ExtraFiles = []*os.File{infoW, blockR}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if os.Geteuid() == 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: sandbox.SandboxUID, Gid: sandbox.SandboxGID, Groups: []uint32{}}
	}
	require.NoError(t, cmd.Start())
	infoW.Close()
	blockR.Close()
	stop := func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	}

	var info struct {
		ChildPID int `json:"child-pid"`
	}
	require.NoError(t, infoR.SetReadDeadline(time.Now().Add(30*time.Second)))
	require.NoError(t, json.NewDecoder(infoR).Decode(&info), "bwrap wrote no info")
	comm, ppid, start, _, ok := readStat(info.ChildPID)
	require.True(t, ok, "bwrap's child %d is not there", info.ChildPID)
	require.Equal(t, "bwrap", comm)
	require.Equal(t, cmd.Process.Pid, ppid)
	init := proc{pid: info.ChildPID, start: start, comm: comm}
	if orphan {
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL)) // only bwrap: its init stays
		_ = cmd.Wait()
		t.Cleanup(func() { _ = syscall.Kill(init.pid, syscall.SIGKILL) })
	}
	return init, stop
}
