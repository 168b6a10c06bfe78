// Package service is the quality stage: for every checkpoint that kept its
// contract it has a GPU runner answer the campaign's eval suite, grades
// the code answers the runner left ungraded in its own sandbox (grade.go:
// a GPU runner never runs a model's program), pairs the graded items with
// the BF16 reference's (computed once per campaign and suite version,
// stored per item in quality_items), and publishes the record's
// dev_quality block: per-domain drops with paired standard errors,
// recovery, the tier, length and KL against BF16.
//
// It is a job stage of the stage kit (platform/stage). A kept contract
// becomes the candidate's job, and the BF16 reference's job when its rows
// are not stored yet; the reference's outcome belongs to no submission
// and is kept in the stage's own bucket (quality_references); a
// candidate's outcome becomes quality.completed or quality.failed once its
// reference is there. Everything a result needs is read from what the job
// carries, the campaigns and the bucket, never from what this process saw
// before, so a restart between a request and its result loses nothing.
package quality

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/domain/campaign"
	"github.com/lowbarena/lowbarena/domain/suite"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/app"
	"github.com/lowbarena/lowbarena/platform/artifact"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/stage"
	"github.com/lowbarena/lowbarena/platform/store"
)

// Name is the quality service's name: its stage, event source and
// durables.
const Name = "quality"

// ReferenceSubmission is the submission id of the BF16 reference's rows.
const ReferenceSubmission = "bf16-reference"

// ReferenceWait is how long a candidate that finished before its BF16
// reference waits before it is tried again.
const ReferenceWait = 5 * time.Second

// Options configure the stage.
type Options struct {
	// Campaigns are the tasks this arena runs, looked up when a
	// submission's job is made and when its result comes back (nil:
	// none).
	Campaigns campaign.Source
	// Store holds quality_items and quality_answers (required).
	Store store.Store
	// GradeConcurrency is how many code answers are graded at a time in
	// the process (default DefaultGradeConcurrency).
	GradeConcurrency int
}

// Service is the quality stage bound to its stores.
type Service struct {
	bus       *bus.Bus
	artifacts artifact.Store
	refs      jetstream.KeyValue // bus.BucketQualityReferences, the stage's own
	opts      Options
	log       *slog.Logger

	// Caches, never state: a miss loads from the campaigns folder or
	// stores again (content addressed, a no-op).
	mu     sync.Mutex
	suites map[string]*suite.Suite     // task id/split -> its suite
	stored map[string]events.BundleRef // folder -> the folder in the artifact store

	// The grading step (grade.go): slots bounds the programs running at
	// a time, grading holds one mutex per role's answers.
	slots   chan struct{}
	grading sync.Map // campaign, suite key, submission, role -> *sync.Mutex
}

// New opens the stores the stage needs.
func New(ctx context.Context, b *bus.Bus, log *slog.Logger, o Options) (*Service, error) {
	if o.Campaigns == nil {
		o.Campaigns = campaign.Set{}
	}
	if o.Store == nil {
		return nil, errors.New("quality: a store is required (quality_items)")
	}
	if log == nil {
		log = slog.Default()
	}
	arts, err := artifact.NewJetStream(ctx, b.JetStream(), bus.ObjectArtifacts)
	if err != nil {
		return nil, fmt.Errorf("quality: %w", err)
	}
	refs, err := b.JetStream().KeyValue(ctx, bus.BucketQualityReferences)
	if err != nil {
		return nil, fmt.Errorf("quality: open bucket %s: %w", bus.BucketQualityReferences, err)
	}
	if o.GradeConcurrency <= 0 {
		o.GradeConcurrency = DefaultGradeConcurrency
	}
	s := &Service{bus: b, artifacts: arts, refs: refs, opts: o, log: log,
		suites: map[string]*suite.Suite{}, stored: map[string]events.BundleRef{}, slots: make(chan struct{}, o.GradeConcurrency)}
	return s, nil
}

// Requests is the durable that turns kept contracts into quality jobs.
var Requests = bus.ConsumerConfig{
	Name:     Name,
	Subjects: []string{events.Contract.Completed.Filter()},
	AckWait:  60 * time.Second,
	Prefetch: 4,
}

