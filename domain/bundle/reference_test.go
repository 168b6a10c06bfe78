package bundle

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events/reason"
)

func TestParseReference(t *testing.T) {
	t.Parallel()
	sha := func(c string) string { return strings.Repeat(c, 64) }
	ref := func(edit func(m map[string]any)) string {
		m := map[string]any{
			"repository": "https://huggingface.co/org/model",
			"revision":   "0123456789abcdef0123456789abcdef01234567",
			"files": []any{
				map[string]any{"path": "model-00002-of-00002.safetensors", "size": 5000, "sha256": sha("b")},
				map[string]any{"path": "config.json", "size": 100, "sha256": sha("a")},
				map[string]any{"path": "model-00001-of-00002.safetensors", "size": 4000, "sha256": sha("c")},
			},
		}
		if edit != nil {
			edit(m)
		}
		b, err := json.Marshal(m)
		require.NoError(t, err)
		return string(b)
	}
	file := func(path string, size int, sum string) map[string]any {
		return map[string]any{"path": path, "size": size, "sha256": sum}
	}
	tests := []struct {
		name, body string
		code       reason.Code // "" means valid
		contains   []string
		absent     []string
	}{
		{name: "good", body: ref(nil)},
		{name: "not json", body: `{"repository":`, code: reason.BundleBadReference, contains: []string{"not valid"}},
		{name: "unknown field", body: strings.Replace(ref(nil), `"revision"`, `"revison":"x","revision"`, 1), code: reason.BundleBadReference,
			contains: []string{`unknown field "revison"`}},
		{name: "credentials in the URL", body: ref(func(m map[string]any) { m["repository"] = "https://me:hunter2-secret@huggingface.co/org/model" }),
			code: "reference_url_credentials", absent: []string{"hunter2-secret", "me:"}},
		{name: "a token in the query", body: ref(func(m map[string]any) { m["repository"] = "https://huggingface.co/org/model?token=hunter2-secret" }),
			code: "reference_url_invalid", absent: []string{"hunter2-secret"}},
		{name: "no revision", body: ref(func(m map[string]any) { m["revision"] = "" }), code: "reference_revision_invalid"},
		{name: "no files", body: ref(func(m map[string]any) { m["files"] = []any{} }), code: reason.BundleBadReference},
		{name: "every problem of the files at once",
			body: ref(func(m map[string]any) {
				m["files"] = []any{file("../etc/passwd", 1, sha("a")), file("config.json", -1, "ABC"), file("config.json", 1, sha("a")),
					file(".hidden.json", 1, sha("a")), file("sub/model.safetensors", 8, sha("d"))}
			}),
			code: reason.BundleBadReference,
			contains: []string{"files[0] (../etc/passwd): path must be", "files[1] (config.json): size is negative", "files[1] (config.json): sha256 must be",
				"files[2] (config.json): listed twice", "files[3] (.hidden.json): path must be", "files[4] (sub/model.safetensors): safetensors files belong at the top"}},
		{name: "no shard", body: ref(func(m map[string]any) { m["files"] = []any{file("config.json", 1, sha("a"))} }), code: reason.BundleBadReference,
			contains: []string{"no *.safetensors file is listed"}},
		{name: "no config", body: ref(func(m map[string]any) { m["files"] = []any{file("model.safetensors", 9, sha("a"))} }), code: reason.BundleBadReference,
			contains: []string{"config.json is not listed"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := ParseReference([]byte(tc.body))
			if tc.code == "" {
				require.NoError(t, err)
				require.Equal(t, []string{"config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"},
					[]string{r.Files[0].Path, r.Files[1].Path, r.Files[2].Path}, "sorted by path")
				require.Equal(t, int64(9100), r.Bytes())
				f, ok := r.File("model-00002-of-00002.safetensors")
				require.True(t, ok)
				require.Equal(t, sha("b"), f.SHA256)
				repo, err := r.Repo()
				require.NoError(t, err)
				require.Equal(t, "https://huggingface.co/org/model/resolve/0123456789abcdef0123456789abcdef01234567/config.json", repo.FileURL("config.json").String())
				return
			}
			var be *Error
			require.ErrorAs(t, err, &be)
			require.Equal(t, tc.code, be.Code, be.Message)
			for _, s := range tc.contains {
				require.Contains(t, be.Message, s)
			}
			for _, s := range tc.absent {
				require.NotContains(t, err.Error(), s)
			}
		})
	}
}

func TestReferenceRoundTrip(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	none, err := ReadReference(dir)
	require.NoError(t, err)
	require.Nil(t, none, "no checkpoint.json: the checkpoint is in the bundle")
	want := Reference{Repository: "https://huggingface.co/org/model", Revision: "main", Files: []ReferencedFile{
		{Path: "model.safetensors", Size: 10, SHA256: strings.Repeat("1", 64)},
		{Path: "config.json", Size: 2, SHA256: strings.Repeat("2", 64)},
	}}
	require.NoError(t, WriteReference(dir, want))
	got, err := ReadReference(dir)
	require.NoError(t, err)
	require.Equal(t, "config.json", got.Files[0].Path)
	require.Equal(t, want.Files[0], got.Files[1])
	require.True(t, Remote("model-00001-of-00002.safetensors"))
	require.False(t, Remote("model.safetensors.index.json"))
}
