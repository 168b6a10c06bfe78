// Package record is the submission record: the JSON document the arena keeps
// for every submission as it moves through the pipeline, in the layout of the
// arena records in shared/fixtures/lowbarena (field for field, same names,
// nesting and units), and the pure function that folds pipeline events into
// it.
package record

import (
	"encoding/json"
	"time"
)

// Status values of a record and of its stages.
const (
	StatusPending = "pending"
	StatusRunning = "running"
	StatusDone    = "done"
	StatusFailed  = "failed"
	StatusSkipped = "skipped"
)

// Submission is the record of one submission.
type Submission struct {
	Agent       string    `json:"agent"`
	CreatedAt   time.Time `json:"created_at"`
	Error       *Error    `json:"error"`
	ID          string    `json:"id"`
	Participant string    `json:"participant"`
	Partition   string    `json:"partition"`
	Result      Result    `json:"result"`
	Runner      string    `json:"runner"`
	Solution    Solution  `json:"solution"`
	Split       string    `json:"split"`
	Stages      []Stage   `json:"stages"`
	// Status is running until every stage has ended; then done, or failed
	// when a stage failed.
	Status    string    `json:"status"`
	TaskID    string    `json:"task_id"`
	Track     string    `json:"track"`
	UpdatedAt time.Time `json:"updated_at"`
	// Bundle is the digest of the submitted bundle once the build stage has
	// computed it. It is not in the fixtures' records.
	Bundle *Bundle `json:"bundle,omitempty"`
	// Events counts the pipeline events folded into the record.
	Events int `json:"events,omitempty"`
}

// Error says why a submission failed: the stage, a stable reason code and a
// sentence the participant can act on.
type Error struct {
	Stage   string `json:"stage"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Bundle identifies the stored bundle of a submission.
type Bundle struct {
	Digest      string `json:"digest"`
	Bytes       int64  `json:"bytes"`
	Files       int    `json:"files"`
	DuplicateOf string `json:"duplicate_of,omitempty"`
	// Reference names the repository of a checkpoint submitted by
	// reference; nil for a checkpoint uploaded in its bundle.
	Reference *Reference `json:"reference,omitempty"`
	// Patch is the engine patch the bundle names, nil for none. Not in
	// the fixtures' records; added by this arena (the round page's
	// patch column).
	Patch *Patch `json:"patch,omitempty"`
}

// Patch is an engine patch: its path in the bundle, size and sha256,
// and what the build stage found when it checked it against the
// campaign's pinned engine source (domain/enginepatch): the files it
// touches, its lines added and removed, and the digests of the source
// and of the patched tree. The check's fields are empty in records of
// builds from before the engine track checked patches.
type Patch struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// Files are the paths, relative to the engine source, the patch
	// touches, sorted.
	Files []string `json:"files,omitempty"`
	// LinesAdded and LinesRemoved count the patch's + and - lines.
	LinesAdded   int `json:"lines_added,omitempty"`
	LinesRemoved int `json:"lines_removed,omitempty"`
	// Revision names the pinned engine source for people
	// (EngineSource.Revision); SourceDigest is its tree's digest.
	Revision     string `json:"revision,omitempty"`
	SourceDigest string `json:"source_digest,omitempty"`
	// EngineDigest is the patched tree's digest
	// (enginepatch.TreeDigest): the engine's identity before it is
	// built, the same for the same source and patch.
	EngineDigest string `json:"engine_digest,omitempty"`
}

// Reference is a checkpoint submitted by reference: the model repository
// and revision its checkpoint.json names (never with credentials), and
// how many files of what total size it lists. Commit is the commit the
// build stage resolved the revision to (the hub's X-Repo-Commit), which
// every later stage reads, so a branch that moves mid-pipeline cannot
// give two stages different files; empty in submission.received, and for
// a host that names no commit.
type Reference struct {
	Repository string `json:"repository"`
	Revision   string `json:"revision"`
	Files      int    `json:"files"`
	Bytes      int64  `json:"bytes"`
	Commit     string `json:"commit,omitempty"`
}

// Stage is one pipeline stage of a record.
type Stage struct {
	Name       string     `json:"name"`
	Status     string     `json:"status"`
	Reason     string     `json:"reason,omitempty"`
	StartedAt  *time.Time `json:"started_at,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
}

