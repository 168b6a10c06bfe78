package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A sandbox's init can outlive its grader, and nothing of ours is left to
// end it. bubblewrap clones the sandbox's first process (pid 1 of the new
// PID namespace) and makes it wait, on an eventfd, until the parent bwrap
// has written its uid and gid maps; that process sets its parent death
// signal (--die-with-parent) only after the wait. A parent bwrap killed
// inside that window (its grader was SIGKILLed, and the grader's parent
// death signal killed it in turn) leaves the child blocked on the eventfd
// for good: pid 1 of an empty namespace, uid the sandbox user, parent the
// host's init. It holds no CPU, only a process slot; bubblewrap 0.8.0 and
// its newest release (0.11) both have the window, and no option closes it
// from outside (a process group kill does, and is what a live grader sends,
// but a SIGKILLed grader sends nothing).
//
// So a grader sweeps: SweepOrphans finds those processes in /proc and
// kills them. A grader sweeps when it checks its sandbox (every process
// start) and after a run at most once a sweepEvery, which covers a grader
// killed on a host where another one goes on.

// sweepEvery bounds how often a run's end sweeps.
const sweepEvery = 10 * time.Second

var (
	sweepMu   sync.Mutex
	lastSweep time.Time
)

// maybeSweep sweeps for uid unless a sweep ran within sweepEvery.
func maybeSweep(uid int) {
	sweepMu.Lock()
	if time.Since(lastSweep) < sweepEvery {
		sweepMu.Unlock()
		return
	}
	lastSweep = time.Now()
	sweepMu.Unlock()
	_, _ = SweepOrphans(uid)
}

// SweepOrphans kills every orphaned sandbox init of the sandbox user uid
// on this machine and returns how many it killed. An orphaned sandbox init
// is a bwrap process running as uid, pid 1 of a PID namespace nested one
// level below its parent's, whose parent is not the bwrap that created
// that namespace (it died, and the process was reparented). A live
// sandbox's init always has its bwrap as parent, so no live run of any
// grader is touched. Killing the init ends its namespace, so anything else
// left in it ends too. The error joins what could not be read or killed;
// processes that end meanwhile are not errors.
func SweepOrphans(uid int) (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, fmt.Errorf("code grader: sweep: %w", err)
	}
	killed := 0
	var errs []error
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		p, ok := readProc(pid)
		if !ok || p.comm != "bwrap" || p.uid != uid || len(p.nspid) < 2 || p.nspid[len(p.nspid)-1] != 1 {
			continue
		}
		if parent, ok := readProc(p.ppid); ok && parent.comm == "bwrap" && len(parent.nspid) == len(p.nspid)-1 {
			continue // a live sandbox: its bwrap is its parent
		}
		switch err := killVerified(pid, p); {
		case err == nil:
			killed++
		case errors.Is(err, syscall.ESRCH), errors.Is(err, errGone):
		default:
			errs = append(errs, fmt.Errorf("code grader: sweep: kill orphaned sandbox init %d: %w", pid, err))
		}
	}
	return killed, errors.Join(errs...)
}

// errGone reports that the process a sweep found ended, or was replaced,
// before it could be killed.
var errGone = errors.New("process gone")

// killVerified sends SIGKILL to pid through a pidfd, after checking that
// the pidfd's process is still the one read as p (a pid reused between the
// read and the kill is never signalled).
func killVerified(pid int, p procInfo) error {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if errors.Is(err, syscall.ENOSYS) {
			return syscall.Kill(pid, syscall.SIGKILL) // kernels before 5.3
		}
		return err
	}
	defer unix.Close(fd)
	again, ok := readProc(pid)
	if !ok || again.start != p.start {
		return errGone
	}
	return unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
}

// procInfo is what a sweep reads of a process from /proc.
type procInfo struct {
	comm  string
	ppid  int
	start string // start time in clock ticks after boot: with pid, unique
	uid   int    // real uid, as this process's user namespace sees it
	nspid []int  // the pid in each PID namespace, outermost first
}

// readProc reads pid's /proc/<pid>/stat and, for a bwrap, its status;
// ok is false for a process that is gone, a zombie, or unreadable.
func readProc(pid int) (procInfo, bool) {
	dir := filepath.Join("/proc", strconv.Itoa(pid))
	stat, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return procInfo{}, false
	}
	s := string(stat)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return procInfo{}, false
	}
	// After the command: state ppid pgrp session tty tpgid flags minflt
	// cminflt majflt cmajflt utime stime cutime cstime priority nice
	// num_threads itrealvalue starttime.
	f := strings.Fields(s[end+1:])
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return procInfo{}, false
	}
	p := procInfo{comm: s[open+1 : end], start: f[19]}
	if p.ppid, err = strconv.Atoi(f[1]); err != nil {
		return procInfo{}, false
	}
	if p.comm != "bwrap" {
		return p, true // a sweep needs no more of it
	}
	status, err := os.ReadFile(filepath.Join(dir, "status"))
	if err != nil {
		return procInfo{}, false
	}
	p.uid = -1
	for _, line := range strings.Split(string(status), "\n") {
		key, val, _ := strings.Cut(line, ":")
		switch key {
		case "Uid":
			if f := strings.Fields(val); len(f) > 0 {
				p.uid, _ = strconv.Atoi(f[0])
			}
		case "NSpid":
			for _, v := range strings.Fields(val) {
				n, err := strconv.Atoi(v)
				if err != nil {
					return procInfo{}, false
				}
				p.nspid = append(p.nspid, n)
			}
		}
	}
	return p, true
}
