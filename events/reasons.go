package events

// Reason codes that more than one service gives, each defined once here
// (a code only one service gives is defined beside it). They are stable:
// records, dashboards and participants' scripts match on them, so a code
// is never renamed, only added.
const (
	// ReasonArtifactMissing is a built bundle, one of its files, or a
	// campaign artifact a job needs (its BF16 reference, its eval suite)
	// that the artifact store does not hold, or an outcome that names no
	// artifact: given by contract, quality, efficiency and the runner.
	ReasonArtifactMissing = "artifact_missing"
	// ReasonCampaignUnknown is a submission whose task no loaded campaign
	// runs: given by contract, quality and efficiency.
	ReasonCampaignUnknown = "campaign_unknown_task"
	// ReasonCampaignNoEngine is a campaign that names no engine to serve
	// its checkpoints: given by quality and efficiency.
	ReasonCampaignNoEngine = "campaign_no_engine"
	// ReasonCampaignNoReference is a campaign whose BF16 reference folder
	// is missing or holds no weights (see campaign.CheckReference): given
	// by quality, efficiency and round, before they store anything.
	ReasonCampaignNoReference = "campaign_no_reference"
	// ReasonSuiteInvalid is a campaign's eval suite that does not load:
	// given by quality and the runner.
	ReasonSuiteInvalid = "suite_invalid"
	// ReasonPermissionDenied is an operation the NATS server refused
	// because the connection's user may not do it (a publish or a
	// subscription outside its permissions; see platform/access): given
	// by every service through the bus.
	ReasonPermissionDenied = "permission_denied"
	// ReasonNATSAuthFailed is a connection the NATS server refused for its
	// credentials (none, an unknown key, a wrong password): given by
	// every client (platform/app) and counted by the arena's server
	// (platform/access/enforce).
	ReasonNATSAuthFailed = "nats_auth_failed"
	// ReasonJobAbandoned is a runner job given up without an outcome: its
	// message was delivered MaxDeliver times and no runner ended it (each
	// one that held it stopped or died first), so it was dead-lettered.
	// Given by the runner (as a runner.job.failed) and passed on by the
	// stages and rounds that waited on the job.
	ReasonJobAbandoned = "job_abandoned"
)