// Solution is what the participant declared, and what the arena detected.
type Solution struct {
	Checkpoint string `json:"checkpoint"`
	// DeclaredPrecision reports whether the participant declared a precision
	// label (Precision).
	DeclaredPrecision bool `json:"declared_precision"`
	// DetectedPrecision is the label the contract stage read off the
	// checkpoint and the running engine, W{w}A{a}KV{kv}.
	DetectedPrecision string `json:"detected_precision,omitempty"`
	Method            string `json:"method"`
	// Precision is the declared label, W{w}A{a}KV{kv}.
	Precision string `json:"precision"`
}

// Result holds the blocks each stage adds.
type Result struct {
	AnchorEfficiency map[string]float64    `json:"anchor_efficiency,omitempty"`
	AnchorPeakMemory map[string]PeakMemory `json:"anchor_peak_memory,omitempty"`
	Contract         *Contract             `json:"contract,omitempty"`
	DevQuality       *Quality              `json:"dev_quality,omitempty"`
	DevScore         *Score                `json:"dev_score,omitempty"`
	Efficiency       map[string]float64    `json:"efficiency,omitempty"`
	Engine           *Engine               `json:"engine,omitempty"`
	GPUHours         *float64              `json:"gpu_hours,omitempty"`
	KL               *KL                   `json:"kl,omitempty"`
	PeakMemory       map[string]PeakMemory `json:"peak_memory,omitempty"`
	Split            string                `json:"split,omitempty"`
	Workload         *Workload             `json:"workload,omitempty"`
	// Simulated is true when any figure of the result came from the
	// simulated engine or a simulated GPU; GPU names the GPU model measured
	// or simulated.
	Simulated bool   `json:"simulated,omitempty"`
	GPU       string `json:"gpu,omitempty"`
	// GPUSeconds is the GPU time the submission's efficiency and quality
	// jobs held, by phase (engine starts, serving, ...); nil before
	// either reported it.
	GPUSeconds *GPUSeconds `json:"gpu_seconds,omitempty"`
}

// Contract is what the checkpoint really is, read from its safetensors
// headers and config.json.
type Contract struct {
	ActivationBits     int            `json:"activation_bits"`
	BitsPerWeight      float64        `json:"bits_per_weight"`
	ForeignTensors     ForeignTensors `json:"foreign_tensors"`
	Format             string         `json:"format"`
	KVBits             *int           `json:"kv_bits"`
	ModelBitsPerWeight float64        `json:"model_bits_per_weight"`
	OK                 bool           `json:"ok"`
	Quantization       Quantization   `json:"quantization"`
	RopeArtifact       Rope           `json:"rope_artifact"`
	RopeSource         Rope           `json:"rope_source"`
	SafetensorBytes    int64          `json:"safetensor_bytes"`
	Sparse             bool           `json:"sparse"`
	Violations         []Violation    `json:"violations"`
	WeightBits         int            `json:"weight_bits"`
	// DeclaredPrecision and DetectedPrecision are the labels side by side.
	DeclaredPrecision string `json:"declared_precision,omitempty"`
	DetectedPrecision string `json:"detected_precision,omitempty"`
	// UnquantizedModules are the modules outside the label (embeddings,
	// lm_head, norms, router gates, towers) that the checkpoint stores in
	// 16 bits or more. They count in model_bits_per_weight, never in the
	// label. Absent from the arena's own records; added by this arena.
	UnquantizedModules []UnquantizedModule `json:"unquantized_modules,omitempty"`
	// HeaderBytesRead is how many bytes of the safetensors files the
	// contract read: each shard's 8-byte length and its header, never
	// tensor data (over HTTP Range requests for a checkpoint by
	// reference). Not in the fixtures' records.
	HeaderBytesRead int64 `json:"header_bytes_read,omitempty"`
}

// UnquantizedModule is one module, or the modules of every layer or expert
// that differ only by their index, stored unquantized.
type UnquantizedModule struct {
	// Name is the module, with * for a layer or expert index
	// (model.layers.*.input_layernorm).
	Name string `json:"name"`
	// Kind is embedding, lm_head, norm, gate or other.
	Kind string `json:"kind"`
	// Count is how many modules Name covers.
	Count int `json:"count"`
	// DType is their weights' dtype.
	DType string `json:"dtype"`
	// Bytes are the stored bytes of all their tensors.
	Bytes int64 `json:"bytes"`
}

