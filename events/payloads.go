package events

import (
	"encoding/json"
	"time"

	"github.com/lowbarena/lowbarena/domain/bundle"
	"github.com/lowbarena/lowbarena/domain/record"
)

// SubmissionReceivedData is the payload of submission.received: a
// participant's bundle has been uploaded and the pipeline may start.
type SubmissionReceivedData struct {
	SubmissionID string `json:"submission_id"`
	Participant  string `json:"participant"`
	Agent        string `json:"agent,omitempty"`
	TaskID       string `json:"task_id"`
	// Split is dev (shown to the participant, never ranked) or ranked.
	Split string `json:"split"`
	Track string `json:"track"`
	// Solution is what the participant declares.
	Solution DeclaredSolution `json:"solution"`
	// Bundle is where the uploaded bundle lies.
	Bundle      BundleRef `json:"bundle"`
	SubmittedAt time.Time `json:"submitted_at"`
	// Reference names the repository of a checkpoint submitted by
	// reference (the bundle then holds its checkpoint.json, which lists
	// every file with its size and sha256); nil when the checkpoint is
	// in the bundle. The build checks that the two agree.
	Reference *CheckpointReference `json:"reference,omitempty"`
}

// CheckpointReference is a checkpoint submitted by reference: repository,
// revision, and the count and total size of the files checkpoint.json
// lists.
type CheckpointReference = record.Reference

// DeclaredSolution is the participant's description of the checkpoint,
// as its submission.json declares it.
type DeclaredSolution = bundle.Solution

// BundleRef points at a stored bundle: an archive in an object store.
type BundleRef struct {
	// Store is the kind of store: "jetstream" (the JetStream object store).
	Store  string `json:"store"`
	Bucket string `json:"bucket"`
	Object string `json:"object"`
	// Size is the archive's size in bytes and SHA256 its digest, so the
	// reader can check what it fetched.
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// Files is the count of files in the archive.
	Files int `json:"files"`
}

// StageStartedData is the payload of <stage>.started.
type StageStartedData struct {
	SubmissionID string `json:"submission_id"`
	Stage        string `json:"stage"`
	// Attempt is the delivery attempt of the input event (1 first).
	Attempt int `json:"attempt"`
}

// StageFailedData is the payload of <stage>.failed: a classified reason with
// a stable code and a sentence the participant can act on.
type StageFailedData struct {
	SubmissionID string `json:"submission_id"`
	Stage        string `json:"stage"`
	// Reason is a stable code (snake_case), for machines.
	Reason string `json:"reason"`
	// Message is a sentence, for people.
	Message string `json:"message"`
	// Detail carries structured context (the contract block of a refused
	// contract, an engine's log tail).
	Detail json.RawMessage `json:"detail,omitempty"`
}

// StageSkippedData is the payload of <stage>.skipped.
type StageSkippedData struct {
	SubmissionID string `json:"submission_id"`
	Stage        string `json:"stage"`
	Reason       string `json:"reason"`
	Message      string `json:"message"`
}

// FileDigest is one file of a bundle.
type FileDigest struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// BuildCompletedData is the payload of build.completed: the bundle is valid
// and stored as an artifact.
type BuildCompletedData struct {
	SubmissionID string `json:"submission_id"`
	// BundleDigest is the sha256 over the sorted manifest (path, size,
	// digest of each file): the same bundle always has the same digest.
	BundleDigest string       `json:"bundle_digest"`
	Files        []FileDigest `json:"files"`
	Bytes        int64        `json:"bytes"`
	Artifact     BundleRef    `json:"artifact"`
	// DuplicateOf is the first submission with the same bundle digest.
	DuplicateOf string `json:"duplicate_of,omitempty"`
	// Reference names the repository of a checkpoint submitted by
	// reference: Files then lists its shards too, which stay in the
	// repository (the artifact store holds the other files).
	Reference *CheckpointReference `json:"reference,omitempty"`
	// Patch is the engine patch the declaration names (engine.patch):
	// its file in the bundle and, once checked against the campaign's
	// pinned engine source, its files, lines and engine digest; nil for
	// a bundle without one.
	Patch *record.Patch `json:"patch,omitempty"`
}

