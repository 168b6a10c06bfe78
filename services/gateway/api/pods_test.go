package api

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/podlease"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/ctl"
)

// TestPodsEndpoint: GET /v1/pods answers operators with the pods as
// `arena pods --json` prints them: a runner's registry entry (written as
// a runner writes it) under its pod, the round whose lease holds the pod;
// with no query service, no GPU-hours and the reason. Anyone else is
// refused with the codes of POST /v1/sql.
func TestPodsEndpoint(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	js := f.b.JetStream()
	pods, err := js.KeyValue(ctx, bus.BucketPods)
	require.NoError(t, err)
	entry := events.PodEntry{Pod: "pod-a", Runner: "a0", GPUIndex: 1, GPU: "simulated (no NVML)", Simulated: true, Kinds: []string{events.JobEfficiency},
		SeenAt: time.Now().UTC(), Job: &events.PodJob{JobID: "j1", Kind: events.JobSLA, RoundID: "round-0123456789abcdef", Since: time.Now().UTC(), Delivery: 1}}
	body, err := json.Marshal(entry)
	require.NoError(t, err)
	_, err = pods.Put(ctx, bus.Key("pod-a", "a0"), body)
	require.NoError(t, err)
	rounds, err := js.KeyValue(ctx, bus.BucketRounds)
	require.NoError(t, err)
	lease, err := json.Marshal(podlease.Lease{Round: "round-0123456789abcdef", Holder: "r", ExpiresAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	_, err = rounds.Put(ctx, podlease.Key("pod-a"), lease)
	require.NoError(t, err)

	for _, c := range []struct {
		name, token string
		status      int
		code        string
	}{
		{"no token", "", http.StatusUnauthorized, string(reason.TokenMissing)},
		{"a participant's token", f.alice, http.StatusForbidden, string(reason.TokenNotOperator)},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, body, _ := f.get(t, "/v1/pods", c.token)
			require.Equal(t, c.status, status)
			require.Equal(t, c.code, body["error"].(map[string]any)["code"])
		})
	}

	req, err := http.NewRequest(http.MethodGet, f.srv.URL+"/v1/pods", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+f.op)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(raw))
	var v ctl.PodsView
	require.NoError(t, json.Unmarshal(raw, &v))
	require.Len(t, v.Pods, 1)
	require.Equal(t, "pod-a", v.Pods[0].Pod)
	require.Equal(t, "round-0123456789abcdef", v.Pods[0].HeldBy)
	require.Len(t, v.Pods[0].Runners, 1)
	require.Equal(t, 1, v.Pods[0].Runners[0].GPUIndex)
	require.Equal(t, "j1", v.Pods[0].Runners[0].Job.JobID)
	require.Nil(t, v.Pods[0].GPUHours, "no query service: no hours")
	require.Contains(t, v.GPUHoursError, "no query service answers")
}