// ForeignTensors counts tensors that are neither in the source model nor its
// allowed quantization companions.
type ForeignTensors struct {
	Bytes   int64           `json:"bytes"`
	Count   int             `json:"count"`
	Largest []ForeignTensor `json:"largest"`
	Share   float64         `json:"share"`
}

// ForeignTensor is one foreign tensor.
type ForeignTensor struct {
	Name  string  `json:"name"`
	Bytes int64   `json:"bytes"`
	DType string  `json:"dtype"`
	Shape []int64 `json:"shape"`
}

// Violation is one broken contract rule.
type Violation struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Quantization is the checkpoint's quantization_config as the contract reads
// it.
type Quantization struct {
	Activations *QuantArgs `json:"activations"`
	Format      string     `json:"format"`
	Ignore      []string   `json:"ignore"`
	KVQuantized bool       `json:"kv_quantized"`
	Sparse      bool       `json:"sparse"`
	Weights     QuantArgs  `json:"weights"`
}

// QuantArgs is a compressed-tensors quantization scheme of weights or
// activations. A scheme the contract did not recognise is the empty object.
type QuantArgs struct {
	ActOrder       any            `json:"actorder"`
	BlockStructure any            `json:"block_structure"`
	Dynamic        bool           `json:"dynamic"`
	GroupSize      *int           `json:"group_size"`
	NumBits        int            `json:"num_bits"`
	Observer       *string        `json:"observer"`
	ObserverKwargs map[string]any `json:"observer_kwargs"`
	Strategy       *string        `json:"strategy"`
	Symmetric      bool           `json:"symmetric"`
	Type           *string        `json:"type"`
}

// IsZero reports whether no scheme was recognised.
func (q QuantArgs) IsZero() bool {
	return q.ActOrder == nil && q.BlockStructure == nil && !q.Dynamic && q.GroupSize == nil &&
		q.NumBits == 0 && q.Observer == nil && q.ObserverKwargs == nil && q.Strategy == nil &&
		!q.Symmetric && q.Type == nil
}

type quantArgsJSON QuantArgs

// MarshalJSON writes an unrecognised scheme as {}, as the arena's records
// do, and a recognised one with every field.
func (q QuantArgs) MarshalJSON() ([]byte, error) {
	if q.IsZero() {
		return []byte("{}"), nil
	}
	return json.Marshal(quantArgsJSON(q))
}

// Rope is the rotary-embedding configuration of a model.
type Rope struct {
	RopeTheta   float64 `json:"rope_theta"`
	RopeType    string  `json:"rope_type"`
	RopeScaling any     `json:"rope_scaling,omitempty"`
}

// Quality is the dev_quality block: paired per-domain statistics against the
// BF16 reference and their aggregates over the valid domains.
type Quality struct {
	Domains       map[string]Domain `json:"domains"`
	Evaluations   int               `json:"evaluations"`
	FirstQuality  json.RawMessage   `json:"first_quality"`
	Length        Length            `json:"length"`
	Recovery      float64           `json:"recovery"`
	RecoverySE    float64           `json:"recovery_se"`
	ReferenceRows string            `json:"reference_rows"`
	Tier          string            `json:"tier"`
	ValidDomains  int               `json:"valid_domains"`
	WorstDomain   string            `json:"worst_domain"`
	WorstDrop     float64           `json:"worst_drop"`
	WorstUpper    float64           `json:"worst_upper"`
}

// Domain is the paired statistics of one eval domain.
type Domain struct {
	BF16           float64         `json:"bf16"`
	BF16SE         float64         `json:"bf16_se"`
	CandidateLost  float64         `json:"candidate_lost"`
	Chance         float64         `json:"chance"`
	Drop           float64         `json:"drop"`
	FormatContract *FormatContract `json:"format_contract,omitempty"`
	Headroom       float64         `json:"headroom"`
	Items          int             `json:"items"`
	Quantized      float64         `json:"quantized"`
	Recovery       float64         `json:"recovery"`
	RecoverySE     float64         `json:"recovery_se"`
	SE             float64         `json:"se"`
	Status         string          `json:"status"`
	Upper          float64         `json:"upper"`
}

// FormatContract is the share of answers in the required format.
type FormatContract struct {
	BF16      float64 `json:"bf16"`
	Quantized float64 `json:"quantized"`
}

// Length compares generation lengths with the BF16 reference.
type Length struct {
	LengthGenerations int     `json:"length_generations"`
	LengthShift       float64 `json:"length_shift"`
	LengthShiftSE     float64 `json:"length_shift_se"`
	LengthTokens      float64 `json:"length_tokens"`
	LengthTokensBF16  float64 `json:"length_tokens_bf16"`
}

