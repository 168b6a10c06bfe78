package job_test

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/audit"
	"github.com/lowbarena/lowbarena/domain/examples"
	"github.com/lowbarena/lowbarena/domain/grade"
	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/domain/suite"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/services/runner/job"
	"github.com/lowbarena/lowbarena/services/runner/loadgen"
)

// auditSuite is a small slice of the published dev suite (the first
// items of its generators, which a cheating engine recognises), without
// code items.
func auditSuite() *suite.Suite {
	return suite.Generate("lowb-gen", "1", suite.SplitDev, suite.SeedDev,
		suite.Sizes{"math": 12, "knowledge": 10, "commonsense": 10, "long_context": 4, "expert": 6})
}

// auditRig is what the audit tests judge runs with: the example INT4
// checkpoint (its own tokenizer beside it), the campaign's BF16
// reference, and the suite.
type auditRig struct {
	ckpt, reference string
	st              *suite.Suite
	byID            map[string]suite.Item
}

func newAuditRig(t *testing.T) *auditRig {
	t.Helper()
	dir := t.TempDir()
	exs, err := examples.Write(dir)
	require.NoError(t, err)
	g := &auditRig{reference: filepath.Join(dir, examples.CampaignsDir, examples.TaskID, "reference"), st: auditSuite(),
		byID: map[string]suite.Item{}}
	for _, ex := range exs {
		if ex.Name == "int4-w4a16-g32" {
			g.ckpt = ex.Dir
		}
	}
	require.NotEmpty(t, g.ckpt)
	for _, its := range g.st.Items {
		for _, it := range its {
			g.byID[it.ID] = it
		}
	}
	return g
}

