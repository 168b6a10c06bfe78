// Package campaigns delivers the arena's campaigns through its own store
// instead of a shared folder: a campaign folder is pushed as one content
// addressed bundle into the artifact store (bus.ObjectArtifacts), and the
// campaigns bucket (bus.BucketCampaigns) maps each task id to the version
// the arena runs now. The bucket's history is the list of versions.
//
// A service that needs campaigns holds a Live source: it loads the
// current version of every campaign at start, unpacked into a cache
// folder named by the bundle's digest (a restart re-uses it), and
// watches the bucket, so a new version reaches it without a restart.
//
// Invariants:
//   - a push validates every campaign (campaign.Load) before it stores
//     anything, so a bad folder never becomes a version;
//   - a push of the content a task already runs is a no-op: no new
//     version, no new revision;
//   - a task's versions count 1, 2, 3... and each is written with the
//     revision it follows (KV Update), so two operators pushing at once
//     cannot give two contents one version number;
//   - a version a service cannot load is logged and skipped: the version
//     it ran before stays, and the service keeps running.
package campaigns

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/domain/campaign"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/artifact"
)

// Entry is one version of a campaign, the value of its task's key in the
// campaigns bucket.
type Entry struct {
	// TaskID is the task the campaign runs (the key).
	TaskID string `json:"task_id"`
	// Version counts the task's pushes of new content, from 1.
	Version uint64 `json:"version"`
	// Bundle is the campaign folder in the artifact store.
	Bundle events.BundleRef `json:"bundle"`
	// Name is the campaign's own name, from its campaign.json.
	Name string `json:"name,omitempty"`
	// PushedAt and PushedBy say when and by whom it was pushed.
	PushedAt time.Time `json:"pushed_at"`
	PushedBy string    `json:"pushed_by,omitempty"`
	// Revision is the bucket's revision of this entry; set when read,
	// never stored.
	Revision uint64 `json:"-"`
}

// Digest is the campaign bundle's digest.
func (e Entry) Digest() string { return e.Bundle.SHA256 }

// ErrInvalid marks a campaign folder push refuses.
var ErrInvalid = errors.New("campaigns: not a campaign folder")

// Folders returns the campaign folders of dir: dir itself when it holds
// campaign.json, else each of its sub-folders that does.
func Folders(dir string) ([]string, error) {
	if _, err := os.Stat(filepath.Join(dir, campaign.File)); err == nil {
		return []string{dir}, nil
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	var out []string
	for _, e := range ents {
		sub := filepath.Join(dir, e.Name())
		if st, err := os.Stat(sub); err != nil || !st.IsDir() {
			continue
		}
		if _, err := os.Stat(filepath.Join(sub, campaign.File)); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		out = append(out, sub)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: %s holds no %s, nor any folder that does", ErrInvalid, dir, campaign.File)
	}
	return out, nil
}

// Pushed is what Push did for one campaign.
type Pushed struct {
	Entry
	// New is false when the bucket already ran this content (no new
	// version).
	New bool
}

// Check loads every campaign under dir (Folders) with campaign.Load and
// returns them with their folders; an error wrapping ErrInvalid when one
// does not load or two run one task.
func Check(dir string) ([]string, []*campaign.Campaign, error) {
	dirs, err := Folders(dir)
	if err != nil {
		return nil, nil, err
	}
	camps := make([]*campaign.Campaign, len(dirs))
	seen := map[string]string{}
	for i, d := range dirs {
		c, err := campaign.Load(d)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		if other, dup := seen[c.TaskID]; dup {
			return nil, nil, fmt.Errorf("%w: %s and %s both run task %s", ErrInvalid, other, d, c.TaskID)
		}
		seen[c.TaskID] = d
		camps[i] = c
	}
	return dirs, camps, nil
}

// Push checks every campaign under dir (Check), then stores each as a
// bundle in arts and makes it its task's current version in kv. It
// stores nothing when any campaign fails to load, or two name one task.
func Push(ctx context.Context, kv jetstream.KeyValue, arts artifact.Store, dir, by string, now func() time.Time) ([]Pushed, error) {
	dirs, camps, err := Check(dir)
	if err != nil {
		return nil, err
	}
	out := make([]Pushed, 0, len(dirs))
	for i, d := range dirs {
		ref, err := artifact.PutTree(ctx, arts, d)
		if err != nil {
			return out, fmt.Errorf("campaigns: store %s: %w", d, err)
		}
		p, err := put(ctx, kv, Entry{TaskID: camps[i].TaskID, Bundle: ref, Name: camps[i].Name, PushedAt: now().UTC(), PushedBy: by})
		if err != nil {
			return out, err
		}
		out = append(out, p)
	}
	return out, nil
}

// put makes e its task's current version unless the task runs that
// content already, numbering it after the version it follows.
func put(ctx context.Context, kv jetstream.KeyValue, e Entry) (Pushed, error) {
	cur, err := Current(ctx, kv, e.TaskID)
	switch {
	case errors.Is(err, campaign.ErrUnknownTask):
		e.Version = 1
		data, err := json.Marshal(e)
		if err != nil {
			return Pushed{}, fmt.Errorf("campaigns: %w", err)
		}
		if e.Revision, err = kv.Create(ctx, e.TaskID, data); err != nil {
			return Pushed{}, fmt.Errorf("campaigns: push %s: %w", e.TaskID, err)
		}
		return Pushed{Entry: e, New: true}, nil
	case err != nil:
		return Pushed{}, err
	case cur.Digest() == e.Digest():
		return Pushed{Entry: cur}, nil
	}
	e.Version = cur.Version + 1
	data, err := json.Marshal(e)
	if err != nil {
		return Pushed{}, fmt.Errorf("campaigns: %w", err)
	}
	if e.Revision, err = kv.Update(ctx, e.TaskID, data, cur.Revision); err != nil {
		return Pushed{}, fmt.Errorf("campaigns: push %s (after version %d): %w", e.TaskID, cur.Version, err)
	}
	return Pushed{Entry: e, New: true}, nil
}

// decode reads a bucket entry, holding it to its key.
func decode(key string, value []byte, rev uint64) (Entry, error) {
	var e Entry
	if err := json.Unmarshal(value, &e); err != nil {
		return Entry{}, fmt.Errorf("campaigns: entry %s (revision %d): %w", key, rev, err)
	}
	if e.TaskID != key {
		return Entry{}, fmt.Errorf("campaigns: entry %s (revision %d) names task %q", key, rev, e.TaskID)
	}
	e.Revision = rev
	return e, nil
}

// Current returns the version task runs now, or an error wrapping
// campaign.ErrUnknownTask.
func Current(ctx context.Context, kv jetstream.KeyValue, task string) (Entry, error) {
	kve, err := kv.Get(ctx, task)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Entry{}, fmt.Errorf("%w: %q (no version in the campaigns bucket)", campaign.ErrUnknownTask, task)
	}
	if err != nil {
		return Entry{}, fmt.Errorf("campaigns: read %s: %w", task, err)
	}
	return decode(task, kve.Value(), kve.Revision())
}

