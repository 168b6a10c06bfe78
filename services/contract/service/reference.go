package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"

	"github.com/lowbarena/lowbarena/events/artifact"
	"github.com/lowbarena/lowbarena/events/stage"
	"github.com/lowbarena/lowbarena/services/domain/bundle"
	"github.com/lowbarena/lowbarena/services/domain/hub"
	"github.com/lowbarena/lowbarena/services/domain/safetensors"
)

// opener is how the check opens a built bundle's files: from the artifact
// store, and for a checkpoint by reference (the bundle holds
// checkpoint.json), its shards from the repository through HTTP Range
// requests. The safetensors reader then reads each shard's 8-byte length
// and, once it checked it against its limit, that many bytes of header:
// two requests per shard, no tensor data. The analysis gets the same
// inputs either way.
func (c *Checker) opener(ctx context.Context, m artifact.Manifest) (safetensors.Opener, error) {
	store := func(name string) (io.ReadCloser, error) {
		f, ok := m.File(name)
		if !ok {
			return nil, fmt.Errorf("%w: %s is not in the bundle", artifact.ErrNotFound, name)
		}
		return c.Artifacts.OpenFile(ctx, f.SHA256)
	}
	if _, ok := m.File(bundle.CheckpointFile); !ok {
		return store, nil
	}
	data, err := small(store, m, bundle.CheckpointFile)
	if err != nil {
		return nil, err
	}
	ref, err := bundle.ParseReference(data)
	if err != nil {
		var be *bundle.Error
		if errors.As(err, &be) {
			return nil, stage.Refuse(be.Code, be.Message)
		}
		return nil, err
	}
	repo, err := ref.Repo()
	if err == nil {
		err = c.hub().Allowed(repo)
	}
	if r := hubRefusal(err); r != nil {
		return nil, r
	} else if err != nil {
		return nil, err
	}
	return func(name string) (io.ReadCloser, error) {
		if !bundle.Remote(name) {
			return store(name)
		}
		f, ok := ref.File(name)
		if !ok {
			// A shard the index names that checkpoint.json does not
			// list: index_shard_missing.
			return nil, fmt.Errorf("%w: %s is not listed in %s", fs.ErrNotExist, name, bundle.CheckpointFile)
		}
		return c.hub().HeaderReader(ctx, repo, f.Hub()), nil
	}, nil
}

// hub is the repository client; without one, no host is allowed.
func (c *Checker) hub() *hub.Client {
	if c.Hub == nil {
		return noHosts
	}
	return c.Hub
}

var noHosts = hub.New(hub.Options{})

// hubRefusal is the refusal of a reference the repository did not serve
// as declared (its reference_* code and sentence), or nil for another
// error. A cancelled context is never one: the stage stops, and the input
// is redelivered.
func hubRefusal(err error) error {
	if he := hub.AsError(err); he != nil {
		return stage.Refuse(string(he.Code), he.Message)
	}
	return nil
}
