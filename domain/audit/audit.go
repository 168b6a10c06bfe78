// Package audit judges whether the engine that served a checkpoint
// behaved the same when it was measured, from the evidence the runner
// gathered beside the efficiency measurement (Evidence) and the quality
// job's answers to the same items. Each audit follows one of MLPerf
// Inference's audit tests:
//
//   - served_model (the served model is the checked one): /v1/models
//     names the checkpoint the engine was started on, and its first
//     answers, one at a time at temperature 0, to a fixed probe set are
//     the quality job's answers (served_model_mismatch);
//   - token_honesty (TEST06, output-token consistency): the streamed
//     text re-tokenised with the campaign's tokenizer holds the tokens
//     the engine claims, within TokenTolerance, and no request went past
//     max_tokens or ended before it under ignore_eos
//     (token_count_dishonest);
//   - answer_cache (TEST04, a cache-defeating run): repeated prompts are
//     not decoded much faster than unique ones (answer_cache_suspected);
//   - accuracy_under_load (TEST01, accuracy verified in performance
//     mode): the eval items mixed into the load are answered as well as
//     in the quality job (accuracy_differs_under_load), and the engine
//     neither fails them (audit_item_errors), nor cuts them
//     (audit_item_incomplete), nor answers them slower than the load
//     (audit_items_slower).
//
// Judge is a pure function: the efficiency stage calls it once both
// outcomes are in, and the verdicts travel in its outcome, so a rescore
// keeps them.
package audit

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/domain/stats"
	"github.com/lowbarena/lowbarena/events/reason"
)

// The thresholds, each argued in docs/developers/engine-audits.md.
const (
	// Z is the one-sided bound of the quality tiers: an accuracy under
	// load lower than the quality job's by more than Z paired standard
	// errors fails.
	Z = stats.Z
	// SlowLimit: items decoded at more than 1.5 times the load's time per
	// token, in the same workloads and batches, are told apart.
	SlowLimit = 1.5
	// SlowFloorMs: and only when they take at least 1 ms more per token
	// than the load (the median over items of the difference). Below
	// that the ratio is the machine's scheduling noise, not a second
	// path: a replay at 50 us a token jitters past 1.5 on a busy host,
	// while a path kept for the items costs whole milliseconds a token.
	SlowFloorMs = 1.0
	// CacheLimit: repeats decoded in less than half the time per token of
	// unique prompts come from an answer cache (a prefix cache saves
	// prefill, never decode).
	CacheLimit = 0.5
	// TokenTolerance: claimed tokens may exceed the re-tokenised count by
	// 5% (an engine's detokenised text re-tokenises to at most as many
	// tokens as it generated, and a few percent fewer where its tokens
	// were not the tokenizer's own split).
	TokenTolerance = 0.05
	// MinProbeAgreement: at least 3 of 4 probes answered as in the
	// quality job (greedy decoding of one model at batch 1 and batch 32
	// differs on a few tokens at most).
	MinProbeAgreement = 0.75
	// MinLoadAgreement: at least 3 of 4 of the load's sampled requests
	// answered as the campaign's unpatched engine answers the same
	// prompts on the same checkpoint (greedy decoding of one model
	// under load and at a small batch differs on a few tokens at most).
	MinLoadAgreement = 0.75
)

// How much evidence an efficiency job gathers by default.
const (
	// DefaultShare and DefaultMinItems size the eval items mixed into the
	// load: at least 2% of the measured requests and at least 64 items
	// (enough for a paired standard error to mean something).
	DefaultShare    = 0.02
	DefaultMinItems = 64
	// DefaultProbes is the size of the fixed probe set answered first.
	DefaultProbes = 8
)

// The MLPerf audit tests the audits follow.
const (
	mlperfAccuracy = "TEST01"
	mlperfCache    = "TEST04"
	mlperfTokens   = "TEST06"
)

// Reference is the quality job's first sample of one item: its text,
// its completion tokens and its score.
type Reference struct {
	Text   string
	Tokens int
	Score  float64
}

// Grader grades an answer to the item of an id, 0 to 1.
type Grader func(item, answer string) (float64, error)

