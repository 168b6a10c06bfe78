package score

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/policy"
	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
)

// golden joins a fixture's record as the stage would have: its
// submission and its three outcomes. The fixtures do not record the BF16
// anchor, so the anchor rates and peaks are implied by the recorded
// speeds and memories (as the policy's own golden test does); budget is
// the budget sentence of efficiency.completed, "" when every budget held.
func golden(t *testing.T, name, budget string) joined {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "schemas", "testdata", "lowbarena", name))
	require.NoError(t, err)
	var r record.Submission
	require.NoError(t, json.Unmarshal(data, &r))
	res := r.Result
	c := *res.Contract
	c.OK = true // contract.completed is published only for a kept contract
	e := events.EfficiencyCompletedData{SubmissionID: r.ID, Efficiency: res.Efficiency, AnchorEfficiency: res.AnchorEfficiency,
		PeakMemory: res.PeakMemory, AnchorPeakMemory: res.AnchorPeakMemory, BudgetReason: budget}
	if e.AnchorEfficiency == nil {
		e.AnchorEfficiency = map[string]float64{}
		e.PeakMemory, e.AnchorPeakMemory = map[string]record.PeakMemory{}, map[string]record.PeakMemory{}
		for w, sp := range res.DevScore.Speeds {
			e.AnchorEfficiency[w] = res.Efficiency[w] / sp
			e.PeakMemory[w] = record.PeakMemory{PeakGiB: 10}
			e.AnchorPeakMemory[w] = record.PeakMemory{PeakGiB: 10 * res.DevScore.Memories[w]}
		}
	}
	md := 0.0
	if res.DevScore.MeanDrop != nil {
		md = *res.DevScore.MeanDrop
	}
	return joined{
		Submission: &submitted{Participant: r.Participant, Method: r.Solution.Method, Split: r.Split, TaskID: r.TaskID},
		Contract:   &events.ContractCompletedData{SubmissionID: r.ID, Contract: c, DetectedPrecision: r.Solution.DetectedPrecision, TaskID: r.TaskID},
		Quality:    &events.QualityCompletedData{SubmissionID: r.ID, DevQuality: *res.DevQuality, MeanDrop: md},
		Efficiency: &e,
	}
}

// qualifying is a small entry that qualifies under v1: speed 2 and
// memory 2 on every workload, drift 1 point, tier B.
func qualifying(split string) joined {
	dom := func(drop float64) record.Domain { return record.Domain{Status: "valid", Drop: drop, Items: 60} }
	rates := map[string]float64{"serve": 200, "interactive": 20, "long_context": 100}
	bf := map[string]float64{"serve": 100, "interactive": 10, "long_context": 50}
	pk := map[string]record.PeakMemory{"serve": {PeakGiB: 10}, "interactive": {PeakGiB: 5}, "long_context": {PeakGiB: 20}}
	bpk := map[string]record.PeakMemory{"serve": {PeakGiB: 20}, "interactive": {PeakGiB: 10}, "long_context": {PeakGiB: 40}}
	return joined{
		Submission: &submitted{Participant: "p1", Method: "FP8", Split: split, TaskID: "tiny"},
		Contract: &events.ContractCompletedData{SubmissionID: "s1", DetectedPrecision: "W8A8KV8",
			Contract: record.Contract{OK: true, WeightBits: 8, ActivationBits: 8, BitsPerWeight: 8.104}},
		Quality: &events.QualityCompletedData{SubmissionID: "s1", MeanDrop: 0.01,
			DevQuality: record.Quality{Tier: "B", Domains: map[string]record.Domain{"math": dom(0.02), "code": dom(0)}}},
		Efficiency: &events.EfficiencyCompletedData{SubmissionID: "s1", Efficiency: rates, AnchorEfficiency: bf, PeakMemory: pk, AnchorPeakMemory: bpk},
	}
}

