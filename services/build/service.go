// Package service is the build stage: it takes each uploaded bundle,
// checks it, digests every file and the whole, stores it as a content
// addressed artifact and publishes build.completed, or build.failed with a
// reason the participant can act on.
//
// The stage is declared once (Stage) on the stage kit, which owns the
// protocol (started, completed, failed, ids, retries); the decision is
// Builder.Build, which needs no bus. Component defines the service for
// the build command and `arena up`.
package build

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/adapters/hub"
	"github.com/lowbarena/lowbarena/domain/campaign"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/app"
	"github.com/lowbarena/lowbarena/platform/artifact"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/stage"
	"github.com/lowbarena/lowbarena/services/build/unpack"
)

// Name is the build service's name: its stage, event source and durable.
const Name = "build"

// EnvWork names the work folder's environment variable.
const EnvWork = "LOWBARENA_BUILD_WORK"

// Consumer is the stage's durable consumer, filtered on the stage's
// input topic. Bundles can be large, so the consume loop heartbeats
// (InProgress every AckWait/3) and takes them a few at a time.
//
// Builds run Handlers at once: a build is CPU work (gunzip, a sha256 of
// the archive and of every file) between waits on the stores, and one at
// a time it used one core of two (BenchmarkIntakeVsFloor). Running
// builds at once keeps every guarantee: each works in a folder of its
// own, artifacts are content addressed (two puts of one file store it
// once), and the first submission of a digest is decided by one KV
// create (Bundles.First), whichever build gets there first: every
// submission of a digest names the same first one. Two submissions of
// one bundle built at the same moment may be recorded in either order
// (DuplicateOf is what the record and `arena show` say; nothing is
// ranked by it). Four bound the work folder to four unpacked bundles.
var Consumer = bus.ConsumerConfig{
	Name:     Name,
	Subjects: []string{events.Submission.Received.Filter()},
	AckWait:  60 * time.Second,
	Prefetch: 4,
	Handlers: 4,
}

// Stage is the build stage on the kit: submission.received in,
// build.completed or build.failed out.
//
// Idempotency: every output's id derives from the input event's id (the
// kit), so a redelivery after a crash republishes the same ids and
// JetStream drops the duplicates; Build itself is idempotent (see
// Builder.Build).
//
// Ack semantics (the kit's): a refused bundle is a build.failed and an
// Ack (the participant must act, not the arena); a store or NATS error is
// a Retry.
func Stage(b *Builder) stage.Stage[events.SubmissionReceivedData, events.BuildCompletedData] {
	return stage.Stage[events.SubmissionReceivedData, events.BuildCompletedData]{
		Input:    events.Submission.Received,
		Output:   events.Build,
		Consumer: Consumer,
		Run:      b.Build,
		Describe: describe,
	}
}

// describe is what the log line of a built bundle says.
func describe(out events.BuildCompletedData) []any {
	return []any{"digest", short(out.BundleDigest), "files", len(out.Files), "bytes", out.Bytes, "duplicate_of", out.DuplicateOf}
}

// Options configure the build stage.
type Options struct {
	// WorkDir is where bundles are unpacked while they are checked (one
	// temporary folder per bundle, removed after); default the system's
	// temporary folder.
	WorkDir string
	// Limits bound a bundle.
	Limits unpack.Limits
	// MaxUploadBytes bounds an uploaded archive.
	MaxUploadBytes int64
	// Hub configures the client of checkpoints by reference.
	Hub hub.Options
	// Campaigns are the tasks this arena runs, whose pinned engine
	// sources engine patches are checked against; nil is none.
	Campaigns campaign.Source
}

// Service is the build stage bound to its stores.
type Service struct {
	bus     *bus.Bus
	log     *slog.Logger
	builder *Builder
	// arena is the ARENA stream, read for a submission's build outcome.
	arena jetstream.Stream
}

// New opens the stores the stage needs on b's JetStream: the uploads,
// the artifact store and the bundles bucket.
func New(ctx context.Context, b *bus.Bus, log *slog.Logger, o Options) (*Service, error) {
	js := b.JetStream()
	arts, err := artifact.NewJetStream(ctx, js, bus.ObjectArtifacts)
	if err != nil {
		return nil, fmt.Errorf("build: %w", err)
	}
	kv, err := js.KeyValue(ctx, bus.BucketBundles)
	if err != nil {
		return nil, fmt.Errorf("build: open bucket %s: %w", bus.BucketBundles, err)
	}
	arena, err := js.Stream(ctx, events.StreamArena)
	if err != nil {
		return nil, fmt.Errorf("build: look up stream %s: %w", events.StreamArena, err)
	}
	if o.WorkDir == "" {
		o.WorkDir = os.TempDir()
	}
	if err := os.MkdirAll(o.WorkDir, 0o755); err != nil {
		return nil, fmt.Errorf("build: work folder: %w", err)
	}
	builder := &Builder{Uploads: JetStreamUploads{JS: js}, Artifacts: arts, Bundles: KVBundles{KV: kv}, WorkDir: o.WorkDir, Limits: o.Limits,
		MaxUploadBytes: o.MaxUploadBytes, Hub: hub.New(o.Hub), Campaigns: o.Campaigns}
	return &Service{bus: b, log: log, builder: builder, arena: arena}, nil
}

