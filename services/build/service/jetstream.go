package service

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/events"
)

// JetStreamUploads are the uploads in JetStream object stores: each ref
// names its bucket and object.
type JetStreamUploads struct {
	JS jetstream.JetStream
}

// Open implements Uploads.
func (u JetStreamUploads) Open(ctx context.Context, ref events.BundleRef) (io.ReadCloser, error) {
	os, err := u.JS.ObjectStore(ctx, ref.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrNoBucket, ref.Bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("build: open bucket %s: %w", ref.Bucket, err)
	}
	obj, err := os.Get(ctx, ref.Object)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, fmt.Errorf("%w: %s in %s", ErrNoUpload, ref.Object, ref.Bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("build: get upload %s: %w", ref.Object, err)
	}
	return obj, nil
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
