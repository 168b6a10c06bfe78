package engine

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSweepReapsOrphansThatDieLater: a group's leader exits and is waited
// for, leaving a member that dies a moment later (the test process is the
// subreaper, see TestMain). reapGroup right away finds the group not gone
// (the member lives); the sweep reaps the member once it dies and reports
// the group gone; the member is not left a zombie.
func TestSweepReapsOrphansThatDieLater(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 0.4 >/dev/null 2>&1 & echo $!")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.Output()
	require.NoError(t, err)
	member, err := strconv.Atoi(strings.TrimSpace(string(out)))
	require.NoError(t, err)
	pgid := cmd.Process.Pid

	require.False(t, reapGroup(pgid), "the member still runs")
	start := time.Now()
	require.True(t, sweepGroup(pgid, 10*time.Second))
	require.Less(t, time.Since(start), 9*time.Second)
	_, err = os.Stat(fmt.Sprintf("/proc/%d", member))
	require.True(t, os.IsNotExist(err), "the member was reaped: %v", err)

	// The group is gone: another look says so without waiting.
	require.True(t, reapGroup(pgid))
}

// TestSweepGivesUp: a group whose member outlives the sweep is left after
// the bound (Stop kills the group first, so this is a member the kernel
// has not yet let die).
func TestSweepGivesUp(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 30 >/dev/null 2>&1 & echo $!")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.Output()
	require.NoError(t, err)
	member, err := strconv.Atoi(strings.TrimSpace(string(out)))
	require.NoError(t, err)
	pgid := cmd.Process.Pid
	defer func() {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		require.True(t, sweepGroup(pgid, 10*time.Second))
	}()
	require.False(t, sweepGroup(pgid, 200*time.Millisecond))
	require.NoError(t, syscall.Kill(member, 0), "the member still runs")
}
