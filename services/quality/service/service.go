// Package service is the quality stage: for every checkpoint that kept its
// contract it has a GPU runner answer the campaign's eval suite, pairs the
// graded items with the BF16 reference's (computed once per campaign and
// suite version, stored per item in quality_items), and publishes the
// record's dev_quality block: per-domain drops with paired standard
// errors, recovery, the tier, length and KL against BF16.
package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/artifact"
	"github.com/lowbarena/lowbarena/events/bus"
	"github.com/lowbarena/lowbarena/services/domain/record"
	"github.com/lowbarena/lowbarena/services/domain/campaign"
	"github.com/lowbarena/lowbarena/services/domain/stats"
	"github.com/lowbarena/lowbarena/services/domain/suite"
	"github.com/lowbarena/lowbarena/services/runtime"
	"github.com/lowbarena/lowbarena/services/store"
)

// Name is the quality service's name: its event source and durables.
const Name = "quality"

// Reasons the stage fails that are not the runner's.
const (
	ReasonNoSuite       = "campaign_no_suite"
	ReasonBadSuite      = "suite_invalid"
	ReasonUnknownTask   = "campaign_unknown_task"
	ReasonNoEngine      = "campaign_no_engine"
	ReasonNoArtifact    = "artifact_missing"
	ReasonNoReference   = "quality_no_reference"
	ReasonIncomplete    = "quality_rows_incomplete"
	ReasonBadStatistics = "quality_bad_statistics"
	ReasonEmptyAnswers  = "engine_empty_answers"
)

// ReferenceSubmission is the submission id of the BF16 reference's rows.
const ReferenceSubmission = "bf16-reference"

// Options configure the stage.
type Options struct {
	Campaigns campaign.Set
	// Store holds quality_items (required).
	Store store.Store
}

// Service is the quality stage.
type Service struct {
	bus       *bus.Bus
	artifacts artifact.Store
	refs      jetstream.KeyValue
	opts      Options
	log       *slog.Logger

	mu     sync.Mutex
	suites map[string]*loaded // task id/split -> its suite
}

type loaded struct {
	task      string // the campaign
	suite     *suite.Suite
	ref       events.BundleRef // the suite in the artifact store
	reference events.BundleRef // the BF16 checkpoint in the artifact store
	items     map[string]suite.Item
}

// New opens the stores the stage needs.
func New(ctx context.Context, b *bus.Bus, log *slog.Logger, o Options) (*Service, error) {
	if o.Store == nil {
		return nil, errors.New("quality: a store is required (quality_items)")
	}
	arts, err := artifact.NewJetStream(ctx, b.JetStream(), bus.ObjectArtifacts)
	if err != nil {
		return nil, fmt.Errorf("quality: %w", err)
	}
	refs, err := b.JetStream().KeyValue(ctx, bus.BucketReferences)
	if err != nil {
		return nil, fmt.Errorf("quality: open bucket %s: %w", bus.BucketReferences, err)
	}
	return &Service{bus: b, artifacts: arts, refs: refs, opts: o, log: log, suites: map[string]*loaded{}}, nil
}

// Requests is the durable that turns kept contracts into quality jobs.
var Requests = bus.ConsumerConfig{
	Name:     "quality",
	Subjects: []string{events.FilterFor(events.ContractCompleted)},
	AckWait:  60 * time.Second,
	Prefetch: 4,
}

// Results is the durable that turns runner outcomes into the stage's. A
// candidate that finishes before its BF16 reference is retried every
// few seconds, for up to about ten minutes.
var Results = bus.ConsumerConfig{
	Name:       "quality-results",
	Subjects:   []string{events.FilterFor(events.RunnerJobCompleted), events.FilterFor(events.RunnerJobFailed)},
	Prefetch:   8,
	MaxDeliver: 120,
}

// Actors returns the stage's two consumers.
func (s *Service) Actors() []runtime.Actor {
	return []runtime.Actor{
		{Name: "quality-requests", Run: func(ctx context.Context) error { return s.bus.Consume(ctx, Requests, s.HandleContract) }},
		{Name: "quality-results", Run: func(ctx context.Context) error { return s.bus.Consume(ctx, Results, s.HandleResult) }},
	}
}

