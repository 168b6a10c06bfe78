package quality

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/lowbarena/lowbarena/adapters/sandbox" // the code grader, under suite.GraderCode
	"github.com/lowbarena/lowbarena/domain/grade"
	"github.com/lowbarena/lowbarena/domain/suite"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/stage"
	"github.com/lowbarena/lowbarena/platform/store"
)

// DefaultGradeConcurrency is how many code answers the stage grades at a
// time (each one python process in the sandbox, about a CPU core).
const DefaultGradeConcurrency = 2

// gradeBatch is how many graded answers are written at a time.
const gradeBatch = 64

// The grading step: a GPU runner never runs a model's program (its pod
// cannot have the user namespaces bubblewrap needs), so it writes code
// answers to quality_answers ungraded (score 0, no quality_items row) and
// counts them in its result's Ungraded. Before a role's rows are paired,
// the stage grades them here, in its own process, under the sandbox.
//
// Invariants:
//
//   - An answer is graded when quality_items (FINAL) holds its item and
//     sample with the answer's own ts_ms: the stage writes both rows of a
//     graded answer with the ts_ms of the answer it graded, so an answer
//     a redelivered job wrote again (another ts_ms) is graded again, and
//     one graded before is not.
//   - Grading twice writes the same rows (the same keys, ts_ms and
//     scores); ReplacingMergeTree keeps one, so redeliveries and restarts
//     change nothing. The answers are written before the items, so a
//     crash between the two leaves the answer ungraded, never an item
//     row without its graded answer.
//   - At most Options.GradeConcurrency programs run at a time in the
//     process, whatever the number of jobs being graded; one role's
//     answers are graded by one caller at a time (the others wait and
//     then find them graded).
//   - A machine that cannot sandbox is sandbox_unavailable with the
//     sandbox's message, which says what to install or enable; an item
//     the code grader cannot grade is suite_invalid. Neither is retried.

// answerRow is one stored answer of a quality job.
type answerRow struct {
	TsMs         uint64 `ch:"ts_ms"`
	ItemID       string `ch:"item_id"`
	Sample       uint32 `ch:"sample"`
	OutputTokens uint32 `ch:"output_tokens"`
	Answer       string `ch:"answer"`
}

// gradedKey is one item's sample with the ts_ms of its graded row.
type gradedKey struct {
	item   string
	sample uint32
	ts     uint64
}

// codeItems are a suite's code items by id, and their ids.
func codeItems(st *suite.Suite) (map[string]suite.Item, []string) {
	items := map[string]suite.Item{}
	var ids []string
	for _, its := range st.Items {
		for _, it := range its {
			if it.Grader == suite.GraderCode {
				items[it.ID] = it
				ids = append(ids, it.ID)
			}
		}
	}
	return items, ids
}

// gradeCode grades the code answers of one role's quality job whose
// result is res (campaign task, suite st, rows under submission) that
// are not graded yet, and writes their quality_items and graded
// quality_answers rows. A result with nothing ungraded (Ungraded 0, as
// from a runner that graded everything) reads nothing. It returns how
// many answers it graded.
func (s *Service) gradeCode(ctx context.Context, task string, st *suite.Suite, res events.QualityJobResult, submission string) (int, error) {
	if res.Ungraded == 0 {
		return 0, nil
	}
	items, ids := codeItems(st)
	if len(ids) == 0 {
		return 0, nil
	}
	unlock := s.lockRole(task, res.SuiteKey, submission, res.Role)
	defer unlock()

	var answers []answerRow
	if err := s.opts.Store.Select(ctx, &answers, "SELECT ts_ms, item_id, sample, output_tokens, answer FROM quality_answers FINAL "+
		"WHERE campaign = ? AND suite_version = ? AND submission_id = ? AND role = ? AND has(?, item_id)",
		task, res.SuiteKey, submission, res.Role, ids); err != nil {
		return 0, fmt.Errorf("quality: read the %s code answers: %w", res.Role, err)
	}
	var done []struct {
		TsMs   uint64 `ch:"ts_ms"`
		ItemID string `ch:"item_id"`
		Sample uint32 `ch:"sample"`
	}
	if err := s.opts.Store.Select(ctx, &done, "SELECT ts_ms, item_id, sample FROM quality_items FINAL "+
		"WHERE campaign = ? AND suite_version = ? AND submission_id = ? AND role = ? AND has(?, item_id)",
		task, res.SuiteKey, submission, res.Role, ids); err != nil {
		return 0, fmt.Errorf("quality: read the %s graded code items: %w", res.Role, err)
	}
	graded := make(map[gradedKey]bool, len(done))
	for _, d := range done {
		graded[gradedKey{d.ItemID, d.Sample, d.TsMs}] = true
	}
	var todo []answerRow
	for _, a := range answers {
		if !graded[gradedKey{a.ItemID, a.Sample, a.TsMs}] {
			todo = append(todo, a)
		}
	}
	if len(todo) == 0 {
		return 0, nil
	}
	s.log.Info("grading code answers", "campaign", task, "suite", res.SuiteKey, "submission", submission, "role", res.Role,
		"answers", len(todo), "concurrency", cap(s.slots))
	if err := s.grade(ctx, task, st.Name, res, submission, items, todo); err != nil {
		return 0, err
	}
	return len(todo), nil
}

