package round_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/examples"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/ctl"
	"github.com/lowbarena/lowbarena/services/round"
)

// TestRoundPods: a round starts only on a pod a live runner serves for
// SLA jobs (the pods registry). An unknown pod is refused with
// round_pod_not_served, listing the pods that can take a round; with no
// pod named, the only such pod is chosen, and among several the start is
// refused with round_pod_required, listing them.
func TestRoundPods(t *testing.T) {
	h := setup(t, "unused", nil)
	h.service(round.Options{EntryTimeout: 500 * time.Millisecond, LeaseTTL: 1500 * time.Millisecond})
	h.submit("c1", h.bundle("fp8-w8a8"), true, true, 1.4)
	start := func(pod string) (ctl.StartReply, error) {
		return h.start(ctl.StartRequest{Campaign: examples.TaskID, Candidates: []string{"c1"}, Pod: pod})
	}
	refused := func(pod, code string, why reason.Code, says ...string) string {
		t.Helper()
		_, err := start(pod)
		e := refusal(t, err)
		require.Equal(t, code, e.Code, e.Message)
		require.Equal(t, why, e.Reason, e.Message)
		for _, s := range says {
			require.Contains(t, e.Message, s)
		}
		return e.Message
	}
	podOf := func(rep ctl.StartReply) string {
		r, _ := h.state(rep.RoundID)
		return r.Pod
	}

	// No runner at all.
	refused("", ctl.CodeUnavailable, reason.RoundPodNotServed, "no pod can take a round")
	refused("gpu-pod-0", ctl.CodeNotFound, reason.RoundPodNotServed, "no live runner serves pod gpu-pod-0")

	// One pod whose runner serves SLA jobs, one whose runner does not.
	h.register("node-a", "node-a/runner-0", events.JobSLA, events.JobQuality, events.JobEfficiency)
	h.register("node-q", "node-q/runner-0", events.JobQuality)
	msg := refused("gpu-pod-0", ctl.CodeNotFound, reason.RoundPodNotServed, "no live runner serves pod gpu-pod-0", "node-a (1 runner)")
	require.NotContains(t, msg, "node-q", "a pod without an SLA runner cannot take a round")
	refused("node-q", ctl.CodeNotFound, reason.RoundPodNotServed, "node-a (1 runner)")
	refused("bad pod!", ctl.CodeBadRequest, "", "not a valid name")

	rep, err := start("")
	require.NoError(t, err, "the only pod that can take a round is chosen")
	require.Equal(t, "node-a", podOf(rep))
	h.awaitEnd(rep.RoundID) // no runner takes its jobs: it ends at the entries' deadline

	// Two pods: a round must name one.
	h.register("node-b", "node-b/runner-0", events.JobSLA)
	h.register("node-b", "node-b/runner-1", events.JobSLA)
	refused("", ctl.CodeBadRequest, reason.RoundPodRequired, "name the round's pod", "node-a (1 runner)", "node-b (2 runners)")
	rep, err = start("node-b")
	require.NoError(t, err)
	require.Equal(t, "node-b", podOf(rep))
	h.awaitEnd(rep.RoundID)
}
