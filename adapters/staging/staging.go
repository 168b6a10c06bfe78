// Package staging stages checkpoints submitted by reference onto a pod:
// their shards are downloaded once into a content-addressed cache that
// every runner of the pod shares, each checked against its declared
// sha256, and each job's checkpoint folder is assembled from the cache
// with hard links.
//
// The cache is a folder (Options.Dir):
//
//	.lock                          the cache lock, held (flock, exclusive) to admit, evict and pin
//	blobs/<sha256>                 a complete, verified file
//	partial/<sha256>.<size>        a download in progress, or broken and waiting to be resumed
//	checkouts/<name>/              a checkpoint folder: small files written by the caller,
//	                               shards hard-linked to their blobs, .complete last
//
// Invariants:
//
//   - Size cap. Blobs and partial downloads (counted at their full
//     declared size from the moment they are admitted) hold at most
//     MaxBytes. A checkout whose shards cannot fit is refused before its
//     first byte is downloaded: one over the cap by itself, or over what
//     other jobs hold (blobs in use, downloads in progress) leaves of it.
//     A download is admitted under the cache lock after evicting what it
//     needs, least recently used first (a blob's modification time is its
//     last use); checkouts' small files are not counted.
//   - In use. A job holds each blob it uses with a shared flock from its
//     checkout until Lease.Release (and the kernel releases it when the
//     process dies); eviction takes an exclusive flock without waiting
//     and skips any blob it cannot take, so a file in use is never
//     evicted. A partial being downloaded is held exclusively by its
//     downloader and is skipped the same way. Evicting a blob also removes
//     every checkout that links it, so the space is freed; a later job
//     assembles its checkout again.
//   - Processes. Every decision is taken under the cache lock, which is a
//     flock on a descriptor of its own per acquisition: runners in one
//     process or in many (one per GPU) share one cache safely.
//   - Resume. A broken download leaves its partial file; the next attempt
//     (in this call, or a later job's) hashes the bytes on disk and asks
//     the repository for the rest with a Range request. A server that
//     ignores it sends the whole file, which is then written from the
//     start.
//   - Digests. A blob is renamed into blobs/ only once its sha256 and size
//     are the declared ones; a mismatch of the bytes downloaded removes
//     the partial and fails with reason.ReferenceDigestMismatch. A
//     mismatch the repository states (a digest or size in its headers, a
//     416 that persists) fails the same way but keeps the partial: its
//     bytes are checked when it is finished, and may yet be right.
package staging

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/lowbarena/lowbarena/adapters/hub"

	"github.com/lowbarena/lowbarena/domain/bundle"
	"github.com/lowbarena/lowbarena/domain/modelrepo"
	"github.com/lowbarena/lowbarena/events/reason"
)