// JobID is the quality job of a submission.
func JobID(submission string) string { return "qual-" + events.DeriveID(submission, Name)[:24] }

// ReferenceJobID is the BF16 reference's quality job of a campaign, suite
// version and reference checkpoint: one, however many candidates ask.
func ReferenceJobID(campaign, suiteKey, referenceDigest string) string {
	return "qref-" + events.DeriveID(campaign, suiteKey, referenceDigest)[:24]
}

// refKey is the references-bucket key of a BF16 quality reference.
func refKey(campaign, suiteKey string) string {
	return bus.Key("quality", campaign, suiteKey)
}

// refState is what the references bucket holds for a quality reference.
type refState struct {
	Status string                  `json:"status"` // done or failed
	Reason string                  `json:"reason,omitempty"`
	Result events.QualityJobResult `json:"result"`
}

// load loads the campaign's suite of a split (a ranked submission is
// evaluated on the held-out ranked suite, never on the dev items shown to
// participants) and stores it and the BF16 checkpoint in the artifact
// store, once per campaign and split per process.
func (s *Service) load(ctx context.Context, c *campaign.Campaign, split string) (*loaded, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l, ok := s.suites[c.TaskID+"/"+split]; ok {
		return l, nil
	}
	dir := c.SuiteDir()
	if split == suite.SplitRanked {
		if dir = c.RankedSuiteDir(); dir == "" {
			return nil, fmt.Errorf("%w: campaign %s names no ranked suite (campaign.json quality.ranked_suite), so it cannot evaluate ranked submissions", suite.ErrBadSuite, c.TaskID)
		}
	}
	st, err := suite.Load(dir)
	if err != nil {
		return nil, err
	}
	if st.Split != split {
		return nil, fmt.Errorf("%w: the suite at %s is the %s split, the submission is %s", suite.ErrBadSuite, dir, st.Split, split)
	}
	l := &loaded{task: c.TaskID, suite: st, items: map[string]suite.Item{}}
	for _, its := range st.Items {
		for _, it := range its {
			l.items[it.ID] = it
		}
	}
	if l.ref, err = artifact.PutDir(ctx, s.artifacts, dir); err != nil {
		return nil, fmt.Errorf("quality: store suite: %w", err)
	}
	if l.reference, err = artifact.PutDir(ctx, s.artifacts, c.ReferenceDir()); err != nil {
		return nil, fmt.Errorf("quality: store the BF16 reference: %w", err)
	}
	s.suites[c.TaskID+"/"+split] = l
	s.log.Info("suite loaded", "campaign", c.TaskID, "suite", st.Key(), "items", st.Count())
	return l, nil
}

// HandleContract requests the candidate's quality job, and the BF16
// reference's when its rows are not stored yet.
//
// Idempotency: job ids and event ids derive from the submission, or from
// the campaign, suite version and reference digest, so however often a
// contract arrives one job of each is queued. Ack semantics: a campaign
// that cannot evaluate is a quality.failed and an Ack; store and NATS
// errors are a Retry.
func (s *Service) HandleContract(ctx context.Context, d *bus.Delivery) bus.Outcome {
	var in events.ContractCompletedData
	if err := d.Decode(&in); err != nil {
		return bus.Poison("bad_payload", err)
	}
	id, src := in.SubmissionID, events.Source(Name)
	fail := func(reason, msg string) bus.Outcome {
		return s.fail(ctx, d.Event.ID(), id, reason, msg, nil)
	}
	if _, err := s.bus.PublishNew(ctx, events.DeriveID(d.Event.ID(), string(events.QualityStarted)), events.QualityStarted, src, id,
		events.StageStartedData{SubmissionID: id, Stage: Name, Attempt: int(d.NumDelivered)}); err != nil {
		return bus.Retry(0, err)
	}
	if in.Artifact == nil {
		return fail(ReasonNoArtifact, "the contract stage passed on no artifact to evaluate; submit again")
	}
	c, err := s.opts.Campaigns.Lookup(in.TaskID)
	if err != nil {
		return fail(ReasonUnknownTask, err.Error())
	}
	if c.Quality == nil || c.Engine == nil {
		return fail(ReasonNoSuite, fmt.Sprintf("campaign %s names no quality suite or engine (campaign.json \"quality\", \"engine\")", c.TaskID))
	}
	split := in.Split
	if split == "" {
		split = suite.SplitDev
	}
	l, err := s.load(ctx, c, split)
	if errors.Is(err, suite.ErrBadSuite) {
		return fail(ReasonBadSuite, err.Error())
	} else if err != nil {
		return bus.Retry(0, err)
	}
	key := l.suite.Key()
	if _, err := s.refs.Get(ctx, refKey(c.TaskID, key)); errors.Is(err, jetstream.ErrKeyNotFound) {
		if err := s.request(ctx, ReferenceJobID(c.TaskID, key, l.reference.SHA256), "", events.RoleBF16, c, l, l.reference, "auto"); err != nil {
			return bus.Retry(0, err)
		}
	} else if err != nil {
		return bus.Retry(0, err)
	}
	if err := s.request(ctx, JobID(id), id, events.RoleCandidate, c, l, *in.Artifact, in.KVCacheDType); err != nil {
		return bus.Retry(0, err)
	}
	s.log.Info("quality job requested", "submission", id, "suite", key)
	return bus.Ack()
}

