package job

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/lowbarena/lowbarena/domain/audit"
	"github.com/lowbarena/lowbarena/domain/formula"
	"github.com/lowbarena/lowbarena/domain/stats"
	"github.com/lowbarena/lowbarena/domain/suite"
	"github.com/lowbarena/lowbarena/domain/tokenizer"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/services/runner/loadgen"
)

// The audits' defaults (events.AuditJobParams overrides them).
const (
	AuditShare    = audit.DefaultShare
	AuditMinItems = audit.DefaultMinItems
	AuditProbes   = audit.DefaultProbes
)

const (
	// The cache-defeating run: cacheUnique fresh prompts, then
	// cacheDistinct others sent once to prime any cache and
	// cacheRepeats times more, measured; cacheConcurrency at once.
	cacheConcurrency = 8
	cacheUnique      = 32
	cacheDistinct    = 8
	cacheRepeats     = 3
	// worstTokens is how many requests the token count keeps as
	// evidence, the largest excess of claimed over re-tokenised first.
	worstTokens = 5
	// LoadSample is how many of the load's own requests the evidence
	// keeps, drawn at random, for the unpatched engine to answer again;
	// unpatchedConcurrency how many it answers at once.
	LoadSample           = 32
	unpatchedConcurrency = 8
)

// AuditPlan is how an efficiency job gathers the audits' evidence on the
// candidate's engine.
type AuditPlan struct {
	// Pool is the eval items that may be mixed into the load: those asked
	// with a prompt (the load's form) and graded without running code.
	// Probes is the fixed probe set, answered first, one at a time.
	Pool, Probes []suite.Item
	// Tokenizer counts the streamed text; nil when none could be read
	// (TokenizerWhy says why).
	Tokenizer                   *tokenizer.Tokenizer
	TokenizerName, TokenizerWhy string
	// Seed seeds the run: its load prompts, the items drawn and their
	// places, the cache run's prompts.
	Seed     uint64
	Share    float64
	MinItems int
	// SuiteKey names the suite (name@version/split).
	SuiteKey string
	// Unpatched is the campaign's engine without the participant's
	// patch, set only when the submission patches the engine: after the
	// measured run it answers the probes and a sample of the load on the
	// same checkpoint, and the audits compare (events.AuditJobParams).
	Unpatched *events.EngineSpec
}

// NewAuditPlan builds the plan of a job from the campaign's suite and the
// tokenizer found in dirs (the first tokenizer.json there: the
// campaign's reference before the candidate's own).
func NewAuditPlan(s *suite.Suite, p events.AuditJobParams, seed uint64, dirs ...string) *AuditPlan {
	a := &AuditPlan{Seed: seed, Share: p.Share, MinItems: p.MinItems, SuiteKey: p.SuiteKey, Unpatched: p.Unpatched}
	if a.Share <= 0 {
		a.Share = AuditShare
	}
	if a.MinItems <= 0 {
		a.MinItems = AuditMinItems
	}
	for _, d := range s.Sorted() {
		for _, it := range s.Items[d] {
			if it.Prompt != "" && it.Grader != suite.GraderCode {
				a.Pool = append(a.Pool, it)
			}
		}
	}
	// The probe set is fixed: the first items of the pool, domains in
	// turn, the same for every submission of the suite.
	n := p.Probes
	if n <= 0 {
		n = AuditProbes
	}
	byDomain := map[string][]suite.Item{}
	var domains []string
	for _, it := range a.Pool {
		if byDomain[it.Domain] == nil {
			domains = append(domains, it.Domain)
		}
		byDomain[it.Domain] = append(byDomain[it.Domain], it)
	}
	for i := 0; len(a.Probes) < n && len(a.Probes) < len(a.Pool); i++ {
		for _, d := range domains {
			if i < len(byDomain[d]) && len(a.Probes) < n {
				a.Probes = append(a.Probes, byDomain[d][i])
			}
		}
	}
	a.TokenizerWhy = "no tokenizer.json in the campaign's reference or the checkpoint"
	for _, dir := range dirs {
		path := filepath.Join(dir, "tokenizer.json")
		t, err := tokenizer.Load(path)
		if err != nil {
			a.TokenizerWhy = fmt.Sprintf("tokenizer.json not read: %v", err)
			continue
		}
		a.Tokenizer, a.TokenizerWhy = t, ""
		a.TokenizerName = filepath.Base(filepath.Dir(path)) + "/tokenizer.json"
		break
	}
	return a
}

