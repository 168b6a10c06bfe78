package unpack_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/services/build/unpack"
)

// entry is one tar entry; size < 0 means len(body).
type entry struct {
	name string
	typ  byte
	body string
	size int64
	link string
}

func file(name, body string) entry { return entry{name: name, typ: tar.TypeReg, body: body, size: -1} }

// archive writes entries as a tar.gz. A size larger than the body makes a
// truncated entry (written raw, past tar.Writer's checks).
func archive(t *testing.T, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		size := e.size
		if size < 0 {
			size = int64(len(e.body))
		}
		hdr := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: 0o644, Size: size, Linkname: e.link, Format: tar.FormatPAX}
		if e.typ != tar.TypeReg {
			hdr.Size = 0
		}
		require.NoError(t, tw.WriteHeader(hdr))
		if e.typ == tar.TypeReg {
			_, err := tw.Write([]byte(e.body))
			if size == int64(len(e.body)) {
				require.NoError(t, err)
			}
		}
	}
	_ = tw.Close()
	require.NoError(t, zw.Close())
	return buf.Bytes()
}

func sha(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func TestUnpack(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := archive(t,
		file("config.json", `{"model_type":"qwen3"}`),
		entry{name: "tokenizer/", typ: tar.TypeDir},
		file("tokenizer/vocab.txt", "a\nb\n"),
		file("a.safetensors", "0123456789"),
		file("empty.txt", ""),
	)
	files, err := unpack.Unpack(bytes.NewReader(data), dir, unpack.Limits{})
	require.NoError(t, err)
	require.Equal(t, []events.FileDigest{
		{Path: "a.safetensors", Size: 10, SHA256: sha("0123456789")},
		{Path: "config.json", Size: 22, SHA256: sha(`{"model_type":"qwen3"}`)},
		{Path: "empty.txt", Size: 0, SHA256: sha("")},
		{Path: "tokenizer/vocab.txt", Size: 4, SHA256: sha("a\nb\n")},
	}, files)
	got, err := os.ReadFile(filepath.Join(dir, "tokenizer", "vocab.txt"))
	require.NoError(t, err)
	require.Equal(t, "a\nb\n", string(got))
}

func TestUnpackRefuses(t *testing.T) {
	t.Parallel()
	good := archive(t, file("config.json", "{}"), file("model.safetensors", "abcdefgh"))
	cases := []struct {
		name string
		data []byte
		lim  unpack.Limits
		code reason.Code
	}{
		{"not gzip", []byte("PK\x03\x04 a zip file"), unpack.Limits{}, reason.BundleCorrupt},
		{"truncated archive", good[:len(good)/2], unpack.Limits{}, reason.BundleCorrupt},
		{"entry cut short", archive(t, entry{name: "model.safetensors", typ: tar.TypeReg, body: "abc", size: 4096}), unpack.Limits{}, reason.BundleCorrupt},
		{"parent path", archive(t, file("../evil.json", "{}")), unpack.Limits{}, reason.BundlePathTraversal},
		{"absolute path", archive(t, file("/etc/cron.d/evil", "x")), unpack.Limits{}, reason.BundlePathTraversal},
		{"escape in the middle", archive(t, file("a/../../evil.json", "{}")), unpack.Limits{}, reason.BundlePathTraversal},
		{"backslash", archive(t, file(`..\evil.json`, "{}")), unpack.Limits{}, reason.BundlePathTraversal},
		{"hidden file", archive(t, file(".env", "SECRET=1")), unpack.Limits{}, reason.BundleBadName},
		{"odd characters", archive(t, file("con fig.json", "{}")), unpack.Limits{}, reason.BundleBadName},
		{"too deep", archive(t, file("a/b/c/d/e.json", "{}")), unpack.Limits{}, reason.BundleBadName},
		{"symlink", archive(t, entry{name: "model.safetensors", typ: tar.TypeSymlink, link: "/etc/shadow"}), unpack.Limits{}, reason.BundleBadEntry},
		{"hard link", archive(t, file("a.json", "{}"), entry{name: "b.json", typ: tar.TypeLink, link: "a.json"}), unpack.Limits{}, reason.BundleBadEntry},
		{"device", archive(t, entry{name: "null.json", typ: tar.TypeChar}), unpack.Limits{}, reason.BundleBadEntry},
		{"duplicate", archive(t, file("config.json", "{}"), file("config.json", `{"x":1}`)), unpack.Limits{}, reason.BundleDuplicateFile},
		{"duplicate through ./", archive(t, file("config.json", "{}"), file("./config.json", `{"x":1}`)), unpack.Limits{}, reason.BundleDuplicateFile},
		{"hidden file after ./", archive(t, entry{name: "./", typ: tar.TypeDir}, file("./.env", "SECRET=1")), unpack.Limits{}, reason.BundleBadName},
		{"parent path after ./", archive(t, file("./../evil.json", "{}")), unpack.Limits{}, reason.BundlePathTraversal},
		{"./ inside a path", archive(t, file("a/./config.json", "{}")), unpack.Limits{}, reason.BundleBadName},
		{"a file named .", archive(t, file(".", "x")), unpack.Limits{}, reason.BundlePathTraversal},
		{"too many files", good, unpack.Limits{MaxFiles: 1}, reason.BundleTooManyFiles},
		{"file too large", good, unpack.Limits{MaxFileBytes: 4}, reason.BundleFileTooLarge},
		{"bundle too large", good, unpack.Limits{MaxBytes: 9}, reason.BundleTooLarge},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			_, err := unpack.Unpack(bytes.NewReader(tc.data), dir, tc.lim)
			require.Error(t, err)
			e := unpack.AsError(err)
			require.NotNil(t, e, "a refusal, not an internal error: %v", err)
			require.Equal(t, tc.code, e.Code, e.Message)
			require.NotEmpty(t, e.Message)
			_, err = os.Stat(filepath.Join(filepath.Dir(dir), "evil.json"))
			require.True(t, os.IsNotExist(err), "nothing was written outside the folder")
		})
	}
}

