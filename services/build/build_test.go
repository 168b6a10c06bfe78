package build_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/campaign"
	"github.com/lowbarena/lowbarena/domain/enginepatch"
	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/artifact"
	"github.com/lowbarena/lowbarena/platform/artifact/artifacttest"
	"github.com/lowbarena/lowbarena/platform/stage"
	"github.com/lowbarena/lowbarena/services/build"
	"github.com/lowbarena/lowbarena/services/build/unpack"
)

// tarEntry is one entry of a hand-made archive: what bundle.Pack would
// never write (names leaving the folder, links).
type tarEntry struct {
	name, body, link string
	typ              byte
}

func tarGz(t *testing.T, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: 0o644, Linkname: e.link, Format: tar.FormatPAX}
		if e.typ == tar.TypeReg {
			hdr.Size = int64(len(e.body))
		}
		require.NoError(t, tw.WriteHeader(hdr))
		if e.typ == tar.TypeReg {
			_, err := tw.Write([]byte(e.body))
			require.NoError(t, err)
		}
	}
	require.NoError(t, tw.Close())
	require.NoError(t, zw.Close())
	return buf.Bytes()
}

// goodEntries are goodFiles as tar entries, in a fixed order.
func goodEntries() []tarEntry {
	files := goodFiles()
	var out []tarEntry
	for _, name := range []string{"config.json", "model.safetensors", "submission.json", "tokenizer.json"} {
		out = append(out, tarEntry{name: name, body: files[name], typ: tar.TypeReg})
	}
	return out
}

func sha(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// received is the submission of an archive as the gateway announces it:
// its true digest and size.
func received(id string, archive []byte) events.SubmissionReceivedData {
	return events.SubmissionReceivedData{SubmissionID: id, Participant: "team", TaskID: "qwen3-tiny", Split: "dev", Track: "engine",
		Solution: events.DeclaredSolution{Checkpoint: "ck", Method: "m", Precision: "W4A16KV8"},
		Bundle:   events.BundleRef{Store: "jetstream", Bucket: "uploads", Object: id + ".tar.gz", Size: int64(len(archive)), SHA256: sha(archive), Files: 4}}
}

// TestBuildDecides runs Build without a bus: an archive and what the
// submission announced of it, in; a stored bundle or a refusal's code, out.
func TestBuildDecides(t *testing.T) {
	t.Parallel()
	with := func(change func(map[string]string)) []byte {
		f := goodFiles()
		change(f)
		return pack(t, folder(t, f))
	}
	good := pack(t, folder(t, goodFiles()))
	zeros := hex.EncodeToString(make([]byte, 32))
	cases := []struct {
		name    string
		archive []byte
		// announce changes what the submission says of the archive.
		announce func(*events.BundleRef)
		limits   unpack.Limits
		code     reason.Code // "" for a built bundle
	}{
		{name: "a good bundle", archive: good},
		{name: "a hand-packed good bundle", archive: tarGz(t, goodEntries()...)},
		{name: "digest mismatch", archive: good, announce: func(r *events.BundleRef) { r.SHA256 = zeros }, code: reason.BundleDigestMismatch},
		{name: "size mismatch", archive: good, announce: func(r *events.BundleRef) { r.Size++ }, code: reason.BundleDigestMismatch},
		{name: "corrupt archive", archive: good[:len(good)-20], code: reason.BundleCorrupt},
		{name: "not an archive", archive: []byte("a pickle, not a tar"), code: reason.BundleCorrupt},
		{name: "path traversal", archive: tarGz(t, append(goodEntries(), tarEntry{name: "../escape.json", body: "{}", typ: tar.TypeReg})...),
			code: reason.BundlePathTraversal},
		{name: "absolute path", archive: tarGz(t, append(goodEntries(), tarEntry{name: "/etc/passwd", body: "x", typ: tar.TypeReg})...),
			code: reason.BundlePathTraversal},
		{name: "a link", archive: tarGz(t, append(goodEntries(), tarEntry{name: "extra.json", link: "/etc/passwd", typ: tar.TypeSymlink})...),
			code: reason.BundleBadEntry},
		{name: "too many files", archive: good, limits: unpack.Limits{MaxFiles: 2}, code: reason.BundleTooManyFiles},
		{name: "missing declaration", archive: with(func(m map[string]string) { delete(m, "submission.json") }), code: reason.BundleNoDeclaration},
		{name: "declaration mismatch", archive: with(func(m map[string]string) {
			m["submission.json"] = `{"task_id":"qwen3-tiny","split":"ranked","participant":"team","solution":{"checkpoint":"ck","method":"m","precision":"W4A16KV8"}}`
		}), code: reason.BundleDeclarationMismatch},
		{name: "missing config", archive: with(func(m map[string]string) { delete(m, "config.json") }), code: reason.BundleMissingConfig},
		{name: "a pickle", archive: with(func(m map[string]string) { m["pytorch_model.bin"] = "x" }), code: reason.BundleUnsafeFile},
		{name: "upload gone", archive: good, announce: func(r *events.BundleRef) { r.Object = "never-uploaded.tar.gz" }, code: reason.BundleNotFound},
		{name: "no upload bucket", archive: good, announce: func(r *events.BundleRef) { r.Bucket = "elsewhere" }, code: reason.BundleNotFound},
		{name: "a store the arena does not read", archive: good, announce: func(r *events.BundleRef) { r.Store = "s3" }, code: reason.BundleNotFound},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := received("sub", tc.archive)
			uploads := &memUploads{}
			uploads.put(in.Bundle.Bucket, in.Bundle.Object, tc.archive)
			if tc.announce != nil {
				tc.announce(&in.Bundle)
			}
			arts := artifacttest.NewMemory()
			b := &build.Builder{Uploads: uploads, Artifacts: arts, Bundles: &memBundles{}, WorkDir: t.TempDir(), Limits: tc.limits}
			out, err := b.Build(context.Background(), in)
			if tc.code != "" {
				r := stage.AsRefusal(err)
				require.NotNil(t, r, "a refusal, not a retry: %v", err)
				require.Equal(t, tc.code, r.Code, r.Message)
				require.NotEmpty(t, r.Message)
				require.True(t, arts.Empty(), "nothing refused reaches the artifact store")
				return
			}
			require.NoError(t, err)
			requireBuilt(t, arts, goodFiles(), out)
			require.Equal(t, "sub", out.SubmissionID)
			require.Empty(t, out.DuplicateOf)
		})
	}
}