// Inputs are what Judge reads.
type Inputs struct {
	// Evidence is the candidate's run; nil when the job gathered none.
	Evidence *Evidence
	// Quality is the quality job's first samples by item id; nil when
	// there is no quality outcome to compare with (QualityWhy says why).
	Quality    map[string]Reference
	QualityWhy string
	// Grade grades an answer under load that is not the quality job's
	// own text.
	Grade Grader
	// The KV check and where it was measured.
	KVDeclared, KVEngine string
	ReferenceCached      bool
	Pod                  string
}

// Judge turns the evidence into the audit block: each audit's verdict,
// figures and requests, and the verdict of all of them (the first failed
// audit's, in the order served_model, token_honesty, answer_cache,
// accuracy_under_load, device).
func Judge(in Inputs) record.Audit {
	a := record.Audit{KVCacheDTypeDeclared: in.KVDeclared, KVCacheDTypeEngine: in.KVEngine,
		ReferenceCached: in.ReferenceCached, Pod: in.Pod}
	ev := in.Evidence
	if ev == nil {
		a.Verdict, a.Message = record.VerdictSkipped, "the efficiency job gathered no audit evidence"
		return a
	}
	a.Seed = ev.Seed
	a.ServedModel = served(ev, in)
	a.TokenHonesty = tokens(ev.Tokens)
	a.AnswerCache = cache(ev.Cache)
	a.AccuracyUnderLoad = accuracy(ev, in)
	a.Device = device(ev.Device)
	a.Verdict = record.VerdictSkipped
	for _, c := range []record.Check{a.ServedModel.Check, a.TokenHonesty.Check, a.AnswerCache.Check, a.AccuracyUnderLoad.Check, a.Device.Check} {
		switch c.Verdict {
		case record.VerdictFail:
			if a.Verdict != record.VerdictFail {
				a.Verdict, a.Reason, a.Message = record.VerdictFail, c.Reason, c.Message
			}
		case record.VerdictPass:
			if a.Verdict == record.VerdictSkipped {
				a.Verdict = record.VerdictPass
			}
		}
	}
	return a
}

// Failed is the reason and sentence of a failed audit block ("" when it
// passed, was skipped or is absent): what disqualifies.
func Failed(a *record.Audit) (reason, message string) {
	if a == nil || a.Verdict != record.VerdictFail {
		return "", ""
	}
	return a.Reason, a.Message
}

func pass(mlperf string) record.Check {
	return record.Check{Verdict: record.VerdictPass, MLPerf: mlperf}
}

func fail(mlperf string, code reason.Code, format string, args ...any) record.Check {
	return record.Check{Verdict: record.VerdictFail, Reason: string(code), Message: fmt.Sprintf(format, args...), MLPerf: mlperf}
}

func skip(mlperf, format string, args ...any) record.Check {
	return record.Check{Verdict: record.VerdictSkipped, Message: fmt.Sprintf(format, args...), MLPerf: mlperf}
}

// cut is an answer under load cut where the quality job's answer ended:
// with ignore_eos the engine goes on past its end of sequence, so the
// answer is its first tokens, as many as the quality job's.
func cut(a Answer, ref Reference) string {
	n := min(max(ref.Tokens, 0), len(a.Chunks))
	return strings.Join(a.Chunks[:n], "")
}

// same reports whether an answer under load is the quality job's: its
// text begins with the quality job's and a chunk ends exactly there (so
// "42" is not the answer "4"), however the engine cut its text into
// chunks.
func same(a Answer, ref Reference) bool {
	if ref.Text == "" {
		return false
	}
	at := 0
	for _, c := range a.Chunks {
		at += len(c)
		if at >= len(ref.Text) {
			return at == len(ref.Text) && strings.HasPrefix(strings.Join(a.Chunks, ""), ref.Text)
		}
	}
	return false
}