// Error is a staging refusal that is not the repository's: reason.StagingCacheFull.
type Error struct {
	Code    reason.Code
	Message string
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// DefaultAttempts is how often one file's transfer is tried (and resumed)
// in one checkout.
const DefaultAttempts = 4

// Options configure a Cache.
type Options struct {
	// Dir is the cache's folder; every runner of a pod should name the
	// same one.
	Dir string
	// MaxBytes caps the blobs and partial downloads.
	MaxBytes int64
	// Hub reads the repositories.
	Hub *hub.Client
	// Attempts is how often one file's transfer is tried, each resuming
	// from the bytes on disk, while it fails transiently.
	Attempts int
	// Log says what the cache downloads, resumes and evicts.
	Log *slog.Logger
}

// Cache is a pod's content-addressed cache of checkpoint files.
type Cache struct {
	opts Options
	// mu orders this process's own goroutines before the flock, which
	// orders processes (a flock per acquisition already excludes other
	// descriptors of this process; mu saves the descriptor churn).
	mu sync.Mutex
}

// Progress is told how many bytes of a checkout are in the cache so far,
// of how many.
type Progress func(done, total int64)

var digestHex = regexp.MustCompile(`^[0-9a-f]{64}$`)

// Open opens (creating) the cache in o.Dir.
func Open(o Options) (*Cache, error) {
	if o.Dir == "" || o.MaxBytes <= 0 || o.Hub == nil {
		return nil, errors.New("staging: a cache needs a folder, a positive size cap and a repository client")
	}
	if o.Attempts <= 0 {
		o.Attempts = DefaultAttempts
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	for _, d := range []string{"blobs", "partial", "checkouts"} {
		if err := os.MkdirAll(filepath.Join(o.Dir, d), 0o755); err != nil {
			return nil, fmt.Errorf("staging: %w", err)
		}
	}
	return &Cache{opts: o}, nil
}

// lock takes the cache lock and returns its release.
func (c *Cache) lock() (func(), error) {
	c.mu.Lock()
	f, err := os.OpenFile(filepath.Join(c.opts.Dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		c.mu.Unlock()
		return nil, fmt.Errorf("staging: %w", err)
	}
	if err := flock(f, syscall.LOCK_EX); err != nil {
		f.Close()
		c.mu.Unlock()
		return nil, fmt.Errorf("staging: lock the cache: %w", err)
	}
	return func() { f.Close(); c.mu.Unlock() }, nil
}

func flock(f *os.File, how int) error {
	for {
		err := syscall.Flock(int(f.Fd()), how)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

func (c *Cache) blob(sha string) string { return filepath.Join(c.opts.Dir, "blobs", sha) }
func (c *Cache) partial(f modelrepo.File) string {
	return filepath.Join(c.opts.Dir, "partial", f.SHA256+"."+strconv.FormatInt(f.Size, 10))
}
func (c *Cache) checkouts() string { return filepath.Join(c.opts.Dir, "checkouts") }

// Lease is a checkout in use: its folder, and its blobs held against
// eviction until Release.
type Lease struct {
	// Dir is the checkpoint folder.
	Dir   string
	mu    sync.Mutex
	files []*os.File
}

// Release lets the checkout's blobs be evicted again. It is idempotent.
func (l *Lease) Release() {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range l.files {
		_ = f.Close() // closing the descriptor drops its flock
	}
	l.files = nil
}

// Checkout makes name a checkpoint folder holding remote's files from the
// cache (downloaded from repo when missing, resumed when broken) and what
// write puts there (the small files), and returns it leased. A folder
// assembled before and still whole is reused as it is.
//
// Errors: a *modelrepo.Error for a repository that fails or a file that is not
// the declared one, an *Error (reason.StagingCacheFull) when the cache cannot hold
// the checkpoint, anything else for the machine (a full disk).
func (c *Cache) Checkout(ctx context.Context, name string, repo modelrepo.Repo, remote []modelrepo.File, write func(dir string) error, progress Progress) (_ *Lease, err error) {
	if !validName(name) {
		return nil, fmt.Errorf("staging: checkout name %q is not a plain name", name)
	}
	if progress == nil {
		progress = func(int64, int64) {}
	}
	uniq := map[string]modelrepo.File{}
	var total int64
	for _, f := range remote {
		if !digestHex.MatchString(f.SHA256) || strings.Contains(f.Path, "/") || !validName(f.Path) {
			return nil, fmt.Errorf("staging: %q (%q) is not a top-level file with a sha256", f.Path, f.SHA256)
		}
		if _, ok := uniq[f.SHA256]; !ok {
			uniq[f.SHA256] = f
			total += f.Size
		}
	}
	shas := make([]string, 0, len(uniq))
	for s := range uniq {
		shas = append(shas, s)
	}
	slices.SortFunc(shas, func(a, b string) int { return strings.Compare(uniq[a].Path, uniq[b].Path) })

	if err := c.room(uniq, total); err != nil {
		return nil, err
	}
	lease := &Lease{}
	defer func() {
		if err != nil {
			lease.Release()
		}
	}()
	var done int64
	progress(0, total)
	for _, sha := range shas {
		f := uniq[sha]
		pinned, err := c.pinIfPresent(lease, f)
		if err != nil {
			return nil, err
		}
		if !pinned {
			if err := c.download(ctx, repo, f, lease, func(n int64) { progress(done+n, total) }); err != nil {
				return nil, err
			}
		}
		done += f.Size
		progress(done, total)
	}
	lease.Dir, err = c.assemble(name, remote, write)
	if err != nil {
		return nil, err
	}
	return lease, nil
}

// validName is a plain file name: no separator, nothing hidden.
func validName(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.ContainsAny(s, `/\`) && !strings.HasPrefix(s, ".") && len(s) <= 255
}

// pinIfPresent pins f's blob when the cache holds it.
func (c *Cache) pinIfPresent(lease *Lease, f modelrepo.File) (bool, error) {
	unlock, err := c.lock()
	if err != nil {
		return false, err
	}
	defer unlock()
	return c.pin(lease, f)
}

// pin opens f's blob, holds it shared in lease and marks it used now. The
// cache lock must be held (eviction takes it too, so the blob cannot go
// between the open and the flock).
func (c *Cache) pin(lease *Lease, f modelrepo.File) (bool, error) {
	b, err := os.Open(c.blob(f.SHA256))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("staging: %w", err)
	}
	st, err := b.Stat()
	if err != nil || st.Size() != f.Size {
		b.Close()
		if err == nil {
			// Not the declared size: not this file after all (a blob
			// is named by its content; its size is part of it).
			_ = os.Remove(c.blob(f.SHA256))
		}
		return false, err
	}
	if err := flock(b, syscall.LOCK_SH); err != nil {
		b.Close()
		return false, fmt.Errorf("staging: pin %s: %w", f.Path, err)
	}
	now := time.Now()
	_ = os.Chtimes(b.Name(), now, now)
	lease.mu.Lock()
	lease.files = append(lease.files, b)
	lease.mu.Unlock()
	return true, nil
}

// download brings f into the cache, resuming a partial download, and pins
// it. Only admission and the final rename take the cache lock; the
// transfer holds the partial file exclusively, so a second runner that
// wants the same file waits for it instead of downloading it again.
func (c *Cache) download(ctx context.Context, repo modelrepo.Repo, f modelrepo.File, lease *Lease, progress func(int64)) error {
	part, err := c.admit(ctx, f, lease)
	if err != nil || part == nil {
		return err // nil part: the blob arrived meanwhile and is pinned
	}
	defer part.Close()

	have, h, err := c.resume(part, f)
	if err != nil {
		return err
	}
	if have > 0 {
		c.opts.Log.Info("resuming a download", "file", f.Path, "repository", repo.String(), "from", have, "of", f.Size)
	}
	progress(have)
	p := newPipe(h, 4, 1<<20)
	defer p.close()
	for attempt := 1; ; attempt++ {
		n, err := c.transfer(ctx, repo, f, part, p, have, progress)
		have = n
		if err == nil {
			break
		}
		// A mismatch the repository states (its headers, a 416 that
		// persists) leaves the partial as it is: the bytes on disk are
		// checked against the declared sha256 once the file is whole,
		// and a later job resumes them.
		// A rate limit longer than the client waits in place is the
		// caller's to wait out (the runner hands the job back for it).
		he := modelrepo.AsError(err)
		if _, limited := modelrepo.Wait(err); limited || he == nil || !he.Transient() || attempt >= c.opts.Attempts {
			return err
		}
		c.opts.Log.Info("download broke; resuming", "file", f.Path, "at", have, "of", f.Size, "attempt", attempt, "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
		}
	}
	if sum := hex.EncodeToString(p.sum()); have != f.Size || sum != f.SHA256 {
		_ = os.Remove(part.Name())
		return &modelrepo.Error{Code: reason.ReferenceDigestMismatch, File: f.Path, Message: fmt.Sprintf(
			"%s at %s is not the file checkpoint.json declares (%d bytes, sha256 %.12s): the repository served %d bytes with sha256 %.12s; the file changed since it was declared: pin the revision to a commit and declare the file's current size and sha256",
			f.Path, repo, f.Size, f.SHA256, have, sum)}
	}
	if err := part.Sync(); err != nil {
		return fmt.Errorf("staging: %w", err)
	}
	return c.finish(part, f, lease)
}

// admit makes room for f and returns its partial file held exclusively,
// or nil when the blob is already in the cache (pinned into lease).
func (c *Cache) admit(ctx context.Context, f modelrepo.File, lease *Lease) (*os.File, error) {
	for {
		unlock, err := c.lock()
		if err != nil {
			return nil, err
		}
		if ok, err := c.pin(lease, f); ok || err != nil {
			unlock()
			return nil, err
		}
		path := c.partial(f)
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			if err := c.evict(f.Size, f.SHA256); err != nil {
				unlock()
				return nil, err
			}
		}
		part, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			unlock()
			return nil, fmt.Errorf("staging: %w", err)
		}
		now := time.Now()
		_ = os.Chtimes(path, now, now)
		unlock()
		// Another runner may be downloading it: wait for its exclusive
		// hold, then look again (it may have finished).
		if err := lockWait(ctx, part); err != nil {
			part.Close()
			return nil, err
		}
		if same(part, path) {
			return part, nil
		}
		part.Close() // finished or evicted while we waited: start over
	}
}

// lockWait takes f exclusively, waiting for its holder (another runner's
// download) as long as ctx lasts.
func lockWait(ctx context.Context, f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			return fmt.Errorf("staging: %w", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// same reports whether f is still the file at path.
func same(f *os.File, path string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Stat(path)
	return err == nil && os.SameFile(a, b)
}

// resume hashes the bytes a partial file already holds.
func (c *Cache) resume(part *os.File, f modelrepo.File) (int64, hash.Hash, error) {
	h := sha256.New()
	st, err := part.Stat()
	if err != nil {
		return 0, h, fmt.Errorf("staging: %w", err)
	}
	have := st.Size()
	if have > f.Size {
		if err := part.Truncate(0); err != nil {
			return 0, h, fmt.Errorf("staging: %w", err)
		}
		have = 0
	}
	if have > 0 {
		if _, err := io.Copy(h, io.NewSectionReader(part, 0, have)); err != nil {
			return 0, h, fmt.Errorf("staging: %w", err)
		}
	}
	return have, h, nil
}

// transfer asks the repository for f from have on and appends what comes
// to part and p's hash, returning how many bytes part holds.
func (c *Cache) transfer(ctx context.Context, repo modelrepo.Repo, f modelrepo.File, part *os.File, p *pipe, have int64, progress func(int64)) (int64, error) {
	if have == f.Size {
		return have, nil
	}
	body, err := c.opts.Hub.Open(ctx, repo, f, have)
	if err != nil {
		return have, err
	}
	defer body.Close()
	if body.Offset != have {
		c.opts.Log.Info("the repository ignored the range; downloading from the start", "file", f.Path, "had", have)
		if err := part.Truncate(0); err != nil {
			return have, fmt.Errorf("staging: %w", err)
		}
		p.reset()
		have = 0
		progress(0)
	}
	for {
		buf := p.buffer()
		n, rerr := io.ReadFull(body, buf)
		if rerr == io.ErrUnexpectedEOF {
			rerr = io.EOF // the last, short buffer (the hub's own errors are *modelrepo.Error)
		}
		if n == 0 {
			p.release(buf)
		} else {
			if _, err := part.WriteAt(buf[:n], have); err != nil {
				p.release(buf)
				return have, fmt.Errorf("staging: write %s: %w", f.Path, err)
			}
			p.hash(buf[:n])
			have += int64(n)
			progress(have)
		}
		if rerr == io.EOF {
			if have < f.Size {
				return have, &modelrepo.Error{Code: reason.ReferenceUnavailable, File: f.Path, Message: fmt.Sprintf("%s at %s: the answer ended at byte %d of %d", f.Path, repo, have, f.Size)}
			}
			return have, nil
		}
		if rerr != nil {
			return have, rerr
		}
	}
}

// pipe hashes on a goroutine of its own, so that a download's digest
// overlaps its network reads and disk writes instead of following them.
// Buffers go round: buffer takes a free one, hash hands it (filled) to
// the hashing goroutine, which frees it once hashed, in order.
type pipe struct {
	h    hash.Hash
	work chan []byte
	free chan []byte
	ack  chan struct{}
}

func newPipe(h hash.Hash, buffers, size int) *pipe {
	p := &pipe{h: h, work: make(chan []byte, buffers), free: make(chan []byte, buffers), ack: make(chan struct{})}
	for range buffers {
		p.free <- make([]byte, size)
	}
	go func() {
		for b := range p.work {
			if b == nil {
				p.ack <- struct{}{}
				continue
			}
			p.h.Write(b)
			p.free <- b[:cap(b)]
		}
	}()
	return p
}

func (p *pipe) buffer() []byte   { return <-p.free }
func (p *pipe) hash(b []byte)    { p.work <- b }
func (p *pipe) release(b []byte) { p.free <- b[:cap(b)] }

// wait returns once every buffer handed over is hashed.
func (p *pipe) wait() { p.work <- nil; <-p.ack }

func (p *pipe) sum() []byte { p.wait(); return p.h.Sum(nil) }
func (p *pipe) reset()      { p.wait(); p.h.Reset() }
func (p *pipe) close()      { close(p.work) }

// finish renames a verified partial file into blobs/ and pins the blob.
func (c *Cache) finish(part *os.File, f modelrepo.File, lease *Lease) error {
	unlock, err := c.lock()
	if err != nil {
		return err
	}
	defer unlock()
	if err := os.Rename(part.Name(), c.blob(f.SHA256)); err != nil {
		return fmt.Errorf("staging: %w", err)
	}
	// The partial's exclusive hold is on the blob's inode now: drop it
	// before holding the blob shared.
	part.Close()
	ok, err := c.pin(lease, f)
	if err == nil && !ok {
		err = fmt.Errorf("staging: %s vanished after it was verified", f.Path)
	}
	return err
}

// entry is a blob or partial file the cache may evict.
type entry struct {
	path string
	size int64
	used time.Time
	blob bool
}

// usage lists the blobs and partial files and their total size.
func (c *Cache) usage() ([]entry, int64, error) {
	var out []entry
	var total int64
	for _, d := range []string{"blobs", "partial"} {
		des, err := os.ReadDir(filepath.Join(c.opts.Dir, d))
		if err != nil {
			return nil, 0, fmt.Errorf("staging: %w", err)
		}
		for _, de := range des {
			info, err := de.Info()
			if err != nil {
				continue // removed meanwhile
			}
			e := entry{path: filepath.Join(c.opts.Dir, d, de.Name()), size: info.Size(), used: info.ModTime(), blob: d == "blobs"}
			if !e.blob {
				// A partial counts at its full size from admission on.
				if i := strings.LastIndexByte(de.Name(), '.'); i > 0 {
					if n, err := strconv.ParseInt(de.Name()[i+1:], 10, 64); err == nil && n > e.size {
						e.size = n
					}
				}
			}
			out = append(out, e)
			total += e.size
		}
	}
	return out, total, nil
}

// Usage is the bytes the cache's blobs and partial downloads hold.
func (c *Cache) Usage() (int64, error) {
	unlock, err := c.lock()
	if err != nil {
		return 0, err
	}
	defer unlock()
	_, n, err := c.usage()
	return n, err
}

// evict frees room for need more bytes, least recently used first,
// skipping anything held (a blob a job uses, a partial being downloaded)
// and the partial of keep. The cache lock must be held.
func (c *Cache) evict(need int64, keep string) error {
	entries, total, err := c.usage()
	if err != nil {
		return err
	}
	if total+need <= c.opts.MaxBytes {
		return nil
	}
	slices.SortFunc(entries, func(a, b entry) int { return a.used.Compare(b.used) })
	for _, e := range entries {
		if total+need <= c.opts.MaxBytes {
			break
		}
		if !e.blob && strings.HasPrefix(filepath.Base(e.path), keep) {
			continue
		}
		freed, err := c.evictOne(e)
		if err != nil {
			return err
		}
		if freed {
			total -= e.size
		}
	}
	if total+need > c.opts.MaxBytes {
		return &Error{Code: reason.StagingCacheFull, Message: fmt.Sprintf(
			"staging needs %s (%d bytes) more, and the pod's cache holds %s it cannot free (shards in use by running jobs, this one's included, and downloads in progress) of its %s cap (the runner's --cache-bytes); the job can run again when the others end, or the operator can raise --cache-bytes",
			bundle.HumanSize(need), need, bundle.HumanSize(total), bundle.HumanSize(c.opts.MaxBytes))}
	}
	return nil
}

// room refuses a checkout whose unique files (total bytes) cannot fit
// in the cache, before any of them is downloaded: over the cap by
// themselves, or over what the blobs and downloads other jobs hold leave
// of it. The sentence says what is needed, the cap, and what others hold.
func (c *Cache) room(uniq map[string]modelrepo.File, total int64) error {
	if total > c.opts.MaxBytes {
		return &Error{Code: reason.StagingCacheFull, Message: fmt.Sprintf(
			"the checkpoint's shards are %s (%d bytes) and the pod's cache is capped at %s (%d bytes, the runner's --cache-bytes): it can never be staged on this pod, whatever else the cache holds; the operator can raise --cache-bytes to at least %s",
			bundle.HumanSize(total), total, bundle.HumanSize(c.opts.MaxBytes), c.opts.MaxBytes, bundle.HumanSize(total))}
	}
	unlock, err := c.lock()
	if err != nil {
		return err
	}
	defer unlock()
	held, err := c.held(uniq)
	if err != nil {
		return err
	}
	if total+held > c.opts.MaxBytes {
		return c.full(total, held)
	}
	return nil
}

// full is the refusal of a checkout of total bytes that other jobs'
// held bytes leave no room for.
func (c *Cache) full(total, held int64) *Error {
	return &Error{Code: reason.StagingCacheFull, Message: fmt.Sprintf(
		"the checkpoint's shards are %s (%d bytes) and the pod's cache is capped at %s (%d bytes, the runner's --cache-bytes), of which other running jobs hold %s (shards in use, downloads in progress), leaving %s; the job can run again when they end, or the operator can raise --cache-bytes to at least %s",
		bundle.HumanSize(total), total, bundle.HumanSize(c.opts.MaxBytes), c.opts.MaxBytes, bundle.HumanSize(held), bundle.HumanSize(max(0, c.opts.MaxBytes-held)), bundle.HumanSize(total+held))}
}

// held is the bytes of the blobs and partial downloads that other jobs
// hold (a shared hold on a blob, a download in progress), not counting
// uniq's own, which this checkout keeps or waits for. The cache lock must
// be held.
func (c *Cache) held(uniq map[string]modelrepo.File) (int64, error) {
	entries, _, err := c.usage()
	if err != nil {
		return 0, err
	}
	var n int64
	for _, e := range entries {
		name := filepath.Base(e.path)
		if !e.blob {
			name, _, _ = strings.Cut(name, ".")
		}
		if _, ours := uniq[name]; ours {
			continue
		}
		if c.inUse(e.path) {
			n += e.size
		}
	}
	return n, nil
}

// inUse reports whether a blob or partial file is held by a job (the
// exclusive hold eviction takes is refused). The cache lock must be held.
func (c *Cache) inUse(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false // removed meanwhile
	}
	defer f.Close() // drops the probe's hold
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil
}

// evictOne removes e unless it is held, and the links to it in checkouts.
func (c *Cache) evictOne(e entry) (bool, error) {
	f, err := os.Open(e.path)
	if errors.Is(err, fs.ErrNotExist) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("staging: %w", err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return false, nil // in use
	}
	st, err := f.Stat()
	if err != nil {
		return false, fmt.Errorf("staging: %w", err)
	}
	if e.blob {
		if err := c.unlink(st); err != nil {
			return false, err
		}
	}
	if err := os.Remove(e.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("staging: %w", err)
	}
	c.opts.Log.Info("evicted from the cache", "file", filepath.Base(e.path), "bytes", e.size, "last_used", e.used)
	return true, nil
}

// unlink removes every checkout that holds a hard link to the blob st
// (its other files are small, and it is assembled again when used), so
// the blob's space is freed. A checkout in use, or being assembled, holds
// only pinned blobs, which are never evicted, so it is never removed.
func (c *Cache) unlink(st fs.FileInfo) error {
	dirs, err := os.ReadDir(c.checkouts())
	if err != nil {
		return fmt.Errorf("staging: %w", err)
	}
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		dir := filepath.Join(c.checkouts(), d.Name())
		files, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, fe := range files {
			if info, err := os.Lstat(filepath.Join(dir, fe.Name())); err == nil && os.SameFile(info, st) {
				if err := os.RemoveAll(dir); err != nil {
					return fmt.Errorf("staging: %w", err)
				}
				break
			}
		}
	}
	return nil
}

// assemble makes checkouts/name hold remote's blobs (hard links) and
// what write puts there, reusing a checkout that is whole. The blobs are
// pinned, so no link can be evicted while this runs.
func (c *Cache) assemble(name string, remote []modelrepo.File, write func(dir string) error) (string, error) {
	dir := filepath.Join(c.checkouts(), name)
	if c.whole(dir, remote) {
		return dir, nil
	}
	tmp, err := os.MkdirTemp(c.checkouts(), ".tmp-"+name+"-")
	if err != nil {
		return "", fmt.Errorf("staging: %w", err)
	}
	defer os.RemoveAll(tmp)
	if write != nil {
		if err := write(tmp); err != nil {
			return "", err
		}
	}
	for _, f := range remote {
		if err := os.Link(c.blob(f.SHA256), filepath.Join(tmp, f.Path)); err != nil {
			return "", fmt.Errorf("staging: link %s: %w", f.Path, err)
		}
	}
	if err := os.WriteFile(filepath.Join(tmp, ".complete"), []byte(name+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("staging: %w", err)
	}
	unlock, err := c.lock()
	if err != nil {
		return "", err
	}
	defer unlock()
	if c.whole(dir, remote) { // another runner assembled it meanwhile
		return dir, nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return "", fmt.Errorf("staging: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", fmt.Errorf("staging: %w", err)
	}
	return dir, nil
}

// whole reports whether dir is a finished checkout whose shards are the
// cache's blobs.
func (c *Cache) whole(dir string, remote []modelrepo.File) bool {
	if _, err := os.Stat(filepath.Join(dir, ".complete")); err != nil {
		return false
	}
	for _, f := range remote {
		a, err := os.Lstat(filepath.Join(dir, f.Path))
		if err != nil {
			return false
		}
		b, err := os.Stat(c.blob(f.SHA256))
		if err != nil || !os.SameFile(a, b) {
			return false
		}
	}
	return true
}
