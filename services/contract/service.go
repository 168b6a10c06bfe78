// Package service is the contract stage: for each built bundle it reads
// config.json and the safetensors headers from the artifact store (never
// the tensor data), checks them against the campaign's source model and the
// participant's declaration, and publishes contract.completed, or
// contract.failed naming each violation with the contract block beside it.
//
// The stage is declared once (Stage) on the stage kit, which owns the
// protocol (started, completed, failed, ids, retries); the decision is
// Checker.Run, which needs no bus. Component defines the service for the
// contract command and `arena up`.
package contract

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/lowbarena/lowbarena/adapters/hub"
	"github.com/lowbarena/lowbarena/domain/campaign"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/app"
	"github.com/lowbarena/lowbarena/platform/artifact"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/stage"
)

// Name is the contract service's name: its stage, event source and
// durable.
const Name = "contract"

// Consumer is the stage's durable consumer, filtered on the stage's
// input topic.
var Consumer = bus.ConsumerConfig{
	Name:     Name,
	Subjects: []string{events.Build.Completed.Filter()},
	AckWait:  30 * time.Second,
	// A contract by reference reads headers over HTTP and may take
	// seconds: a short buffer keeps inputs from waiting out AckWait in it.
	Prefetch: 16,
	// A check waits on the artifact store (or a hub) for each file it
	// reads, so several run at once; each is a pure function of its
	// input, so their order does not matter.
	Handlers: 4,
}

// Stage is the contract stage on the kit: build.completed in,
// contract.completed or contract.failed out.
//
// Idempotency: every output's id derives from the input event's id (the
// kit), and the check is a pure function of the stored artifact and the
// campaign, so a redelivery republishes the same events, which JetStream
// drops.
//
// Ack semantics (the kit's): a refused input or a broken contract is a
// contract.failed and an Ack; an artifact store that does not answer is
// a Retry.
func Stage(c *Checker) stage.Stage[events.BuildCompletedData, events.ContractCompletedData] {
	return stage.Stage[events.BuildCompletedData, events.ContractCompletedData]{
		Input:    events.Build.Completed,
		Output:   events.Contract,
		Consumer: Consumer,
		Run:      c.Run,
		Describe: describe,
	}
}

// describe is what the log line of a kept contract says.
func describe(out events.ContractCompletedData) []any {
	return []any{"detected", out.DetectedPrecision, "bits_per_weight", out.Contract.BitsPerWeight}
}

// Options configure the contract stage.
type Options struct {
	// Campaigns are the tasks this arena runs.
	Campaigns campaign.Source
	// Hub configures the client that reads checkpoints by reference.
	Hub hub.Options
}

// Service is the contract stage bound to its artifact store.
type Service struct {
	bus     *bus.Bus
	log     *slog.Logger
	checker *Checker
}

// New opens the artifact store on b's JetStream.
func New(ctx context.Context, b *bus.Bus, log *slog.Logger, o Options) (*Service, error) {
	arts, err := artifact.NewJetStream(ctx, b.JetStream(), bus.ObjectArtifacts)
	if err != nil {
		return nil, fmt.Errorf("contract: %w", err)
	}
	if o.Campaigns == nil {
		o.Campaigns = campaign.Set{}
	}
	if len(o.Campaigns.Tasks()) == 0 {
		log.Warn("no campaigns: every submission will be refused with " + string(reason.CampaignUnknownTask))
	}
	return &Service{bus: b, log: log, checker: &Checker{Artifacts: arts, Campaigns: o.Campaigns, Hub: hub.New(o.Hub)}}, nil
}

// Stage is the service's stage, bound to its artifact store.
func (s *Service) Stage() stage.Stage[events.BuildCompletedData, events.ContractCompletedData] {
	return Stage(s.checker)
}

// Actors returns the stage's consumer.
func (s *Service) Actors() []app.Actor {
	return []app.Actor{app.StageActor(s.Stage().Bind(s.bus, s.log))}
}

// Component is the contract service, for its command and `arena up`
// (which sets --campaigns to its campaigns folder).
func Component() app.Component {
	var camps *app.Campaigns
	var hubOptions func(*slog.Logger) (hub.Options, error)
	return app.Component{
		Name:   Name,
		Stages: []string{Name},
		Flags: func(fs *flag.FlagSet) {
			camps = app.CampaignsFlags(fs)
			hubOptions = app.HubFlags(fs)
		},
		Build: func(ctx context.Context, rt *app.Runtime) ([]app.Actor, error) {
			set, follow, err := camps.Open(ctx, rt)
			if err != nil {
				return nil, fmt.Errorf("contract: %w", err)
			}
			ho, err := hubOptions(rt.Log)
			if err != nil {
				return nil, err
			}
			s, err := New(ctx, rt.Bus, rt.Log, Options{Campaigns: set, Hub: ho})
			if err != nil {
				return nil, err
			}
			return append(s.Actors(), follow...), nil
		},
	}
}
