package events

import "github.com/lowbarena/lowbarena/events/record"

// Job kinds on the RUNNER_JOBS queue.
const (
	// JobEfficiency measures a checkpoint's speed and memory beside its
	// BF16 reference on one pod, and replays it under its budget.
	JobEfficiency = "efficiency"
)

// EngineSpec is how a campaign serves its checkpoints: the command
// template (see RunnerJobRequestedData.Engine) and its settings.
type EngineSpec struct {
	Command    string `json:"command"`
	MaxNumSeqs int    `json:"max_num_seqs,omitempty"`
}

// WorkloadSpec sizes the three workloads of an efficiency job.
type WorkloadSpec struct {
	// RequestsPerSlot is how many requests each concurrent slot sends.
	RequestsPerSlot int `json:"requests_per_slot"`
	// MaxTokens is each request's output length.
	MaxTokens int `json:"max_tokens"`
	// PromptWords and LongPromptWords size the prompts of serve and
	// interactive, and of long_context (0: the load generator's defaults).
	PromptWords     int `json:"prompt_words,omitempty"`
	LongPromptWords int `json:"long_prompt_words,omitempty"`
}

// EfficiencyJobParams are the params of an efficiency job.
type EfficiencyJobParams struct {
	Campaign string       `json:"campaign"`
	Engine   EngineSpec   `json:"engine"`
	Workload WorkloadSpec `json:"workload"`
	// KVCacheDType is the candidate's KV dtype (its declaration's).
	KVCacheDType string `json:"kv_cache_dtype"`
	// Reference is the campaign's BF16 reference bundle in the artifact
	// store; the runner fetches it beside the candidate.
	Reference BundleRef `json:"reference"`
	// BudgetFactor is the budget replay's allowance (1.02); 0 skips the
	// replay.
	BudgetFactor float64 `json:"budget_factor"`
}

// WorkloadRun is one workload on one engine.
type WorkloadRun struct {
	// Rate is output tokens per second.
	Rate float64 `json:"rate"`
	// Running is the most requests the engine ran at once: its own count
	// where it reports one, else the load generator's overlap.
	Running int `json:"running"`
	// Full is the requests the workload keeps in flight.
	Full    int     `json:"full"`
	TTFTP50 float64 `json:"ttft_p50_ms"`
	TTFTP99 float64 `json:"ttft_p99_ms"`
	TPOTP50 float64 `json:"tpot_p50_ms"`
	TPOTP99 float64 `json:"tpot_p99_ms"`
	ITLP50  float64 `json:"itl_p50_ms"`
	ITLP90  float64 `json:"itl_p90_ms"`
	ITLP99  float64 `json:"itl_p99_ms"`
	Tokens  int     `json:"output_tokens"`
	// Peak is the memory breakdown at the workload's peak.
	Peak record.PeakMemory `json:"peak"`
}

// EngineRun is what one engine start measured.
type EngineRun struct {
	Startup   record.Startup         `json:"startup"`
	Workloads map[string]WorkloadRun `json:"workloads"`
	// DevicePeakGiB is the most device memory NVML saw.
	DevicePeakGiB float64 `json:"device_peak_gib"`
	GPU           string  `json:"gpu"`
	Simulated     bool    `json:"simulated"`
	// Seconds is the engine's wall time, start to stop.
	Seconds float64 `json:"seconds"`
}

// EfficiencyJobResult is the result of an efficiency job
// (RunnerJobCompletedData.Result).
type EfficiencyJobResult struct {
	GPU       string `json:"gpu"`
	Simulated bool   `json:"simulated"`
	// Reference is the BF16 reference measured on this pod; Cached says
	// it came from an earlier job.
	Reference EngineRun `json:"reference"`
	Cached    bool      `json:"reference_cached"`
	Candidate EngineRun `json:"candidate"`
	// Budget is the replay of each workload under its budget, keyed
	// "{w}@{factor}".
	Budget  map[string]record.Budget `json:"budget"`
	HardCap bool                     `json:"hard_cap"`
	// Seconds is the GPU time the job took (the reference's included when
	// it was measured in this job).
	Seconds float64 `json:"seconds"`
	// StoredBytes is the candidate's safetensors bytes.
	StoredBytes int64 `json:"stored_bytes"`
	// KVCacheDType is the KV dtype the job asked the candidate's engine
	// for (the declaration's), beside what the engine reported running
	// (Candidate.Startup.KVCacheDType).
	KVCacheDType string `json:"kv_cache_dtype"`
}
