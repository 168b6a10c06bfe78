package build_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/bundle"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/app"
	"github.com/lowbarena/lowbarena/platform/artifact"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
	"github.com/lowbarena/lowbarena/platform/stage/stagetest"
	"github.com/lowbarena/lowbarena/services/build"
	"github.com/lowbarena/lowbarena/services/build/unpack"
)

type harness struct {
	t    *testing.T
	b    *bus.Bus
	ctx  context.Context
	work string
}

// start runs the build service as its command and `arena up` do (its
// Component, with --work set as arena up sets it) on a real embedded
// NATS until the test ends.
func start(t *testing.T) *harness {
	t.Helper()
	return startWith(t, nil)
}

// startWith is start with more flags set (campaigns: a local campaigns
// folder instead of the campaigns bucket).
func startWith(t *testing.T, flags map[string]string) *harness {
	t.Helper()
	srv := bustest.Server(t, "")
	c := build.Component()
	cfg := app.DefaultConfig(c.Name)
	fs := c.FlagSet(&cfg)
	require.NoError(t, fs.Parse([]string{"--nats", srv.ClientURL()}))
	work := filepath.Join(t.TempDir(), "build")
	set := map[string]string{"work": work, "campaigns": "", "campaigns-cache": t.TempDir()}
	maps.Copy(set, flags)
	require.NoError(t, app.Set(fs, set))
	cfg.Store = ""
	ctx, cancel := context.WithCancel(context.Background())
	rt, err := app.Start(ctx, cfg, app.WithLogOutput(io.Discard), app.WithoutTelemetry())
	require.NoError(t, err)
	actors, err := c.Build(ctx, rt)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- app.RunActors(ctx, rt.Log, actors...) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
		rt.Close()
	})
	return &harness{t: t, b: rt.Bus, ctx: ctx, work: work}
}

func folder(t *testing.T, files map[string]string) string {
	dir := t.TempDir()
	for name, body := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
	}
	return dir
}

func goodFiles() map[string]string {
	return map[string]string{
		"submission.json":   `{"task_id":"qwen3-tiny","split":"dev","participant":"team","solution":{"checkpoint":"ck","method":"m","precision":"W4A16KV8"}}`,
		"config.json":       `{"architectures":["Qwen3ForCausalLM"],"model_type":"qwen3"}`,
		"model.safetensors": "weights are not read by the build stage",
		"tokenizer.json":    `{"model":{}}`,
	}
}

// upload puts raw archive bytes in the uploads store and publishes
// submission.received for them, announcing the given digest.
func (h *harness) upload(id string, archive []byte, announce string) {
	h.t.Helper()
	os, err := h.b.JetStream().ObjectStore(h.ctx, bus.ObjectUploads)
	require.NoError(h.t, err)
	_, err = os.PutBytes(h.ctx, id+".tar.gz", archive)
	require.NoError(h.t, err)
	if announce == "" {
		sum := sha256.Sum256(archive)
		announce = hex.EncodeToString(sum[:])
	}
	h.publish(id, events.BundleRef{Store: "jetstream", Bucket: bus.ObjectUploads, Object: id + ".tar.gz", Size: int64(len(archive)), SHA256: announce, Files: 4})
}

func (h *harness) publish(id string, ref events.BundleRef) {
	h.t.Helper()
	_, err := bus.Emit(h.ctx, h.b, events.Source("test"), events.Submission.Received, id, receivedOf(id, ref), bus.CausedBy(id))
	require.NoError(h.t, err)
}

// receivedOf is the submission.received of id for the upload ref.
func receivedOf(id string, ref events.BundleRef) events.SubmissionReceivedData {
	return events.SubmissionReceivedData{SubmissionID: id, Participant: "team", TaskID: "qwen3-tiny", Split: "dev", Track: "engine",
		Solution: events.DeclaredSolution{Checkpoint: "ck", Method: "m", Precision: "W4A16KV8"}, Bundle: ref, SubmittedAt: time.Now().UTC()}
}