func served(ev *Evidence, in Inputs) *record.ServedModelAudit {
	s := &record.ServedModelAudit{Checkpoint: ev.Checkpoint, ServedModel: ev.ServedModel, MinAgreement: MinProbeAgreement,
		Requests: []record.AuditRequest{}}
	name := ev.ServedModel
	if name != ev.Checkpoint && filepath.Base(filepath.Clean(name)) != ev.Checkpoint {
		s.Check = fail("", reason.ServedModelMismatch, "the engine was started on checkpoint %s but its /v1/models names %q: it serves another model", ev.Checkpoint, name)
		return s
	}
	failed := 0
	for _, p := range ev.Probes {
		if p.Err != "" {
			failed++
			s.Requests = append(s.Requests, record.AuditRequest{Item: p.Item, Seq: p.Seq, Error: p.Err})
			continue
		}
		ref, ok := in.Quality[p.Item]
		if !ok {
			continue
		}
		agree := same(p, ref)
		s.Probes++
		if agree {
			s.Agreed++
		}
		s.Requests = append(s.Requests, record.AuditRequest{Item: p.Item, Seq: p.Seq, Agree: agree, Quality: ref.Score})
	}
	if ev.Unpatched != nil && failed == 0 {
		refs := byItem(ev.Unpatched.Probes)
		for _, p := range ev.Probes {
			if ref, ok := refs[p.Item]; ok {
				s.UnpatchedProbes++
				if same(p, ref) {
					s.UnpatchedAgreed++
				}
			}
		}
		if s.UnpatchedProbes > 0 && float64(s.UnpatchedAgreed) < MinProbeAgreement*float64(s.UnpatchedProbes) {
			s.Check = fail("", reason.ServedModelMismatch, "the patched engine's first answers, one at a time at temperature 0, are those of the campaign's unpatched engine on the same checkpoint on %d of %d probes (at least %.0f%% must be): it serves another model",
				s.UnpatchedAgreed, s.UnpatchedProbes, 100*MinProbeAgreement)
			return s
		}
	}
	switch {
	case in.Quality == nil:
		s.Check = skip("", "the engine names its checkpoint; its probes are not compared: %s", in.QualityWhy)
	case failed > 0:
		s.Check = skip("", "%d of the %d probes failed; they count as audit items that failed (accuracy_under_load)", failed, len(ev.Probes))
	case s.Probes == 0:
		s.Check = skip("", "no probe has an answer of the quality job to compare with")
	case float64(s.Agreed) < MinProbeAgreement*float64(s.Probes):
		s.Check = fail("", reason.ServedModelMismatch, "the engine's first answers, one at a time at temperature 0, are the quality job's on %d of %d probes (at least %.0f%% must be): it serves another model than the one the quality job answered with",
			s.Agreed, s.Probes, 100*MinProbeAgreement)
	default:
		s.Check = pass("")
	}
	return s
}

func tokens(t TokenCount) *record.TokenAudit {
	out := &record.TokenAudit{Tokenizer: t.Tokenizer, Requests: t.Requests, Claimed: t.Claimed, Retokenized: t.Retokenized,
		Tolerance: TokenTolerance, OverMax: t.OverMax, EndedEarly: t.EndedEarly, Worst: t.Worst}
	if t.Retokenized > 0 {
		out.Ratio = float64(t.Claimed) / float64(t.Retokenized)
	}
	switch {
	case t.Tokenizer == "" || t.Requests == 0:
		out.Check = skip(mlperfTokens, "no tokens were re-tokenised: %s", t.Why)
	case out.Ratio > 1+TokenTolerance:
		out.Check = fail(mlperfTokens, reason.TokenCountDishonest, "the engine claimed %d completion tokens for text that re-tokenises to %d with the campaign's tokenizer (%.2f times, more than %.0f%% over): it pads its output",
			t.Claimed, t.Retokenized, out.Ratio, 100*TokenTolerance)
	case t.OverMax > 0:
		out.Check = fail(mlperfTokens, reason.TokenCountDishonest, "%d of %d requests went past their max_tokens", t.OverMax, t.Requests)
	case t.EndedEarly > 0:
		out.Check = fail(mlperfTokens, reason.TokenCountDishonest, "%d of %d requests ended before max_tokens although ignore_eos asked for all of them: the engine ends early", t.EndedEarly, t.Requests)
	default:
		out.Check = pass(mlperfTokens)
	}
	return out
}

