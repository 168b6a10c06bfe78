package efficiency

import (
	"context"
	"fmt"
	"slices"

	_ "github.com/lowbarena/lowbarena/adapters/sandbox" // the code grader, under suite.GraderCode
	"github.com/lowbarena/lowbarena/domain/audit"
	"github.com/lowbarena/lowbarena/domain/campaign"
	"github.com/lowbarena/lowbarena/domain/grade"
	"github.com/lowbarena/lowbarena/domain/record"
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
	st, err := s.suiteOf(ctx, c, split)
	if err != nil {
		return nil, err
	}
	return &events.AuditJobParams{Suite: st.ref, SuiteKey: st.st.Key(), Share: audit.DefaultShare, MinItems: audit.DefaultMinItems,
		Probes: audit.DefaultProbes}, nil
}

// suiteOf is a campaign's suite of a split, loaded and stored in the
// artifact store once per folder per process: the suite the quality
// stage answers for the campaign's submissions of that split.
func (s *Service) suiteOf(ctx context.Context, c *campaign.Campaign, split string) (stored, error) {
	dir := c.SuiteDir()
	if split == suite.SplitRanked {
		if dir = c.RankedSuiteDir(); dir == "" {
			return stored{}, stage.Refusef(reason.SuiteInvalid, "campaign %s names no ranked suite (campaign.json quality.ranked_suite) to audit a ranked submission with", c.TaskID)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.suites[dir]
	if !ok {
		loaded, err := suite.Load(dir)
		if err != nil {
			return stored{}, stage.Refuse(reason.SuiteInvalid, err.Error())
		}
		ref, err := artifact.PutDir(ctx, s.artifacts, dir)
		if err != nil {
			return stored{}, fmt.Errorf("efficiency: store the suite of %s: %w", c.TaskID, err)
		}
		st = stored{st: loaded, ref: ref}
		s.suites[dir] = st
	}
	return st, nil
}

// result turns a finished job into the stage's outcome (Result), with its
// audits judged (audit.Judge): a measurement that gathered audit
// evidence waits for the submission's quality outcome (AuditWait) and
// compares the engine's answers under load with the quality job's.
//
// An audit that cannot run never passes: where the quality job's answers
// cannot be had, the audits that compare with them (served_model and
// accuracy_under_load) fail with audit_unjudged and what stood in the
// way (see quality for which cases wait and which fail, and why).
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
	if ev != nil {
		unjudged(&judged, in.QualityWhy)
	}
	if a := out.Engine.Audit; a != nil {
		judged.GPUIndex = a.GPUIndex // where it ran: not the audits' to judge
	}
	out.Engine.Audit = &judged
	if reason, msg := audit.Failed(&judged); reason != "" {
		out.AuditReason = "audit " + reason + ": " + msg
	}
	return out, nil
}

// unjudged fails the audits of a judged block that compare the engine's
// answers with the quality job's and could not: an audit that cannot run
// is never a pass. why says what stood in the way where there were no
// answers at all; where there were, a comparing audit that found none of
// its requests among them (no probe, fewer than two items) says so
// itself. An audit that failed on its own evidence keeps its failure, and
// a served_model skipped because its probes failed stays so (they count
// as failed items in accuracy_under_load, which fails on them). The
// block's verdict is then the first failed audit's in audit.Judge's
// order.
func unjudged(a *record.Audit, why string) {
	var served, tokens, cache, accuracy, dev *record.Check
	if a.ServedModel != nil {
		served = &a.ServedModel.Check
	}
	if a.TokenHonesty != nil {
		tokens = &a.TokenHonesty.Check
	}
	if a.AnswerCache != nil {
		cache = &a.AnswerCache.Check
	}
	if a.AccuracyUnderLoad != nil {
		accuracy = &a.AccuracyUnderLoad.Check
	}
	if a.Device != nil {
		dev = &a.Device.Check
	}
	fail := func(c *record.Check) {
		if c == nil || c.Verdict != record.VerdictSkipped {
			return
		}
		w := why
		if w == "" {
			w = c.Message
		}
		c.Verdict, c.Reason, c.Message = record.VerdictFail, string(reason.AuditUnjudged),
			"it compares the engine's answers with the quality job's, and could not: "+w
	}
	if served != nil && !slices.ContainsFunc(a.ServedModel.Requests, func(r record.AuditRequest) bool { return r.Error != "" }) {
		fail(served)
	}
	fail(accuracy)
	a.Verdict, a.Reason, a.Message = record.VerdictSkipped, "", ""
	for _, c := range []*record.Check{served, tokens, cache, accuracy, dev} {
		switch {
		case c == nil:
		case c.Verdict == record.VerdictFail && a.Verdict != record.VerdictFail:
			a.Verdict, a.Reason, a.Message = record.VerdictFail, c.Reason, c.Message
		case c.Verdict == record.VerdictPass && a.Verdict == record.VerdictSkipped:
			a.Verdict = record.VerdictPass
		}
	}
}

// evidenceOf reads the job's audit evidence; nil when it gathered none.
func evidenceOf(c events.RunnerJobCompletedData) *audit.Evidence {
	res, err := events.EfficiencyJob.Result(c)
	if err != nil {
		return nil
	}
	return res.Candidate.Audit
}

// quality fills in the quality job's first samples, or says why there
// are none to compare with (in.QualityWhy, which result turns into the
// comparing audits' failure). Everything is keyed by the submission's
// own campaign, the task id its contract outcome carries: two campaigns
// may share a suite key (lowb-gen@1/dev), and the answers are filed
// under the campaign the quality job ran for.
//
// Which cases wait and which fail:
//   - no quality outcome yet: a deliberate wait (stage.RetryAfter,
//     AuditWait): the quality job may queue behind other submissions'
//     on one runner, and its outcome will come;
//   - a store or stream error: a retry, as any error;
//   - every other case fails the comparing audits, because waiting
//     would not change it: the quality stage failed (its outcome is
//     final), the outcome is of another bundle, the job names no suite,
//     the stage has no store, the submission's campaign or its suite of
//     that key is no longer this arena's, or the store holds none of
//     the answers (the runner writes them before its job completes, so
//     a quality.completed comes after they are in; absent then, they
//     will not come).
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
	cc, ok, err := bus.Last(ctx, s.arena, events.Contract.Completed, c.SubmissionID)
	if err != nil {
		return fmt.Errorf("efficiency: %w", err)
	}
	if !ok || cc.TaskID == "" {
		in.QualityWhy = "the submission's contract outcome, which names its campaign, is not on the ARENA stream"
		return nil
	}
	camp, err := s.opts.Campaigns.Lookup(cc.TaskID)
	if err != nil || camp.Quality == nil {
		in.QualityWhy = fmt.Sprintf("the submission's campaign %s is not one of this arena's with a quality suite any more", cc.TaskID)
		return nil
	}
	st, err := s.suiteOf(ctx, camp, cc.Split)
	if stage.AsRefusal(err) != nil {
		in.QualityWhy = fmt.Sprintf("the %s suite of campaign %s does not load: %v", splitOf(cc.Split), camp.TaskID, err)
		return nil
	} else if err != nil {
		return err
	}
	if key := st.st.Key(); key != suiteKey {
		in.QualityWhy = fmt.Sprintf("the job's items came from suite %s, campaign %s now holds %s", suiteKey, camp.TaskID, key)
		return nil
	}
	var rows []answerRow
	if err := s.opts.Store.Select(ctx, &rows, "SELECT item_id, score, output_tokens, answer FROM quality_answers FINAL "+
		"WHERE campaign = ? AND suite_version = ? AND submission_id = ? AND role = ? AND sample = 0",
		camp.TaskID, suiteKey, c.SubmissionID, events.RoleCandidate); err != nil {
		return fmt.Errorf("efficiency: read the quality job's answers: %w", err)
	}
	if len(rows) == 0 {
		in.QualityWhy = fmt.Sprintf("the store holds none of the quality job's answers (campaign %s, suite %s)", camp.TaskID, suiteKey)
		return nil
	}
	in.Quality = map[string]audit.Reference{}
	for _, r := range rows {
		in.Quality[r.ItemID] = audit.Reference{Text: r.Answer, Tokens: int(r.OutputTokens), Score: r.Score}
	}
	items := map[string]suite.Item{}
	for _, its := range st.st.Items {
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
			return 0, fmt.Errorf("efficiency: item %s is graded by running code, which only the quality stage's sandbox does", id)
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

// splitOf names a split, dev where none is given.
func splitOf(split string) string {
	if split == "" {
		return suite.SplitDev
	}
	return split
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
