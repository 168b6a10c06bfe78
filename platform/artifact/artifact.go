// Package artifact stores accepted bundles, content addressed, so that the
// later stages (contract, the runners) read exactly what the build stage
// checked.
//
// A bundle is stored as its files and a manifest:
//
//	files/sha256/<hex>        one object per distinct file content
//	bundles/<digest>.json     the manifest: every path with its size and sha256
//
// A file is stored once however many bundles hold it (two submissions that
// share a shard share its object), and a reader can read the first bytes
// of a file without fetching the rest, which is how the contract stage
// reads safetensors headers.
//
// The bundle digest is the sha256 of the manifest lines
//
//	<sha256 hex> <size> <path>\n
//
// sorted by path: it names the content, not the archive that carried it, so
// the same files give the same digest however they were packed.
package artifact

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/bus"
)

// ErrNotFound is returned for a file or manifest the store does not hold.
var ErrNotFound = errors.New("artifact: not found")

// ErrCorrupt is returned when stored content does not match its digest.
var ErrCorrupt = errors.New("artifact: stored content does not match its digest")

// Manifest lists the files of a bundle.
type Manifest struct {
	Digest string              `json:"digest"`
	Files  []events.FileDigest `json:"files"`
	Bytes  int64               `json:"bytes"`
}

// NewManifest sorts files by path and computes the bundle digest and size.
func NewManifest(files []events.FileDigest) Manifest {
	fs := slices.Clone(files)
	slices.SortFunc(fs, func(a, b events.FileDigest) int { return strings.Compare(a.Path, b.Path) })
	h := sha256.New()
	var n int64
	for _, f := range fs {
		fmt.Fprintf(h, "%s %d %s\n", f.SHA256, f.Size, f.Path)
		n += f.Size
	}
	return Manifest{Digest: hex.EncodeToString(h.Sum(nil)), Files: fs, Bytes: n}
}

// File returns the manifest's entry for path.
func (m Manifest) File(path string) (events.FileDigest, bool) {
	i, ok := slices.BinarySearchFunc(m.Files, path, func(f events.FileDigest, p string) int { return strings.Compare(f.Path, p) })
	if !ok {
		return events.FileDigest{}, false
	}
	return m.Files[i], true
}

// Store holds artifacts. The JetStream object store is the default; the
// interface is what an S3 store would implement.
type Store interface {
	// PutFile stores content whose sha256 and size are known. It is a
	// no-op when the store already holds that content (stored false). The
	// store checks what it received against sha and size, so a file that
	// changed on its way in is refused with ErrCorrupt.
	PutFile(ctx context.Context, sha string, size int64, r io.Reader) (stored bool, err error)
	// OpenFile opens stored content for reading. Closing early stops the
	// transfer, so reading a prefix costs about that prefix.
	OpenFile(ctx context.Context, sha string) (io.ReadCloser, error)
	// PutManifest stores a manifest and returns its reference.
	PutManifest(ctx context.Context, m Manifest) (events.BundleRef, error)
	// Manifest reads the manifest ref points at and checks its digest.
	Manifest(ctx context.Context, ref events.BundleRef) (Manifest, error)
}

// FileObject and ManifestObject name the objects of the layout.
func FileObject(sha string) string        { return "files/sha256/" + sha }
func ManifestObject(digest string) string { return "bundles/" + digest + ".json" }

// JetStream is a Store on a JetStream object store.
type JetStream struct {
	os     jetstream.ObjectStore
	bucket string
	// puts serializes the PutFiles of one content in this process, by
	// the first byte of its digest (see PutFile).
	puts [256]sync.Mutex
}

// NewJetStream returns a Store on the object store named bucket.
func NewJetStream(ctx context.Context, js jetstream.JetStream, bucket string) (*JetStream, error) {
	os, err := js.ObjectStore(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("artifact: open object store %s: %w", bucket, err)
	}
	return &JetStream{os: os, bucket: bucket}, nil
}

// natsDigest is the object store's own digest form, "SHA-256=<base64url>".
func natsDigest(sha string) (string, error) {
	b, err := hex.DecodeString(sha)
	if err != nil || len(b) != sha256.Size {
		return "", fmt.Errorf("artifact: %q is not a sha256 hex digest", sha)
	}
	return "SHA-256=" + base64.URLEncoding.EncodeToString(b), nil
}

