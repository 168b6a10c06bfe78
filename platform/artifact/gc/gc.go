// Package gc collects the artifacts that nothing needs any more: a mark
// and sweep over the artifacts object store (package artifact's layout,
// bundles/<digest>.json and files/sha256/<sha>).
//
// Mark: a manifest is live unless every submission record
// (bus.BucketSubmissions) that carries its digest ended failed or
// disqualified more than Options.KeepFailed ago. A manifest whose digest
// no record carries and that bus.BucketBundles does not know is not a
// submission's (a campaign's suite, a BF16 reference, a round's
// artifact) and is always live; one that BucketBundles knows but no
// record carries yet (a build whose record the gateway has not written)
// is live too. Every file a live manifest lists is live.
//
// Sweep: dead manifests, the files that only dead manifests list, and
// files that no manifest lists at all (a build that died between its
// files and its manifest), each only when it is older than
// Options.Grace: an object younger than that may belong to a put in
// flight. The build touches a file it finds already stored
// (artifact.JetStream.PutFile), so a file that an in-flight build shares
// with a dead bundle is young again, and each file's age is read again
// just before it is deleted.
//
// The BucketBundles entries stay: a bundle submitted again after its
// first submission was collected is still recognised as a duplicate,
// and its build stores its files anew.
package gc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/platform/artifact"
	"github.com/lowbarena/lowbarena/platform/bus"
)

// Defaults of Options.
const (
	// DefaultGrace is how young an object may be and never be collected.
	DefaultGrace = 6 * time.Hour
	// DefaultKeepFailed is how long a failed or disqualified
	// submission's artifact is kept after its record last changed.
	DefaultKeepFailed = 7 * 24 * time.Hour
)

