package quality

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/domain/stats"
	"github.com/lowbarena/lowbarena/domain/suite"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/stage"
)

// Failure passes a runner's failure of a candidate's job on: its reason
// and message, with the engine's log tail, the pod and the runner as the
// detail, always (unlike the kit's default, which adds the GPU-hours and
// leaves the detail out without a log tail).
func Failure(f events.RunnerJobFailedData) *stage.Refusal {
	return stage.Refuse(reason.Code(f.Reason), f.Message).WithDetail(map[string]any{"log_tail": f.LogTail, "pod": f.Pod, "runner": f.Runner})
}

// result turns a candidate's finished job into the stage's outcome: its
// suite is found from what the result carries (suiteOf), its reference's
// state is read from the bucket, and once that is done the code answers
// of both roles the runners left ungraded are graded here (gradeCode: a
// no-op for those graded already) and the candidate's rows are paired
// with BF16's.
func (s *Service) result(ctx context.Context, c events.RunnerJobCompletedData) (events.QualityCompletedData, error) {
	res, err := events.QualityJob.Result(c)
	if err != nil {
		return events.QualityCompletedData{}, stage.Refuse(reason.QualityBadStatistics, "the runner's result does not decode: "+err.Error())
	}
	task, st, err := s.suiteOf(res.Campaign, res.SuiteKey)
	if err != nil {
		return events.QualityCompletedData{}, err
	}
	ref, err := s.refStateOf(ctx, task, res.SuiteKey)
	if err != nil {
		return events.QualityCompletedData{}, err
	}
	if err := Ready(res, ref); err != nil {
		return events.QualityCompletedData{}, err
	}
	if _, err := s.gradeCode(ctx, task, st, res, c.SubmissionID); err != nil {
		return events.QualityCompletedData{}, err
	}
	// The reference's are graded when its job completes (shared); here
	// again in case that machine could not sandbox, or an older process
	// kept it.
	if _, err := s.gradeCode(ctx, task, st, ref.Result, ReferenceSubmission); err != nil {
		return events.QualityCompletedData{}, err
	}
	cand, err := s.read(ctx, task, res.SuiteKey, c.SubmissionID, events.RoleCandidate)
	if err != nil {
		return events.QualityCompletedData{}, err
	}
	bf, err := s.read(ctx, task, res.SuiteKey, ReferenceSubmission, events.RoleBF16)
	if err != nil {
		return events.QualityCompletedData{}, err
	}
	return Pair(task, st, c, res, ref.Result, cand, bf)
}

// Ready decides whether a candidate's result can be paired with its BF16
// reference, whose state is ref (nil: not there yet). A reference not
// there yet is a deliberate wait of ReferenceWait (the reference is still
// running; jobs are taken in order, so this is rare with one runner); a
// failed reference is quality_no_reference; an engine that gave no
// gradeable answer to more than half its generations is
// engine_empty_answers.
func Ready(res events.QualityJobResult, ref *RefState) error {
	if ref == nil {
		return stage.RetryAfter(ReferenceWait, fmt.Errorf("quality: the BF16 reference of %s is not ready", res.SuiteKey))
	}
	if ref.Status != StatusDone {
		return stage.Refusef(reason.QualityNoReference, "the BF16 reference rows of suite %s could not be computed: %s", res.SuiteKey, ref.Reason)
	}
	if res.Empty*2 > res.Generations {
		return stage.Refusef(reason.EngineEmptyAnswers, "the engine gave no gradeable answer to %d of %d generations (empty replies); a quality figure from the rest would mislead", res.Empty, res.Generations)
	}
	return nil
}

// Row is one stored graded sample of quality_items.
type Row struct {
	ItemID       string  `ch:"item_id"`
	Domain       string  `ch:"domain"`
	Sample       uint32  `ch:"sample"`
	Score        float64 `ch:"score"`
	Formatted    uint8   `ch:"formatted"`
	OutputTokens uint32  `ch:"output_tokens"`
}

// read reads one role's rows of a suite, deduplicated (FINAL).
func (s *Service) read(ctx context.Context, task, suiteKey, submission, role string) ([]Row, error) {
	var rows []Row
	err := s.opts.Store.Select(ctx, &rows, "SELECT item_id, domain, sample, score, formatted, output_tokens FROM quality_items FINAL "+
		"WHERE campaign = ? AND suite_version = ? AND submission_id = ? AND role = ? ORDER BY item_id, sample", task, suiteKey, submission, role)
	if err != nil {
		return nil, fmt.Errorf("quality: read %s rows: %w", role, err)
	}
	return rows, nil
}

// Pair pairs a candidate's rows (cand) with its BF16 reference's (bf) per
// item of the campaign's suite st and builds the record's dev_quality
// block, with length and KL against BF16. Rows fewer than the jobs'
// generations, or an item without its BF16 row, are
// quality_rows_incomplete; statistics that cannot be computed (no valid
// domain, no headroom, ...) are quality_bad_statistics.
func Pair(task string, st *suite.Suite, c events.RunnerJobCompletedData, res, ref events.QualityJobResult, cand, bf []Row) (events.QualityCompletedData, error) {
	block, err := pairRows(task, st, res, ref, cand, bf)
	switch {
	case err == nil:
	case isIncomplete(err):
		return events.QualityCompletedData{}, stage.Refuse(reason.QualityRowsIncomplete, err.Error())
	case errors.Is(err, stats.ErrEmpty), errors.Is(err, stats.ErrTooFew), errors.Is(err, stats.ErrNoHeadroom), errors.Is(err, stats.ErrNoValidDomain),
		errors.Is(err, stats.ErrOutOfRange), errors.Is(err, stats.ErrMixedFormat), errors.Is(err, stats.ErrDistribution), errors.Is(err, stats.ErrMismatch):
		return events.QualityCompletedData{}, stage.Refuse(reason.QualityBadStatistics, err.Error())
	default:
		return events.QualityCompletedData{}, err
	}
	md, _ := stats.MeanDrop(block.Domains)
	out := events.QualityCompletedData{SubmissionID: c.SubmissionID, DevQuality: block, KL: klOf(res, ref), Simulated: res.Simulated || ref.Simulated,
		TierReason: stats.Reason(block.Tier), MeanDrop: md, BundleDigest: c.CheckpointDigest}
	// The candidate's own job's GPU time; the reference's is the
	// campaign's, shared by every candidate of the suite.
	out.GPUSeconds = res.Timed()
	return out, nil
}

