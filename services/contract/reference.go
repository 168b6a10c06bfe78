package contract

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"sync"
	"sync/atomic"

	"github.com/lowbarena/lowbarena/adapters/hub"

	"github.com/lowbarena/lowbarena/domain/bundle"
	"github.com/lowbarena/lowbarena/domain/modelrepo"
	"github.com/lowbarena/lowbarena/domain/safetensors"
	"github.com/lowbarena/lowbarena/platform/artifact"
	"github.com/lowbarena/lowbarena/platform/stage"
)

// opener is how the check opens a built bundle's files: from the artifact
// store, and for a checkpoint by reference (the bundle holds
// checkpoint.json), its shards from the repository through HTTP Range
// requests. The safetensors reader then reads each shard's 8-byte length
// and, once it checked it against its limit, that many bytes of header:
// two requests per shard, no tensor data. The analysis gets the same
// inputs either way. The headers are fetched ahead of the reader, a few
// at a time (prefetch), so a checkpoint of many shards on a distant hub
// costs a few round trips, not two per shard; stop ends what is still in
// flight once the reader is done. The shards are read at commit, the
// commit the build stage resolved the revision to (build.completed's
// reference), whatever the branch is now; "" reads the revision
// checkpoint.json names (a bundle built before commits were carried).
func (c *Checker) opener(ctx context.Context, m artifact.Manifest, commit string) (open safetensors.Opener, stop func(), err error) {
	store := func(name string) (io.ReadCloser, error) {
		f, ok := m.File(name)
		if !ok {
			return nil, fmt.Errorf("%w: %s is not in the bundle", artifact.ErrNotFound, name)
		}
		return c.Artifacts.OpenFile(ctx, f.SHA256)
	}
	if _, ok := m.File(bundle.CheckpointFile); !ok {
		return store, func() {}, nil
	}
	data, err := small(store, m, bundle.CheckpointFile)
	if err != nil {
		return nil, nil, err
	}
	ref, err := bundle.ParseReference(data)
	if err != nil {
		var be *bundle.Error
		if errors.As(err, &be) {
			return nil, nil, stage.Refuse(be.Code, be.Message)
		}
		return nil, nil, err
	}
	repo, err := ref.Repo()
	if err == nil {
		err = c.hub().Allowed(repo)
	}
	if err == nil && modelrepo.IsCommit(commit) {
		repo = repo.At(commit)
	}
	if r := hubRefusal(err); r != nil {
		return nil, nil, r
	} else if err != nil {
		return nil, nil, err
	}
	var shards []modelrepo.File
	for _, f := range ref.Files {
		if bundle.Remote(f.Path) {
			shards = append(shards, f.Hub())
		}
	}
	pctx, cancel := context.WithCancel(ctx)
	pf := c.prefetch(pctx, repo, shards)
	return func(name string) (io.ReadCloser, error) {
		if !bundle.Remote(name) {
			return store(name)
		}
		if _, ok := ref.File(name); !ok {
			// A shard the index names that checkpoint.json does not
			// list: index_shard_missing.
			return nil, fmt.Errorf("%w: %s is not listed in %s", fs.ErrNotExist, name, bundle.CheckpointFile)
		}
		return pf.open(ctx, name)
	}, func() { cancel(); pf.wait() }, nil
}

// Prefetch bounds. Headers are fetched prefetchWorkers at a time; a header
// longer than prefetchHeaderBytes, or past prefetchBudget in all, is not
// fetched ahead: its length prefix is handed to the safetensors reader,
// which checks it against its own limit before asking for the rest (so a
// length past the limit still costs one request of 8 bytes).
const (
	prefetchWorkers     = 8
	prefetchHeaderBytes = 16 << 20
	prefetchBudget      = 256 << 20
)

// prefetched is the headers of a checkpoint's shards being fetched.
type prefetched struct {
	wg   sync.WaitGroup
	mu   sync.Mutex
	done map[string]chan struct{}
	got  map[string]io.ReadCloser
}

// prefetch starts fetching the header of every shard.
func (c *Checker) prefetch(ctx context.Context, repo modelrepo.Repo, shards []modelrepo.File) *prefetched {
	p := &prefetched{done: map[string]chan struct{}{}, got: map[string]io.ReadCloser{}}
	todo := make(chan modelrepo.File, len(shards))
	for _, f := range shards {
		p.done[f.Path] = make(chan struct{})
		todo <- f
	}
	close(todo)
	var budget atomic.Int64
	for range min(prefetchWorkers, len(shards)) {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			for f := range todo {
				r := c.header(ctx, repo, f, &budget)
				p.mu.Lock()
				p.got[f.Path] = r
				p.mu.Unlock()
				close(p.done[f.Path])
			}
		}()
	}
	return p
}

// header fetches f's length prefix and, when it is small enough, the
// header it announces, and returns what the safetensors reader will read:
// the bytes fetched, then (when the header was not fetched) the rest on
// demand, or the failure at its first read, as reading it in turn would.
func (c *Checker) header(ctx context.Context, repo modelrepo.Repo, f modelrepo.File, budget *atomic.Int64) io.ReadCloser {
	if f.Size < 8 {
		// The reader refuses it by its size alone, reading nothing.
		return io.NopCloser(bytes.NewReader(nil))
	}
	r := c.hub().HeaderReader(ctx, repo, f)
	prefix := make([]byte, 8)
	if _, err := io.ReadFull(r, prefix); err != nil {
		r.Close()
		return failing{err}
	}
	n := binary.LittleEndian.Uint64(prefix)
	if n > prefetchHeaderBytes || n > uint64(f.Size-8) || budget.Add(int64(n)) > prefetchBudget {
		return readCloser{io.MultiReader(bytes.NewReader(prefix), r), r}
	}
	buf := make([]byte, 8+n)
	copy(buf, prefix)
	_, err := io.ReadFull(r, buf[8:])
	r.Close()
	if err != nil {
		return failing{err}
	}
	return io.NopCloser(bytes.NewReader(buf))
}

// open returns the prefetched header of the shard name.
func (p *prefetched) open(ctx context.Context, name string) (io.ReadCloser, error) {
	done, ok := p.done[name]
	if !ok {
		return nil, fmt.Errorf("%w: %s", fs.ErrNotExist, name)
	}
	select {
	case <-done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.got[name]
	p.got[name] = failing{fmt.Errorf("contract: %s read twice", name)}
	return r, nil
}

// wait waits for the fetches in flight (cancelled by the caller) and
// closes what nobody read.
func (p *prefetched) wait() {
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.got {
		r.Close()
	}
}

// failing is a reader that fails with err, as the shard's own reader
// would have at its first read.
type failing struct{ err error }

func (f failing) Read([]byte) (int, error) { return 0, f.err }
func (f failing) Close() error             { return nil }

type readCloser struct {
	io.Reader
	io.Closer
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
// as declared (its reference_* code and sentence), a wait of the stage
// for a repository that rate-limits it for longer than the client waits
// in place, or nil for another error. A cancelled context is never one:
// the stage stops, and the input is redelivered.
func hubRefusal(err error) error {
	if d, ok := modelrepo.Wait(err); ok {
		return stage.RetryAfter(d, err)
	}
	if he := modelrepo.AsError(err); he != nil {
		return stage.Refuse(he.Code, he.Message)
	}
	return nil
}
