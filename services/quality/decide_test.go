package quality_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/campaign"
	"github.com/lowbarena/lowbarena/domain/examples"
	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/domain/suite"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/stage"
	"github.com/lowbarena/lowbarena/services/quality"
)

func tinySuite() *suite.Suite {
	return suite.Generate("tiny", "1", suite.SplitDev, suite.SeedDev, suite.Sizes{"math": 60, "commonsense": 60, "expert": 10})
}

// rowsOf is one graded sample per item of st, scored by score(item
// index, domain).
func rowsOf(st *suite.Suite, score func(i int, d string) float64) []quality.Row {
	var rows []quality.Row
	for _, d := range st.Domains {
		for i, it := range st.Items[d] {
			rows = append(rows, quality.Row{ItemID: it.ID, Domain: d, Score: score(i, d), Formatted: 1, OutputTokens: uint32(10 + i%3)})
		}
	}
	return rows
}

// bf16Score is right on the first 45 of 60 math items, 48 of 60
// commonsense and 5 of 10 expert.
func bf16Score(i int, d string) float64 {
	if d == "math" && i < 45 || d == "commonsense" && i < 48 || d == "expert" && i < 5 {
		return 1
	}
	return 0
}

// lossScore is BF16 losing 6 math items and nothing else.
func lossScore(i int, d string) float64 {
	if d == "math" && i < 39 || d == "commonsense" && i < 48 || d == "expert" && i < 5 {
		return 1
	}
	return 0
}

func refusalOf(t *testing.T, err error) *stage.Refusal {
	t.Helper()
	r := stage.AsRefusal(err)
	require.NotNil(t, r, "a refusal: %v", err)
	return r
}

// TestReady is the waiting logic: a candidate waits for its reference,
// is refused when the reference failed or when its engine answered
// mostly nothing, and is paired otherwise.
func TestReady(t *testing.T) {
	done := &quality.RefState{Status: quality.StatusDone}
	for _, tc := range []struct {
		name    string
		res     events.QualityJobResult
		ref     *quality.RefState
		wait    bool
		reason  reason.Code
		message string
	}{
		{name: "the reference is not there yet", res: events.QualityJobResult{Generations: 10}, wait: true},
		{name: "the reference failed", res: events.QualityJobResult{SuiteKey: "tiny@1/dev", Generations: 10},
			ref: &quality.RefState{Status: quality.StatusFailed, Reason: "engine_oom: out of memory"}, reason: reason.QualityNoReference, message: "engine_oom: out of memory"},
		{name: "a state that is neither done nor failed", res: events.QualityJobResult{Generations: 10}, ref: &quality.RefState{Status: "running"},
			reason: reason.QualityNoReference},
		{name: "mostly empty answers", res: events.QualityJobResult{Generations: 10, Empty: 6}, ref: done, reason: reason.EngineEmptyAnswers,
			message: "6 of 10 generations"},
		{name: "half empty answers", res: events.QualityJobResult{Generations: 10, Empty: 5}, ref: done},
		{name: "ready", res: events.QualityJobResult{Generations: 10}, ref: done},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := quality.Ready(tc.res, tc.ref)
			switch {
			case tc.wait:
				var w *stage.Wait
				require.True(t, errors.As(err, &w), "a deliberate wait: %v", err)
				require.Equal(t, 5*time.Second, w.After)
				require.Nil(t, stage.AsRefusal(err))
			case tc.reason != "":
				r := refusalOf(t, err)
				require.Equal(t, tc.reason, r.Code)
				require.Contains(t, r.Message, tc.message)
			default:
				require.NoError(t, err)
			}
		})
	}
}

