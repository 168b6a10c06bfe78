package build_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/services/build"
)

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
		return nil, fmt.Errorf("%w: %s", build.ErrNoBucket, ref.Bucket)
	}
	data, ok := b[ref.Object]
	if !ok {
		return nil, fmt.Errorf("%w: %s", build.ErrNoUpload, ref.Object)
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