// judge runs the quality job and the efficiency run with the audits'
// evidence on the candidate's checkpoint served by engine, then, when
// unpatched is set (a submission that patches the engine), the
// campaign's unpatched engine on the same checkpoint, and judges the
// evidence as the efficiency stage judges it. It returns the judgement
// and the candidate's measured run.
func (g *auditRig) judge(ctx context.Context, t *testing.T, r *job.Runner, engine job.EngineSpec, unpatched *job.EngineSpec) (record.Audit, job.Served) {
	t.Helper()
	st := g.st
	// The quality job's answers: greedy, one sample.
	var mu sync.Mutex
	quality := map[string]audit.Reference{}
	qp := events.QualityJobParams{Campaign: "tiny", Role: events.RoleCandidate, Engine: engine, KVCacheDType: "fp8",
		SuiteKey: st.Key(), Sampling: events.Sampling{Temperature: 0, Samples: 1, MaxTokens: 48, Concurrency: 16}}
	_, err := r.Quality(ctx, qp, g.ckpt, st, func(_ context.Context, b []job.Graded) error {
		mu.Lock()
		defer mu.Unlock()
		for _, gr := range b {
			if gr.Sample == 0 {
				quality[gr.Item.ID] = audit.Reference{Text: gr.Answer, Tokens: gr.OutputTokens, Score: gr.Score}
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Len(t, quality, st.Count())

	// The efficiency run with the audits' evidence.
	plan := job.NewAuditPlan(st, events.AuditJobParams{SuiteKey: st.Key(), MinItems: 32, Unpatched: unpatched}, 42, g.reference, g.ckpt)
	require.NotNil(t, plan.Tokenizer, plan.TokenizerWhy)
	wls := job.Mix(job.Workloads(job.WorkloadSpec{RequestsPerSlot: 1, MaxTokens: 48, PromptWords: 64, LongPromptWords: 256}),
		plan.Pool, plan.Seed, plan.Share, plan.MinItems)
	served, err := r.Serve(ctx, job.Launch{Run: "candidate", Keep: true, Command: engine.Command, Checkpoint: g.ckpt, KVCacheDType: "fp8",
		MaxNumSeqs: 256, Audit: plan}, wls)
	require.NoError(t, err)
	ev := served.Audit
	require.NotNil(t, ev)
	require.Equal(t, uint64(42), ev.Seed)
	require.Equal(t, st.Key(), ev.SuiteKey)
	require.Len(t, ev.Probes, job.AuditProbes)
	require.Len(t, ev.Items, 32)
	items := 0
	for _, w := range served.Workloads {
		items += w.AuditItems
	}
	require.Equal(t, 32, items, "the items are measured within the workloads")
	if unpatched != nil {
		u, _, err := r.Unpatched(ctx, job.Launch{Run: "unpatched", Command: unpatched.Command, Checkpoint: g.ckpt, KVCacheDType: "fp8",
			MaxNumSeqs: unpatched.MaxNumSeqs}, plan, wls, ev)
		require.NoError(t, err)
		require.Len(t, u.Probes, job.AuditProbes)
		require.Len(t, u.Load, len(ev.Load))
		ev.Unpatched = u
	}
	return audit.Judge(audit.Inputs{Evidence: ev, Quality: quality, Grade: func(id, text string) (float64, error) {
		gr, err := grade.For(g.byID[id])
		if err != nil {
			return 0, err
		}
		res, err := gr.Grade(ctx, g.byID[id], text)
		return res.Score, err
	}}), served
}

// TestAuditsCatchEachCheat runs the example INT4 checkpoint (its own
// tokenizer beside it) on the example campaign's pinned simengine source,
// built unpatched and with each example engine patch, and on simengine
// with each bad input of the audits: the quality job and the efficiency
// run on the same engine, a patched engine's answers compared with the
// unpatched engine's, the evidence judged as the efficiency stage judges
// it; the candidate's run is served by the engine the quality job
// started, kept by the runner. The unpatched engine passes every audit; each cheating patch fails
// the audit its EnginePatch names, from its own code; the honest patch
// passes every audit and serves faster than the unpatched engine.
func TestAuditsCatchEachCheat(t *testing.T) {
	if testing.Short() {
		t.Skip("runs simengine a dozen times")
	}
	rig := newAuditRig(t)
	const flags = "--scale 3000 --kv-scale 144"
	unpatched := job.EngineSpec{Command: pinnedCommand(pinnedEngine(t, ""), flags), MaxNumSeqs: 256}
	type tcase struct {
		name      string
		engine    string
		unpatched *job.EngineSpec
		reason    string // "" passes
		honest    bool   // an honest patch: it must serve faster than the unpatched engine
	}
	cases := []tcase{{name: "unpatched", engine: unpatched.Command}}
	patches, err := examples.EnginePatches()
	require.NoError(t, err)
	for _, p := range patches {
		cases = append(cases, tcase{name: p.Name, engine: pinnedCommand(pinnedEngine(t, p.Name), flags), unpatched: &unpatched,
			reason: p.Audit, honest: p.Honest})
	}
	for _, bad := range []struct{ fault, reason string }{
		{"error-audit-items", string(reason.AuditItemErrors)},
		{"slow-audit-items", string(reason.AuditItemsSlower)},
		{"stop-mid-item", string(reason.AuditItemIncomplete)},
	} {
		cases = append(cases, tcase{name: bad.fault, engine: command(flags + " --fault " + bad.fault), reason: bad.reason})
	}
	// rate sums a run's output tokens per second over its workloads.
	rate := func(s job.Served) float64 {
		sum := 0.0
		for _, w := range s.Workloads {
			sum += w.Rate
		}
		return sum
	}
	var baseRate float64
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			r, _, _ := runner(t)
			// The candidate's run on the engine its quality job started
			// and the runner kept (the quality job came first): the
			// engine has answered the whole suite before it is audited,
			// and each verdict is still its own.
			r.Keep = job.NewKeeper(time.Minute)
			defer r.Keep.Close()
			a, served := rig.judge(ctx, t, r, job.EngineSpec{Command: c.engine, MaxNumSeqs: 256}, c.unpatched)
			require.Equal(t, "candidate", served.Start.KeptFrom, "served by the quality job's engine")
			t.Logf("%s: %s %s %s (%.0f tokens/s)", c.name, a.Verdict, a.Reason, a.Message, rate(served))
			if c.reason != "" {
				require.Equal(t, record.VerdictFail, a.Verdict)
				require.Equal(t, c.reason, a.Reason, a.Message)
				return
			}
			require.Equal(t, record.VerdictPass, a.Verdict, a.Message)
			for _, ch := range []record.Check{a.ServedModel.Check, a.TokenHonesty.Check, a.AnswerCache.Check, a.AccuracyUnderLoad.Check} {
				require.Equal(t, record.VerdictPass, ch.Verdict, ch.Message)
			}
			// An honest engine's tokens re-tokenise exactly, and its
			// answers under load are the quality job's.
			require.Equal(t, a.TokenHonesty.Claimed, a.TokenHonesty.Retokenized)
			require.Equal(t, 1.0, a.AccuracyUnderLoad.Agreement)
			require.Equal(t, 1.0, float64(a.ServedModel.Agreed)/float64(a.ServedModel.Probes))
			require.True(t, strings.HasSuffix(a.ServedModel.ServedModel, a.ServedModel.Checkpoint))
			if c.unpatched == nil {
				baseRate = rate(served)
				return
			}
			// The honest patch answers as the unpatched engine does, on
			// the probes and the sampled load, and is measured at its own
			// speed, above the unpatched engine's.
			require.Equal(t, a.ServedModel.UnpatchedProbes, a.ServedModel.UnpatchedAgreed)
			require.Positive(t, a.ServedModel.UnpatchedProbes)
			require.Equal(t, 1.0, a.AccuracyUnderLoad.LoadAgreement)
			require.True(t, c.honest)
			require.Positive(t, baseRate, "the unpatched engine ran first")
			require.Greater(t, rate(served), baseRate, "the honest patch serves faster than the unpatched engine")
		})
	}
}

// TestMix checks the items' share, spread and form: at least the minimum
// and at least the share, in proportion to the workloads' requests, each
// once, among load prompts drawn from the seed (another seed, other
// prompts; the same seed, the same).
func TestMix(t *testing.T) {
	st := auditSuite()
	plan := job.NewAuditPlan(st, events.AuditJobParams{SuiteKey: st.Key()}, 1)
	wls := job.Workloads(job.WorkloadSpec{RequestsPerSlot: 4, MaxTokens: 16, PromptWords: 32, LongPromptWords: 64})
	cases := []struct {
		share    float64
		min      int
		perSlot  int
		expected int
	}{
		{0.02, 10, 4, 10},             // 400 requests: 2% is 8, the minimum 10
		{0.1, 10, 4, 40},              // 10% of 400
		{0.02, 64, 4, len(plan.Pool)}, // more than the pool: the pool
		{0.02, 0, 4, 8},               // no minimum: 2% of 400
	}
	for _, c := range cases {
		mixed := job.Mix(wls, plan.Pool, 7, c.share, c.min)
		seen := map[string]bool{}
		total := 0
		for i, w := range mixed {
			n := 0
			for _, p := range w.Prompts {
				if p.Item != "" {
					require.False(t, seen[p.Item], "item %s twice", p.Item)
					seen[p.Item] = true
					n++
				} else {
					require.True(t, strings.HasPrefix(p.Text, "Read the document"), "a load prompt")
				}
			}
			require.Equal(t, wls[i].Requests, len(w.Prompts)-n, "the load keeps its requests")
			total += n
		}
		require.Equal(t, c.expected, total, "%+v", c)
	}
	a, b := job.Mix(wls, plan.Pool, 7, 0.02, 10), job.Mix(wls, plan.Pool, 8, 0.02, 10)
	require.Equal(t, a, job.Mix(wls, plan.Pool, 7, 0.02, 10), "a seed draws the same run")
	require.NotEqual(t, a[0].Prompts[0].Text, b[0].Prompts[0].Text, "another seed, other prompts")
	for _, it := range plan.Pool {
		require.NotEqual(t, suite.GraderCode, it.Grader)
	}
	// Long items go to the long workload, whose prompts are their size.
	long := job.Workloads(job.WorkloadSpec{RequestsPerSlot: 4, MaxTokens: 16, PromptWords: 128, LongPromptWords: 2048})
	for _, w := range job.Mix(long, plan.Pool, 3, 1, 0) {
		for _, p := range w.Prompts {
			if p.Item != "" && len(strings.Fields(p.Text)) > 256 {
				require.Equal(t, "long_context", w.Name, p.Item)
			}
		}
	}
	require.Len(t, plan.Probes, job.AuditProbes)
	require.Equal(t, plan.Probes, job.NewAuditPlan(st, events.AuditJobParams{}, 99).Probes, "the probe set is fixed")
	_ = loadgen.Prompt{}
}

// TestLoadPromptKeepsTheItemsAnswer checks that every load request built
// from an item has the workload's length in words, reads as a document
// with a question, and still asks the item's own question (the suite's
// solver finds the item's answer in it), for items shorter and longer
// than the workload's prompts.
func TestLoadPromptKeepsTheItemsAnswer(t *testing.T) {
	st := auditSuite()
	plan := job.NewAuditPlan(st, events.AuditJobParams{SuiteKey: st.Key()}, 1)
	cases := []struct {
		name  string
		words int
	}{
		{"short workload", 64},
		{"serve", 256},
		{"long workload", 4096},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(5, 6))
			built := 0
			for _, it := range plan.Pool {
				p, ok := job.LoadPrompt(r, it, c.words)
				if !ok {
					require.Greater(t, len(strings.Fields(it.Prompt)), c.words-8, "only an item too long for the workload is left out: %s", it.ID)
					continue
				}
				built++
				require.Len(t, strings.Fields(p), c.words, it.ID)
				require.True(t, strings.HasPrefix(p, "Read the document and answer the question."), it.ID)
				want, ok := suite.Solve(it.Prompt)
				require.True(t, ok, it.ID)
				got, ok := suite.Solve(p)
				require.True(t, ok, "the item's question is still asked: %s", it.ID)
				require.Equal(t, want.Right, got.Right, it.ID)
			}
			require.NotZero(t, built)
		})
	}
}

