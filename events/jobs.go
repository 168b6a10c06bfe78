package events

import (
	"github.com/lowbarena/lowbarena/domain/audit"
	"github.com/lowbarena/lowbarena/domain/campaign"
	"github.com/lowbarena/lowbarena/domain/record"
)

// Job kinds on the RUNNER_JOBS queue.
const (
	// JobEfficiency measures a checkpoint's speed and memory beside its
	// BF16 reference on one pod, and replays it under its budget.
	JobEfficiency = "efficiency"
)

// EngineSpec is campaign.EngineSpec, carried in job params.
type EngineSpec = campaign.EngineSpec

// WorkloadSpec is campaign.WorkloadSpec, carried in job params.
type WorkloadSpec = campaign.WorkloadSpec

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
	// Audit asks for the audits' evidence beside the measurement (eval
	// items mixed into the load, probes, a cache-defeating run, token
	// counts); nil measures without it.
	Audit *AuditJobParams `json:"audit,omitempty"`
	// EngineBundle is the campaign's pinned engine source in the
	// artifact store: the tree of the campaign's Engine.Source.Dir, at
	// the bundle's root (stored with artifact.PutTree, content
	// addressed, so a campaign pushed as a bundle stores nothing again);
	// set with Patch on the engine track.
	EngineBundle *BundleRef `json:"engine_bundle,omitempty"`
	// Patch is the candidate's patch against Engine.Source: the path of
	// its unified diff inside the candidate's bundle. The runner builds
	// the patched engine (services/runner/enginebuild) and runs it
	// sandboxed; empty runs the campaign's own engine.
	Patch string `json:"patch,omitempty"`
	// EngineDigest is the patched tree's digest as the build stage
	// checked it (record.Patch.EngineDigest): the runner builds only that
	// tree, and fails the job with engine_source_changed when the source
	// it was handed patches to another (a campaign pushed between the
	// stages). Empty skips the check (jobs of older stages).
	EngineDigest string `json:"engine_digest,omitempty"`
}

// AuditJobParams say how an efficiency job gathers the audits' evidence.
type AuditJobParams struct {
	// Suite is the campaign's eval suite in the artifact store; SuiteKey
	// names it (name@version/split).
	Suite    BundleRef `json:"suite"`
	SuiteKey string    `json:"suite_key"`
	// Share and MinItems size the eval items mixed into the load: at
	// least Share of the measured requests and at least MinItems.
	Share    float64 `json:"share"`
	MinItems int     `json:"min_items"`
	// Probes is how many items of the fixed probe set the engine answers
	// first, one at a time.
	Probes int `json:"probes"`
	// Unpatched is the campaign's engine without the participant's
	// patch (the pinned engine's command), set only for a submission
	// that patches the engine: the runner starts it on the candidate's
	// checkpoint after the measured run, and the audits compare its
	// answers to the probes and to a sample of the load with the patched
	// engine's (served_model_mismatch, accuracy_differs_under_load). Nil
	// costs no engine start.
	Unpatched *EngineSpec `json:"unpatched,omitempty"`
}

// The audits' evidence: the domain core's types (domain/audit),
// carried in an efficiency job's result.
type (
	AuditEvidence       = audit.Evidence
	AuditAnswer         = audit.Answer
	TokenCount          = audit.TokenCount
	TokenRequest        = record.TokenRequest
	CacheRuns           = audit.CacheRuns
	AuditUnpatched      = audit.UnpatchedRun
	AuditDevice         = audit.DeviceRun
	AuditDeviceWorkload = audit.DeviceWorkload
	RunTimes            = audit.RunTimes
)

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
	// ContextTokens is the longest request the workload made: its
	// longest prompt (as the engine counted it) plus its max tokens, the
	// context a budget replay of it needs.
	ContextTokens int `json:"context_tokens,omitempty"`
	// Audit items mixed into the workload (they count in its figures:
	// the engine cannot tell them apart).
	AuditItems int `json:"audit_items,omitempty"`
}

