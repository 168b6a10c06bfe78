package events_test

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/events"
)

// roundTrip sends p and r through k as the three ends do: the stage that
// asks for the job (Request), the runner (Params, Encode) and the stage
// that reads its outcome (Result). The bytes on the wire are
// encoding/json's of p and r.
func roundTrip[P, R any](t *testing.T, k events.JobKind[P, R], p P, r R) {
	t.Helper()
	req, err := k.Request(events.RunnerJobRequestedData{JobID: "job-1", SubmissionID: "sub-1", Engine: "vllm serve {{.Checkpoint}}"}, p)
	require.NoError(t, err)
	require.Equal(t, k.Name, req.Kind, "the request carries the kind's name")
	require.Equal(t, "job-1", req.JobID, "the rest of the request as given")
	want, err := json.Marshal(p)
	require.NoError(t, err)
	require.Equal(t, string(want), string(req.Params), "params on the wire are encoding/json's")

	gotP, err := k.Params(req)
	require.NoError(t, err)
	require.Equal(t, p, gotP)

	body, err := k.Encode(r)
	require.NoError(t, err)
	want, err = json.Marshal(r)
	require.NoError(t, err)
	require.Equal(t, string(want), string(body), "the result on the wire is encoding/json's")
	gotR, err := k.Result(events.RunnerJobCompletedData{JobID: "job-1", Kind: k.Name, Result: body})
	require.NoError(t, err)
	require.Equal(t, r, gotR)
}

func TestJobKindsRoundTrip(t *testing.T) {
	engine := events.EngineSpec{Command: "vllm serve {{.Checkpoint}}", MaxNumSeqs: 64}
	workload := events.WorkloadSpec{RequestsPerSlot: 4, MaxTokens: 128}
	run := events.EngineRun{Workloads: map[string]events.WorkloadRun{"serve": {Rate: 812.5, Running: 64, Full: 64, Tokens: 4096,
		Peak: record.PeakMemory{PeakGiB: 17.5}}}, GPU: "H100", Seconds: 93.5}
	t.Run(events.JobEfficiency, func(t *testing.T) {
		roundTrip(t, events.EfficiencyJob,
			events.EfficiencyJobParams{Campaign: "tiny", Engine: engine, Workload: workload, KVCacheDType: "fp8", BudgetFactor: 1.02,
				Reference: events.BundleRef{Store: "jetstream", Object: "bundles/r.json", SHA256: "ab"},
				Audit:     &events.AuditJobParams{SuiteKey: "tiny@1/dev", Share: 0.1, MinItems: 8, Probes: 4}},
			events.EfficiencyJobResult{GPU: "H100", Reference: run, Cached: true, Candidate: run, Seconds: 187, StoredBytes: 1 << 30, KVCacheDType: "fp8"})
	})
	t.Run(events.JobQuality, func(t *testing.T) {
		roundTrip(t, events.QualityJob,
			events.QualityJobParams{Campaign: "tiny", Role: events.RoleCandidate, Engine: engine, KVCacheDType: "auto", SuiteKey: "tiny@1/dev",
				Sampling: events.Sampling{Samples: 2, MaxTokens: 256}},
			events.QualityJobResult{Campaign: "tiny", Role: events.RoleCandidate, SuiteKey: "tiny@1/dev", Items: 10, Generations: 20,
				Logprobs: [][]events.TopK{{{"a": -0.25}}}, KLItems: []string{"item-1"}, Seconds: 12})
	})
	t.Run(events.JobSLA, func(t *testing.T) {
		roundTrip(t, events.SLAJob, events.SLAJobParams{Engine: engine, Workload: workload, KVCacheDType: "fp8", Entry: "candidate-1"}, run)
	})
}

func TestJobKindWire(t *testing.T) {
	// The SLA params as a round has always written them.
	req, err := events.SLAJob.Request(events.RunnerJobRequestedData{JobID: "sla-1"},
		events.SLAJobParams{Engine: events.EngineSpec{Command: "serve", MaxNumSeqs: 8}, Workload: events.WorkloadSpec{RequestsPerSlot: 2, MaxTokens: 16},
			KVCacheDType: "auto", Entry: "baseline"})
	require.NoError(t, err)
	require.Equal(t, `{"engine":{"command":"serve","max_num_seqs":8},"workload":{"requests_per_slot":2,"max_tokens":16},"kv_cache_dtype":"auto","entry":"baseline"}`,
		string(req.Params))

	// Params that do not encode are an error, and the request is left
	// without them.
	_, err = events.EfficiencyJob.Request(events.RunnerJobRequestedData{JobID: "eff-1"}, events.EfficiencyJobParams{BudgetFactor: math.NaN()})
	require.ErrorContains(t, err, "efficiency job eff-1: encode params")

	// A result or params that do not decode are the decoder's error.
	_, err = events.QualityJob.Result(events.RunnerJobCompletedData{Result: json.RawMessage(`{"items":"ten"}`)})
	require.Error(t, err)
	_, err = events.SLAJob.Params(events.RunnerJobRequestedData{})
	require.Error(t, err, "a request without params")
}
