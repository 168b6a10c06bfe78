// Package service is the efficiency stage: for every checkpoint that kept
// its contract it asks a GPU runner to measure it beside the campaign's
// BF16 reference on the same pod and to replay it under its budget, and
// turns the runner's measurement into the record's efficiency block:
// speeds and memories against BF16, the peak breakdown, the engine's
// start-up, the budget verdicts and the GPU-hours.
//
// It is a job stage of the stage kit (platform/stage): Job builds the
// runner job of a kept contract, Result turns the runner's measurement
// into the stage's outcome; the kit owns started, completed, failed, the
// ids and the ack semantics.
package efficiency

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/domain/campaign"
	"github.com/lowbarena/lowbarena/domain/formula"
	"github.com/lowbarena/lowbarena/domain/suite"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/app"
	"github.com/lowbarena/lowbarena/platform/artifact"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/stage"
	"github.com/lowbarena/lowbarena/platform/store"
)

// Name is the efficiency service's name: its stage, event source and
// durables.
const Name = "efficiency"

// Options configure the stage.
type Options struct {
	// Campaigns are the tasks this arena runs, looked up when a
	// submission's job is made and when its result comes back (nil:
	// none).
	Campaigns campaign.Source
	// Store holds the quality job's answers (quality_answers), which the
	// audits compare with the engine's answers under load; nil leaves
	// those two audits skipped.
	Store store.Store
	// NoAudits measures without gathering the audits' evidence.
	NoAudits bool
}

// Service is the efficiency stage bound to its artifact store.
type Service struct {
	bus       *bus.Bus
	artifacts artifact.Store
	// arena is the ARENA stream, read for a submission's quality outcome.
	arena jetstream.Stream
	opts  Options
	log   *slog.Logger

	mu     sync.Mutex
	refs   map[string]events.BundleRef // reference or engine source folder -> its stored bundle
	suites map[string]stored           // suite folder -> its key and stored bundle
}

// stored is a suite folder the stage has put in the artifact store.
type stored struct {
	st  *suite.Suite
	ref events.BundleRef
}

// New opens the artifact store and the ARENA stream.
func New(ctx context.Context, b *bus.Bus, log *slog.Logger, o Options) (*Service, error) {
	if o.Campaigns == nil {
		o.Campaigns = campaign.Set{}
	}
	arts, err := artifact.NewJetStream(ctx, b.JetStream(), bus.ObjectArtifacts)
	if err != nil {
		return nil, fmt.Errorf("efficiency: %w", err)
	}
	arena, err := b.JetStream().Stream(ctx, events.StreamArena)
	if err != nil {
		return nil, fmt.Errorf("efficiency: open stream %s: %w", events.StreamArena, err)
	}
	if log == nil {
		log = slog.Default()
	}
	return &Service{bus: b, artifacts: arts, arena: arena, opts: o, log: log, refs: map[string]events.BundleRef{},
		suites: map[string]stored{}}, nil
}

// Requests is the durable that turns kept contracts into runner jobs.
var Requests = bus.ConsumerConfig{
	Name:     Name,
	Subjects: []string{events.Contract.Completed.Filter()},
	AckWait:  60 * time.Second,
	Prefetch: 4,
}

// Results is the durable that turns runner outcomes of efficiency jobs
// into the stage's (their subjects carry the kind). A measurement with audit evidence waits for the
// submission's quality outcome, retried every AuditWait for up to an
// hour (MaxDeliver): with one runner, its quality job may queue behind
// other submissions' jobs.
var Results = bus.ConsumerConfig{
	Name:       Name + "-results",
	Subjects:   events.JobOutcomeFilters(events.JobEfficiency),
	Prefetch:   8,
	MaxDeliver: 360,
}

// AuditWait is how long a measurement waits for its quality outcome
// before it looks again.
const AuditWait = 10 * time.Second

