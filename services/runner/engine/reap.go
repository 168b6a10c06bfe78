package engine

import (
	"errors"
	"fmt"
	"syscall"
	"time"
)

// prSetChildSubreaper is PR_SET_CHILD_SUBREAPER (linux/prctl.h).
const prSetChildSubreaper = 36

// BecomeSubreaper makes the calling process the subreaper of its
// descendants (prctl(PR_SET_CHILD_SUBREAPER)): a process whose parent
// exits is re-parented to it rather than to the namespace's init. The
// runner's main calls it once at start-up, so that the orphans of an
// engine (vLLM's EngineCore when its API server exits first, SGLang's
// scheduler and detokenizer when its launcher does) become the runner's
// children and Stop reaps them, whether the runner is PID 1 of its
// container or runs under an init (tini, a pod's pause process) that
// would otherwise inherit them.
func BecomeSubreaper() error {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
		return fmt.Errorf("engine: prctl(PR_SET_CHILD_SUBREAPER): %w", errno)
	}
	return nil
}

// reapSweep is how long after Stop the group of a stopped engine is still
// watched for members to reap (a member SIGKILLed by Stop can take a
// moment to die; an orphan is re-parented only when its parent dies).
const reapSweep = 5 * time.Second

// reapGroup reaps the runner's exited children in process group pgid and
// reports whether the group is gone (no process has it any longer).
//
// The invariant that makes this safe: reapGroup is called only once the
// group's leader has been waited for (its exec.Cmd's Wait returned, so
// Engine.done is closed), and it waits with wait4(-pgid), never wait4(-1).
//   - Before the leader is waited for, wait4(-pgid) could reap the leader
//     itself and exec.Cmd's Wait would fail ("no child processes"),
//     losing the engine's exit status.
//   - wait4(-1) would reap any child of the runner, stealing the exit
//     status that another exec.Cmd of the runner (the code grader, a
//     fetch) waits for. wait4(-pgid) reaps only members of the engine's
//     group; the runner starts nothing else in it.
//   - A process group's ID cannot be given to a new process while any
//     member of the group is alive or a zombie, so wait4(-pgid) cannot
//     reach an unrelated process while the group exists; the sweep stops
//     at the first look that finds the group gone (kill(-pgid, 0) fails
//     with ESRCH), after which the number may be reused and is never
//     waited on again.
//
// An engine process that leaves the group (setsid, setpgid) is outside
// this: it is neither signalled by Stop nor reaped here.
func reapGroup(pgid int) (gone bool) {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-pgid, &ws, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		// ECHILD: no child of the runner is in the group (members may
		// remain whose parent is alive); 0: some are, none has exited.
		if err != nil || pid <= 0 {
			break
		}
	}
	return errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH)
}

// sweepGroup reaps group pgid's members as they die, until the group is
// gone or within has passed; it reports whether the group is gone.
func sweepGroup(pgid int, within time.Duration) (gone bool) {
	deadline := time.Now().Add(within)
	for {
		if reapGroup(pgid) {
			return true
		}
		if !time.Now().Before(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}
