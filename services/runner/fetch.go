package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/adapters/staging"
	"github.com/lowbarena/lowbarena/domain/bundle"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/artifact"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/services/runner/job"
)

// fetch materialises a bundle from the artifact store into
// WorkDir/<digest>, checking every file's digest on the way, and returns
// the folder and its release (call it when the job ends). A folder
// already complete is reused: it is renamed into place only after every
// file landed. A checkpoint by reference (its manifest lists
// checkpoint.json) is staged through the pod's cache instead (stage), its
// progress in bytes told to progress.
func (s *Service) fetch(ctx context.Context, ref events.BundleRef, progress staging.Progress) (string, func(), error) {
	none := func() {}
	if !hexDigest.MatchString(ref.SHA256) {
		return "", none, fmt.Errorf("%w: bundle reference %q has no digest", artifact.ErrNotFound, ref.Object)
	}
	dir := filepath.Join(s.opts.WorkDir, ref.SHA256)
	if _, err := os.Stat(completeMark(dir)); err == nil {
		return dir, none, nil
	}
	m, err := s.artifacts.Manifest(ctx, ref)
	if err != nil {
		return "", none, err
	}
	if _, ok := m.File(bundle.CheckpointFile); ok {
		return s.stage(ctx, m, progress)
	}
	s.fetchMu.Lock()
	defer s.fetchMu.Unlock()
	if _, err := os.Stat(completeMark(dir)); err == nil {
		return dir, none, nil
	}
	path, err := s.materialise(ctx, m, dir)
	return path, none, err
}

// materialise copies every file of m into dir, through a temporary
// folder renamed into place once complete.
func (s *Service) materialise(ctx context.Context, m artifact.Manifest, dir string) (string, error) {
	tmp, err := os.MkdirTemp(s.opts.WorkDir, "fetch-")
	if err != nil {
		return "", fmt.Errorf("runner: %w", err)
	}
	defer os.RemoveAll(tmp)
	root, err := os.OpenRoot(tmp)
	if err != nil {
		return "", fmt.Errorf("runner: %w", err)
	}
	defer root.Close()
	for _, f := range m.Files {
		if err := s.fetchFile(ctx, root, f); err != nil {
			return "", err
		}
	}
	_ = os.RemoveAll(dir)
	if err := os.Rename(tmp, dir); err != nil {
		return "", fmt.Errorf("runner: %w", err)
	}
	if err := os.WriteFile(completeMark(dir), []byte(m.Digest+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("runner: %w", err)
	}
	return dir, nil
}

// completeMark is the file that says the bundle folder dir is complete.
// It lies beside the folder, never in it: the folder holds the bundle's
// files and nothing else, so a tree's digest (an engine source's, which
// the runner checks against the record) is the bundle's own. Written
// after the folder is renamed into place: a folder without its mark (a
// crash between the two) is fetched again.
func completeMark(dir string) string { return dir + ".complete" }

var hexDigest = regexp.MustCompile(`^[0-9a-f]{64}$`)

// fetchFile copies one file into root (paths were checked by the build
// stage; os.Root refuses any that would leave the folder all the same).
func (s *Service) fetchFile(ctx context.Context, root *os.Root, f events.FileDigest) error {
	if d := filepath.Dir(f.Path); d != "." {
		if err := root.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("runner: %w", err)
		}
	}
	r, err := s.artifacts.OpenFile(ctx, f.SHA256)
	if err != nil {
		return err
	}
	defer r.Close()
	w, err := root.Create(f.Path)
	if err != nil {
		return fmt.Errorf("runner: %w", err)
	}
	n, err := io.Copy(w, r)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("runner: fetch %s: %w", f.Path, err)
	}
	if n != f.Size {
		return fmt.Errorf("%w: %s is %d bytes, the manifest says %d", artifact.ErrCorrupt, f.Path, n, f.Size)
	}
	return nil
}

// refCache keeps BF16 reference measurements in the references bucket,
// keyed pod.campaign.digest, written with Create: the first runner of a
// pod to measure a reference keeps it.
type refCache struct {
	kv  jetstream.KeyValue
	pod string
}

func (c *refCache) key(campaign, digest string) string {
	return bus.Key(c.pod, campaign, digest)
}

func (c *refCache) Get(ctx context.Context, campaign, digest string) (*job.Served, error) {
	e, err := c.kv.Get(ctx, c.key(campaign, digest))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("runner: reference cache: %w", err)
	}
	var s job.Served
	if err := json.Unmarshal(e.Value(), &s); err != nil {
		return nil, nil // unreadable: measure again
	}
	return &s, nil
}

func (c *refCache) Put(ctx context.Context, campaign, digest string, s job.Served) error {
	b, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("runner: reference cache: %w", err)
	}
	if _, err := c.kv.Create(ctx, c.key(campaign, digest), b); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("runner: reference cache: %w", err)
	}
	return nil
}
