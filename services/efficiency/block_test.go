package efficiency_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/stage"
	"github.com/lowbarena/lowbarena/services/efficiency"
)

const rec27b = "submission_qwen35-27b_4632bca02a3846d5.json"

func load(t *testing.T, name string) record.Submission {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "schemas", "testdata", "lowbarena", name))
	require.NoError(t, err)
	var r record.Submission
	require.NoError(t, json.Unmarshal(data, &r))
	return r
}

// measurement rebuilds the runner's raw measurement of a fixture record:
// its rates, its peak breakdowns, its engine's start-up, its budget
// replays and its stored bytes.
func measurement(r record.Submission) events.EfficiencyJobResult {
	res := r.Result
	run := func(rates map[string]float64, peaks map[string]record.PeakMemory) events.EngineRun {
		e := events.EngineRun{Workloads: map[string]events.WorkloadRun{}}
		for w, rate := range rates {
			p := peaks[w]
			e.Workloads[w] = events.WorkloadRun{Rate: rate, Peak: p}
		}
		return e
	}
	cand := run(res.Efficiency, res.PeakMemory)
	cand.Startup = res.Engine.Startup
	return events.EfficiencyJobResult{GPU: "NVIDIA H200", Reference: run(res.AnchorEfficiency, res.AnchorPeakMemory), Candidate: cand,
		Budget: res.Engine.Budget, HardCap: res.Engine.HardCap, KVCacheDType: res.Engine.Startup.KVCacheDType,
		StoredBytes: res.Contract.SafetensorBytes}
}

// TestBlockReproducesTheFixture builds the efficiency block from the 27B
// record's raw measurement: the record's figures come back, and its failed
// interactive budget gives the record's sentence.
func TestBlockReproducesTheFixture(t *testing.T) {
	r := load(t, rec27b)
	res := r.Result
	out, err := efficiency.Block(events.RunnerJobCompletedData{SubmissionID: r.ID, Pod: "pod-0", GPUIndex: 3, GPUHours: *res.GPUHours}, measurement(r))
	require.NoError(t, err)
	require.Equal(t, "pod-0", out.Engine.Audit.Pod, "the record names the pod")
	require.Equal(t, 3, out.Engine.Audit.GPUIndex, "and the pod's GPU the job ran on")
	require.Equal(t, res.Efficiency, out.Efficiency)
	require.Equal(t, res.AnchorEfficiency, out.AnchorEfficiency)
	require.Equal(t, res.PeakMemory, out.PeakMemory)
	require.Equal(t, res.AnchorPeakMemory, out.AnchorPeakMemory)
	require.Equal(t, *res.Workload, out.Workload)
	require.Equal(t, res.Engine.Budget, out.Engine.Budget)
	require.Equal(t, res.Engine.Startup, out.Engine.Startup)
	require.Equal(t, res.Engine.StoredGiB, out.Engine.StoredGiB)
	require.Equal(t, *res.DevScore.Reason, out.BudgetReason)
	require.Equal(t, *res.GPUHours, out.GPUHours)
}

func TestBlockRefuses(t *testing.T) {
	r := load(t, rec27b)
	m := measurement(r)
	m.KVCacheDType = "nvfp4" // declared; the engine reported fp8
	_, err := efficiency.Block(events.RunnerJobCompletedData{SubmissionID: r.ID}, m)
	require.ErrorContains(t, err, "declares KV cache dtype nvfp4 but its engine reported running fp8")

	m = measurement(r)
	delete(m.Reference.Workloads, "long_context")
	_, err = efficiency.Block(events.RunnerJobCompletedData{SubmissionID: r.ID}, m)
	require.ErrorContains(t, err, "no long_context rate")
}

func TestSameKV(t *testing.T) {
	for _, tc := range []struct {
		declared, running string
		same              bool
	}{
		{"", "bf16", true}, {"auto", "fp8", true}, {"fp8", "fp8", true}, {"fp8_e4m3", "fp8", true},
		{"nvfp4", "fp8", false}, {"fp8", "bf16", false},
	} {
		require.Equal(t, tc.same, efficiency.SameKV(tc.declared, tc.running), "%+v", tc)
	}
}

