package job

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/lowbarena/lowbarena/domain/formula"
	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/domain/suite"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/services/runner/engine"
	"github.com/lowbarena/lowbarena/services/runner/loadgen"
)

// KindEfficiency is the job kind that measures a checkpoint's speed and
// memory beside its BF16 reference, and replays it under its budget.
const KindEfficiency = events.JobEfficiency

// The wire types of an efficiency job live in package events, shared with
// the efficiency service.
type (
	EfficiencyParams = events.EfficiencyJobParams
	Efficiency       = events.EfficiencyJobResult
	EngineSpec       = events.EngineSpec
	WorkloadSpec     = events.WorkloadSpec
)

// Workloads returns the standard workloads sized by w.
func Workloads(w WorkloadSpec) []loadgen.Workload {
	wls := loadgen.Standard(max(w.RequestsPerSlot, 1), max(w.MaxTokens, 1))
	for i := range wls {
		switch {
		case wls[i].Name == "long_context" && w.LongPromptWords > 0:
			wls[i].PromptWords = w.LongPromptWords
		case wls[i].Name != "long_context" && w.PromptWords > 0:
			wls[i].PromptWords = w.PromptWords
		}
	}
	return wls
}

// ReferenceCache keeps BF16 reference measurements per pod and campaign.
type ReferenceCache interface {
	Get(ctx context.Context, campaign, digest string) (*Served, error)
	Put(ctx context.Context, campaign, digest string, s Served) error
}

// Efficiency measures the candidate beside the reference (measured here
// first unless cached), then replays each workload under its budget. An
// engine failure of the reference or the candidate fails the job; a
// failure under the budget is a failed verdict, not a failed job.
//
// The reference's and the candidate's runs draw their load from their
// own seeds (audit's, or 0 without one), so neither repeats the other's
// prompts; with audit the suite's items are mixed into both alike, so
// their rates compare like with like, and the candidate's run gathers
// the audits' evidence (Candidate.Audit). The budget replays serve the
// candidate's run's workloads again, prompt for prompt, on a restarted
// engine: their rates compare with that run's (an engine that served
// them from a cache across restarts would only help its budget; the
// cache audit is the check on caching).
//
// The candidate's runs (its run, its budget replays and their pairs) run
// the job's patched engine when it has one (Runner.Patched); the
// reference's never does.
//
// The result's JobGPUTime holds every engine start the job made, in
// order (the reused reference's first, Cached), the time the job held
// the GPU (HeldSeconds: this call, start to end, less the time
// AfterCandidate took) and the time its
// engines served the workloads (ServingSeconds), on a failed job as on
// one that completed.
func (r *Runner) Efficiency(ctx context.Context, p EfficiencyParams, candidate, reference string, cache ReferenceCache, audit *AuditPlan) (Efficiency, error) {
	t0 := time.Now()
	var aside time.Duration
	out, err := r.efficiency(ctx, p, candidate, reference, cache, audit, &aside)
	out.HeldSeconds = formula.Round((time.Since(t0) - aside).Seconds(), 3)
	out.ServingSeconds = formula.Round(out.ServingSeconds, 3)
	return out, err
}