func pack(t *testing.T, dir string) []byte {
	var buf bytes.Buffer
	_, err := bundle.Pack(dir, &buf)
	require.NoError(t, err)
	return buf.Bytes()
}

func (h *harness) outcome(id string) event.Event {
	return bustest.Await(h.t, h.b, "arena.build.*."+id, events.BuildCompleted, events.BuildFailed)
}

func TestBuildStoresTheBundle(t *testing.T) {
	t.Parallel()
	h := start(t)
	files := goodFiles()
	h.upload("first", pack(t, folder(t, files)), "")
	e := h.outcome("first")
	require.Equal(t, string(events.BuildCompleted), e.Type())
	var got events.BuildCompletedData
	require.NoError(t, json.Unmarshal(e.Data(), &got))

	require.Len(t, got.Files, len(files))
	for _, f := range got.Files {
		sum := sha256.Sum256([]byte(files[f.Path]))
		require.Equal(t, hex.EncodeToString(sum[:]), f.SHA256, f.Path)
		require.Equal(t, int64(len(files[f.Path])), f.Size)
	}
	m := artifact.NewManifest(got.Files)
	require.Equal(t, m.Digest, got.BundleDigest)
	require.Equal(t, m.Digest, got.Artifact.SHA256)
	require.Empty(t, got.DuplicateOf)

	// What the later stages read is what was checked.
	store, err := artifact.NewJetStream(h.ctx, h.b.JetStream(), bus.ObjectArtifacts)
	require.NoError(t, err)
	back, err := store.Manifest(h.ctx, got.Artifact)
	require.NoError(t, err)
	require.Equal(t, m, back)
	f, _ := back.File("config.json")
	r, err := store.OpenFile(h.ctx, f.SHA256)
	require.NoError(t, err)
	body, err := io.ReadAll(r)
	require.NoError(t, err)
	require.NoError(t, r.Close())
	require.Equal(t, files["config.json"], string(body))

	started := bustest.Stored(t, h.b, "arena.build.started.first")
	require.Len(t, started, 1)
	h.requireWorkEmpty()
}

func TestBuildRecognisesTheSameBundle(t *testing.T) {
	t.Parallel()
	h := start(t)
	dir := folder(t, goodFiles())
	h.upload("one", pack(t, dir), "")
	first := h.outcome("one")
	h.upload("two", pack(t, dir), "")
	second := h.outcome("two")
	var a, b events.BuildCompletedData
	require.NoError(t, json.Unmarshal(first.Data(), &a))
	require.NoError(t, json.Unmarshal(second.Data(), &b))
	require.Equal(t, a.BundleDigest, b.BundleDigest)
	require.Empty(t, a.DuplicateOf)
	require.Equal(t, "one", b.DuplicateOf)

	// A different bundle is not a duplicate.
	other := goodFiles()
	other["tokenizer.json"] = `{"model":{"vocab":{}}}`
	h.upload("three", pack(t, folder(t, other)), "")
	var c events.BuildCompletedData
	require.NoError(t, json.Unmarshal(h.outcome("three").Data(), &c))
	require.NotEqual(t, a.BundleDigest, c.BundleDigest)
	require.Empty(t, c.DuplicateOf)
}