func (s *Service) request(ctx context.Context, job, submission, role string, c *campaign.Campaign, l *loaded, ckpt events.BundleRef, kv string) error {
	p := events.QualityJobParams{Campaign: c.TaskID, Role: role, Engine: *c.Engine, KVCacheDType: kv,
		Suite: l.ref, SuiteKey: l.suite.Key(), Sampling: c.Quality.Sampling}
	params, err := json.Marshal(p)
	if err != nil {
		return err
	}
	req := events.RunnerJobRequestedData{JobID: job, Kind: events.JobQuality, SubmissionID: submission, Engine: c.Engine.Command,
		Checkpoint: ckpt, Params: params}
	_, err = s.bus.PublishNew(ctx, events.DeriveID(job, string(events.RunnerJobRequested)), events.RunnerJobRequested, events.Source(Name), job, req)
	return err
}

func (s *Service) fail(ctx context.Context, cause, id, reason, msg string, detail json.RawMessage) bus.Outcome {
	s.log.Info("quality failed", "submission", id, "reason", reason, "message", msg)
	data := events.StageFailedData{SubmissionID: id, Stage: Name, Reason: reason, Message: msg, Detail: detail}
	if _, err := s.bus.PublishNew(ctx, events.DeriveID(cause, string(events.QualityFailed)), events.QualityFailed, events.Source(Name), id, data); err != nil {
		return bus.Retry(0, err)
	}
	return bus.Ack()
}

// decodeResult decodes a quality job's result: its role and suite.
func decodeResult(raw json.RawMessage) (events.QualityJobResult, error) {
	var r events.QualityJobResult
	err := json.Unmarshal(raw, &r)
	return r, err
}

// HandleResult turns a finished quality job into the stage's outcome: the
// reference's is kept in the references bucket; a candidate's becomes
// quality.completed (or failed) once its reference is there.
func (s *Service) HandleResult(ctx context.Context, d *bus.Delivery) bus.Outcome {
	if events.Type(d.Event.Type()) == events.RunnerJobFailed {
		var f events.RunnerJobFailedData
		if err := d.Decode(&f); err != nil {
			return bus.Poison("bad_payload", err)
		}
		if f.Kind != events.JobQuality {
			return bus.Ack()
		}
		if f.SubmissionID == "" { // the BF16 reference
			return s.referenceFailed(ctx, f)
		}
		detail, _ := json.Marshal(map[string]any{"log_tail": f.LogTail, "pod": f.Pod, "runner": f.Runner})
		return s.fail(ctx, f.JobID, f.SubmissionID, f.Reason, f.Message, detail)
	}
	var c events.RunnerJobCompletedData
	if err := d.Decode(&c); err != nil {
		return bus.Poison("bad_payload", err)
	}
	if c.Kind != events.JobQuality {
		return bus.Ack()
	}
	res, err := decodeResult(c.Result)
	if err != nil {
		return s.fail(ctx, c.JobID, c.SubmissionID, ReasonBadStatistics, "the runner's result does not decode: "+err.Error(), nil)
	}
	if res.Role == events.RoleBF16 {
		return s.referenceDone(ctx, c, res)
	}
	return s.candidateDone(ctx, d, c, res)
}