func (r *Runner) efficiency(ctx context.Context, p EfficiencyParams, candidate, reference string, cache ReferenceCache, audit *AuditPlan, aside *time.Duration) (Efficiency, error) { //nolint:gocyclo // the job's runs in order: reference, candidate, unpatched, each workload's replays
	out := Efficiency{KVCacheDType: p.KVCacheDType}
	base := Workloads(p.Workload)
	var pool []suite.Item
	seed := uint64(0)
	share, minItems := 0.0, 0
	if audit != nil {
		pool, seed, share, minItems = audit.Pool, audit.Seed, audit.Share, audit.MinItems
	}
	mix := func(k uint64) []loadgen.Workload { return Mix(base, pool, seed+k, share, minItems) }
	wls := mix(0)
	var err error
	if out.StoredBytes, err = safetensorBytes(candidate); err != nil {
		return out, err
	}
	ref, err := cache.Get(ctx, p.Campaign, p.Reference.SHA256)
	if err != nil {
		return out, err
	}
	if ref != nil {
		out.Reference, out.Cached = *ref, true
		out.Add(*ref, true)
	} else {
		s, err := r.Serve(ctx, Launch{Run: "reference", Keep: true, Command: p.Engine.Command, Checkpoint: reference,
			KVCacheDType: "auto", MaxNumSeqs: p.Engine.MaxNumSeqs, MaxModelLen: p.Engine.MaxModelLen}, mix(1000))
		out.Seconds += s.Seconds
		out.Add(s, false)
		if err != nil {
			return out, fmt.Errorf("the BF16 reference: %w", err)
		}
		if err := cache.Put(ctx, p.Campaign, p.Reference.SHA256, s); err != nil {
			return out, err
		}
		out.Reference = s
	}
	kv := p.KVCacheDType
	if kv == "" {
		kv = "auto"
	}
	cand, err := r.Serve(ctx, r.Candidate(Launch{Run: "candidate", Keep: true, Command: p.Engine.Command, Checkpoint: candidate,
		KVCacheDType: kv, MaxNumSeqs: p.Engine.MaxNumSeqs, MaxModelLen: p.Engine.MaxModelLen, Audit: audit}), wls)
	out.Seconds += cand.Seconds
	out.Add(cand, false)
	if err != nil {
		return out, err
	}
	// The candidate's engine is kept (Keep): what else it serves now (the
	// submission's quality job) pays no start, and its time is not this
	// job's.
	if r.AfterCandidate != nil && r.Keep.Kept() != "" {
		t := time.Now()
		r.AfterCandidate(ctx)
		*aside += time.Since(t)
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
	}
	// A patched engine is compared with the campaign's unpatched one on
	// the same checkpoint: the probes and a sample of the load answered
	// again (an honest submission, unpatched, pays no engine start).
	if audit != nil && audit.Unpatched != nil && cand.Audit != nil {
		u, us, err := r.Unpatched(ctx, Launch{Run: "unpatched", Command: audit.Unpatched.Command, Checkpoint: candidate,
			KVCacheDType: kv, MaxNumSeqs: p.Engine.MaxNumSeqs, MaxModelLen: p.Engine.MaxModelLen}, audit, wls, cand.Audit)
		out.Seconds += us.Seconds
		out.Add(us, false)
		if err != nil {
			return out, fmt.Errorf("the campaign's unpatched engine: %w", err)
		}
		cand.Audit.Unpatched = u
	}
	out.Candidate, out.GPU, out.Simulated = cand, cand.GPU, cand.Simulated
	if p.BudgetFactor <= 0 {
		return out, nil
	}
	out.Budget, out.HardCap = map[string]record.Budget{}, true
	// Each replay serves the workload exactly as the candidate's run did
	// (its load and items in the same places, on a restarted engine), so
	// its rate compares with that run's.
	plans := make([]replayLaunch, 0, len(wls))
	for _, w := range wls {
		wr := cand.Workloads[w.Name]
		b := formula.BudgetFor(wr.Peak.PeakGiB, p.BudgetFactor)
		terms := replayTerms(b, wr, cand, p.Engine.MaxModelLen)
		if r.Log != nil {
			r.Log.Info("budget replay", "workload", w.Name, "budget_gib", b.BudgetGiB, "cap_gib", b.CapGiB, "max_model_len", terms.MaxModelLen,
				"kv_cache_bytes", terms.KVCacheBytes, "mem_fraction_static", terms.MemFractionStatic, "pool_raised_to_one_request", terms.Floored)
		}
		key := fmt.Sprintf("%s@%g", w.Name, p.BudgetFactor)
		plans = append(plans, replayLaunch{key: key, w: w, b: b, l: r.Candidate(Launch{Run: key, Command: p.Engine.Command, Checkpoint: candidate,
			KVCacheDType: kv, MaxNumSeqs: p.Engine.MaxNumSeqs, GPUMemoryGiB: b.BudgetGiB, CapGiB: b.CapGiB,
			MaxModelLen: terms.MaxModelLen, KVCacheBytes: terms.KVCacheBytes, MemFractionStatic: terms.MemFractionStatic})})
	}
	// Workloads whose budgets come to the same engine setting share one
	// restart for their first replays (sharedReplays); a workload the
	// shared engine did not serve whole is replayed on its own.
	shared, err := r.sharedReplays(ctx, plans, &out)
	if err != nil {
		return out, err
	}
	for _, pl := range plans {
		w, b, key := pl.w, pl.b, pl.key
		wr := cand.Workloads[w.Name]
		verdict := func(rs Served, err error) (record.Budget, error) {
			v := record.Budget{BudgetGiB: b.BudgetGiB, CapGiB: b.CapGiB, Factor: b.Factor, FullRunning: float64(w.Concurrency)}
			switch {
			case ctx.Err() != nil:
				return v, ctx.Err()
			case err != nil && engine.AsFailure(err) == nil && loadgen.AsError(err) == nil:
				return v, err // not the engine's doing: retry the job
			case err == nil:
				got := rs.Workloads[w.Name]
				rate := got.Rate
				v.Running, v.Value = float64(got.Running), &rate
			default:
				if r.Log != nil {
					r.Log.Info("engine failed under its budget", "workload", w.Name, "budget_gib", b.BudgetGiB, "err", err)
				}
			}
			rp := formula.Replay{Running: v.Running, Full: v.FullRunning, Rate: v.Value}
			v.Healthy = rp.Healthy(wr.Rate)
			return v, nil
		}
		first, sharedRun := shared[key]
		replay := func() (record.Budget, error) {
			if sharedRun {
				sharedRun = false
				return verdict(first, nil)
			}
			rs, err := r.Serve(ctx, pl.l, []loadgen.Workload{w})
			out.Seconds += rs.Seconds
			out.Add(rs, false)
			return verdict(rs, err)
		}
		// The unconstrained engine on this workload again, for an
		// interleaved pair: its rate.
		pair := 1
		again := func() (float64, error) {
			pair++
			s, err := r.Serve(ctx, r.Candidate(Launch{Run: fmt.Sprintf("candidate#%d", pair), Command: p.Engine.Command, Checkpoint: candidate,
				KVCacheDType: kv, MaxNumSeqs: p.Engine.MaxNumSeqs, MaxModelLen: p.Engine.MaxModelLen}), []loadgen.Workload{w})
			out.Seconds += s.Seconds
			out.Add(s, false)
			if err != nil {
				return 0, fmt.Errorf("the candidate, again on %s beside its budget replay: %w", w.Name, err)
			}
			return s.Workloads[w.Name].Rate, nil
		}
		v, err := replayBudget(replay, again, wr.Rate)
		if err != nil {
			return out, err
		}
		if r.Log != nil && v.Attempts > 1 {
			r.Log.Info("budget replay judged over interleaved pairs", "workload", w.Name, "pairs", v.Attempts, "kept_ratio", v.KeptRatio,
				"kept_upper", v.KeptUpper, "healthy", v.Healthy)
		}
		out.Budget[key] = v
	}
	return out, nil
}