func cache(c *CacheRuns) *record.CacheAudit {
	out := &record.CacheAudit{Limit: CacheLimit}
	if c == nil {
		out.Check = skip(mlperfCache, "the job ran no cache-defeating run")
		return out
	}
	out.Concurrency, out.UniqueRequests, out.RepeatRequests = c.Concurrency, c.Unique.Requests, c.Repeat.Requests
	out.UniqueTPOTMs, out.RepeatTPOTMs, out.UniqueTTFTMs, out.RepeatTTFTMs = c.Unique.TPOTMs, c.Repeat.TPOTMs, c.Unique.TTFTMs, c.Repeat.TTFTMs
	if c.Unique.TPOTMs <= 0 || c.Unique.Requests == 0 || c.Repeat.Requests == 0 {
		out.Check = skip(mlperfCache, "the cache-defeating run measured no time per token")
		return out
	}
	out.Ratio = c.Repeat.TPOTMs / c.Unique.TPOTMs
	if out.Ratio < CacheLimit {
		out.Check = fail(mlperfCache, reason.AnswerCacheSuspected, "repeated prompts were decoded in %.2f ms a token, unique ones in %.2f (%.2f times; below %.2f a prefix cache cannot explain it, it saves prefill, not decode): the engine replays cached answers",
			c.Repeat.TPOTMs, c.Unique.TPOTMs, out.Ratio, CacheLimit)
		return out
	}
	out.Check = pass(mlperfCache)
	return out
}

func accuracy(ev *Evidence, in Inputs) *record.AccuracyAudit {
	a := &record.AccuracyAudit{Items: len(ev.Items), SlowLimit: SlowLimit, SlowFloorMs: SlowFloorMs, Requests: []record.AuditRequest{}}
	var diffs, slow, excess []float64
	agreed := 0
	for _, p := range ev.Probes {
		switch {
		case p.Err == "":
		case p.Err == string(reason.EngineDisconnected):
			a.Incomplete++
		default:
			a.Errors++
		}
	}
	for _, it := range ev.Items {
		req := record.AuditRequest{Item: it.Item, Workload: it.Workload, Seq: it.Seq, TPOTMs: it.TPOTMs, Error: it.Err}
		switch {
		case it.Err == string(reason.EngineDisconnected):
			a.Incomplete++
		case it.Err != "":
			a.Errors++
		}
		if it.Err != "" {
			a.Requests = append(a.Requests, req)
			continue
		}
		if l := ev.LoadTPOTMs[it.Workload]; l > 0 && it.TPOTMs > 0 {
			slow = append(slow, it.TPOTMs/l)
			excess = append(excess, it.TPOTMs-l)
		}
		ref, ok := in.Quality[it.Item]
		if !ok {
			a.Requests = append(a.Requests, req)
			continue
		}
		req.Agree, req.Quality, req.Load = same(it, ref), ref.Score, ref.Score
		if !req.Agree {
			score, err := 0.0, error(nil)
			if in.Grade != nil {
				score, err = in.Grade(it.Item, cut(it, ref))
			}
			if err != nil {
				req.Error = "not_graded"
				a.Requests = append(a.Requests, req)
				continue
			}
			req.Load = score
		} else {
			agreed++
		}
		a.Compared++
		diffs = append(diffs, req.Quality-req.Load)
		a.QualityAccuracy += req.Quality
		a.LoadAccuracy += req.Load
		a.Requests = append(a.Requests, req)
	}
	if len(slow) > 0 {
		a.SlowRatio, a.SlowExcessMs = median(slow), median(excess)
	}
	if a.Compared > 0 {
		n := float64(a.Compared)
		a.Agreement = float64(agreed) / n
		a.QualityAccuracy /= n
		a.LoadAccuracy /= n
		a.Drop, a.SE = meanSE(diffs)
		a.Lower = a.Drop - Z*a.SE
	}
	loadFailed := load(ev, in, a)
	switch {
	case a.Errors > 0:
		a.Check = fail(mlperfAccuracy, reason.AuditItemErrors, "the engine failed %d of the eval items mixed into the load (and the audit's probes) while it served the load's own requests: it refuses the audit", a.Errors)
	case a.Incomplete > 0:
		a.Check = fail(mlperfAccuracy, reason.AuditItemIncomplete, "the engine stopped streaming %d of the eval items mixed into the load (and the audit's probes) mid-answer while it finished the load's own requests", a.Incomplete)
	case a.SlowRatio > SlowLimit && a.SlowExcessMs > SlowFloorMs:
		a.Check = fail(mlperfAccuracy, reason.AuditItemsSlower, "the engine decoded the eval items mixed into the load at %.2f times the load's time per token in the same workloads (above %.1f), %.2f ms more a token (above %.1f ms): it tells them apart", a.SlowRatio, SlowLimit, a.SlowExcessMs, SlowFloorMs)
	case loadFailed:
		a.Check = fail(mlperfAccuracy, reason.AccuracyDiffersUnderLoad, "the patched engine answered %d of the load's own requests (each a suite item at the workload's length) as the campaign's unpatched engine answers them on the same checkpoint on %.0f%% (at least %.0f%% must be; graded accuracy %.3f lower): it serves the load another way than the items",
			a.LoadCompared, 100*a.LoadAgreement, 100*MinLoadAgreement, a.LoadDrop)
	case in.Quality == nil:
		a.Check = skip(mlperfAccuracy, "nothing to compare with: %s", in.QualityWhy)
	case a.Compared < 2:
		a.Check = skip(mlperfAccuracy, "%d of the %d items under load have an answer of the quality job to compare with", a.Compared, a.Items)
	case a.Lower > 0:
		a.Check = fail(mlperfAccuracy, reason.AccuracyDiffersUnderLoad, "under load the engine answered %d eval items with accuracy %.3f, %.3f in the quality job: a drop of %.3f (paired se %.3f) beyond its one-sided bound (drop - %.3f se = %.3f > 0); %.0f%% of the answers were the quality job's",
			a.Compared, a.LoadAccuracy, a.QualityAccuracy, a.Drop, a.SE, Z, a.Lower, 100*a.Agreement)
	default:
		a.Check = pass(mlperfAccuracy)
	}
	return a
}

