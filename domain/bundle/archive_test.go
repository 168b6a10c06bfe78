package bundle

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events/reason"
)

const goodRef = `{"repository":"https://huggingface.co/org/model","revision":"0123456789abcdef0123456789abcdef01234567",
 "files":[{"path":"config.json","size":100,"sha256":"` + "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" + `"},
          {"path":"model.safetensors","size":4000,"sha256":"` + "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb" + `"}]}`

// entry is one entry of a hand-made archive.
type entry struct {
	name string
	body string
	typ  byte
}

// tarGz writes entries as a gzip'd tar, as a client other than arena
// submit might.
func tarGz(t *testing.T, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		hdr := &tar.Header{Name: e.name, Typeflag: typ, Mode: 0o644, Size: int64(len(e.body))}
		if typ != tar.TypeReg {
			hdr.Size = 0
			hdr.Linkname = "elsewhere"
		}
		require.NoError(t, tw.WriteHeader(hdr))
		if typ == tar.TypeReg {
			_, err := tw.Write([]byte(e.body))
			require.NoError(t, err)
		}
	}
	require.NoError(t, tw.Close())
	require.NoError(t, zw.Close())
	return buf.Bytes()
}

// TestInspectPacked: what Pack writes, Inspect reads back: the
// declaration, checkpoint.json, and Pack's own file count and bytes.
func TestInspectPacked(t *testing.T) {
	for name, files := range map[string]map[string]string{
		"checkpoint in the bundle": {"submission.json": goodDecl, "config.json": `{"model_type":"qwen3"}`, "model.safetensors": "xxxxxxxx", "tok/tokenizer.json": "{}"},
		"by reference":             {"submission.json": goodDecl, "checkpoint.json": goodRef},
	} {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			sum, err := Pack(writeBundle(t, files), &buf)
			require.NoError(t, err)
			in, err := Inspect(&buf, 1<<20)
			require.NoError(t, err)
			require.Equal(t, "team-a", in.Declaration.Participant)
			require.Equal(t, "dev", in.Declaration.Split)
			require.Equal(t, sum.Files, in.Files)
			require.Equal(t, sum.Bytes, in.Bytes)
			if _, ok := files[CheckpointFile]; ok {
				require.NotNil(t, in.Reference)
				require.Equal(t, "https://huggingface.co/org/model", in.Reference.Repository)
				require.Len(t, in.Reference.Files, 2)
			} else {
				require.Nil(t, in.Reference)
			}
		})
	}
}

func TestInspectRefuses(t *testing.T) {
	archive := tarGz(t, entry{name: "submission.json", body: goodDecl}, entry{name: "model.safetensors", body: strings.Repeat("x", 4096)})
	bomb := tarGz(t, entry{name: "zeros.safetensors", body: strings.Repeat("\x00", 8<<20)}, entry{name: "submission.json", body: goodDecl})
	tests := []struct {
		name string
		data []byte
		code reason.Code
		text string
	}{
		{"not gzip", []byte("PK\x03\x04 a zip file"), reason.BundleCorrupt, "not a gzip'd tar archive"},
		{"truncated", archive[:len(archive)/2], reason.BundleCorrupt, "truncated or damaged"},
		{"no declaration", tarGz(t, entry{name: "config.json", body: "{}"}), reason.BundleNoDeclaration, "has no submission.json"},
		{"declaration in a folder only", tarGz(t, entry{name: "sub/submission.json", body: goodDecl}), reason.BundleNoDeclaration, "has no submission.json"},
		{"declaration twice", tarGz(t, entry{name: "submission.json", body: goodDecl}, entry{name: "./submission.json", body: strings.Replace(goodDecl, "team-a", "team-b", 1)}),
			reason.BundleDuplicateFile, "submission.json appears twice"},
		{"bad declaration", tarGz(t, entry{name: "submission.json", body: `{"task_id":"t"}`}), reason.BundleBadDeclaration, "split"},
		{"bad reference", tarGz(t, entry{name: "submission.json", body: goodDecl}, entry{name: "checkpoint.json", body: `{"repository":"https://huggingface.co/o/m","revision":"main","files":[]}`}), reason.BundleBadReference, "checkpoint.json"},
		{"reference URL not https", tarGz(t, entry{name: "submission.json", body: goodDecl}, entry{name: "checkpoint.json", body: `{"repository":"ftp://x"}`}), "reference_url_invalid", "must be https"},
		{"a gzip bomb before the declaration", bomb, reason.BundleCompressionRatio, "unpacks to more than 1.0 MiB before its end"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Inspect(bytes.NewReader(tt.data), 1<<20)
			var be *Error
			require.True(t, errors.As(err, &be), "%v", err)
			require.Equal(t, tt.code, be.Code, be.Message)
			require.Contains(t, be.Message, tt.text)
		})
	}
	// The bomb is small on the wire: the cap, not the upload limit, stops it.
	require.Less(t, len(bomb), 64<<10)
	// Within a larger cap the same archive is read.
	in, err := Inspect(bytes.NewReader(bomb), 16<<20)
	require.NoError(t, err)
	require.Equal(t, 2, in.Files)
}

func TestInspectCountsOnlyFiles(t *testing.T) {
	in, err := Inspect(bytes.NewReader(tarGz(t,
		entry{name: "submission.json", body: goodDecl},
		entry{name: "link", typ: tar.TypeSymlink},
		entry{name: "config.json", body: "{}"},
	)), 1<<20)
	require.NoError(t, err, "links are the build's to refuse")
	require.Equal(t, 2, in.Files)
	require.Equal(t, int64(len(goodDecl)+2), in.Bytes)
}