// Mix returns the workloads with their prompts: each workload's load
// built from the pool's items at the workload's length (LoadPrompt;
// drawn from seed, so no two runs share a prompt: the load is the items,
// and any of its requests may be graded), and the eval items of
// the audit placed among them at random, n in all (at least share of the
// measured requests and at least minItems, at most the pool), shared
// between the workloads in proportion to their requests. A nil pool mixes
// no items. The items count in the workloads' figures like any request.
func Mix(wls []loadgen.Workload, pool []suite.Item, seed uint64, share float64, minItems int) []loadgen.Workload {
	out := slices.Clone(wls)
	total := 0
	for _, w := range out {
		total += w.Requests
	}
	n := 0
	if len(pool) > 0 {
		n = min(max(minItems, int(math.Ceil(share*float64(total)))), len(pool))
	}
	r := rand.New(rand.NewPCG(seed, 0x6175646974))
	order := r.Perm(len(pool))[:n]
	counts := apportion(n, out)
	// Each item goes to a workload whose prompts are about its size
	// (at most twice the workload's words), the shortest workloads
	// first, so a long item does not change a workload of short prompts
	// (interactive's few requests least of all); what fits nowhere
	// fills the rest.
	byWords := make([]int, len(out))
	for i := range byWords {
		byWords[i] = i
	}
	slices.SortStableFunc(byWords, func(a, b int) int { return out[a].PromptWords - out[b].PromptWords })
	placed := make([][]suite.Item, len(out))
	used := make([]bool, len(order))
	for pass := range 2 {
		for _, i := range byWords {
			for k, j := range order {
				if len(placed[i]) >= counts[i] {
					break
				}
				it := pool[j]
				if used[k] || pass == 0 && out[i].PromptWords > 0 && len(strings.Fields(it.Prompt)) > 2*out[i].PromptWords {
					continue
				}
				used[k] = true
				placed[i] = append(placed[i], it)
			}
		}
	}
	for i := range out {
		out[i].Seed = seed
		prompts := itemLoad(out[i], pool, seed)
		for _, it := range placed[i] {
			at := r.IntN(len(prompts) + 1)
			prompts = slices.Insert(prompts, at, loadgen.Prompt{Text: it.Prompt, Item: it.ID})
		}
		out[i].Prompts = prompts
	}
	return out
}

// docHeader opens the long-context items' prompts, and every load
// request built from an item.
const docHeader = "Read the document and answer the question.\n\n"

// vaultFact is a fact of the long-context filler.
var vaultFact = regexp.MustCompile(`The access code for the vault of \w+ is \d+\. `)

// itemLoad is a workload's measured load: Requests prompts, each built
// from an item of the pool drawn at random (LoadPrompt), the item named
// as the request's Source. Without a pool, or with no item that fits,
// the load is the workload's generated documents (Workload.LoadPrompts).
func itemLoad(w loadgen.Workload, pool []suite.Item, seed uint64) []loadgen.Prompt {
	if len(pool) == 0 {
		return w.LoadPrompts(w.Warmup, w.Requests)
	}
	r := rand.New(rand.NewPCG(seed, 0x6c6f6164^uint64(len(w.Name))<<32^uint64(w.PromptWords)))
	out := make([]loadgen.Prompt, 0, w.Requests)
	misses := 0
	for len(out) < w.Requests {
		it := pool[r.IntN(len(pool))]
		p, ok := LoadPrompt(r, it, w.PromptWords)
		if !ok {
			if misses++; misses > 8*len(pool) {
				return w.LoadPrompts(w.Warmup, w.Requests)
			}
			continue
		}
		out = append(out, loadgen.Prompt{Text: p, Source: it.ID})
	}
	return out
}

// LoadPrompt builds one request of the load from an item, at the
// workload's length in words (words; 0 keeps the item's): a document of
// the long-context domain's filler with the item's prompt after it, so
// every load request reads alike whatever the item, and its length is
// the workload's, not the item's. A long-context item (a document and
// its question) has its own document cut around its fact, or lengthened
// with filler, instead. The question is the item's, asked last, so the
// answer is graded as the item's. ok is false for an item that does not
// fit (its own text longer than the workload's prompts).
func LoadPrompt(r *rand.Rand, it suite.Item, words int) (string, bool) {
	p := it.Prompt
	if words <= 0 {
		return p, true
	}
	n := len(strings.Fields(p))
	if body, ok := strings.CutPrefix(p, docHeader); ok {
		if q := strings.LastIndex(body, "\n\nQuestion:"); q >= 0 {
			doc, tail := strings.Fields(body[:q]), body[q:]
			target := words - (n - len(doc))
			fact := slices.Index(doc, "access") - 1
			if target < 12 || fact < 0 || fact+9 > len(doc) {
				return "", false
			}
			switch {
			case target < len(doc):
				from := min(max(fact-r.IntN(target-9+1), 0), len(doc)-target)
				doc = doc[from : from+target]
			case target > len(doc):
				doc = append(doc, filler(r, target-len(doc))...)
			}
			return docHeader + strings.Join(doc, " ") + tail, true
		}
	}
	pad := words - n - len(strings.Fields(docHeader))
	if pad < 0 {
		return "", false
	}
	return docHeader + strings.Join(filler(r, pad), " ") + "\n\n" + p, true
}