// byItem indexes answers by their item, as references to compare with.
func byItem(as []Answer) map[string]Reference {
	out := make(map[string]Reference, len(as))
	for _, a := range as {
		if a.Err == "" {
			out[a.Item] = Reference{Text: strings.Join(a.Chunks, ""), Tokens: len(a.Chunks)}
		}
	}
	return out
}

// loadKey names one of the load's requests: its workload and place.
func loadKey(a Answer) string { return fmt.Sprintf("%s#%d", a.Workload, a.Seq) }

// load compares the load's sampled requests with the unpatched engine's
// answers to the same prompts (the submission patches the engine): each
// agrees when its text begins with the unpatched engine's whole answer;
// one that does not is graded, cut where the unpatched answer ended,
// beside the unpatched answer's grade. It reports whether the agreement
// is below MinLoadAgreement.
func load(ev *Evidence, in Inputs, a *record.AccuracyAudit) bool {
	if ev.Unpatched == nil {
		return false
	}
	a.MinLoadAgreement = MinLoadAgreement
	refs := map[string]Reference{}
	for _, u := range ev.Unpatched.Load {
		if u.Err == "" {
			refs[loadKey(u)] = Reference{Text: strings.Join(u.Chunks, ""), Tokens: len(u.Chunks), Score: -1}
		}
	}
	agreed := 0
	var drop float64
	for _, l := range ev.Load {
		ref, ok := refs[loadKey(l)]
		if !ok || l.Err != "" {
			continue
		}
		req := record.AuditRequest{Item: l.Item, Workload: l.Workload, Seq: l.Seq, Agree: same(l, ref), TPOTMs: l.TPOTMs}
		a.LoadCompared++
		if req.Agree {
			agreed++
		} else if in.Grade != nil {
			q, qerr := in.Grade(l.Item, ref.Text)
			g, gerr := in.Grade(l.Item, cut(l, ref))
			if qerr == nil && gerr == nil {
				req.Quality, req.Load = q, g
				drop += q - g
			} else {
				req.Error = "not_graded"
			}
		}
		a.LoadRequests = append(a.LoadRequests, req)
	}
	if a.LoadCompared == 0 {
		return false
	}
	a.LoadAgreement = float64(agreed) / float64(a.LoadCompared)
	a.LoadDrop = drop / float64(a.LoadCompared)
	return a.LoadAgreement < MinLoadAgreement
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// meanSE is the mean of paired differences and its standard error
// (sample standard deviation over sqrt n; 0 for one difference).
func meanSE(d []float64) (float64, float64) {
	n := float64(len(d))
	var sum float64
	for _, x := range d {
		sum += x
	}
	mean := sum / n
	if len(d) < 2 {
		return mean, 0
	}
	var ss float64
	for _, x := range d {
		ss += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(ss/(n-1)) / math.Sqrt(n)
}