// incomplete is a job whose rows are fewer than its generations.
type incomplete struct{ role, msg string }

func (e *incomplete) Error() string { return e.msg }

func isIncomplete(err error) bool {
	var inc *incomplete
	return errors.As(err, &inc)
}

// pairRows pairs the candidate's rows with BF16's per item and builds the
// block.
func pairRows(task string, st *suite.Suite, res, ref events.QualityJobResult, cand, bf []Row) (record.Quality, error) {
	if len(cand) != res.Generations {
		return record.Quality{}, &incomplete{events.RoleCandidate, fmt.Sprintf("the store holds %d of the candidate's %d graded generations", len(cand), res.Generations)}
	}
	if len(bf) != ref.Generations {
		return record.Quality{}, &incomplete{events.RoleBF16, fmt.Sprintf("the store holds %d of the BF16 reference's %d graded generations", len(bf), ref.Generations)}
	}
	items := map[string]suite.Item{}
	for _, its := range st.Items {
		for _, it := range its {
			items[it.ID] = it
		}
	}
	type acc struct {
		score, formatted float64
		n, tokensZero    int
	}
	agg := func(rows []Row) map[string]*acc {
		m := map[string]*acc{}
		for _, r := range rows {
			a := m[r.ItemID]
			if a == nil {
				a = &acc{}
				m[r.ItemID] = a
			}
			a.score += r.Score
			a.formatted += float64(r.Formatted)
			a.n++
			if r.OutputTokens == 0 {
				a.tokensZero++
			}
		}
		return m
	}
	cm, bm := agg(cand), agg(bf)
	pairs := map[string][]stats.Pair{}
	for itemID, c := range cm {
		b, ok := bm[itemID]
		it, known := items[itemID]
		if !ok || !known {
			return record.Quality{}, &incomplete{events.RoleBF16, fmt.Sprintf("item %s has no BF16 reference row (suite %s)", itemID, res.SuiteKey)}
		}
		p := stats.Pair{BF16: b.score / float64(b.n), Candidate: c.score / float64(c.n), Chance: it.Chance(),
			CandidateLost: c.tokensZero == c.n}
		if it.Grader == suite.GraderChoice {
			p.HasFormat, p.BF16Formatted, p.CandidateFormatted = true, b.formatted/float64(b.n), c.formatted/float64(c.n)
		}
		pairs[it.Domain] = append(pairs[it.Domain], p)
	}
	domains := map[string]record.Domain{}
	for d, ps := range pairs {
		dom, err := stats.Domain(ps)
		if err != nil {
			return record.Quality{}, fmt.Errorf("domain %s: %w", d, err)
		}
		domains[d] = dom
	}
	q, err := stats.Overall(domains)
	if err != nil {
		return record.Quality{}, err
	}
	q.Evaluations = 1
	q.FirstQuality = json.RawMessage("null")
	q.ReferenceRows = fmt.Sprintf("quality_items: campaign=%s suite_version=%s role=bf16", task, res.SuiteKey)

	// Length: the candidate's generations beside BF16's, paired by item
	// and sample.
	bfTokens := map[string]int{}
	for _, r := range bf {
		bfTokens[fmt.Sprint(r.ItemID, "/", r.Sample)] = int(r.OutputTokens)
	}
	var cl, bl []int
	for _, r := range cand {
		if n, ok := bfTokens[fmt.Sprint(r.ItemID, "/", r.Sample)]; ok {
			cl, bl = append(cl, int(r.OutputTokens)), append(bl, n)
		}
	}
	if q.Length, err = stats.Length(cl, bl); err != nil {
		return record.Quality{}, fmt.Errorf("length: %w", err)
	}
	return q, nil
}

// klOf is the KL of the candidate's top-k logprobs against BF16's on the
// sequences both kept, or nil when there are fewer than two.
func klOf(res, ref events.QualityJobResult) *record.KL {
	refSeq := map[string][]events.TopK{}
	for i, id := range ref.KLItems {
		if i < len(ref.Logprobs) {
			refSeq[id] = ref.Logprobs[i]
		}
	}
	var seqs []stats.Sequence
	for i, id := range res.KLItems {
		b, ok := refSeq[id]
		if !ok || i >= len(res.Logprobs) {
			continue
		}
		c := res.Logprobs[i]
		var seq stats.Sequence
		for j := 0; j < len(c) && j < len(b); j++ {
			seq = append(seq, stats.Position{BF16: stats.TopK(b[j]), Candidate: stats.TopK(c[j])})
		}
		if len(seq) > 0 {
			seqs = append(seqs, seq)
		}
	}
	kl, err := stats.KL(seqs)
	if err != nil {
		return nil
	}
	return &kl
}