// filler is n words of the long-context domain's filler (suite.LoadPrompt's
// document, its fact taken out, so nothing in it answers a question).
func filler(r *rand.Rand, n int) []string {
	if n <= 0 {
		return nil
	}
	doc := suite.LoadPrompt(r, n+16)
	doc = strings.TrimPrefix(doc, docHeader)
	if q := strings.LastIndex(doc, "\n\nQuestion:"); q >= 0 {
		doc = doc[:q]
	}
	w := strings.Fields(vaultFact.ReplaceAllString(doc, ""))
	for len(w) < n {
		w = append(w, w...)
	}
	return w[:n]
}

// apportion shares n between the workloads in proportion to their
// requests, by largest remainder (ties to the first).
func apportion(n int, wls []loadgen.Workload) []int {
	out := make([]int, len(wls))
	total := 0
	for _, w := range wls {
		total += w.Requests
	}
	if total == 0 || n == 0 {
		return out
	}
	type rem struct {
		i int
		r float64
	}
	var rems []rem
	given := 0
	for i, w := range wls {
		exact := float64(n) * float64(w.Requests) / float64(total)
		out[i] = int(exact)
		given += out[i]
		rems = append(rems, rem{i, exact - float64(out[i])})
	}
	slices.SortStableFunc(rems, func(a, b rem) int {
		switch {
		case a.r > b.r:
			return -1
		case a.r < b.r:
			return 1
		}
		return 0
	})
	for j := 0; given < n; j++ {
		out[rems[j%len(rems)].i]++
		given++
	}
	return out
}

// auditRun gathers one engine run's evidence.
type auditRun struct {
	plan *AuditPlan
	ev   events.AuditEvidence
	load map[string][]float64 // the load's TPOTs per workload
	tok  []events.TokenRequest
	// loadAnswers are the load's own requests built from items, all of
	// them; evidence keeps a sample.
	loadAnswers []events.AuditAnswer
}

func newAuditRun(p *AuditPlan, checkpoint, served string) *auditRun {
	a := &auditRun{plan: p, load: map[string][]float64{}}
	a.ev = events.AuditEvidence{Seed: p.Seed, SuiteKey: p.SuiteKey, Checkpoint: filepath.Base(filepath.Clean(checkpoint)), ServedModel: served,
		Probes: []events.AuditAnswer{}, Items: []events.AuditAnswer{}, LoadTPOTMs: map[string]float64{},
		Tokens: events.TokenCount{Tokenizer: p.TokenizerName, Why: p.TokenizerWhy}}
	return a
}

func tpotMs(s loadgen.Sample) float64 {
	if s.OutputTokens < 2 {
		return 0
	}
	return float64(s.E2E-s.TTFT) / float64(time.Millisecond) / float64(s.OutputTokens-1)
}

func answerOf(s loadgen.Sample, workload string) events.AuditAnswer {
	chunks := s.Chunks
	if chunks == nil {
		chunks = []string{}
	}
	return events.AuditAnswer{Item: s.Item, Workload: workload, Seq: s.Seq, Chunks: chunks, TPOTMs: tpotMs(s),
		Err: s.Err, ErrMessage: s.ErrMessage}
}

// probes asks the fixed probe set first, one at a time, in the load's
// form.
func (a *auditRun) probes(ctx context.Context, c *loadgen.Client, maxTokens int) error {
	if len(a.plan.Probes) == 0 {
		return nil
	}
	var prompts []loadgen.Prompt
	for _, it := range a.plan.Probes {
		prompts = append(prompts, loadgen.Prompt{Text: it.Prompt, Item: it.ID})
	}
	res, err := c.Run(ctx, loadgen.Workload{Name: "probe", Concurrency: 1, Prompts: prompts, MaxTokens: maxTokens})
	if err != nil {
		return err
	}
	slices.SortFunc(res.Samples, func(x, y loadgen.Sample) int { return x.Seq - y.Seq })
	for _, s := range res.Samples {
		a.ev.Probes = append(a.ev.Probes, answerOf(s, ""))
		a.count("probe", s, maxTokens)
	}
	return nil
}

