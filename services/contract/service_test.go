package contract_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/campaign"
	"github.com/lowbarena/lowbarena/domain/examples"
	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/domain/safetensors"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/app"
	"github.com/lowbarena/lowbarena/platform/artifact"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
	"github.com/lowbarena/lowbarena/services/contract"
)

type harness struct {
	t     *testing.T
	b     *bus.Bus
	store *artifact.JetStream
	set   campaign.Set
	exs   map[string]examples.Example
	ctx   context.Context
}

// writeExamples writes the example bundles and their campaign and loads
// it.
func writeExamples(t *testing.T) (string, campaign.Set, map[string]examples.Example) {
	t.Helper()
	dir := t.TempDir()
	exs, err := examples.Write(dir)
	require.NoError(t, err)
	set, err := campaign.LoadDir(filepath.Join(dir, examples.CampaignsDir))
	require.NoError(t, err)
	byName := map[string]examples.Example{}
	for _, ex := range exs {
		byName[ex.Name] = ex
	}
	return filepath.Join(dir, examples.CampaignsDir), set, byName
}

// start writes the examples and runs the contract service as its command
// and `arena up` do (its Component, with --campaigns set as arena up sets
// it) on a real embedded NATS until the test ends.
func start(t *testing.T) *harness {
	t.Helper()
	campaigns, set, exs := writeExamples(t)
	h := startWith(t, map[string]string{"campaigns": campaigns, "work": t.TempDir()})
	h.set, h.exs = set, exs
	return h
}

// startWith runs the contract service with settings (its flags by name)
// on a real embedded NATS until the test ends.
func startWith(t *testing.T, settings map[string]string) *harness {
	t.Helper()
	srv := bustest.Server(t, "")
	c := contract.Component()
	cfg := app.DefaultConfig(c.Name)
	fs := c.FlagSet(&cfg)
	require.NoError(t, fs.Parse([]string{"--nats", srv.ClientURL()}))
	require.NoError(t, app.Set(fs, settings))
	cfg.Store = ""
	ctx, cancel := context.WithCancel(context.Background())
	rt, err := app.Start(ctx, cfg, app.WithLogOutput(io.Discard), app.WithoutTelemetry())
	require.NoError(t, err)
	actors, err := c.Build(ctx, rt)
	require.NoError(t, err)
	store, err := artifact.NewJetStream(ctx, rt.Bus.JetStream(), bus.ObjectArtifacts)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- app.RunActors(ctx, rt.Log, actors...) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
		rt.Close()
	})
	return &harness{t: t, b: rt.Bus, store: store, ctx: ctx}
}

// built stores a bundle folder as the build stage would and returns its
// build.completed payload.
func (h *harness) built(id, dir string) events.BuildCompletedData {
	h.t.Helper()
	return put(h.t, h.store, id, dir)
}

// put stores a bundle folder in store as the build stage would and
// returns its build.completed payload.
func put(t *testing.T, store artifact.Store, id, dir string) events.BuildCompletedData {
	t.Helper()
	ctx := context.Background()
	var files []events.FileDigest
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		require.NoError(t, err)
		sum := sha256.Sum256(data)
		rel, _ := filepath.Rel(dir, p)
		fd := events.FileDigest{Path: filepath.ToSlash(rel), Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:])}
		_, err = store.PutFile(ctx, fd.SHA256, fd.Size, bytes.NewReader(data))
		require.NoError(t, err)
		files = append(files, fd)
		return nil
	}))
	m := artifact.NewManifest(files)
	ref, err := store.PutManifest(ctx, m)
	require.NoError(t, err)
	return events.BuildCompletedData{SubmissionID: id, BundleDigest: m.Digest, Files: m.Files, Bytes: m.Bytes, Artifact: ref}
}

func (h *harness) publish(d events.BuildCompletedData) {
	h.t.Helper()
	_, err := bus.Emit(h.ctx, h.b, events.Source("build"), events.Build.Completed, d.SubmissionID, d, bus.CausedBy(d.SubmissionID))
	require.NoError(h.t, err)
}

func (h *harness) outcome(id string) event.Event {
	return bustest.Await(h.t, h.b, "arena.contract.*."+id, events.ContractCompleted, events.ContractFailed)
}

func TestContractOfEveryExample(t *testing.T) {
	t.Parallel()
	h := start(t)
	for name, ex := range h.exs {
		h.publish(h.built(name, ex.Dir))
	}
	for name, ex := range h.exs {
		e := h.outcome(name)
		var c record.Contract
		if ex.Honest {
			require.Equal(t, string(events.ContractCompleted), e.Type(), name)
			var d events.ContractCompletedData
			require.NoError(t, json.Unmarshal(e.Data(), &d))
			require.Equal(t, ex.Detected, d.DetectedPrecision, name)
			c = d.Contract
			require.True(t, c.OK)
		} else {
			require.Equal(t, string(events.ContractFailed), e.Type(), name)
			var d events.StageFailedData
			require.NoError(t, json.Unmarshal(e.Data(), &d))
			require.Equal(t, ex.Violations[0], d.Reason, name)
			for _, v := range ex.Violations {
				require.Contains(t, d.Message, v, "the reason names each violation")
			}
			require.NoError(t, json.Unmarshal(d.Detail, &c), "the contract block travels with the refusal")
			require.False(t, c.OK)
		}
		codes := []string{}
		for _, v := range c.Violations {
			codes = append(codes, v.Code)
		}
		slices.Sort(codes)
		require.Equal(t, ex.Violations, codes, name)
		require.Equal(t, ex.Detected, c.DetectedPrecision, name)
		require.Equal(t, ex.Declared, c.DeclaredPrecision, name)
		require.Len(t, bustest.Stored(t, h.b, "arena.contract.started."+name), 1)
	}
}

