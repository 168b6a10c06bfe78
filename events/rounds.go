package events

// StepStatus is the status of a round step (RoundStepData.Status): pending
// until the round reaches it, running, then done, failed or skipped.
type StepStatus string

// Round step statuses.
const (
	StepPending StepStatus = "pending"
	StepRunning StepStatus = "running"
	StepDone    StepStatus = "done"
	StepFailed  StepStatus = "failed"
	StepSkipped StepStatus = "skipped"
)

// Ended reports whether s is an end status: done, failed or skipped.
func (s StepStatus) Ended() bool { return s == StepDone || s == StepFailed || s == StepSkipped }

// Phase is what a round step does (RoundStepData.Phase). A round's plan
// is the four setup phases, then starting_engine and running_sla for each
// entry (the scorer's starting_engine and running_scorer before the drift
// baseline), then teardown.
type Phase string

// Round step phases.
const (
	PhaseProvisioning     Phase = "provisioning"
	PhaseBootstrapping    Phase = "bootstrapping"
	PhasePullingImage     Phase = "pulling_image"
	PhaseDownloadingModel Phase = "downloading_model"
	PhaseStartingEngine   Phase = "starting_engine"
	PhaseRunningSLA       Phase = "running_sla"
	PhaseRunningScorer    Phase = "running_scorer"
	PhaseTeardown         Phase = "teardown"
)
