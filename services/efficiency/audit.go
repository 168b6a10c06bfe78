package efficiency

import (
	"context"
	"fmt"

	_ "github.com/lowbarena/lowbarena/adapters/sandbox" // the code grader, under suite.GraderCode
	"github.com/lowbarena/lowbarena/domain/audit"
	"github.com/lowbarena/lowbarena/domain/campaign"
	"github.com/lowbarena/lowbarena/domain/grade"
	"github.com/lowbarena/lowbarena/domain/suite"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/artifact"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/stage"
)

// auditParams are the audits' params of a campaign's suite of a split
// (the split the quality stage answers: a ranked submission's items are
// the held-out ranked suite's), the suite stored in the artifact store
// once per folder per process. A suite that does not load is
// suite_invalid.
func (s *Service) auditParams(ctx context.Context, c *campaign.Campaign, split string) (*events.AuditJobParams, error) {
	dir := c.SuiteDir()
	if split == suite.SplitRanked {
		if dir = c.RankedSuiteDir(); dir == "" {
			return nil, stage.Refusef(reason.SuiteInvalid, "campaign %s names no ranked suite (campaign.json quality.ranked_suite) to audit a ranked submission with", c.TaskID)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.suites[dir]
	if !ok {
		loaded, err := suite.Load(dir)
		if err != nil {
			return nil, stage.Refuse(reason.SuiteInvalid, err.Error())
		}
		ref, err := artifact.PutDir(ctx, s.artifacts, dir)
		if err != nil {
			return nil, fmt.Errorf("efficiency: store the suite of %s: %w", c.TaskID, err)
		}
		st = stored{st: loaded, ref: ref}
		s.suites[dir] = st
	}
	return &events.AuditJobParams{Suite: st.ref, SuiteKey: st.st.Key(), Share: audit.DefaultShare, MinItems: audit.DefaultMinItems,
		Probes: audit.DefaultProbes}, nil
}

// result turns a finished job into the stage's outcome (Result), with its
// audits judged (audit.Judge): a measurement that gathered audit
// evidence waits for the submission's quality outcome (AuditWait) and
// compares the engine's answers under load with the quality job's.
//
// Ack semantics: no quality outcome yet is a deliberate wait; a store or
// stream error a retry; everything else as Result.
func (s *Service) result(ctx context.Context, c events.RunnerJobCompletedData) (events.EfficiencyCompletedData, error) {
	out, err := Result(c)
	if err != nil {
		return out, err
	}
	ev := evidenceOf(c)
	in := audit.Inputs{Evidence: ev}
	if a := out.Engine.Audit; a != nil {
		in.KVDeclared, in.KVEngine, in.ReferenceCached, in.Pod = a.KVCacheDTypeDeclared, a.KVCacheDTypeEngine, a.ReferenceCached, a.Pod
	}
	if ev != nil {
		if err := s.quality(ctx, c, ev.SuiteKey, &in); err != nil {
			return out, err
		}
	}
	judged := audit.Judge(in)
	if a := out.Engine.Audit; a != nil {
		judged.GPUIndex = a.GPUIndex // where it ran: not the audits' to judge
	}
	out.Engine.Audit = &judged
	if reason, msg := audit.Failed(&judged); reason != "" {
		out.AuditReason = "audit " + reason + ": " + msg
	}
	return out, nil
}

// evidenceOf reads the job's audit evidence; nil when it gathered none.
func evidenceOf(c events.RunnerJobCompletedData) *audit.Evidence {
	res, err := events.EfficiencyJob.Result(c)
	if err != nil {
		return nil
	}
	return res.Candidate.Audit
}

// quality fills in the quality job's first samples, or why there are
// none to compare with.
func (s *Service) quality(ctx context.Context, c events.RunnerJobCompletedData, suiteKey string, in *audit.Inputs) error {
	if s.opts.Store == nil {
		in.QualityWhy = "this efficiency stage has no store to read the quality job's answers from"
		return nil
	}
	if suiteKey == "" {
		in.QualityWhy = "the job does not say which suite its items came from"
		return nil
	}
	done, failed, err := s.qualityOutcome(ctx, c.SubmissionID)
	if err != nil {
		return err
	}
	switch {
	case failed != nil:
		in.QualityWhy = fmt.Sprintf("the quality stage failed (%s)", failed.Reason)
		return nil
	case done == nil:
		return stage.RetryAfter(AuditWait, fmt.Errorf("efficiency: the quality outcome of %s is not in yet", c.SubmissionID))
	case done.BundleDigest != "" && c.CheckpointDigest != "" && done.BundleDigest != c.CheckpointDigest:
		in.QualityWhy = fmt.Sprintf("the quality outcome is of bundle %.12s, this measurement of %.12s", done.BundleDigest, c.CheckpointDigest)
		return nil
	}
	camp, st, err := s.suiteOf(ctx, suiteKey)
	if err != nil {
		return err
	}
	if st == nil {
		in.QualityWhy = fmt.Sprintf("no campaign of this arena holds suite %s any more", suiteKey)
		return nil
	}
	var rows []answerRow
	if err := s.opts.Store.Select(ctx, &rows, "SELECT item_id, score, output_tokens, answer FROM quality_answers FINAL "+
		"WHERE campaign = ? AND suite_version = ? AND submission_id = ? AND role = ? AND sample = 0",
		camp, suiteKey, c.SubmissionID, events.RoleCandidate); err != nil {
		return fmt.Errorf("efficiency: read the quality job's answers: %w", err)
	}
	if len(rows) == 0 {
		in.QualityWhy = "the store holds none of the quality job's answers"
		return nil
	}
	in.Quality = map[string]audit.Reference{}
	for _, r := range rows {
		in.Quality[r.ItemID] = audit.Reference{Text: r.Answer, Tokens: int(r.OutputTokens), Score: r.Score}
	}
	items := map[string]suite.Item{}
	for _, its := range st.Items {
		for _, it := range its {
			items[it.ID] = it
		}
	}
	in.Grade = func(id, answer string) (float64, error) {
		it, ok := items[id]
		if !ok {
			return 0, fmt.Errorf("efficiency: item %s is not in suite %s", id, suiteKey)
		}
		// The stage never runs a model's program: code items are not
		// mixed into the load (job.NewAuditPlan), and one here is refused.
		if it.Grader == suite.GraderCode {
			return 0, fmt.Errorf("efficiency: item %s is graded by running code, which only the runner's sandbox does", id)
		}
		g, err := grade.For(it)
		if err != nil {
			return 0, err
		}
		r, err := g.Grade(ctx, it, answer)
		return r.Score, err
	}
	return nil
}

// suiteOf finds the campaign and suite of a suite key among the
// campaigns' dev and ranked suites; nil when none holds it.
func (s *Service) suiteOf(ctx context.Context, key string) (string, *suite.Suite, error) {
	for _, task := range s.opts.Campaigns.Tasks() {
		c := s.opts.Campaigns[task]
		if c.Quality == nil {
			continue
		}
		for _, split := range []string{suite.SplitDev, suite.SplitRanked} {
			p, err := s.auditParams(ctx, c, split)
			if stage.AsRefusal(err) != nil {
				continue
			} else if err != nil {
				return "", nil, err
			}
			if p.SuiteKey == key {
				s.mu.Lock()
				defer s.mu.Unlock()
				for _, x := range s.suites {
					if x.st.Key() == key {
						return c.TaskID, x.st, nil
					}
				}
			}
		}
	}
	return "", nil, nil
}

// answerRow is one of the quality job's first samples.
type answerRow struct {
	ItemID       string  `ch:"item_id"`
	Score        float64 `ch:"score"`
	OutputTokens uint32  `ch:"output_tokens"`
	Answer       string  `ch:"answer"`
}

// qualityOutcome reads the submission's quality.completed or quality.failed
// from the ARENA stream; both nil when neither is there yet.
func (s *Service) qualityOutcome(ctx context.Context, id string) (*events.QualityCompletedData, *events.StageFailedData, error) {
	done, ok, err := bus.Last(ctx, s.arena, events.Quality.Completed, id)
	switch {
	case err != nil:
		return nil, nil, fmt.Errorf("efficiency: %w", err)
	case ok:
		return &done, nil, nil
	}
	failed, ok, err := bus.Last(ctx, s.arena, events.Quality.Failed, id)
	switch {
	case err != nil:
		return nil, nil, fmt.Errorf("efficiency: %w", err)
	case ok:
		return nil, &failed, nil
	}
	return nil, nil, nil
}