// workload keeps a measured workload's items and counts its tokens. The
// load's answers are kept in the order the requests were sent (the
// samples come in the order they ended), so the sample evidence draws
// from them is the seed's alone.
func (a *auditRun) workload(w loadgen.Workload, res loadgen.Result) {
	from := len(a.loadAnswers)
	for _, s := range res.Samples {
		if s.Item != "" {
			a.ev.Items = append(a.ev.Items, answerOf(s, w.Name))
		} else if s.Err == "" {
			a.load[w.Name] = append(a.load[w.Name], tpotMs(s))
			if s.Source != "" {
				ans := answerOf(s, w.Name)
				ans.Item = s.Source
				a.loadAnswers = append(a.loadAnswers, ans)
			}
		}
		a.count(w.Name, s, w.MaxTokens)
	}
	slices.SortFunc(a.loadAnswers[from:], func(x, y events.AuditAnswer) int { return x.Seq - y.Seq })
}

// count re-tokenises one request's text beside what the engine claimed.
func (a *auditRun) count(workload string, s loadgen.Sample, maxTokens int) {
	if s.Err != "" || a.plan.Tokenizer == nil {
		return
	}
	claimed := s.Claimed
	if claimed < 0 {
		claimed = len(s.Chunks)
	}
	retok := a.plan.Tokenizer.Count(s.Text)
	t := &a.ev.Tokens
	t.Requests++
	t.Claimed += claimed
	t.Retokenized += retok
	if claimed > maxTokens || retok > maxTokens {
		t.OverMax++
	}
	if claimed < maxTokens || s.Finish == "stop" {
		t.EndedEarly++
	}
	a.tok = append(a.tok, events.TokenRequest{Workload: workload, Seq: s.Seq, Claimed: claimed, Retokenized: retok,
		MaxTokens: maxTokens, Finish: s.Finish})
}

// cache runs one workload shape twice on fresh prompts: every prompt
// unique, then a few prompts repeated after a first sending that primes
// any cache. Every prompt shares the load's leading instruction, so a
// prefix cache serves both runs alike.
func (a *auditRun) cache(ctx context.Context, c *loadgen.Client, shape loadgen.Workload) error {
	base := loadgen.Workload{Name: "cache", Concurrency: cacheConcurrency, PromptWords: shape.PromptWords,
		MaxTokens: shape.MaxTokens}
	uw := base
	uw.Name, uw.Seed = "cache_unique", a.plan.Seed+1
	uw.Prompts = uw.LoadPrompts(0, cacheUnique)
	unique, err := c.Run(ctx, uw)
	if err != nil {
		return err
	}
	rw := base
	rw.Name, rw.Seed = "cache_repeat", a.plan.Seed+2
	distinct := rw.LoadPrompts(0, cacheDistinct)
	prime := rw
	prime.Prompts = distinct
	if _, err := c.Run(ctx, prime); err != nil {
		return err
	}
	var again []loadgen.Prompt
	for range cacheRepeats {
		again = append(again, distinct...)
	}
	r := rand.New(rand.NewPCG(a.plan.Seed, 3))
	r.Shuffle(len(again), func(i, j int) { again[i], again[j] = again[j], again[i] })
	rw.Prompts = again
	repeat, err := c.Run(ctx, rw)
	if err != nil {
		return err
	}
	a.ev.Cache = &events.CacheRuns{Concurrency: cacheConcurrency, Unique: times(unique), Repeat: times(repeat)}
	return nil
}

func times(res loadgen.Result) events.RunTimes {
	var tpot, ttft []float64
	for _, s := range res.Samples {
		tpot = append(tpot, tpotMs(s))
		ttft = append(ttft, float64(s.TTFT)/float64(time.Millisecond))
	}
	return events.RunTimes{Requests: len(res.Samples), TPOTMs: stats.Percentile(tpot, 50), TTFTMs: stats.Percentile(ttft, 50)}
}

// evidence closes the run's evidence.
func (a *auditRun) evidence() *events.AuditEvidence {
	for w, xs := range a.load {
		a.ev.LoadTPOTMs[w] = stats.Percentile(xs, 50)
	}
	slices.SortStableFunc(a.tok, func(x, y events.TokenRequest) int {
		return (y.Claimed - y.Retokenized) - (x.Claimed - x.Retokenized)
	})
	a.ev.Tokens.Worst = a.tok[:min(worstTokens, len(a.tok))]
	// A sample of the load, drawn at random from the seed, in the order
	// the requests were sent.
	r := rand.New(rand.NewPCG(a.plan.Seed, 0x6c6f6164))
	pick := r.Perm(len(a.loadAnswers))[:min(LoadSample, len(a.loadAnswers))]
	slices.Sort(pick)
	for _, i := range pick {
		a.ev.Load = append(a.ev.Load, a.loadAnswers[i])
	}
	return &a.ev
}