// referenceDone keeps a finished BF16 reference in the references bucket
// under every campaign whose reference job it was (the job id derives
// from the campaign, suite version and reference digest).
func (s *Service) referenceDone(ctx context.Context, c events.RunnerJobCompletedData, res events.QualityJobResult) bus.Outcome {
	st, _ := json.Marshal(refState{Status: "done", Result: res})
	for _, task := range s.campaignsOfJob(c.JobID, res.SuiteKey) {
		if _, err := s.refs.Put(ctx, refKey(task, res.SuiteKey), st); err != nil {
			return bus.Retry(0, err)
		}
		s.log.Info("BF16 quality reference stored", "campaign", task, "suite", res.SuiteKey, "generations", res.Generations)
	}
	return bus.Ack()
}

func (s *Service) referenceFailed(ctx context.Context, f events.RunnerJobFailedData) bus.Outcome {
	st, _ := json.Marshal(refState{Status: "failed", Reason: f.Reason + ": " + f.Message})
	for _, l := range s.snapshot() {
		if ReferenceJobID(l.task, l.suite.Key(), l.reference.SHA256) != f.JobID {
			continue
		}
		if _, err := s.refs.Put(ctx, refKey(l.task, l.suite.Key()), st); err != nil {
			return bus.Retry(0, err)
		}
	}
	return bus.Ack()
}

func (s *Service) snapshot() map[string]*loaded {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]*loaded, len(s.suites))
	for k, v := range s.suites {
		out[k] = v
	}
	return out
}

// campaignsOfJob lists the campaigns whose reference job is job.
func (s *Service) campaignsOfJob(job, suiteKey string) []string {
	var out []string
	for _, l := range s.snapshot() {
		if l.suite.Key() == suiteKey && ReferenceJobID(l.task, suiteKey, l.reference.SHA256) == job {
			out = append(out, l.task)
		}
	}
	sort.Strings(out)
	return out
}

// rowRead is one stored graded sample.
type rowRead struct {
	ItemID       string  `ch:"item_id"`
	Domain       string  `ch:"domain"`
	Sample       uint32  `ch:"sample"`
	Score        float64 `ch:"score"`
	Formatted    uint8   `ch:"formatted"`
	OutputTokens uint32  `ch:"output_tokens"`
}

func (s *Service) candidateDone(ctx context.Context, d *bus.Delivery, c events.RunnerJobCompletedData, res events.QualityJobResult) bus.Outcome {
	id := c.SubmissionID
	var task string
	var l *loaded
	for _, ll := range s.snapshot() {
		if ll.suite.Key() == res.SuiteKey && (res.Campaign == "" || res.Campaign == ll.task) {
			task, l = ll.task, ll
		}
	}
	if l == nil {
		return bus.Retry(5*time.Second, fmt.Errorf("quality: suite %s is not loaded yet", res.SuiteKey))
	}
	e, err := s.refs.Get(ctx, refKey(task, res.SuiteKey))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		// The reference is still running (jobs are taken in order, so
		// this is rare with one runner): come back later.
		return bus.Retry(5*time.Second, fmt.Errorf("quality: the BF16 reference of %s is not ready", res.SuiteKey))
	} else if err != nil {
		return bus.Retry(0, err)
	}
	var ref refState
	if err := json.Unmarshal(e.Value(), &ref); err != nil || ref.Status != "done" {
		return s.fail(ctx, c.JobID, id, ReasonNoReference, fmt.Sprintf("the BF16 reference rows of suite %s could not be computed: %s", res.SuiteKey, ref.Reason), nil)
	}
	if res.Empty*2 > res.Generations {
		return s.fail(ctx, c.JobID, id, ReasonEmptyAnswers, fmt.Sprintf("the engine gave no gradeable answer to %d of %d generations (empty replies); a quality figure from the rest would mislead", res.Empty, res.Generations), nil)
	}
	block, kl, err := s.compute(ctx, task, l, id, res, ref.Result)
	var inc *incomplete
	switch {
	case errors.As(err, &inc):
		return s.fail(ctx, c.JobID, id, ReasonIncomplete, err.Error(), nil)
	case errors.Is(err, stats.ErrEmpty), errors.Is(err, stats.ErrTooFew), errors.Is(err, stats.ErrNoHeadroom), errors.Is(err, stats.ErrNoValidDomain),
		errors.Is(err, stats.ErrOutOfRange), errors.Is(err, stats.ErrMixedFormat), errors.Is(err, stats.ErrDistribution), errors.Is(err, stats.ErrMismatch):
		return s.fail(ctx, c.JobID, id, ReasonBadStatistics, err.Error(), nil)
	case err != nil:
		return bus.Retry(0, err)
	}
	md, _ := stats.MeanDrop(block.Domains)
	out := events.QualityCompletedData{SubmissionID: id, DevQuality: block, KL: kl, Simulated: res.Simulated || ref.Result.Simulated,
		TierReason: stats.Reason(block.Tier), MeanDrop: md, BundleDigest: c.CheckpointDigest}
	s.log.Info("quality measured", "submission", id, "tier", block.Tier, "recovery", block.Recovery, "worst", block.WorstDomain, "worst_upper", block.WorstUpper)
	if _, err := s.bus.PublishNew(ctx, events.DeriveID(c.JobID, string(events.QualityCompleted)), events.QualityCompleted, events.Source(Name), id, out); err != nil {
		return bus.Retry(0, err)
	}
	return bus.Ack()
}

