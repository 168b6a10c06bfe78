package build_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/campaign"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/bus"
)

// goodPatch changes a line of the test engine's sched/sched.go.
const goodPatch = `diff --git a/sched/sched.go b/sched/sched.go
index 1111111..2222222 100644
--- a/sched/sched.go
+++ b/sched/sched.go
@@ -2,3 +2,3 @@
 
-func Batch() int { return 1 }
+func Batch() int { return 8 }
 
`

// forbiddenPatch changes a file outside the campaign's allowed paths.
const forbiddenPatch = `--- a/docs/notes.md
+++ b/docs/notes.md
@@ -1 +1 @@
-notes
+notes, changed
`

// engineCampaigns writes a campaigns folder: qwen3-tiny pins an engine
// source (sched/** may change, 1 KiB patches at most), no-source pins
// none.
func engineCampaigns(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	write := func(name string, v any) {
		p := filepath.Join(dir, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		data, ok := v.(string)
		if !ok {
			b, err := json.Marshal(v)
			require.NoError(t, err)
			data = string(b)
		}
		require.NoError(t, os.WriteFile(p, []byte(data), 0o644))
	}
	for _, task := range []string{"qwen3-tiny", "no-source"} {
		engine := map[string]any{"command": "simengine --model {{.Checkpoint}}"}
		if task == "qwen3-tiny" {
			engine["source"] = map[string]any{"dir": "engine", "revision": "simengine test", "kind": "go",
				"build": "go build -o {{.Out}} .", "allow": []string{"sched/**"}, "max_patch_bytes": 1024}
			write(task+"/engine/sched/sched.go", "package sched\n\nfunc Batch() int { return 1 }\n\n// The end.\n")
			write(task+"/engine/docs/notes.md", "notes\n")
			write(task+"/engine/go.mod", "module simengine\n")
		}
		write(task+"/campaign.json", map[string]any{"task_id": task, "name": task, "policy": map[string]any{}, "engine": engine})
		write(task+"/config.json", `{"architectures":["Qwen3ForCausalLM"],"model_type":"qwen3"}`)
		write(task+"/tensors.json", `{"tensors":{"model.embed_tokens.weight":{"dtype":"BF16","shape":[8,4]}}}`)
	}
	return dir
}

// patchedBundle is a good bundle for task whose declaration names the
// engine patch patches/fast.patch.
func patchedBundle(task, patch string) map[string]string {
	files := goodFiles()
	files["patches/fast.patch"] = patch
	files["submission.json"] = `{"task_id":"` + task + `","split":"dev","participant":"team","solution":{"checkpoint":"ck","method":"m","precision":"W4A16KV8"},"engine":{"patch":"patches/fast.patch"}}`
	return files
}

// TestBuildServiceChecksPatches runs the build service (its Component,
// on an embedded NATS, with --campaigns) on bundles with an engine patch:
// one that applies to the campaign's pinned source is built with the
// patch's summary on build.completed; one touching a forbidden path, and
// one for a campaign that pins no source, fail the build with their code.
func TestBuildServiceChecksPatches(t *testing.T) {
	t.Parallel()
	camps := engineCampaigns(t)
	h := startWith(t, map[string]string{"campaigns": camps})
	set, err := campaign.LoadDir(camps)
	require.NoError(t, err)
	cases := []struct {
		id, task, patch string
		code            reason.Code
	}{
		{id: "kept", task: "qwen3-tiny", patch: goodPatch},
		{id: "forbidden", task: "qwen3-tiny", patch: forbiddenPatch, code: reason.PatchPathForbidden},
		{id: "nosource", task: "no-source", patch: goodPatch, code: reason.PatchUnknownSource},
	}
	for _, tc := range cases {
		archive := pack(t, folder(t, patchedBundle(tc.task, tc.patch)))
		obj, err := h.b.JetStream().ObjectStore(h.ctx, bus.ObjectUploads)
		require.NoError(t, err)
		_, err = obj.PutBytes(h.ctx, tc.id+".tar.gz", archive)
		require.NoError(t, err)
		in := receivedOf(tc.id, events.BundleRef{Store: "jetstream", Bucket: bus.ObjectUploads, Object: tc.id + ".tar.gz", Size: int64(len(archive)), SHA256: sha(archive), Files: 5})
		in.TaskID = tc.task
		_, err = bus.Emit(h.ctx, h.b, events.Source("test"), events.Submission.Received, tc.id, in, bus.CausedBy(tc.id))
		require.NoError(t, err)
	}
	for _, tc := range cases {
		e := h.outcome(tc.id)
		if tc.code == "" {
			require.Equal(t, string(events.BuildCompleted), e.Type(), tc.id)
			var d events.BuildCompletedData
			require.NoError(t, json.Unmarshal(e.Data(), &d))
			requirePatchSummary(t, set, tc.patch, d.Patch)
			continue
		}
		require.Equal(t, string(events.BuildFailed), e.Type(), tc.id)
		var d events.StageFailedData
		require.NoError(t, json.Unmarshal(e.Data(), &d))
		require.Equal(t, string(tc.code), d.Reason, "%s: %s", tc.id, d.Message)
		require.Contains(t, d.Message, "patches/fast.patch")
	}
	h.requireWorkEmpty()
}
