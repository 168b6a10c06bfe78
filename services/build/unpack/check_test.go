package unpack_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/services/build/unpack"
)

const declaration = `{"task_id":"qwen3-tiny","split":"dev","participant":"team","solution":{"checkpoint":"ck","method":"m","precision":"W4A16KV8"}%s}`

func received() events.SubmissionReceivedData {
	return events.SubmissionReceivedData{SubmissionID: "s1", TaskID: "qwen3-tiny", Split: "dev", Participant: "team",
		Solution: events.DeclaredSolution{Checkpoint: "ck", Method: "m", Precision: "W4A16KV8"}}
}

func minimal() map[string]string {
	return map[string]string{
		"submission.json":   fmtDecl(""),
		"config.json":       `{"architectures":["Qwen3ForCausalLM"],"model_type":"qwen3"}`,
		"model.safetensors": "not read here",
		"tokenizer.json":    "{}",
	}
}

func fmtDecl(extra string) string {
	if extra != "" {
		extra = "," + extra
	}
	return fmt.Sprintf(declaration, extra)
}

// lay writes files into a folder and lists them as Unpack would.
func lay(t *testing.T, files map[string]string) (string, []events.FileDigest) {
	t.Helper()
	dir := t.TempDir()
	var fds []events.FileDigest
	for name, body := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
		fds = append(fds, events.FileDigest{Path: name, Size: int64(len(body)), SHA256: sha(body)})
	}
	return dir, fds
}

func TestCheckAccepts(t *testing.T) {
	t.Parallel()
	files := minimal()
	files["submission.json"] = fmtDecl(`"engine":{"command":"simengine","patch":"engine.patch","kv_cache_dtype":"fp8"}`)
	files["engine.patch"] = "--- a\n+++ b\n"
	dir, fds := lay(t, files)
	decl, err := unpack.Check(dir, fds, received())
	require.NoError(t, err)
	require.Equal(t, "fp8", decl.Engine.KVCacheDType)
	require.Equal(t, "qwen3-tiny", decl.TaskID)
}

func TestCheckRefuses(t *testing.T) {
	t.Parallel()
	with := func(change func(map[string]string)) map[string]string {
		m := maps.Clone(minimal())
		change(m)
		return m
	}
	cases := []struct {
		name  string
		files map[string]string
		in    func(*events.SubmissionReceivedData)
		code  reason.Code
	}{
		{"pickled weights", with(func(m map[string]string) { m["pytorch_model.bin"] = "pickle" }), nil, reason.BundleUnsafeFile},
		{"python code", with(func(m map[string]string) { m["modeling_evil.py"] = "import os" }), nil, reason.BundleCodeFile},
		{"shared object", with(func(m map[string]string) { m["kernel.so"] = "ELF" }), nil, reason.BundleCodeFile},
		{"unknown kind", with(func(m map[string]string) { m["notes.docx"] = "?" }), nil, reason.BundleUnexpectedFile},
		{"nested safetensors", with(func(m map[string]string) { m["sub/model.safetensors"] = "x" }), nil, reason.BundleUnexpectedFile},
		{"no declaration", with(func(m map[string]string) { delete(m, "submission.json") }), nil, reason.BundleNoDeclaration},
		{"bad declaration", with(func(m map[string]string) { m["submission.json"] = `{"task_id":"qwen3-tiny","split":"final"}` }), nil, reason.BundleBadDeclaration},
		{"misspelt field", with(func(m map[string]string) { m["submission.json"] = fmtDecl(`"partcipant":"x"`) }), nil, reason.BundleBadDeclaration},
		{"declaration differs", minimal(), func(in *events.SubmissionReceivedData) { in.Solution.Precision = "W4A4KV8" }, reason.BundleDeclarationMismatch},
		{"no config", with(func(m map[string]string) { delete(m, "config.json") }), nil, reason.BundleMissingConfig},
		{"config not JSON", with(func(m map[string]string) { m["config.json"] = `{"model_type": "qwen3",` }), nil, reason.BundleBadConfig},
		{"config an array", with(func(m map[string]string) { m["config.json"] = `[1,2]` }), nil, reason.BundleBadConfig},
		{"config not a model's", with(func(m map[string]string) { m["config.json"] = `{"hello":"world"}` }), nil, reason.BundleBadConfig},
		{"no safetensors", with(func(m map[string]string) { delete(m, "model.safetensors") }), nil, reason.BundleNoSafetensors},
		{"missing patch", with(func(m map[string]string) {
			m["submission.json"] = fmtDecl(`"engine":{"patch":"fix.patch"}`)
		}), nil, reason.BundleMissingPatch},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir, fds := lay(t, tc.files)
			in := received()
			if tc.in != nil {
				tc.in(&in)
			}
			_, err := unpack.Check(dir, fds, in)
			e := unpack.AsError(err)
			require.NotNil(t, e, "want a refusal, got %v", err)
			require.Equal(t, tc.code, e.Code, e.Message)
			require.NotEmpty(t, e.Message)
		})
	}
}

func TestCodesAreDistinct(t *testing.T) {
	seen := map[reason.Code]bool{}
	for _, c := range unpack.Codes() {
		require.False(t, seen[c], c)
		seen[c] = true
		b, _ := json.Marshal(c)
		require.Regexp(t, `^"bundle_[a-z_]+"$`, string(b))
	}
}
