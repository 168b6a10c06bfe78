package events_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/events"
)

// TestJobGPUTime: a job's runs add their starts and serving; a reused
// reference adds its start, cached, and nothing to the sums; the result's
// JSON carries them beside its other fields.
func TestJobGPUTime(t *testing.T) {
	var g events.JobGPUTime
	g.Add(events.EngineRun{Start: &events.EngineStart{Run: "reference", Seconds: 80, OtherSeconds: 80}, ServingSeconds: 30}, true)
	g.Add(events.EngineRun{Start: &events.EngineStart{Run: "candidate", Seconds: 60, LoadSeconds: 24, GraphSeconds: 15, OtherSeconds: 21}, ServingSeconds: 20}, false)
	g.Add(events.EngineRun{Start: &events.EngineStart{Run: "serve@1.02", Seconds: 62, LoadSeconds: 25, GraphSeconds: 15, OtherSeconds: 22}, ServingSeconds: 7}, false)
	g.Add(events.EngineRun{ServingSeconds: 1}, false) // a run from a runner that did not time its start
	g.HeldSeconds = 160
	require.Len(t, g.Starts, 3)
	require.True(t, g.Starts[0].Cached)
	require.InDelta(t, 28.0, g.ServingSeconds, 1e-9, "the cached reference's serving is not this job's")
	require.Equal(t, record.GPUPhases{Held: 160, Serving: 28, EngineStart: 122, Loading: 49, GraphCapture: 30, OtherStart: 43, Starts: 2}, g.Phases())

	raw, err := json.Marshal(events.EfficiencyJobResult{GPU: "x", JobGPUTime: g})
	require.NoError(t, err)
	var back map[string]any
	require.NoError(t, json.Unmarshal(raw, &back))
	require.Len(t, back["engine_starts"], 3)
	require.InDelta(t, 160.0, back["held_seconds"], 1e-9)
	require.InDelta(t, 28.0, back["serving_seconds"], 1e-9)
}