// TestPair is the pairing: a candidate's rows beside BF16's become the
// dev_quality block, or a refusal.
func TestPair(t *testing.T) {
	st := tinySuite()
	bf := rowsOf(st, bf16Score)
	n := len(bf)
	c := events.RunnerJobCompletedData{JobID: "qual-1", Kind: events.JobQuality, SubmissionID: "sub1", CheckpointDigest: "d1"}
	res := func(gen int) events.QualityJobResult {
		return events.QualityJobResult{Campaign: examples.TaskID, Role: events.RoleCandidate, SuiteKey: st.Key(), Generations: gen, Simulated: true}
	}
	ref := events.QualityJobResult{Campaign: examples.TaskID, Role: events.RoleBF16, SuiteKey: st.Key(), Generations: n}
	outside := rowsOf(st, lossScore)
	outside[0].ItemID = "not-in-the-suite"
	zero := func(int, string) float64 { return 0 }
	for _, tc := range []struct {
		name      string
		res, ref  events.QualityJobResult
		cand, bf  []quality.Row
		reason    reason.Code
		message   string
		checkFull bool
	}{
		{name: "the candidate loses six math items", res: res(n), ref: ref, cand: rowsOf(st, lossScore), bf: bf, checkFull: true},
		{name: "fewer candidate rows than generations", res: res(n + 5), ref: ref, cand: rowsOf(st, lossScore), bf: bf,
			reason: reason.QualityRowsIncomplete, message: held(n, n+5, "candidate")},
		{name: "fewer BF16 rows than generations", res: res(n), ref: ref, cand: rowsOf(st, lossScore), bf: bf[1:],
			reason: reason.QualityRowsIncomplete, message: held(n-1, n, "BF16 reference")},
		{name: "an item outside the suite", res: res(n), ref: ref, cand: outside, bf: bf,
			reason: reason.QualityRowsIncomplete, message: "item not-in-the-suite has no BF16 reference row"},
		{name: "BF16 no better than chance anywhere", res: res(n), ref: ref, cand: rowsOf(st, zero), bf: rowsOf(st, zero),
			reason: reason.QualityBadStatistics},
		{name: "no rows at all", res: res(0), ref: events.QualityJobResult{SuiteKey: st.Key()}, reason: reason.QualityBadStatistics},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := quality.Pair(examples.TaskID, st, c, tc.res, tc.ref, tc.cand, tc.bf)
			if tc.reason != "" {
				r := refusalOf(t, err)
				require.Equal(t, tc.reason, r.Code)
				require.Contains(t, r.Message, tc.message)
				return
			}
			require.NoError(t, err)
			require.Equal(t, "sub1", out.SubmissionID)
			require.Equal(t, "d1", out.BundleDigest)
			math := out.DevQuality.Domains["math"]
			require.InDelta(t, 0.75, math.BF16, 1e-12)
			require.InDelta(t, 0.65, math.Quantized, 1e-12)
			require.InDelta(t, 0.1, math.Drop, 1e-12)
			require.Equal(t, 60, math.Items)
			require.Equal(t, "valid", math.Status)
			cs := out.DevQuality.Domains["commonsense"]
			require.Equal(t, 0.0, cs.Drop)
			require.Equal(t, 1.0, cs.Recovery)
			require.NotNil(t, cs.FormatContract, "multiple choice keeps its format contract")
			require.Equal(t, "R5_diagnostic", out.DevQuality.Domains["expert"].Status)
			require.Equal(t, "math", out.DevQuality.WorstDomain)
			require.Equal(t, "fail", out.DevQuality.Tier)
			require.Equal(t, "quality tier fail below B", out.TierReason)
			require.Equal(t, 2, out.DevQuality.ValidDomains)
			require.InDelta(t, 0.05, out.MeanDrop, 1e-9)
			require.Equal(t, "quality_items: campaign=qwen3-tiny suite_version=tiny@1/dev role=bf16", out.DevQuality.ReferenceRows)
			require.True(t, out.Simulated)
			require.Nil(t, out.KL, "no logprobs, no KL")
		})
	}
}

// held is the sentence of a role's rows fewer than its generations.
func held(n, of int, who string) string {
	return fmt.Sprintf("the store holds %d of the %s's %d graded generations", n, who, of)
}

// TestPairKL: sequences both kept give the KL against BF16.
func TestPairKL(t *testing.T) {
	st := tinySuite()
	bf := rowsOf(st, bf16Score)
	lp := [][]events.TopK{{{"a": -0.1, "b": -2.4}, {"c": -0.3, "d": -1.9}}, {{"a": -0.3, "b": -1.4}}}
	res := events.QualityJobResult{SuiteKey: st.Key(), Generations: len(bf), KLItems: []string{"i1", "i2"}, Logprobs: lp}
	ref := res
	out, err := quality.Pair(examples.TaskID, st, events.RunnerJobCompletedData{SubmissionID: "sub1"}, res, ref, rowsOf(st, lossScore), bf)
	require.NoError(t, err)
	require.NotNil(t, out.KL)
	require.Equal(t, 2, out.KL.Sequences)
	require.InDelta(t, 0, out.KL.KL, 1e-9, "the same distributions")
	require.Nil(t, out.GPUSeconds, "a job the runner did not time gives no GPU-seconds")
}

// TestPairCarriesTheJobsGPUSeconds: the completion carries the
// candidate's job's GPU time by phase, never the shared reference's.
func TestPairCarriesTheJobsGPUSeconds(t *testing.T) {
	st := tinySuite()
	bf := rowsOf(st, bf16Score)
	start := func(run string, s float64) events.JobGPUTime {
		return events.JobGPUTime{HeldSeconds: s + 40, ServingSeconds: 30, Starts: []events.EngineStart{
			{Run: run, Seconds: s, LoadSeconds: 0.4 * s, GraphSeconds: 0.25 * s, OtherSeconds: 0.35 * s, LoadLogged: true, GraphLogged: true}}}
	}
	res := events.QualityJobResult{SuiteKey: st.Key(), Generations: len(bf), JobGPUTime: start(events.RoleCandidate, 60)}
	ref := events.QualityJobResult{SuiteKey: st.Key(), Generations: len(bf), JobGPUTime: start(events.RoleBF16, 90)}
	out, err := quality.Pair(examples.TaskID, st, events.RunnerJobCompletedData{SubmissionID: "sub1"}, res, ref, rowsOf(st, lossScore), bf)
	require.NoError(t, err)
	require.NotNil(t, out.GPUSeconds)
	require.Equal(t, record.GPUPhases{Held: 100, Serving: 30, EngineStart: 60, Loading: 24, GraphCapture: 15, OtherStart: 21, Starts: 1}, *out.GPUSeconds)
}