// PutFile implements Store. The object store computes its own SHA-256 of
// what it stored; a mismatch deletes the object and returns ErrCorrupt.
//
// Invariant: two PutFiles of one content never run at once in a process.
// The object store's Put writes an object's chunks under a new id, then
// its meta, then purges the chunks of the meta it found when it began;
// and the touch below republishes the meta it read. Side by side (the
// build stage builds several bundles at once, and bundles share files),
// a touch that read the first put's meta could republish it after a
// second put had purged that meta's chunks, leaving a meta whose chunks
// are gone: every read of the file then timed out
// (TestConcurrentPutsOfOneFileStayReadable).
func (s *JetStream) PutFile(ctx context.Context, sha string, size int64, r io.Reader) (bool, error) {
	want, err := natsDigest(sha)
	if err != nil {
		return false, err
	}
	b, _ := hex.DecodeString(sha[:2]) // natsDigest checked sha is hex
	mu := &s.puts[b[0]]
	mu.Lock()
	defer mu.Unlock()
	name := FileObject(sha)
	if info, err := s.os.GetInfo(ctx, name); err == nil && info.Digest == want && int64(info.Size) == size {
		// Touch it: the artifact collector (package gc) never deletes
		// an object younger than its grace period, so a file this put
		// shares with a bundle the collector may be sweeping is kept
		// for the bundle being stored. Rewriting the meta is the
		// object store's only way to renew its time.
		if err := s.os.UpdateMeta(ctx, name, info.ObjectMeta); err != nil {
			return false, fmt.Errorf("artifact: touch %s: %w", name, bus.FullObjectStore(err, s.bucket))
		}
		return false, nil
	} else if err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return false, fmt.Errorf("artifact: look up %s: %w", name, err)
	}
	info, err := s.os.Put(ctx, jetstream.ObjectMeta{Name: name}, r)
	if err != nil {
		return false, fmt.Errorf("artifact: put %s: %w", name, bus.FullObjectStore(err, s.bucket))
	}
	if info.Digest != want || int64(info.Size) != size {
		_ = s.os.Delete(ctx, name)
		return false, fmt.Errorf("%w: %s: stored %d bytes with %s, want %d bytes", ErrCorrupt, name, info.Size, info.Digest, size)
	}
	return true, nil
}

// OpenFile implements Store.
func (s *JetStream) OpenFile(ctx context.Context, sha string) (io.ReadCloser, error) {
	name := FileObject(sha)
	r, err := s.os.Get(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, fmt.Errorf("%w: %s in %s", ErrNotFound, name, s.bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("artifact: get %s: %w", name, err)
	}
	return r, nil
}

// PutManifest implements Store.
func (s *JetStream) PutManifest(ctx context.Context, m Manifest) (events.BundleRef, error) {
	data, err := json.Marshal(m)
	if err != nil {
		return events.BundleRef{}, fmt.Errorf("artifact: marshal manifest: %w", err)
	}
	name := ManifestObject(m.Digest)
	if _, err := s.os.PutBytes(ctx, name, data); err != nil {
		return events.BundleRef{}, fmt.Errorf("artifact: put %s: %w", name, bus.FullObjectStore(err, s.bucket))
	}
	return events.BundleRef{Store: "jetstream", Bucket: s.bucket, Object: name, Size: m.Bytes, SHA256: m.Digest, Files: len(m.Files)}, nil
}

// maxManifestBytes bounds a manifest read back.
const maxManifestBytes = 8 << 20

// Manifest implements Store.
func (s *JetStream) Manifest(ctx context.Context, ref events.BundleRef) (Manifest, error) {
	if ref.Bucket != s.bucket {
		return Manifest{}, fmt.Errorf("artifact: manifest %s is in bucket %s, this store is %s", ref.Object, ref.Bucket, s.bucket)
	}
	r, err := s.os.Get(ctx, ref.Object)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return Manifest{}, fmt.Errorf("%w: manifest %s in %s", ErrNotFound, ref.Object, s.bucket)
	}
	if err != nil {
		return Manifest{}, fmt.Errorf("artifact: get %s: %w", ref.Object, err)
	}
	defer r.Close()
	data, err := io.ReadAll(io.LimitReader(r, maxManifestBytes+1))
	if err != nil {
		return Manifest{}, fmt.Errorf("artifact: read %s: %w", ref.Object, err)
	}
	return decodeManifest(data, ref)
}

func decodeManifest(data []byte, ref events.BundleRef) (Manifest, error) {
	if len(data) > maxManifestBytes {
		return Manifest{}, fmt.Errorf("%w: manifest %s is over %d bytes", ErrCorrupt, ref.Object, maxManifestBytes)
	}
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return Manifest{}, fmt.Errorf("%w: manifest %s: %w", ErrCorrupt, ref.Object, err)
	}
	again := NewManifest(m.Files)
	if again.Digest != m.Digest || again.Bytes != m.Bytes || (ref.SHA256 != "" && ref.SHA256 != m.Digest) {
		return Manifest{}, fmt.Errorf("%w: manifest %s says %s, its files give %s (the event says %s)", ErrCorrupt, ref.Object, m.Digest, again.Digest, ref.SHA256)
	}
	m.Files = again.Files
	return m, nil
}

