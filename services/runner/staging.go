package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/lowbarena/lowbarena/adapters/staging"
	"github.com/lowbarena/lowbarena/domain/bundle"
	"github.com/lowbarena/lowbarena/domain/modelrepo"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/artifact"
)

// DefaultCacheBytes caps the pod's cache of checkpoints by reference
// (shared by every runner whose --work is the same folder).
const DefaultCacheBytes = 512 << 30

// stage brings a checkpoint by reference onto the pod: the bundle's own
// files from the artifact store, the shards from their repository through
// the pod's cache (each checked against its sha256, resumed when a
// download broke, downloaded once for every runner of the pod), in a
// folder whose shards are held against eviction until release. The
// shards are read at the revision the bundle's checkpoint.json names: the
// build stage pinned it to the commit it resolved, so the runner reads
// the files the build and the contract read, however the branch moved.
func (s *Service) stage(ctx context.Context, m artifact.Manifest, progress staging.Progress) (string, func(), error) {
	none := func() {}
	f, _ := m.File(bundle.CheckpointFile)
	r, err := s.artifacts.OpenFile(ctx, f.SHA256)
	if err != nil {
		return "", none, err
	}
	data, err := io.ReadAll(io.LimitReader(r, bundle.MaxReferenceBytes+1))
	r.Close()
	if err != nil {
		return "", none, fmt.Errorf("runner: read %s: %w", bundle.CheckpointFile, err)
	}
	ref, err := bundle.ParseReference(data)
	if err != nil {
		return "", none, Fail(reason.JobBadReference, "the bundle's "+bundle.CheckpointFile+" does not parse: "+err.Error())
	}
	repo, err := ref.Repo()
	if err != nil {
		return "", none, err
	}
	var remote []modelrepo.File
	var local []events.FileDigest
	for _, mf := range m.Files {
		if !bundle.Remote(mf.Path) {
			local = append(local, mf)
			continue
		}
		rf, ok := ref.File(mf.Path)
		if !ok || rf.SHA256 != mf.SHA256 || rf.Size != mf.Size {
			return "", none, Fail(reason.JobBadReference, fmt.Sprintf("the bundle's manifest lists %s, which its %s does not declare the same", mf.Path, bundle.CheckpointFile))
		}
		remote = append(remote, rf.Hub())
	}
	write := func(dir string) error {
		root, err := os.OpenRoot(dir)
		if err != nil {
			return fmt.Errorf("runner: %w", err)
		}
		defer root.Close()
		for _, f := range local {
			if err := s.fetchFile(ctx, root, f); err != nil {
				return err
			}
		}
		return nil
	}
	lease, err := s.cache.Checkout(ctx, m.Digest, repo, remote, write, progress)
	if err != nil {
		return "", none, err
	}
	return lease.Dir, lease.Release, nil
}

// stagingFailure is the job failure of a checkpoint that could not be
// staged, or nil for an error worth a retry (the store, the disk, a
// runner told to stop, a repository that rate-limits the runner: see
// stagingDelay).
func stagingFailure(what string, err error) *Failure {
	if _, ok := modelrepo.Wait(err); ok {
		return nil
	}
	if he := modelrepo.AsError(err); he != nil {
		return &Failure{Reason: he.Code, Message: what + " by reference: " + he.Message}
	}
	var se *staging.Error
	if errors.As(err, &se) {
		return &Failure{Reason: se.Code, Message: what + " by reference: " + se.Message}
	}
	if f := asFailure(err); f != nil {
		return f
	}
	if errors.Is(err, artifact.ErrNotFound) || errors.Is(err, artifact.ErrCorrupt) {
		return &Failure{Reason: reason.ArtifactMissing, Message: what + " is not in the artifact store: " + err.Error()}
	}
	return nil
}

// stagingDelay is the delay of the retry of a job whose staging failed
// with err: the wait a rate-limiting repository asked for (the job waits,
// it does not fail), zero (the consumer's backoff) for anything else.
func stagingDelay(err error) time.Duration {
	d, _ := modelrepo.Wait(err)
	return d
}

// progressEvery is the share of a staging between two progress events.
const progressEvery = 20 // events per staging, at most, beside its first and last

// throttled reports staging progress in bytes: the first and last call,
// and whenever another 1/progressEvery of the total or 5 seconds passed.
func throttled(report func(done, total int64)) staging.Progress {
	var mu sync.Mutex
	var next, reported int64 = -1, -1
	var last time.Time
	return func(done, total int64) {
		mu.Lock()
		defer mu.Unlock()
		if done == reported || (next >= 0 && done < total && done < next && time.Since(last) < 5*time.Second) {
			return
		}
		next, reported = done+max(total/progressEvery, 1), done
		last = time.Now()
		report(done, total)
	}
}

// cacheDir is the pod's cache under the work folder.
func cacheDir(work string) string { return filepath.Join(work, "cache") }
