package build

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"

	"github.com/lowbarena/lowbarena/adapters/hub"
	"github.com/lowbarena/lowbarena/domain/bundle"
	"github.com/lowbarena/lowbarena/domain/campaign"
	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/artifact"
	"github.com/lowbarena/lowbarena/platform/stage"
	"github.com/lowbarena/lowbarena/services/build/unpack"
)

// Errors of an Uploads that does not hold an archive: the build refuses
// the submission with reason.BundleNotFound, since only submitting again
// can help.
var (
	// ErrNoBucket is an upload bucket that does not exist.
	ErrNoBucket = errors.New("build: no such upload bucket")
	// ErrNoUpload is an archive that is not in its bucket.
	ErrNoUpload = errors.New("build: no such upload")
)

// Uploads is where submitted archives wait for the build: the JetStream
// object store the uploads are put in, in production (see JetStreamUploads).
type Uploads interface {
	// Open opens the archive ref names. A bucket that does not exist is
	// an error wrapping ErrNoBucket, an archive not in its bucket one
	// wrapping ErrNoUpload; anything else is worth a retry.
	Open(ctx context.Context, ref events.BundleRef) (io.ReadCloser, error)
}

// Bundles remembers the first submission of each bundle digest.
type Bundles interface {
	// First records id as the first submission of digest unless another
	// came first, and returns the first. It is idempotent: a submission
	// recorded before (a redelivery) finds itself, never a duplicate.
	First(ctx context.Context, digest, id string) (string, error)
}

// Builder is the build itself, without a bus: an archive in, a stored
// bundle or a refusal out.
type Builder struct {
	// Uploads holds the submitted archives.
	Uploads Uploads
	// Artifacts is where checked bundles are stored, content addressed.
	Artifacts artifact.Store
	// Bundles recognises a bundle seen before.
	Bundles Bundles
	// WorkDir is where bundles are unpacked while they are checked (one
	// temporary folder per bundle, removed after); it must exist.
	WorkDir string
	// Limits bound a bundle.
	Limits unpack.Limits
	// MaxUploadBytes bounds an uploaded archive (default
	// unpack.DefaultMaxUploadBytes); larger checkpoints are submitted by
	// reference.
	MaxUploadBytes int64
	// Hub reads checkpoints submitted by reference; nil allows no
	// repository host, so every reference is refused.
	Hub *hub.Client
	// Campaigns are the tasks this arena runs: a bundle's engine patch
	// is checked against its campaign's pinned engine source
	// (EngineSource). Nil is no campaign, so every patch is refused.
	Campaigns campaign.Source

	// sources are the campaigns' engine sources, opened once.
	sources sources
}

// Build fetches, checks, digests and stores one bundle.
//
// It returns a *stage.Refusal (an unpack code, an enginepatch code for
// an engine patch its campaign does not take, and a sentence) for a
// bundle the participant must fix; any other error (a store that does not
// answer, a full disk) is worth a retry.
//
// Idempotency: artifacts are content addressed, so storing them again
// changes nothing, and Bundles records the first submission of a digest
// once, so building the same input again gives the same output.
func (b *Builder) Build(ctx context.Context, in events.SubmissionReceivedData) (events.BuildCompletedData, error) {
	out, err := b.build(ctx, in)
	if r := unpack.AsError(err); r != nil {
		return events.BuildCompletedData{}, stage.Refuse(r.Code, r.Message)
	}
	return out, err
}

