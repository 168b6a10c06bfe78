package quality

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/domain/campaign"
	"github.com/lowbarena/lowbarena/domain/suite"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/artifact"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/stage"
)

// JobID is the quality job of a submission (events.QualityJobID: the
// runners look it up by it).
func JobID(submission string) string { return events.QualityJobID(submission) }

// ReferenceJobID is the BF16 reference's quality job of a campaign, suite
// version and reference checkpoint: one, however many candidates ask.
func ReferenceJobID(campaign, suiteKey, referenceDigest string) string {
	return "qref-" + events.DeriveID(campaign, suiteKey, referenceDigest)[:24]
}

// Jobs are the quality jobs of a kept contract on its campaign's suite
// st (stored in the artifact store as suiteRef): the BF16 reference's
// (its checkpoint stored as reference) first when its rows are not
// stored yet, then the candidate's. Both request ids are the kit's
// default, events.DeriveID(job id, runner.job.requested).
// Its error is the params' encoding's.
//
// engineSource, when set, is the campaign's pinned engine source tree in
// the artifact store: a candidate whose build checked an engine patch
// (in.Patch) answers on its patched engine, as its efficiency job
// measures it (EngineBundle, Patch); the BF16 reference never does.
func Jobs(in events.ContractCompletedData, c *campaign.Campaign, st *suite.Suite, suiteRef, reference events.BundleRef, referenceStored bool,
	engineSource *events.BundleRef) ([]stage.Job, error) {
	var out []stage.Job
	job := func(id, submission, role string, ckpt events.BundleRef, kv string) error {
		p := events.QualityJobParams{Campaign: c.TaskID, Role: role, Engine: *c.Engine, KVCacheDType: kv,
			Suite: suiteRef, SuiteKey: st.Key(), Sampling: c.Quality.Sampling}
		if role == events.RoleCandidate && engineSource != nil && in.Patch != nil && in.Patch.Path != "" {
			p.EngineBundle, p.Patch, p.EngineDigest = engineSource, in.Patch.Path, in.Patch.EngineDigest
		}
		req, err := events.QualityJob.Request(events.RunnerJobRequestedData{JobID: id, SubmissionID: submission,
			Engine: c.Engine.Command, Checkpoint: ckpt}, p)
		if err != nil {
			return fmt.Errorf("quality: %w", err)
		}
		out = append(out, stage.Job{Request: req})
		return nil
	}
	if !referenceStored {
		if err := job(ReferenceJobID(c.TaskID, st.Key(), reference.SHA256), "", events.RoleBF16, reference, "auto"); err != nil {
			return nil, err
		}
	}
	if err := job(JobID(in.SubmissionID), in.SubmissionID, events.RoleCandidate, *in.Artifact, in.KVCacheDType); err != nil {
		return nil, err
	}
	return out, nil
}

// jobs builds the jobs of a kept contract (see Jobs). Refusals:
// artifact_missing, campaign_unknown_task, campaign_no_suite,
// suite_invalid and campaign_no_reference (a BF16 reference folder
// without weights: refused before anything is stored).
func (s *Service) jobs(ctx context.Context, in events.ContractCompletedData) ([]stage.Job, error) {
	if in.Artifact == nil {
		return nil, stage.Refuse(reason.ArtifactMissing, "the contract stage passed on no artifact to evaluate; submit again")
	}
	c, err := s.opts.Campaigns.Lookup(in.TaskID)
	if err != nil {
		return nil, stage.Refuse(reason.CampaignUnknownTask, err.Error())
	}
	if c.Quality == nil || c.Engine == nil {
		return nil, stage.Refusef(reason.CampaignNoSuite, "campaign %s names no quality suite or engine (campaign.json \"quality\", \"engine\")", c.TaskID)
	}
	split := in.Split
	if split == "" {
		split = suite.SplitDev
	}
	st, dir, err := s.suite(c, split)
	if errors.Is(err, suite.ErrBadSuite) {
		return nil, stage.Refuse(reason.SuiteInvalid, err.Error())
	} else if err != nil {
		return nil, err
	}
	if err := c.CheckReference(); err != nil {
		return nil, stage.Refuse(reason.CampaignNoReference, err.Error())
	}
	suiteRef, err := s.store(ctx, dir)
	if err != nil {
		return nil, fmt.Errorf("quality: store suite: %w", err)
	}
	key := st.Key()
	var reference events.BundleRef
	_, err = s.refs.Get(ctx, refKey(c.TaskID, key))
	stored := err == nil
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		if reference, err = s.store(ctx, c.ReferenceDir()); err != nil {
			return nil, fmt.Errorf("quality: store the BF16 reference: %w", err)
		}
		// The reference job's campaign and suite are kept before it is
		// queued, so its outcome finds them whatever this process
		// remembers (a failed job's payload carries neither).
		if err := s.putRefJob(ctx, ReferenceJobID(c.TaskID, key, reference.SHA256), refJob{Campaign: c.TaskID, SuiteKey: key}); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, fmt.Errorf("quality: read bucket %s: %w", bus.BucketQualityReferences, err)
	}
	var engineSource *events.BundleRef
	if dir := c.EngineSourceDir(); dir != "" && in.Patch != nil {
		ref, err := s.storeTree(ctx, dir)
		if err != nil {
			return nil, fmt.Errorf("quality: store the engine source: %w", err)
		}
		engineSource = &ref
	}
	return Jobs(in, c, st, suiteRef, reference, stored, engineSource)
}