// TestBuildChecksThePatch runs Build without a bus on bundles with an
// engine patch: one that applies to the campaign's pinned engine source
// is built, with the patch's summary on build.completed; one the
// campaign does not take is refused with its code, and nothing of it is
// stored.
func TestBuildChecksThePatch(t *testing.T) {
	t.Parallel()
	set, err := campaign.LoadDir(engineCampaigns(t))
	require.NoError(t, err)
	for _, tc := range []struct {
		name  string
		task  string
		patch string
		code  reason.Code // "" for a built bundle
	}{
		{name: "a patch that applies", task: "qwen3-tiny", patch: goodPatch},
		{name: "a forbidden path", task: "qwen3-tiny", patch: forbiddenPatch, code: reason.PatchPathForbidden},
		{name: "a patch that does not apply", task: "qwen3-tiny", patch: strings.Replace(goodPatch, "@@ -2,3 +2,3 @@", "@@ -3,3 +3,3 @@", 1), code: reason.PatchDoesNotApply},
		{name: "larger than the campaign allows", task: "qwen3-tiny", patch: goodPatch + strings.Repeat("trailing words\n", 200), code: reason.PatchTooLarge},
		{name: "a campaign that pins no source", task: "no-source", patch: goodPatch, code: reason.PatchUnknownSource},
		{name: "a task no campaign runs", task: "nobody-runs-this", patch: goodPatch, code: reason.CampaignUnknownTask},
	} {
		t.Run(tc.name, func(t *testing.T) {
			archive := pack(t, folder(t, patchedBundle(tc.task, tc.patch)))
			in := received("sub", archive)
			in.TaskID = tc.task
			uploads := &memUploads{}
			uploads.put(in.Bundle.Bucket, in.Bundle.Object, archive)
			arts := artifacttest.NewMemory()
			b := &build.Builder{Uploads: uploads, Artifacts: arts, Bundles: &memBundles{}, WorkDir: t.TempDir(), Campaigns: set}
			out, err := b.Build(context.Background(), in)
			if tc.code != "" {
				var r *stage.Refusal
				require.ErrorAs(t, err, &r)
				require.Equal(t, tc.code, r.Code, r.Message)
				require.Contains(t, r.Message, "patches/fast.patch", "the sentence names the patch")
				require.True(t, arts.Empty(), "a refused bundle stores nothing")
				return
			}
			require.NoError(t, err)
			requirePatchSummary(t, set, tc.patch, out.Patch)
		})
	}

	// A bundle without a patch needs no campaign at all.
	archive := pack(t, folder(t, goodFiles()))
	in := received("plain", archive)
	uploads := &memUploads{}
	uploads.put(in.Bundle.Bucket, in.Bundle.Object, archive)
	out, err := (&build.Builder{Uploads: uploads, Artifacts: artifacttest.NewMemory(), Bundles: &memBundles{}, WorkDir: t.TempDir()}).Build(context.Background(), in)
	require.NoError(t, err)
	require.Nil(t, out.Patch)
}