// TestContractReadsOnlyHeaders checks what Check read against the bundle:
// the headers, not the tensor data.
func TestContractReadsOnlyHeaders(t *testing.T) {
	t.Parallel()
	h := start(t)
	for _, name := range []string{"fp8-w8a8", "nvfp4-w4a4"} {
		d := h.built(name, h.exs[name].Dir)
		c, read, err := (&contract.Checker{Artifacts: h.store, Campaigns: h.set}).Check(h.ctx, d)
		require.NoError(t, err)
		ck, err := safetensors.ReadCheckpoint(h.exs[name].Dir)
		require.NoError(t, err)
		require.Equal(t, ck.BytesRead(), read)
		require.Less(t, read*20, c.SafetensorBytes, "%s: read %d header bytes of %d", name, read, c.SafetensorBytes)
	}
}

// rawSafetensors is a file of the given header and n data bytes.
func rawSafetensors(header string, n int) []byte {
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	out = append(out, header...)
	return append(out, make([]byte, n)...)
}

func copyDir(t *testing.T, src string) string {
	dst := t.TempDir()
	require.NoError(t, os.CopyFS(dst, os.DirFS(src)))
	return dst
}

func TestContractRefusesBadInput(t *testing.T) {
	t.Parallel()
	h := start(t)
	single, sharded := h.exs["int4-w4a16-g32"].Dir, h.exs["fp8-w8a8"].Dir
	write := func(name string, data []byte) func(t *testing.T, dir string) {
		return func(t *testing.T, dir string) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, name), data, 0o644))
		}
	}
	cases := []struct {
		id     string
		from   string
		change func(t *testing.T, dir string)
		code   string
	}{
		{"truncated", single, write("model.safetensors", []byte{1, 2, 3}), string(reason.HeaderTruncated)},
		{"header-past-end", single, write("model.safetensors", binary.LittleEndian.AppendUint64(nil, 4096)), string(reason.HeaderTruncated)},
		{"invalid-json", single, write("model.safetensors", rawSafetensors(`{oops: not JSON}`, 16)), string(reason.HeaderInvalidJSON)},
		{"duplicate-names", single, write("model.safetensors", rawSafetensors(
			`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}`, 16)), string(reason.TensorDuplicate)},
		{"overlap", single, write("model.safetensors", rawSafetensors(
			`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, 16)), string(reason.TensorOffsetsOverlap)},
		{"past-end", single, write("model.safetensors", rawSafetensors(
			`{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}`, 8)), string(reason.FileTruncated)},
		{"reversed-offsets", single, write("model.safetensors", rawSafetensors(
			`{"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}}`, 8)), string(reason.TensorOffsetsOutOfRange)},
		{"unknown-dtype", single, write("model.safetensors", rawSafetensors(
			`{"a":{"dtype":"Q3_K","shape":[2],"data_offsets":[0,8]}}`, 8)), string(reason.DTypeUnknown)},
		{"traversal", sharded, func(t *testing.T, dir string) {
			path := filepath.Join(dir, safetensors.IndexFile)
			data, err := os.ReadFile(path)
			require.NoError(t, err)
			data = []byte(strings.Replace(string(data), `"model-00002-of-00002.safetensors"`, `"../model-00002-of-00002.safetensors"`, 1))
			require.NoError(t, os.WriteFile(path, data, 0o644))
		}, string(reason.IndexShardInvalidName)},
		{"missing-shard", sharded, func(t *testing.T, dir string) {
			require.NoError(t, os.Remove(filepath.Join(dir, "model-00002-of-00002.safetensors")))
		}, string(reason.IndexShardMissing)},
		{"unknown-task", single, func(t *testing.T, dir string) {
			path := filepath.Join(dir, "submission.json")
			data, err := os.ReadFile(path)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(path, []byte(strings.Replace(string(data), examples.TaskID, "llama-9000", 1)), 0o644))
		}, string(reason.CampaignUnknownTask)},
		{"bad-label-kv", single, func(t *testing.T, dir string) {
			path := filepath.Join(dir, "submission.json")
			data, err := os.ReadFile(path)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(path, []byte(strings.Replace(string(data), `"kv_cache_dtype": "fp8"`, `"kv_cache_dtype": "fp3"`, 1)), 0o644))
		}, "kv_dtype_unknown"},
	}
	for _, tc := range cases {
		dir := copyDir(t, tc.from)
		tc.change(t, dir)
		h.publish(h.built(tc.id, dir))
	}
	gone := h.built("gone", single)
	gone.Artifact.Object = artifact.ManifestObject(strings.Repeat("0", 64))
	gone.Artifact.SHA256 = strings.Repeat("0", 64)
	h.publish(gone)
	cases = append(cases, struct {
		id     string
		from   string
		change func(t *testing.T, dir string)
		code   string
	}{id: "gone", code: string(reason.ArtifactMissing)})

	for _, tc := range cases {
		e := h.outcome(tc.id)
		require.Equal(t, string(events.ContractFailed), e.Type(), tc.id)
		var d events.StageFailedData
		require.NoError(t, json.Unmarshal(e.Data(), &d))
		require.Equal(t, tc.code, d.Reason, "%s: %s", tc.id, d.Message)
		require.NotEmpty(t, d.Message)
	}
	// None of them went to the dead-letter stream: each is a refusal.
	require.Zero(t, dlqCount(t, h.b))
}

func dlqCount(t *testing.T, b *bus.Bus) uint64 {
	ctx := context.Background()
	s, err := b.JetStream().Stream(ctx, events.StreamDLQ)
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	return info.State.Msgs
}
