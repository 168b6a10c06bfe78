package campaigns

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/campaign"
	"github.com/lowbarena/lowbarena/platform/artifact"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
)

const (
	config  = `{"architectures":["Qwen3ForCausalLM"],"model_type":"qwen3"}`
	tensors = `{"tensors":{"lm_head.weight":{"dtype":"BF16","shape":[16,8]}}}`
)

// writeCampaign writes a campaign folder of task named name, with a
// quality suite in a sub-folder.
func writeCampaign(t *testing.T, dir, task, name string) {
	t.Helper()
	files := map[string]string{
		campaign.File:           fmt.Sprintf(`{"task_id":%q,"name":%q,"policy":{"allow_sparse":false},"quality":{"suite":"suite/dev","sampling":{}}}`, task, name),
		campaign.ConfigFile:     config,
		campaign.TensorsFile:    tensors,
		"suite/dev/items.jsonl": `{"q":"` + name + `"}` + "\n",
	}
	for p, body := range files {
		path := filepath.Join(dir, filepath.FromSlash(p))
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(body), 0o644))
	}
}

type fixture struct {
	kv   jetstream.KeyValue
	arts artifact.Store
	js   jetstream.JetStream
	now  func() time.Time
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	b, _ := bustest.Bus(t)
	ctx := context.Background()
	kv, err := b.JetStream().KeyValue(ctx, bus.BucketCampaigns)
	require.NoError(t, err)
	arts, err := artifact.NewJetStream(ctx, b.JetStream(), bus.ObjectArtifacts)
	require.NoError(t, err)
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	return fixture{kv: kv, arts: arts, js: b.JetStream(), now: func() time.Time { at = at.Add(time.Minute); return at }}
}

// TestPushListHistory pushes a folder of two campaigns, pushes it again
// unchanged (nothing new), then a changed campaign (its version 2): list
// shows each task's current version and history every version, oldest
// first, each naming the bundle its content was stored as.
func TestPushListHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	root := t.TempDir()
	writeCampaign(t, filepath.Join(root, "a"), "task-a", "A one")
	writeCampaign(t, filepath.Join(root, "b"), "task-b", "B one")
	require.NoError(t, os.MkdirAll(filepath.Join(root, "notes"), 0o755))

	first, err := Push(ctx, f.kv, f.arts, root, "alice", f.now)
	require.NoError(t, err)
	require.Len(t, first, 2)
	for _, p := range first {
		require.True(t, p.New)
		require.Equal(t, uint64(1), p.Version)
		require.Equal(t, "alice", p.PushedBy)
		m, err := f.arts.Manifest(ctx, p.Bundle)
		require.NoError(t, err, "the bundle is in the artifact store")
		_, ok := m.File("suite/dev/items.jsonl")
		require.True(t, ok, "with the campaign's sub-folders")
	}

	again, err := Push(ctx, f.kv, f.arts, root, "bob", f.now)
	require.NoError(t, err)
	for i, p := range again {
		require.False(t, p.New, "identical content is no new version")
		require.Equal(t, first[i].Entry, p.Entry, "and the entry stays the first push's")
	}

	writeCampaign(t, filepath.Join(root, "a"), "task-a", "A two")
	second, err := Push(ctx, f.kv, f.arts, filepath.Join(root, "a"), "bob", f.now)
	require.NoError(t, err, "one campaign folder is pushed alone")
	require.Len(t, second, 1)
	require.True(t, second[0].New)
	require.Equal(t, uint64(2), second[0].Version)
	require.NotEqual(t, first[0].Digest(), second[0].Digest())

	list, err := List(ctx, f.kv)
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.Equal(t, "task-a", list[0].TaskID)
	require.Equal(t, second[0].Entry, list[0])
	require.Equal(t, first[1].Entry, list[1])

	hist, err := History(ctx, f.kv, "task-a")
	require.NoError(t, err)
	require.Len(t, hist, 2, "the unchanged push wrote no revision")
	require.Equal(t, []uint64{1, 2}, []uint64{hist[0].Version, hist[1].Version})
	require.Equal(t, first[0].Digest(), hist[0].Digest())
	require.Equal(t, "A two", hist[1].Name)
	require.True(t, hist[0].PushedAt.Before(hist[1].PushedAt))

	_, err = History(ctx, f.kv, "nope")
	require.ErrorIs(t, err, campaign.ErrUnknownTask)
}

// TestPushRefuses: a folder whose campaign does not load, or two
// campaigns of one task, is refused before anything is stored.
func TestPushRefuses(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		write func(t *testing.T, root string)
		want  string
	}{
		{"bad task id", func(t *testing.T, root string) {
			writeCampaign(t, filepath.Join(root, "a"), "task-a", "A")
			writeCampaign(t, filepath.Join(root, "b"), "no spaces allowed", "B")
		}, "task_id"},
		{"missing tensors", func(t *testing.T, root string) {
			writeCampaign(t, filepath.Join(root, "a"), "task-a", "A")
			writeCampaign(t, filepath.Join(root, "b"), "task-b", "B")
			require.NoError(t, os.Remove(filepath.Join(root, "b", campaign.TensorsFile)))
		}, campaign.TensorsFile},
		{"one task twice", func(t *testing.T, root string) {
			writeCampaign(t, filepath.Join(root, "a"), "task-a", "A")
			writeCampaign(t, filepath.Join(root, "b"), "task-a", "B")
		}, "both run task task-a"},
		{"no campaign", func(t *testing.T, root string) {
			require.NoError(t, os.MkdirAll(filepath.Join(root, "notes"), 0o755))
		}, "holds no campaign.json"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := newFixture(t)
			root := t.TempDir()
			tc.write(t, root)
			_, err := Push(ctx, f.kv, f.arts, root, "alice", f.now)
			require.ErrorIs(t, err, ErrInvalid)
			require.ErrorContains(t, err, tc.want)
			list, err := List(ctx, f.kv)
			require.NoError(t, err)
			require.Empty(t, list, "nothing pushed")
			info, err := f.js.Stream(ctx, "OBJ_"+bus.ObjectArtifacts)
			require.NoError(t, err)
			require.Zero(t, info.CachedInfo().State.Msgs, "no file stored")
		})
	}
}