// TestJobs: a kept contract becomes the candidate's job, preceded by the
// BF16 reference's when its rows are not stored yet.
func TestJobs(t *testing.T) {
	st := tinySuite()
	c := &campaign.Campaign{TaskID: examples.TaskID, Engine: &campaign.EngineSpec{Command: examples.EngineCommand, MaxNumSeqs: 64},
		Quality: &campaign.Quality{Sampling: campaign.Sampling{Samples: 1}}}
	art := events.BundleRef{Store: "jetstream", Bucket: bus.ObjectArtifacts, Object: "bundles/x.json", SHA256: strings.Repeat("ab", 32), Files: 1}
	suiteRef := events.BundleRef{Store: "jetstream", Bucket: bus.ObjectArtifacts, Object: "bundles/s.json", SHA256: strings.Repeat("cd", 32), Files: 4}
	reference := events.BundleRef{Store: "jetstream", Bucket: bus.ObjectArtifacts, Object: "bundles/r.json", SHA256: strings.Repeat("ef", 32), Files: 2}
	engineSource := &events.BundleRef{Store: "jetstream", Bucket: bus.ObjectArtifacts, Object: "bundles/e.json", SHA256: strings.Repeat("12", 32), Files: 40}
	honest := events.ContractCompletedData{SubmissionID: "sub1", TaskID: examples.TaskID, Artifact: &art, KVCacheDType: "fp8"}
	patched := honest
	patched.Patch = &record.Patch{Path: "engine.patch", Size: 10, SHA256: strings.Repeat("34", 32), EngineDigest: strings.Repeat("56", 32)}
	for _, tc := range []struct {
		name   string
		in     events.ContractCompletedData
		stored bool
		engine *events.BundleRef
		roles  []string
		// patched: the candidate's job names its patched engine.
		patched bool
	}{
		{name: "the reference's rows are not stored yet", in: honest, stored: false, roles: []string{events.RoleBF16, events.RoleCandidate}},
		{name: "the reference's rows are stored", in: honest, stored: true, roles: []string{events.RoleCandidate}},
		{name: "a patched candidate answers on its patched engine, the reference on the campaign's", in: patched, engine: engineSource,
			roles: []string{events.RoleBF16, events.RoleCandidate}, patched: true},
		{name: "a candidate without a patch runs the campaign's engine", in: honest, engine: engineSource, roles: []string{events.RoleBF16, events.RoleCandidate}},
		{name: "a patch without the campaign's engine source runs the campaign's engine", in: patched, roles: []string{events.RoleBF16, events.RoleCandidate}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			jobs, err := quality.Jobs(tc.in, c, st, suiteRef, reference, tc.stored, tc.engine)
			require.NoError(t, err)
			require.Len(t, jobs, len(tc.roles))
			for i, j := range jobs {
				var p events.QualityJobParams
				require.NoError(t, json.Unmarshal(j.Request.Params, &p))
				require.Equal(t, tc.roles[i], p.Role)
				require.Equal(t, events.JobQuality, j.Request.Kind)
				require.Equal(t, st.Key(), p.SuiteKey)
				require.Equal(t, suiteRef, p.Suite)
				require.Equal(t, examples.TaskID, p.Campaign)
				require.Equal(t, c.Quality.Sampling, p.Sampling)
				switch p.Role {
				case events.RoleBF16:
					require.Equal(t, quality.ReferenceJobID(examples.TaskID, st.Key(), reference.SHA256), j.Request.JobID)
					require.Empty(t, j.Request.SubmissionID, "the reference belongs to no submission")
					require.Equal(t, reference, j.Request.Checkpoint)
					require.Equal(t, "auto", p.KVCacheDType)
					require.Nil(t, p.EngineBundle, "the reference never runs a patched engine")
					require.Empty(t, p.Patch)
				default:
					if tc.patched {
						require.Equal(t, engineSource, p.EngineBundle)
						require.Equal(t, "engine.patch", p.Patch)
						require.Equal(t, patched.Patch.EngineDigest, p.EngineDigest, "the runner builds only the tree the build checked")
					} else {
						require.Nil(t, p.EngineBundle)
						require.Empty(t, p.Patch)
						require.Empty(t, p.EngineDigest)
					}
					require.Equal(t, quality.JobID("sub1"), j.Request.JobID)
					require.Equal(t, "sub1", j.Request.SubmissionID)
					require.Equal(t, art, j.Request.Checkpoint)
					require.Equal(t, "fp8", p.KVCacheDType)
				}
			}
		})
	}
}