// Stage is the efficiency stage's declaration.
//
// Idempotency: the job id and its request's event id derive from the
// submission, so a redelivered contract.completed queues nothing new; the
// stage's completed and failed of a job derive from the job id, so a job
// whose outcome arrives twice ends the stage once. Runner failures pass
// on with the kit's default (reason, message, and the log tail, pod,
// runner and GPU-hours as the detail when there is a log tail).
func (s *Service) Stage() stage.JobStage[events.ContractCompletedData, events.EfficiencyCompletedData] {
	return stage.JobStage[events.ContractCompletedData, events.EfficiencyCompletedData]{
		Input:    events.Contract.Completed,
		Output:   events.Efficiency,
		Kind:     events.JobEfficiency,
		Requests: Requests,
		Results:  Results,
		Jobs: func(ctx context.Context, in events.ContractCompletedData) ([]stage.Job, error) {
			var audit AuditSuite
			if !s.opts.NoAudits {
				audit = func(c *campaign.Campaign, split string) (*events.AuditJobParams, error) {
					return s.auditParams(ctx, c, split)
				}
			}
			j, err := Job(in, s.opts.Campaigns, func(c *campaign.Campaign) (events.BundleRef, error) { return s.reference(ctx, c) }, audit,
				func(c *campaign.Campaign) (events.BundleRef, error) { return s.engineSource(ctx, c) })
			if err != nil {
				return nil, err
			}
			return []stage.Job{j}, nil
		},
		Result:   s.result,
		Describe: describe,
	}
}

// Actors returns the stage as one actor (its request and result
// consumers).
func (s *Service) Actors() []app.Actor {
	return []app.Actor{app.StageActor(s.Stage().Bind(s.bus, s.log))}
}

// Component is the efficiency service, for its binary and `arena up`.
func Component() app.Component {
	var camps *app.Campaigns
	return app.Component{
		Name:   Name,
		Stages: []string{Name},
		Store:  true,
		Flags:  func(fs *flag.FlagSet) { camps = app.CampaignsFlags(fs) },
		Build: func(ctx context.Context, rt *app.Runtime) ([]app.Actor, error) {
			if camps == nil {
				return nil, fmt.Errorf("efficiency: %w: the flags were never registered", app.ErrConfig)
			}
			set, follow, err := camps.Open(ctx, rt)
			if err != nil {
				return nil, fmt.Errorf("efficiency: %w", err)
			}
			s, err := New(ctx, rt.Bus, rt.Log, Options{Campaigns: set, Store: rt.Store})
			if err != nil {
				return nil, err
			}
			return append(s.Actors(), follow...), nil
		},
	}
}

// reference stores the campaign's BF16 reference checkpoint in the
// artifact store (content addressed: storing it again is a no-op) and
// returns its reference, once per campaign per process. Job has checked
// the folder holds weights before.
func (s *Service) reference(ctx context.Context, c *campaign.Campaign) (events.BundleRef, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ref, ok := s.refs[c.ReferenceDir()]; ok {
		return ref, nil
	}
	ref, err := artifact.PutDir(ctx, s.artifacts, c.ReferenceDir())
	if err != nil {
		return events.BundleRef{}, fmt.Errorf("efficiency: store the BF16 reference of %s: %w", c.TaskID, err)
	}
	s.log.Info("BF16 reference stored", "campaign", c.TaskID, "digest", ref.SHA256[:12], "files", ref.Files, "bytes", ref.Size)
	s.refs[c.ReferenceDir()] = ref
	return ref, nil
}

// engineSource stores the campaign's pinned engine source tree in the
// artifact store (content addressed: a tree stored already, by this
// stage, another or the campaign's own push, stores nothing new) and
// returns its reference, once per source folder per process.
func (s *Service) engineSource(ctx context.Context, c *campaign.Campaign) (events.BundleRef, error) {
	dir := c.EngineSourceDir()
	s.mu.Lock()
	defer s.mu.Unlock()
	if ref, ok := s.refs[dir]; ok {
		return ref, nil
	}
	ref, err := artifact.PutTree(ctx, s.artifacts, dir)
	if err != nil {
		return events.BundleRef{}, err
	}
	s.log.Info("engine source stored", "campaign", c.TaskID, "digest", ref.SHA256[:12], "files", ref.Files, "bytes", ref.Size)
	s.refs[dir] = ref
	return ref, nil
}

// describe is what the log line of a measured submission says.
func describe(out events.EfficiencyCompletedData) []any {
	return []any{"serve_speed", formula.Round(out.Efficiency[formula.First]/out.AnchorEfficiency[formula.First], 4),
		"serve_peak_gib", out.PeakMemory[formula.First].PeakGiB, "bf16_serve_peak_gib", out.AnchorPeakMemory[formula.First].PeakGiB,
		"budget", out.BudgetReason == "", "gpu_hours", out.GPUHours, "simulated", out.Simulated}
}