// EngineStart is one engine start of a runner job: Run names the run
// ("reference", "candidate", "serve@1.02", "candidate#2", "unpatched",
// a quality job's role, an SLA job's entry); Seconds is its launch to its
// health; LoadSeconds and GraphSeconds are the weight loading and the
// CUDA-graph capture the engine's start-up log reports (LoadLogged and
// GraphLogged say whether it reported them; a figure it did not report
// is 0); OtherSeconds is the rest, Seconds less both, never negative.
// Cached marks a BF16 reference measured by an earlier job and reused:
// its start is shown, not paid again. KeptFrom marks a run served by an
// engine kept running after an earlier run with the same settings (the
// run named, of this job or an earlier one on the pod): no start was
// paid, Seconds and its split are 0.
type EngineStart struct {
	Run          string  `json:"run"`
	Seconds      float64 `json:"seconds"`
	LoadSeconds  float64 `json:"load_seconds"`
	GraphSeconds float64 `json:"graph_seconds"`
	OtherSeconds float64 `json:"other_seconds"`
	LoadLogged   bool    `json:"load_logged"`
	GraphLogged  bool    `json:"graph_logged"`
	Cached       bool    `json:"cached,omitempty"`
	KeptFrom     string  `json:"kept_from,omitempty"`
}

// JobGPUTime is how a runner job used its GPU: every engine start it made
// (and a reused reference's, Cached), the time it held the GPU (its start
// on the device to its end: HeldSeconds) and the time the GPU served the
// measured work (ServingSeconds: the workloads' requests, or the suite's
// answers).
//
// Invariant: HeldSeconds >= the starts' Seconds (not Cached) plus
// ServingSeconds, every one measured on the job's clock.
type JobGPUTime struct {
	Starts         []EngineStart `json:"engine_starts,omitempty"`
	HeldSeconds    float64       `json:"held_seconds,omitempty"`
	ServingSeconds float64       `json:"serving_seconds,omitempty"`
}

// Phases sums t by phase (record.GPUPhases), its cached starts left out
// and the runs served by a kept engine counted in Kept, not in Starts.
func (t JobGPUTime) Phases() record.GPUPhases {
	p := record.GPUPhases{Held: t.HeldSeconds, Serving: t.ServingSeconds}
	for _, s := range t.Starts {
		switch {
		case s.Cached:
			continue
		case s.KeptFrom != "":
			p.Kept++
			continue
		}
		p.Starts++
		p.EngineStart += s.Seconds
		p.Loading += s.LoadSeconds
		p.GraphCapture += s.GraphSeconds
		p.OtherStart += s.OtherSeconds
	}
	return p.Rounded()
}

// Timed is t's phases (Phases), or nil for a job that did not time its
// GPU (a runner before it did: no held time).
func (t JobGPUTime) Timed() *record.GPUPhases {
	if t.HeldSeconds <= 0 {
		return nil
	}
	p := t.Phases()
	return &p
}

// Add appends run's start (when it has one) and its serving time to t; a
// cached run adds its start as Cached and nothing else.
func (t *JobGPUTime) Add(run EngineRun, cached bool) {
	if run.Start != nil {
		s := *run.Start
		s.Cached = cached
		t.Starts = append(t.Starts, s)
	}
	if !cached {
		t.ServingSeconds += run.ServingSeconds
	}
}

// EngineRun is what one engine start measured.
type EngineRun struct {
	Startup   record.Startup         `json:"startup"`
	Workloads map[string]WorkloadRun `json:"workloads"`
	// DevicePeakGiB is the engine's most memory by the device's count
	// while it served: NVML's used memory (v2) over the baseline read
	// before it started.
	DevicePeakGiB float64 `json:"device_peak_gib"`
	// StartupPeakGiB is the same from the engine's start to its health
	// (weights, profiling, the KV pool, CUDA graphs), sampled and capped
	// like the serving.
	StartupPeakGiB float64 `json:"startup_peak_gib,omitempty"`
	// BaselineGiB is the device's used memory before the engine started;
	// DeviceTotalGiB the device's size.
	BaselineGiB    float64 `json:"baseline_gib,omitempty"`
	DeviceTotalGiB float64 `json:"device_total_gib,omitempty"`
	// Samples is how many NVML readings the run took, over Seconds.
	Samples   int    `json:"samples,omitempty"`
	GPU       string `json:"gpu"`
	Simulated bool   `json:"simulated"`
	// Seconds is the engine's wall time, start to stop.
	Seconds float64 `json:"seconds"`
	// Start is the engine's start, launch to health, by phase; nil from
	// a runner that did not time it.
	Start *EngineStart `json:"engine_start,omitempty"`
	// ServingSeconds is the time the workloads' measured requests were
	// being served (each workload's run, its requests in flight).
	ServingSeconds float64 `json:"serving_seconds,omitempty"`
	// Audit is the audits' evidence of the candidate's run; nil for a
	// run that gathered none.
	Audit *AuditEvidence `json:"audit,omitempty"`
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
	// JobGPUTime is every engine start of the job (the reference's,
	// Cached when reused), the time it held the GPU and the time the GPU
	// served the workloads.
	JobGPUTime
}