// TestBuildsAtOnceAgreeOnTheFirst submits one bundle under several ids
// at once, so that the stage builds them side by side (Consumer.Handlers):
// every build completes with the same digest, one of them is the first
// and every other names it as the one it duplicates, and no work folder
// is left behind.
func TestBuildsAtOnceAgreeOnTheFirst(t *testing.T) {
	t.Parallel()
	require.Greater(t, build.Consumer.Handlers, 1, "the stage builds several bundles at once")
	h := start(t)
	archive := pack(t, folder(t, goodFiles()))
	ids := []string{"same-1", "same-2", "same-3", "same-4", "same-5", "same-6"}
	for _, id := range ids {
		h.upload(id, archive, "")
	}
	var firsts []string
	var digest string
	for _, id := range ids {
		e := h.outcome(id)
		require.Equal(t, string(events.BuildCompleted), e.Type(), id)
		var got events.BuildCompletedData
		require.NoError(t, json.Unmarshal(e.Data(), &got))
		if digest == "" {
			digest = got.BundleDigest
		}
		require.Equal(t, digest, got.BundleDigest, id)
		if got.DuplicateOf == "" {
			firsts = append(firsts, id)
		}
	}
	require.Len(t, firsts, 1, "one first submission of the digest")
	for _, id := range ids {
		var got events.BuildCompletedData
		require.NoError(t, json.Unmarshal(h.outcome(id).Data(), &got))
		if id != firsts[0] {
			require.Equal(t, firsts[0], got.DuplicateOf, id)
		}
	}
	h.requireWorkEmpty()
}

// TestBuildIsIdempotent hands the same delivery to the stage twice, as
// a redelivery after a crash would: one started, one completed, and the
// submission is not a duplicate of itself.
func TestBuildIsIdempotent(t *testing.T) {
	t.Parallel()
	b, _ := bustest.Bus(t)
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := build.New(ctx, b, log, build.Options{WorkDir: t.TempDir()})
	require.NoError(t, err)
	h := &harness{t: t, b: b, ctx: ctx}
	h.upload("again", pack(t, folder(t, goodFiles())), "")

	handle := s.Stage().Bind(b, log).Consumers()[0].Handle
	o, err := b.Next(ctx, build.Consumer, 10*time.Second, func(ctx context.Context, d *bus.Delivery) bus.Outcome {
		handle(ctx, d)
		return handle(ctx, d)
	})
	require.NoError(t, err)
	require.True(t, o.IsAck(), "outcome %s", o)
	completed := bustest.Stored(t, b, "arena.build.completed.again")
	require.Len(t, completed, 1)
	var got events.BuildCompletedData
	require.NoError(t, json.Unmarshal(completed[0].Data(), &got))
	require.Empty(t, got.DuplicateOf, "a redelivered submission is not a duplicate of itself")
	require.Len(t, bustest.Stored(t, b, "arena.build.*.again"), 2, "one started, one completed")
}

func TestBuildRefuses(t *testing.T) {
	t.Parallel()
	h := start(t)
	with := func(change func(map[string]string)) []byte {
		f := goodFiles()
		change(f)
		return pack(t, folder(t, f))
	}
	good := pack(t, folder(t, goodFiles()))
	cases := []struct {
		id       string
		archive  []byte
		announce string
		code     string
	}{
		{"mismatch", good, hex.EncodeToString(make([]byte, 32)), string(reason.BundleDigestMismatch)},
		{"corrupt", good[:len(good)-20], "", string(reason.BundleCorrupt)},
		{"pickle", with(func(m map[string]string) { m["pytorch_model.bin"] = "x" }), "", string(reason.BundleUnsafeFile)},
		{"noconfig", with(func(m map[string]string) { delete(m, "config.json") }), "", string(reason.BundleMissingConfig)},
		{"differs", with(func(m map[string]string) {
			m["submission.json"] = `{"task_id":"qwen3-tiny","split":"ranked","participant":"team","solution":{"checkpoint":"ck","method":"m","precision":"W4A16KV8"}}`
		}), "", string(reason.BundleDeclarationMismatch)},
	}
	for _, tc := range cases {
		h.upload(tc.id, tc.archive, tc.announce)
	}
	h.publish("gone", events.BundleRef{Store: "jetstream", Bucket: bus.ObjectUploads, Object: "never-uploaded.tar.gz", Size: 1, SHA256: hex.EncodeToString(make([]byte, 32))})
	cases = append(cases, struct {
		id       string
		archive  []byte
		announce string
		code     string
	}{id: "gone", code: string(reason.BundleNotFound)})
	// The announced digest is the upload's, its size is not: the store's
	// own check of the digest does not stand for the size's.
	shorter := pack(t, folder(t, goodFiles()))
	store, err := h.b.JetStream().ObjectStore(h.ctx, bus.ObjectUploads)
	require.NoError(t, err)
	_, err = store.PutBytes(h.ctx, "size.tar.gz", shorter)
	require.NoError(t, err)
	h.publish("size", events.BundleRef{Store: "jetstream", Bucket: bus.ObjectUploads, Object: "size.tar.gz", Size: int64(len(shorter) - 1), SHA256: sha(shorter), Files: 4})
	cases = append(cases, struct {
		id       string
		archive  []byte
		announce string
		code     string
	}{id: "size", code: string(reason.BundleDigestMismatch)})

	for _, tc := range cases {
		e := h.outcome(tc.id)
		require.Equal(t, string(events.BuildFailed), e.Type(), tc.id)
		var d events.StageFailedData
		require.NoError(t, json.Unmarshal(e.Data(), &d))
		require.Equal(t, tc.code, d.Reason, "%s: %s", tc.id, d.Message)
		require.NotEmpty(t, d.Message)
	}
	// Nothing refused reached the artifact store's bundles.
	os, err := h.b.JetStream().ObjectStore(h.ctx, bus.ObjectArtifacts)
	require.NoError(t, err)
	_, err = os.List(h.ctx)
	require.ErrorIs(t, err, jetstream.ErrNoObjectsFound)
	h.requireWorkEmpty()
}

