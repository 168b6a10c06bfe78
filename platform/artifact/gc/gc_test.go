package gc_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/artifact"
	"github.com/lowbarena/lowbarena/platform/artifact/gc"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
)

// arena is an artifacts store and the buckets the collector reads, on
// an embedded NATS.
type arena struct {
	t       *testing.T
	ctx     context.Context
	store   *artifact.JetStream
	objects jetstream.ObjectStore
	subs    jetstream.KeyValue
	bundles jetstream.KeyValue
}

func newArena(t *testing.T) *arena {
	b, _ := bustest.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	js := b.JetStream()
	store, err := artifact.NewJetStream(ctx, js, bus.ObjectArtifacts)
	require.NoError(t, err)
	objects, err := js.ObjectStore(ctx, bus.ObjectArtifacts)
	require.NoError(t, err)
	subs, err := js.KeyValue(ctx, bus.BucketSubmissions)
	require.NoError(t, err)
	bundles, err := js.KeyValue(ctx, bus.BucketBundles)
	require.NoError(t, err)
	return &arena{t: t, ctx: ctx, store: store, objects: objects, subs: subs, bundles: bundles}
}

// file stores content and returns its digest entry.
func (a *arena) file(path, content string) events.FileDigest {
	sum := sha256.Sum256([]byte(content))
	fd := events.FileDigest{Path: path, Size: int64(len(content)), SHA256: hex.EncodeToString(sum[:])}
	_, err := a.store.PutFile(a.ctx, fd.SHA256, fd.Size, bytes.NewReader([]byte(content)))
	require.NoError(a.t, err)
	return fd
}

// bundle stores a manifest of files and returns its digest.
func (a *arena) bundle(files ...events.FileDigest) string {
	m := artifact.NewManifest(files)
	_, err := a.store.PutManifest(a.ctx, m)
	require.NoError(a.t, err)
	return m.Digest
}

// submission writes a record of id for digest, and makes id the
// digest's first submission unless another is.
func (a *arena) submission(id, digest string, r record.Submission) {
	r.ID = id
	r.Bundle = &record.Bundle{Digest: digest}
	data, err := json.Marshal(r)
	require.NoError(a.t, err)
	_, err = a.subs.Put(a.ctx, id, data)
	require.NoError(a.t, err)
	if _, err := a.bundles.Create(a.ctx, digest, []byte(id)); err != nil {
		require.ErrorIs(a.t, err, jetstream.ErrKeyExists)
	}
}

func (a *arena) has(name string) bool {
	_, err := a.objects.GetInfo(a.ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return false
	}
	require.NoError(a.t, err)
	return true
}