// ContractCompletedData is the payload of contract.completed.
type ContractCompletedData struct {
	SubmissionID      string          `json:"submission_id"`
	Contract          record.Contract `json:"contract"`
	DetectedPrecision string          `json:"detected_precision"`
	// TaskID, BundleDigest, Artifact and KVCacheDType carry forward what
	// the stages after the contract need to serve the checkpoint.
	TaskID       string     `json:"task_id,omitempty"`
	Split        string     `json:"split,omitempty"`
	BundleDigest string     `json:"bundle_digest,omitempty"`
	Artifact     *BundleRef `json:"artifact,omitempty"`
	KVCacheDType string     `json:"kv_cache_dtype,omitempty"`
	// Patch is build.completed's engine patch, carried forward so the
	// stages that ask for engine runs have the candidate's patched engine
	// built and run, and its answers compared with the campaign's
	// unpatched engine's; nil for a bundle without one.
	Patch *record.Patch `json:"patch,omitempty"`
}

// QualityCompletedData is the payload of quality.completed.
type QualityCompletedData struct {
	SubmissionID string         `json:"submission_id"`
	DevQuality   record.Quality `json:"dev_quality"`
	KL           *record.KL     `json:"kl,omitempty"`
	Simulated    bool           `json:"simulated"`
	// TierReason is "quality tier fail below B" when the tier fails, ""
	// otherwise; the score disqualifies with it.
	TierReason string `json:"tier_reason,omitempty"`
	// MeanDrop is the mean drop over the valid domains, 5 decimals.
	MeanDrop float64 `json:"mean_drop"`
	// BundleDigest is the bundle the candidate's answers came from.
	BundleDigest string `json:"bundle_digest,omitempty"`
	// GPUSeconds is the candidate's quality job's GPU time by phase
	// (JobGPUTime.Phases of its result); nil from a runner that did not
	// time it.
	GPUSeconds *record.GPUPhases `json:"gpu_seconds,omitempty"`
}

// EfficiencyCompletedData is the payload of efficiency.completed.
type EfficiencyCompletedData struct {
	SubmissionID     string                       `json:"submission_id"`
	Efficiency       map[string]float64           `json:"efficiency"`
	AnchorEfficiency map[string]float64           `json:"anchor_efficiency"`
	PeakMemory       map[string]record.PeakMemory `json:"peak_memory"`
	AnchorPeakMemory map[string]record.PeakMemory `json:"anchor_peak_memory"`
	Engine           record.Engine                `json:"engine"`
	Workload         record.Workload              `json:"workload"`
	GPUHours         float64                      `json:"gpu_hours"`
	GPU              string                       `json:"gpu"`
	Simulated        bool                         `json:"simulated"`
	// GPUSeconds is the efficiency job's GPU time by phase
	// (JobGPUTime.Phases of its result); nil from a runner that did not
	// time it.
	GPUSeconds *record.GPUPhases `json:"gpu_seconds,omitempty"`
	// BudgetReason is the first failed budget's sentence ("contract:
	// limited to a hard cap of ..."), empty when every budget held; the
	// score disqualifies with it.
	BudgetReason string `json:"budget_reason,omitempty"`
	// AuditReason is the first failed audit's code and sentence ("audit
	// answer_cache_suspected: ..."), empty when no audit failed; the
	// score disqualifies with it. The audits are in Engine.Audit.
	AuditReason string `json:"audit_reason,omitempty"`
	// Pod is where the submission and its reference were measured.
	Pod string `json:"pod,omitempty"`
	// BundleDigest is the bundle that was served.
	BundleDigest string `json:"bundle_digest,omitempty"`
}

// ScoreCompletedData is the payload of score.completed.
type ScoreCompletedData struct {
	SubmissionID string       `json:"submission_id"`
	Policy       string       `json:"policy"`
	DevScore     record.Score `json:"dev_score"`
	Ranked       bool         `json:"ranked"`
}