// TestDecide is the stage's decision from a joined entry to a score or a
// refusal, without a bus.
func TestDecide(t *testing.T) {
	v1, err := policy.Load(policy.Default)
	require.NoError(t, err)
	budget := "contract: limited to a hard cap of its interactive peak plus 2%"
	digest := func(c string) string { return strings.Repeat(c, 64) }

	cases := []struct {
		name  string
		entry func() joined
		// refused is the refusal's code, "" for a score.
		refused reason.Code
		// message is a part of the refusal's sentence.
		message   string
		score     float64
		qualified bool
		ranked    bool
		reason    string
		also      []string
	}{
		{name: "a dev entry that qualifies is scored and never ranked", entry: func() joined { return qualifying("dev") },
			score: 0.2007, qualified: true},
		{name: "a ranked entry that qualifies is ranked", entry: func() joined { return qualifying("ranked") },
			score: 0.2007, qualified: true, ranked: true},
		{name: "golden 002: a failed tier keeps its score for display, not qualified",
			entry: func() joined { return golden(t, "submission_qwen3-8b_b0c4e95f426f48e2.json", "") },
			// log10(E 1.8652) x (1 - v1's own drift 1.1403 / 3).
			score: 0.1678, reason: "quality tier fail below B"},
		{name: "golden 001: a failed budget disqualifies with its sentence",
			entry:  func() joined { return golden(t, "submission_qwen35-27b_4632bca02a3846d5.json", budget) },
			reason: budget},
		{name: "a failed engine audit disqualifies with its code and sentence", entry: func() joined {
			j := qualifying("ranked")
			j.Efficiency.AuditReason = "audit accuracy_differs_under_load: under load the engine answered 64 eval items with accuracy 0.500"
			return j
		}, reason: "audit accuracy_differs_under_load: under load the engine answered 64 eval items with accuracy 0.500"},
		{name: "a failed audit and a failed budget: the audit's reason first, the budget's listed after it", entry: func() joined {
			j := golden(t, "submission_qwen35-27b_4632bca02a3846d5.json", budget)
			j.Efficiency.AuditReason = "audit accuracy_differs_under_load: under load the engine answered 64 eval items with accuracy 0.500"
			return j
		}, reason: "audit accuracy_differs_under_load: under load the engine answered 64 eval items with accuracy 0.500", also: []string{budget}},
		{name: "a ranked entry that does not qualify is not ranked", entry: func() joined {
			j := golden(t, "submission_qwen35-27b_4632bca02a3846d5.json", budget)
			j.Submission.Split = "ranked"
			return j
		}, reason: budget},
		{name: "no submission is submission_unknown", entry: func() joined {
			j := qualifying("dev")
			j.Submission = nil
			return j
		}, refused: reason.SubmissionUnknown, message: "no submission.received"},
		{name: "an efficiency outcome of another bundle is score_digest_mismatch", entry: func() joined {
			j := qualifying("ranked")
			j.Contract.BundleDigest, j.Quality.BundleDigest, j.Efficiency.BundleDigest = digest("a"), digest("a"), digest("b")
			return j
		}, refused: reason.ScoreDigestMismatch, message: "efficiency outcome is of bundle bbbbbbbbbbbb, the contract of aaaaaaaaaaaa"},
		{name: "a quality outcome of another bundle is score_digest_mismatch", entry: func() joined {
			j := qualifying("dev")
			j.Contract.BundleDigest, j.Quality.BundleDigest = digest("a"), digest("c")
			return j
		}, refused: reason.ScoreDigestMismatch, message: "quality outcome is of bundle cccccccccccc"},
		{name: "outcomes that name no bundle are scored", entry: func() joined {
			j := qualifying("dev")
			j.Contract.BundleDigest = digest("a")
			return j
		}, score: 0.2007, qualified: true},
		{name: "no valid quality domain is score_bad_inputs", entry: func() joined {
			j := qualifying("dev")
			j.Quality.DevQuality.Domains = map[string]record.Domain{"math": {Status: "R5_diagnostic", Drop: 0.5}}
			return j
		}, refused: reason.ScoreBadInputs},
		{name: "a workload without its BF16 rate is score_bad_inputs", entry: func() joined {
			j := qualifying("dev")
			delete(j.Efficiency.AnchorEfficiency, "serve")
			return j
		}, refused: reason.ScoreBadInputs},
		{name: "an entry without its efficiency outcome is score_bad_inputs", entry: func() joined {
			j := qualifying("dev")
			j.Efficiency = nil
			return j
		}, refused: reason.ScoreBadInputs, message: "[efficiency]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, r := decide("s1", c.entry(), v1)
			if c.refused != "" {
				require.NotNil(t, r)
				require.Equal(t, c.refused, r.Code)
				require.Contains(t, r.Message, c.message)
				return
			}
			require.Nil(t, r)
			require.Equal(t, "s1", out.SubmissionID)
			require.Equal(t, policy.Default, out.Policy)
			require.Equal(t, policy.Default, out.DevScore.Policy)
			require.Equal(t, c.score, out.DevScore.Score)
			require.Equal(t, c.qualified, out.DevScore.Qualified)
			require.Equal(t, c.ranked, out.Ranked)
			if c.reason == "" {
				require.Nil(t, out.DevScore.Reason)
			} else {
				require.NotNil(t, out.DevScore.Reason)
				require.Equal(t, c.reason, *out.DevScore.Reason)
			}
			require.Equal(t, c.also, out.DevScore.Also)
		})
	}
}