// requireWorkEmpty checks that every bundle's folder left the work folder.
func (h *harness) requireWorkEmpty() {
	h.t.Helper()
	left, err := os.ReadDir(h.work)
	require.NoError(h.t, err, "the service works in the folder --work names")
	require.Empty(h.t, left)
}

// TestStageContract runs the stage kit's contract against the build
// stage's own declaration.
func TestStageContract(t *testing.T) {
	t.Parallel()
	in := bustest.Sample(events.SubmissionReceived).(*events.SubmissionReceivedData)
	out := bustest.Sample(events.BuildCompleted).(*events.BuildCompletedData)
	out.Bytes = 42
	stagetest.Contract(t, build.Stage(&build.Builder{}), *in, *out)
}

// TestComponentFlags checks the flags the build command had, with their
// defaults, and the names arena up sets.
func TestComponentFlags(t *testing.T) {
	t.Setenv(build.EnvWork, "")
	c := build.Component()
	require.Equal(t, build.Name, c.Name)
	require.Equal(t, []string{"build"}, c.Stages)
	cfg := app.DefaultConfig(c.Name)
	fs := c.FlagSet(&cfg)
	lim := unpack.DefaultLimits()
	for name, def := range map[string]string{
		"work":           os.TempDir(),
		"max-files":      strconv.Itoa(lim.MaxFiles),
		"max-bytes":      strconv.FormatInt(lim.MaxBytes, 10),
		"max-file-bytes": strconv.FormatInt(lim.MaxFileBytes, 10),
	} {
		f := fs.Lookup(name)
		require.NotNil(t, f, name)
		require.Equal(t, def, f.DefValue, name)
	}
	t.Setenv(app.EnvCampaigns, "")
	fs = c.FlagSet(&cfg)
	require.Empty(t, fs.Lookup("campaigns").DefValue, "the campaigns bucket by default")
	require.NotNil(t, fs.Lookup("campaigns-cache"))
	require.NoError(t, app.Set(fs, map[string]string{"work": "/data/build", "campaigns": "/data/campaigns"}))
	require.Equal(t, "/data/build", fs.Lookup("work").Value.String())
	require.Equal(t, "/data/campaigns", fs.Lookup("campaigns").Value.String(), "arena up and tests set the campaigns")

	t.Setenv(build.EnvWork, "/var/lib/lowbarena/build")
	fs = build.Component().FlagSet(&cfg)
	require.Equal(t, "/var/lib/lowbarena/build", fs.Lookup("work").DefValue)
}