// Options configure a collection.
type Options struct {
	// DryRun reports what would be freed and deletes nothing.
	DryRun bool
	// Grace: no object younger than this is deleted (default DefaultGrace).
	Grace time.Duration
	// KeepFailed: a failed or disqualified submission's artifact is
	// kept this long after its record last changed (default
	// DefaultKeepFailed).
	KeepFailed time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Log, when set, is told of each object deleted.
	Log *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.Grace <= 0 {
		o.Grace = DefaultGrace
	}
	if o.KeepFailed <= 0 {
		o.KeepFailed = DefaultKeepFailed
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Kinds of objects a Report counts.
const (
	KindManifest = "manifest" // bundles/<digest>.json of a dead submission
	KindFile     = "file"     // files/sha256/<sha> only dead manifests list
	KindOrphan   = "orphan"   // files/sha256/<sha> no manifest lists
)

// Tally is a count of objects and their bytes.
type Tally struct {
	Objects int   `json:"objects"`
	Bytes   int64 `json:"bytes"`
}

func (t *Tally) add(size uint64) { t.Objects++; t.Bytes += int64(size) }

// Report is what a collection freed (or, dry, would free).
type Report struct {
	DryRun bool `json:"dry_run"`
	// Freed is by kind (KindManifest, KindFile, KindOrphan).
	Freed map[string]Tally `json:"freed"`
	// Kept are the objects left: live, or too young.
	Kept Tally `json:"kept"`
	// Young are the objects kept only because they are younger than
	// the grace period.
	Young Tally `json:"young"`
	// Deleted names the objects deleted (or to delete), sorted.
	Deleted []string `json:"deleted,omitempty"`
}

// Bytes is the total the report frees.
func (r Report) Bytes() int64 {
	var n int64
	for _, t := range r.Freed {
		n += t.Bytes
	}
	return n
}

// Collector collects the artifacts object store.
type Collector struct {
	Artifacts   jetstream.ObjectStore
	Submissions jetstream.KeyValue
	Bundles     jetstream.KeyValue
}

// Open opens the stores a Collector reads: it needs Read on
// bus.BucketSubmissions and bus.BucketBundles and Write on
// bus.ObjectArtifacts (the operator's grants).
func Open(ctx context.Context, js jetstream.JetStream) (*Collector, error) {
	arts, err := js.ObjectStore(ctx, bus.ObjectArtifacts)
	if err != nil {
		return nil, fmt.Errorf("gc: open object store %s: %w", bus.ObjectArtifacts, err)
	}
	subs, err := js.KeyValue(ctx, bus.BucketSubmissions)
	if err != nil {
		return nil, fmt.Errorf("gc: open bucket %s: %w", bus.BucketSubmissions, err)
	}
	bundles, err := js.KeyValue(ctx, bus.BucketBundles)
	if err != nil {
		return nil, fmt.Errorf("gc: open bucket %s: %w", bus.BucketBundles, err)
	}
	return &Collector{Artifacts: arts, Submissions: subs, Bundles: bundles}, nil
}

const (
	manifestPrefix = "bundles/"
	manifestSuffix = ".json"
	filePrefix     = "files/sha256/"
)

// Collect marks and sweeps once.
func (c *Collector) Collect(ctx context.Context, o Options) (Report, error) {
	o = o.withDefaults()
	now := o.Now()
	rep := Report{DryRun: o.DryRun, Freed: map[string]Tally{}}
	objs, err := c.Artifacts.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return rep, nil
	}
	if err != nil {
		return rep, fmt.Errorf("gc: list %s: %w", bus.ObjectArtifacts, err)
	}
	dead, err := c.deadDigests(ctx, now.Add(-o.KeepFailed))
	if err != nil {
		return rep, err
	}
	young := func(info *jetstream.ObjectInfo) bool { return now.Sub(info.ModTime) < o.Grace }

	// Mark: every file a live manifest lists, and which files the dead
	// ones list.
	live, listed := map[string]bool{}, map[string]bool{}
	var doomed []*jetstream.ObjectInfo
	files := map[string]*jetstream.ObjectInfo{}
	for _, info := range objs {
		switch {
		case strings.HasPrefix(info.Name, filePrefix):
			files[info.Name] = info
		case strings.HasPrefix(info.Name, manifestPrefix) && strings.HasSuffix(info.Name, manifestSuffix):
			digest := strings.TrimSuffix(strings.TrimPrefix(info.Name, manifestPrefix), manifestSuffix)
			m, err := c.manifest(ctx, info.Name)
			if err != nil {
				return rep, err
			}
			isDead := dead[digest] && !young(info)
			for _, f := range m.Files {
				name := artifact.FileObject(f.SHA256)
				listed[name] = true
				if !isDead {
					live[name] = true
				}
			}
			if isDead {
				doomed = append(doomed, info)
				rep.Freed[KindManifest] = addTally(rep.Freed[KindManifest], info.Size)
			} else {
				rep.Kept.add(info.Size)
				if dead[digest] {
					rep.Young.add(info.Size)
				}
			}
		default:
			// Not of the layout: never the collector's to delete.
			rep.Kept.add(info.Size)
		}
	}
	for name, info := range files {
		kind := KindFile
		if !listed[name] {
			kind = KindOrphan
		}
		switch {
		case live[name]:
			rep.Kept.add(info.Size)
		case young(info):
			rep.Kept.add(info.Size)
			rep.Young.add(info.Size)
		default:
			doomed = append(doomed, info)
			rep.Freed[kind] = addTally(rep.Freed[kind], info.Size)
		}
	}
	// Sweep: manifests first, so that no reader finds a manifest whose
	// files are gone.
	sort.SliceStable(doomed, func(i, j int) bool {
		mi, mj := strings.HasPrefix(doomed[i].Name, manifestPrefix), strings.HasPrefix(doomed[j].Name, manifestPrefix)
		if mi != mj {
			return mi
		}
		return doomed[i].Name < doomed[j].Name
	})
	for _, info := range doomed {
		rep.Deleted = append(rep.Deleted, info.Name)
		if o.DryRun {
			continue
		}
		// Read its age again: a build may have touched it since the
		// list (it shares this file).
		again, err := c.Artifacts.GetInfo(ctx, info.Name)
		if errors.Is(err, jetstream.ErrObjectNotFound) {
			continue
		}
		if err != nil {
			return rep, fmt.Errorf("gc: look up %s: %w", info.Name, err)
		}
		if young(again) {
			continue
		}
		if err := c.Artifacts.Delete(ctx, info.Name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			return rep, fmt.Errorf("gc: delete %s: %w", info.Name, err)
		}
		if o.Log != nil {
			o.Log.Debug("collected", "object", info.Name, "bytes", info.Size)
		}
	}
	sort.Strings(rep.Deleted)
	return rep, nil
}

func addTally(t Tally, size uint64) Tally { t.add(size); return t }

// deadDigests returns the bundle digests whose every submission record
// ended failed or disqualified before cutoff. A digest that a live
// record carries, or that BucketBundles maps to a submission without a
// record, is not dead.
func (c *Collector) deadDigests(ctx context.Context, cutoff time.Time) (map[string]bool, error) {
	dead, alive := map[string]bool{}, map[string]bool{}
	ids := map[string]bool{}
	keys, err := c.Submissions.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("gc: list %s: %w", bus.BucketSubmissions, err)
	}
	for id := range keys.Keys() {
		ids[id] = true
		e, err := c.Submissions.Get(ctx, id)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("gc: read record %s: %w", id, err)
		}
		var r record.Submission
		if err := json.Unmarshal(e.Value(), &r); err != nil {
			return nil, fmt.Errorf("gc: record %s: %w", id, err)
		}
		if r.Bundle == nil || r.Bundle.Digest == "" {
			continue
		}
		if Ended(r) && r.UpdatedAt.Before(cutoff) {
			dead[r.Bundle.Digest] = true
		} else {
			alive[r.Bundle.Digest] = true
		}
	}
	// A digest's first submission (BucketBundles) without a record is
	// in flight, or its record was lost: its bundle is kept.
	bkeys, err := c.Bundles.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("gc: list %s: %w", bus.BucketBundles, err)
	}
	for digest := range bkeys.Keys() {
		e, err := c.Bundles.Get(ctx, digest)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("gc: read bundle %s: %w", digest, err)
		}
		if !ids[string(e.Value())] {
			alive[digest] = true
		}
	}
	for d := range alive {
		delete(dead, d)
	}
	return dead, nil
}

// Ended says a record's submission ended without a place on the
// leaderboard: it failed, or was scored and disqualified.
func Ended(r record.Submission) bool {
	if r.Status == record.StatusFailed {
		return true
	}
	return r.Status == record.StatusDone && r.Result.DevScore != nil && !r.Result.DevScore.Qualified
}

// maxManifest bounds a manifest read by the collector.
const maxManifest = 8 << 20

func (c *Collector) manifest(ctx context.Context, name string) (artifact.Manifest, error) {
	data, err := c.Artifacts.GetBytes(ctx, name)
	if err != nil {
		return artifact.Manifest{}, fmt.Errorf("gc: read %s: %w", name, err)
	}
	if len(data) > maxManifest {
		return artifact.Manifest{}, fmt.Errorf("gc: %s is over %d bytes", name, maxManifest)
	}
	var m artifact.Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		// A manifest the collector cannot read might list any file:
		// nothing is collected until an operator looks.
		return artifact.Manifest{}, fmt.Errorf("gc: %s does not decode, so no file can be collected: %w", name, err)
	}
	return m, nil
}