// Stage is the service's stage, bound to its stores: Stage's, with the
// upload deleted once the build's outcome is published.
//
// Invariant: an upload is deleted only after its submission's
// build.completed or build.failed is stored in ARENA (the kit's Settled),
// and a submission.received whose build outcome ARENA already holds is
// acked as settled (stage.ErrSettled), never built again: so a
// redelivery after the delete (the ack lost, the process killed between
// the delete and the ack) neither refuses the submission for its missing
// upload (bundle_not_found) nor publishes a second outcome. The check
// reads ARENA, the source of truth, not a projection of it that may lag.
// An upload whose delete failed is dropped by the uploads store's TTL
// (bus.Limits.UploadsMaxAge).
func (s *Service) Stage() stage.Stage[events.SubmissionReceivedData, events.BuildCompletedData] {
	st := Stage(s.builder)
	build := st.Run
	st.Run = func(ctx context.Context, in events.SubmissionReceivedData) (events.BuildCompletedData, error) {
		done, err := s.published(ctx, in.SubmissionID)
		if err != nil {
			return events.BuildCompletedData{}, err
		}
		if done {
			return events.BuildCompletedData{}, fmt.Errorf("%w: %s was built", stage.ErrSettled, in.SubmissionID)
		}
		return build(ctx, in)
	}
	st.Settled = s.deleteUpload
	return st
}

// published says ARENA holds a build outcome (completed or failed) for
// the submission id.
func (s *Service) published(ctx context.Context, id string) (bool, error) {
	if _, ok, err := bus.Last(ctx, s.arena, events.Build.Completed, id); err != nil || ok {
		return ok, err
	}
	_, ok, err := bus.Last(ctx, s.arena, events.Build.Failed, id)
	return ok, err
}

// deleteUpload deletes the submission's upload once its outcome is
// published: the artifact (or the refusal) is what the arena keeps. A
// bundle submitted by reference with no upload, or an upload already
// gone, leaves nothing to do; a failed delete is logged, and the upload
// expires with the store's TTL.
func (s *Service) deleteUpload(ctx context.Context, in events.SubmissionReceivedData) {
	ref := in.Bundle
	if ref.Store != "jetstream" || ref.Bucket != bus.ObjectUploads || ref.Object == "" {
		return
	}
	err := JetStreamUploads{JS: s.bus.JetStream()}.Delete(ctx, ref)
	if err != nil {
		s.log.Warn("delete the built upload (it expires with the uploads store's TTL)", "submission", in.SubmissionID, "object", ref.Object, "err", err)
		return
	}
	s.log.Debug("deleted the built upload", "submission", in.SubmissionID, "object", ref.Object, "bytes", ref.Size)
}

// Actors returns the stage's consumer.
func (s *Service) Actors() []app.Actor {
	return []app.Actor{app.StageActor(s.Stage().Bind(s.bus, s.log))}
}

// Component is the build service, for its command and `arena up` (which
// sets --work to its data folder's build folder and --campaigns to its
// campaigns folder).
func Component() app.Component {
	o := Options{Limits: unpack.DefaultLimits(), MaxUploadBytes: unpack.DefaultMaxUploadBytes}
	var hubOptions func(*slog.Logger) (hub.Options, error)
	var camps *app.Campaigns
	return app.Component{
		Name:   Name,
		Stages: []string{Name},
		Flags: func(fs *flag.FlagSet) {
			fs.StringVar(&o.WorkDir, "work", app.EnvOr(EnvWork, os.TempDir()), "folder where bundles are unpacked while checked (env "+EnvWork+")")
			fs.IntVar(&o.Limits.MaxFiles, "max-files", o.Limits.MaxFiles, "most files a bundle may hold")
			fs.Int64Var(&o.Limits.MaxBytes, "max-bytes", o.Limits.MaxBytes, "most bytes a bundle may hold, unpacked")
			fs.Int64Var(&o.Limits.MaxFileBytes, "max-file-bytes", o.Limits.MaxFileBytes, "most bytes one file of a bundle may hold")
			fs.Int64Var(&o.MaxUploadBytes, "max-upload-bytes", o.MaxUploadBytes, "most bytes an uploaded archive may hold; larger checkpoints are submitted by reference")
			hubOptions = app.HubFlags(fs)
			camps = app.CampaignsFlags(fs)
		},
		Build: func(ctx context.Context, rt *app.Runtime) ([]app.Actor, error) {
			var err error
			if o.Hub, err = hubOptions(rt.Log); err != nil {
				return nil, err
			}
			var follow []app.Actor
			if o.Campaigns, follow, err = camps.Open(ctx, rt); err != nil {
				return nil, fmt.Errorf("build: %w", err)
			}
			s, err := New(ctx, rt.Bus, rt.Log, o)
			if err != nil {
				return nil, err
			}
			return append(s.Actors(), follow...), nil
		},
	}
}