// JobQuality answers a campaign's eval suite with one checkpoint (the BF16
// reference or a candidate) on a GPU runner, which grades every sample
// whose grader is pure Go and writes the graded rows to quality_items
// and every answer to quality_answers. Code answers (suite.GraderCode)
// are written ungraded: the quality stage runs their programs in its own
// sandbox, never the GPU runner.
const JobQuality = "quality"

// QualityJobID is the id of a submission's quality job (its candidate's),
// the one the quality stage requests: a runner that holds the candidate's
// engine finds the job queued under it (JobSubject(JobQuality, id)).
func QualityJobID(submission string) string { return "qual-" + DeriveID(submission, "quality")[:24] }

// Quality roles: the BF16 reference's rows are computed once per campaign
// and suite version; a candidate's are paired with them.
const (
	RoleBF16      = "bf16"
	RoleCandidate = "candidate"
)

// QualityJobParams are the params of a quality job.
type QualityJobParams struct {
	Campaign string     `json:"campaign"`
	Role     string     `json:"role"`
	Engine   EngineSpec `json:"engine"`
	// KVCacheDType is the checkpoint's KV dtype ("auto" for BF16).
	KVCacheDType string `json:"kv_cache_dtype"`
	// Suite is the suite folder in the artifact store; SuiteKey names it
	// (name@version/split) in the rows.
	Suite    BundleRef `json:"suite"`
	SuiteKey string    `json:"suite_key"`
	Sampling Sampling  `json:"sampling"`
	// EngineBundle and Patch are a candidate's patched engine, as in
	// EfficiencyJobParams: the campaign's pinned engine source tree in
	// the artifact store and the path of the candidate's diff inside its
	// bundle. The candidate answers on the engine it measures with; a
	// BF16 reference's job never carries them.
	EngineBundle *BundleRef `json:"engine_bundle,omitempty"`
	Patch        string     `json:"patch,omitempty"`
	EngineDigest string     `json:"engine_digest,omitempty"`
}

// Sampling is campaign.Sampling, carried in job params.
type Sampling = campaign.Sampling

// TopK is one generated token's top-k logprobs, token to logprob.
type TopK map[string]float64

// QualityJobResult is the result of a quality job; the graded rows are in
// quality_items, every answer's text in quality_answers.
type QualityJobResult struct {
	Campaign  string `json:"campaign,omitempty"`
	Role      string `json:"role"`
	SuiteKey  string `json:"suite_key"`
	GPU       string `json:"gpu"`
	Simulated bool   `json:"simulated"`
	// Items and Generations are what was answered, every generation
	// (graded or not); Empty counts generations with no gradeable answer
	// (for a code answer: blank or over grade.MaxAnswerBytes, as every
	// grader refuses them; one whose text holds no program is not
	// counted).
	Items       int `json:"items"`
	Generations int `json:"generations"`
	Empty       int `json:"empty"`
	// Ungraded counts the generations the runner left ungraded, those of
	// code items: their quality_answers rows are written with score 0 and
	// no quality_items row, and the quality stage grades them before it
	// pairs. Zero from a runner that graded everything itself.
	Ungraded int `json:"ungraded,omitempty"`
	// Logprobs holds, per KL sequence (the first KLSequences items, first
	// sample), the top-k logprobs of each generated token.
	Logprobs [][]TopK `json:"logprobs,omitempty"`
	// KLItems are the ids of those sequences, in order.
	KLItems []string `json:"kl_items,omitempty"`
	Seconds float64  `json:"seconds"`
	// JobGPUTime is the job's one engine start, the time it held the GPU
	// and the time the engine spent answering the suite.
	JobGPUTime
}

// JobSLA serves one round entry through the three workloads on the
// round's pod: its rates beside the in-round baseline's.
const JobSLA = "sla"

// SLAJobParams are the params of an SLA job.
type SLAJobParams struct {
	Engine       EngineSpec   `json:"engine"`
	Workload     WorkloadSpec `json:"workload"`
	KVCacheDType string       `json:"kv_cache_dtype"`
	// Entry names the entry in its round ("baseline", "candidate-2").
	Entry string `json:"entry"`
	// EngineBundle and Patch are an entry's patched engine, as in
	// EfficiencyJobParams: a round serves a candidate on the engine its
	// efficiency stage measured. The BF16 baselines never carry them.
	EngineBundle *BundleRef `json:"engine_bundle,omitempty"`
	Patch        string     `json:"patch,omitempty"`
	EngineDigest string     `json:"engine_digest,omitempty"`
}