// KL is the divergence of the candidate's top-k logprobs from BF16's on
// shared sequences.
type KL struct {
	KL         float64 `json:"kl"`
	KLMedian   float64 `json:"kl_median"`
	KLPerToken float64 `json:"kl_per_token"`
	KLSE       float64 `json:"kl_se"`
	Sequences  int     `json:"sequences"`
	Tokens     int     `json:"tokens"`
}

// Score is the dev_score block. Ratio fields are null when the entry was not
// scored (disqualified before efficiency could be compared).
type Score struct {
	BF16PeakGiB    *float64           `json:"bf16_peak_gib"`
	Drift          *float64           `json:"drift"`
	EfficiencyGain *float64           `json:"efficiency_gain"`
	MeanDrop       *float64           `json:"mean_drop"`
	Memories       map[string]float64 `json:"memories"`
	Memory         *float64           `json:"memory"`
	MemorySaved    *float64           `json:"memory_saved"`
	PeakGiB        *float64           `json:"peak_gib"`
	Precision      Precision          `json:"precision"`
	Qualified      bool               `json:"qualified"`
	Reason         *string            `json:"reason"`
	Score          float64            `json:"score"`
	Speed          *float64           `json:"speed"`
	Speeds         map[string]float64 `json:"speeds"`
	// Also lists what else disqualified the entry, after Reason: Reason
	// names the integrity failure first (a broken contract, a failed
	// engine audit), then a failed budget, then a tier that does not
	// qualify. Absent from the arena's own records; added by this arena.
	Also []string `json:"also,omitempty"`
	// Policy is the scoring policy version that computed the score.
	Policy string `json:"policy,omitempty"`
}

// Precision is the detected precision and the average stored bits per weight.
type Precision struct {
	Activations    int     `json:"activations"`
	KV             int     `json:"kv"`
	Label          string  `json:"label"`
	Weights        int     `json:"weights"`
	WeightsAverage float64 `json:"weights_average"`
}

// PeakMemory is the memory an engine held at the peak of one workload, in
// GiB; peak_gib = weights_gib + kv_gib + other_gib.
type PeakMemory struct {
	DevicePeakGiB   float64 `json:"device_peak_gib"`
	KVBytesPerToken float64 `json:"kv_bytes_per_token"`
	KVGiB           float64 `json:"kv_gib"`
	KVUsage         float64 `json:"kv_usage"`
	OtherGiB        float64 `json:"other_gib"`
	PeakGiB         float64 `json:"peak_gib"`
	WeightsGiB      float64 `json:"weights_gib"`
	// Source names where the breakdown came from (one of the
	// MemoryFrom* values); empty when the measurement names none.
	Source string `json:"source,omitempty"`
}

// Where a peak's breakdown comes from (PeakMemory.Source).
const (
	// MemoryFromEngineReport: the engine's own memory report
	// (/v1/lowbarena/memory: simengine, or an engine with the arena's
	// patch).
	MemoryFromEngineReport = "engine_report"
	// MemoryFromMetricsNVML: the KV cache in use from the engine's
	// Prometheus /metrics times its KV pool, weights and the pool from its
	// start-up lines, other = the engine's memory by the device's count
	// (NVML's used memory over the baseline before it started) less
	// weights and pool.
	MemoryFromMetricsNVML = "metrics+nvml"
	// MemoryFromMetrics: as MemoryFromMetricsNVML with nothing counting
	// the device: other is the CUDA graph memory of its start-up lines, a
	// lower bound.
	MemoryFromMetrics = "metrics"
	// MemoryFromNVML: no report and no metrics: the peak is the engine's
	// memory by the device's count, kv_gib the whole KV pool it reserved.
	MemoryFromNVML = "nvml"
)

// Engine is what the engine reported at start-up, its audits and the
// budget replay.
type Engine struct {
	// Audit is the engine's audit block: null when the efficiency
	// outcome carries none (as in the fixtures), else the KV dtype check
	// and the four audits with the verdict of all of them.
	Audit     *Audit            `json:"audit"`
	Budget    map[string]Budget `json:"budget"`
	HardCap   bool              `json:"hard_cap"`
	Startup   Startup           `json:"startup"`
	StoredGiB float64           `json:"stored_gib"`
}

