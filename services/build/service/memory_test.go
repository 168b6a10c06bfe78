package service_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"sync"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/artifact"
	"github.com/lowbarena/lowbarena/services/build/service"
)

// memArtifacts is an artifact.Store in memory, with the JetStream
// store's checks: content is checked against its digest on the way in,
// and a manifest against its files and its reference on the way out.
type memArtifacts struct {
	mu        sync.Mutex
	files     map[string][]byte
	manifests map[string]artifact.Manifest
}

var _ artifact.Store = (*memArtifacts)(nil)

func newMemArtifacts() *memArtifacts {
	return &memArtifacts{files: map[string][]byte{}, manifests: map[string]artifact.Manifest{}}
}

func (s *memArtifacts) PutFile(_ context.Context, sha string, size int64, r io.Reader) (bool, error) {
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

func (s *memArtifacts) OpenFile(_ context.Context, sha string) (io.ReadCloser, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	data, ok := s.files[sha]
	if !ok {
		return nil, fmt.Errorf("%w: %s", artifact.ErrNotFound, sha)
	}
	return io.NopCloser(bytes.NewReader(data)), nil
}

func (s *memArtifacts) PutManifest(_ context.Context, m artifact.Manifest) (events.BundleRef, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	name := artifact.ManifestObject(m.Digest)
	s.manifests[name] = m
	return events.BundleRef{Store: "memory", Bucket: "artifacts", Object: name, Size: m.Bytes, SHA256: m.Digest, Files: len(m.Files)}, nil
}

func (s *memArtifacts) Manifest(_ context.Context, ref events.BundleRef) (artifact.Manifest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.manifests[ref.Object]
	if !ok {
		return artifact.Manifest{}, fmt.Errorf("%w: %s", artifact.ErrNotFound, ref.Object)
	}
	if again := artifact.NewManifest(m.Files); again.Digest != m.Digest || (ref.SHA256 != "" && ref.SHA256 != m.Digest) {
		return artifact.Manifest{}, fmt.Errorf("%w: %s", artifact.ErrCorrupt, ref.Object)
	}
	return m, nil
}

// empty says the store holds nothing.
func (s *memArtifacts) empty() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.files) == 0 && len(s.manifests) == 0
}

// memUploads are archives in memory by bucket and object; err, when set,
// is what every Open returns (a store that does not answer).
type memUploads struct {
	archives map[string]map[string][]byte
	err      error
}

func (u *memUploads) put(bucket, object string, archive []byte) {
	if u.archives == nil {
		u.archives = map[string]map[string][]byte{}
	}
	if u.archives[bucket] == nil {
		u.archives[bucket] = map[string][]byte{}
	}
	u.archives[bucket][object] = archive
}

func (u *memUploads) Open(_ context.Context, ref events.BundleRef) (io.ReadCloser, error) {
	if u.err != nil {
		return nil, u.err
	}
	b, ok := u.archives[ref.Bucket]
	if !ok {
		return nil, fmt.Errorf("%w: %s", service.ErrNoBucket, ref.Bucket)
	}
	data, ok := b[ref.Object]
	if !ok {
		return nil, fmt.Errorf("%w: %s", service.ErrNoUpload, ref.Object)
	}
	return io.NopCloser(bytes.NewReader(data)), nil
}

// memBundles are the first submissions of each digest in memory.
type memBundles struct {
	mu    sync.Mutex
	first map[string]string
}

func (m *memBundles) First(_ context.Context, digest, id string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.first == nil {
		m.first = map[string]string{}
	}
	if f, ok := m.first[digest]; ok {
		return f, nil
	}
	m.first[digest] = id
	return id, nil
}
