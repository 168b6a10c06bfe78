package score

import (
	"github.com/lowbarena/lowbarena/domain/policy"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/stage"
)

// decide is the score stage's decision, a pure function of a
// submission's entry and a policy: its score.completed data, or the
// refusal that becomes score.failed.
//
//   - no submission (neither joined nor in the stream): submission_unknown;
//   - outcomes of different bundles: score_digest_mismatch (a quality or
//     efficiency figure of another checkpoint is never scored);
//   - inputs the policy cannot score (or an entry that is not complete):
//     score_bad_inputs.
//
// A score is ranked when it qualifies and its split is ranked: the dev
// split is never ranked.
func decide(id string, j joined, p policy.Policy) (events.ScoreCompletedData, *stage.Refusal) {
	if !j.complete() {
		return events.ScoreCompletedData{}, stage.Refusef(reason.ScoreBadInputs, "the %v outcomes are not in yet; nothing is scored", j.pending())
	}
	if j.Submission == nil {
		return events.ScoreCompletedData{}, stage.Refuse(reason.SubmissionUnknown,
			"outcomes arrived for a submission the arena has no submission.received of; nothing is scored")
	}
	if d := j.Contract.BundleDigest; d != "" {
		for _, o := range []struct{ stage, digest string }{
			{events.Quality.Name, j.Quality.BundleDigest}, {events.Efficiency.Name, j.Efficiency.BundleDigest},
		} {
			if o.digest != "" && o.digest != d {
				return events.ScoreCompletedData{}, stage.Refusef(reason.ScoreDigestMismatch,
					"the %s outcome is of bundle %.12s, the contract of %.12s; nothing is scored", o.stage, o.digest, d)
			}
		}
	}
	ds, err := p.Compute(inputsOf(j))
	if err != nil {
		return events.ScoreCompletedData{}, stage.Refuse(reason.ScoreBadInputs, err.Error())
	}
	return events.ScoreCompletedData{SubmissionID: id, Policy: p.Version, DevScore: ds,
		Ranked: ds.Qualified && j.Submission.Split == "ranked"}, nil
}

// inputsOf is what the policy reads of a submission's three outcomes.
func inputsOf(j joined) policy.Inputs {
	return policy.Inputs{Contract: j.Contract.Contract, Label: j.Contract.DetectedPrecision,
		Quality: j.Quality.DevQuality, MeanDrop: j.Quality.MeanDrop,
		Efficiency: policy.Efficiency{Rate: j.Efficiency.Efficiency, BF16Rate: j.Efficiency.AnchorEfficiency,
			Peak: j.Efficiency.PeakMemory, BF16Peak: j.Efficiency.AnchorPeakMemory, BudgetReason: j.Efficiency.BudgetReason,
			AuditReason: j.Efficiency.AuditReason}}
}