// watch opens a Live source whose applied versions come on a channel.
func watch(t *testing.T, f fixture, cache string) (*Live, <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	applied := make(chan error, 16)
	l, err := open(ctx, f.kv, f.arts, cache, slog.New(slog.DiscardHandler), func(_ Entry, err error) { applied <- err })
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.ErrorIs(t, <-done, context.Canceled)
	})
	return l, applied
}

func next(t *testing.T, applied <-chan error) error {
	t.Helper()
	select {
	case err := <-applied:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("no change of the campaigns bucket reached the live source")
		return nil
	}
}

// TestLiveFollowsPushes: a source opened on an empty bucket knows no
// task; a push reaches it without a restart, and so does the next
// version, while a campaign looked up before keeps its own folder.
func TestLiveFollowsPushes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	cache := t.TempDir()
	l, applied := watch(t, f, cache)
	_, err := l.Lookup("task-a")
	require.ErrorIs(t, err, campaign.ErrUnknownTask)
	require.Empty(t, l.Tasks())

	src := t.TempDir()
	writeCampaign(t, src, "task-a", "A one")
	p1, err := Push(ctx, f.kv, f.arts, src, "alice", f.now)
	require.NoError(t, err)
	require.NoError(t, next(t, applied))
	v1, err := l.Lookup("task-a")
	require.NoError(t, err)
	require.Equal(t, "A one", v1.Name)
	require.Equal(t, filepath.Join(cache, p1[0].Digest()), v1.Dir, "unpacked into the cache under its digest")
	require.FileExists(t, filepath.Join(v1.SuiteDir(), "items.jsonl"))
	require.Equal(t, []string{"task-a"}, l.Tasks())

	writeCampaign(t, src, "task-a", "A two")
	p2, err := Push(ctx, f.kv, f.arts, src, "alice", f.now)
	require.NoError(t, err)
	require.NoError(t, next(t, applied))
	v2, err := l.Lookup("task-a")
	require.NoError(t, err)
	require.Equal(t, "A two", v2.Name)
	loaded, ok := l.Loaded("task-a")
	require.True(t, ok)
	require.Equal(t, p2[0].Entry, loaded)
	require.Equal(t, "A one", v1.Name, "a campaign already looked up is not changed under its holder")
	require.DirExists(t, v1.Dir)

	// A restart loads the current version from the cache folder it left.
	again, _ := watch(t, f, cache)
	c, err := again.Lookup("task-a")
	require.NoError(t, err)
	require.Equal(t, v2.Dir, c.Dir)
}

// TestLiveKeepsThePreviousVersion: versions the source cannot use (an
// entry that is not JSON, a bundle the store does not hold, a bundle
// whose campaign does not load, one under another task's key) are
// skipped with an error, and the version before stays in service.
func TestLiveKeepsThePreviousVersion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	src := t.TempDir()
	writeCampaign(t, src, "task-a", "A one")
	good, err := Push(ctx, f.kv, f.arts, src, "alice", f.now)
	require.NoError(t, err)
	l, applied := watch(t, f, t.TempDir())
	require.NoError(t, next(t, applied), "the initial load")

	// A folder that stores fine but is no campaign: campaign.json's
	// task id is refused by campaign.Load.
	broken := t.TempDir()
	writeCampaign(t, broken, "task-a", "A broken")
	require.NoError(t, os.WriteFile(filepath.Join(broken, campaign.File), []byte(`{"task_id":"task a"}`), 0o644))
	brokenRef, err := artifact.PutTree(ctx, f.arts, broken)
	require.NoError(t, err)
	other := t.TempDir()
	writeCampaign(t, other, "task-b", "B")
	otherRef, err := artifact.PutTree(ctx, f.arts, other)
	require.NoError(t, err)
	missing := good[0].Bundle
	missing.SHA256 = "0000000000000000000000000000000000000000000000000000000000000000"
	missing.Object = artifact.ManifestObject(missing.SHA256)

	entry := func(e Entry) []byte {
		data, err := json.Marshal(e)
		require.NoError(t, err)
		return data
	}
	cases := []struct {
		name  string
		value []byte
	}{
		{"not JSON", []byte("{")},
		{"bundle not stored", entry(Entry{TaskID: "task-a", Version: 2, Bundle: missing})},
		{"campaign does not load", entry(Entry{TaskID: "task-a", Version: 3, Bundle: brokenRef})},
		{"another task's campaign", entry(Entry{TaskID: "task-a", Version: 4, Bundle: otherRef})},
	}
	for _, tc := range cases {
		_, err := f.kv.Put(ctx, "task-a", tc.value)
		require.NoError(t, err)
		require.Error(t, next(t, applied), tc.name)
		c, err := l.Lookup("task-a")
		require.NoError(t, err, tc.name)
		require.Equal(t, "A one", c.Name, "%s: the previous version stays", tc.name)
		loaded, _ := l.Loaded("task-a")
		require.Equal(t, good[0].Digest(), loaded.Digest(), tc.name)
	}
	require.Equal(t, []string{"task-a"}, l.Tasks())
}