// List returns the current version of every campaign, by task id.
func List(ctx context.Context, kv jetstream.KeyValue) ([]Entry, error) {
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("campaigns: list: %w", err)
	}
	var tasks []string
	for k := range keys.Keys() {
		tasks = append(tasks, k)
	}
	slices.Sort(tasks)
	out := make([]Entry, 0, len(tasks))
	for _, t := range tasks {
		e, err := Current(ctx, kv, t)
		if errors.Is(err, campaign.ErrUnknownTask) {
			continue // deleted since it was listed
		}
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// History returns the versions of task the bucket keeps, oldest first
// (at most bus.CampaignsHistory), or an error wrapping
// campaign.ErrUnknownTask.
func History(ctx context.Context, kv jetstream.KeyValue, task string) ([]Entry, error) {
	hist, err := kv.History(ctx, task)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("%w: %q (no version in the campaigns bucket)", campaign.ErrUnknownTask, task)
	}
	if err != nil {
		return nil, fmt.Errorf("campaigns: history of %s: %w", task, err)
	}
	var out []Entry
	for _, h := range hist {
		if h.Operation() != jetstream.KeyValuePut {
			continue
		}
		e, err := decode(task, h.Value(), h.Revision())
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// Materialise unpacks e's bundle into cache/<digest> unless it is there
// already (content addressed: a restart, or another version of the same
// content, re-uses it), and returns that folder.
func Materialise(ctx context.Context, arts artifact.Store, e Entry, cache string) (string, error) {
	d := e.Digest()
	if len(d) != 64 || strings.Trim(d, "0123456789abcdef") != "" {
		return "", fmt.Errorf("campaigns: %s version %d names no bundle digest (%q)", e.TaskID, e.Version, d)
	}
	dir := filepath.Join(cache, d)
	if st, err := os.Stat(dir); err == nil && st.IsDir() {
		return dir, nil
	}
	err := artifact.GetTree(ctx, arts, e.Bundle, dir)
	if err != nil {
		// Another service sharing the cache may have put it in place
		// first: the folder exists only complete.
		if st, serr := os.Stat(dir); serr == nil && st.IsDir() {
			return dir, nil
		}
		return "", fmt.Errorf("campaigns: unpack %s version %d: %w", e.TaskID, e.Version, err)
	}
	return dir, nil
}