// build is Build with refusals as *unpack.Error.
func (b *Builder) build(ctx context.Context, in events.SubmissionReceivedData) (events.BuildCompletedData, error) {
	var out events.BuildCompletedData
	if in.Bundle.Store != "jetstream" {
		return out, notFound("the bundle is in a %q store, which this arena does not read", in.Bundle.Store)
	}
	maxUpload := b.MaxUploadBytes
	if maxUpload <= 0 {
		maxUpload = unpack.DefaultMaxUploadBytes
	}
	if in.Bundle.Size > maxUpload {
		return out, tooLarge(in.Bundle.Size, maxUpload)
	}
	obj, err := b.Uploads.Open(ctx, in.Bundle)
	switch {
	case errors.Is(err, ErrNoBucket):
		return out, notFound("the upload bucket %s does not exist; submit again with arena submit", in.Bundle.Bucket)
	case errors.Is(err, ErrNoUpload):
		return out, notFound("the upload %s is not in %s (was it deleted?); submit again", in.Bundle.Object, in.Bundle.Bucket)
	case err != nil:
		return out, fmt.Errorf("build: get upload %s: %w", in.Bundle.Object, err)
	}
	defer obj.Close()

	dir, err := os.MkdirTemp(b.WorkDir, "bundle-"+in.SubmissionID+"-")
	if err != nil {
		return out, fmt.Errorf("build: %w", err)
	}
	defer os.RemoveAll(dir)

	// The archive's digest is computed as it streams through the
	// unpacker, so the upload is read once.
	// Never more than the limit and a byte is read, whatever the store
	// holds: a larger upload fails its size check below.
	hr := &hashingReader{r: io.LimitReader(obj, maxUpload+1), h: sha256.New()}
	// Invariant: the archive read is the one the submission announced
	// (in.Bundle.SHA256 and Size), or the bundle is refused. An upload
	// whose reader checks its own digest at its end (verifiedUpload: the
	// object store's) and whose digest is the announced one is not hashed
	// a second time: it is read to its end below, whose last read fails
	// when the bytes do not give that digest, and a read cut short by the
	// limit leaves more bytes than announced. Any other upload is hashed
	// here.
	if v, ok := obj.(verifiedUpload); ok && v.SHA256() == in.Bundle.SHA256 {
		hr.h = nil
	}
	files, err := unpack.Unpack(hr, dir, b.Limits)
	if err != nil {
		return out, err
	}
	if _, err := io.Copy(io.Discard, hr); err != nil {
		return out, fmt.Errorf("build: read upload: %w", err)
	}
	got := in.Bundle.SHA256
	if hr.h != nil {
		got = hex.EncodeToString(hr.h.Sum(nil))
	}
	if got != in.Bundle.SHA256 || hr.n != in.Bundle.Size {
		return out, &unpack.Error{Code: reason.BundleDigestMismatch, Message: fmt.Sprintf(
			"the uploaded archive is %d bytes with sha256 %s, the submission announced %d bytes with %s; upload it again", hr.n, short(got), in.Bundle.Size, short(in.Bundle.SHA256))}
	}
	// A checkpoint by reference: its small files are fetched into dir
	// and its shards listed, never fetched.
	files, ref, err := b.reference(ctx, dir, files, in)
	if err != nil {
		return out, err
	}
	decl, err := unpack.Check(dir, files, in)
	if err != nil {
		return out, err
	}

	// The engine patch is checked against the campaign's pinned source
	// (Check has made sure the declared patch is among the files).
	var patch *record.Patch
	if decl != nil && decl.Engine != nil && decl.Engine.Patch != "" {
		for _, f := range files {
			if f.Path != decl.Engine.Patch {
				continue
			}
			if patch, err = b.checkPatch(dir, decl, f); err != nil {
				return out, err
			}
		}
	}

	// Nothing is stored before the bundle is checked: a refused bundle
	// leaves no artifact behind. The shards of a checkpoint by reference
	// are in the manifest but stay in their repository.
	for _, f := range files {
		if ref != nil && bundle.Remote(f.Path) {
			continue
		}
		if err := b.store(ctx, dir, f); err != nil {
			return out, err
		}
	}
	m := artifact.NewManifest(files)
	stored, err := b.Artifacts.PutManifest(ctx, m)
	if err != nil {
		return out, fmt.Errorf("build: %w", err)
	}
	first, err := b.Bundles.First(ctx, m.Digest, in.SubmissionID)
	if err != nil {
		return out, err
	}
	out = events.BuildCompletedData{SubmissionID: in.SubmissionID, BundleDigest: m.Digest, Files: m.Files, Bytes: m.Bytes, Artifact: stored, Reference: ref}
	if first != in.SubmissionID {
		out.DuplicateOf = first
	}
	out.Patch = patch
	return out, nil
}

func (b *Builder) store(ctx context.Context, dir string, f events.FileDigest) error {
	r, err := os.Open(filepath.Join(dir, filepath.FromSlash(f.Path)))
	if err != nil {
		return fmt.Errorf("build: %w", err)
	}
	defer r.Close()
	if _, err := b.Artifacts.PutFile(ctx, f.SHA256, f.Size, r); err != nil {
		return fmt.Errorf("build: store %s: %w", f.Path, err)
	}
	return nil
}

func notFound(format string, args ...any) *unpack.Error {
	return &unpack.Error{Code: reason.BundleNotFound, Message: fmt.Sprintf(format, args...)}
}

// hashingReader counts what it reads and, when h is set, hashes it.
type hashingReader struct {
	r io.Reader
	h hash.Hash
	n int64
}

func (h *hashingReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	if h.h != nil {
		h.h.Write(p[:n])
	}
	h.n += int64(n)
	return n, err
}

// verifiedUpload is an upload whose reader checks what it reads against
// SHA256 (hex) and fails its last read when they differ, as the object
// store's does (see JetStreamUploads.Open).
type verifiedUpload interface {
	SHA256() string
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}
