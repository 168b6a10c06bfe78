package build

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/events"
)

// JetStreamUploads are the uploads in JetStream object stores: each ref
// names its bucket and object.
type JetStreamUploads struct {
	JS jetstream.JetStream
	// Settle bounds how long an object that is not found is looked for
	// again before the submission is refused (default DefaultSettle).
	Settle time.Duration
}

// DefaultSettle is how long JetStreamUploads looks again for an upload
// it did not find.
//
// Why: an object store's reads are direct gets, which any replica of a
// replicated stream answers, a follower that has not applied the latest
// writes included. On a three-node cluster under load the build, told of
// a submission the moment the gateway stored its upload, was answered
// "not found" by such a follower and refused the submission for good
// (bundle_not_found; the cluster test saw it). Looking again for a few
// seconds reaches a replica that has it; an upload truly missing is
// still refused, a little later.
const DefaultSettle = 15 * time.Second

// Open implements Uploads.
func (u JetStreamUploads) Open(ctx context.Context, ref events.BundleRef) (io.ReadCloser, error) {
	os, err := u.JS.ObjectStore(ctx, ref.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrNoBucket, ref.Bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("build: open bucket %s: %w", ref.Bucket, err)
	}
	settle := u.Settle
	if settle <= 0 {
		settle = DefaultSettle
	}
	obj, err := settled(ctx, settle, func() (io.ReadCloser, error) { return os.Get(ctx, ref.Object) })
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, fmt.Errorf("%w: %s in %s", ErrNoUpload, ref.Object, ref.Bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("build: get upload %s: %w", ref.Object, err)
	}
	if res, ok := obj.(jetstream.ObjectResult); ok {
		if info, err := res.Info(); err == nil {
			if sum, err := jetstream.DecodeObjectDigest(info.Digest); err == nil && len(sum) == sha256.Size {
				return verifiedObject{ReadCloser: obj, sha: hex.EncodeToString(sum)}, nil
			}
		}
	}
	return obj, nil
}

// verifiedObject is an object store's reader with the sha256 the store
// holds for it: nats.go's reader hashes what it reads and fails its last
// read (jetstream.ErrDigestMismatch) when the bytes do not give that
// digest, so it implements verifiedUpload.
type verifiedObject struct {
	io.ReadCloser
	sha string
}

// SHA256 implements verifiedUpload.
func (v verifiedObject) SHA256() string { return v.sha }

// Delete deletes the upload ref names. One already gone, or a bucket
// that does not exist, is no error: what Delete is for holds.
func (u JetStreamUploads) Delete(ctx context.Context, ref events.BundleRef) error {
	os, err := u.JS.ObjectStore(ctx, ref.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("build: open bucket %s: %w", ref.Bucket, err)
	}
	if err := os.Delete(ctx, ref.Object); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return fmt.Errorf("build: delete upload %s from %s: %w", ref.Object, ref.Bucket, err)
	}
	return nil
}

// settled calls get until it finds the object, fails otherwise than
// with jetstream.ErrObjectNotFound, ctx ends or settle has passed, with
// pauses that double from 100 ms.
func settled(ctx context.Context, settle time.Duration, get func() (io.ReadCloser, error)) (io.ReadCloser, error) {
	deadline := time.Now().Add(settle)
	pause := 100 * time.Millisecond
	for {
		r, err := get()
		if !errors.Is(err, jetstream.ErrObjectNotFound) || time.Now().Add(pause).After(deadline) {
			return r, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(pause):
		}
		pause = min(2*pause, 2*time.Second)
	}
}

// KVBundles are the first submissions of each digest in a JetStream KV
// bucket (bus.BucketBundles): digest -> submission id.
type KVBundles struct {
	KV jetstream.KeyValue
}

// First implements Bundles. The entry is created once (Create fails on an
// existing key), so two submissions racing on one digest agree on the
// first, and a redelivered submission reads its own id back.
func (k KVBundles) First(ctx context.Context, digest, id string) (string, error) {
	_, err := k.KV.Create(ctx, digest, []byte(id))
	if err == nil {
		return id, nil
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return "", fmt.Errorf("build: record digest: %w", err)
	}
	e, err := k.KV.Get(ctx, digest)
	if err != nil {
		return "", fmt.Errorf("build: read digest: %w", err)
	}
	return string(e.Value()), nil
}
