// Package service is the contract stage: for each built bundle it reads
// config.json and the safetensors headers from the artifact store (never
// the tensor data), checks them against the campaign's source model and the
// participant's declaration, and publishes contract.completed, or
// contract.failed naming each violation with the contract block beside it.
// The contract command and `arena up` both wire it.
package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/artifact"
	"github.com/lowbarena/lowbarena/services/domain/bundle"
	"github.com/lowbarena/lowbarena/events/bus"
	"github.com/lowbarena/lowbarena/services/domain/record"
	"github.com/lowbarena/lowbarena/services/domain/analyze"
	"github.com/lowbarena/lowbarena/services/domain/campaign"
	"github.com/lowbarena/lowbarena/services/domain/safetensors"
	"github.com/lowbarena/lowbarena/services/runtime"
)

// Name is the contract service's name: its event source and durable.
const Name = "contract"

// Reason codes of contract.failed beside the violation codes of package
// analyze and the file codes of package safetensors.
const (
	CodeArtifactMissing = "artifact_missing"
	CodeArtifactCorrupt = "artifact_corrupt"
	CodeUnknownTask     = "campaign_unknown_task"
	CodeBadDeclaration  = "bundle_bad_declaration"
	CodeMissingConfig   = "bundle_missing_config"
)

// maxSmallFile bounds submission.json and config.json read back.
const maxSmallFile = 4 << 20

// Options configure the contract stage.
type Options struct {
	// Campaigns are the tasks this arena runs.
	Campaigns campaign.Set
}

// Service is the contract stage.
type Service struct {
	bus       *bus.Bus
	artifacts artifact.Store
	campaigns campaign.Set
	log       *slog.Logger
}

// New opens the artifact store on b's JetStream.
func New(ctx context.Context, b *bus.Bus, log *slog.Logger, o Options) (*Service, error) {
	arts, err := artifact.NewJetStream(ctx, b.JetStream(), bus.ObjectArtifacts)
	if err != nil {
		return nil, fmt.Errorf("contract: %w", err)
	}
	if len(o.Campaigns) == 0 {
		log.Warn("no campaigns: every submission will be refused with " + CodeUnknownTask)
	}
	return &Service{bus: b, artifacts: arts, campaigns: o.Campaigns, log: log}, nil
}

// Actors returns the stage's consumer.
func (s *Service) Actors() []runtime.Actor {
	return []runtime.Actor{{Name: "contract", Run: s.Run}}
}

// Consumer is the stage's durable consumer.
var Consumer = bus.ConsumerConfig{
	Name:     "contract",
	Subjects: []string{events.SubjectRootArena + ".build.completed.>"},
	AckWait:  30 * time.Second,
}

// Run consumes build.completed until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	return s.bus.Consume(ctx, Consumer, s.Handle)
}

// refusal is an input the stage cannot check: the submission fails with
// Code.
type refusal struct {
	Code    string
	Message string
}

func (r *refusal) Error() string { return r.Code + ": " + r.Message }

// Handle checks one built bundle.
//
// Idempotency: outputs have ids derived from the input event's id, and the
// check is a pure function of the stored artifact and the campaign, so a
// redelivery republishes the same events, which JetStream drops.
//
// Ack semantics: a refused or broken contract is a contract.failed and an
// Ack; an artifact store that does not answer is a Retry.
func (s *Service) Handle(ctx context.Context, d *bus.Delivery) bus.Outcome {
	var in events.BuildCompletedData
	if err := d.Decode(&in); err != nil {
		return bus.Poison("bad_payload", err)
	}
	id, src := in.SubmissionID, events.Source(Name)
	publish := func(t events.Type, data any) error {
		_, err := s.bus.PublishNew(ctx, events.DeriveID(d.Event.ID(), string(t)), t, src, id, data)
		return err
	}
	if err := publish(events.ContractStarted, events.StageStartedData{SubmissionID: id, Stage: Name, Attempt: int(d.NumDelivered)}); err != nil {
		return bus.Retry(0, err)
	}
	t0 := time.Now()
	c, read, decl, err := s.check(ctx, in)
	var r *refusal
	switch {
	case errors.As(err, &r):
		s.log.Info("contract refused", "submission", id, "reason", r.Code, "message", r.Message)
		err = publish(events.ContractFailed, events.StageFailedData{SubmissionID: id, Stage: Name, Reason: r.Code, Message: r.Message})
	case err != nil:
		return bus.Retry(0, err)
	case !c.OK:
		detail, merr := json.Marshal(c)
		if merr != nil {
			return bus.Poison("contract_unencodable", merr)
		}
		msgs := make([]string, len(c.Violations))
		for i, v := range c.Violations {
			msgs[i] = v.Code + ": " + v.Message
		}
		s.log.Info("contract broken", "submission", id, "violations", len(c.Violations), "detected", c.DetectedPrecision, "declared", c.DeclaredPrecision)
		err = publish(events.ContractFailed, events.StageFailedData{SubmissionID: id, Stage: Name, Reason: c.Violations[0].Code,
			Message: "the checkpoint breaks its contract: " + strings.Join(msgs, "; "), Detail: detail})
	default:
		s.log.Info("contract kept", "submission", id, "detected", c.DetectedPrecision, "bits_per_weight", c.BitsPerWeight,
			"header_bytes_read", read, "took", time.Since(t0).Round(time.Millisecond))
		out := events.ContractCompletedData{SubmissionID: id, Contract: c, DetectedPrecision: c.DetectedPrecision,
			TaskID: decl.TaskID, Split: decl.Split, BundleDigest: in.BundleDigest, Artifact: &in.Artifact}
		if decl.Engine != nil {
			out.KVCacheDType = decl.Engine.KVCacheDType
		}
		err = publish(events.ContractCompleted, out)
	}
	if err != nil {
		return bus.Retry(0, err)
	}
	return bus.Ack()
}