// Budget is one workload replayed under a memory cap of its own peak plus a
// factor.
type Budget struct {
	BudgetGiB   float64  `json:"budget_gib"`
	CapGiB      float64  `json:"cap_gib"`
	Factor      float64  `json:"factor"`
	FullRunning float64  `json:"full_running"`
	Healthy     bool     `json:"healthy"`
	Running     float64  `json:"running"`
	Value       *float64 `json:"value"`
	// Attempts is how many replays the verdict took: a replay that held
	// its requests but lost rate is judged over formula.KeepPairs
	// interleaved pairs (KeptRatio, KeptUpper); Value and Running stay
	// the first replay's. Absent from the arena's own records; added by
	// this arena.
	Attempts int `json:"attempts,omitempty"`
	// KeptRatio and KeptUpper judge a replay that held its requests
	// but fell below 90% of the candidate's rate: Attempts pairs, each
	// the unconstrained engine then its replay side by side (the first
	// pair the candidate's run and this replay), KeptRatio the geometric
	// mean of the replays' rates over their pairs' and KeptUpper the
	// upper end of its one-sided 95% confidence interval; the rate is
	// kept unless KeptUpper is below 0.9. Absent where the first replay
	// decided. Added by this arena.
	KeptRatio float64 `json:"kept_ratio,omitempty"`
	KeptUpper float64 `json:"kept_upper,omitempty"`
}

// Startup is the engine's start-up report.
type Startup struct {
	CUDAGraphGiB      float64        `json:"cuda_graph_gib"`
	EngineInitSeconds float64        `json:"engine_init_seconds"`
	KVBytesPerToken   float64        `json:"kv_bytes_per_token"`
	KVCacheDType      string         `json:"kv_cache_dtype"`
	KVCacheGiB        float64        `json:"kv_cache_gib"`
	KVCacheTokens     float64        `json:"kv_cache_tokens"`
	LoadSeconds       *float64       `json:"load_seconds,omitempty"`
	MaxConcurrency    MaxConcurrency `json:"max_concurrency"`
	SpeculativeConfig string         `json:"speculative_config"`
	VLLMVersion       string         `json:"vllm_version"`
	WeightsGiB        float64        `json:"weights_gib"`
}

// MaxConcurrency is how many sequences of a given length fit in the KV pool.
type MaxConcurrency struct {
	Sequences        float64 `json:"sequences"`
	TokensPerRequest int     `json:"tokens_per_request"`
}

// Workload is the first workload (serve) of the submission beside BF16's.
type Workload struct {
	BF16       WorkloadFigures `json:"bf16"`
	Submission WorkloadFigures `json:"submission"`
}

// WorkloadFigures is a peak and a rate.
type WorkloadFigures struct {
	PeakGiB float64 `json:"peak_gib"`
	Rate    float64 `json:"rate"`
}

type contractJSON Contract

// MarshalJSON writes empty lists as [] rather than null, as the arena's
// records do (and as the record and event schemas require).
func (c Contract) MarshalJSON() ([]byte, error) {
	if c.Violations == nil {
		c.Violations = []Violation{}
	}
	if c.ForeignTensors.Largest == nil {
		c.ForeignTensors.Largest = []ForeignTensor{}
	}
	if c.Quantization.Ignore == nil {
		c.Quantization.Ignore = []string{}
	}
	return json.Marshal(contractJSON(c))
}

// Verdicts of an audit.
const (
	VerdictPass    = "pass"
	VerdictFail    = "fail"
	VerdictSkipped = "skipped"
)