// PutDir stores the regular files directly in dir (not its sub-folders)
// as one bundle, each file content addressed (storing it again is a
// no-op), and returns the bundle's reference. A campaign's BF16 reference
// checkpoint and its eval suite are stored this way.
func PutDir(ctx context.Context, s Store, dir string) (events.BundleRef, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return events.BundleRef{}, err
	}
	var files []events.FileDigest
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		f, err := putPath(ctx, s, filepath.Join(dir, e.Name()), e.Name())
		if err != nil {
			return events.BundleRef{}, err
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		return events.BundleRef{}, fmt.Errorf("%w: no files in %s", os.ErrNotExist, dir)
	}
	return s.PutManifest(ctx, NewManifest(files))
}

func putPath(ctx context.Context, s Store, path, name string) (events.FileDigest, error) {
	f, err := os.Open(path)
	if err != nil {
		return events.FileDigest{}, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return events.FileDigest{}, fmt.Errorf("artifact: read %s: %w", path, err)
	}
	fd := events.FileDigest{Path: name, Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fd, fmt.Errorf("artifact: %w", err)
	}
	if _, err := s.PutFile(ctx, fd.SHA256, fd.Size, f); err != nil {
		return fd, fmt.Errorf("artifact: store %s: %w", path, err)
	}
	return fd, nil
}

// PutTree stores every regular file under dir, its sub-folders included,
// as one bundle whose paths are slash-separated and relative to dir, and
// returns the bundle's reference. A symbolic link to a regular file is
// stored as that file's content; any other non-regular entry is skipped.
// Each file is content addressed, so storing a tree again stores nothing
// new and gives the same digest. A campaign folder is pushed this way.
func PutTree(ctx context.Context, s Store, dir string) (events.BundleRef, error) {
	var files []events.FileDigest
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		if d.Type()&os.ModeSymlink != 0 {
			st, err := os.Stat(path)
			if err != nil || !st.Mode().IsRegular() {
				return nil
			}
		} else if !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return fmt.Errorf("artifact: %w", err)
		}
		f, err := putPath(ctx, s, path, filepath.ToSlash(rel))
		if err != nil {
			return err
		}
		files = append(files, f)
		return nil
	})
	if err != nil {
		return events.BundleRef{}, err
	}
	if len(files) == 0 {
		return events.BundleRef{}, fmt.Errorf("%w: no files in %s", os.ErrNotExist, dir)
	}
	return s.PutManifest(ctx, NewManifest(files))
}

// GetTree writes every file of the bundle ref names into dir, which must
// not exist yet, checking each file's size and sha256 on the way. It
// writes into a temporary folder beside dir and renames it into place
// once every file landed, so dir exists only complete: a reader that
// finds dir may use it. A path that would leave dir is refused (os.Root).
func GetTree(ctx context.Context, s Store, ref events.BundleRef, dir string) error {
	m, err := s.Manifest(ctx, ref)
	if err != nil {
		return err
	}
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("artifact: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, ".get-")
	if err != nil {
		return fmt.Errorf("artifact: %w", err)
	}
	defer os.RemoveAll(tmp)
	root, err := os.OpenRoot(tmp)
	if err != nil {
		return fmt.Errorf("artifact: %w", err)
	}
	defer root.Close()
	for _, f := range m.Files {
		if err := getFile(ctx, s, root, f); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("artifact: %w", err)
	}
	return nil
}

// getFile copies one stored file into root and checks it against f.
func getFile(ctx context.Context, s Store, root *os.Root, f events.FileDigest) error {
	if d := filepath.Dir(filepath.FromSlash(f.Path)); d != "." {
		if err := root.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("artifact: %w", err)
		}
	}
	r, err := s.OpenFile(ctx, f.SHA256)
	if err != nil {
		return err
	}
	defer r.Close()
	w, err := root.Create(filepath.FromSlash(f.Path))
	if err != nil {
		return fmt.Errorf("artifact: %w", err)
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(w, h), r)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("artifact: get %s: %w", f.Path, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); n != f.Size || got != f.SHA256 {
		return fmt.Errorf("%w: %s is %d bytes with sha256 %s, the manifest says %d bytes with %s", ErrCorrupt, f.Path, n, got, f.Size, f.SHA256)
	}
	return nil
}