// Results is the durable that turns runner outcomes of quality jobs into
// the stage's. A candidate that finishes before its BF16 reference is
// retried every ReferenceWait, for up to about ten minutes.
var Results = bus.ConsumerConfig{
	Name:       Name + "-results",
	Subjects:   events.JobOutcomeFilters(events.JobQuality),
	Prefetch:   8,
	MaxDeliver: 120,
}

// Stage is the quality stage's declaration.
//
// Idempotency: job ids and their request ids derive from the submission,
// or from the campaign, suite version and reference digest, so however
// often a contract arrives one job of each is queued; the stage's
// completed and failed of a candidate derive from its job id. Ack
// semantics: a campaign that cannot evaluate is quality.failed and an
// ack; a candidate whose reference is not done yet waits (RetryAfter);
// store and NATS errors are retries.
func (s *Service) Stage() stage.JobStage[events.ContractCompletedData, events.QualityCompletedData] {
	return stage.JobStage[events.ContractCompletedData, events.QualityCompletedData]{
		Input:    events.Contract.Completed,
		Output:   events.Quality,
		Kind:     events.JobQuality,
		Requests: Requests,
		Results:  Results,
		Jobs:     s.jobs,
		Result:   s.result,
		Failure:  Failure,
		Shared:   s.shared,
		Describe: describe,
	}
}

// Actors returns the stage as one actor (its request and result
// consumers).
func (s *Service) Actors() []app.Actor {
	return []app.Actor{app.StageActor(s.Stage().Bind(s.bus, s.log))}
}

// EnvGradeConcurrency names the environment variable of
// --grade-concurrency.
const EnvGradeConcurrency = "LOWBARENA_GRADE_CONCURRENCY"

// Component is the quality service, for its binary and `arena up`. It
// needs the store (quality_items) and refuses to start without one. It
// grades the suites' code answers in its own process, so its machine
// needs bubblewrap with unprivileged user namespaces (the GPU runners do
// not); its readiness says so when a campaign's suite has code items and
// the sandbox does not work here.
func Component() app.Component {
	var (
		camps *app.Campaigns
		conc  *int
	)
	return app.Component{
		Name:   Name,
		Stages: []string{Name},
		Store:  true,
		Flags: func(fs *flag.FlagSet) {
			camps = app.CampaignsFlags(fs)
			def := DefaultGradeConcurrency
			if n, err := strconv.Atoi(os.Getenv(EnvGradeConcurrency)); err == nil && n > 0 {
				def = n
			}
			conc = fs.Int("grade-concurrency", def, "how many code answers the stage grades at a time, each one sandboxed python process (about a CPU core) (env "+EnvGradeConcurrency+")")
		},
		Build: func(ctx context.Context, rt *app.Runtime) ([]app.Actor, error) {
			if camps == nil {
				return nil, fmt.Errorf("quality: %w: the flags were never registered", app.ErrConfig)
			}
			if rt.Store == nil {
				return nil, fmt.Errorf("quality: %w: a store is required (--store or $%s): the runners write quality_items there", app.ErrConfig, app.EnvStore)
			}
			set, follow, err := camps.Open(ctx, rt)
			if err != nil {
				return nil, fmt.Errorf("quality: %w", err)
			}
			if conc == nil || *conc < 1 {
				return nil, fmt.Errorf("quality: %w: --grade-concurrency must be at least 1", app.ErrConfig)
			}
			s, err := New(ctx, rt.Bus, rt.Log, Options{Campaigns: set, Store: rt.Store, GradeConcurrency: *conc})
			if err != nil {
				return nil, err
			}
			if err := s.sandboxReady(ctx); err != nil {
				rt.Log.Warn("code answers cannot be graded on this machine: their submissions fail with sandbox_unavailable until it is fixed", "err", err)
			}
			rt.AddReadyCheck(s.sandboxReady)
			return append(s.Actors(), follow...), nil
		},
	}
}

// describe is what the log line of a measured submission says.
func describe(out events.QualityCompletedData) []any {
	q := out.DevQuality
	return []any{"tier", q.Tier, "recovery", q.Recovery, "worst", q.WorstDomain, "worst_upper", q.WorstUpper}
}