// RunnerJobRequestedData is the payload of runner.job.requested, a GPU job on
// the RUNNER_JOBS work queue.
type RunnerJobRequestedData struct {
	JobID        string `json:"job_id"`
	Kind         string `json:"kind"`
	SubmissionID string `json:"submission_id,omitempty"`
	RoundID      string `json:"round_id,omitempty"`
	// Pod, when set, pins the job to that pod: it is published on
	// jobs.<kind>.<id>.<pod>, which only that pod's runners consume (a
	// round's jobs, compared with a baseline measured there). Without it
	// any runner takes the job.
	Pod string `json:"pod,omitempty"`
	// Engine is the command template of the engine, with placeholders
	// {{.Checkpoint}} {{.Port}} {{.KVCacheDType}} {{.MaxNumSeqs}}
	// {{.GPUMemoryGiB}}.
	Engine     string          `json:"engine"`
	Checkpoint BundleRef       `json:"checkpoint"`
	Params     json.RawMessage `json:"params,omitempty"`
}

// RunnerJobStartedData is the payload of runner.job.started.
type RunnerJobStartedData struct {
	JobID        string `json:"job_id"`
	Kind         string `json:"kind"`
	SubmissionID string `json:"submission_id,omitempty"`
	RoundID      string `json:"round_id,omitempty"`
	Pod          string `json:"pod,omitempty"`
	Runner       string `json:"runner"`
	GPU          string `json:"gpu"`
	Simulated    bool   `json:"simulated"`
	// GPUIndex is the runner's GPU on its pod (NVML's index; absent for
	// 0, all a runner before pods had).
	GPUIndex int `json:"gpu_index,omitempty"`
}

// RunnerJobProgressData is the payload of runner.job.progress.
type RunnerJobProgressData struct {
	JobID        string `json:"job_id"`
	Kind         string `json:"kind"`
	SubmissionID string `json:"submission_id,omitempty"`
	RoundID      string `json:"round_id,omitempty"`
	Phase        string `json:"phase"`
	Done         int    `json:"done"`
	Total        int    `json:"total"`
	// Unit says what Done and Total count when they are not steps:
	// "bytes" while a checkpoint by reference is staged (phase staging).
	Unit string `json:"unit,omitempty"`
}

// Progress units and phases the runner reports beside a job's own.
const (
	// UnitBytes counts bytes.
	UnitBytes = "bytes"
	// PhaseStaging is a checkpoint by reference being staged onto the pod.
	PhaseStaging = "staging"
	// PhaseBuildingEngine is a candidate's patched engine being built on
	// the pod (or found built): done 0 of 1, then 1 of 1.
	PhaseBuildingEngine = "building_engine"
)

// RunnerJobCompletedData is the payload of runner.job.completed.
type RunnerJobCompletedData struct {
	JobID        string          `json:"job_id"`
	Kind         string          `json:"kind"`
	SubmissionID string          `json:"submission_id,omitempty"`
	RoundID      string          `json:"round_id,omitempty"`
	Pod          string          `json:"pod,omitempty"`
	Runner       string          `json:"runner"`
	GPUHours     float64         `json:"gpu_hours"`
	Result       json.RawMessage `json:"result"`
	// CheckpointDigest is the bundle digest of the checkpoint the job ran.
	CheckpointDigest string `json:"checkpoint_digest,omitempty"`
	// GPU and GPUIndex name the device the job ran on (its name, "...
	// (simulated)" for a simulation, and NVML's index on the pod; absent
	// from runners before pods).
	GPU      string `json:"gpu,omitempty"`
	GPUIndex int    `json:"gpu_index,omitempty"`
}

// RunnerJobFailedData is the payload of runner.job.failed: a classified
// engine or job failure.
type RunnerJobFailedData struct {
	JobID        string  `json:"job_id"`
	Kind         string  `json:"kind"`
	SubmissionID string  `json:"submission_id,omitempty"`
	RoundID      string  `json:"round_id,omitempty"`
	Pod          string  `json:"pod,omitempty"`
	Runner       string  `json:"runner"`
	Reason       string  `json:"reason"`
	Message      string  `json:"message"`
	LogTail      string  `json:"log_tail,omitempty"`
	GPUHours     float64 `json:"gpu_hours"`
	// Exit is how the engine's process ended ("exit status 1"), for a
	// job an engine failure ended; empty otherwise.
	Exit string `json:"exit,omitempty"`
	// GPU and GPUIndex: as in RunnerJobCompletedData.
	GPU      string `json:"gpu,omitempty"`
	GPUIndex int    `json:"gpu_index,omitempty"`
}