// incomplete is a job whose rows are fewer than its generations.
type incomplete struct{ role, msg string }

func (e *incomplete) Error() string { return e.msg }

// read reads one role's rows of a suite, deduplicated (FINAL).
func (s *Service) read(ctx context.Context, task, suiteKey, submission, role string) ([]rowRead, error) {
	var rows []rowRead
	err := s.opts.Store.Select(ctx, &rows, "SELECT item_id, domain, sample, score, formatted, output_tokens FROM quality_items FINAL "+
		"WHERE campaign = ? AND suite_version = ? AND submission_id = ? AND role = ? ORDER BY item_id, sample", task, suiteKey, submission, role)
	if err != nil {
		return nil, fmt.Errorf("quality: read %s rows: %w", role, err)
	}
	return rows, nil
}

// compute pairs the candidate's rows with BF16's per item and builds the
// block.
func (s *Service) compute(ctx context.Context, task string, l *loaded, id string, res, ref events.QualityJobResult) (record.Quality, *record.KL, error) {
	cand, err := s.read(ctx, task, res.SuiteKey, id, events.RoleCandidate)
	if err != nil {
		return record.Quality{}, nil, err
	}
	bf, err := s.read(ctx, task, res.SuiteKey, ReferenceSubmission, events.RoleBF16)
	if err != nil {
		return record.Quality{}, nil, err
	}
	if len(cand) != res.Generations {
		return record.Quality{}, nil, &incomplete{events.RoleCandidate, fmt.Sprintf("the store holds %d of the candidate's %d graded generations", len(cand), res.Generations)}
	}
	if len(bf) != ref.Generations {
		return record.Quality{}, nil, &incomplete{events.RoleBF16, fmt.Sprintf("the store holds %d of the BF16 reference's %d graded generations", len(bf), ref.Generations)}
	}
	type acc struct {
		score, formatted float64
		n, tokensZero    int
	}
	agg := func(rows []rowRead) map[string]*acc {
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
		it, known := l.items[itemID]
		if !ok || !known {
			return record.Quality{}, nil, &incomplete{events.RoleBF16, fmt.Sprintf("item %s has no BF16 reference row (suite %s)", itemID, res.SuiteKey)}
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
			return record.Quality{}, nil, fmt.Errorf("domain %s: %w", d, err)
		}
		domains[d] = dom
	}
	q, err := stats.Overall(domains)
	if err != nil {
		return record.Quality{}, nil, err
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
		return record.Quality{}, nil, fmt.Errorf("length: %w", err)
	}
	return q, klOf(res, ref), nil
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
