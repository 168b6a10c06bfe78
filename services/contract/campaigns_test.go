package contract_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/campaigns"
)

// TestContractFollowsCampaignPushes runs the contract service on the
// campaigns bucket (no --campaigns, as in a cluster): before any push it
// refuses an honest submission with campaign_unknown_task; once the
// example campaign is pushed, the running service checks the same
// submission against it, without a restart.
func TestContractFollowsCampaignPushes(t *testing.T) {
	t.Parallel()
	dir, _, exs := writeExamples(t)
	h := startWith(t, map[string]string{"campaigns-cache": t.TempDir()})
	var honest string
	for name, ex := range exs {
		if ex.Honest {
			honest = name
			break
		}
	}
	require.NotEmpty(t, honest)
	built := h.built("before", exs[honest].Dir)
	h.publish(built)
	e := h.outcome("before")
	require.Equal(t, string(events.ContractFailed), e.Type())
	var failed events.StageFailedData
	require.NoError(t, json.Unmarshal(e.Data(), &failed))
	require.Equal(t, string(reason.CampaignUnknownTask), failed.Reason)

	kv, err := h.b.JetStream().KeyValue(h.ctx, bus.BucketCampaigns)
	require.NoError(t, err)
	pushed, err := campaigns.Push(h.ctx, kv, h.store, dir, "operator", time.Now)
	require.NoError(t, err)
	require.Len(t, pushed, 1)

	// The push reaches the service through its watch, a moment after
	// the bucket has it: submissions go in until one is checked.
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		id := fmt.Sprintf("after-%d", i)
		built.SubmissionID = id
		h.publish(built)
		e := h.outcome(id)
		if e.Type() == string(events.ContractCompleted) {
			var d events.ContractCompletedData
			require.NoError(t, json.Unmarshal(e.Data(), &d))
			require.Equal(t, exs[honest].Detected, d.DetectedPrecision)
			return
		}
		require.NoError(t, json.Unmarshal(e.Data(), &failed))
		require.Equal(t, string(reason.CampaignUnknownTask), failed.Reason, "only the campaign was missing")
		require.True(t, time.Now().Before(deadline), "the pushed campaign never reached the running service")
		time.Sleep(100 * time.Millisecond) // poll interval, not an assertion
	}
}