func TestCheckName(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"config.json", "model-00001-of-00002.safetensors", "tokenizer/vocab.txt", "a+b_c-d.json"} {
		require.NoError(t, unpack.CheckName(ok, 4), ok)
	}
	for _, bad := range []string{"", "..", "../x", "./../x", "x/..", "/x", "x\x00y", ".x", "x/.git/config", "a b"} {
		require.Error(t, unpack.CheckName(bad, 4), "%q", bad)
	}
}

// TestUnpackTarOfDot unpacks what `tar -C DIR -czf bundle.tgz .` writes
// (GNU tar names every entry "./x" and adds the folder as "./"): the same
// files, names and digests as the folder holds.
func TestUnpackTarOfDot(t *testing.T) {
	t.Parallel()
	tarBin, err := exec.LookPath("tar")
	if err != nil {
		t.Skip("no tar on this machine")
	}
	src := t.TempDir()
	want := map[string]string{
		"submission.json":     `{"task_id":"qwen3-tiny"}`,
		"config.json":         `{"model_type":"qwen3"}`,
		"model.safetensors":   "0123456789",
		"tokenizer/vocab.txt": "a\nb\n",
	}
	for name, body := range want {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(src, name)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(src, name), []byte(body), 0o644))
	}
	tgz := filepath.Join(t.TempDir(), "bundle.tgz")
	out, err := exec.Command(tarBin, "-C", src, "-czf", tgz, ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	list, err := exec.Command(tarBin, "-tzf", tgz).Output()
	require.NoError(t, err)
	require.Contains(t, string(list), "./config.json", "the archive names its entries ./x, as the README's command makes it")

	f, err := os.Open(tgz)
	require.NoError(t, err)
	defer f.Close()
	dir := t.TempDir()
	files, err := unpack.Unpack(f, dir, unpack.Limits{})
	require.NoError(t, err)
	got := map[string]string{}
	for _, fd := range files {
		got[fd.Path] = fd.SHA256
		require.Equal(t, int64(len(want[fd.Path])), fd.Size, fd.Path)
		body, err := os.ReadFile(filepath.Join(dir, fd.Path))
		require.NoError(t, err)
		require.Equal(t, want[fd.Path], string(body))
	}
	wantSums := map[string]string{}
	for name, body := range want {
		wantSums[name] = sha(body)
	}
	require.Equal(t, wantSums, got)
}