// Audit is the engine's audit block (result.engine.audit): what the
// arena checked of the engine that served the checkpoint. Added by this
// arena (the fixtures' records hold null); every field is additive.
type Audit struct {
	// KVCacheDTypeDeclared and KVCacheDTypeEngine are the declared KV
	// dtype and the one the engine reported running.
	KVCacheDTypeDeclared string `json:"kv_cache_dtype_declared"`
	KVCacheDTypeEngine   string `json:"kv_cache_dtype_engine"`
	// ReferenceCached says the BF16 reference's figures came from an
	// earlier job on the same pod; Pod is where both were measured.
	ReferenceCached bool   `json:"reference_cached"`
	Pod             string `json:"pod,omitempty"`
	// GPUIndex is the GPU of the pod they ran on (NVML's index; absent
	// for 0, the only GPU of a pod with one runner).
	GPUIndex int `json:"gpu_index,omitempty"`
	// Verdict is fail when any audit failed (Reason and Message are the
	// first failed one's, in the order below), pass when every audit
	// ran and passed, skipped when none ran.
	Verdict string `json:"verdict,omitempty"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// Seed seeded the measured run's load and the items' draw.
	Seed uint64 `json:"seed,omitempty"`
	// The audits, in the order they decide the verdict.
	ServedModel       *ServedModelAudit `json:"served_model,omitempty"`
	TokenHonesty      *TokenAudit       `json:"token_honesty,omitempty"`
	AnswerCache       *CacheAudit       `json:"answer_cache,omitempty"`
	AccuracyUnderLoad *AccuracyAudit    `json:"accuracy_under_load,omitempty"`
	Device            *DeviceAudit      `json:"device,omitempty"`
}

// DeviceAudit checks the measured decode rates against what the GPU's
// memory bandwidth allows: every decode step reads the weights once and
// each running sequence's KV cache, so a step takes at least
// (weights + running × kv_bytes_per_token × context) / bandwidth.
type DeviceAudit struct {
	Check
	// GPU is the device's name as the engine run reported it; Bandwidth
	// its memory bandwidth in bytes per second from the arena's table (0
	// when the GPU is not in it: the audit is then skipped).
	GPU       string  `json:"gpu"`
	Bandwidth float64 `json:"bandwidth_bytes_per_s,omitempty"`
	// WeightBytes are the weights a step reads (the engine's own count),
	// KVBytesPerToken the KV cache of one token.
	WeightBytes     float64 `json:"weight_bytes"`
	KVBytesPerToken float64 `json:"kv_bytes_per_token"`
	// Margin is how far above the bound a rate may be (caches, the
	// table's rounding) before the audit fails.
	Margin    float64          `json:"margin"`
	Workloads []DeviceWorkload `json:"workloads"`
}

// DeviceWorkload is one workload's measured decode rates beside the
// device's bounds.
type DeviceWorkload struct {
	Workload string `json:"workload"`
	// Running is the most sequences the engine ran at once;
	// ContextTokens the fewest context tokens a running sequence held (its
	// shortest prompt), the bound's KV term.
	Running       int `json:"running"`
	ContextTokens int `json:"context_tokens"`
	// SeqRate is one sequence's decode rate (1000 / median TPOT),
	// SeqRateMax the bound with one sequence running; Rate the
	// workload's aggregate output rate, RateMax the bound at Running.
	SeqRate    float64 `json:"seq_rate"`
	SeqRateMax float64 `json:"seq_rate_max"`
	Rate       float64 `json:"rate"`
	RateMax    float64 `json:"rate_max"`
}

// Check is what every audit says: its verdict, the failure's code and a
// sentence, and the MLPerf audit test it corresponds to.
type Check struct {
	Verdict string `json:"verdict"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	MLPerf  string `json:"mlperf,omitempty"`
}

// AccuracyAudit compares the eval items answered within the efficiency
// workloads with the same items' first samples in the quality job.
type AccuracyAudit struct {
	Check
	// Items is how many items were mixed into the load; Compared how many
	// of them had an answer to compare (the others failed: Errors with an
	// HTTP error or no answer, Incomplete cut mid-answer).
	Items      int `json:"items"`
	Compared   int `json:"compared"`
	Errors     int `json:"errors"`
	Incomplete int `json:"incomplete"`
	// Agreement is the share of compared items whose answer under load
	// begins with the quality job's answer, character for character (an
	// engine under ignore_eos goes on past it).
	Agreement float64 `json:"agreement"`
	// QualityAccuracy and LoadAccuracy are the compared items' mean
	// scores; Drop their paired difference (quality minus load), SE its
	// paired standard error, Lower = Drop - 1.645 SE: the audit fails
	// when Lower > 0.
	QualityAccuracy float64 `json:"quality_accuracy"`
	LoadAccuracy    float64 `json:"load_accuracy"`
	Drop            float64 `json:"drop"`
	SE              float64 `json:"se"`
	Lower           float64 `json:"lower"`
	// SlowRatio is the median over items of their time per output token
	// over the load's median in the same workload; above SlowLimit the
	// engine tells the items apart, when SlowExcessMs (the median over
	// items of their time per token minus the load's) is above
	// SlowFloorMs too: below it the ratio is the host's timing noise.
	SlowRatio    float64        `json:"slow_ratio"`
	SlowLimit    float64        `json:"slow_limit"`
	SlowExcessMs float64        `json:"slow_excess_ms"`
	SlowFloorMs  float64        `json:"slow_floor_ms"`
	Requests     []AuditRequest `json:"requests"`
	// LoadCompared is how many of the load's own requests (each built
	// from a suite item, drawn at random) were compared with the
	// campaign's unpatched engine's answers to the same prompts (only
	// for a submission that patches the engine); LoadAgreement the share
	// whose text was the unpatched engine's, LoadDrop the graded
	// accuracy the load lost against it. The audit fails when
	// LoadAgreement is below MinLoadAgreement.
	LoadCompared     int            `json:"load_compared,omitempty"`
	LoadAgreement    float64        `json:"load_agreement,omitempty"`
	MinLoadAgreement float64        `json:"min_load_agreement,omitempty"`
	LoadDrop         float64        `json:"load_drop,omitempty"`
	LoadRequests     []AuditRequest `json:"load_requests,omitempty"`
}