// TestCollect: the collector deletes the manifest of a submission that
// failed (or was disqualified) long enough ago and the files only it
// lists, and files no manifest lists; it keeps files a live bundle
// shares, bundles a live record shares, recent failures, bundles in
// flight, manifests that are no submission's, and every object younger
// than the grace period; a dry run deletes nothing and reports the
// same.
func TestCollect(t *testing.T) {
	a := newArena(t)
	// The clock runs ten days ahead of the objects' real times, so that
	// they are old; records' times are set against it.
	now := time.Now().Add(10 * 24 * time.Hour)
	old, recent := now.Add(-8*24*time.Hour), now.Add(-24*time.Hour)

	shared := a.file("model.safetensors", "weights both bundles hold")
	liveOnly := a.file("config.json", "the live bundle's config")
	deadOnly := a.file("solution.json", "the dead bundle's own declaration")
	disqOnly := a.file("disq.json", "the disqualified bundle's declaration")
	dupFile := a.file("dup.json", "a bundle a live duplicate shares")
	recentFile := a.file("recent.json", "a bundle that failed yesterday")
	flightFile := a.file("flight.json", "a bundle being built")
	suiteFile := a.file("suite.jsonl", "a campaign's eval suite")

	live := a.bundle(shared, liveOnly)
	dead := a.bundle(shared, deadOnly)
	disq := a.bundle(disqOnly)
	dup := a.bundle(dupFile)
	recentD := a.bundle(recentFile)
	flight := a.bundle(flightFile)
	suite := a.bundle(suiteFile)
	orphan := a.file("orphan.bin", "a file whose manifest was never stored")

	a.submission("live-1", live, record.Submission{Status: record.StatusRunning, UpdatedAt: old})
	a.submission("dead-1", dead, record.Submission{Status: record.StatusFailed, UpdatedAt: old})
	a.submission("disq-1", disq, record.Submission{Status: record.StatusDone, UpdatedAt: old,
		Result: record.Result{DevScore: &record.Score{Qualified: false}}})
	a.submission("dup-first", dup, record.Submission{Status: record.StatusFailed, UpdatedAt: old})
	a.submission("dup-second", dup, record.Submission{Status: record.StatusDone, UpdatedAt: old,
		Result: record.Result{DevScore: &record.Score{Qualified: true}}})
	a.submission("recent-1", recentD, record.Submission{Status: record.StatusFailed, UpdatedAt: recent})
	_, err := a.bundles.Create(a.ctx, flight, []byte("flight-1")) // built, no record yet
	require.NoError(t, err)

	c := &gc.Collector{Artifacts: a.objects, Submissions: a.subs, Bundles: a.bundles}
	gone := []string{artifact.ManifestObject(dead), artifact.FileObject(deadOnly.SHA256),
		artifact.ManifestObject(disq), artifact.FileObject(disqOnly.SHA256), artifact.FileObject(orphan.SHA256)}
	kept := []string{artifact.ManifestObject(live), artifact.FileObject(shared.SHA256), artifact.FileObject(liveOnly.SHA256),
		artifact.ManifestObject(dup), artifact.FileObject(dupFile.SHA256), artifact.ManifestObject(recentD), artifact.FileObject(recentFile.SHA256),
		artifact.ManifestObject(flight), artifact.FileObject(flightFile.SHA256), artifact.ManifestObject(suite), artifact.FileObject(suiteFile.SHA256)}

	// At the objects' real time, everything is younger than the grace
	// period: nothing is collected.
	rep, err := c.Collect(a.ctx, gc.Options{})
	require.NoError(t, err)
	require.Empty(t, rep.Deleted, "nothing young is collected")
	require.Zero(t, rep.Bytes())

	dry, err := c.Collect(a.ctx, gc.Options{DryRun: true, Now: func() time.Time { return now }})
	require.NoError(t, err)
	require.True(t, dry.DryRun)
	require.ElementsMatch(t, gone, dry.Deleted)
	for _, name := range append(gone, kept...) {
		require.True(t, a.has(name), "a dry run deletes nothing: %s", name)
	}
	manifestBytes := func(files ...events.FileDigest) int64 {
		data, err := json.Marshal(artifact.NewManifest(files))
		require.NoError(t, err)
		return int64(len(data))
	}
	require.Equal(t, map[string]gc.Tally{
		gc.KindManifest: {Objects: 2, Bytes: manifestBytes(shared, deadOnly) + manifestBytes(disqOnly)},
		gc.KindFile:     {Objects: 2, Bytes: deadOnly.Size + disqOnly.Size},
		gc.KindOrphan:   {Objects: 1, Bytes: orphan.Size},
	}, dry.Freed)

	rep, err = c.Collect(a.ctx, gc.Options{Now: func() time.Time { return now }})
	require.NoError(t, err)
	require.Equal(t, dry.Freed, rep.Freed, "the run frees what the dry run said")
	require.Equal(t, dry.Deleted, rep.Deleted)
	for _, name := range gone {
		require.False(t, a.has(name), "collected: %s", name)
	}
	for _, name := range kept {
		require.True(t, a.has(name), "kept: %s", name)
	}
	m, err := a.store.Manifest(a.ctx, events.BundleRef{Bucket: bus.ObjectArtifacts, Object: artifact.ManifestObject(live), SHA256: live})
	require.NoError(t, err, "the live bundle reads whole")
	for _, f := range m.Files {
		r, err := a.store.OpenFile(a.ctx, f.SHA256)
		require.NoError(t, err, f.Path)
		require.NoError(t, r.Close())
	}

	again, err := c.Collect(a.ctx, gc.Options{Now: func() time.Time { return now }})
	require.NoError(t, err)
	require.Empty(t, again.Deleted, "a second run finds nothing more")
}

// TestPutFileTouches: storing a file the store already holds renews its
// time, so that the collector, which spares young objects, does not
// delete a file a bundle being built shares with a dead one.
func TestPutFileTouches(t *testing.T) {
	a := newArena(t)
	f := a.file("model.safetensors", "shared weights")
	before, err := a.objects.GetInfo(a.ctx, artifact.FileObject(f.SHA256))
	require.NoError(t, err)
	time.Sleep(20 * time.Millisecond)
	stored, err := a.store.PutFile(a.ctx, f.SHA256, f.Size, bytes.NewReader([]byte("shared weights")))
	require.NoError(t, err)
	require.False(t, stored, "the content is stored once")
	after, err := a.objects.GetInfo(a.ctx, artifact.FileObject(f.SHA256))
	require.NoError(t, err)
	require.True(t, after.ModTime.After(before.ModTime), "its time is renewed: %s then %s", before.ModTime, after.ModTime)
	require.Equal(t, before.Digest, after.Digest)
	r, err := a.store.OpenFile(a.ctx, f.SHA256)
	require.NoError(t, err)
	require.NoError(t, r.Close())
}
