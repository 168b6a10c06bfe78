package events

import (
	"slices"
	"time"
)

// PodEntry is a runner's entry in the pods registry (bus.BucketPods,
// key <pod>.<runner>): who it is, which GPU it drives, and what it runs
// now. The runner rewrites it when it takes or ends a job, when its
// pod's lease changes, and every third of the bucket's TTL; an entry
// whose runner stopped (killed, or its machine gone) lapses a TTL after
// the last write. A runner that stops cleanly deletes it.
type PodEntry struct {
	Pod string `json:"pod"`
	// Runner names the runner, as in its runner.job.* events.
	Runner string `json:"runner"`
	// GPUIndex is NVML's index of its GPU on the pod; GPU its name
	// ("... (simulated)" when there is no NVML, with Simulated set).
	GPUIndex  int    `json:"gpu_index"`
	GPU       string `json:"gpu"`
	Simulated bool   `json:"simulated"`
	// GPUUUID is NVML's UUID of the GPU (none when simulated): the index
	// is the container's view where a device plugin hands each runner
	// one GPU (every runner's is 0 there), the UUID names the device.
	GPUUUID string `json:"gpu_uuid,omitempty"`
	// Kinds are the job kinds it runs.
	Kinds []string `json:"kinds"`
	// StartedAt is when the runner started; SeenAt its last write.
	StartedAt time.Time `json:"started_at"`
	SeenAt    time.Time `json:"seen_at"`
	// Job is the job it runs now; nil when idle.
	Job *PodJob `json:"job,omitempty"`
	// HeldBy is the round whose lease holds the pod, as this runner last
	// read it: while it is set the runner takes only the jobs pinned to
	// its pod.
	HeldBy string `json:"held_by,omitempty"`
}

// PodJob is the job a runner runs now.
type PodJob struct {
	JobID        string    `json:"job_id"`
	Kind         string    `json:"kind"`
	SubmissionID string    `json:"submission_id,omitempty"`
	RoundID      string    `json:"round_id,omitempty"`
	Since        time.Time `json:"since"`
	// QualityAlongside says the job is an efficiency job whose runner
	// will answer the submission's quality job on the candidate's engine
	// once the candidate's measured run ends (it keeps its engines): a
	// runner handed that quality job meanwhile hands it back.
	QualityAlongside bool `json:"quality_alongside,omitempty"`
	// Delivery is the job's delivery number (2 and up: redelivered); 0
	// for a quality job its runner answers on the engine of the
	// submission's efficiency job, which holds the delivery (the job
	// stays queued until that run ends).
	Delivery uint64 `json:"delivery"`
}

// Serves reports whether the runner runs jobs of kind. A pod can take a
// round when one of its live runners serves JobSLA.
func (e PodEntry) Serves(kind string) bool { return slices.Contains(e.Kinds, kind) }