// TestStandingOf is a submission's standing from its entry: what is
// pending, the running KV dtype over the declared one, the score once
// the outcomes are in, and the refusal when it cannot be scored.
func TestStandingOf(t *testing.T) {
	v1, err := policy.Load(policy.Default)
	require.NoError(t, err)
	ref := &events.BundleRef{Store: "jetstream", Bucket: "artifacts", Object: "m.json", SHA256: strings.Repeat("a", 64)}

	j := joined{Submission: &submitted{Participant: "p1", Method: "FP8", Split: "dev", TaskID: "tiny"}}
	st := standingOf("s1", j, v1)
	require.Equal(t, []string{"contract", "quality", "efficiency"}, st.Pending)
	require.Equal(t, "tiny", st.Campaign)
	require.False(t, st.ContractKept)
	require.Nil(t, st.Score)

	full := qualifying("dev")
	full.Submission = nil
	full.Contract.TaskID, full.Contract.Split, full.Contract.Artifact, full.Contract.KVCacheDType = "tiny", "dev", ref, "fp8_e4m3"
	j.Contract = full.Contract
	st = standingOf("s1", j, v1)
	require.Equal(t, []string{"quality", "efficiency"}, st.Pending)
	require.True(t, st.ContractKept)
	require.Equal(t, ref, st.Artifact)
	require.Equal(t, "fp8_e4m3", st.KVCacheDType, "the declared KV dtype before the engine ran")
	require.Nil(t, st.Patch, "no engine patch")
	j.Contract.Patch = &record.Patch{Path: "engine.patch", SHA256: strings.Repeat("b", 64), EngineDigest: strings.Repeat("c", 64)}
	st = standingOf("s1", j, v1)
	require.Equal(t, j.Contract.Patch, st.Patch, "a round serves the entry on the patched engine its contract checked")

	j.Quality, j.Efficiency = full.Quality, full.Efficiency
	j.Efficiency.Engine.Startup.KVCacheDType = "fp8"
	st = standingOf("s1", j, v1)
	require.Empty(t, st.Pending)
	require.Equal(t, "fp8", st.KVCacheDType, "the KV dtype the engine ran")
	require.NotNil(t, st.Score)
	require.Equal(t, 0.2007, st.Score.Score)
	require.Empty(t, st.Failed)
	require.Empty(t, st.AuditVerdict, "an efficiency outcome without an audit block")

	// A failed audit: the standing says so, and its score does not
	// qualify (a round disqualifies the entry with the reason).
	failedAudit := *j.Efficiency
	failedAudit.Engine.Audit = &record.Audit{Verdict: record.VerdictFail, Reason: "answer_cache_suspected", Message: "repeats decoded at once"}
	failedAudit.AuditReason = "audit answer_cache_suspected: repeats decoded at once"
	ja := j
	ja.Efficiency = &failedAudit
	st = standingOf("s1", ja, v1)
	require.Equal(t, record.VerdictFail, st.AuditVerdict)
	require.Equal(t, "answer_cache_suspected", st.AuditReason)
	require.False(t, st.Score.Qualified)
	require.Equal(t, failedAudit.AuditReason, *st.Score.Reason)

	// Without a submission the campaign and split come from the contract,
	// and the entry cannot be scored.
	full.Contract.KVCacheDType, full.Efficiency.Engine.Startup.KVCacheDType = "", ""
	st = standingOf("s1", full, v1)
	require.Equal(t, "tiny", st.Campaign)
	require.Equal(t, "dev", st.Split)
	require.Empty(t, st.KVCacheDType)
	require.Nil(t, st.Score)
	require.Equal(t, string(reason.SubmissionUnknown), st.Failed)
}