// grade grades todo, at most cap(s.slots) programs at a time in the
// process, and writes the rows in batches as they come; the first error
// stops the rest.
func (s *Service) grade(ctx context.Context, task, suiteName string, res events.QualityJobResult, submission string,
	items map[string]suite.Item, todo []answerRow) error {
	sim := uint8(0)
	if res.Simulated {
		sim = 1
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		firstErr error
		rows     []store.QualityItem
		answers  []store.QualityAnswer
	)
	flush := func(force bool) error { // under mu
		if len(rows) == 0 || (!force && len(rows) < gradeBatch) {
			return nil
		}
		a, r := answers, rows
		answers, rows = nil, nil
		if err := store.Insert(ctx, s.opts.Store, a); err != nil {
			return fmt.Errorf("quality: write graded answers: %w", err)
		}
		if err := store.Insert(ctx, s.opts.Store, r); err != nil {
			return fmt.Errorf("quality: write graded items: %w", err)
		}
		return nil
	}
	fail := func(err error) { // under mu
		if firstErr == nil {
			firstErr = err
			cancel()
		}
	}
	var wg sync.WaitGroup
	for _, a := range todo {
		acquired := false
		select {
		case s.slots <- struct{}{}:
			acquired = true
		case <-ctx.Done():
		}
		if !acquired {
			break
		}
		wg.Go(func() {
			defer func() { <-s.slots }()
			it := items[a.ItemID]
			r, err := gradeOne(ctx, it, a.Answer)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				fail(err)
				return
			}
			answers = append(answers, store.QualityAnswer{TsMs: a.TsMs, Campaign: task, SuiteVersion: res.SuiteKey, SubmissionID: submission,
				Role: res.Role, ItemID: a.ItemID, Sample: a.Sample, Score: r.Score, OutputTokens: a.OutputTokens, Answer: a.Answer})
			rows = append(rows, store.QualityItem{TsMs: a.TsMs, Campaign: task, Suite: suiteName, SuiteVersion: res.SuiteKey,
				SubmissionID: submission, Role: res.Role, Domain: it.Domain, ItemID: a.ItemID, Sample: a.Sample, Score: r.Score,
				Formatted: 0, OutputTokens: a.OutputTokens, Simulated: sim}) // the code grader has no format contract
			if err := flush(false); err != nil {
				fail(err)
			}
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if firstErr != nil {
		return firstErr
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("quality: grade code answers: %w", err)
	}
	return flush(true)
}

// gradeOne grades one code answer; the code grader's refusals become the
// stage's (see the invariants above).
func gradeOne(ctx context.Context, it suite.Item, answer string) (grade.Result, error) {
	g, err := grade.For(it)
	if err != nil {
		return grade.Result{}, stage.Refuse(reason.SuiteInvalid, err.Error())
	}
	r, err := g.Grade(ctx, it, answer)
	switch {
	case errors.Is(err, sandbox.ErrSandboxUnavailable):
		return r, stage.Refuse(reason.SandboxUnavailable, "the quality stage cannot grade the suite's code answers: "+err.Error())
	case errors.Is(err, grade.ErrBadItem):
		return r, stage.Refuse(reason.SuiteInvalid, err.Error())
	case err != nil:
		return r, fmt.Errorf("quality: grade item %s: %w", it.ID, err)
	}
	return r, nil
}

// lockRole serialises the grading of one role's answers; the returned
// function unlocks.
func (s *Service) lockRole(task, suiteKey, submission, role string) func() {
	v, _ := s.grading.LoadOrStore(task+"\x00"+suiteKey+"\x00"+submission+"\x00"+role, &sync.Mutex{})
	m := v.(*sync.Mutex)
	m.Lock()
	return m.Unlock
}

// sandboxReady reports whether the stage can grade the code items of the
// suites of its campaigns: nil when none of them has code items or the
// sandbox works here, else an error wrapping sandbox.ErrSandboxUnavailable
// that says what to install or enable. It probes the sandbox (once, on
// success; grade.Check) and is the stage's readiness check.
func (s *Service) sandboxReady(ctx context.Context) error {
	for _, st := range s.codeSuites() {
		if err := grade.Check(ctx, st); err != nil {
			return fmt.Errorf("quality: suite %s has code items: %w", st.Key(), err)
		}
	}
	return nil
}

// codeSuites are the suites with code items of the campaigns the stage
// runs now (they change when a campaign version is pushed); a suite that
// does not load is refused when a submission needs it, not here.
func (s *Service) codeSuites() []*suite.Suite {
	if s.opts.Campaigns == nil {
		return nil
	}
	var out []*suite.Suite
	for _, task := range s.opts.Campaigns.Tasks() {
		c, err := s.opts.Campaigns.Lookup(task)
		if err != nil || c.Quality == nil {
			continue
		}
		for _, split := range []string{suite.SplitDev, suite.SplitRanked} {
			if split == suite.SplitRanked && c.RankedSuiteDir() == "" {
				continue
			}
			if st, _, err := s.suite(c, split); err == nil {
				if _, ids := codeItems(st); len(ids) > 0 {
					out = append(out, st)
				}
			}
		}
	}
	return out
}