// RoundStartedData is the payload of round.started.
type RoundStartedData struct {
	RoundID    string   `json:"round_id"`
	Campaign   string   `json:"campaign"`
	Pod        string   `json:"pod"`
	Incumbent  string   `json:"incumbent,omitempty"`
	Candidates []string `json:"candidates"`
	Steps      int      `json:"steps"`
}

// RoundStepData is the payload of round.step: one step of the round plan
// with its real start and end.
type RoundStepData struct {
	RoundID    string     `json:"round_id"`
	Step       int        `json:"step"`
	Of         int        `json:"of"`
	Group      string     `json:"group"`
	Name       string     `json:"name"`
	Phase      Phase      `json:"phase"`
	Role       string     `json:"role,omitempty"`
	EntryID    string     `json:"entry_id,omitempty"`
	Status     StepStatus `json:"status"`
	StartedAt  *time.Time `json:"started_at,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	Detail     string     `json:"detail,omitempty"`
	// Rates are the entry's output tokens per second by workload, on its
	// running_sla step once measured (the round page divides them by the
	// in-round baseline's); Simulated says they came from a simulated
	// engine or GPU. Both are absent from the other steps.
	Rates     map[string]float64 `json:"rates,omitempty"`
	Simulated bool               `json:"simulated,omitempty"`
}

// RoundEntry is one entry of a round's result.
type RoundEntry struct {
	EntryID string   `json:"entry_id"`
	Role    string   `json:"role"`
	Status  string   `json:"status"`
	Score   *float64 `json:"score"`
	Reason  string   `json:"reason,omitempty"`
}

// RoundCompletedData is the payload of round.completed.
type RoundCompletedData struct {
	RoundID         string       `json:"round_id"`
	Campaign        string       `json:"campaign"`
	Entries         []RoundEntry `json:"entries"`
	TopScore        *float64     `json:"top_score"`
	Leader          string       `json:"leader"`
	LeaderChanged   bool         `json:"leader_changed"`
	PreviousLeader  string       `json:"previous_leader,omitempty"`
	DurationSeconds float64      `json:"duration_seconds"`
	GPUHours        float64      `json:"gpu_hours"`
	Drift           *float64     `json:"drift,omitempty"`
	// DriftMarked says the drift baseline moved beyond the campaign's
	// threshold: the pod changed during the round, and its speeds are
	// suspect.
	DriftMarked bool `json:"drift_marked,omitempty"`
}

// RoundFailedData is the payload of round.failed.
type RoundFailedData struct {
	RoundID string `json:"round_id"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// The schemas want arrays where Go has slices, and a nil slice marshals as
// null. The payloads below write a nil slice as [] so that a producer that
// builds a payload with nothing in a list (no candidates, no entries) still
// publishes valid data.

type buildCompletedJSON BuildCompletedData

// MarshalJSON writes nil Files as [].
func (d BuildCompletedData) MarshalJSON() ([]byte, error) {
	if d.Files == nil {
		d.Files = []FileDigest{}
	}
	return json.Marshal(buildCompletedJSON(d))
}

type roundStartedJSON RoundStartedData

// MarshalJSON writes nil Candidates as [].
func (d RoundStartedData) MarshalJSON() ([]byte, error) {
	if d.Candidates == nil {
		d.Candidates = []string{}
	}
	return json.Marshal(roundStartedJSON(d))
}

type roundCompletedJSON RoundCompletedData

// MarshalJSON writes nil Entries as [].
func (d RoundCompletedData) MarshalJSON() ([]byte, error) {
	if d.Entries == nil {
		d.Entries = []RoundEntry{}
	}
	return json.Marshal(roundCompletedJSON(d))
}
