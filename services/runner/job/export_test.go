package job

import (
	"context"

	"github.com/lowbarena/lowbarena/services/runner/loadgen"
)

// KeptPID is the process id of the engine kp keeps, 0 when none.
func KeptPID(kp *Keeper) int {
	kp.mu.Lock()
	defer kp.mu.Unlock()
	if kp.kept == nil {
		return 0
	}
	return kp.kept.e.PID()
}

// ShareReplays runs r.sharedReplays on the replays named keys, each its
// launch and its workload.
func ShareReplays(ctx context.Context, r *Runner, keys []string, ls []Launch, ws []loadgen.Workload) (map[string]Served, Efficiency, error) {
	rls := make([]replayLaunch, len(keys))
	for i := range keys {
		rls[i] = replayLaunch{key: keys[i], l: ls[i], w: ws[i]}
	}
	var out Efficiency
	got, err := r.sharedReplays(ctx, rls, &out)
	return got, out, err
}
