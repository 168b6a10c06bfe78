// Package service is the build stage: it takes each uploaded bundle,
// checks it, digests every file and the whole, stores it as a content
// addressed artifact and publishes build.completed, or build.failed with a
// reason the participant can act on. The build command and `arena up`
// both wire it.
package service

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/artifact"
	"github.com/lowbarena/lowbarena/events/bus"
	"github.com/lowbarena/lowbarena/services/build/unpack"
	"github.com/lowbarena/lowbarena/services/runtime"
)

// Name is the build service's name: its event source and durable.
const Name = "build"

// Options configure the build stage.
type Options struct {
	// WorkDir is where bundles are unpacked while they are checked (one
	// temporary folder per bundle, removed after); default the system's
	// temporary folder.
	WorkDir string
	// Limits bound a bundle.
	Limits unpack.Limits
}

// Service is the build stage.
type Service struct {
	bus       *bus.Bus
	js        jetstream.JetStream
	artifacts artifact.Store
	digests   jetstream.KeyValue
	opts      Options
	log       *slog.Logger
}

// New opens the stores the stage needs on b's JetStream.
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
	if o.WorkDir == "" {
		o.WorkDir = os.TempDir()
	}
	if err := os.MkdirAll(o.WorkDir, 0o755); err != nil {
		return nil, fmt.Errorf("build: work folder: %w", err)
	}
	return &Service{bus: b, js: js, artifacts: arts, digests: kv, opts: o, log: log}, nil
}

// Actors returns the stage's consumer.
func (s *Service) Actors() []runtime.Actor {
	return []runtime.Actor{{Name: "build", Run: s.Run}}
}

// Consumer is the stage's durable consumer. Bundles can be large, so
// the handler heartbeats (the loop sends InProgress every AckWait/3) and
// takes them a few at a time.
var Consumer = bus.ConsumerConfig{
	Name:     "build",
	Subjects: []string{events.SubjectRootArena + ".submission.received.>"},
	AckWait:  60 * time.Second,
	Prefetch: 2,
}

// Run consumes submission.received until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	return s.bus.Consume(ctx, Consumer, s.Handle)
}

// Handle builds one submission.
//
// Idempotency: every output's id derives from the input event's id, so a
// redelivery after a crash republishes the same ids (JetStream drops the
// duplicates); artifacts are content addressed, so storing them again
// changes nothing; the bundles KV entry is created once, and a
// redelivered submission finds its own id there, not a duplicate.
//
// Ack semantics: a refused bundle is a build.failed and an Ack (the
// participant must act, not the arena); a store or NATS error is a Retry.
func (s *Service) Handle(ctx context.Context, d *bus.Delivery) bus.Outcome {
	var in events.SubmissionReceivedData
	if err := d.Decode(&in); err != nil {
		return bus.Poison("bad_payload", err)
	}
	id := in.SubmissionID
	src := events.Source(Name)
	started := events.StageStartedData{SubmissionID: id, Stage: Name, Attempt: int(d.NumDelivered)}
	if _, err := s.bus.PublishNew(ctx, events.DeriveID(d.Event.ID(), string(events.BuildStarted)), events.BuildStarted, src, id, started); err != nil {
		return bus.Retry(0, err)
	}
	t0 := time.Now()
	out, err := s.build(ctx, in)
	if r := unpack.AsError(err); r != nil {
		s.log.Info("bundle refused", "submission", id, "reason", r.Code, "message", r.Message)
		failed := events.StageFailedData{SubmissionID: id, Stage: Name, Reason: r.Code, Message: r.Message}
		if _, err := s.bus.PublishNew(ctx, events.DeriveID(d.Event.ID(), string(events.BuildFailed)), events.BuildFailed, src, id, failed); err != nil {
			return bus.Retry(0, err)
		}
		return bus.Ack()
	}
	if err != nil {
		return bus.Retry(0, err)
	}
	if _, err := s.bus.PublishNew(ctx, events.DeriveID(d.Event.ID(), string(events.BuildCompleted)), events.BuildCompleted, src, id, out); err != nil {
		return bus.Retry(0, err)
	}
	s.log.Info("bundle built", "submission", id, "digest", out.BundleDigest[:12], "files", len(out.Files),
		"bytes", out.Bytes, "duplicate_of", out.DuplicateOf, "took", time.Since(t0).Round(time.Millisecond))
	return bus.Ack()
}

