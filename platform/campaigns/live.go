package campaigns

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/domain/campaign"
	"github.com/lowbarena/lowbarena/platform/artifact"
)

// Live is a campaign.Source that follows the campaigns bucket: Open loads
// the current version of every campaign, Run applies each version pushed
// afterwards. Lookup and Tasks read one immutable Set swapped atomically,
// so a caller holding a *campaign.Campaign keeps the version it looked
// up (its folder in the cache stays) while a new one comes in.
type Live struct {
	kv    jetstream.KeyValue
	arts  artifact.Store
	cache string
	log   *slog.Logger

	set     atomic.Pointer[campaign.Set]
	watcher jetstream.KeyWatcher

	// mu guards loaded: the entry each task's campaign in set came from.
	mu     sync.Mutex
	loaded map[string]Entry
	// applied is closed over by tests (Applied); nil in services.
	applied func(Entry, error)
}

var _ campaign.Source = (*Live)(nil)

// Open watches kv and loads, before it returns, the version every task
// runs now: each bundle from arts unpacked under cache. A version that
// does not load is logged and skipped (that task is unknown until a
// good version comes); an empty bucket is an arena with no campaign yet.
// Call Run to follow later pushes; it stops the watch when it returns.
func Open(ctx context.Context, kv jetstream.KeyValue, arts artifact.Store, cache string, log *slog.Logger) (*Live, error) {
	return open(ctx, kv, arts, cache, log, nil)
}

func open(ctx context.Context, kv jetstream.KeyValue, arts artifact.Store, cache string, log *slog.Logger, applied func(Entry, error)) (*Live, error) {
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("campaigns: watch: %w", err)
	}
	l := &Live{kv: kv, arts: arts, cache: cache, log: log, watcher: w, loaded: map[string]Entry{}, applied: applied}
	l.set.Store(&campaign.Set{})
	for {
		select {
		case <-ctx.Done():
			_ = w.Stop()
			return nil, ctx.Err()
		case u, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("campaigns: the watch of the campaigns bucket stopped")
			}
			if u == nil {
				// Every current value is in: the initial load is done.
				if tasks := l.Tasks(); len(tasks) == 0 {
					log.Warn("no campaign in the campaigns bucket; every submission is refused until one is pushed (arena campaign push DIR)")
				}
				return l, nil
			}
			l.apply(ctx, u)
		}
	}
}

// Run applies every version pushed after Open until ctx is done.
func (l *Live) Run(ctx context.Context) error {
	defer func() { _ = l.watcher.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case u, ok := <-l.watcher.Updates():
			if !ok {
				return errors.New("campaigns: the watch of the campaigns bucket stopped")
			}
			if u != nil {
				l.apply(ctx, u)
			}
		}
	}
}

// Lookup implements campaign.Source: the version current now.
func (l *Live) Lookup(taskID string) (*campaign.Campaign, error) {
	return l.set.Load().Lookup(taskID)
}

// Tasks implements campaign.Source.
func (l *Live) Tasks() []string { return l.set.Load().Tasks() }

// Loaded returns the entry task's current campaign came from.
func (l *Live) Loaded(task string) (Entry, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.loaded[task]
	return e, ok
}

// apply takes one change of the bucket: a new version is unpacked,
// loaded and swapped in; one that fails is logged and the task keeps the
// version it had; a deleted key retires the task.
func (l *Live) apply(ctx context.Context, u jetstream.KeyValueEntry) {
	task := u.Key()
	if u.Operation() != jetstream.KeyValuePut {
		l.swap(task, nil, Entry{})
		l.log.Warn("campaign retired: its key was deleted from the campaigns bucket", "task", task)
		l.report(Entry{TaskID: task, Revision: u.Revision()}, nil)
		return
	}
	e, err := decode(task, u.Value(), u.Revision())
	if err == nil {
		if cur, ok := l.Loaded(task); ok && cur.Digest() == e.Digest() {
			l.mu.Lock()
			l.loaded[task] = e
			l.mu.Unlock()
			l.report(e, nil)
			return
		}
		err = l.load(ctx, e)
	}
	if err != nil {
		prev, had := l.Loaded(task)
		l.log.Error("campaign version not loaded; the service keeps the version it had", "task", task, "revision", u.Revision(),
			"kept_version", prev.Version, "kept", had, "err", err)
		l.report(e, err)
		return
	}
	l.log.Info("campaign version loaded", "task", task, "version", e.Version, "digest", e.Digest(), "pushed_by", e.PushedBy)
	l.report(e, nil)
}

// load unpacks and loads e and swaps it in.
func (l *Live) load(ctx context.Context, e Entry) error {
	dir, err := Materialise(ctx, l.arts, e, l.cache)
	if err != nil {
		return err
	}
	c, err := campaign.Load(dir)
	if err != nil {
		return err
	}
	if c.TaskID != e.TaskID {
		return fmt.Errorf("campaigns: version %d under key %s holds a campaign of task %s", e.Version, e.TaskID, c.TaskID)
	}
	l.swap(e.TaskID, c, e)
	return nil
}

// swap publishes a new Set with task's campaign replaced (removed when c
// is nil). Sets are never changed once published.
func (l *Live) swap(task string, c *campaign.Campaign, e Entry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	next := maps.Clone(*l.set.Load())
	if c == nil {
		delete(next, task)
		delete(l.loaded, task)
	} else {
		next[task] = c
		l.loaded[task] = e
	}
	l.set.Store(&next)
}

func (l *Live) report(e Entry, err error) {
	if l.applied != nil {
		l.applied(e, err)
	}
}
