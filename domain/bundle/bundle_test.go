package bundle

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events/reason"
)

const goodDecl = `{"task_id":"qwen3-8b","split":"dev","participant":"team-a",
 "solution":{"checkpoint":"ckpt-fp8","method":"FP8-W8A8","precision":"W8A8KV8"}}`

func writeBundle(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
	}
	return dir
}

func TestParseDeclaration(t *testing.T) {
	tests := []struct {
		name, body string
		code       reason.Code // "" means valid
		contains   string
	}{
		{"good", goodDecl, "", ""},
		{"not json", `{"task_id":`, reason.BundleBadDeclaration, "not valid"},
		{"unknown field", `{"task_id":"t","split":"dev","participant":"p","solution":{"checkpoint":"c","method":"m"},"precison":"W4A4KV4"}`, reason.BundleBadDeclaration, `unknown field "precison"`},
		{"every problem at once", `{"task_id":"a b","split":"test","participant":" ","solution":{"checkpoint":"","method":"m","precision":"FP8"}}`,
			reason.BundleBadDeclaration, `task_id "a b"`},
		{"patch escapes", `{"task_id":"t","split":"ranked","participant":"p","solution":{"checkpoint":"c","method":"m"},"engine":{"patch":"../x.patch"}}`,
			reason.BundleBadDeclaration, "inside the bundle"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := ParseDeclaration([]byte(tt.body))
			if tt.code == "" {
				require.NoError(t, err)
				require.Equal(t, "engine", d.Track)
				require.Equal(t, "W8A8KV8", d.Solution.Precision)
				return
			}
			var be *Error
			require.ErrorAs(t, err, &be)
			require.Equal(t, tt.code, be.Code)
			require.Contains(t, be.Message, tt.contains)
		})
	}
	_, err := ParseDeclaration([]byte(`{"task_id":"a b","split":"test","participant":" ","solution":{"checkpoint":"","method":"m","precision":"FP8"}}`))
	for _, part := range []string{"split \"test\"", "participant is empty", "checkpoint is empty", "precision \"FP8\""} {
		require.ErrorContains(t, err, part)
	}
}

func TestReadDeclarationErrors(t *testing.T) {
	_, err := ReadDeclaration(filepath.Join(t.TempDir(), "nope"))
	var be *Error
	require.ErrorAs(t, err, &be)
	require.Equal(t, reason.BundleNotAFolder, be.Code)

	_, err = ReadDeclaration(writeBundle(t, map[string]string{"config.json": "{}"}))
	require.ErrorAs(t, err, &be)
	require.Equal(t, reason.BundleNoDeclaration, be.Code)
}

func TestPackIsDeterministicAndComplete(t *testing.T) {
	files := map[string]string{DeclarationFile: goodDecl, "config.json": `{"model_type":"qwen3"}`, "tok/tokenizer.json": "{}", "model.safetensors": "xxxx"}
	a, b := writeBundle(t, files), writeBundle(t, files)
	// Different times on disk must not change the archive.
	require.NoError(t, os.Chtimes(filepath.Join(b, "config.json"), timeZero, timeZero))
	var bufA, bufB bytes.Buffer
	sa, err := Pack(a, &bufA)
	require.NoError(t, err)
	sb, err := Pack(b, &bufB)
	require.NoError(t, err)
	require.Equal(t, sa, sb)
	require.Equal(t, bufA.Bytes(), bufB.Bytes())
	require.Equal(t, 4, sa.Files)
	require.EqualValues(t, bufA.Len(), sa.Size)

	zr, err := gzip.NewReader(&bufA)
	require.NoError(t, err)
	tr := tar.NewReader(zr)
	got := map[string]string{}
	var order []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		body, err := io.ReadAll(tr)
		require.NoError(t, err)
		got[h.Name] = string(body)
		order = append(order, h.Name)
	}
	require.Equal(t, files, got)
	require.Equal(t, []string{"config.json", "model.safetensors", DeclarationFile, "tok/tokenizer.json"}, order)

	// A changed byte changes the digest.
	require.NoError(t, os.WriteFile(filepath.Join(b, "model.safetensors"), []byte("xxxy"), 0o644))
	sc, err := Pack(b, io.Discard)
	require.NoError(t, err)
	require.NotEqual(t, sa.SHA256, sc.SHA256)
}

func TestPackRefusesSymlinks(t *testing.T) {
	dir := writeBundle(t, map[string]string{DeclarationFile: goodDecl})
	require.NoError(t, os.Symlink("/etc/passwd", filepath.Join(dir, "config.json")))
	_, err := Pack(dir, io.Discard)
	var be *Error
	require.ErrorAs(t, err, &be)
	require.Equal(t, reason.BundleSymlink, be.Code)
	require.Contains(t, be.Message, "config.json")
}

func TestLocal(t *testing.T) {
	for name, want := range map[string]bool{"a.patch": true, "p/a.patch": true, "../a": false, "/etc/x": false, "": false, `a\..\..\b`: false, "a/../../b": false} {
		require.Equal(t, want, Local(name), name)
	}
}

var timeZero = time.Unix(1, 0)