// suite loads a campaign's suite of a split (a ranked submission is
// evaluated on the held-out ranked suite, never on the dev items shown to
// participants), once per suite folder per process (a new campaign
// version is a new folder, so its suite is loaded anew), and returns it
// with its folder.
func (s *Service) suite(c *campaign.Campaign, split string) (*suite.Suite, string, error) {
	dir := c.SuiteDir()
	if split == suite.SplitRanked {
		if dir = c.RankedSuiteDir(); dir == "" {
			return nil, "", fmt.Errorf("%w: campaign %s names no ranked suite (campaign.json quality.ranked_suite), so it cannot evaluate ranked submissions", suite.ErrBadSuite, c.TaskID)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.suites[dir]; ok {
		return st, dir, nil
	}
	st, err := suite.Load(dir)
	if err != nil {
		return nil, "", err
	}
	if st.Split != split {
		return nil, "", fmt.Errorf("%w: the suite at %s is the %s split, the submission is %s", suite.ErrBadSuite, dir, st.Split, split)
	}
	s.suites[dir] = st
	s.log.Info("suite loaded", "campaign", c.TaskID, "suite", st.Key(), "items", st.Count())
	return st, dir, nil
}

// suiteOf finds the suite a candidate's job answered, from what its
// result carries: its campaign and its suite key, whose split is its last
// part. It loads the
// suite from the campaigns folder when this process has not yet, so a
// result after a restart finds it. A suite its campaign no longer holds
// is suite_invalid; a campaign no longer run is campaign_unknown_task.
func (s *Service) suiteOf(campaignID, suiteKey string) (string, *suite.Suite, error) {
	split := suiteKey[strings.LastIndex(suiteKey, "/")+1:]
	c, err := s.opts.Campaigns.Lookup(campaignID)
	if err != nil {
		return "", nil, stage.Refuse(reason.CampaignUnknownTask, err.Error())
	}
	if c.Quality != nil {
		st, _, err := s.suite(c, split)
		if err != nil && !errors.Is(err, suite.ErrBadSuite) {
			return "", nil, err
		}
		if err == nil && st.Key() == suiteKey {
			return c.TaskID, st, nil
		}
	}
	return "", nil, stage.Refusef(reason.SuiteInvalid, "no campaign of this arena holds suite %s (campaign %q), which the job answered; submit again", suiteKey, campaignID)
}

// store puts a folder in the artifact store (content addressed: storing
// it again is a no-op) once per folder per process.
func (s *Service) store(ctx context.Context, dir string) (events.BundleRef, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ref, ok := s.stored[dir]; ok {
		return ref, nil
	}
	ref, err := artifact.PutDir(ctx, s.artifacts, dir)
	if err != nil {
		return events.BundleRef{}, err
	}
	s.stored[dir] = ref
	return ref, nil
}

// storeTree puts a folder and its sub-folders in the artifact store
// (artifact.PutTree, content addressed) once per folder per process: the
// campaign's pinned engine source.
func (s *Service) storeTree(ctx context.Context, dir string) (events.BundleRef, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := "tree:" + dir
	if ref, ok := s.stored[key]; ok {
		return ref, nil
	}
	ref, err := artifact.PutTree(ctx, s.artifacts, dir)
	if err != nil {
		return events.BundleRef{}, err
	}
	s.stored[key] = ref
	return ref, nil
}