// Check computes the contract of a built bundle. It returns the contract,
// the bytes of safetensors headers it read, and an error: a *refusal for
// input that cannot be checked, anything else for a store that failed.
func (s *Service) Check(ctx context.Context, in events.BuildCompletedData) (record.Contract, int64, error) {
	c, read, _, err := s.check(ctx, in)
	return c, read, err
}

func (s *Service) check(ctx context.Context, in events.BuildCompletedData) (record.Contract, int64, *bundle.Declaration, error) {
	m, err := s.artifacts.Manifest(ctx, in.Artifact)
	switch {
	case errors.Is(err, artifact.ErrNotFound):
		return record.Contract{}, 0, nil, &refusal{CodeArtifactMissing, fmt.Sprintf("the built bundle %s is not in the artifact store; submit again", in.Artifact.Object)}
	case errors.Is(err, artifact.ErrCorrupt):
		return record.Contract{}, 0, nil, &refusal{CodeArtifactCorrupt, err.Error()}
	case err != nil:
		return record.Contract{}, 0, nil, err
	}
	open := func(name string) (io.ReadCloser, error) {
		f, ok := m.File(name)
		if !ok {
			return nil, fmt.Errorf("%w: %s is not in the bundle", artifact.ErrNotFound, name)
		}
		return s.artifacts.OpenFile(ctx, f.SHA256)
	}

	declData, err := s.small(open, m, bundle.DeclarationFile)
	if err != nil {
		return record.Contract{}, 0, nil, err
	}
	decl, err := bundle.ParseDeclaration(declData)
	if err != nil {
		return record.Contract{}, 0, nil, &refusal{CodeBadDeclaration, err.Error()}
	}
	camp, err := s.campaigns.Lookup(decl.TaskID)
	if err != nil {
		return record.Contract{}, 0, nil, &refusal{CodeUnknownTask, err.Error()}
	}
	config, err := s.small(open, m, "config.json")
	if err != nil {
		return record.Contract{}, 0, nil, err
	}

	// The top of the bundle is the checkpoint folder.
	sizes := map[string]int64{}
	for _, f := range m.Files {
		if !strings.Contains(f.Path, "/") {
			sizes[f.Path] = f.Size
		}
	}
	ck, err := safetensors.ReadCheckpointFrom(sizes, open)
	if err != nil {
		code := safetensors.CodeOf(err)
		if code == "" || code == safetensors.CodeIO {
			return record.Contract{}, 0, nil, fmt.Errorf("contract: read headers: %w", err)
		}
		return record.Contract{}, 0, nil, &refusal{string(code), fileMessage(err)}
	}
	kv := ""
	if decl.Engine != nil {
		kv = decl.Engine.KVCacheDType
	}
	c, err := analyze.Analyze(analyze.Input{
		Config: config, Checkpoint: ck, Source: camp.Source,
		Declared: decl.Solution.Precision, KVCacheDType: kv, Policy: camp.Policy.Analyze(),
	})
	if err != nil {
		code := analyze.CodeOf(err)
		if code == "" {
			return record.Contract{}, 0, nil, fmt.Errorf("contract: %w", err)
		}
		return record.Contract{}, 0, nil, &refusal{string(code), err.Error()}
	}
	return c, ck.BytesRead(), decl, nil
}

// small reads a small file of the bundle whole, bounded.
func (s *Service) small(open safetensors.Opener, m artifact.Manifest, name string) ([]byte, error) {
	f, ok := m.File(name)
	if !ok {
		code := CodeMissingConfig
		if name == bundle.DeclarationFile {
			code = CodeBadDeclaration
		}
		return nil, &refusal{code, fmt.Sprintf("the bundle has no %s", name)}
	}
	if f.Size > maxSmallFile {
		return nil, &refusal{"config_invalid", fmt.Sprintf("%s is %d bytes; the limit is %d", name, f.Size, maxSmallFile)}
	}
	r, err := open(name)
	if errors.Is(err, artifact.ErrNotFound) {
		return nil, &refusal{CodeArtifactMissing, err.Error()}
	}
	if err != nil {
		return nil, err
	}
	defer r.Close()
	data, err := io.ReadAll(io.LimitReader(r, maxSmallFile))
	if err != nil {
		return nil, fmt.Errorf("contract: read %s: %w", name, err)
	}
	return data, nil
}

// fileMessage turns a safetensors refusal into a sentence.
func fileMessage(err error) string {
	var e *safetensors.Error
	if !errors.As(err, &e) {
		return err.Error()
	}
	msg := e.Code.Describe()
	if msg == "" {
		msg = string(e.Code)
	}
	where := e.File
	if e.Tensor != "" {
		where += fmt.Sprintf(", tensor %q", e.Tensor)
	}
	if where != "" {
		msg = where + ": " + msg
	}
	if e.Detail != "" {
		msg += " (" + e.Detail + ")"
	}
	return msg
}