// replayLaunch is one workload's budget replay: its key (the budget's
// name in the record), the workload, its budget and its engine's launch.
type replayLaunch struct {
	key string
	w   loadgen.Workload
	b   formula.Budget
	l   Launch
}

// sharedReplays serves together, on one engine start, the first replays
// of the workloads whose replays start the same engine (every setting of
// the launch equal, launchKey), in the order given, and returns each
// such replay's run by its key. A workload the shared engine did not
// serve whole (it failed, went over its cap, a stream broke while or
// before it was served) is left out, to be replayed on its own: its
// verdict is then the one a start of its own gives. Workloads with a
// setting of their own are left out too. The shared runs' time and
// start go to out. An error is returned only when it is not the engine's
// or the stream's (the job is retried).
func (r *Runner) sharedReplays(ctx context.Context, replays []replayLaunch, out *Efficiency) (map[string]Served, error) {
	groups := map[string][]replayLaunch{}
	var order []string
	for _, rp := range replays {
		k := launchKey(rp.l, r.params(rp.l))
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], rp)
	}
	served := map[string]Served{}
	for _, k := range order {
		g := groups[k]
		if len(g) < 2 {
			continue
		}
		l := g[0].l
		names := make([]string, 0, len(g))
		wls := make([]loadgen.Workload, 0, len(g))
		for _, rp := range g {
			names = append(names, rp.key)
			wls = append(wls, rp.w)
		}
		l.Run = strings.Join(names, "+")
		if r.Log != nil {
			r.Log.Info("budget replays share one engine start: their budgets come to the same engine setting", "replays", l.Run)
		}
		rs, err := r.Serve(ctx, l, wls)
		out.Seconds += rs.Seconds
		out.Add(rs, false)
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case err != nil && engine.AsFailure(err) == nil && loadgen.AsError(err) == nil:
			return nil, err
		}
		for _, rp := range g {
			wr, ok := rs.Workloads[rp.w.Name]
			if !ok {
				break // this one and those after it: on their own
			}
			one := rs
			one.Workloads = map[string]WorkloadResult{rp.w.Name: wr}
			served[rp.key] = one
		}
	}
	return served, nil
}

