// Package artifacttest holds an artifact.Store in memory for the tests of
// the stages that read and write artifacts (build, contract), with the
// JetStream store's checks, so a stage's decisions are tested without a
// bus and its wiring on the real store.
package artifacttest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"sync"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/artifact"
)

// Memory is an artifact.Store in memory. Content is checked against its
// digest on the way in, and a manifest against its files and its
// reference on the way out, as the JetStream store does.
type Memory struct {
	mu        sync.Mutex
	files     map[string][]byte
	manifests map[string]artifact.Manifest
	err       error
}

var _ artifact.Store = (*Memory)(nil)

// NewMemory returns an empty store.
func NewMemory() *Memory {
	return &Memory{files: map[string][]byte{}, manifests: map[string]artifact.Manifest{}}
}

// Fail makes every read return err from now on (a store that does not
// answer); nil heals it.
func (s *Memory) Fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = err
}

// Empty says the store holds nothing.
func (s *Memory) Empty() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.files) == 0 && len(s.manifests) == 0
}

// DeleteFile forgets the file of that digest (a store that lost it).
func (s *Memory) DeleteFile(sha string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.files, sha)
}

// DeleteManifest forgets the manifest stored under object.
func (s *Memory) DeleteManifest(object string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.manifests, object)
}

// PutFile stores a file under its digest; false when it was there.
func (s *Memory) PutFile(_ context.Context, sha string, size int64, r io.Reader) (bool, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return false, err
	}
	sum := sha256.Sum256(data)
	if hex.EncodeToString(sum[:]) != sha || int64(len(data)) != size {
		return false, fmt.Errorf("%w: %s", artifact.ErrCorrupt, sha)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.files[sha]; ok {
		return false, nil
	}
	s.files[sha] = data
	return true, nil
}

// OpenFile opens the file of that digest.
func (s *Memory) OpenFile(_ context.Context, sha string) (io.ReadCloser, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return nil, s.err
	}
	data, ok := s.files[sha]
	if !ok {
		return nil, fmt.Errorf("%w: %s", artifact.ErrNotFound, sha)
	}
	return io.NopCloser(bytes.NewReader(data)), nil
}

// PutManifest stores a manifest and returns its reference.
func (s *Memory) PutManifest(_ context.Context, m artifact.Manifest) (events.BundleRef, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	name := artifact.ManifestObject(m.Digest)
	s.manifests[name] = m
	return events.BundleRef{Store: "memory", Bucket: "artifacts", Object: name, Size: m.Bytes, SHA256: m.Digest, Files: len(m.Files)}, nil
}

// Manifest reads the manifest a reference names.
func (s *Memory) Manifest(_ context.Context, ref events.BundleRef) (artifact.Manifest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return artifact.Manifest{}, s.err
	}
	m, ok := s.manifests[ref.Object]
	if !ok {
		return artifact.Manifest{}, fmt.Errorf("%w: %s", artifact.ErrNotFound, ref.Object)
	}
	if again := artifact.NewManifest(m.Files); again.Digest != m.Digest || (ref.SHA256 != "" && ref.SHA256 != m.Digest) {
		return artifact.Manifest{}, fmt.Errorf("%w: %s", artifact.ErrCorrupt, ref.Object)
	}
	return m, nil
}