// AuditRequest is one eval item answered within the load.
type AuditRequest struct {
	Item     string  `json:"item"`
	Workload string  `json:"workload"`
	Seq      int     `json:"seq"`
	Agree    bool    `json:"agree"`
	Quality  float64 `json:"quality"`
	Load     float64 `json:"load"`
	TPOTMs   float64 `json:"tpot_ms,omitempty"`
	Error    string  `json:"error,omitempty"`
}

// CacheAudit compares a run of unique prompts with one of repeated
// prompts on the same engine.
type CacheAudit struct {
	Check
	Concurrency    int     `json:"concurrency"`
	UniqueRequests int     `json:"unique_requests"`
	RepeatRequests int     `json:"repeat_requests"`
	UniqueTPOTMs   float64 `json:"unique_tpot_ms"`
	RepeatTPOTMs   float64 `json:"repeat_tpot_ms"`
	UniqueTTFTMs   float64 `json:"unique_ttft_ms"`
	RepeatTTFTMs   float64 `json:"repeat_ttft_ms"`
	// Ratio is RepeatTPOTMs / UniqueTPOTMs: the audit fails below Limit.
	Ratio float64 `json:"ratio"`
	Limit float64 `json:"limit"`
}

// TokenAudit compares the tokens an engine claimed with its streamed
// text re-tokenised with the campaign's tokenizer.
type TokenAudit struct {
	Check
	Tokenizer   string `json:"tokenizer"`
	Requests    int    `json:"requests"`
	Claimed     int    `json:"claimed"`
	Retokenized int    `json:"retokenized"`
	// Ratio is Claimed / Retokenized: the audit fails above 1 +
	// Tolerance, or when a request went over max_tokens (OverMax) or
	// ended before it although ignore_eos asked for all (EndedEarly).
	Ratio      float64        `json:"ratio"`
	Tolerance  float64        `json:"tolerance"`
	OverMax    int            `json:"over_max"`
	EndedEarly int            `json:"ended_early"`
	Worst      []TokenRequest `json:"worst,omitempty"`
}

// TokenRequest is one request's counts.
type TokenRequest struct {
	Workload    string `json:"workload"`
	Seq         int    `json:"seq"`
	Claimed     int    `json:"claimed"`
	Retokenized int    `json:"retokenized"`
	MaxTokens   int    `json:"max_tokens"`
	Finish      string `json:"finish"`
}

// ServedModelAudit checks that the engine serves the checkpoint it was
// started on.
type ServedModelAudit struct {
	Check
	// Checkpoint is the folder the engine was started on, ServedModel
	// what /v1/models named.
	Checkpoint  string `json:"checkpoint"`
	ServedModel string `json:"served_model"`
	// Probes answered first, Agreed those whose answer is the quality
	// job's; the audit fails when fewer than MinAgreement of them agree.
	Probes       int            `json:"probes"`
	Agreed       int            `json:"agreed"`
	MinAgreement float64        `json:"min_agreement"`
	Requests     []AuditRequest `json:"requests"`
	// UnpatchedProbes and UnpatchedAgreed compare the probes' answers
	// with the campaign's unpatched engine's on the same checkpoint (only
	// for a submission that patches the engine; 0 otherwise): the audit
	// fails when fewer than MinAgreement of them agree.
	UnpatchedProbes int `json:"unpatched_probes,omitempty"`
	UnpatchedAgreed int `json:"unpatched_agreed,omitempty"`
}
