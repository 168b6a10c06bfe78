package efficiency

import (
	"fmt"

	"github.com/lowbarena/lowbarena/domain/campaign"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/stage"
)

// AuditSuite returns the audits' params of a campaign's suite of a
// split, storing the suite in the artifact store.
type AuditSuite func(c *campaign.Campaign, split string) (*events.AuditJobParams, error)

// EngineStore puts a campaign's pinned engine source tree
// (Campaign.EngineSourceDir) in the artifact store and returns its
// reference.
type EngineStore func(c *campaign.Campaign) (events.BundleRef, error)

// JobID is the runner job of a submission's efficiency: one per
// submission, so a redelivered contract.completed requests the same job
// (and JetStream drops the second request).
func JobID(submission string) string { return "eff-" + events.DeriveID(submission, Name)[:24] }

// Job is the efficiency job of a kept contract, built from its campaign:
// the engine, the workloads, the budget factor and the campaign's BF16
// reference, which store puts in the artifact store and references.
// store is called only once the reference folder is known to hold
// weights, so a refused campaign stores nothing.
//
// Refusals: artifact_missing (the contract passed on no artifact),
// campaign_unknown_task, campaign_no_engine and campaign_no_reference (no
// *.safetensors in the campaign's reference folder). An error of store is
// a retry.
//
// audit, when set, gives the audits' params of the campaign's suite of
// the submission's split; a campaign without a quality suite is measured
// without gathering the audits' evidence. Its error is a retry unless it
// is a refusal.
//
// A submission whose build checked an engine patch (in.Patch) against a
// campaign that pins its engine source is measured on its patched
// engine: the job names the source tree, stored by engine, and the
// patch's path in the bundle (EngineBundle, Patch), and the runner
// builds it. Any other submission, and every one when engine is nil,
// runs the campaign's own engine. An error of engine is a retry. A
// submission that patches the engine also has its answers compared with
// the campaign's unpatched engine's on the same checkpoint: the audits'
// params name that engine (Unpatched); an unpatched submission's do not,
// and it pays no second engine start.
func Job(in events.ContractCompletedData, set campaign.Source, store func(*campaign.Campaign) (events.BundleRef, error), audit AuditSuite, engine EngineStore) (stage.Job, error) {
	if in.Artifact == nil {
		return stage.Job{}, stage.Refuse(reason.ArtifactMissing, "the contract stage passed on no artifact to serve; submit again")
	}
	camp, err := set.Lookup(in.TaskID)
	if err != nil {
		return stage.Job{}, stage.Refuse(reason.CampaignUnknownTask, err.Error())
	}
	if camp.Engine == nil {
		return stage.Job{}, stage.Refusef(reason.CampaignNoEngine, "campaign %s names no engine (campaign.json \"engine\"), so its checkpoints cannot be served", camp.TaskID)
	}
	if err := camp.CheckReference(); err != nil {
		return stage.Job{}, stage.Refuse(reason.CampaignNoReference, err.Error())
	}
	ref, err := store(camp)
	if err != nil {
		return stage.Job{}, err
	}
	p := events.EfficiencyJobParams{Campaign: camp.TaskID, Engine: *camp.Engine, Workload: camp.Efficiency.WorkloadSpec,
		KVCacheDType: in.KVCacheDType, Reference: ref, BudgetFactor: camp.Efficiency.BudgetFactor}
	if audit != nil && camp.Quality != nil {
		if p.Audit, err = audit(camp, in.Split); err != nil {
			return stage.Job{}, err
		}
		if in.Patch != nil && p.Audit != nil {
			// The campaign's own engine, without the patch (its pinned
			// source is the build's business, not the run's).
			unpatched := *camp.Engine
			unpatched.Source = nil
			p.Audit.Unpatched = &unpatched
		}
	}
	if p.EngineBundle, p.Patch, err = PatchedEngine(in, camp, engine); err != nil {
		return stage.Job{}, err
	}
	if p.Patch != "" {
		p.EngineDigest = in.Patch.EngineDigest
	}
	id := in.SubmissionID
	req, err := events.EfficiencyJob.Request(events.RunnerJobRequestedData{JobID: JobID(id), SubmissionID: id, Engine: camp.Engine.Command,
		Checkpoint: *in.Artifact}, p)
	if err != nil {
		return stage.Job{}, fmt.Errorf("efficiency: %w", err)
	}
	return stage.Job{
		Request: req,
	}, nil
}

// PatchedEngine is the engine source tree (stored by engine) and the
// patch path of a submission's patched engine on campaign c: both empty
// unless the submission's build checked a patch (in.Patch) and c pins its
// engine source. The quality stage asks the same for its candidate's
// job, so both jobs run the same engine.
func PatchedEngine(in events.ContractCompletedData, c *campaign.Campaign, engine EngineStore) (*events.BundleRef, string, error) {
	if in.Patch == nil || in.Patch.Path == "" || engine == nil || c.EngineSourceDir() == "" {
		return nil, "", nil
	}
	ref, err := engine(c)
	if err != nil {
		return nil, "", fmt.Errorf("efficiency: store the engine source of %s: %w", c.TaskID, err)
	}
	return &ref, in.Patch.Path, nil
}