// TestResult is the result side's decisions: a runner's measurement
// becomes the block, or a refusal with its reason; never a retry.
func TestResult(t *testing.T) {
	r := load(t, rec27b)
	raw := func(m events.EfficiencyJobResult) json.RawMessage {
		b, err := json.Marshal(m)
		require.NoError(t, err)
		return b
	}
	kv := measurement(r)
	kv.KVCacheDType = "nvfp4"
	noPeak := measurement(r)
	w := noPeak.Candidate.Workloads["interactive"]
	w.Peak.PeakGiB = 0
	noPeak.Candidate.Workloads["interactive"] = w
	for _, tc := range []struct {
		name    string
		result  json.RawMessage
		reason  reason.Code // "" for a block
		message string
	}{
		{name: "the fixture's measurement", result: raw(measurement(r))},
		{name: "a result that does not decode", result: json.RawMessage(`{"candidate": 3}`), reason: reason.EfficiencyBadMeasurement,
			message: "the runner's result does not decode"},
		{name: "an engine running another KV dtype", result: raw(kv), reason: reason.EngineKVDTypeMismatch,
			message: "declares KV cache dtype nvfp4 but its engine reported running fp8"},
		{name: "a workload without its peak", result: raw(noPeak), reason: reason.EfficiencyBadMeasurement, message: "no interactive rate or peak"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := efficiency.Result(events.RunnerJobCompletedData{JobID: "eff-1", Kind: events.JobEfficiency, SubmissionID: r.ID,
				Pod: "pod-0", GPUHours: *r.Result.GPUHours, CheckpointDigest: "d1", Result: tc.result})
			if tc.reason == "" {
				require.NoError(t, err)
				require.Equal(t, r.ID, out.SubmissionID)
				require.Equal(t, "d1", out.BundleDigest)
				require.Equal(t, r.Result.Efficiency, out.Efficiency)
				require.Equal(t, *r.Result.DevScore.Reason, out.BudgetReason)
				return
			}
			ref := stage.AsRefusal(err)
			require.NotNil(t, ref, "a refusal, not a retry: %v", err)
			require.Equal(t, tc.reason, ref.Code)
			require.Contains(t, ref.Message, tc.message)
		})
	}
}

// TestBlockCarriesTheJobsGPUSeconds: the efficiency block carries the
// job's GPU time by phase, summed from its starts (a reused reference's
// left out) and the held and serving times the runner measured; a job
// from a runner that did not time it carries none.
func TestBlockCarriesTheJobsGPUSeconds(t *testing.T) {
	r := load(t, rec27b)
	res := measurement(r)
	out, err := efficiency.Block(events.RunnerJobCompletedData{SubmissionID: r.ID, Pod: "pod-0"}, res)
	require.NoError(t, err)
	require.Nil(t, out.GPUSeconds, "an untimed job gives no GPU-seconds")

	res.JobGPUTime = events.JobGPUTime{HeldSeconds: 700.5, ServingSeconds: 90.25, Starts: []events.EngineStart{
		{Run: "reference", Seconds: 120, LoadSeconds: 50, GraphSeconds: 30, OtherSeconds: 40, Cached: true},
		{Run: "candidate", Seconds: 100, LoadSeconds: 40, GraphSeconds: 25, OtherSeconds: 35, LoadLogged: true, GraphLogged: true},
		{Run: "serve@1.02", Seconds: 110, LoadSeconds: 41, GraphSeconds: 26, OtherSeconds: 43, LoadLogged: true, GraphLogged: true},
		{Run: "interactive@1.02", Seconds: 90, OtherSeconds: 90},
	}}
	out, err = efficiency.Block(events.RunnerJobCompletedData{SubmissionID: r.ID, Pod: "pod-0"}, res)
	require.NoError(t, err)
	require.NotNil(t, out.GPUSeconds)
	require.Equal(t, record.GPUPhases{Held: 700.5, Serving: 90.25, EngineStart: 300, Loading: 81, GraphCapture: 51, OtherStart: 168, Starts: 3}, *out.GPUSeconds)
}