// build fetches, checks, digests and stores one bundle. A refusal is an
// *unpack.Error; anything else is worth a retry.
func (s *Service) build(ctx context.Context, in events.SubmissionReceivedData) (events.BuildCompletedData, error) {
	var out events.BuildCompletedData
	if in.Bundle.Store != "jetstream" {
		return out, &unpack.Error{Code: unpack.CodeNotFound, Message: fmt.Sprintf("the bundle is in a %q store, which this arena does not read", in.Bundle.Store)}
	}
	uploads, err := s.js.ObjectStore(ctx, in.Bundle.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return out, &unpack.Error{Code: unpack.CodeNotFound, Message: fmt.Sprintf("the upload bucket %s does not exist; submit again with arena submit", in.Bundle.Bucket)}
	}
	if err != nil {
		return out, fmt.Errorf("build: open bucket %s: %w", in.Bundle.Bucket, err)
	}
	obj, err := uploads.Get(ctx, in.Bundle.Object)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return out, &unpack.Error{Code: unpack.CodeNotFound, Message: fmt.Sprintf("the upload %s is not in %s (was it deleted?); submit again", in.Bundle.Object, in.Bundle.Bucket)}
	}
	if err != nil {
		return out, fmt.Errorf("build: get upload %s: %w", in.Bundle.Object, err)
	}
	defer obj.Close()

	dir, err := os.MkdirTemp(s.opts.WorkDir, "bundle-"+in.SubmissionID+"-")
	if err != nil {
		return out, fmt.Errorf("build: %w", err)
	}
	defer os.RemoveAll(dir)

	// The archive's digest is computed as it streams through the
	// unpacker, so the upload is read once.
	hr := &hashingReader{r: obj, h: sha256.New()}
	files, err := unpack.Unpack(hr, dir, s.opts.Limits)
	if err != nil {
		return out, err
	}
	if _, err := io.Copy(io.Discard, hr); err != nil {
		return out, fmt.Errorf("build: read upload: %w", err)
	}
	if got := hex.EncodeToString(hr.h.Sum(nil)); got != in.Bundle.SHA256 || hr.n != in.Bundle.Size {
		return out, &unpack.Error{Code: unpack.CodeDigestMismatch, Message: fmt.Sprintf(
			"the uploaded archive is %d bytes with sha256 %s, the submission announced %d bytes with %s; upload it again", hr.n, short(got), in.Bundle.Size, short(in.Bundle.SHA256))}
	}
	if _, err := unpack.Check(dir, files, in); err != nil {
		return out, err
	}

	for _, f := range files {
		if err := s.store(ctx, dir, f); err != nil {
			return out, err
		}
	}
	m := artifact.NewManifest(files)
	ref, err := s.artifacts.PutManifest(ctx, m)
	if err != nil {
		return out, fmt.Errorf("build: %w", err)
	}
	first, err := s.firstOf(ctx, m.Digest, in.SubmissionID)
	if err != nil {
		return out, err
	}
	out = events.BuildCompletedData{SubmissionID: in.SubmissionID, BundleDigest: m.Digest, Files: m.Files, Bytes: m.Bytes, Artifact: ref}
	if first != in.SubmissionID {
		out.DuplicateOf = first
	}
	return out, nil
}

func (s *Service) store(ctx context.Context, dir string, f events.FileDigest) error {
	r, err := os.Open(filepath.Join(dir, filepath.FromSlash(f.Path)))
	if err != nil {
		return fmt.Errorf("build: %w", err)
	}
	defer r.Close()
	if _, err := s.artifacts.PutFile(ctx, f.SHA256, f.Size, r); err != nil {
		return fmt.Errorf("build: store %s: %w", f.Path, err)
	}
	return nil
}

// firstOf records id as the first submission of digest unless another
// came first, and returns the first.
func (s *Service) firstOf(ctx context.Context, digest, id string) (string, error) {
	_, err := s.digests.Create(ctx, digest, []byte(id))
	if err == nil {
		return id, nil
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return "", fmt.Errorf("build: record digest: %w", err)
	}
	e, err := s.digests.Get(ctx, digest)
	if err != nil {
		return "", fmt.Errorf("build: read digest: %w", err)
	}
	return string(e.Value()), nil
}

type hashingReader struct {
	r io.Reader
	h hash.Hash
	n int64
}

func (h *hashingReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	h.h.Write(p[:n])
	h.n += int64(n)
	return n, err
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}