// deviceRun is what the device audit reads of a run: the GPU, the
// weights and KV bytes per token the engine reported, and each
// workload's most running sequences, shortest prompt, median time per
// output token and rate.
func deviceRun(out *Served, wls []loadgen.Workload, results map[string]loadgen.Result) *events.AuditDevice {
	d := &events.AuditDevice{GPU: out.GPU, WeightBytes: out.Startup.WeightsGiB * formula.GiB, KVBytesPerToken: out.Startup.KVBytesPerToken}
	for _, w := range wls {
		wr := out.Workloads[w.Name]
		d.WeightBytes = max(d.WeightBytes, wr.Peak.WeightsGiB*formula.GiB)
		if wr.Peak.KVBytesPerToken > 0 {
			d.KVBytesPerToken = wr.Peak.KVBytesPerToken
		}
		minPrompt := 0
		for _, s := range results[w.Name].Samples {
			if s.Err == "" && s.PromptTokens > 0 && (minPrompt == 0 || s.PromptTokens < minPrompt) {
				minPrompt = s.PromptTokens
			}
		}
		d.Workloads = append(d.Workloads, events.AuditDeviceWorkload{Name: w.Name, Running: max(wr.Running, 1), MinPrompt: minPrompt,
			TPOTMs: wr.TPOTP50, Rate: wr.Rate, OutputTokens: wr.Tokens})
	}
	return d
}

// Unpatched starts the campaign's unpatched engine (plan.Unpatched) on
// the candidate's checkpoint after the measured run and has it answer
// the probes (one at a time) and the prompts of the load sampled in ev
// (a few at a time), greedy, each to its end of sequence: the answers
// the audits compare the patched engine's with. wls are the measured
// run's workloads (their prompts). The engine is stopped on every path.
// The run it returns holds the engine's wall time and its start; it
// serves no measured work (ServingSeconds 0).
func (r *Runner) Unpatched(ctx context.Context, l Launch, plan *AuditPlan, wls []loadgen.Workload, ev *events.AuditEvidence) (*events.AuditUnpatched, Served, error) {
	u := &events.AuditUnpatched{Probes: []events.AuditAnswer{}, Load: []events.AuditAnswer{}}
	s, err := r.session(ctx, l, 2, func(ss *session, _ *Served) error {
		client := &loadgen.Client{BaseURL: ss.base, Model: ss.model, IdleTimeout: r.IdleTimeout}
		if len(plan.Probes) > 0 && len(wls) > 0 {
			var prompts []loadgen.Prompt
			for _, it := range plan.Probes {
				prompts = append(prompts, loadgen.Prompt{Text: it.Prompt, Item: it.ID})
			}
			res, err := client.Run(ss.jctx, loadgen.Workload{Name: "unpatched_probe", Concurrency: 1, Prompts: prompts,
				MaxTokens: wls[0].MaxTokens, StopAtEOS: true})
			if err != nil {
				return r.why(ss.ctx, ss.jctx, ss.e, err)
			}
			slices.SortFunc(res.Samples, func(x, y loadgen.Sample) int { return x.Seq - y.Seq })
			for _, s := range res.Samples {
				u.Probes = append(u.Probes, answerOf(s, ""))
			}
		}
		for _, w := range wls {
			var asked []events.AuditAnswer
			var prompts []loadgen.Prompt
			for _, a := range ev.Load {
				if a.Workload == w.Name && a.Seq < len(w.Prompts) {
					asked = append(asked, a)
					prompts = append(prompts, loadgen.Prompt{Text: w.Prompts[a.Seq].Text, Source: a.Item})
				}
			}
			if len(prompts) == 0 {
				continue
			}
			res, err := client.Run(ss.jctx, loadgen.Workload{Name: "unpatched_" + w.Name, Concurrency: unpatchedConcurrency,
				Prompts: prompts, MaxTokens: w.MaxTokens, StopAtEOS: true})
			if err != nil {
				return r.why(ss.ctx, ss.jctx, ss.e, err)
			}
			slices.SortFunc(res.Samples, func(x, y loadgen.Sample) int { return x.Seq - y.Seq })
			for i, s := range res.Samples {
				ans := answerOf(s, w.Name)
				ans.Item, ans.Seq = asked[i].Item, asked[i].Seq
				u.Load = append(u.Load, ans)
			}
		}
		return nil
	})
	return u, s, err
}