// replayTerms sizes a workload's budget replay in the engines' own terms
// (formula.SizeReplay) from the candidate's run of it: its peak's
// weights and other memory, its KV bytes per token, its longest request
// (else the campaign's context), and the memory its device had free.
func replayTerms(b formula.Budget, wr WorkloadResult, cand Served, campaignLen int) formula.ReplayTerms {
	perToken := wr.Peak.KVBytesPerToken
	if perToken <= 0 {
		perToken = cand.Startup.KVBytesPerToken
	}
	ctxTokens := wr.ContextTokens
	if ctxTokens <= 0 {
		ctxTokens = campaignLen
	}
	return formula.SizeReplay(formula.ReplayInput{BudgetGiB: b.BudgetGiB, WeightsGiB: wr.Peak.WeightsGiB, OtherGiB: wr.Peak.OtherGiB,
		KVBytesPerToken: perToken, ContextTokens: ctxTokens, FreeGiB: cand.DeviceTotalGiB - cand.BaselineGiB})
}

// replayBudget runs a workload's budget replay and judges it. A replay
// that held every request at once and kept 90% of the candidate's rate
// (rate) is healthy; one that did not hold them, or failed, is not, on
// its one replay: memory, unlike speed, does not come and go with the
// pod's load. One that held them but fell below 90% is judged over
// interleaved pairs (formula.KeepPairs): the unconstrained engine on the
// workload again (again, its rate) and then the replay again, each pair
// side by side, so a moment of noise on the pod (another process on its
// CPU, a slow clock) falls on both runs of a pair or on one pair among
// several, while an engine that really slows under its cap does so in
// every pair. The rate is kept unless the pairs' bound says otherwise
// (formula.KeptBound); a later replay that does not hold its requests,
// or fails, is not healthy. Value and Running stay the first replay's;
// Attempts counts the replays, KeptRatio and KeptUpper the pairs'
// verdict.
func replayBudget(replay func() (record.Budget, error), again func() (float64, error), rate float64) (record.Budget, error) {
	first, err := replay()
	if err != nil {
		return first, err
	}
	first.Attempts = 1
	rp := formula.Replay{Running: first.Running, Full: first.FullRunning, Rate: first.Value}
	if first.Healthy || !rp.Held() || first.Value == nil {
		return first, nil
	}
	ratios := []float64{*first.Value / rate}
	for len(ratios) < formula.KeepPairs {
		base, err := again()
		if err != nil {
			return first, err
		}
		next, err := replay()
		if err != nil {
			return first, err
		}
		first.Attempts++
		if !(formula.Replay{Running: next.Running, Full: next.FullRunning, Rate: next.Value}).Held() || next.Value == nil {
			first.Healthy = false
			return first, nil
		}
		ratios = append(ratios, *next.Value/base)
	}
	ratio, upper, ok := formula.KeptBound(ratios)
	if !ok {
		return first, nil
	}
	first.KeptRatio, first.KeptUpper = formula.Round(ratio, 4), formula.Round(upper, 4)
	first.Healthy = formula.Replay{Running: first.Running, Full: first.FullRunning, Rate: first.Value, Upper: first.KeptUpper}.Healthy(rate)
	return first, nil
}

// safetensorBytes is the size of the *.safetensors files of a checkpoint.
func safetensorBytes(dir string) (int64, error) {
	matches, err := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	if err != nil {
		return 0, fmt.Errorf("job: %w", err)
	}
	var n int64
	for _, m := range matches {
		fi, err := os.Stat(m)
		if err != nil {
			return 0, fmt.Errorf("job: %w", err)
		}
		n += fi.Size()
	}
	return n, nil
}