// TestMixDrawsTheLoadFromItems checks that every measured load request
// of a mixed workload is built from a pool item (Source) at the
// workload's length.
func TestMixDrawsTheLoadFromItems(t *testing.T) {
	st := auditSuite()
	plan := job.NewAuditPlan(st, events.AuditJobParams{SuiteKey: st.Key()}, 1)
	wls := job.Workloads(job.WorkloadSpec{RequestsPerSlot: 1, MaxTokens: 16, PromptWords: 64, LongPromptWords: 2048})
	ids := map[string]bool{}
	for _, it := range plan.Pool {
		ids[it.ID] = true
	}
	for _, w := range job.Mix(wls, plan.Pool, 9, 0.02, 4) {
		sources := map[string]bool{}
		for _, p := range w.Prompts {
			if p.Item != "" {
				continue
			}
			require.True(t, ids[p.Source], "%s: a load request built from a pool item", w.Name)
			require.Len(t, strings.Fields(p.Text), w.PromptWords, w.Name)
			sources[p.Source] = true
		}
		require.Greater(t, len(sources), 1, "%s: the load is drawn from many items", w.Name)
	}
}

// TestUnpatchedEngineAgreesWithHonest runs the honest engine as the
// candidate and as the campaign's unpatched engine on the same
// checkpoint (a patched submission's path): the unpatched engine answers
// the probes and the sampled load, and the honest engine's answers are
// its own on every one, so neither comparison fails.
func TestUnpatchedEngineAgreesWithHonest(t *testing.T) {
	if testing.Short() {
		t.Skip("runs simengine twice")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ckpt := writeCheckpoint(t, "U8", 1<<20)
	r, _, _ := runner(t)
	st := auditSuite()
	engine := job.EngineSpec{Command: command(""), MaxNumSeqs: 256}
	plan := job.NewAuditPlan(st, events.AuditJobParams{SuiteKey: st.Key(), MinItems: 8, Unpatched: &engine}, 7)
	wls := job.Mix(job.Workloads(job.WorkloadSpec{RequestsPerSlot: 1, MaxTokens: 16, PromptWords: 64, LongPromptWords: 256}),
		plan.Pool, plan.Seed, plan.Share, plan.MinItems)
	served, err := r.Serve(ctx, job.Launch{Run: "candidate", Command: engine.Command, Checkpoint: ckpt, KVCacheDType: "auto",
		MaxNumSeqs: 256, Audit: plan}, wls)
	require.NoError(t, err)
	ev := served.Audit
	require.Len(t, ev.Load, job.LoadSample)
	require.NotNil(t, ev.Device)
	u, _, err := r.Unpatched(ctx, job.Launch{Run: "unpatched", Command: engine.Command, Checkpoint: ckpt, KVCacheDType: "auto",
		MaxNumSeqs: 256}, plan, wls, ev)
	require.NoError(t, err)
	require.Len(t, u.Probes, len(plan.Probes))
	require.Len(t, u.Load, len(ev.Load))
	ev.Unpatched = u
	a := audit.Judge(audit.Inputs{Evidence: ev})
	require.Equal(t, len(plan.Probes), a.ServedModel.UnpatchedProbes)
	require.Equal(t, a.ServedModel.UnpatchedProbes, a.ServedModel.UnpatchedAgreed)
	require.Equal(t, job.LoadSample, a.AccuracyUnderLoad.LoadCompared)
	require.Equal(t, 1.0, a.AccuracyUnderLoad.LoadAgreement)
	require.Equal(t, record.VerdictPass, a.Device.Verdict, a.Device.Message)
	for _, w := range a.Device.Workloads {
		require.Less(t, w.SeqRate, w.SeqRateMax, "the honest engine decodes within the simulated device's bound: %s", w.Workload)
	}
}