// requirePatchSummary checks a kept patch's summary against the patch
// and the campaign's engine source, opened anew.
func requirePatchSummary(t *testing.T, set campaign.Set, patch string, got *record.Patch) {
	t.Helper()
	c, err := set.Lookup("qwen3-tiny")
	require.NoError(t, err)
	src, err := enginepatch.ForCampaign(c)
	require.NoError(t, err)
	want, err := src.Check([]byte(patch))
	require.NoError(t, err)
	require.NotNil(t, got)
	require.Equal(t, record.Patch{Path: "patches/fast.patch", Size: int64(len(patch)), SHA256: sha([]byte(patch)),
		Files: []string{"sched/sched.go"}, LinesAdded: 1, LinesRemoved: 1, Revision: c.Engine.Source.Revision,
		SourceDigest: src.Digest, EngineDigest: want.EngineDigest}, *got)
	require.NotEqual(t, got.SourceDigest, got.EngineDigest)
}

// requireBuilt checks a built bundle against the files it was packed
// from: each file digested, the manifest's digest, every file stored.
func requireBuilt(t *testing.T, arts artifact.Store, files map[string]string, got events.BuildCompletedData) {
	t.Helper()
	require.Len(t, got.Files, len(files))
	for _, f := range got.Files {
		require.Equal(t, sha([]byte(files[f.Path])), f.SHA256, f.Path)
		require.Equal(t, int64(len(files[f.Path])), f.Size)
	}
	m := artifact.NewManifest(got.Files)
	require.Equal(t, m.Digest, got.BundleDigest)
	require.Equal(t, m.Digest, got.Artifact.SHA256)
	require.Equal(t, m.Bytes, got.Bytes)
	ctx := context.Background()
	back, err := arts.Manifest(ctx, got.Artifact)
	require.NoError(t, err)
	require.Equal(t, m, back)
	for _, f := range back.Files {
		r, err := arts.OpenFile(ctx, f.SHA256)
		require.NoError(t, err)
		body, err := io.ReadAll(r)
		require.NoError(t, err)
		require.NoError(t, r.Close())
		require.Equal(t, files[f.Path], string(body), f.Path)
	}
}

// TestBuildRecognisesADuplicate builds the same bundle for two
// submissions, and one of them twice (a redelivery).
func TestBuildRecognisesADuplicate(t *testing.T) {
	t.Parallel()
	good := pack(t, folder(t, goodFiles()))
	uploads := &memUploads{}
	b := &build.Builder{Uploads: uploads, Artifacts: artifacttest.NewMemory(), Bundles: &memBundles{}, WorkDir: t.TempDir()}
	build := func(id string, archive []byte) events.BuildCompletedData {
		in := received(id, archive)
		uploads.put(in.Bundle.Bucket, in.Bundle.Object, archive)
		out, err := b.Build(context.Background(), in)
		require.NoError(t, err, id)
		return out
	}
	one := build("one", good)
	require.Empty(t, one.DuplicateOf)
	again := build("one", good)
	require.Equal(t, one, again, "a redelivered submission is built the same, not a duplicate of itself")
	two := build("two", good)
	require.Equal(t, one.BundleDigest, two.BundleDigest)
	require.Equal(t, "one", two.DuplicateOf)

	other := goodFiles()
	other["tokenizer.json"] = `{"model":{"vocab":{}}}`
	three := build("three", pack(t, folder(t, other)))
	require.NotEqual(t, one.BundleDigest, three.BundleDigest)
	require.Empty(t, three.DuplicateOf)
}

// TestBuildRetriesAStoreThatFails: a store that does not answer is no
// refusal; the participant has nothing to fix.
func TestBuildRetriesAStoreThatFails(t *testing.T) {
	t.Parallel()
	good := pack(t, folder(t, goodFiles()))
	down := errors.New("nats: no responders")
	b := &build.Builder{Uploads: &memUploads{err: down}, Artifacts: artifacttest.NewMemory(), Bundles: &memBundles{}, WorkDir: t.TempDir()}
	_, err := b.Build(context.Background(), received("sub", good))
	require.ErrorIs(t, err, down)
	require.Nil(t, stage.AsRefusal(err))
}
